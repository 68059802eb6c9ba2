"""The scale-out benchmarks: PostgreSQL + SeaweedFS + two `oap-log serve` frontends, all on
this machine (tlog.cli.engines), loaded from a separate process on 127.0.0.1.

- scale_append_batched: batches of 1,000 entries from 8 connections, 4 per frontend;
- scale_append_single: single appends from 200 connections, half per frontend;
- scale_proofs_batched: 10,000-index CBOR proof batches from both frontends (HTTP), and the
  same gather in-process on a frontend's hash cache;
- scale_tile_reads: random 8 KiB tiles read straight from the bucket (anonymous GETs to the
  S3 endpoint, as a CDN would), beside the log's own tile_reads.
"""
from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

from common import ORIGIN, Result, SyncAppender, cpu_seconds, median

from tlog.cli.engines import Postgres, Seaweed
from tlog.formats.keys import Signer
from tlog.runtime import children
from tlog.runtime.keyfiles import write_private_key, write_secret
from tlog.server.service import checkpoint_signer
from tlog.storage.postgres import PostgresStorage


class Network:
    """PostgreSQL, SeaweedFS and two frontends; `fill` grows the log through the storage."""

    def __init__(self, *, batch_interval_ms: int = 50) -> None:
        import sys

        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from tests.support.services import BIN, Service

        self.work = Path(tempfile.mkdtemp(prefix="oap-bench-scale-", dir="/tmp"))
        self.work.chmod(0o755)
        self.pg = Postgres(self.work / "pg").start()
        self.weed = Seaweed(self.work / "weed").start()
        self.weed.create_bucket("log")
        self.signer = Signer.generate(ORIGIN)
        key = self.work / "log.key"
        write_private_key(key, self.signer.to_skey())
        creds = self.work / "bucket.credentials"
        write_secret(creds, f"{self.weed.access_key} {self.weed.secret_key}")
        self.bucket = self.weed.bucket_url("log")
        self.config = self.work / "log.toml"
        self.config.write_text(
            f'[log]\nstorage = "postgres"\npostgres_dsn = "{self.pg.dsn}"\nbucket_url = "{self.bucket}"\n'
            f'bucket_credentials_file = "{creds}"\nkey_file = "{key}"\norigin = "{ORIGIN}"\n'
            f'rate_limit_write = 0\nrate_limit_read = 0\nmax_batch = 4096\nbatch_interval_ms = {batch_interval_ms}\n')
        self._bin, self._service = BIN, Service
        self.fronts: list = []

    def start_frontends(self) -> list:
        self.fronts = [self._service(f"front-{i}", [str(self._bin / "oap-log"), "serve", "--config", str(self.config),
                                                     "--data", str(self.work / f"front-{i}"), "--port", "0"]).start()
                       for i in range(2)]
        return self.fronts

    def stop_frontends(self) -> None:
        for f in self.fronts:
            f.stop()
        self.fronts = []

    def fill(self, n: int) -> None:
        """Append n entries through the storage interface (the frontends are not running),
        publishing their tiles and bundles to the bucket as a frontend does: the bucket
        then serves the whole tree."""
        from tlog.storage.bucket import Bucket, TilePublisher

        publisher = TilePublisher(Bucket.from_config(self.bucket, key_id=self.weed.access_key,
                                                     secret=self.weed.secret_key))
        store = SyncAppender(PostgresStorage(self.pg.dsn, self.work / "filler"), checkpoint_signer(self.signer),
                             publisher=publisher)
        try:
            store.wait_integrating()
            done = store.state.size
            while done < n:
                k = min(16_384, n - done)
                store.append([b"fill:%d" % i for i in range(done, done + k)])
                done += k
        finally:
            store.close()

    def close(self) -> None:
        for f in self.fronts:
            f.kill()
        self.weed.stop()
        self.pg.stop()
        shutil.rmtree(self.work, ignore_errors=True)

    def ports(self) -> list[int]:
        return [int(f.url.rsplit(":", 1)[1]) for f in self.fronts]

    def server_cpu(self) -> float:
        total = 0.0
        for pid in [f.pid for f in self.fronts] + [self.weed.proc.pid, *postgres_pids()]:
            try:
                total += cpu_seconds(pid)
            except OSError:
                pass
        return total


