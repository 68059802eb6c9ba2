"""The thin HTTP layer shared by every service (aiohttp).

`error_middleware` is the one place errors become responses: an `OAPError`
becomes its status with `{"error": <App. B code>, "message": ...}`; aiohttp's
own 4xx (unknown route, bad method, oversize body) are given OAP codes too;
anything else is logged and answered 500 without a traceback.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import cbor2
from aiohttp import web

from tlog.formats.canonical import DEFAULT_MAX_DEPTH
from tlog.errors import InvalidInput, OAPError, RequestTimeout, TooLarge, Unavailable, UnsupportedMediaType
from tlog.service.fastpath import FAST_ROUTES_KEY, FastSite, Reply, drop
from tlog.service.limits import client_address
from tlog.formats.strict import MAX_DOCUMENT_ITEMS, loads, loads_member_array

log = logging.getLogger("oap.http")

JSON_TYPES = ("application/oap+json", "application/json")
CBOR_TYPES = ("application/oap+cbor", "application/cbor")
_CODES = {400: "invalid_input", 401: "auth_required", 403: "policy_block", 404: "not_found", 405: "not_found",
          408: "timeout",
          409: "conflict", 411: "invalid_input", 413: "invalid_input", 414: "invalid_input", 415: "invalid_input",
          429: "rate_limited", 431: "invalid_input", 503: "maintenance"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def serve_until_signal(app: web.Application, *, host: str, port: int, header_timeout: float,
                             tls_cert=None, tls_key=None, banner: Callable[[str], list[str]],
                             drain: Callable[[], Awaitable[None]] | None = None,
                             close: Callable[[], object] | None = None,
                             helpers=None) -> None:
    """Run a service until SIGINT/SIGTERM: the one serve loop of all three services.

    Prints `banner(url)` once listening (the last line starts with "data:",
    which scripts and tests wait for). On a signal: stop accepting, `drain`
    (finish queued work while in-flight requests complete), wait for the
    handlers, then `close`.

    `helpers` (the log's read workers, `tlog.server.readworkers.ReadWorkers`) share the port:
    started once it is bound, stopped first.
    """
    import signal
    import sys

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # before the banner: callers may signal right after it
        loop.add_signal_handler(sig, stop.set)
    ctx = server_ssl_context(tls_cert, tls_key)
    runner = await start_app(app, host, port, header_timeout=header_timeout, ssl_context=ctx,
                             reuse_port=helpers is not None)
    bound = runner.addresses[0][1] if runner.addresses else port
    if helpers is not None:
        await helpers.start(next(iter(runner.sites)), host, bound)
    tune_for_serving()
    for line in banner(f"{'https' if ctx else 'http'}://{host}:{bound}"):
        print(line)
    sys.stdout.flush()
    await stop.wait()
    log.info("stopping: finishing queued work")
    if helpers is not None:
        await helpers.stop()
    await runner.shutdown()
    if drain is not None:
        await drain()
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
    - A 0.5 ms switch interval: a writer thread (the log's sequencer, the witness's and
      registry's batch commits) needs the GIL back after every fsync and SQLite call;
      with the event loop busy it waited up to 5 ms (the default) each time.
    """
    import gc
    import sys

    gc.collect()
    gc.freeze()
    sys.setswitchinterval(0.0005)


async def start_app(app: web.Application, host: str, port: int, *, header_timeout: float = 15.0,
                    ssl_context=None, reuse_port: bool = False) -> web.AppRunner:
    """Listen with `app` (and its fast routes, `tlog.service.fastpath`, if it has any); returns the runner.

    `reuse_port`: other processes of this user may listen on the port too (the log's read workers).
    """
    if reuse_port:
        port = free_port(host, port)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, keepalive_timeout=header_timeout)
    await runner.setup()
    site = FastSite(runner, host, port, routes=app.get(FAST_ROUTES_KEY), timeout=header_timeout,
                    reuse_address=True, ssl_context=ssl_context, reuse_port=reuse_port or None)
    await site.start()
    return runner


def free_port(host: str, port: int) -> int:
    """`port` (or, for 0, one the kernel picks) after checking no one listens on it.

    A listener with SO_REUSEPORT shares its port with any later one of the same user
    that sets it too: a second log started on the same port by mistake would get half
    the connections. An exclusive bind first makes that an "address in use" error
    (after 2 s of retries: the read workers of a log that was just killed exit when
    they notice, a few milliseconds later).
    """
    import errno
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


