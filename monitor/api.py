"""The monitor's HTTP API: Prometheus metrics and its own health, nothing that changes anything.

    GET /metrics     Prometheus text format (monitor.metrics)
    GET /healthz     the process answers and its state directory is readable
    GET /readyz      200 while no health incident is open, else 503 naming them
    GET /v1/status   per log its verified view and how far it was read, incidents, the delivery queue

It listens on `metrics` (host:port, 127.0.0.1 by default): a monitor serves no one but its operator.
"""
from __future__ import annotations

from aiohttp import web

from tlog.http.app import add_ops_routes, make_app
from tlog.http.metrics import RequestMetrics
from tlog.http.responses import respond

from .service import MonitorService


def build_app(svc: MonitorService) -> web.Application:
    requests = RequestMetrics(svc.metrics.requests)
    app = make_app(svc.config, requests, max_body=1024)

    async def status(request: web.Request) -> web.StreamResponse:
        return respond(request, svc.status())

    async def health() -> dict:
        svc.state.alert_count()  # the state database answers
        return {}

    async def ready() -> dict:
        return {"problems": [f"{k} {s}: {r}" for k, s, _, r, _ in svc.state.incidents()]}

    app.router.add_get("/v1/status", status)
    add_ops_routes(app, svc.metrics.registry, health=health, ready=ready)
    return app
