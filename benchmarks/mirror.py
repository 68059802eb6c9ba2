"""Mirror benchmarks (C2SP tlog-mirror): `oap-mirror serve` ingesting entries, and its memory during a
catch-up by `oap-mirror follow` (benchmarks/run.py runs them; or run this file).

- mirror_ingest: entries/s as a log pushes them: for each request's worth of entries (32
  packages, the request size the spec asks clients to keep to), POST /add-checkpoint of the
  checkpoint that ends there, then POST /add-entries of its entries, answered 200 with the
  mirror's cosignature. Each package's subtree consistency proof verified, entries stored, a
  fsync and a cosigned, persisted checkpoint before each add-entries answer. Bodies prepared
  beforehand (gzip), so the number is the mirror's. One client.
- mirror_ingest_bulk: the same entries under one checkpoint of the full size (a follower
  catching up): one add-checkpoint, then every add-entries request answered 202 (stored and
  fsynced, no cosignature) until the last, which completes the checkpoint and is answered 200
  with the cosignature.
- mirror_catchup_memory: peak RSS of the mirror process while `oap-mirror follow` copies a
  static tlog-tiles log of 1,000,000 entries into it (a plain static file server on
  127.0.0.1 serves the log's tiles and bundles).
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402
from common import Result, meta  # noqa: E402

from tlog.formats.mirror import add_checkpoint_body  # noqa: E402
from tlog.merkle.tree import TreeView  # noqa: E402

from tests.support.staticlog import StaticLog, entries_for, serve_directory  # noqa: E402

BIN = Path(sys.executable).parent
ORIGIN = "bench.oap.localhost/mirrored-log"
ENTRY_BYTES = 200  # about an OAP receipt entry (hash, did:key signer, signature) in deterministic CBOR


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class MirrorProcess:
    def __init__(self, data: Path, vkey: str) -> None:
        data.mkdir(parents=True, exist_ok=True)
        cfg = data / "mirror.toml"
        cfg.write_text(f'[mirror]\nname = "bench-mirror.example"\nport = 0\nrate_limit = 0\nupload_timeout = 3600\n\n'
                       f'[[mirror.logs]]\norigin = "{ORIGIN}"\nvkey = "{vkey}"\n')
        self.args = [str(BIN / "oap-mirror"), "serve", "--config", str(cfg), "--data", str(data)]
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def __enter__(self) -> MirrorProcess:
        env = {**os.environ, "OAP_QUIET_NATIVE": "1"}
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("url:"):
                self.url = line.split()[1]
            if line.startswith("data:"):
                threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()
                return self
        raise RuntimeError("the mirror did not start")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(60)


def _rss_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident set of a process, MB (VmRSS, VmHWM)."""
    cur = peak = 0.0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                cur = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    return cur, peak


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load() -> dict:
    one, five, _ = os.getloadavg()
    return {"loadavg_1m": round(one, 2), "loadavg_5m": round(five, 2), "nproc": os.cpu_count()}


async def _post(session, url: str, body: bytes, ctype: str, encoding: str | None = None) -> tuple[int, bytes]:
    headers = {"Content-Type": ctype}
    if encoding:
        headers["Content-Encoding"] = encoding
    async with session.post(url, data=body, headers=headers) as r:
        return r.status, await r.read()


PACKAGES_PER_REQUEST = 32  # 8,192 entries: the request size tlog-mirror asks clients to keep to


def _push(slog: StaticLog, n: int) -> list[tuple[bytes, bytes]]:
    """A log pushing [0, n): per request's worth of entries, the add-checkpoint body of the
    checkpoint that ends there (from the previous one, with the consistency proof) and the
    add-entries body of its entries (their proofs towards that checkpoint)."""
    step = PACKAGES_PER_REQUEST * 256
    out, old = [], 0
    for size in [*range(step, n, step), n]:
        proof = TreeView(size, slog.hashes.read).consistency_proof(old) if old else []
        (body,) = slog.bodies(size, start=old, per_request=PACKAGES_PER_REQUEST)
        out.append((add_checkpoint_body(old, proof, slog.note(size)), body))
        old = size
    return out


