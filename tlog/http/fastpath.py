"""Hot requests answered before aiohttp sees them.

On a small machine aiohttp spends ~100 us of Python on every request: its
request object, router, middlewares and response machinery. A tile or a
pre-signed status response takes a few microseconds to find, so for the
routes clients hit in bulk (`/checkpoint`, `/tile/...`, `/v1/status/...`,
single appends) the framework is almost the whole cost, and it caps a server
at a fraction of what the same core does with a plain asyncio protocol (the
`tile_reads` and `http_append_single` benchmarks compare both with a bare aiohttp
handler: benchmarks/README.md).

`FastProtocol` is the first protocol of every connection. It reads request
heads itself and answers only the requests it fully understands: HTTP/1.1,
a `GET` of a plain path (no percent-escape, dot segment, empty segment or
query) or a `POST` whose body is in hand (Content-Length, within the route's
cap), only headers from a short allowlist, on a route a service registered.
Anything else hands the connection, with every byte not yet answered, to
aiohttp's own protocol for the rest of its life, so aiohttp still parses
everything unusual and refusals keep their one code path (`tlog.http.responses`): a
handler that refuses a request, cannot answer it synchronously, or raises,
returns it to aiohttp untouched. Answers are built by the same functions the
aiohttp handlers call, so both paths send the same bytes
(tests/service/test_fastpath.py compares them header by header); a POST that fails
after it was accepted (the log is full or halted) is answered through the
error middleware's own mapping (`tlog.http.responses.error_reply`).

The service's rate limits (`tlog.http.limits.Limits`) and the request metrics
apply to fast answers as they do in the middlewares: a route takes a request token
if `Limits.applies` says so for its method and path (asked once, when the routes are
set up), and only for a request answered here; write backpressure as in aiohttp.
"""
from __future__ import annotations

import asyncio
import re
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, NamedTuple, cast

from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE
from aiohttp.tcp_helpers import tcp_nodelay

from tlog.http.limits import Limits, client_address
from tlog.http.reply import Reply
from tlog.http.responses import error_reply

MAX_HEAD = 8190
"""A longer head goes to aiohttp, which refuses it (its own line limit is 8190)."""
MAX_PARTIAL_READS = 32
"""Reads of one unfinished request before it goes to aiohttp (each read copies the buffer)."""

# Headers that do not change the answer of a fast route (Accept is passed to the
# handler). Any other header (a body, conditionals, ranges, upgrades, auth...)
# sends the request to aiohttp.
_ALLOWED = frozenset({
    b"host", b"user-agent", b"accept", b"accept-encoding", b"accept-language", b"connection",
    b"cache-control", b"pragma", b"x-forwarded-for", b"referer", b"dnt",
    b"content-type", b"content-length", b"authorization",  # POST only
})
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VALUE = re.compile(rb"[\t\x20-\x7e]*")
_PATH = re.compile(rb"/[!$&'()*+,\-.0-9:;=@A-Z_a-z~/]*")  # pchar minus '%', and no '?' or '#'
_BAD_SEGMENT = re.compile(rb"//|/\.\.?(?:/|$)")


Handler = Callable[[str, str], "Reply | None"]
"""(path after the route's prefix, Accept header) -> Reply, or None for aiohttp."""

Route = tuple[str, str, Handler, Limits | None]
"""A GET routed here: (route name, the path after its prefix, handler, the limits it takes a token of)."""

PostHandler = Callable[[bytes, "Request"], Awaitable["Reply"]]
"""(body, request) -> the answer to come. Raising (synchronously) gives the request to
aiohttp, so it must not have side effects before its last check; the awaitable's
errors are answered like the error middleware answers them."""


class Request(NamedTuple):
    """What the fast path read of a request's headers."""

    accept: str
    client: str
    close: bool
    content_type: str | None
    content_length: int | None
    authorization: str | None