def server_ssl_context(cert, key):
    """TLS for a service (None without a certificate): TLS 1.2 or newer."""
    if cert is None:
        return None
    import ssl

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx


def request_client(request: web.Request, trusted_proxies: int) -> str:
    """`client_address` of an aiohttp request (every X-Forwarded-For header, in order)."""
    forwarded = ",".join(request.headers.getall("X-Forwarded-For", ())) if trusted_proxies else None
    return client_address(request.remote, forwarded, trusted_proxies)


def rate_limit_middleware(limiter, *, trusted_proxies: int = 0,
                          applies: Callable[[web.Request], bool] = lambda request: True):
    """Per-client token bucket for the requests `applies` selects (429 + Retry-After),
    taken before the handler reads a byte of the body."""

    @web.middleware
    async def limit(request: web.Request, handler: Handler) -> web.StreamResponse:
        if applies(request):
            limiter.check(request_client(request, trusted_proxies), "request")
        return await handler(request)

    return limit


def error_response(status: int, code: str, message: str, **extra: Any) -> web.Response:
    body = {"error": code, "message": message, **extra}
    resp = web.json_response(body, status=status)
    if status in (429, 503) and "retry_after" in extra:
        resp.headers["Retry-After"] = str(extra["retry_after"])
    return resp


def error_reply(exc: BaseException) -> tuple[int, Reply]:
    """The answer the error middleware gives for `exc`, for the fast path's POSTs."""
    if isinstance(exc, OAPError):
        resp = error_response(exc.status, exc.code, exc.message, **exc.data)
    else:
        log.error("unhandled error on the fast path", exc_info=exc)
        resp = error_response(500, "internal_error", "internal error")
    return resp.status, Reply(resp.body, tuple(resp.headers.items()))


class RequestMetrics:
    """Per-route request counts and seconds for the error middleware (`on_request`) and the
    fast path (`record`); labelled children are looked up once, since labels() is slow."""

    def __init__(self, requests, seconds=None) -> None:
        """`requests` a Counter by (route, status); `seconds`, optional, a Histogram by route."""
        self._requests, self._seconds = requests, seconds
        self._children: dict[tuple[str, int], tuple] = {}

    def record(self, route: str, status: int, seconds: float) -> None:
        c = self._children.get((route, status)) or self._child(route, status)
        c[0].inc()
        if c[1] is not None:
            c[1].observe(seconds)

    def _child(self, route: str, status: int) -> tuple:
        c = self._children[(route, status)] = (
            self._requests.labels(route, str(status)),
            self._seconds.labels(route) if self._seconds is not None else None)
        return c

    def record_many(self, route: str, status: int, seconds) -> None:
        """`record` for many requests at once (a read worker's report, `tlog.server.readworkers`).

        prometheus_client has no bulk observe; one observe per request would cost the
        log's loop ~2 us each, in a burst per report. So the histogram's buckets are
        counted with numpy and added to its child's bucket values, as observe() would
        (tests compare the exposition with one observe per value). Without those
        internals, it falls back to observe().
        """
        import numpy as np

        secs = np.asarray(seconds, dtype=np.float64)
        if not secs.size:
            return
        counter, hist = self._children.get((route, status)) or self._child(route, status)
        counter.inc(secs.size)
        if hist is None:
            return
        bounds = getattr(hist, "_upper_bounds", None)
        buckets, total = getattr(hist, "_buckets", None), getattr(hist, "_sum", None)
        if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
            for s in secs.tolist():
                hist.observe(s)
            return
        counts = np.bincount(np.searchsorted(np.asarray(bounds, dtype=np.float64), secs, side="left"),
                             minlength=len(bounds) + 1)
        total.inc(float(secs.sum()))
        for i in np.flatnonzero(counts[: len(bounds)]).tolist():
            buckets[i].inc(int(counts[i]))

    def on_request(self, request: web.Request, status: int, seconds: float) -> None:
        resource = request.match_info.route.resource
        self.record(resource.canonical if resource else "unmatched", status, seconds)


