"""The witness's HTTP API (DESIGN §4; c2sp.md §4): a thin aiohttp layer over `witness.core`.

    POST /add-checkpoint                  tlog-witness; text bodies, statuses of c2sp.md §4
    GET  /<hex sha256(origin)>/checkpoint latest cosigned checkpoint (monitoring, tlog-witness HEAD)
    POST /v1/conformance/witness          peer-witnessing of conformance receipts (JSON/CBOR)
    GET  /v1/info                         name, vkey, DID, logs and their monitoring paths
    GET  /healthz, GET /metrics

add-checkpoint answers in the protocol's own text form (a 409 body is
"<size>\\n" with Content-Type text/x.tlog.size, other errors a one-line
text/plain message), mapped from the typed errors in `protocol_error`; the
JSON endpoints use the shared OAP mapping in `tlog.service.http`.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tlog.errors import NotFound, OAPError, RateLimited, TooLarge
from tlog.service.reply import Reply
from tlog.service.fastpath import FAST_ROUTES_KEY, FastRoutes
from tlog.service.fastpath import Request as FastRequest
from tlog.service.bodies import READ_TIMEOUT_KEY, offload, read_body, read_document
from tlog.service.metrics import RequestMetrics
from tlog.service.middleware import make_error_middleware, rate_limit_middleware, send_timeout_middleware
from tlog.service.responses import respond
from tlog.service.sending import send_limits
from tlog.service.limits import RateLimiter
from tlog.formats.keys import CosignatureSigner

from .config import WitnessConfig
from .core import SizeConflict, Witness, origin_path
from .keyfiles import load_or_create_keys
from .metrics import WitnessMetrics
from .peer import PeerWitness
from .state import Stall, WitnessState

log = logging.getLogger("oap.witness.server")

MONITORING_CACHE = "public, max-age=1, must-revalidate"
TLOG_SIZE = "text/x.tlog.size"


TEXT_HEADERS = (("Content-Type", "text/plain; charset=utf-8"),)


def protocol_error(e: OAPError) -> Reply:
    """tlog-witness error answer: 409 carries the witness's size, the rest a text reason."""
    if isinstance(e, SizeConflict):
        return Reply(f"{e.known_size}\n".encode(), (("Content-Type", TLOG_SIZE),), 409)
    return Reply((e.message.replace("\n", " ") + "\n").encode(), TEXT_HEADERS, e.status)


@dataclass
class WitnessService:
    config: WitnessConfig
    signer: CosignatureSigner
    state: WitnessState
    witness: Witness
    peer: PeerWitness
    metrics: WitnessMetrics

    @classmethod
    def open(cls, config: WitnessConfig, *, clock: Callable[[], float] = time.time,
             stall: Stall | None = None) -> "WitnessService":
        config.data_dir.mkdir(parents=True, exist_ok=True)
        signer, seed = load_or_create_keys(config)
        state = WitnessState(config.state_path, stall=stall)
        witness = Witness(signer, config.logs, state, clock=clock)
        peer = PeerWitness(seed, policy_text=config.trust_policy_text(), own_receipt=config.own_receipt,
                           require_own_level=config.require_own_level, clock=clock)
        metrics = WitnessMetrics()
        configured = {log.origin for log in config.logs}
        for rec in state.all_sync():
            if rec.origin in configured:
                metrics.log_size.labels(rec.origin).set(rec.size)
        return cls(config, signer, state, witness, peer, metrics)

    def close(self) -> None:
        self.state.close()