def _ingest_run(work: Path, slog: StaticLog, requests: list[tuple[bytes | None, bytes]], n: int) -> dict:
    """A fresh mirror; each (add-checkpoint body or None, add-entries body) posted in order on
    one connection, timed; every answer checked; the mirror's checkpoint of size n at the end."""
    import aiohttp

    with MirrorProcess(work, slog.vkey) as m:
        load_before = _load()

        async def go() -> tuple[float, float, list[int], list[bytes]]:
            async with aiohttp.ClientSession() as s:
                cpu0 = _cpu_seconds(m.proc.pid)
                t0 = time.perf_counter()
                statuses, answers = [], []
                for checkpoint, entries in requests:
                    if checkpoint is not None:
                        st, body = await _post(s, m.url + "/add-checkpoint", checkpoint, "text/plain")
                        assert st == 200, (st, body)
                    st, body = await _post(s, m.url + "/add-entries", entries, "application/octet-stream", "gzip")
                    statuses.append(st)
                    answers.append(body)
                return time.perf_counter() - t0, _cpu_seconds(m.proc.pid) - cpu0, statuses, answers

        secs, cpu, statuses, answers = asyncio.run(go())
        _, peak = _rss_mb(m.proc.pid)
        with __import__("urllib.request").request.urlopen(
                f"{m.url}/{hashlib.sha256(ORIGIN.encode()).hexdigest()}/checkpoint") as r:
            served = r.read().decode()
        assert served.split("\n")[1] == str(n), served
    return {"seconds": secs, "cpu": cpu, "statuses": statuses, "answers": answers, "peak": peak,
            "load_before": load_before, "load_after": _load()}


def _cosigned(answer: bytes) -> bool:
    """A 200 answer of add-entries: the mirror's cosignature lines ("— <name> <signature>")."""
    return answer.startswith("\u2014 ".encode())


def ingest(n: int, *, entry_bytes: int = ENTRY_BYTES) -> list[Result]:
    """mirror_ingest (a cosigned checkpoint per request) and mirror_ingest_bulk (one checkpoint
    for all), on the same entries, each into a fresh mirror."""
    work = Path(tempfile.mkdtemp(prefix="mirror-bench-"))
    try:
        t = time.perf_counter()
        slog = StaticLog(work / "log", entries_for(n, entry_bytes), origin=ORIGIN)
        push = _push(slog, n)
        bodies = slog.bodies(n, per_request=PACKAGES_PER_REQUEST)
        bulk = [(add_checkpoint_body(0, [], slog.note(n)), bodies[0]), *((None, b) for b in bodies[1:])]
        size_mb = sum(len(b) for _, b in push) / 1e6
        log(f"  prepared {n:,} entries in {len(push)} gzip bodies ({size_mb:.1f} MB) with a checkpoint each, "
            f"and in {len(bulk)} bodies under one checkpoint, in {time.perf_counter() - t:.1f} s")
        per = _ingest_run(work / "mirror", slog, push, n)
        one = _ingest_run(work / "mirror-bulk", slog, bulk, n)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert all(st == 200 for st in per["statuses"]), per["statuses"]
    assert all(_cosigned(a) for a in per["answers"]), per["answers"][0][:200]
    assert one["statuses"][-1] == 200 and all(st == 202 for st in one["statuses"][:-1]), one["statuses"]
    assert _cosigned(one["answers"][-1]), one["answers"][-1][:200]
    def measured(run: dict, requests: int) -> dict:
        return {"entries": n, "entry_bytes": entry_bytes, "packages_per_request": PACKAGES_PER_REQUEST,
                "requests": requests, "seconds": round(run["seconds"], 2), "mirror_cpu_seconds": round(run["cpu"], 2),
                "mirror_peak_rss_mb": round(run["peak"]), "load_before": run["load_before"],
                "load_after": run["load_after"]}

    return [
        Result("mirror_ingest", round(n / per["seconds"]), "entries/s", {
            **measured(per, len(push)), "add_checkpoint_requests": len(push),
            "cosigned_checkpoints": sum(map(_cosigned, per["answers"])),
            "what": "as a log pushes: per 32 packages of 256 entries, POST /add-checkpoint of the checkpoint that ends "
                    "there, then POST /add-entries (gzip) of its entries, one client; each package's subtree "
                    "consistency proof verified, entries stored, a fsync and the checkpoint cosigned and persisted "
                    "before each add-entries answer; both requests timed",
            "check": "every add-entries answered 200 with a cosignature; the mirror serves a checkpoint of the full "
                     "size"}, target=100_000),
        Result("mirror_ingest_bulk", round(n / one["seconds"]), "entries/s", {
            **measured(one, len(bulk)), "add_checkpoint_requests": 1,
            "answered_202": sum(st == 202 for st in one["statuses"]), "cosigned_checkpoints": 1,
            "what": "as a follower catching up: one POST /add-checkpoint of the full size, then POST /add-entries "
                    "(gzip) of 32 packages of 256 entries each, one client; each package verified and stored, a "
                    "fsync before each answer; every answer 202 (no cosignature) but the last, which completes the "
                    "checkpoint: the one cosignature of the run",
            "check": "202 for every request but the last, 200 with a cosignature for the last; the mirror serves "
                     "a checkpoint of the full size"}),
    ]