def make_error_middleware(on_request: Callable[[web.Request, int, float], None] | None = None):
    @web.middleware
    async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        t0 = time.perf_counter()
        status = 500
        try:
            resp = await handler(request)
            status = resp.status
            return resp
        except OAPError as e:
            status = e.status
            return error_response(e.status, e.code, e.message, **e.data)
        except web.HTTPRequestEntityTooLarge:
            status = 413
            return error_response(413, "invalid_input", "request body too large")
        except web.HTTPException as e:
            status = e.status
            if e.status < 400:
                raise
            code = _CODES.get(e.status, "invalid_input" if e.status < 500 else "internal_error")
            resp = error_response(e.status, code, e.reason or "request refused")
            if e.status == 405 and "Allow" in e.headers:
                resp.headers["Allow"] = e.headers["Allow"]
            return resp
        except Exception:  # a bug: log it, never leak it
            log.exception("unhandled error on %s %s", request.method, request.path)
            return error_response(500, "internal_error", "internal error")
        finally:
            if on_request is not None:
                on_request(request, status, time.perf_counter() - t0)

    return error_middleware


READ_TIMEOUT = 30.0
READ_TIMEOUT_KEY = web.AppKey("read_timeout", float)
LARGE_BODY = 64 * 1024
LARGE_BODIES_KEY = web.AppKey("large_bodies", asyncio.Semaphore)
SMALL_BODY = 4096
"""Bodies up to this size are decoded on the event loop (tens of microseconds); larger
ones on the CPU pool, a bounded group of items per decoder call (`tlog.formats.strict`)."""

_cpu: ThreadPoolExecutor | None = None


async def offload(fn, *args):
    """Run CPU-heavy request work (decoding a large body, checking thousands of
    signatures) on a small thread pool, not on the event loop. The pool is made on
    first use: importing this module starts nothing."""
    global _cpu
    if _cpu is None:
        _cpu = ThreadPoolExecutor(max_workers=2, thread_name_prefix="oap-cpu")
    return await asyncio.get_running_loop().run_in_executor(_cpu, fn, *args)


def large_body_limit(app: web.Application, concurrent: int = 4) -> None:
    """At most `concurrent` bodies over 64 KiB are read and parsed at once (memory bound)."""
    app[LARGE_BODIES_KEY] = asyncio.Semaphore(concurrent)


async def read_body(request: web.Request, cap: int, timeout: float | None = None) -> bytes:
    """The request body: 413 as soon as it exceeds `cap` bytes, 408 if it is slower
    than `timeout` seconds (default: the app's "read_timeout" or 30 s)."""
    if request.content_length is not None and request.content_length > cap:
        raise TooLarge(f"request body over {cap} bytes")
    if timeout is None:
        timeout = request.app.get(READ_TIMEOUT_KEY, READ_TIMEOUT)
    chunks, total = [], 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.content.iter_chunked(65536):
                total += len(chunk)
                if total > cap:
                    raise TooLarge(f"request body over {cap} bytes")
                chunks.append(chunk)
    except TimeoutError:
        raise RequestTimeout(f"request body not received within {timeout:g} s") from None
    return b"".join(chunks)


def _media(content_type: str) -> str:
    return content_type.split(";")[0].strip().lower()


def is_json(content_type: str | None) -> bool:
    """Whether a body of this Content-Type is parsed as JSON (`decode_document`)."""
    return content_type is not None and _media(content_type) in JSON_TYPES


def body_is_cbor(content_type: str | None) -> bool:
    """True for CBOR, False for JSON; 415 for anything else (checked before the body is read)."""
    media = _media(content_type or "")
    if media not in JSON_TYPES + CBOR_TYPES:
        raise UnsupportedMediaType(
            f"Content-Type must be one of {', '.join(JSON_TYPES + CBOR_TYPES)}, not {media or 'none'!r}"
        )
    return media in CBOR_TYPES


async def _read_bounded(request: web.Request, cap: int) -> bytes:
    """The body, read under the app's large-body semaphore when it may exceed 64 KiB."""
    sem = request.app.get(LARGE_BODIES_KEY)
    if sem is not None and cap > LARGE_BODY and (request.content_length or LARGE_BODY + 1) > LARGE_BODY:
        async with sem:
            return await read_body(request, cap)
    return await read_body(request, cap)