def postgres_pids() -> list[int]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{pid}/comm").read().strip() == "postgres":
                out.append(int(pid))
        except OSError:
            pass
    return out


# --- a load generator over several ports, in its own process -----------------------------------


def _load_child(targets: list[tuple[str, int]], make, conns: int, seconds: float, total: int, q) -> None:
    children.die_with_parent(signal.SIGKILL)

    async def client(k: int, lat: list, stop: float, counter: list) -> None:
        host, port = targets[k % len(targets)]
        r, w = await asyncio.open_connection(host, port)
        while time.monotonic() < stop and counter[0] < total:
            i = counter[0]
            counter[0] += 1
            t = time.perf_counter()
            w.write(make(k, i))
            head = await r.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = next((int(x.split(b":")[1]) for x in head.split(b"\r\n")
                           if x.lower().startswith(b"content-length")), None)
            if length is None:  # chunked (a streamed answer)
                body = b""
                while True:
                    size = int((await r.readuntil(b"\r\n")).strip(), 16)
                    chunk = await r.readexactly(size + 2)
                    if size == 0:
                        break
                    body += chunk[:-2]
            else:
                await r.readexactly(length)
            if status != 200:
                counter[1] += 1
            lat.append(time.perf_counter() - t)

    async def main() -> None:
        lat: list[float] = []
        counter = [0, 0]
        c0 = time.process_time()
        t0 = time.perf_counter()
        stop = time.monotonic() + seconds
        await asyncio.gather(*(client(k, lat, stop, counter) for k in range(conns)))
        q.put({"n": len(lat), "wall": time.perf_counter() - t0, "errors": counter[1], "lat": sorted(lat),
               "cpu": time.process_time() - c0})

    asyncio.run(main())