@dataclass
class FastRoutes:
    """What a service answers on the fast path.

    `routes` maps a path prefix (or, ending without '/', an exact path) to the
    route's aiohttp name for metrics (e.g. "/tile/{path}") and its handler;
    `posts` maps exact paths of small POSTs (a body of at most the cap, sent
    with Content-Length) to theirs. `limits` are the service's: a route they
    apply to takes a request token only when it is answered here (aiohttp's
    middleware takes the others', once), and `record(route, status, seconds)`
    is the request metrics.
    """

    routes: dict[str, tuple[str, Handler]]
    posts: dict[str, tuple[str, PostHandler, int]] = field(default_factory=dict)  # path: (name, handler, body cap)
    limits: Limits | None = None  # the service's rate limits, as its middleware applies them
    record: Callable[[str, int, float], None] = lambda route, status, seconds: None
    trusted_proxies: int = 0  # proxies in front, appending to X-Forwarded-For (tlog.http.limits.client_address)
    answered: int = 0  # requests answered here, and connections handed to aiohttp (tests, debugging)
    handed_off: int = 0
    _exact: dict[bytes, Route] = field(default_factory=dict, init=False, repr=False)
    _prefixes: list[tuple[bytes, str, Handler, Limits | None]] = field(default_factory=list, init=False, repr=False)
    _lines: dict[bytes, Route | None] = field(default_factory=dict, init=False, repr=False)
    _posts: dict[str, tuple[str, PostHandler, int, Limits | None]] = field(default_factory=dict, init=False,
                                                                          repr=False)

    def __post_init__(self) -> None:
        self.max_post = max((cap for _, _, cap in self.posts.values()), default=0)
        for path, (name, fn) in self.routes.items():
            limits = self._limited("GET", path)
            if path.endswith("/"):
                self._prefixes.append((path.encode(), name, fn, limits))
            else:
                self._exact[path.encode()] = (name, "", fn, limits)
        self._posts = {path: (name, fn, cap, self._limited("POST", path))
                       for path, (name, fn, cap) in self.posts.items()}

    def _limited(self, method: str, path: str) -> Limits | None:
        """The limits a route takes a request token of, or None."""
        return self.limits if self.limits is not None and self.limits.applies(method, path) else None

    def request_line(self, line: bytes) -> Route | None:
        """`match` for a whole GET request line; None unless it is plain and routed here.

        Clients walk the same tiles and poll the same checkpoint: the answer for a line
        is kept (up to 16,384 lines), which spares the checks below on most requests.
        """
        hit = self._lines.get(line, _MISS)
        if hit is _MISS:
            hit = None
            parts = line.split(b" ")
            if len(parts) == 3 and parts[0] == b"GET" and parts[2] == b"HTTP/1.1":
                path = parts[1]
                if _PATH.fullmatch(path) and not _BAD_SEGMENT.search(path):
                    hit = self.match(path)
            if len(line) <= _MAX_KEPT_LINE:  # a client must not pin long lines (heads reach 8 KiB)
                if len(self._lines) >= 16384:
                    self._lines.clear()
                self._lines[line] = hit
        return hit

    def match(self, path: bytes) -> Route | None:
        """(route name, rest of the path, handler, limits) for a request path."""
        hit = self._exact.get(path)
        if hit is not None:
            return hit
        for prefix, name, fn, limits in self._prefixes:
            if path.startswith(prefix) and len(path) > len(prefix):
                return name, path[len(prefix):].decode("ascii"), fn, limits
        return None


_MISS: Route = ("", "", lambda path, accept: None, None)
"""Not in `FastRoutes._lines` (a sentinel of its values' type, compared by identity)."""
_MAX_KEPT_LINE = 300  # bytes; a canonical tile path is at most 256 characters
_date_cache: list = [0, b""]


def _date() -> bytes:
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache[0], _date_cache[1] = now, formatdate(now, usegmt=True).encode()
    return _date_cache[1]


_header_cache: dict[tuple[tuple[str, str], ...], bytes] = {}


def _header_bytes(headers: tuple[tuple[str, str], ...]) -> bytes:
    got = _header_cache.get(headers)
    if got is None:
        got = "".join(f"{k}: {v}\r\n" for k, v in headers).encode("latin-1")
        if len(_header_cache) > 4096:
            _header_cache.clear()
        _header_cache[headers] = got
    return got


_SERVER = f"Server: {SERVER_SOFTWARE}\r\n".encode()


def _response(status: int, reply: Reply, close: bool) -> bytes:
    """The bytes of an answer, with the headers aiohttp adds (Content-Length, Date, Server)."""
    phrase = b"OK" if status == 200 else HTTPStatus(status).phrase.encode()
    return b"".join((
        b"HTTP/1.1 %d %s\r\n" % (status, phrase),
        _header_bytes(reply.headers), b"Content-Length: ", str(len(reply.body)).encode(), b"\r\nDate: ", _date(),
        b"\r\n", _SERVER, b"Connection: close\r\n\r\n" if close else b"\r\n", reply.body,
    ))