async def read_document(request: web.Request, cap: int, *, max_items: int = MAX_DOCUMENT_ITEMS,
                        max_depth: int = DEFAULT_MAX_DEPTH) -> object:
    """Decode a JSON or CBOR body (by Content-Type) with the strict, bounded parsers.

    The media type is checked before a byte is read; the decode runs off the loop
    for bodies over SMALL_BODY.
    """
    cbor = body_is_cbor(request.headers.get("Content-Type"))
    body = await _read_bounded(request, cap)
    return await decode(body, cbor=cbor, max_items=max_items, max_depth=max_depth)


async def decode(body: bytes, *, cbor: bool, max_items: int = MAX_DOCUMENT_ITEMS,
                 max_depth: int = DEFAULT_MAX_DEPTH) -> object:
    """`tlog.formats.strict.loads` on the loop for a small body, on the CPU pool otherwise."""
    if len(body) <= SMALL_BODY:
        return loads(body, cbor=cbor, max_items=max_items, max_depth=max_depth)
    return await offload(lambda: loads(body, cbor=cbor, max_items=max_items, max_depth=max_depth))


async def read_member_array(request: web.Request, cap: int, *, key: str, max_elements: int,
                            max_items: int) -> list:
    """The elements of a body that must be `{key: [...]}` (`tlog.formats.strict.loads_member_array`),
    decoded on the CPU pool a bounded group at a time."""
    cbor = body_is_cbor(request.headers.get("Content-Type"))
    body = await _read_bounded(request, cap)

    def parse() -> list:
        return loads_member_array(body, cbor=cbor, key=key, max_elements=max_elements, max_items=max_items)

    return parse() if len(body) <= SMALL_BODY else await offload(parse)


def decode_document(body: bytes, content_type: str, *, max_items: int = MAX_DOCUMENT_ITEMS) -> object:
    """`read_document` for a small body already in hand."""
    return loads(body, cbor=body_is_cbor(content_type), max_items=max_items)


# --- sending: bounded memory per connection and in all ---------------------------------

SEND_TIMEOUT = 30.0
SEND_TIMEOUT_KEY = web.AppKey("send_timeout", float)
IN_FLIGHT_KEY = web.AppKey("bytes_in_flight", object)


class BytesInFlight:
    """A cap on the bytes of large answers being built or waiting to be sent, across
    every connection. A large answer reserves its share before any work; over the
    cap it is refused with 503 and Retry-After, rather than growing the process."""

    def __init__(self, cap: int) -> None:
        self.cap, self.used = cap, 0

    def reserve(self, n: int) -> int:
        n = min(n, self.cap)
        if self.used + n > self.cap:
            raise Unavailable("busy sending large answers; retry shortly", retry_after=1)
        self.used += n
        return n

    def release(self, n: int) -> None:
        self.used -= n


def send_limits(app: web.Application, *, send_timeout: float, bytes_in_flight: int) -> None:
    app[SEND_TIMEOUT_KEY] = send_timeout
    app[IN_FLIGHT_KEY] = BytesInFlight(bytes_in_flight)


def _abort(request: web.Request) -> None:
    if request.transport is not None:
        drop(request.transport)


async def send(request: web.Request, resp: web.StreamResponse) -> web.StreamResponse:
    """Send `resp` now, dropping the connection if the client does not take it within the
    app's send timeout (aiohttp itself waits for a non-reading client forever).

    Returns `resp`, sent or not: aiohttp's own finishing of an answer whose connection
    is gone is quiet (a ConnectionError it expects), where an exception from the
    handler would be logged as a server error.
    """
    timeout = request.app.get(SEND_TIMEOUT_KEY, SEND_TIMEOUT)
    try:
        async with asyncio.timeout(timeout):
            await resp.prepare(request)
            await resp.write_eof()
    except TimeoutError:
        _abort(request)
    except ConnectionError:  # the client went away mid-answer
        pass
    return resp


async def send_large(request: web.Request, resp: web.Response) -> web.StreamResponse:
    """`send` for an answer built whole (an entry bundle, a Git pack): its bytes count
    against the bytes-in-flight cap until the socket has taken them."""
    inflight: BytesInFlight | None = request.app.get(IN_FLIGHT_KEY)  # type: ignore[assignment]
    size = len(resp.body) if isinstance(resp.body, (bytes, bytearray, memoryview)) else 0
    held = inflight.reserve(size) if inflight is not None else 0
    try:
        return await send(request, resp)
    finally:
        if inflight is not None:
            inflight.release(held)