def run_load(net: Network, targets: list[tuple[str, int]], make, *, conns: int, seconds: float,
             total: int = 10 ** 9) -> dict:
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    cpu0 = net.server_cpu()
    p = ctx.Process(target=_load_child, args=(targets, make, conns, seconds, total, q))
    p.start()
    res = q.get(timeout=seconds + 120)
    p.join(30)
    lat = res.pop("lat")
    res["server_cpu_util"] = round((net.server_cpu() - cpu0) / res["wall"], 2)
    res["client_cpu_util"] = round(res.pop("cpu") / res["wall"], 2)
    res["p50_ms"] = round(lat[len(lat) // 2] * 1000, 1) if lat else 0
    res["p99_ms"] = round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 1) if lat else 0
    res["rate"] = res["n"] / res["wall"]
    return res


def _post(path: str, body: bytes, accept: str = "") -> bytes:
    extra = f"Accept: {accept}\r\n" if accept else ""
    return (f"POST {path} HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def _entry(i: int) -> bytes:
    return b'{"type":"commitment","commitment":"sha256:%064x"}' % i


# --- the benchmarks ---------------------------------------------------------------------------


def append_batched(seconds: float) -> Result:
    net = Network()
    try:
        net.start_frontends()
        targets = [("127.0.0.1", p) for p in net.ports()]

        def make(k: int, i: int) -> bytes:
            base = (k * 10 ** 6 + i) * 1000
            return _post("/v1/entries:batch", b'{"entries":[' + b",".join(_entry(base + j) for j in range(1000))
                         + b"]}")

        run_load(net, targets, make, conns=8, seconds=2)  # warm-up
        res = run_load(net, targets, make, conns=8, seconds=seconds)
        return Result("scale_append_batched", round(res["rate"] * 1000), "entries/s", {
            "entries_per_request": 1000, "clients": 8, "frontends": 2, "errors": res["errors"],
            "p50_ms": res["p50_ms"], "p99_ms": res["p99_ms"], "server_cpu_util": res["server_cpu_util"],
            "client_cpu_util": res["client_cpu_util"],
            "server": "2 x oap-log serve (storage = postgres, bucket), PostgreSQL 18 + SeaweedFS on this machine"},
            target=30_000)
    finally:
        net.close()


def append_single(seconds: float) -> Result:
    net = Network(batch_interval_ms=5)
    try:
        net.start_frontends()
        targets = [("127.0.0.1", p) for p in net.ports()]
        res = run_load(net, targets, lambda k, i: _post("/v1/entries", _entry(k * 10 ** 9 + i)), conns=200,
                       seconds=seconds)
        r = Result("scale_append_single", round(res["rate"]), "entries/s", {
            "clients": 200, "frontends": 2, "batch_interval_ms": 5, "errors": res["errors"],
            "p50_ms": res["p50_ms"], "p99_ms": res["p99_ms"], "server_cpu_util": res["server_cpu_util"],
            "client_cpu_util": res["client_cpu_util"], "target_p99_ms": 250}, target=5_000)
        if res["p99_ms"] > 250:
            r.params["p99_over_target"] = True
        return r
    finally:
        net.close()


def proofs_and_tiles(n: int, seconds: float, tile_reads_log: float | None) -> list[Result]:
    import json

    import numpy as np

    from tlog.merkle.proofs import inclusion_levels
    from tlog.storage.hashfiles import HashFiles

    net = Network()
    out = []
    try:
        t = time.perf_counter()
        net.fill(n)
        fill_s = time.perf_counter() - t
        net.start_frontends()
        targets = [("127.0.0.1", p) for p in net.ports()]
        rng = np.random.default_rng(5)
        bodies = [json.dumps({"indices": rng.integers(0, n, 10_000).tolist()}).encode() for _ in range(8)]
        make = lambda k, i: _post("/v1/proof/inclusion:batch", bodies[i % 8], "application/oap+cbor")  # noqa: E731
        run_load(net, targets, make, conns=4, seconds=2)  # warm: the frontends' hash caches
        both = run_load(net, targets, make, conns=4, seconds=seconds)
        one = run_load(net, targets[:1], make, conns=2, seconds=seconds)
        # in-process, on one frontend's hash cache (what its HTTP answers gather from)
        net.stop_frontends()
        from tlog.merkle.tree import TreeView

        hashes = HashFiles(net.work / "front-0" / "cache" / "hashes")
        view = TreeView(n, hashes.read)
        idx = rng.integers(0, n, 100_000)
        inclusion_levels(view, hashes, idx)
        times = []
        for _ in range(3):
            t = time.perf_counter()
            inclusion_levels(view, hashes, idx)
            times.append(time.perf_counter() - t)
        in_process, in_process_slowest = 100_000 / median(times), 100_000 / max(times)  # the median round; the slowest
        hashes.close()
        out.append(Result("scale_proofs_batched", round(both["rate"] * 10_000), "proofs/s", {
            "tree_size": n, "indices_per_request": 10_000, "encoding": "application/oap+cbor", "clients": 4,
            "frontends": 2, "one_frontend_proofs_per_s": round(one["rate"] * 10_000),
            "in_process_proofs_per_s": round(in_process), "in_process_slowest_round_per_s": round(in_process_slowest),
            "in_process_rounds": len(times), "fill_entries_per_s": round(n / fill_s),
            "server_cpu_util": both["server_cpu_util"], "client_cpu_util": both["client_cpu_util"],
            "errors": both["errors"] + one["errors"]}, target=500_000))
        # tiles straight from the bucket: anonymous GETs to the S3 endpoint
        from tlog.formats.tiles import tile_path

        port = net.weed.ports["s3"]
        paths = [f"/log/{tile_path(0, int(i))}" for i in rng.integers(0, n // 256, 4096)]
        get = lambda k, i: f"GET {paths[i % 4096]} HTTP/1.1\r\nHost: b\r\n\r\n".encode()  # noqa: E731
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{port}{paths[0]}", timeout=10) as r:  # served, or no figure
            assert r.status == 200 and len(r.read()) == 256 * 32, "the bucket does not serve the log's tiles"
        tiles = run_load(net, [("127.0.0.1", port)], get, conns=64, seconds=seconds)
        out.append(Result("scale_tile_reads", round(tiles["rate"]), "req/s", {
            "tree_size": n, "source": "SeaweedFS S3 endpoint, anonymous GET (as a CDN in front would)",
            "clients": 64, "p99_ms": tiles["p99_ms"], "errors": tiles["errors"],
            "server_cpu_util": tiles["server_cpu_util"], "client_cpu_util": tiles["client_cpu_util"],
            "log_tile_reads_req_per_s": tile_reads_log}))
        if tiles["errors"]:
            raise RuntimeError(f"{tiles['errors']} tile reads from the bucket failed: no figure")
    finally:
        net.close()
    return out
