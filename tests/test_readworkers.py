"""Read workers (tlog.readworkers): more processes on the log's port, same answers.

A log with a read worker listens twice on one port (SO_REUSEPORT); the kernel
gives each new connection to one of the two processes. Whichever process a
connection lands on, the bytes it gets back must be the bytes a plain aiohttp
site of the same app gives (`tests/test_fastpath.py` compares the log's own
fast path the same way): tiles and checkpoints answered by the worker, and
everything else after the worker handed the connection to the log process.
Many connections are opened so that both processes get some; the hand-off
counter proves the worker did.
"""
from __future__ import annotations

import asyncio
import json
import re
import socket
import time

import pytest

from tests.services import log_service
from tests.test_fastpath import CLOSE, entry, exchange, get, responses
from tlog.config import ConfigError, LogConfig
from tlog.ed25519 import generate_seed
from tlog.hashing import leaf_hash
from tlog.fastpath import FastSite
from tlog.http import RequestMetrics, start_app
from tlog.keys import CosignatureSigner
from tlog.readworkers import ReadWorkers
from tlog.server import LogService, build_app
from tlog.tiles import tile_path

N = 600
CONNS = 24  # all on one process: 2^-24


class Log:
    """A log, its read worker(s) on the same port, and a plain aiohttp site of the same app."""

    async def open(self, tmp_path, entries: int = N, **cfg) -> "Log":
        settings = dict(data_dir=tmp_path / "data", port=0, batch_interval_ms=2, rate_limit_read=0,
                        rate_limit_write=0, read_workers=1)
        settings.update(cfg)
        self.cfg = LogConfig(**settings)
        self.cfg.validate()
        self.svc = await LogService.open(self.cfg)
        if entries:
            await self.svc.sequencer.add_many([entry(i) for i in range(entries)])
        self.runner = await start_app(build_app(self.svc), "127.0.0.1", 0, reuse_port=True)
        self.port = self.runner.addresses[0][1]
        self.workers = ReadWorkers(self.cfg, self.svc.sequencer,
                                   RequestMetrics(self.svc.metrics.requests, self.svc.metrics.request_seconds).record)
        await self.workers.start(next(iter(self.runner.sites)), "127.0.0.1", self.port)
        plain = FastSite(self.runner, "127.0.0.1", 0, routes=None, timeout=15.0)
        await plain.start()
        self.plain = self.runner.addresses[1][1]
        return self

    async def close(self) -> None:
        await self.workers.stop()
        await self.runner.cleanup()
        await self.svc.close()


@pytest.fixture
async def rlog(tmp_path):
    lg = await Log().open(tmp_path)
    yield lg
    await lg.close()


def doc(i: int) -> dict:
    """The JSON submission of `entry(i)`."""
    return {"type": "commitment", "commitment": "sha256:" + leaf_hash(i.to_bytes(8, "big")).hex()}


def post(path: str, body: bytes, ctype: str = "application/json") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def on_every_connection(lg: Log, data: bytes) -> list:
    """Send `data` on CONNS connections at once; each must get what the plain site gives."""
    want = responses(await exchange(lg.plain, data))
    got = await asyncio.gather(*(exchange(lg.port, data) for _ in range(CONNS)))
    for stream in got:
        assert responses(stream) == want
    return want


async def test_every_connection_gets_the_plain_answers_whichever_process_accepts_it(rlog):
    size = rlog.svc.state.size
    dup = json.dumps(doc(7)).encode()
    data = b"".join([
        get("/checkpoint"), get("/" + tile_path(0, 0)), get("/" + tile_path(0, 2, size % 256)),
        get("/" + tile_path(0, 9)),  # beyond the tree: refused, by the log process
        post("/v1/entries", dup),  # a write: only the log process answers it (a duplicate: same answer)
        get("/" + tile_path(0, 1)), get("/tile/entries/000"), CLOSE,
    ])
    want = await on_every_connection(rlog, data)
    assert [r[0].split(b" ")[1] for r in want] == [b"200", b"200", b"200", b"404", b"200", b"200", b"200", b"200"]
    assert rlog.workers.adopted >= 1  # the worker got connections, and handed each over after its reads
    assert rlog.svc.state.size == size


async def test_a_body_larger_than_one_message_is_handed_over_whole(rlog):
    batch = json.dumps({"entries": [doc(i % N) for i in range(1800)]}).encode()  # all in the log already
    assert len(batch) > 200_000
    data = get("/" + tile_path(0, 0)) + post("/v1/entries:batch", batch) + CLOSE
    want = await on_every_connection(rlog, data)
    assert want[1][0].endswith(b"200 OK")
    assert rlog.workers.adopted >= 1