async def stream(request: web.Request, chunks: Iterable[bytes | memoryview] | AsyncIterable[bytes | memoryview], *,
                 content_type: str, reserve: int, headers: dict[str, str] | None = None) -> web.StreamResponse:
    """Send an answer made of `chunks`, each built only once the socket took the one before.

    Memory per connection is then one chunk plus the socket buffer, whatever the
    answer's size; `reserve` (about the largest chunk) counts against the
    bytes-in-flight cap for as long as the answer is sent, and a client that stops
    reading is dropped after the send timeout. A chunk that cannot be made once the
    answer started (an I/O error) drops the connection: the client sees a cut answer,
    never a complete-looking wrong one.
    """
    inflight: BytesInFlight | None = request.app.get(IN_FLIGHT_KEY)  # type: ignore[assignment]
    held = inflight.reserve(reserve) if inflight is not None else 0
    timeout = request.app.get(SEND_TIMEOUT_KEY, SEND_TIMEOUT)
    try:
        resp = web.StreamResponse(headers=headers)
        resp.content_type = content_type
        resp.enable_chunked_encoding()
        try:
            async with asyncio.timeout(timeout):
                await resp.prepare(request)
            if isinstance(chunks, AsyncIterable):
                async for chunk in chunks:
                    async with asyncio.timeout(timeout):
                        await resp.write(chunk)
            else:
                for chunk in chunks:
                    async with asyncio.timeout(timeout):
                        await resp.write(chunk)
            async with asyncio.timeout(timeout):
                await resp.write_eof()
        except ConnectionError:  # the client went away
            pass
        except Exception as e:  # noqa: BLE001 - a timeout, or a chunk that could not be made
            if not isinstance(e, TimeoutError):
                log.error("answer to %s %s cut short: %s: %s", request.method, request.path, type(e).__name__, e)
            _abort(request)
        return resp
    finally:
        if inflight is not None:
            inflight.release(held)


async def answer(request: web.Request, pieces: Iterable[bytes | memoryview], *, content_type: str,
                 streamed: bool, reserve: int) -> web.StreamResponse:
    """An answer built from `pieces`: whole, with a Content-Length, when it is small
    (`streamed` False), else streamed a piece at a time (see `stream`)."""
    if not streamed:
        return web.Response(body=b"".join(pieces), content_type=content_type)
    return await stream(request, pieces, content_type=content_type, reserve=reserve)


def send_timeout_middleware():
    """Every answer aiohttp sends is sent under the app's send timeout (see `send`)."""

    @web.middleware
    async def send_within(request: web.Request, handler: Handler) -> web.StreamResponse:
        resp = await handler(request)
        return resp if resp.prepared else await send(request, resp)

    return send_within


def encode_document(obj: Any, cbor: bool) -> tuple[bytes, str]:
    """(body, Content-Type): JSON by default, deterministic CBOR on request."""
    if cbor:
        return cbor2.dumps(obj, canonical=True), "application/oap+cbor"
    return json.dumps(obj, separators=(",", ":")).encode(), "application/json"


def wants_cbor(request: web.Request) -> bool:
    return accepts_cbor(request.headers.get("Accept", ""))


def accepts_cbor(accept: str) -> bool:
    return bool(accept) and any(t in accept for t in CBOR_TYPES)


def respond(request: web.Request, obj: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """JSON by default; CBOR when the client asks for application/oap+cbor."""
    body, ctype = encode_document(obj, wants_cbor(request))
    return web.Response(body=body, status=status, content_type=ctype, headers=headers)


def query_int(request: web.Request, name: str, *, default: int | None = None, minimum: int = 0) -> int:
    raw = request.query.get(name)
    if raw is None:
        if default is None:
            raise InvalidInput(f"query parameter {name!r} is required")
        return default
    if not raw.isdigit() or len(raw) > 19 or (len(raw) > 1 and raw[0] == "0"):
        raise InvalidInput(f"{name} must be a non-negative decimal integer")
    value = int(raw)
    if value < minimum:
        raise InvalidInput(f"{name} must be at least {minimum}")
    return value
