"""Monitor benchmark (`oap-monitor`): catching up on a log it has never seen (benchmarks/run.py
runs it; or run this file).

- monitor_catchup: entries/s of `oap-monitor run --once` from an empty state directory over a
  static tlog-tiles log of N entries (10,000,000 in `make bench`), served by a static file server
  on 127.0.0.1 in its own process: Go's net/http FileServer (benchmarks/staticserve.go, built
  with the Go toolchain `make tools` unpacks), else the standard library's threaded one. What the pass does, all of
  it timed: the checkpoint verified against the policy, the log's tiles checked against its root,
  every entry bundle and every full hash tile (each level) read, every leaf hash recomputed and
  compared with the tiles, every entry parsed for who signed it and whom it names
  (`tlog.formats.parties`), the entries proven a prefix of the checkpoint's tree at every commit
  of the state (each 65,536 entries, with a consistency proof), the state fsynced each time, and
  the alerts of the entries a watched key signed (each with a .tlog-proof built from the tiles and
  verified) written and delivered to a file. The figure is N / the wall time of the process, from
  its start to its exit; the peak resident set is its VmHWM (getrusage of the finished child).

The log is built once into benchmarks/.cache/ (ignored by git) and reused: deterministic CBOR OAP
entries as the log stores them, seven commitments (Privileged Mode, the bulk type, 101 bytes) for
each receipt entry (a did:key signer, 250 bytes), the receipts drawn from 4,096 distinct
signed receipt entries of 8 signers, and 16 receipts of a ninth key (the watched one).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402
from common import Result, machine  # noqa: E402

from tlog.formats.checkpoint import Checkpoint  # noqa: E402
from tlog.formats.entries import canonical_entry, commitment_entry, receipt_entry  # noqa: E402
from tlog.formats.hashing import leaf_hashes, node_hashes  # noqa: E402
from tlog.formats.keys import Signer  # noqa: E402
from tlog.formats.note import sign_note  # noqa: E402
from tlog.formats.tiles import TILE_WIDTH, entries_path, tile_path  # noqa: E402
from tlog.merkle.tree import root_of_leaves  # noqa: E402

BIN = Path(sys.executable).parent
CACHE = HERE / ".cache"
ORIGIN = "bench.oap.localhost/monitored-log"
SEED = bytes(range(40, 72))
FORMAT = "v1"  # the cached log's layout: bump when the entries change
WATCHED = 16  # receipts of the watched key, spread over the log


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _seed(i: int) -> bytes:
    return hashlib.sha256(b"signer %d" % i).digest()


def watched_did() -> str:
    return receipt_entry(bytes(32), _seed(99))["signer"]


def build(directory: Path, n: int) -> dict:
    """Write the static log of `n` entries (tiles, bundles, checkpoint) unless it is cached."""
    done = directory / "built.json"
    if done.exists():
        info = json.loads(done.read_text())
        if info.get("format") == FORMAT and info["entries"] == n:
            return info | {"cached": True}
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    t0 = time.perf_counter()
    rng = np.random.default_rng(11)
    receipts = [canonical_entry(receipt_entry(rng.bytes(32), _seed(i % 8))) for i in range(4096)]
    watched = [canonical_entry(receipt_entry(rng.bytes(32), _seed(99))) for _ in range(WATCHED)]
    watched_at = set(np.linspace(8, n - 8, WATCHED, dtype=np.int64) // 8 * 8)  # receipt slots
    prefix = canonical_entry(commitment_entry(bytes(32)))[:-64]
    lut = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    leaves = np.empty((n, 32), dtype=np.uint8)
    w = iter(watched)
    for start in range(0, n, 1 << 16):
        stop = min(n, start + (1 << 16))
        raw = rng.integers(0, 256, (stop - start, 32), dtype=np.uint8)
        hexes = np.empty((stop - start, 64), dtype=np.uint8)
        hexes[:, 0::2], hexes[:, 1::2] = lut[raw >> 4], lut[raw & 15]
        block = hexes.tobytes()
        entries = []
        for k in range(stop - start):
            i = start + k
            if i % 8 == 0:
                entries.append(next(w) if i in watched_at else receipts[(i // 8) % 4096])
            else:
                entries.append(prefix + block[64 * k:64 * k + 64])
        leaves[start:stop] = leaf_hashes(entries)
        for b in range(start // TILE_WIDTH, (stop + TILE_WIDTH - 1) // TILE_WIDTH):
            lo, hi = b * TILE_WIDTH, min(n, (b + 1) * TILE_WIDTH)
            _write(directory / entries_path(b, hi - lo),
                   b"".join(len(e).to_bytes(2, "big") + e for e in entries[lo - start:hi - start]))
    # the hash tiles: level L holds the complete nodes of binary level 8L
    level, tl = leaves, 0
    while len(level):
        for t in range((len(level) + TILE_WIDTH - 1) // TILE_WIDTH):
            chunk = level[t * TILE_WIDTH:(t + 1) * TILE_WIDTH]
            _write(directory / tile_path(tl, t, len(chunk)), chunk.tobytes())
        for _ in range(8):
            pairs = len(level) // 2
            level = node_hashes(level[0:2 * pairs:2], level[1:2 * pairs:2]) if pairs else level[:0]
        tl += 1
    root = root_of_leaves(leaves)
    note = sign_note(Checkpoint(ORIGIN, n, root).to_text(), [Signer(ORIGIN, SEED)])
    (directory / "checkpoint").write_text(note)
    info = {"format": FORMAT, "entries": n, "receipts": n // 8, "watched": WATCHED,
            "bytes": sum(f.stat().st_size for f in directory.rglob("*") if f.is_file()),
            "build_seconds": round(time.perf_counter() - t0, 1)}
    done.write_text(json.dumps(info))
    return info | {"cached": False}


def _write(path: Path, data: bytes) -> None:
    try:
        path.write_bytes(data)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def go_server(work: Path) -> list[str] | None:
    """benchmarks/staticserve.go built with the Go toolchain `make tools` unpacks into .venv/go,
    or None where there is none (the standard library's server is used then)."""
    goroot = Path(sys.executable).parent.parent / "go" / "usr/lib/go-1.19"
    if not (goroot / "bin/go").exists():
        return None
    src = work / "gopath" / "src" / "staticserve"
    src.mkdir(parents=True)
    shutil.copy(HERE / "staticserve.go", src / "main.go")
    env = {**os.environ, "GOROOT": str(goroot), "GOPATH": str(work / "gopath"), "GO111MODULE": "off",
           "GOCACHE": str(work / "gocache"), "GOFLAGS": ""}
    out = subprocess.run([str(goroot / "bin/go"), "build", "-o", str(work / "staticserve"), "."], cwd=src, env=env,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        log(f"  cannot build benchmarks/staticserve.go ({out.stderr.strip()[:200]}): the Python server is used")
        return None
    return [str(work / "staticserve")]


SERVER = """
import sys
from functools import partial
from tests.support.staticlog import StaticServer, _Files
httpd = StaticServer(("127.0.0.1", 0), partial(_Files, directory=sys.argv[1]))
print(httpd.server_address[1], flush=True)
httpd.serve_forever()
"""


def catchup(n: int) -> Result:
    CACHE.mkdir(exist_ok=True)
    directory = CACHE / f"monitor-log-{n}"
    t = time.perf_counter()
    info = build(directory, n)
    if not info["cached"]:
        log(f"  wrote a static log of {n:,} entries ({info['bytes'] / 1e9:.2f} GB) in {time.perf_counter() - t:.0f} s")
    work = Path(tempfile.mkdtemp(prefix="monitor-bench-", dir=CACHE))
    go = go_server(work)
    server_cmd = [*go, str(directory)] if go else [sys.executable, "-c", SERVER, str(directory)]
    server = subprocess.Popen(server_cmd, stdout=subprocess.PIPE, text=True, cwd=str(HERE.parent))
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        vkey = Signer(ORIGIN, SEED).vkey
        (work / "log.policy").write_text(f"log {vkey}\nquorum none\n")
        (work / "monitor.toml").write_text(
            f'state_dir = "state"\nmetrics = ""\ntimeout = 60\n\n[[logs]]\nurl = "http://127.0.0.1:{port}"\n'
            f'policy = "log.policy"\n\n[[watch]]\nsigner = "{watched_did()}"\n\n[[alerts]]\nfile = "alerts.jsonl"\n')
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        proc = subprocess.run([str(BIN / "oap-monitor"), "run", "--config", str(work / "monitor.toml"), "--once"],
                              capture_output=True, text=True, timeout=3600, env={**os.environ, "OAP_QUIET_NATIVE": "1"})
        secs = time.perf_counter() - t0
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1 and f"verified size {n}, {n} entries read" in out, out[-3000:]
        alerts = [json.loads(x) for x in (work / "alerts.jsonl").read_text().splitlines()]
        assert len(alerts) == WATCHED and {a["kind"] for a in alerts} == {"watched_entry"}, len(alerts)
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(work, ignore_errors=True)
    return Result("monitor_catchup", round(n / secs), "entries/s", {
        "server": "Go net/http FileServer (benchmarks/staticserve.go)" if go else
                  "Python http.server (tests/support/staticlog.py)",
        "entries": n, "seconds": round(secs, 1), "peak_rss_mb": round(peak_mb), "rss_target_mb": 300,
        "meets_rss_target": peak_mb <= 300, "alerts": len(alerts), "log_bytes": info["bytes"],
        "load_average_1m_before": round(load_before, 2), "load_average_1m_after": round(os.getloadavg()[0], 2),
        "what": "`oap-monitor run --once` from an empty state over a static tlog-tiles log (7 commitments per "
                "receipt entry) on a static file server on 127.0.0.1 (`server`): checkpoint verified, "
                "tiles checked against the root, every bundle and full hash tile read, every leaf hash "
                "recomputed and compared with the tiles, every entry parsed (signer, names), a consistency proof "
                "and an fsynced state commit every 65,536 entries, 16 watched entries alerted with verified "
                ".tlog-proof bundles; wall time from process start to exit",
        "check": f"exit 1 with 'verified size {n}, {n} entries read', and the {WATCHED} alerts of the watched key"},
        target=200_000)


def main() -> None:
    ap = argparse.ArgumentParser(description="monitor benchmark")
    ap.add_argument("--entries", type=int, default=10_000_000)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    r = catchup(args.entries)
    out = {"_meta": {"machine": machine()}, r.name: r.to_json()}
    text = json.dumps(out, indent=2) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
