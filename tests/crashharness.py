"""Crash harness: kill -9 the log at random moments under concurrent
load, restart, and prove nothing acknowledged was lost or rewritten.

Each cycle restarts the server; in some cycles it is killed with SIGKILL at a
random time, in others it kills itself at a chosen point inside a batch
(after the entries' commit, after the hash files are written, after signing,
just before or just after the checkpoint's commit, after it is recorded but
before it is published) through tests/crashserve.py. At the end a clean server is started and:
every acknowledged entry is at its acknowledged index with its bytes; no two
checkpoints seen (in responses or from /checkpoint) share a size with
different roots; every one of them is consistent with the final checkpoint;
the final root equals the root recomputed from the served tiles.

`run_network` does the same to a whole network: a witness, a log that
pushes to it, and the registry anchored in the log, killing one of them each
cycle; it also proves that the witness never cosigned two roots for one size
or went backwards across a kill, and that every acknowledged registry record
is in a history that `oap-registry verify` checks against the log.

Run: `python -m tests.crashharness --cycles 50` (make crash: the network);
the test suite runs 5 cycles of each.
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

from tlog.client.client import LogClient
from tlog.client.verifier import TrustPolicy
from tlog.formats.checkpoint import parse_checkpoint
from tlog.formats.ed25519 import generate_seed
from tlog.formats.entries import canonical_entry, receipt_entry
from tlog.formats.hashing import leaf_hash
from tlog.formats.note import parse_note
from tlog.merkle.verify import verify_consistency
from tlog.runtime import children

from tests.support.services import fetch_entries

BIN = Path(sys.executable).parent
CRASH_POINTS = ["after_sequence", "after_hash_append", "after_sign", "before_commit", "after_commit", "after_record"]


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


class DiedDuringStart(RuntimeError):
    """The log exited before it was serving (with crash points armed: one fired during start)."""


def oap_log(crash: str | None) -> list[str]:
    """The command that runs oap-log, with crash points armed (tests/crashserve.py) or not."""
    if crash is None:
        return [str(BIN / "oap-log")]
    return [sys.executable, "-m", "tests.crashserve", crash]


ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}


def start_log(data: Path, crash: str | None = None) -> tuple[subprocess.Popen, str, str]:
    env = ENV
    proc = children.popen([*oap_log(crash), "serve", "--data", str(data), "--port", "0",
                           "--batch-interval-ms", "5", "--rate-limit-write", "0", "--rate-limit-read", "0"],
                          death_signal=signal.SIGKILL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env)
    url = vkey = ""
    seen: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            e = DiedDuringStart(f"log exited during start ({proc.wait(10)}):\n" + "".join(seen[-30:]))
            e.returncode = proc.returncode
            raise e
        seen.append(line)
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


async def load(url: str, obs: Observed, counter: list[int], stop: asyncio.Event, workers: int = 16,
               timeout_s: float = 10) -> None:
    timeout = aiohttp.ClientTimeout(total=timeout_s)
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
                except (TimeoutError, aiohttp.ClientError, OSError):
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
                except (TimeoutError, aiohttp.ClientError, OSError):
                    await asyncio.sleep(0.01)

        async def poll():
            while not stop.is_set():
                try:
                    async with s.get(url + "/checkpoint") as r:
                        if r.status == 200:
                            obs.saw(await r.text())
                except (TimeoutError, aiohttp.ClientError, OSError):
                    pass
                await asyncio.sleep(0.02)

        await asyncio.gather(*(single() for _ in range(workers)), batch(), batch(), poll())


async def run(cycles: int, workdir: Path, seed: int = 0, progress: bool = False) -> dict:
    rng = random.Random(seed)
    data = workdir / "log"
    obs = Observed()
    counter = [0]
    modes: list[str] = []
    t0 = time.monotonic()
    for cycle in range(cycles):
        mode = rng.choice(["sigkill"] * 2 + CRASH_POINTS)
        crash = None if mode == "sigkill" else f"{mode}:0.05"
        try:
            proc, url, vkey = start_log(data, crash)
        except DiedDuringStart as e:
            if crash is None or e.returncode != 137:  # a crash point exits 137: only that is a crash cycle
                raise
            # The start itself commits (a new log signs its empty tree): the crash point fired
            # there. That is a crash like any other; the next start recovers from it.
            modes.append(f"{mode} (during start)")
            if progress:
                print(f"cycle {cycle + 1}/{cycles}: {modes[-1]}, {len(obs.acked)} acknowledged so far", flush=True)
            continue
        stop = asyncio.Event()
        task = asyncio.create_task(load(url, obs, counter, stop))
        before = len(obs.acked)
        settle = time.monotonic() + 60  # the kill lands under load: after this cycle's first acknowledgement
        while len(obs.acked) == before and proc.poll() is None and time.monotonic() < settle:
            await asyncio.sleep(0.01)
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

    proc, url, vkey = start_log(data)
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
                except Exception:  # noqa: BLE001 - any failure to prove consistency is counted as an inconsistency and reported
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


# --- the scale-out log: PostgreSQL, SeaweedFS and two frontends ---------------------------------


async def run_scale(cycles: int, workdir: Path, seed: int = 0, progress: bool = False) -> dict:
    """kill -9 a frontend (the integrator or not), PostgreSQL or SeaweedFS at random, under
    write load on both frontends; then check what was acknowledged, that the database holds
    one root per size, and that the bucket verifies from anonymous reads alone."""
    import psycopg

    from tlog.cli.engines import Postgres, Seaweed
    from tlog.client.audit import audit
    from tlog.formats.keys import Signer
    from tlog.runtime.keyfiles import write_private_key, write_secret

    rng = random.Random(seed)
    workdir.chmod(0o755)  # PostgreSQL runs as its own user when this runs as root
    pg = Postgres(workdir / "pg").start()
    weed = Seaweed(workdir / "weed").start()
    weed.create_bucket("oap-log")
    key = workdir / "log.key"
    signer = Signer.generate("crash.scale/log")
    write_private_key(key, signer.to_skey())
    creds = workdir / "bucket.credentials"
    write_secret(creds, f"{weed.access_key} {weed.secret_key}")
    config = workdir / "log.toml"
    config.write_text(f'[log]\nstorage = "postgres"\npostgres_dsn = "{pg.dsn}"\n'
                      f'bucket_url = "{weed.bucket_url("oap-log")}"\nbucket_credentials_file = "{creds}"\n'
                      f'key_file = "{key}"\norigin = "{signer.name}"\nbatch_interval_ms = 5\n'
                      'rate_limit_write = 0\nrate_limit_read = 0\ncheckpoint_publish_interval = 0.1\n')
    from tests.support.services import Service

    ports = [free_port(), free_port()]

    def frontend(n: int) -> Service:
        return Service(f"log-{n}", [str(BIN / "oap-log"), "serve", "--config", str(config), "--data",
                                    str(workdir / f"frontend-{n}"), "--port", str(ports[n])], ENV).start()

    fronts = [frontend(0), frontend(1)]
    obs, counter, modes = Observed(), [0], []
    t0 = time.monotonic()
    try:
        for cycle in range(cycles):
            stop = asyncio.Event()
            tasks = [asyncio.create_task(load(f.url, obs, counter, stop, workers=4, timeout_s=3)) for f in fronts]
            await asyncio.sleep(rng.uniform(0.3, 1.2))
            mode = rng.choice(["frontend", "frontend", "integrator", "postgres", "bucket"])
            if mode in ("frontend", "integrator"):
                n = 0 if mode == "integrator" else 1  # frontend 0 usually holds the role: kill it too
                fronts[n].kill()
                await asyncio.sleep(rng.uniform(0.1, 0.5))
                fronts[n] = frontend(n)
            elif mode == "postgres":
                pg.kill()
                await asyncio.sleep(rng.uniform(0.1, 0.5))
                pg.start()
            else:
                weed.kill()
                await asyncio.sleep(rng.uniform(0.1, 0.5))
                weed.start()
            await asyncio.sleep(0.5)
            stop.set()
            await asyncio.gather(*tasks)
            modes.append(mode)
            if progress:
                print(f"cycle {cycle + 1}/{cycles}: {mode}, {len(obs.acked)} acknowledged so far "
                      f"({time.monotonic() - t0:.1f} s)", flush=True)
        # the end: everything acknowledged is in the log, and the bucket says the same. A
        # frontend that is not the integrator, and the bucket, follow the head a moment
        # later: wait (bounded) for a checkpoint that covers every acknowledged entry,
        # the same in the bucket; what is still missing then is lost.
        policy = TrustPolicy.for_log(signer.vkey)
        deadline = time.monotonic() + 60
        covers = max(obs.acked.values(), default=-1) + 1
        async with LogClient(fronts[0].url) as client:
            while True:
                final = policy.verify_checkpoint(await client.checkpoint()).checkpoint
                async with aiohttp.ClientSession() as s:
                    async with s.get(weed.bucket_url("oap-log") + "/checkpoint") as r:
                        bucket_note = await r.text()
                bucket_size = policy.verify_checkpoint(bucket_note).checkpoint.size if r.status == 200 else -1
                if (bucket_size == final.size and final.size >= covers) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            stored = await fetch_entries(fronts[0].url, final.size)
            lost = [n for n, idx in obs.acked.items() if idx >= final.size or stored[idx] != canonical_entry(entry(n))]
            inconsistent = []
            for size, root in sorted(obs.checkpoints.items()):
                try:
                    verify_consistency(size, final.size, root, final.root, await client.consistency(size, final.size))
                except Exception:  # noqa: BLE001 - any failure to prove consistency is counted as an inconsistency and reported
                    inconsistent.append(size)

        async with aiohttp.ClientSession() as s:
            async def fetch(path: str) -> bytes:
                async with s.get(weed.bucket_url("oap-log") + "/" + path) as r:
                    if r.status != 200:
                        raise RuntimeError(f"bucket {path}: HTTP {r.status}")
                    return await r.read()

            try:
                bucket = await audit(fetch, policy, entries=True, previous=(final.size, final.root))
                bucket_ok = bucket.checkpoint.checkpoint.size >= final.size
            except Exception as e:  # noqa: BLE001 - reported
                bucket_ok = False
                print(f"bucket audit failed: {e}", flush=True)
        with psycopg.connect(pg.dsn) as conn:
            db_forks = conn.execute("SELECT count(*) - count(DISTINCT size) FROM oap_checkpoints").fetchone()[0]
    finally:
        for f in fronts:
            f.kill()
        weed.stop()
        pg.stop()
    return {"cycles": cycles, "modes": {m: modes.count(m) for m in sorted(set(modes))},
            "acknowledged": len(obs.acked), "final_size": final.size, "checkpoints_seen": len(obs.checkpoints),
            "lost_or_moved": lost, "forks": obs.forks, "database_forks": db_forks,
            "inconsistent_checkpoints": inconsistent, "bucket_verified": bucket_ok,
            "seconds": round(time.monotonic() - t0, 1)}


def scale_ok(report: dict) -> bool:
    return (not report["lost_or_moved"] and not report["forks"] and not report["database_forks"]
            and not report["inconsistent_checkpoints"] and report["bucket_verified"] and report["acknowledged"] > 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--log-only", action="store_true", help="only the log (crash points inside batches)")
    ap.add_argument("--scale", action="store_true", help="the scale-out log: PostgreSQL, SeaweedFS, 2 frontends")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        if args.scale:
            report = asyncio.run(run_scale(args.cycles, Path(d), args.seed, progress=True))
            good = scale_ok(report)
        elif args.log_only:
            report = asyncio.run(run(args.cycles, Path(d), args.seed, progress=True))
            good = ok(report)
        else:
            report = asyncio.run(run_network(args.cycles, Path(d), args.seed, progress=True))
            good = network_ok(report)
    report["seed"] = args.seed
    print(json.dumps(report, indent=2))
    sys.exit(0 if good else 1)



# --- the whole network: log + witness + registry -------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def run_network(cycles: int, workdir: Path, seed: int = 0, progress: bool = False) -> dict:
    """kill -9 the log, the witness or the registry at random, under load on all three."""
    import hashlib

    from registry.client import did_of, make_revocation
    from tlog.formats.keys import cosigner_verifier, parse_vkey
    from tlog.server.service import load_or_create_key
    from tlog.server.witnessing import policy_text

    from tests.support.services import ORIGIN, Service, registry_service

    rng = random.Random(seed)
    log_dir, w_dir, r_dir = workdir / "log", workdir / "witness", workdir / "registry"
    log_vkey = load_or_create_key(log_dir, ORIGIN).vkey
    log_port, w_port = free_port(), free_port()
    log_url, w_url = f"http://127.0.0.1:{log_port}", f"http://127.0.0.1:{w_port}"
    w_dir.mkdir(parents=True)
    (w_dir / "witness.toml").write_text(
        f'[witness]\nname = "crash-witness.test"\nport = {w_port}\n\n[[witness.logs]]\norigin = "{ORIGIN}"\n'
        f'vkey = "{log_vkey}"\n')
    witness = Service("witness", [str(BIN / "oap-witness"), "serve", "--config", str(w_dir / "witness.toml"),
                                  "--data", str(w_dir), "--rate-limit", "0"]).start()
    w_vkey = witness.vkey
    w_verifier = cosigner_verifier(parse_vkey(w_vkey))
    policy_file = workdir / "witnesses.policy"
    policy_file.write_text(policy_text(log_vkey, [("w", w_vkey, w_url)], 0))

    def log_svc(crash: str | None = None) -> Service:
        return Service("log", [*oap_log(crash), "serve", "--data", str(log_dir), "--port", str(log_port),
                               "--origin", ORIGIN, "--batch-interval-ms", "5", "--witness-policy", str(policy_file),
                               "--rate-limit-write", "0", "--rate-limit-read", "0"], ENV)

    log = log_svc().start()
    reg = registry_service(r_dir, log_url, "--batch-interval-ms", "20", "--rate-limit", "0").start()
    obs = Observed()
    cosigned: dict[int, bytes] = {}  # what the witness cosigned: size -> root
    witness_forks: list[str] = []
    went_backwards: list[str] = []
    max_cosigned = [0]
    reg_acked: set[str] = set()
    counter = [0]
    modes: list[str] = []
    mon_path = f"/{hashlib.sha256(ORIGIN.encode()).hexdigest()}/checkpoint"

    def saw_cosigs(note_text: str) -> None:
        note = parse_note(note_text)
        cp = parse_checkpoint(note.text)
        for s in note.signatures:
            if s.name == w_verifier.name and s.key_id == w_verifier.key_id:
                w_verifier.verify(note.text.encode(), s.blob)
                if cosigned.setdefault(cp.size, cp.root) != cp.root:
                    witness_forks.append(f"size {cp.size}")
                max_cosigned[0] = max(max_cosigned[0], cp.size)

    async def registry_load(url: str, stop: asyncio.Event) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as s:
            async def one():
                while not stop.is_set():
                    k = generate_seed()
                    rec = make_revocation(k, kind="key", subject=did_of(k), reason="key_compromise")
                    try:
                        async with s.post(url + "/v1/records", json=rec) as r:
                            if r.status == 200:
                                reg_acked.add(rec["id"])
                    except (TimeoutError, aiohttp.ClientError, OSError):
                        await asyncio.sleep(0.02)
            await asyncio.gather(*(one() for _ in range(3)))

    async def witness_poll(stop: asyncio.Event) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s:
            while not stop.is_set():
                try:
                    async with s.get(w_url + mon_path) as r:
                        if r.status == 200:
                            saw_cosigs(await r.text())
                except (TimeoutError, aiohttp.ClientError, OSError):
                    pass
                await asyncio.sleep(0.05)

    t0 = time.monotonic()
    try:
        for cycle in range(cycles):
            victim = rng.choice(["log", "log", "witness", "registry"])
            mode = "sigkill"
            if victim == "log" and rng.random() < 0.5:
                mode = rng.choice(CRASH_POINTS)
                log.kill()
                log = log_svc(f"{mode}:0.05")
                try:
                    log.start()
                except RuntimeError:
                    if log.proc.wait(10) != 137:  # not tlog.storage.embedded.crash_point firing during start
                        raise
                    log = log_svc().start()  # it did: that was the crash; start again without
            stop = asyncio.Event()
            tasks = [asyncio.create_task(load(log.url, obs, counter, stop, workers=8)),
                     asyncio.create_task(registry_load(reg.url, stop)),
                     asyncio.create_task(witness_poll(stop))]
            target = {"log": log, "witness": witness, "registry": reg}[victim]
            before = (len(obs.acked), len(reg_acked))
            settle = time.monotonic() + 60  # the kill lands under load: after this cycle's first acknowledgements
            while (len(obs.acked) == before[0] or len(reg_acked) == before[1]) and target.alive() \
                    and time.monotonic() < settle:
                await asyncio.sleep(0.01)
            limit = time.monotonic() + rng.uniform(0.3, 1.2)
            while time.monotonic() < limit and target.alive():
                await asyncio.sleep(0.01)
            died_by_itself = not target.alive()
            target.kill()
            stop.set()
            await asyncio.gather(*tasks)
            if victim == "witness":
                before = max_cosigned[0]
                witness.start()
                async with aiohttp.ClientSession() as s:
                    async with s.get(w_url + mon_path) as r:
                        after = parse_checkpoint(parse_note(await r.text()).text).size if r.status == 200 else 0
                if after < before:
                    went_backwards.append(f"cycle {cycle}: cosigned {before} before the kill, state {after} after")
            elif victim == "log":
                log = log_svc().start()
            else:
                reg.start()
            modes.append(f"{victim}:{mode if died_by_itself or mode == 'sigkill' else 'sigkill'}")
            if progress:
                print(f"cycle {cycle + 1}/{cycles}: {modes[-1]}, log {len(obs.acked)} acked, "
                      f"registry {len(reg_acked)} acked, witness cosigned up to {max_cosigned[0]}", flush=True)
        # --- final checks on clean processes ---------------------------------------------------
        log.kill()
        log = log_svc().start()
        policy = TrustPolicy.for_log(log_vkey)
        async with LogClient(log.url) as client:
            final_note = await client.checkpoint()
            saw_cosigs(final_note)
            final = policy.verify_checkpoint(final_note).checkpoint
            stored = await fetch_entries(log.url, final.size)
            lost = [n for n, idx in obs.acked.items() if idx >= final.size or stored[idx] != canonical_entry(entry(n))]
            inconsistent = []
            for size, root in sorted({**obs.checkpoints, **cosigned}.items()):
                try:
                    verify_consistency(size, final.size, root, final.root, await client.consistency(size, final.size))
                except Exception:  # noqa: BLE001 - any failure to prove consistency is counted as an inconsistency and reported
                    inconsistent.append(size)
            tiles_ok = await client.root_from_tiles(final.size) == final.root
        reg.kill()
        reg.start()
        missing_records = []
        async with aiohttp.ClientSession() as s:
            for rid in sorted(reg_acked):
                async with s.get(reg.url + "/v1/records/" + rid) as r:
                    if r.status != 200:
                        missing_records.append(rid)
        clone = workdir / "clone"
        git = subprocess.run(["git", "clone", "-q", reg.url + "/registry.git", str(clone)], capture_output=True,
                             text=True, timeout=120)
        verify = subprocess.run([str(BIN / "oap-registry"), "verify", str(clone), "--url", reg.url,
                                 "--log-vkey", log_vkey], capture_output=True, text=True, timeout=300)
        registry_ok = git.returncode == 0 and verify.returncode == 0
    finally:
        for svc in (reg, log, witness):
            svc.kill()
    return {
        "cycles": cycles, "victims": {m: modes.count(m) for m in sorted(set(modes))},
        "log_acknowledged": len(obs.acked), "final_size": final.size, "checkpoints_seen": len(obs.checkpoints),
        "lost_or_moved": lost, "forks": obs.forks, "inconsistent_checkpoints": inconsistent,
        "tiles_match_root": tiles_ok, "witness_cosigned_sizes": len(cosigned), "witness_forks": witness_forks,
        "witness_went_backwards": went_backwards, "registry_acknowledged": len(reg_acked),
        "registry_missing": missing_records, "registry_history_verified": registry_ok,
        "registry_verify_output": (verify.stdout + verify.stderr)[-500:] if not registry_ok else "",
        "seconds": round(time.monotonic() - t0, 1),
    }


def network_ok(r: dict) -> bool:
    return (not r["lost_or_moved"] and not r["forks"] and not r["inconsistent_checkpoints"] and r["tiles_match_root"]
            and not r["witness_forks"] and not r["witness_went_backwards"] and not r["registry_missing"]
            and r["registry_history_verified"] and r["log_acknowledged"] > 0 and r["registry_acknowledged"] > 0
            and r["witness_cosigned_sizes"] > 0)


if __name__ == "__main__":
    main()