async def test_workers_serve_each_published_checkpoint_and_its_tiles(rlog):
    old = rlog.svc.state.size
    await rlog.svc.sequencer.add_many([entry(i) for i in range(N, N + 300)])
    new = rlog.svc.state.size
    assert new == old + 300
    # Partial tile 0/3 of the new tree: 900 leaves = 3 full tiles + 132.
    path = "/" + tile_path(0, 3, new % 256)
    deadline = time.monotonic() + 10
    while True:  # the state reaches the worker right after it is published, over a local socket
        streams = await asyncio.gather(*(exchange(rlog.port, get("/checkpoint") + get(path) + CLOSE)
                                         for _ in range(CONNS)))
        answers = [responses(s) for s in streams]
        sizes = {int(a[0][2].split(b"\n")[1]) for a in answers}
        assert sizes <= {old, new}
        if sizes == {new}:
            break
        assert time.monotonic() < deadline, "the worker never served the new checkpoint"
        await asyncio.sleep(0.05)
    want = responses(await exchange(rlog.plain, get("/checkpoint") + get(path) + CLOSE))
    assert all(a == want for a in answers)


async def test_worker_answers_are_counted_in_the_log_metrics(rlog):
    def tiles_counted(text: str) -> float:
        m = re.search(r'oap_log_http_requests_total\{route="/tile/\{path\}",status="200"\} (\S+)', text)
        return float(m.group(1)) if m else 0.0

    async def metrics() -> str:
        return responses(await exchange(rlog.port, get("/metrics") + CLOSE))[0][2].decode()

    before = tiles_counted(await metrics())
    close_tile = get("/" + tile_path(0, 1), "Connection: close")  # answered and closed on the fast path
    await asyncio.gather(*(exchange(rlog.port, get("/" + tile_path(0, 0)) * 4 + close_tile) for _ in range(CONNS)))
    deadline = time.monotonic() + 10
    while tiles_counted(await metrics()) < before + 5 * CONNS:  # workers report once a second
        assert time.monotonic() < deadline, "worker requests never reached /metrics"
        await asyncio.sleep(0.2)
    assert tiles_counted(await metrics()) == before + 5 * CONNS


async def test_an_unpublished_log_is_not_served_by_its_workers(tmp_path):
    vkey = CosignatureSigner("w.test", generate_seed()).vkey
    lg = await Log().open(tmp_path, entries=0, witnesses=(("w.test", vkey, "http://127.0.0.1:9"),),
                          witness_quorum=1, witness_timeout=0.2)
    try:
        assert not lg.svc.sequencer.published
        want = await on_every_connection(lg, get("/checkpoint") + get("/" + tile_path(0, 0)) + CLOSE)
        assert [r[0].split(b" ")[1] for r in want] == [b"503", b"503", b"200"]
        assert lg.workers.adopted >= 1
    finally:
        await lg.close()


async def test_workers_exit_with_the_log_process(rlog):
    procs = list(rlog.workers._procs)
    assert procs and all(p.poll() is None for p in procs)
    loop = asyncio.get_running_loop()
    for chan in rlog.workers._chans:  # as if the log process died: its end of the channel closes
        loop.remove_reader(chan.fileno())
        chan.close()
    rlog.workers._chans = []
    deadline = time.monotonic() + 10
    while any(p.poll() is None for p in procs):
        assert time.monotonic() < deadline, "a worker outlived its log process"
        await asyncio.sleep(0.05)


def test_config_refuses_workers_with_tls_or_out_of_range(tmp_path):
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    with pytest.raises(ConfigError, match="plain HTTP"):
        LogConfig(read_workers=1, tls_cert=cert, tls_key=cert).validate()
    with pytest.raises(ConfigError, match="read_workers"):
        LogConfig(read_workers=65).validate()
    LogConfig(read_workers=2).validate()


def test_serve_with_a_read_worker_answers_and_stops_cleanly(tmp_path):
    svc = log_service(tmp_path / "log", "--read-workers", "1").start()
    try:
        port = int(svc.url.rsplit(":", 1)[1])

        async def go():
            body = json.dumps(doc(1)).encode()
            data = post("/v1/entries", body) + get("/checkpoint") + get("/" + tile_path(0, 0, 1)) + CLOSE
            streams = await asyncio.gather(*(exchange(port, data) for _ in range(CONNS)))
            return [responses(s) for s in streams]

        answers = asyncio.run(go())
        for a in answers:
            assert [r[0] for r in a] == [b"HTTP/1.1 200 OK"] * 4
            assert int(a[1][2].split(b"\n")[1]) == 1  # the same entry, once: a tree of one leaf
        assert len({a[2][2] for a in answers}) == 1
    finally:
        assert svc.stop() == 0
    assert "stopped cleanly" in svc.log_text
    with pytest.raises(OSError):  # nothing listens any more: the worker is gone too
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