def build_app(svc: WitnessService) -> web.Application:
    cfg, m = svc.config, svc.metrics
    by_path = {origin_path(log.origin): log.origin for log in cfg.logs}

    requests = RequestMetrics(m.requests)  # by route and status, here and on the fast path
    middlewares = [send_timeout_middleware(), make_error_middleware(requests.on_request)]
    limiter = None
    if cfg.rate_limit > 0:  # (0: off, and then not even a pass-through layer per request)
        limiter = RateLimiter(cfg.rate_limit, cfg.rate_limit_burst)
        middlewares.append(rate_limit_middleware(limiter, trusted_proxies=cfg.trusted_proxies))
    app = web.Application(middlewares=middlewares, client_max_size=max(cfg.max_body, cfg.max_conformance_body))
    app[READ_TIMEOUT_KEY] = cfg.read_timeout
    send_limits(app, send_timeout=cfg.send_timeout, bytes_in_flight=cfg.bytes_in_flight_mb << 20)

    # Per-request label lookups are a measurable share of a cosignature: bind each once
    # (per log on its first cosignature, so that a log never cosigned has no series).
    ok_count = m.add_checkpoint.labels("200")
    per_log: dict[str, tuple] = {}

    async def cosign(body: bytes, t0: float) -> Reply:
        """The answer to one add-checkpoint body (fast path and aiohttp alike)."""
        try:
            c = await svc.witness.submit(body, max_body=cfg.max_body)
        except OAPError as e:
            m.add_checkpoint.labels(str(e.status)).inc()
            if e.status >= 500:
                log.error("add-checkpoint refused with %d: %s", e.status, e.message)
            return protocol_error(e)
        ok_count.inc()
        m.cosign_seconds.observe(time.perf_counter() - t0)
        series = per_log.get(c.origin)
        if series is None:
            series = per_log[c.origin] = (m.cosignatures.labels(c.origin), m.log_size.labels(c.origin))
        cosignatures, log_size = series
        cosignatures.inc()
        log_size.set(c.size)
        return Reply(c.body.encode(), TEXT_HEADERS)

    async def add_checkpoint(request: web.Request) -> web.Response:
        t0 = time.perf_counter()
        try:
            if request.content.is_eof():  # received in full with the head: nothing to wait for
                body = request.content.read_nowait()
                if len(body) > cfg.max_body:
                    raise TooLarge(f"request body over {cfg.max_body} bytes")
            else:
                body = await read_body(request, cfg.max_body)
        except OAPError as e:
            m.add_checkpoint.labels(str(e.status)).inc()
            return protocol_error(e).response()
        return (await cosign(body, t0)).response()

    def add_checkpoint_fast(body: bytes, req: FastRequest) -> Awaitable[Reply]:
        """POST /add-checkpoint on the fast path (tlog.service.fastpath): every log's hot request."""
        if limiter is not None:
            if not limiter.allows(req.client, "request"):
                raise RateLimited("rate limited")  # aiohttp's middleware answers the 429
            limiter.check(req.client, "request")
        return cosign(body, time.perf_counter())

    async def monitoring(request: web.Request) -> web.Response:
        origin = by_path.get(request.match_info["hash"])
        rec = await svc.state.get(origin) if origin is not None else None
        if rec is None:
            raise NotFound("no cosigned checkpoint for this log")
        return web.Response(text=rec.note, content_type="text/plain", charset="utf-8",
                            headers={"Cache-Control": MONITORING_CACHE})

    async def conformance_witness(request: web.Request) -> web.Response:
        try:
            # A receipt and its .tlog-proof bundle: parsed within the document budget, and
            # decoded and checked off the event loop, so the cosigning path is never held up.
            doc = await read_document(request, cfg.max_conformance_body)
            out = await offload(svc.peer.witness, doc)
        except OAPError as e:
            m.conformance.labels(str(e.status)).inc()
            raise
        m.conformance.labels("200").inc()
        return respond(request, out)

    async def info(request: web.Request) -> web.Response:
        records = {r.origin: r for r in await svc.state.all()}
        logs = []
        for log_ in cfg.logs:
            rec = records.get(log_.origin)
            logs.append({"origin": log_.origin, "vkey": log_.vkey, "url": log_.url,
                         "checkpoint_path": f"/{origin_path(log_.origin)}/checkpoint",
                         "size": rec.size if rec else None, "cosigned_at": rec.cosigned_at if rec else None})
        return respond(request, {"name": svc.signer.name, "verifier_key": svc.signer.vkey,
                                 "identity": svc.peer.did, "logs": logs})

    async def healthz(request: web.Request) -> web.Response:
        await svc.state.all()  # the database answers
        return web.json_response({"status": "ok"})

    async def metrics(request: web.Request) -> web.Response:
        resp = web.Response(body=generate_latest(m.registry))
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    app.router.add_post("/add-checkpoint", add_checkpoint)
    app[FAST_ROUTES_KEY] = FastRoutes(
        {}, posts={"/add-checkpoint": ("/add-checkpoint", add_checkpoint_fast, cfg.max_body)},
        limiter=limiter, record=requests.record, trusted_proxies=cfg.trusted_proxies)
    app.router.add_get("/{hash:[0-9a-f]{64}}/checkpoint", monitoring)
    app.router.add_post("/v1/conformance/witness", conformance_witness)
    app.router.add_get("/v1/info", info)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    return app