def drop(transport: asyncio.WriteTransport) -> None:
    """Close a connection at once, with what the kernel still holds for it discarded (a reset):
    a client that stopped reading must not keep megabytes of socket buffer alive."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()


def _could_be_fast(partial: bytes) -> bool:
    """Whether an unfinished head may still become a request the fast path answers."""
    if not (partial.startswith(b"GET /"[:len(partial)]) or partial.startswith(b"POST /"[:len(partial)])):
        return False
    line, crlf, _ = partial.partition(b"\r\n")
    return not crlf or line.endswith(b" HTTP/1.1")


class FastProtocol(asyncio.Protocol):
    """One connection: fast answers until the first request for aiohttp (see module doc)."""

    def __init__(self, aiohttp_server: web.Server, routes: FastRoutes, conns: set, timeout: float,
                 pending: bytes = b"") -> None:
        """`pending`: bytes already read from the connection by another process (a read worker's
        hand-off, `tlog.server.readworkers`), answered before anything read here."""
        self._aiohttp = aiohttp_server
        self._pending = pending
        self._routes = routes
        self._conns = conns
        self._timeout = timeout
        self._transport: asyncio.Transport | None = None
        self._buf = b""
        self._peer = "unknown"
        self._last = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._reading_paused = False  # by the transport's flow control
        self._busy: asyncio.Future | None = None  # a POST being answered: nothing else is read meanwhile
        self._reads = 0  # reads since the last request was complete
        self._block: bytes | None = None  # the last header block seen, and what it says
        self._meta: Request | None = None
        self._eof = False  # the client closed its side while a POST was being answered
        self._loop = asyncio.get_running_loop()

    # --- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # a stream connection's, as create_server makes
        tcp_nodelay(self._transport, True)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, (tuple, list)) and peer:
            self._peer = str(peer[0])
        self._conns.add(self)
        self._last = self._loop.time()
        self._timer = self._loop.call_at(self._last + self._timeout, self._expire)
        if self._pending:  # before the transport's first read, which asyncio schedules after this call
            pending, self._pending = self._pending, b""
            self.data_received(pending)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._drop()

    def pause_writing(self) -> None:
        self._reading_paused = True
        self._reading()

    def resume_writing(self) -> None:
        self._reading_paused = False
        self._reading()
        if self._buf and self._busy is None and self._transport is not None:
            self.data_received(b"")  # requests read before the pause, not answered yet

    def _reading(self) -> None:
        # While a POST is answered, reading stops only once the client sends more: most
        # clients wait for the answer, and a pause costs two epoll calls per request.
        if self._transport is not None:
            if self._reading_paused or (self._busy is not None and self._buf):
                self._transport.pause_reading()
            else:
                self._transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        if transport is None:
            return
        buf = self._buf + data if self._buf else data
        if data:
            self._reads += 1
            if self._reads > MAX_PARTIAL_READS:  # trickled: aiohttp's parser is incremental, ours copies
                return self._handoff(buf)
        pos = 0
        while self._busy is None and not self._reading_paused:  # answers wait while the client does not read
            end = buf.find(b"\r\n\r\n", pos)
            if end < 0:
                break
            if end - pos > MAX_HEAD:
                return self._handoff(buf[pos:])
            t0 = time.perf_counter()
            head = buf[pos:end]
            if head.startswith(b"POST "):
                taken = self._post(head, buf, end + 4, t0)
                if taken is None:
                    return self._handoff(buf[pos:])
                if taken == 0:  # the body is not all here yet
                    break
                pos = end + 4 + taken - 1
                self._reads = 0
                continue
            answered = self._answer(head, t0)
            if answered is None:
                return self._handoff(buf[pos:])
            transport.write(answered[0])
            pos = end + 4
            self._last = self._loop.time()
            self._reads = 0
            if answered[1]:  # Connection: close
                transport.close()
                self._drop()
                return
        rest = self._buf = buf[pos:]
        if rest and self._busy is not None:
            transport.pause_reading()  # what the client sends next waits for the answer
        elif rest and not self._reading_paused \
                and (len(rest) > MAX_HEAD + self._routes.max_post or not _could_be_fast(rest)):
            self._handoff(rest)  # aiohttp answers garbage at once, where waiting for a head would stall

    def eof_received(self) -> bool:
        # Half-closed after a POST: its answer is still written. (Not over TLS, where asyncio
        # ignores True, closes anyway and logs a warning per connection.)
        if self._busy is not None and self._transport is not None \
                and self._transport.get_extra_info("sslcontext") is None:
            self._eof = True
            return True
        return False  # close our side too; an unfinished head is dropped, as aiohttp would

    # --- internals ----------------------------------------------------------------------

    def _answer(self, head: bytes, t0: float) -> tuple[bytes, bool] | None:
        """The whole response for one request head, and whether to close; None for aiohttp."""
        line, _, block = head.partition(b"\r\n")
        hit = self._routes.request_line(line)
        if hit is None:
            return None
        meta = self._request(block)
        if meta is None or meta.content_type is not None or meta.content_length is not None \
                or meta.authorization is not None:
            return None
        route, rest, fn, limits = hit
        if limits is not None and not limits.allows(meta.client):
            return None  # aiohttp answers the 429
        accept, close = meta.accept, meta.close
        try:
            reply = fn(rest, accept)
            if reply is None:
                return None
            if limits is not None:
                limits.take(meta.client)
        except Exception:  # noqa: BLE001 - refused, or a bug: aiohttp runs it again and answers (a 4xx, or its 500)
            return None
        self._routes.answered += 1
        self._routes.record(route, reply.status, time.perf_counter() - t0)
        return _response(reply.status, reply, close), close

    def _request(self, block: bytes) -> Request | None:
        if block != self._block:  # clients repeat their headers on every request of a connection
            self._block, self._meta = block, self._headers(block)
        return self._meta

    def _post(self, head: bytes, buf: bytes, start: int, t0: float) -> int | None:
        """Start answering a POST whose head is `head` and whose body starts at buf[start].

        None: for aiohttp; 0: wait for the rest of the body; else the body's length + 1.
        """
        line, _, block = head.partition(b"\r\n")
        parts = line.split(b" ")
        if len(parts) != 3 or parts[2] != b"HTTP/1.1":
            return None
        hit = self._routes._posts.get(parts[1].decode("latin-1"))
        meta = self._request(block)
        if hit is None or meta is None or meta.content_length is None or meta.content_length > hit[2]:
            return None
        if len(buf) - start < meta.content_length:
            return 0
        name, handler, _, limits = hit
        if limits is not None and not limits.allows(meta.client):
            return None  # aiohttp answers the 429
        try:
            pending = handler(buf[start:start + meta.content_length], meta)
        except Exception:  # noqa: BLE001 - refused (or a bug): aiohttp runs it again and answers
            return None
        if limits is not None:
            limits.take(meta.client)
        self._routes.answered += 1
        self._busy = asyncio.ensure_future(pending)
        self._busy.add_done_callback(lambda task: self._posted(task, name, t0, meta))
        return meta.content_length + 1

    def _posted(self, task: asyncio.Future, route: str, t0: float, meta: Request) -> None:
        self._busy = None
        close = meta.close
        try:
            reply = task.result()
            status = reply.status
        except asyncio.CancelledError:
            self.close()
            return
        except Exception as e:  # noqa: BLE001 - answered as the error middleware answers
            status, reply = error_reply(e, meta.accept)
        self._routes.record(route, status, time.perf_counter() - t0)
        transport = self._transport
        if transport is None:  # the client left; what it sent is durable all the same
            return
        transport.write(_response(status, reply, close))
        self._last = self._loop.time()
        if close:
            transport.close()
            self._drop()
            return
        self._reading()
        if self._buf:
            self.data_received(b"")  # requests pipelined behind the POST
        if self._eof and self._busy is None and self._transport is not None:
            self.close()  # the client half-closed: everything it sent is answered

    def _headers(self, block: bytes) -> Request | None:
        """What a header block says; None for aiohttp."""
        accept, forwarded, close = "", None, False
        ctype = length = auth = None
        seen = set()
        for line in block.split(b"\r\n") if block else ():
            name, colon, value = line.partition(b":")
            lname = name.lower()
            if not colon or lname not in _ALLOWED or lname in seen or not _TOKEN.fullmatch(name) \
                    or not _VALUE.fullmatch(value):
                return None
            seen.add(lname)
            value = value.strip(b" \t")
            if lname == b"accept":
                accept = value.decode("ascii")
            elif lname == b"connection":
                v = value.lower()
                if v == b"close":
                    close = True
                elif v != b"keep-alive":
                    return None
            elif lname == b"x-forwarded-for":
                forwarded = value
            elif lname == b"content-type":
                ctype = value.decode("ascii")
            elif lname == b"content-length":
                if not value.isdigit() or len(value) > 9:
                    return None
                length = int(value)
            elif lname == b"authorization":
                auth = value.decode("ascii")
        if b"host" not in seen:
            return None
        client = client_address(self._peer, forwarded.decode("ascii") if forwarded is not None else None,
                                self._routes.trusted_proxies)
        return Request(accept, client, close, ctype, length, auth)

    def _handoff(self, rest: bytes) -> None:
        """Give the connection, and `rest` (unanswered bytes), to aiohttp for good."""
        transport = self._transport
        self._drop()
        if transport is None or transport.is_closing():
            return
        self._routes.handed_off += 1
        proto = self._aiohttp()
        transport.set_protocol(proto)
        proto.connection_made(transport)
        transport.resume_reading()  # aiohttp reads on; it stops answering while writing is paused
        if self._reading_paused:  # the transport will call its resume_writing when the buffer drains
            self._reading_paused = False
            proto.pause_writing()
        if rest:
            proto.data_received(rest)

    def _expire(self) -> None:
        """Close a connection idle (or stuck in a head) for the header timeout."""
        self._timer = None
        if self._transport is None:
            return
        due = self._last + self._timeout
        if self._busy is not None:  # answering: the answer's write restarts the clock
            self._timer = self._loop.call_at(self._loop.time() + self._timeout, self._expire)
        elif self._loop.time() >= due:
            if self._transport.get_write_buffer_size():  # the client stopped reading its answers
                self.abort()
            elif self._buf:  # an unfinished request: aiohttp's timeouts and answers (408) apply
                self._handoff(self._buf)
            else:
                self.close()
        else:
            self._timer = self._loop.call_at(due, self._expire)

    def _drop(self) -> None:
        self._transport = None
        self._buf = b""
        self._conns.discard(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        transport = self._transport
        self._drop()
        if transport is not None:
            transport.close()

    def abort(self) -> None:
        transport = self._transport
        self._drop()
        if transport is not None:
            drop(transport)

    @property
    def busy(self) -> asyncio.Future | None:
        return self._busy


FAST_ROUTES_KEY = web.AppKey("fast_routes", FastRoutes)


class FastSite(web.TCPSite):
    """A TCPSite whose connections start on `FastProtocol` (a plain TCPSite without routes)."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, *, routes: FastRoutes | None,
                 timeout: float, **kwargs: Any) -> None:
        super().__init__(runner, host, port, **kwargs)
        self._fast, self._fast_timeout = routes, timeout
        self._fast_conns: set[FastProtocol] = set()

    async def start(self) -> None:
        if self._fast is None:
            return await super().start()
        await web.BaseSite.start(self)
        aio = self._runner.server
        assert aio is not None
        routes, conns, timeout = self._fast, self._fast_conns, self._fast_timeout
        self._server = await asyncio.get_running_loop().create_server(
            lambda: FastProtocol(aio, routes, conns, timeout), self._host, self._port,
            ssl=self._ssl_context, backlog=self._backlog, reuse_address=self._reuse_address,
            reuse_port=self._reuse_port)
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port

    async def adopt(self, sock: socket.socket, pending: bytes = b"") -> None:
        """Serve a connection another process accepted (and read `pending` from) as one of ours."""
        aio = self._runner.server
        assert aio is not None and self._fast is not None
        routes, conns, timeout = self._fast, self._fast_conns, self._fast_timeout
        await asyncio.get_running_loop().connect_accepted_socket(
            lambda: FastProtocol(aio, routes, conns, timeout, pending), sock, ssl=self._ssl_context)

    async def stop(self, answer_within: float = 60.0) -> None:
        """Stop listening; answer the POSTs in flight (as aiohttp finishes its handlers), then close."""
        if self._server is not None:
            self._server.close()
        pending = [c.busy for c in self._fast_conns if c.busy is not None]
        if pending:
            await asyncio.wait(pending, timeout=answer_within)
            await asyncio.sleep(0)  # their done-callbacks write the answers
        for conn in list(self._fast_conns):
            if conn.busy is None:
                conn.close()
            else:
                conn.abort()
        await super().stop()
