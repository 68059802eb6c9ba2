"""Running a service: listen (with the fast path), print the banner, stop cleanly on a signal.

One serve loop for all three services. TLS contexts, the port check for
SO_REUSEPORT listeners and the interpreter settings of a long-running server live here.
"""
from __future__ import annotations

import asyncio
import errno
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from tlog.errors import ConfigError
from tlog.http.fastpath import FAST_ROUTES_KEY, FastSite
from tlog.transport import server_ssl_context

log = logging.getLogger("oap.http")


async def serve_until_signal(app: web.Application, *, host: str, port: int, header_timeout: float,
                             tls_cert=None, tls_key=None, banner: Callable[[str], list[str]],
                             drain: Callable[[], Awaitable[None]] | None = None,
                             close: Callable[[], object] | None = None,
                             helpers=None, reload: Callable[[], object] | None = None) -> None:
    """Run a service until SIGINT/SIGTERM/SIGHUP: the one serve loop of all three services.

    Prints `banner(url)` once listening (the last line starts with "data:",
    which scripts and tests wait for). On a signal: stop accepting, `drain`
    (finish queued work while in-flight requests complete), wait for the
    handlers, then `close`.

    `helpers` (the log's read workers, `tlog.server.readworkers.ReadWorkers`) share the port:
    started once it is bound, stopped first. `reload`: a service that re-reads part of its
    configuration (the witness's logs and their keys) does so on SIGHUP instead of stopping.
    """
    import signal
    import sys

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # SIGHUP too: a closed terminal stops the service as cleanly as Ctrl-C, unless it reloads
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # before the banner: callers may signal right after it
        loop.add_signal_handler(sig, stop.set)
    if reload is not None:
        loop.add_signal_handler(signal.SIGHUP, reload)
    runner: web.AppRunner | None = None
    started = False
    try:
        ctx = server_ssl_context(tls_cert, tls_key)
        runner = await start_app(app, host, port, header_timeout=header_timeout, ssl_context=ctx,
                                 reuse_port=helpers is not None)
        bound = runner.addresses[0][1] if runner.addresses else port
        if helpers is not None:
            await helpers.start(next(iter(runner.sites)), host, bound)
        started = True
        tune_for_serving()
        for line in banner(f"{'https' if ctx else 'http'}://{host}:{bound}"):
            print(line)
        sys.stdout.flush()
        await stop.wait()
        log.info("stopping: finishing queued work")
    finally:
        # Also when starting failed (a busy port): the service's threads must stop, or the
        # process would hang on them instead of exiting with the error.
        if helpers is not None and started:
            await helpers.stop()
        if runner is not None:
            await runner.shutdown()
        if drain is not None:
            await drain()
        if runner is not None:
            await runner.cleanup()
        if close is not None:
            close()
    print("stopped cleanly", flush=True)


def tune_for_serving() -> None:
    """Interpreter settings for a long-running service, once it is set up.

    - `gc.freeze()`: everything built at start (modules, the app, caches) leaves the
      cyclic collector's view. Each full collection otherwise walked all of it while the
      loop stood still: single appends had a p99 of 63-70 ms, 31-44 ms with it
      (`benchmarks/run.py --only http_appends`, A/B on the same machine). The cost: a
      reference cycle among those objects is never collected (they live as long as
      the process anyway).
    - A 0.5 ms switch interval: a writer thread (the log's appender, the witness's and
      registry's batch commits) needs the GIL back after every fsync and SQLite call;
      with the event loop busy it waited up to 5 ms (the default) each time.
    - glibc's malloc keeps blocks up to 32 MiB in its heap, and up to 32 MiB of it free for
      reuse (`_keep_large_blocks`).
    """
    import gc
    import sys

    gc.collect()
    gc.freeze()
    sys.setswitchinterval(0.0005)
    _keep_large_blocks()


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc <malloc.h>
MALLOC_SETTINGS = ((_M_MMAP_THRESHOLD, 32 << 20), (_M_TRIM_THRESHOLD, 32 << 20))


