"""Mirror benchmarks (C2SP tlog-mirror): `oap-mirror serve` ingesting entries, and its memory
during a catch-up by `oap-mirror follow` (benchmarks/run.py runs both; or run this file).

- mirror_ingest: entries/s through POST /add-entries, gzip bodies of 32 packages (the
  follower's and the spec's request size) prepared beforehand, so the number is the
  mirror's: parse, authenticate each package's subtree consistency proof, store, fsync
  before each answer, cosign at the end of each request. One client, as a log pushing.
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
from common import Result, machine  # noqa: E402

from tlog.formats.mirror import add_checkpoint_body  # noqa: E402

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


def ingest(n: int, *, entry_bytes: int = ENTRY_BYTES) -> Result:
    import aiohttp

    work = Path(tempfile.mkdtemp(prefix="mirror-bench-"))
    try:
        t = time.perf_counter()
        slog = StaticLog(work / "log", entries_for(n, entry_bytes), origin=ORIGIN)
        bodies = slog.bodies(n)
        note = slog.note(n)
        log(f"  prepared {n:,} entries in {len(bodies)} gzip bodies ({sum(map(len, bodies)) / 1e6:.1f} MB) "
            f"in {time.perf_counter() - t:.1f} s")
        with MirrorProcess(work / "mirror", slog.vkey) as m:
            load_before = _load()

            async def go() -> tuple[float, float, list[int]]:
                async with aiohttp.ClientSession() as s:
                    st, body = await _post(s, m.url + "/add-checkpoint",
                                           add_checkpoint_body(0, [], note), "text/plain")
                    assert st == 200, (st, body)
                    cpu0 = _cpu_seconds(m.proc.pid)
                    t0 = time.perf_counter()
                    statuses = []
                    for b in bodies:
                        st, body = await _post(s, m.url + "/add-entries", b, "application/octet-stream", "gzip")
                        statuses.append(st)
                    return time.perf_counter() - t0, _cpu_seconds(m.proc.pid) - cpu0, statuses

            secs, cpu, statuses = asyncio.run(go())
            _, peak = _rss_mb(m.proc.pid)
            assert statuses[-1] == 200 and all(s in (200, 202) for s in statuses), statuses[:10]
            with __import__("urllib.request").request.urlopen(
                    f"{m.url}/{hashlib.sha256(ORIGIN.encode()).hexdigest()}/checkpoint") as r:
                served = r.read().decode()
            assert served.split("\n")[1] == str(n), served
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Result("mirror_ingest", round(n / secs), "entries/s", {
        "entries": n, "entry_bytes": entry_bytes, "requests": len(bodies), "packages_per_request": 32,
        "seconds": round(secs, 2), "mirror_cpu_seconds": round(cpu, 2), "mirror_peak_rss_mb": round(peak),
        "load_before": load_before, "load_after": _load(),
        "what": "POST /add-entries, gzip, 32 packages of 256 entries per request, one client: each package's "
                "subtree consistency proof verified, entries stored, a fsync before each answer, the checkpoint "
                "cosigned and persisted at the end of each request",
        "check": "every answer 200 (or 202 mid-way); the mirror serves a cosigned checkpoint of the full size"},
        target=100_000)


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
    out = {"_meta": {"machine": machine()}}
    if args.only in ("", "ingest"):
        out["mirror_ingest"] = ingest(args.ingest).to_json()
    if args.only in ("", "catchup"):
        out["mirror_catchup_memory"] = catchup_memory(args.catchup).to_json()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
