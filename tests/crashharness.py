"""Crash harness (issue 6): kill -9 the log at random moments under concurrent
load, restart, and prove nothing acknowledged was lost or rewritten.

Each cycle restarts the server; in some cycles it is killed with SIGKILL at a
random time, in others it kills itself at a chosen point inside a batch
(after the hash files are written, after signing, just before or just after
COMMIT) via OAP_TLOG_CRASH_POINTS. At the end a clean server is started and:
every acknowledged entry is at its acknowledged index with its bytes; no two
checkpoints seen (in responses or from /checkpoint) share a size with
different roots; every one of them is consistent with the final checkpoint;
the final root equals the root recomputed from the served tiles.

Run: `python -m tests.crashharness --cycles 50` (make crash); the test suite
runs 5 cycles.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from tlog.checkpoint import parse_checkpoint
from tlog.client import LogClient
from tlog.ed25519 import generate_seed
from tlog.entries import canonical_entry, receipt_entry
from tlog.hashing import leaf_hash
from tlog.note import parse_note
from tlog.tiles import TILE_WIDTH, entries_path
from tlog.verifier import TrustPolicy
from tlog.verify import verify_consistency

BIN = Path(sys.executable).parent
CRASH_POINTS = ["after_hash_append", "after_sign", "before_commit", "after_commit"]


@dataclass
class Observed:
    acked: dict[int, int] = field(default_factory=dict)  # entry number -> index
    checkpoints: dict[int, bytes] = field(default_factory=dict)  # size -> root
    forks: list[str] = field(default_factory=list)

    def saw(self, note: str) -> None:
        cp = parse_checkpoint(parse_note(note).text)
        old = self.checkpoints.setdefault(cp.size, cp.root)
        if old != cp.root:
            self.forks.append(f"size {cp.size}: two roots")


def start_log(data: Path, env_extra: dict[str, str]) -> tuple[subprocess.Popen, str, str]:
    env = {**os.environ, **env_extra}
    proc = subprocess.Popen([str(BIN / "oap-log"), "serve", "--data", str(data), "--port", "0",
                             "--batch-interval-ms", "5", "--rate-limit-write", "0", "--rate-limit-read", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    url = vkey = ""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("log exited during start")
        if m := re.match(r"verifier key: (\S+)", line):
            vkey = m.group(1)
        if m := re.match(r"url:\s+(\S+)", line):
            url = m.group(1)
        if line.startswith("data:"):
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # drain
            return proc, url, vkey
    proc.kill()
    raise RuntimeError("log did not start")


SEED = generate_seed()


def entry(n: int) -> dict:
    return receipt_entry(leaf_hash(b"crash" + n.to_bytes(8, "big")), SEED)


async def load(url: str, obs: Observed, counter: list[int], stop: asyncio.Event, workers: int = 16) -> None:
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as s:

        async def single():
            while not stop.is_set():
                n = counter[0]
                counter[0] += 1
                try:
                    async with s.post(url + "/v1/entries", json=entry(n)) as r:
                        if r.status == 200:
                            body = await r.json()
                            obs.acked[n] = body["index"]
                            obs.saw(body["checkpoint"])
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                    await asyncio.sleep(0.01)

        async def batch():
            while not stop.is_set():
                ns = list(range(counter[0], counter[0] + 20))
                counter[0] += 20
                try:
                    async with s.post(url + "/v1/entries:batch", json={"entries": [entry(n) for n in ns]}) as r:
                        if r.status == 200:
                            body = await r.json()
                            for n, res in zip(ns, body["results"]):
                                obs.acked[n] = res["index"]
                            obs.saw(body["checkpoint"])
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                    await asyncio.sleep(0.01)

        async def poll():
            while not stop.is_set():
                try:
                    async with s.get(url + "/checkpoint") as r:
                        if r.status == 200:
                            obs.saw(await r.text())
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                    pass
                await asyncio.sleep(0.02)

        await asyncio.gather(*(single() for _ in range(workers)), batch(), batch(), poll())


async def fetch_entries(url: str, size: int) -> list[bytes]:
    out: list[bytes] = []
    async with aiohttp.ClientSession() as s:
        for n in range((size + TILE_WIDTH - 1) // TILE_WIDTH):
            async with s.get(f"{url}/{entries_path(n, min(TILE_WIDTH, size - n * TILE_WIDTH))}") as r:
                raw = await r.read()
            pos = 0
            while pos < len(raw):
                k = int.from_bytes(raw[pos:pos + 2], "big")
                out.append(raw[pos + 2:pos + 2 + k])
                pos += 2 + k
    return out


async def run(cycles: int, workdir: Path, seed: int = 0, progress: bool = False) -> dict:
    rng = random.Random(seed)
    data = workdir / "log"
    obs = Observed()
    counter = [0]
    modes: list[str] = []
    t0 = time.monotonic()
    for cycle in range(cycles):
        mode = rng.choice(["sigkill"] * 2 + CRASH_POINTS)
        env = {} if mode == "sigkill" else {"OAP_TLOG_CRASH_POINTS": f"{mode}:0.05"}
        proc, url, vkey = start_log(data, env)
        stop = asyncio.Event()
        task = asyncio.create_task(load(url, obs, counter, stop))
        limit = time.monotonic() + rng.uniform(0.2, 1.5)
        while time.monotonic() < limit and proc.poll() is None:
            await asyncio.sleep(0.01)
        died_by_itself = proc.poll() is not None
        if not died_by_itself:
            proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        stop.set()
        await task
        modes.append(mode if died_by_itself else "sigkill")
        if progress:
            print(f"cycle {cycle + 1}/{cycles}: {modes[-1]}, {len(obs.acked)} acknowledged so far", flush=True)

    proc, url, vkey = start_log(data, {})
    try:
        policy = TrustPolicy.for_log(vkey)
        async with LogClient(url) as client:
            final = policy.verify_checkpoint(await client.checkpoint()).checkpoint
            stored = await fetch_entries(url, final.size)
            lost = [n for n, idx in obs.acked.items() if idx >= final.size or stored[idx] != canonical_entry(entry(n))]
            inconsistent = []
            for size, root in sorted(obs.checkpoints.items()):
                if size > final.size:
                    inconsistent.append(size)
                    continue
                try:
                    verify_consistency(size, final.size, root, final.root, await client.consistency(size, final.size))
                except Exception:
                    inconsistent.append(size)
            tiles_ok = await client.root_from_tiles(final.size) == final.root
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    return {
        "cycles": cycles, "modes": {m: modes.count(m) for m in sorted(set(modes))},
        "acknowledged": len(obs.acked), "final_size": final.size, "checkpoints_seen": len(obs.checkpoints),
        "lost_or_moved": lost, "forks": obs.forks, "inconsistent_checkpoints": inconsistent,
        "tiles_match_root": tiles_ok, "seconds": round(time.monotonic() - t0, 1),
    }


def ok(report: dict) -> bool:
    return (not report["lost_or_moved"] and not report["forks"] and not report["inconsistent_checkpoints"]
            and report["tiles_match_root"] and report["acknowledged"] > 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        report = asyncio.run(run(args.cycles, Path(d), args.seed, progress=True))
    report["seed"] = args.seed
    print(json.dumps(report, indent=2))
    sys.exit(0 if ok(report) else 1)


if __name__ == "__main__":
    main()