def catchup_memory(n: int, *, entry_bytes: int = ENTRY_BYTES) -> Result:
    work = Path(tempfile.mkdtemp(prefix="mirror-bench-"))
    try:
        t = time.perf_counter()
        slog = StaticLog(work / "log", entries_for(n, entry_bytes), origin=ORIGIN)
        slog.publish(n)
        shutil.rmtree(work / "log" / ".hashes")
        log(f"  wrote a static log of {n:,} entries in {time.perf_counter() - t:.1f} s")
        with serve_directory(work / "log") as log_url, MirrorProcess(work / "mirror", slog.vkey) as m:
            load_before = _load()
            samples: list[float] = []
            done = threading.Event()

            def sample() -> None:
                while not done.wait(0.2):
                    samples.append(_rss_mb(m.proc.pid)[0])

            threading.Thread(target=sample, daemon=True).start()
            t0 = time.perf_counter()
            out = subprocess.run([str(BIN / "oap-mirror"), "follow", log_url, "--mirror", m.url, "--once",
                                  "--log-key", slog.vkey], capture_output=True, text=True, timeout=3600,
                                 env={**os.environ, "OAP_QUIET_NATIVE": "1"})
            secs = time.perf_counter() - t0
            done.set()
            cur, peak = _rss_mb(m.proc.pid)
            assert out.returncode == 0 and f"cosigned size {n}" in out.stdout, out.stdout + out.stderr[-2000:]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Result("mirror_catchup_memory", round(peak), "MB", {
        "entries": n, "entry_bytes": entry_bytes, "seconds": round(secs, 1), "entries_per_s": round(n / secs),
        "rss_end_mb": round(cur), "rss_median_mb": round(float(np.median(samples))) if samples else None,
        "load_before": load_before, "load_after": _load(),
        "what": "peak RSS (VmHWM) of `oap-mirror serve` while `oap-mirror follow --once` copies a static "
                "tlog-tiles log (the standard library's file server on 127.0.0.1) into it from empty"},
        target=300, target_op="<=")


def main() -> None:
    ap = argparse.ArgumentParser(description="mirror benchmarks")
    ap.add_argument("--ingest", type=int, default=300_000)
    ap.add_argument("--catchup", type=int, default=1_000_000)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    out = {"_meta": meta(command=" ".join(["benchmarks/mirror.py", *sys.argv[1:]]))}
    if args.only in ("", "ingest"):
        for r in ingest(args.ingest):
            out[r.name] = r.to_json()
    if args.only in ("", "catchup"):
        out["mirror_catchup_memory"] = catchup_memory(args.catchup).to_json()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