def _keep_large_blocks() -> None:
    """A batched proof answer allocates and frees buffers of 1-2 MB per 2,048 proofs (numpy
    arrays, the encoded bytes). glibc gives blocks that large their own mmap, or, once its
    dynamic threshold has risen, hands the freed top of the heap back beyond twice that
    threshold, so chunk after chunk paid for fresh zeroed pages: page faults were about a
    third of the log's CPU under the batched-proof load (perf). Fixed thresholds keep blocks
    up to 32 MiB in the heap, and up to 32 MiB of freed heap (per arena) for reuse: 15-23 %
    more batched proofs per second in A/B runs on one machine. The settings are
    process-wide (every thread's arena). Thresholds an operator set
    (`GLIBC_TUNABLES=glibc.malloc.*_threshold=...`, `MALLOC_MMAP_THRESHOLD_`,
    `MALLOC_TRIM_THRESHOLD_`) are left alone; other C libraries: nothing to do."""
    import ctypes
    import os
    import platform

    if platform.libc_ver()[0] != "glibc":
        return
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if ("threshold" in tunables or os.environ.get("MALLOC_MMAP_THRESHOLD_") is not None
            or os.environ.get("MALLOC_TRIM_THRESHOLD_") is not None):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no mallopt: leave malloc as it is
        return
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if not all(mallopt(param, value) == 1 for param, value in MALLOC_SETTINGS):
        log.warning("glibc refused the malloc thresholds; large answers will be slower")


async def start_app(app: web.Application, host: str, port: int, *, header_timeout: float = 15.0,
                    ssl_context=None, reuse_port: bool = False) -> web.AppRunner:
    """Listen with `app` (and its fast routes, `tlog.http.fastpath`, if it has any); returns the runner.

    `reuse_port`: other processes of this user may listen on the port too (the log's read workers).
    """
    if reuse_port:
        port = free_port(host, port)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, keepalive_timeout=header_timeout)
    await runner.setup()
    site = FastSite(runner, host, port, routes=app.get(FAST_ROUTES_KEY), timeout=header_timeout,
                    reuse_address=True, ssl_context=ssl_context, reuse_port=reuse_port or None)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        if e.errno == errno.EADDRINUSE:
            raise PortInUse(host, port) from None
        raise
    return runner


class PortInUse(ConfigError):
    """The port is taken: the message names the process listening on it, where this user can see it."""

    def __init__(self, host: str, port: int) -> None:
        holder = port_holder(port)
        super().__init__(f"{host}:{port} is already in use" + (f" by {holder}" if holder else "")
                         + "; stop that process or choose another port (--port)")


def port_holder(port: int) -> str | None:
    """"pid N (command line)" of a process listening on TCP `port`, from /proc (Linux), else None."""
    import os

    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                        inodes.add(cols[9])
        except (OSError, StopIteration, IndexError, ValueError):
            continue
    if not inodes:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in targets for fd in fds):
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                return f"pid {pid} ({cmd[:120]})"
        except OSError:
            continue
    return None


def free_port(host: str, port: int) -> int:
    """`port` (or, for 0, one the kernel picks) after checking no one listens on it.

    A listener with SO_REUSEPORT shares its port with any later one of the same user
    that sets it too: a second log started on the same port by mistake would get half
    the connections. An exclusive bind first makes that an "address in use" error
    (after 2 s of retries: the read workers of a log that was just killed exit when
    they notice, a few milliseconds later).
    """
    import socket

    # Every address the listener will bind, as asyncio resolves them ("" is every interface).
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    addrs = list(dict.fromkeys((f, k, p, a) for f, k, p, _, a in infos))
    for attempt in range(40):  # the workers of a log killed a moment ago exit on their own
        probes: list = []
        try:
            chosen = port
            for family, kind, proto, addr in addrs:
                probe = socket.socket(family, kind, proto)
                probes.append(probe)
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is not a listener
                if family == socket.AF_INET6:  # as asyncio binds it
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                probe.bind((addr[0], chosen, *addr[2:]))
                chosen = probe.getsockname()[1]  # port 0: the others on the port the first got
            return chosen
        except OSError as e:
            if e.errno != errno.EADDRINUSE or attempt == 39:
                raise
            time.sleep(0.05)
        finally:
            for probe in probes:
                probe.close()
    raise AssertionError("unreachable")
