"""Read workers (tlog.server.readworkers): more processes on the log's port, same answers.

A log with a read worker listens twice on one port (SO_REUSEPORT); the kernel
gives each new connection to one of the two processes. Whichever process a
connection lands on, the bytes it gets back must be the bytes a plain aiohttp
site of the same app gives (`tests/service/test_fastpath.py` compares the log's own
fast path the same way): tiles and checkpoints answered by the worker, and
everything else after the worker handed the connection to the log process.
Many connections are opened so that both processes get some; the hand-off
counter proves the worker did.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import re
import signal
import socket
import struct
import threading
import time

import numpy as np
import pytest

from tlog.errors import ConfigError
from tlog.formats.ed25519 import generate_seed
from tlog.formats.hashing import leaf_hash
from tlog.formats.keys import CosignatureSigner
from tlog.formats.tiles import tile_path
from tlog.http.fastpath import FAST_ROUTES_KEY, FastSite
from tlog.http.metrics import RequestMetrics
from tlog.http.serve import start_app
from tlog.server.api import build_app
from tlog.server.config import LogConfig
from tlog.server.readworkers import ReadWorkers
from tlog.server.service import LogService

from tests.service.test_fastpath import CLOSE, entry, exchange, get, responses
from tests.support.proctree import descendants, wait_gone
from tests.support.services import log_service
from tests.support.tcp import unread

N = 600
CONNS = 24  # all on one process: 2^-24


class Log:
    """A log, its read worker(s) on the same port, and a plain aiohttp site of the same app."""

    async def open(self, tmp_path, entries: int = N, **cfg) -> Log:
        settings = dict(data_dir=tmp_path / "data", port=0, batch_interval_ms=2, rate_limit_read=0,
                        rate_limit_write=0, read_workers=1)
        settings.update(cfg)
        self.cfg = LogConfig(**settings)
        self.cfg.validate()
        self.svc = await LogService.open(self.cfg)
        if entries:
            await self.svc.appender.add_many([entry(i) for i in range(entries)])
        self.runner = await start_app(build_app(self.svc), "127.0.0.1", 0, reuse_port=True)
        self.port = self.runner.addresses[0][1]
        self.workers = ReadWorkers(self.cfg, self.svc.appender,
                                   RequestMetrics(self.svc.metrics.requests, self.svc.metrics.request_seconds))
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
    await rlog.svc.appender.add_many([entry(i) for i in range(N, N + 300)])
    new = rlog.svc.state.size
    assert new == old + 300
    # Partial tile 0/3 of the new tree: 900 leaves = 3 full tiles + 132.
    path = "/" + tile_path(0, 3, new % 256)
    deadline = time.monotonic() + 60
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
    deadline = time.monotonic() + 60
    while tiles_counted(await metrics()) < before + 5 * CONNS:  # workers report once a second
        assert time.monotonic() < deadline, "worker requests never reached /metrics"
        await asyncio.sleep(0.2)
    assert tiles_counted(await metrics()) == before + 5 * CONNS


async def test_an_unpublished_log_is_not_served_by_its_workers(tmp_path):
    vkey = CosignatureSigner("w.test", generate_seed()).vkey
    lg = await Log().open(tmp_path, entries=0, witnesses=(("w.test", vkey, "http://127.0.0.1:9"),),
                          witness_quorum=1, witness_timeout=0.2)
    try:
        assert not lg.svc.appender.published
        want = await on_every_connection(lg, get("/checkpoint") + get("/" + tile_path(0, 0)) + CLOSE)
        assert [r[0].split(b" ")[1] for r in want] == [b"503", b"503", b"200"]
        assert lg.workers.adopted >= 1
    finally:
        await lg.close()


async def test_workers_exit_with_the_log_process(rlog):
    procs = [c.proc for c in rlog.workers.children]
    assert procs and all(p.poll() is None for p in procs)
    loop = asyncio.get_running_loop()
    for child in rlog.workers.children:  # as if the log process died: its end of the channel closes
        loop.remove_reader(child.chan.fileno())
        child.chan.close()
        child.lost = True
    deadline = time.monotonic() + 60
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
    assert "ERROR" not in svc.log_text and "Traceback" not in svc.log_text, svc.log_text
    with pytest.raises(OSError):  # nothing listens any more: the worker is gone too
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


async def test_a_worker_that_fell_behind_catches_up_with_the_newest_checkpoint(rlog):
    # From a review: states the channel could not take were dropped, and the worker kept
    # serving an old checkpoint until the next publish. Now the newest one is always sent.
    worker = rlog.workers.children[0].proc
    os.kill(worker.pid, signal.SIGSTOP)  # descheduled for a while: its channel fills up
    try:
        for i in range(N, N + 400):  # 400 published batches of one entry
            await rlog.svc.appender.add_many([entry(i)])
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    want = rlog.svc.state.size
    deadline = time.monotonic() + 60
    while True:
        streams = await asyncio.gather(*(exchange(rlog.port, get("/checkpoint") + CLOSE) for _ in range(CONNS)))
        sizes = {int(responses(s)[0][2].split(b"\n")[1]) for s in streams}
        if sizes == {want}:
            break
        assert time.monotonic() < deadline, f"served sizes {sorted(sizes)}, published {want}"
        await asyncio.sleep(0.1)


def _on_worker(port: int, routes) -> socket.socket:
    """A connection the worker accepted: its tile answer is not counted by the log process."""
    for _ in range(200):
        s = socket.create_connection(("127.0.0.1", port))
        before = routes.answered
        s.sendall(get("/" + tile_path(0, 0)))
        got = b""
        while len(got) < 8192:
            got += s.recv(65536)
        if routes.answered == before:
            return s
        s.close()
    raise AssertionError("no connection reached the worker")


def _finish(s: socket.socket, data: bytes, sent: threading.Semaphore) -> bytes:
    s.sendall(data)
    sent.release()
    s.settimeout(60)
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


async def test_hand_offs_wait_for_a_busy_log_process_without_stalling_the_worker(rlog):
    # From a review: the worker sent on a blocking channel; with the log's loop busy it
    # froze (every connection it held stalled) and a hand-off cut after its descriptor
    # left the client hanging. Now the worker queues, and the descriptor goes last.
    routes = rlog.runner.app[FAST_ROUTES_KEY]
    body = json.dumps({"entries": [doc(i % N) for i in range(700)]}).encode()  # 90 KB, all in the log
    data = post("/v1/entries:batch", body) + get("/checkpoint") + CLOSE
    want = responses(await exchange(rlog.plain, data))
    socks = [await asyncio.to_thread(_on_worker, rlog.port, routes) for _ in range(7)]
    probe = socks.pop()
    loop = asyncio.get_running_loop()
    sent = threading.Semaphore(0)
    pool = concurrent.futures.ThreadPoolExecutor(len(socks))  # one thread each: none waits for another
    answers = [loop.run_in_executor(pool, _finish, s, data, sent) for s in socks]
    probed = threading.Event()

    def probe_tile() -> None:
        for _ in socks:  # after the requests whose hand-offs wait for the log process
            sent.acquire(timeout=60)
        probe.sendall(get("/" + tile_path(0, 1)))
        probe.settimeout(60)
        got = b""
        while len(got) < 8192 and (chunk := probe.recv(65536)):
            got += chunk
        if len(got) >= 8192:
            probed.set()

    thread = threading.Thread(target=probe_tile)
    thread.start()
    answered_meanwhile = probed.wait(60)  # the log process's loop is busy (blocked here on purpose)
    thread.join(30)
    probe.close()
    assert answered_meanwhile, "the worker stopped answering while the log process was busy"
    for got in await asyncio.gather(*answers):
        assert responses(got) == want
    pool.shutdown()


async def test_only_hand_offs_with_all_their_bytes_and_a_stream_socket_are_adopted(rlog):
    child = rlog.workers.children[0]
    before = rlog.workers.adopted
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    fd = os.dup(udp.fileno())
    udp.close()
    with pytest.raises(ValueError):
        rlog.workers._dispatch(child, b"H" + struct.pack(">I", 0), [fd])
    with pytest.raises(OSError):  # closed exactly once, by the log
        os.fstat(fd)
    a, b = socket.socketpair()
    fd = os.dup(a.fileno())
    rlog.workers._dispatch(child, b"D" + b"GET", [])
    with pytest.raises(ValueError):  # 3 bytes arrived, 5 announced: a cut hand-off
        rlog.workers._dispatch(child, b"H" + struct.pack(">I", 5), [fd])
    with pytest.raises(OSError):
        os.fstat(fd)
    assert child.pending == bytearray()  # the next hand-off starts clean
    assert rlog.workers.adopted == before
    a.close()
    b.close()


async def test_a_second_log_cannot_share_the_port(rlog, tmp_path):
    other = LogConfig(data_dir=tmp_path / "other", port=rlog.port, read_workers=1)
    svc = await LogService.open(other)
    try:
        with pytest.raises(OSError):
            await start_app(build_app(svc), "127.0.0.1", rlog.port, reuse_port=True)
    finally:
        await svc.close()


async def test_a_worker_killed_is_reaped_and_the_log_serves_on(rlog, caplog):
    child = rlog.workers.children[0]
    os.kill(child.proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    # The log notices (its channel closes) and reaps it (no zombie left behind). Only the
    # log may wait for it here: returncode is set by the log's own poll().
    while not (child.lost and child.proc.returncode is not None):
        assert time.monotonic() < deadline, "the log did not notice and reap its killed worker"
        await asyncio.sleep(0.05)
    assert child.proc.returncode == -signal.SIGKILL
    assert any(f"pid {child.proc.pid} exited" in r.message for r in caplog.records)
    await on_every_connection(rlog, get("/checkpoint") + get("/" + tile_path(0, 0)) + CLOSE)


def test_record_many_equals_one_observation_at_a_time():
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    rng = np.random.default_rng(5)
    secs = np.concatenate([rng.exponential(0.003, 500), [0.0, 0.005, 0.01, 10.0, 1e-7]]).astype(np.float32)
    texts = []
    for bulk in (False, True):
        reg = CollectorRegistry()
        m = RequestMetrics(Counter("req", "r", ["route", "status"], registry=reg),
                           Histogram("sec", "s", ["route"], registry=reg))
        if bulk:
            m.record_many("/tile/{path}", 200, secs)
        else:
            for s in secs.tolist():
                m.record("/tile/{path}", 200, s)
        texts.append(re.sub(rb"_created\{.*\n", b"", generate_latest(reg)))
    assert texts[0] == texts[1]
    assert b'sec_bucket{le="0.005",route="/tile/{path}"}' in texts[0]


def test_a_log_killed_with_its_worker_restarts_on_the_same_port(tmp_path):
    first = log_service(tmp_path / "log", "--read-workers", "1").start()
    port = int(first.url.rsplit(":", 1)[1])
    workers = descendants(first.pid)
    assert len(workers) == 1
    first.kill()  # SIGKILL: the worker notices on its channel and exits on its own
    assert not wait_gone(workers, 60), "the worker outlived its log"
    again = log_service(tmp_path / "log", "--read-workers", "1", "--port", str(port)).start()
    try:
        assert again.url.endswith(f":{port}")

        async def go():
            return await asyncio.gather(*(exchange(port, get("/checkpoint") + CLOSE) for _ in range(CONNS)))

        for stream in asyncio.run(go()):
            assert [r[0] for r in responses(stream)] == [b"HTTP/1.1 200 OK"] * 2
    finally:
        assert again.stop() == 0


def test_free_port_waits_briefly_for_a_listener_that_is_going_away():
    from tlog.http.serve import free_port

    holder = socket.create_server(("127.0.0.1", 0))
    port = holder.getsockname()[1]
    threading.Timer(0.3, holder.close).start()  # like the worker of a killed log, exiting
    assert free_port("127.0.0.1", port) == port
    busy = socket.create_server(("127.0.0.1", 0))
    try:
        with pytest.raises(OSError):  # a listener that stays: "address in use", after the retries
            free_port("127.0.0.1", busy.getsockname()[1])
    finally:
        busy.close()


# --- from a second review ---------------------------------------------------------------


def _on_worker_many(port: int, routes, n: int) -> list[socket.socket]:
    socks: list[socket.socket] = []
    while len(socks) < n:
        socks.append(_on_worker(port, routes))
    return socks


def _read_all(s: socket.socket) -> bytes:
    s.settimeout(10)
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    s.close()
    return out


async def test_hand_offs_still_in_the_channel_at_stop_are_answered(tmp_path):
    lg = await Log().open(tmp_path)
    try:
        socks = await asyncio.to_thread(_on_worker_many, lg.port, lg.runner.app[FAST_ROUTES_KEY], 120)
        for s in socks:  # 120 requests the worker hands over, while the log's loop is behind
            s.sendall(get("/v1/info", "Connection: close"))
        # The loop is held (blocked here on purpose) until the worker has read every request:
        # it queues a hand-off in the same step, so all of them are then in its channel or queue.
        clients = {s.getsockname()[1] for s in socks}
        deadline = time.monotonic() + 60
        while (waiting := unread(lg.port, clients)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not waiting, f"the worker never read {len(waiting)} requests"
        asyncio.get_running_loop().call_soon(time.sleep, 0.05)  # busy for a moment after SIGTERM
        await lg.workers.stop()
        outs = await asyncio.gather(*(asyncio.to_thread(_read_all, s) for s in socks))
        assert sum(o.startswith(b"HTTP/1.1 200") for o in outs) == len(socks)
    finally:
        await lg.runner.cleanup()
        await lg.svc.close()


async def test_a_second_log_on_a_host_with_two_addresses_is_refused(tmp_path, monkeypatch):
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    lg = await Log().open(tmp_path / "a")  # on 127.0.0.1, with a worker
    real = socket.getaddrinfo

    def two(host, port, *a, **k):  # like "localhost" with "::1 localhost" in /etc/hosts
        if host == "two.test":
            return real("::1", port, *a, **k) + real("127.0.0.1", port, *a, **k)
        return real(host, port, *a, **k)

    monkeypatch.setattr(socket, "getaddrinfo", two)
    svc = await LogService.open(LogConfig(data_dir=tmp_path / "b", rate_limit_read=0))
    try:
        with pytest.raises(OSError):
            runner = await start_app(build_app(svc), "two.test", lg.port, reuse_port=True)
            await runner.cleanup()
    finally:
        await svc.close()
        await lg.close()


async def test_every_interface_works_with_read_workers_as_without():
    from aiohttp import web

    runner = await start_app(web.Application(), "", 0, reuse_port=True)
    assert runner.addresses
    await runner.cleanup()


async def test_an_h_without_its_descriptor_does_not_spoil_the_next_hand_off(rlog):
    child, w = rlog.workers.children[0], rlog.workers
    req = get("/v1/info")
    w._dispatch(child, b"D" + req, [])
    with pytest.raises(ValueError):  # e.g. MSG_CTRUNC: the log was out of descriptors
        w._dispatch(child, b"H" + struct.pack(">I", len(req)), [])
    a, b = socket.socketpair()
    before = w.adopted
    w._dispatch(child, b"D" + req, [])
    w._dispatch(child, b"H" + struct.pack(">I", len(req)), [os.dup(a.fileno())])
    assert w.adopted == before + 1
    a.close()
    b.close()


async def test_read_workers_refuse_pruned_tiles_as_the_log_process_does(tmp_path):
    """Under a minimum index (C2SP tlog-tiles pruning) every connection, whichever process
    accepts it, gets the log process's 404 for the tiles and bundles below it and the tiles
    above it."""
    lg = await Log().open(tmp_path)
    size = lg.svc.state.size
    await lg.close()
    lg = await Log().open(tmp_path, entries=0, minimum_index=512, retention_policy="https://example.org/retention")
    try:
        want = await on_every_connection(lg, b"".join([
            get("/" + tile_path(0, 0)), get("/" + tile_path(0, 1)), get("/" + tile_path(0, 2, size % 256)),
            get("/" + tile_path(1, 0, size >> 8)), get("/tile/entries/001"), get("/checkpoint"), CLOSE]))
        assert [r[0].split()[1] for r in want] == [b"404", b"404", b"200", b"200", b"404", b"200", b"200"]
        assert b"starts at index 512" in want[0][2]
    finally:
        await lg.close()
