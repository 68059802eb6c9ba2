"""Read workers: more processes answering the log's tile and checkpoint reads on its port.

One Python process answers some 15-30k tile reads a second on this kind of
machine, all of it on one core (benchmarks/README.md). The log's writes must
stay in one process (one appender, one signing key), but what clients poll
in bulk does not need it: a full tile is immutable bytes of the hash files,
and the checkpoint is one small signed note.

With `read_workers = N` the log starts N worker processes that listen on the
same address (SO_REUSEPORT: the kernel spreads new connections over every
listener, and only processes of the same user may join). A worker answers
`GET /checkpoint` and hash tiles on the fast path (`tlog.http.fastpath`), with the
same `hash_tile` function and bytes as the log process (`tlog.server.tiles`), and
nothing else. The
first request it does not answer (a write, a proof, an entry bundle, /metrics,
a refused or unusual request) hands the connection to the log process: its
descriptor, over a Unix socket (SCM_RIGHTS), with every byte read and not yet
answered, once the answers already written have left. The log process then
serves it as if it had accepted it, so every write, error and refusal keeps
its one code path.

What a worker does not do: hold the signing key, write any file, or serve a
tree the log has not published. It opens the hash files read-only and serves
only the sizes the log sends it (each published checkpoint, as it is
published: nothing of an unwitnessed tree, as in the log process). It counts
its requests and sends the counts and latencies to the log process, which
adds them to its own /metrics. It exits when the log process goes away.

A new checkpoint reaches a worker one local message after the log process
serves it, so right after a write a client on another connection may still be
given the previous checkpoint by a worker (as from any cache in front of a
log); the tree it describes is published all the same.

Limits: each process applies the per-client read rate limit to what it
answers (as the log declares it, `tlog.server.limits`), so a client spread
over N+1 processes may get up to N+1 times the configured read rate (writes
are limited exactly: they are all answered by the log process). Workers need
plain HTTP (a TLS session cannot move between processes): terminate TLS in
front of the log to use them.

The port is checked free (an exclusive bind) before the log listens with
SO_REUSEPORT, so a second log cannot join it by mistake. Connections still in
a worker's accept queue when it dies are reset by the kernel (as they would be
if a single process died); clients reconnect and reach a live process.

Messages on the Unix socket (SOCK_SEQPACKET, one message each; neither side
ever blocks on it: each queues what the other has not taken yet):
  log -> worker:  b"S" + size (8 bytes, big-endian) + checkpoint note; only the
                  latest is kept for a worker that is slow to read
  worker -> log:  b"D" + up to 60 KiB of a hand-off's pending bytes, repeated,
                  then b"H" + their total length (4 bytes) with the connection's
                  descriptor (last, so a cut hand-off never leaves one behind)
                  b"M" + metrics: JSON [route, status, count] + b"\\n" + float32
                  seconds of each request
"""
from __future__ import annotations

import array
import asyncio
import json
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

from tlog.errors import ConfigError
from tlog.http.fastpath import FastProtocol, FastRoutes
from tlog.http.reply import Reply
from tlog.http.serve import tune_for_serving
from tlog.runtime import children
from tlog.server.config import LogConfig
from tlog.server.limits import read_limits
from tlog.server.tiles import CHECKPOINT_HEADERS, TILE_HEADERS, hash_tile
from tlog.storage.hashfiles import HashFiles

log = logging.getLogger("oap.tlog.readworkers")

CHUNK = 60 * 1024
MAX_MESSAGE = 1 << 18
"""The largest checkpoint message a worker reads (a channel message is at most ~200 KiB)."""
MAX_PENDING = 1 << 20
"""Bytes a worker may hand over with a connection (a head and a body it read ahead)."""
MAX_QUEUED = 8 << 20
"""Bytes a worker queues for a log process that is not reading before it refuses hand-offs."""
METRICS_EVERY = 1.0
"""Seconds between a worker's metrics messages (the log's /metrics lags by this much)."""


# --- the log process's side ------------------------------------------------------------


class _Child:
    """One worker process and the log's end of its channel."""

    def __init__(self, proc: subprocess.Popen, chan: socket.socket) -> None:
        self.proc, self.chan = proc, chan
        self.pending = bytearray()  # "D" bytes of the hand-off in transfer
        self.state: bytes | None = None  # the latest "S" message, until the channel takes it
        self.writing = False
        self.ready = False
        self.lost = False


