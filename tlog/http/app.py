"""The setup every service shares: the aiohttp application with its middlewares and
limits, and the operations routes (`/healthz`, `/readyz`, `/metrics`)."""
from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from tlog.http.bodies import READ_TIMEOUT_KEY, large_body_limit
from tlog.http.limits import Limits
from tlog.http.metrics import RequestMetrics
from tlog.http.middleware import make_error_middleware, rate_limit_middleware, send_timeout_middleware
from tlog.http.sending import send_limits
from tlog.http.ui import add_ui
from tlog.runtime.config import HTTPConfig


def make_app(cfg: HTTPConfig, requests: RequestMetrics, *, max_body: int,
             limits: Limits | None = None) -> web.Application:
    """An application with the middlewares every service stacks, outermost first:
    the send timeout, errors to responses (counted in `requests`), and the per-client
    request limit of the service's `limits`; with the body cap, read and send timeouts
    and the bytes-in-flight cap of `cfg`."""
    middlewares = [send_timeout_middleware(), make_error_middleware(requests.on_request)]
    if limits is not None and limits.requests is not None:
        middlewares.append(rate_limit_middleware(limits, trusted_proxies=cfg.trusted_proxies))
    app = web.Application(middlewares=middlewares, client_max_size=max_body)
    app[READ_TIMEOUT_KEY] = cfg.read_timeout
    send_limits(app, send_timeout=cfg.send_timeout, bytes_in_flight=cfg.bytes_in_flight_mb << 20)
    large_body_limit(app)
    add_ui(app, cfg.ui_trust_policy)
    return app


Check = Callable[[], Awaitable[dict]]
"""An async check: returns details to show; raises (or returns {"problems": [...]} non-empty) when failing."""


def add_ops_routes(app: web.Application, registry: CollectorRegistry, *, health: Check | None = None,
                   ready: Check | None = None) -> None:
    """`/healthz` (the process answers; `health` checks its storage), `/readyz` (it serves:
    200, else 503 with the problems) and `/metrics` (Prometheus text format)."""

    async def healthz(request: web.Request) -> web.Response:
        if health is not None:
            await health()
        return web.json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        body = await ready() if ready is not None else {}
        ok = not body.get("problems")
        return web.json_response({"status": "ok" if ok else "not ready", **body}, status=200 if ok else 503)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/healthz", healthz)
    if ready is not None:
        app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
