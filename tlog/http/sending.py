"""Sending answers with bounded memory: a send timeout on every answer, large answers
streamed a piece at a time, and a cap on the bytes of large answers in flight."""
from __future__ import annotations

import asyncio
import gzip
import logging
from collections.abc import AsyncIterable, Iterable
from typing import TypeVar

from aiohttp import web

from tlog.errors import Unavailable
from tlog.http.fastpath import drop

log = logging.getLogger("oap.http")

SEND_TIMEOUT = 30.0

SEND_TIMEOUT_KEY = web.AppKey("send_timeout", float)

_Resp = TypeVar("_Resp", bound=web.StreamResponse)


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


IN_FLIGHT_KEY = web.AppKey("bytes_in_flight", BytesInFlight)


def send_limits(app: web.Application, *, send_timeout: float, bytes_in_flight: int) -> None:
    app[SEND_TIMEOUT_KEY] = send_timeout
    app[IN_FLIGHT_KEY] = BytesInFlight(bytes_in_flight)


def _abort(request: web.Request) -> None:
    if request.transport is not None:
        drop(request.transport)


async def send(request: web.Request, resp: _Resp) -> _Resp:
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


async def send_large(request: web.Request, resp: web.Response) -> web.Response:
    """`send` for an answer built whole (an entry bundle, a Git pack): its bytes count
    against the bytes-in-flight cap until the socket has taken them."""
    inflight = request.app.get(IN_FLIGHT_KEY)
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
    never a complete-looking wrong one. A HEAD gets the answer's head only: no chunk is
    made and the request holds nothing (aiohttp runs a GET handler for HEAD, and would
    otherwise send the body after the head and keep an endless stream open).
    """
    if request.method == "HEAD":
        head = web.StreamResponse(headers=headers)
        head.content_type = content_type
        return await send(request, head)
    inflight = request.app.get(IN_FLIGHT_KEY)
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


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an Accept-Encoding header (RFC 9110 §12.5.3) takes gzip: listed (or `*`) with
    a q-value above 0; an explicit `gzip;q=0` wins over `*`."""
    star = False
    for item in accept_encoding.split(","):
        coding, _, params = item.strip().partition(";")
        coding = coding.strip().lower()
        q = 1.0
        for p in params.split(";"):
            k, _, v = p.strip().partition("=")
            if k.strip().lower() == "q":
                try:
                    q = float(v)
                except ValueError:
                    q = 0.0
        if coding in ("gzip", "x-gzip"):
            return q > 0
        if coding == "*":
            star = q > 0
    return star


async def entry_bundle_body(data: bytes, accept_encoding: str) -> tuple[bytes, dict[str, str]]:
    """An entry bundle as sent (C2SP tlog-tiles: entry bundles SHOULD be compressed at the HTTP
    layer): gzip-compressed (off the event loop) when the client accepts it, with the headers
    that say so; `Vary: Accept-Encoding` either way, for caches."""
    headers = {"Vary": "Accept-Encoding"}
    if data and accepts_gzip(accept_encoding):
        data = await asyncio.to_thread(gzip.compress, data, 6, mtime=0)
        headers["Content-Encoding"] = "gzip"
    return data, headers