class ReadWorkers:
    """Starts the workers, sends them each published checkpoint, adopts their hand-offs."""

    def __init__(self, cfg: LogConfig, appender, metrics) -> None:
        """`appender`: its published states are sent on; `metrics`: a `tlog.http.metrics.RequestMetrics`."""
        self.cfg = cfg
        self.appender = appender
        self.metrics = metrics
        self.site: Any = None  # the fast-path site, set by start()
        self.children: list[_Child] = []
        self._tasks: set[asyncio.Task] = set()
        self._stopping = False
        self.adopted = 0  # connections handed over by workers (tests, debugging)

    async def start(self, site, host: str, port: int) -> None:
        self.site = site
        loop = asyncio.get_running_loop()
        for _ in range(self.cfg.read_workers):
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            ours.setblocking(False)
            args = json.dumps({"hashes": str(self.cfg.data_dir / "hashes"), "host": host, "port": port,
                               "map_window": self.cfg.map_window_mb << 20,
                               "fd": theirs.fileno(), "header_timeout": self.cfg.header_timeout,
                               "rate_limit_read": self.cfg.rate_limit_read,
                               "rate_limit_read_burst": self.cfg.rate_limit_read_burst,
                               "rate_limit_tiles": self.cfg.rate_limit_tiles,
                               "trusted_proxies": self.cfg.trusted_proxies,
                               "minimum_index": self.cfg.minimum_index})
            proc = children.popen([sys.executable, "-m", "tlog.server.readworkers", args], death_signal=signal.SIGTERM,
                                  pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
            theirs.close()
            child = _Child(proc, ours)
            self.children.append(child)
            loop.add_reader(ours.fileno(), self._on_message, child)
        self.appender.on_publish.append(self._send_state)
        if self.appender.published:
            self._send_state(self.appender.state)
        # A worker is serving once it listens; wait for each to say so (or to fail).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(c.ready or c.lost for c in self.children):
            await asyncio.sleep(0.02)
        if not all(c.ready for c in self.children):
            codes = [c.proc.poll() for c in self.children]
            await self.stop()
            raise ConfigError(f"read workers did not start (exit codes {codes})")
        log.info("%d read worker(s) serving on port %d", len(self.children), port)

    # --- checkpoints to the workers ---

    def _send_state(self, state) -> None:
        msg = b"S" + struct.pack(">Q", state.size) + state.note.encode()
        for child in self.children:
            if not child.lost:
                child.state = msg
                self._flush_state(child)

    def _flush_state(self, child: _Child) -> None:
        loop = asyncio.get_running_loop()
        if child.state is not None and not child.lost:
            try:
                child.chan.send(child.state)
                child.state = None
            except BlockingIOError:  # the worker is behind: the newest state goes when it reads
                if not child.writing:
                    child.writing = True
                    loop.add_writer(child.chan.fileno(), self._flush_state, child)
                return
            except (BrokenPipeError, ConnectionResetError):
                return self._lost(child)
            except OSError as e:  # e.g. a note larger than the channel takes: the worker keeps the last
                log.error("read worker pid %d missed checkpoint: %s", child.proc.pid, e)
                child.state = None
        if child.writing:
            child.writing = False
            loop.remove_writer(child.chan.fileno())

    # --- from the workers ---

    def _on_message(self, child: _Child) -> None:
        for _ in range(64):
            try:
                data, fds, _, _ = socket.recv_fds(child.chan, CHUNK + 16, 1)
            except BlockingIOError:
                return
            except OSError as e:
                log.error("read worker channel failed: %s", e)
                return self._lost(child)
            if not data and not fds:
                return self._lost(child)
            try:
                self._dispatch(child, data, fds)
            except Exception as e:  # noqa: BLE001 - a bad message: dropped (and its descriptor), never the loop
                log.error("bad message from a read worker: %s: %s", type(e).__name__, e)

    def _dispatch(self, child: _Child, data: bytes, fds: list[int]) -> None:
        kind = data[:1]
        if kind == b"H":  # the end of a hand-off, adopted or not: the next one starts clean
            pending, child.pending = bytes(child.pending), bytearray()
            if len(fds) == 1 and len(data) == 5:
                self._adopt(fds[0], pending, struct.unpack(">I", data[1:])[0])
                return
        for fd in fds:  # only "H" carries a descriptor
            os.close(fd)
        if fds:
            raise ValueError(f"a descriptor with message {kind!r}")
        if kind == b"D":
            if len(child.pending) + len(data) - 1 > MAX_PENDING:
                child.pending = bytearray()
                raise ValueError("hand-off larger than MAX_PENDING")
            child.pending += data[1:]
        elif kind == b"M":
            head, _, secs = data[1:].partition(b"\n")
            route, status, count = json.loads(head)
            seconds = array.array("f", secs)
            if len(seconds) != count:
                raise ValueError("metrics message cut short")
            self.metrics.record_many(str(route), int(status), seconds)
        elif kind == b"R":
            child.ready = True
        else:
            raise ValueError(f"unexpected message {kind!r}")

    def _adopt(self, fd: int, pending: bytes, total: int) -> None:
        """Serve a handed-over connection (the descriptor is ours to close from here on)."""
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            os.close(fd)
            raise
        if sock.type != socket.SOCK_STREAM or len(pending) != total:
            sock.close()
            raise ValueError("hand-off of a non-stream descriptor, or with bytes missing")
        sock.setblocking(False)
        self.adopted += 1
        task = asyncio.create_task(self._serve(sock, pending))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, sock: socket.socket, pending: bytes) -> None:
        site = self.site
        if site is None:  # stopping before start: nothing can serve it
            sock.close()
            return
        try:
            await site.adopt(sock, pending)
        except OSError:  # the client is already gone
            sock.close()

    def _lost(self, child: _Child) -> None:
        if child.lost:
            return
        child.lost = True
        loop = asyncio.get_running_loop()
        loop.remove_reader(child.chan.fileno())
        if child.writing:
            loop.remove_writer(child.chan.fileno())
        child.chan.close()
        if not self._stopping:
            log.error("read worker pid %d is gone; the other processes serve its share", child.proc.pid)
        task = asyncio.create_task(self._reap(child))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reap(self, child: _Child) -> None:
        """Wait for a worker that closed its channel (it exits right after), so no zombie stays."""
        deadline = time.monotonic() + 10
        while child.proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if child.proc.poll() is None:
            child.proc.kill()
            await asyncio.to_thread(child.proc.wait)
        if not self._stopping:
            log.error("read worker pid %d exited with %s", child.proc.pid, child.proc.returncode)

    async def stop(self) -> None:
        """Stop the workers (their open connections close; clients reconnect to the log process)."""
        self._stopping = True
        if self._send_state in self.appender.on_publish:
            self.appender.on_publish.remove(self._send_state)
        for child in self.children:
            if child.proc.poll() is None:
                child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while any(c.proc.poll() is None for c in self.children) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for child in self.children:
            if child.proc.poll() is None:
                child.proc.kill()
                await asyncio.to_thread(child.proc.wait)
            # The worker has exited: all it sent is in the channel, then EOF. Read it all
            # (its last hand-offs and counts) before closing our end.
            for _ in range(100_000):
                if child.lost:
                    break
                self._on_message(child)
            self._lost(child)
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)


