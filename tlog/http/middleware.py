"""The middlewares every service stacks: send timeout, errors to responses (and request
metrics), and the service's per-client request limit (`tlog.http.limits.Limits`), taken
before a handler reads a byte of the body."""
from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from tlog.errors import OAPError, Unavailable
from tlog.http.limits import Limits, client_address
from tlog.http.responses import _CODES, error_response
from tlog.http.sending import send

log = logging.getLogger("oap.http")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def request_client(request: web.Request, trusted_proxies: int) -> str:
    """`client_address` of an aiohttp request (every X-Forwarded-For header, in order)."""
    forwarded = ",".join(request.headers.getall("X-Forwarded-For", ())) if trusted_proxies else None
    return client_address(request.remote, forwarded, trusted_proxies)


def listening_url(request: web.Request) -> str:
    """This server's own address, from the connection's local end: never the Host header,
    which the client writes (a service that puts its URL in an answer would otherwise
    hand out whatever a client claimed). For services without a configured public URL."""
    sock = request.transport.get_extra_info("sockname") if request.transport is not None else None
    if not sock:
        raise Unavailable("no public URL is configured and the connection has no local address")
    host = f"[{sock[0]}]" if ":" in sock[0] else sock[0]
    return f"{request.scheme}://{host}:{sock[1]}"


def rate_limit_middleware(limits: Limits, *, trusted_proxies: int = 0):
    """A token of the client's request bucket for the requests `limits` applies to (429 +
    Retry-After), taken before the handler reads a byte of the body."""

    @web.middleware
    async def limit(request: web.Request, handler: Handler) -> web.StreamResponse:
        if limits.applies(request.method, request.path):
            limits.take(request_client(request, trusted_proxies))
        return await handler(request)

    return limit


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
            return error_response(request, e.status, e.code, e.message, **e.data)
        except web.HTTPRequestEntityTooLarge:
            status = 413
            return error_response(request, 413, "invalid_input", "request body too large")
        except web.HTTPException as e:
            status = e.status
            if e.status < 400:
                raise
            code = _CODES.get(e.status, "invalid_input" if e.status < 500 else "internal_error")
            resp = error_response(request, e.status, code, e.reason or "request refused")
            if e.status == 405 and "Allow" in e.headers:
                resp.headers["Allow"] = e.headers["Allow"]
            return resp
        except Exception:  # a bug: log it, never leak it
            log.exception("unhandled error on %s %s", request.method, request.path)
            return error_response(request, 500, "internal_error", "internal error")
        finally:
            if on_request is not None:
                on_request(request, status, time.perf_counter() - t0)

    return error_middleware


def send_timeout_middleware():
    """Every answer aiohttp sends is sent under the app's send timeout (see `send`), and
    ends the connection when the request's body could not be read."""

    @web.middleware
    async def send_within(request: web.Request, handler: Handler) -> web.StreamResponse:
        resp = await handler(request)
        if resp.prepared:
            return resp
        if request.content.exception() is not None:
            # the body did not decode (a broken gzip stream): the rest of it cannot be read
            # past, so the connection ends with this answer, and says so (a client would
            # otherwise send its next request on a connection aiohttp is closing)
            resp.force_close()
        return await send(request, resp)

    return send_within
