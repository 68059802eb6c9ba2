"""Read workers: more processes answering the log's tile and checkpoint reads on its port.

One Python process answers some 15-30k tile reads a second on this kind of
machine, all of it on one core (benchmarks/README.md). The log's writes must
stay in one process (one sequencer, one signing key), but what clients poll
in bulk does not need it: a full tile is immutable bytes of the hash files,
and the checkpoint is one small signed note.

With `read_workers = N` the log starts N worker processes that listen on the
same address (SO_REUSEPORT: the kernel spreads new connections over every
listener, and only processes of the same user may join). A worker answers
`GET /checkpoint` and hash tiles on the fast path (`tlog.fastpath`), with the
same `hash_tile` function and bytes as the log process, and nothing else. The
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

Limits: each process applies the per-client read rate limit to what it
answers, so a client spread over N+1 processes may get up to N+1 times the
configured read rate (writes are limited exactly: they are all answered by
the log process). Workers need plain HTTP (a TLS session cannot move between
processes): terminate TLS in front of the log to use them.

Messages on the Unix socket (SOCK_SEQPACKET, one message each):
  log -> worker:  b"S" + size (8 bytes, big-endian) + checkpoint note
  worker -> log:  b"H" + total length of the pending bytes (4 bytes), with the
                  connection's descriptor; then b"D" + up to 60 KiB of them,
                  until that length
                  b"M" + metrics: JSON [[route, status, count]...] + b"\\n" +
                  float32 seconds of each, in the same order
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
from pathlib import Path

from .config import ConfigError, LogConfig

log = logging.getLogger("oap.tlog.readworkers")

CHUNK = 60 * 1024
MAX_PENDING = 1 << 20
"""Bytes a worker may hand over with a connection (a head and a body it read ahead)."""
METRICS_EVERY = 1.0
"""Seconds between a worker's metrics messages (the log's /metrics lags by this much)."""


# --- the log process's side ------------------------------------------------------------


class ReadWorkers:
    """Starts the workers, sends them each published checkpoint, adopts their hand-offs."""

    def __init__(self, cfg: LogConfig, sequencer, record) -> None:
        """`sequencer`: its published state is sent on; `record(route, status, seconds)`: request metrics."""
        self.cfg = cfg
        self.sequencer = sequencer
        self.record = record
        self.site = None
        self._procs: list[subprocess.Popen] = []
        self._chans: list[socket.socket] = []
        self._incoming: dict[int, tuple[int, int, bytearray]] = {}  # channel fd: (conn fd, total, bytes)
        self._tasks: set[asyncio.Task] = set()
        self._ready: set[int] = set()  # channels whose worker listens
        self.adopted = 0  # connections handed over by workers (tests, debugging)

    async def start(self, site, host: str, port: int) -> None:
        self.site = site
        loop = asyncio.get_running_loop()
        for _ in range(self.cfg.read_workers):
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            ours.setblocking(False)
            args = json.dumps({"hashes": str(self.cfg.data_dir / "hashes"), "host": host, "port": port,
                               "fd": theirs.fileno(), "header_timeout": self.cfg.header_timeout,
                               "rate_limit_read": self.cfg.rate_limit_read,
                               "rate_limit_read_burst": self.cfg.rate_limit_read_burst,
                               "trust_forwarded_for": self.cfg.trust_forwarded_for})
            proc = subprocess.Popen([sys.executable, "-m", "tlog.readworkers", args], pass_fds=[theirs.fileno()],
                                    stdin=subprocess.DEVNULL)
            theirs.close()
            self._procs.append(proc)
            self._chans.append(ours)
            loop.add_reader(ours.fileno(), self._on_message, ours)
        self.sequencer.on_publish.append(self._send_state)
        if self.sequencer.published:
            self._send_state(self.sequencer.state)
        # A worker is serving once it listens; wait for each to say so (or to fail).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(p.poll() is None for p in self._procs) \
                and len(self._ready) < len(self._procs):
            await asyncio.sleep(0.02)
        dead = [p.returncode for p in self._procs if p.poll() is not None]
        if dead or len(self._ready) < len(self._procs):
            await self.stop()
            raise ConfigError(f"read workers did not start (exit codes {dead})")
        log.info("%d read worker(s) serving on port %d", len(self._procs), port)

    def _send_state(self, state) -> None:
        msg = b"S" + struct.pack(">Q", state.size) + state.note.encode()
        for chan in self._chans:
            try:
                chan.send(msg)
            except (BlockingIOError, OSError) as e:  # a stuck worker serves the older checkpoint
                log.warning("read worker missed checkpoint %d: %s", state.size, e)

    def _on_message(self, chan: socket.socket) -> None:
        for _ in range(64):
            try:
                data, fds, _, _ = socket.recv_fds(chan, CHUNK + 16, 1)
            except BlockingIOError:
                return
            except OSError as e:
                log.error("read worker channel failed: %s", e)
                return self._lost(chan)
            if not data and not fds:
                return self._lost(chan)
            try:
                self._dispatch(chan, data, fds)
            except Exception as e:  # a bad message: drop it (and any descriptor), never the loop
                log.error("bad message from a read worker: %s", e)
                for fd in fds:
                    os.close(fd)

    def _dispatch(self, chan: socket.socket, data: bytes, fds: list[int]) -> None:
        kind = data[:1]
        if kind == b"R":
            self._ready.add(chan.fileno())
        elif kind == b"H" and len(fds) == 1 and len(data) == 5:
            total = struct.unpack(">I", data[1:])[0]
            if chan.fileno() in self._incoming:  # the previous one was cut short
                os.close(self._incoming.pop(chan.fileno())[0])
            self._incoming[chan.fileno()] = (fds[0], total, bytearray())
            fds = []
            self._maybe_adopt(chan)
        elif kind == b"D" and not fds and chan.fileno() in self._incoming:
            self._incoming[chan.fileno()][2].extend(data[1:])
            self._maybe_adopt(chan)
        elif kind == b"M" and not fds:
            head, _, secs = data[1:].partition(b"\n")
            seconds = array.array("f", secs)
            at = 0
            for route, status, count in json.loads(head):
                for s in seconds[at : at + count]:
                    self.record(route, status, s)
                at += count
        else:
            raise ValueError(f"unexpected message {kind!r} with {len(fds)} descriptor(s)")
        for fd in fds:
            os.close(fd)

    def _maybe_adopt(self, chan: socket.socket) -> None:
        fd, total, got = self._incoming[chan.fileno()]
        if len(got) < total:
            return
        del self._incoming[chan.fileno()]
        sock = socket.socket(fileno=fd)
        if sock.type != socket.SOCK_STREAM:
            sock.close()
            raise ValueError("handed a descriptor that is not a stream socket")
        sock.setblocking(False)
        self.adopted += 1
        task = asyncio.create_task(self._adopt(sock, bytes(got)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _adopt(self, sock: socket.socket, pending: bytes) -> None:
        try:
            await self.site.adopt(sock, pending)
        except OSError:  # the client is already gone
            sock.close()

    def _lost(self, chan: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(chan.fileno())
        if chan.fileno() in self._incoming:
            os.close(self._incoming.pop(chan.fileno())[0])
        if chan in self._chans:
            i = self._chans.index(chan)
            log.error("read worker %d (pid %d) exited with %s; the log process serves its share",
                      i, self._procs[i].pid, self._procs[i].poll())
        chan.close()
        self._chans = [c for c in self._chans if c is not chan]

    async def stop(self) -> None:
        """Stop the workers (their open connections close; clients reconnect to the log process)."""
        if self._send_state in self.sequencer.on_publish:
            self.sequencer.on_publish.remove(self._send_state)
        loop = asyncio.get_running_loop()
        for chan in self._chans:
            loop.remove_reader(chan.fileno())
        for p in self._procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while any(p.poll() is None for p in self._procs) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for p in self._procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for chan in self._chans:
            chan.close()
        for fd, _, _ in self._incoming.values():
            os.close(fd)
        self._chans, self._incoming = [], {}


# --- a worker process ------------------------------------------------------------------


class _Worker:
    def __init__(self, opts: dict) -> None:
        from .hashfiles import HashFiles
        from .server import CHECKPOINT_HEADERS, hash_tile

        self.chan = socket.socket(fileno=opts["fd"])
        self.chan.settimeout(10)  # sends block briefly if the log process is slow to read
        self.hashes = HashFiles(Path(opts["hashes"]))
        self.size = -1  # nothing published yet: every request goes to the log process
        self.note = b""
        self.metrics: dict[tuple[str, int], list[float]] = {}
        self._checkpoint_headers = CHECKPOINT_HEADERS
        self._hash_tile = hash_tile
        self.opts = opts

    def checkpoint(self, rest: str = "", accept: str = ""):
        from .fastpath import Reply

        return Reply(self.note, self._checkpoint_headers) if self.size >= 0 else None

    def tile(self, path: str, accept: str = ""):
        if self.size < 0:
            return None
        return self._hash_tile(self.hashes, lambda: self.size, path)

    def record(self, route: str, status: int, seconds: float) -> None:
        self.metrics.setdefault((route, status), []).append(seconds)

    def on_message(self) -> None:
        try:
            data = self.chan.recv(1 << 16)
        except (BlockingIOError, socket.timeout):
            return
        except OSError:
            data = b""
        if not data:  # the log process is gone
            self.stop.set()
            return
        if data[:1] == b"S" and len(data) > 9:
            size = struct.unpack(">Q", data[1:9])[0]
            if size >= self.size:
                self.size, self.note = size, data[9:]

    def send_metrics(self) -> None:
        if self.metrics:
            groups, self.metrics = list(self.metrics.items()), {}
            for at in range(0, len(groups), 16):
                part = groups[at : at + 16]
                for (route, status), secs in part:
                    for k in range(0, len(secs), 8192):  # each message stays under the socket's limit
                        chunk = secs[k : k + 8192]
                        self._send(b"M" + json.dumps([[route, status, len(chunk)]]).encode() + b"\n"
                                   + array.array("f", chunk).tobytes())
        asyncio.get_running_loop().call_later(METRICS_EVERY, self.send_metrics)

    def _send(self, msg: bytes, fds: list[int] = ()) -> bool:
        try:
            if fds:
                socket.send_fds(self.chan, [msg], list(fds))
            else:
                self.chan.send(msg)
            return True
        except OSError as e:
            log.warning("read worker: could not reach the log process: %s", e)
            return False

    def hand_off(self, sock: socket.socket, pending: bytes) -> bool:
        if len(pending) > MAX_PENDING:
            return False
        if not self._send(b"H" + struct.pack(">I", len(pending)), [sock.fileno()]):
            return False
        for at in range(0, len(pending), CHUNK):
            if not self._send(b"D" + pending[at : at + CHUNK]):
                return False
        return True

    async def run(self) -> None:
        from .fastpath import FastProtocol, FastRoutes
        from .limits import RateLimiter

        loop = asyncio.get_running_loop()
        self.stop = asyncio.Event()
        # The log process stops its workers (SIGTERM) after its own signal, so a Ctrl-C at
        # a terminal, which reaches the whole process group, does not look like a crash.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        loop.add_signal_handler(signal.SIGTERM, self.stop.set)
        loop.add_reader(self.chan.fileno(), self.on_message)
        opts = self.opts
        limiter = None
        if opts["rate_limit_read"] > 0:
            limiter = RateLimiter(opts["rate_limit_read"], opts["rate_limit_read_burst"])
        routes = FastRoutes({"/checkpoint": ("/checkpoint", self.checkpoint), "/tile/": ("/tile/{path}", self.tile)},
                            limiter=limiter, record=self.record, trust_forwarded_for=opts["trust_forwarded_for"])
        conns: set = set()
        worker = self

        class WorkerProtocol(FastProtocol):
            """A fast-path connection whose hand-off goes to the log process, not to aiohttp."""

            def _handoff(self, rest: bytes) -> None:
                transport = self._transport
                self._drop()
                if transport is None or transport.is_closing():
                    return
                transport.pause_reading()
                routes.handed_off += 1
                worker.when_flushed(transport, rest, time.monotonic() + opts["header_timeout"])

        server = await loop.create_server(
            lambda: WorkerProtocol(None, routes, conns, opts["header_timeout"]),  # type: ignore[arg-type]
            opts["host"], opts["port"], reuse_address=True, reuse_port=True)
        from .http import tune_for_serving

        tune_for_serving()
        self._send(b"R")
        loop.call_later(METRICS_EVERY, self.send_metrics)
        await self.stop.wait()
        server.close()
        for c in list(conns):
            c.close()
        self.send_metrics()

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
        sock = transport.get_extra_info("socket")
        if not self.hand_off(sock, rest):
            transport.abort()
            return
        transport.abort()  # our copy of the descriptor: the log process holds the connection now


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    opts = json.loads(sys.argv[1])
    asyncio.run(_Worker(opts).run())


if __name__ == "__main__":
    main()