# --- a worker process ------------------------------------------------------------------


class _Worker:
    def __init__(self, opts: dict) -> None:
        self.chan = socket.socket(fileno=opts["fd"])
        self.chan.setblocking(False)
        self.hashes = HashFiles(Path(opts["hashes"]), window=opts["map_window"])
        self.size = -1  # nothing published yet: every request goes to the log process
        self.note = b""
        self.metrics: dict[tuple[str, int], list[float]] = {}
        self.out: deque[tuple[bytes, int | None]] = deque()  # messages the channel has not taken yet
        self.out_bytes = 0
        self.writing = False
        self.stop = asyncio.Event()
        self.opts = opts

    def checkpoint(self, rest: str = "", accept: str = "") -> Reply | None:
        return Reply(self.note, CHECKPOINT_HEADERS) if self.size >= 0 else None

    def tile(self, path: str, accept: str = "") -> Reply | None:
        if self.size < 0:
            return None
        data = hash_tile(self.hashes, lambda: self.size, path, self.opts["minimum_index"])
        return None if data is None else Reply(data, TILE_HEADERS)

    def record(self, route: str, status: int, seconds: float) -> None:
        self.metrics.setdefault((route, status), []).append(seconds)

    def on_message(self) -> None:
        """Every state the log process sent; the largest size wins."""
        while True:
            try:
                data, _, flags, _ = self.chan.recvmsg(MAX_MESSAGE)
            except BlockingIOError:
                return
            except OSError:
                data, flags = b"", 0
            if flags & socket.MSG_TRUNC:  # never serve a cut checkpoint
                log.error("read worker: a checkpoint message larger than %d bytes was dropped", MAX_MESSAGE)
                continue
            if not data:  # the log process is gone
                self.stop.set()
                asyncio.get_running_loop().remove_reader(self.chan.fileno())
                return
            if data[:1] == b"S" and len(data) > 9:
                size = struct.unpack(">Q", data[1:9])[0]
                if size >= self.size:
                    self.size, self.note = size, data[9:]

    def send_metrics(self) -> None:
        if self.metrics and self.out_bytes >= MAX_QUEUED:  # the log process is not reading: dropped
            self.metrics = {}
        if self.metrics:
            groups, self.metrics = list(self.metrics.items()), {}
            for (route, status), secs in groups:
                for k in range(0, len(secs), 8192):  # each message well under the channel's limit
                    chunk = secs[k : k + 8192]
                    self._queue(b"M" + json.dumps([route, status, len(chunk)]).encode() + b"\n"
                                + array.array("f", chunk).tobytes())
        if not self.stop.is_set():
            asyncio.get_running_loop().call_later(METRICS_EVERY, self.send_metrics)

    def _queue(self, msg: bytes, fd: int | None = None) -> None:
        self.out.append((msg, fd))
        self.out_bytes += len(msg)
        self._flush()

    def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        while self.out:
            msg, fd = self.out[0]
            try:
                if fd is None:
                    self.chan.send(msg)
                else:
                    socket.send_fds(self.chan, [msg], [fd])
            except BlockingIOError:  # sent when the log process has read some
                if not self.writing:
                    self.writing = True
                    loop.add_writer(self.chan.fileno(), self._flush)
                return
            except (BrokenPipeError, ConnectionResetError) as e:  # the log process is gone
                log.warning("read worker: the log process is gone: %s", e)
                for _, f in self.out:
                    if f is not None:
                        os.close(f)
                self.out.clear()
                self.out_bytes = 0
                self.stop.set()
                break
            except OSError as e:  # this message only (e.g. ENOBUFS): a cut hand-off is refused whole
                log.warning("read worker: a message to the log process failed: %s", e)
            self.out.popleft()
            self.out_bytes -= len(msg)
            if fd is not None:
                os.close(fd)
        if self.writing:
            self.writing = False
            loop.remove_writer(self.chan.fileno())

    def hand_off(self, sock, pending: bytes) -> bool:
        """Queue a connection for the log process: its pending bytes, then its descriptor."""
        if len(pending) > MAX_PENDING or self.out_bytes > MAX_QUEUED or self.stop.is_set():
            return False
        fd = os.dup(sock.fileno())  # the transport closes its own; this one goes to the log
        for at in range(0, len(pending), CHUNK):
            self._queue(b"D" + pending[at : at + CHUNK])
        self._queue(b"H" + struct.pack(">I", len(pending)), fd)
        return True

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        # The log process stops its workers (SIGTERM) after its own signal, so a Ctrl-C at
        # a terminal, which reaches the whole process group, does not look like a crash.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        loop.add_signal_handler(signal.SIGTERM, self.stop.set)
        loop.add_reader(self.chan.fileno(), self.on_message)
        opts = self.opts
        limits = read_limits(opts["rate_limit_read"], opts["rate_limit_read_burst"], tiles=opts["rate_limit_tiles"])
        routes = FastRoutes({"/checkpoint": ("/checkpoint", self.checkpoint), "/tile/": ("/tile/{path}", self.tile)},
                            limits=limits, record=self.record, trusted_proxies=opts["trusted_proxies"])
        conns: set = set()
        server = await loop.create_server(
            lambda: _WorkerProtocol(self, routes, conns, opts["header_timeout"]),
            opts["host"], opts["port"], reuse_address=True, reuse_port=True)
        tune_for_serving()
        self._queue(b"R")
        loop.call_later(METRICS_EVERY, self.send_metrics)
        await self.stop.wait()
        server.close()
        for c in list(conns):
            c.close()
        self.send_metrics()
        deadline = time.monotonic() + 5
        while self.out and time.monotonic() < deadline:  # the last hand-offs and counts
            await asyncio.sleep(0.01)

    def when_flushed(self, transport: asyncio.Transport, rest: bytes, deadline: float) -> None:
        """Hand the connection over once the answers written here have left (order on the wire)."""
        if transport.is_closing():
            return
        if transport.get_write_buffer_size():
            if time.monotonic() > deadline:  # the client does not read its answers
                transport.abort()
                return
            asyncio.get_running_loop().call_later(0.002, self.when_flushed, transport, rest, deadline)
            return
        try:
            self.hand_off(transport.get_extra_info("socket"), rest)
        except OSError as e:  # e.g. out of descriptors: the client sees a close
            log.warning("read worker: could not hand a connection over: %s", e)
        transport.abort()  # our descriptor; if the hand-off was refused, the client sees a close


class _WorkerProtocol(FastProtocol):
    """A fast-path connection whose hand-off goes to the log process, not to aiohttp."""

    def __init__(self, worker: _Worker, routes: FastRoutes, conns: set, timeout: float) -> None:
        super().__init__(None, routes, conns, timeout)  # type: ignore[arg-type]  # no aiohttp here
        self._worker = worker

    def _handoff(self, rest: bytes) -> None:
        transport = self._transport
        self._drop()
        if transport is None or transport.is_closing():
            return
        transport.pause_reading()
        self._routes.handed_off += 1
        self._worker.when_flushed(transport, rest, time.monotonic() + self._timeout)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    opts = json.loads(sys.argv[1])
    asyncio.run(_Worker(opts).run())


if __name__ == "__main__":
    main()
