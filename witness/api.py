"""The witness's HTTP API (docs/architecture.md §4; C2SP tlog-witness): a thin aiohttp layer over `witness.core`.

    POST /add-checkpoint                  tlog-witness; text bodies, statuses of C2SP tlog-witness
    POST /sign-subtree                    tlog-witness, when the witness holds an ML-DSA-44 key
    GET  /<hex sha256(origin)>/checkpoint latest cosigned checkpoint (tlog-witness monitor retrieval)
    POST /v1/conformance/witness          peer-witnessing of conformance receipts (JSON/CBOR)
    GET  /v1/info                         name, vkeys, DID, logs (and their lists) and monitoring paths
    GET  /v1/refusals                     the last refused add-checkpoint requests per log (of checkpoints it
                                          signed; others apart), and why
    GET  /ui/                             the explorer (tlog/ui)
    GET  /healthz, GET /metrics

add-checkpoint answers in the protocol's own text form (a 409 body is
"<size>\\n" with Content-Type text/x.tlog.size, other errors a one-line
text/plain message), mapped from the typed errors in `protocol_error`; the
JSON endpoints use the shared OAP mapping in `tlog.http.middleware`.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable
from datetime import UTC, datetime
from functools import partial

from aiohttp import web

from tlog.errors import NotFound, OAPError, TooLarge
from tlog.formats.times import format_utc
from tlog.http.app import add_ops_routes, make_app
from tlog.http.bodies import content_encoding, offload, read_body, read_document
from tlog.http.fastpath import FAST_ROUTES_KEY, FastRoutes
from tlog.http.fastpath import Request as FastRequest
from tlog.http.limits import Limits
from tlog.http.metrics import RequestMetrics
from tlog.http.reply import Reply
from tlog.http.responses import respond

from .core import SizeConflict, origin_path
from .service import WitnessService

log = logging.getLogger("oap.witness.server")

MONITORING_CACHE = "public, max-age=1, must-revalidate"
TLOG_SIZE = "text/x.tlog.size"


TEXT_HEADERS = (("Content-Type", "text/plain; charset=utf-8"),)


def protocol_error(e: OAPError) -> Reply:
    """tlog-witness error answer: 409 carries the witness's size, the rest a text reason."""
    if isinstance(e, SizeConflict):
        return Reply(f"{e.known_size}\n".encode(), (("Content-Type", TLOG_SIZE),), 409)
    headers: tuple[tuple[str, str], ...] = TEXT_HEADERS
    if e.status in (429, 503) and "retry_after" in e.data:
        headers = (*TEXT_HEADERS, ("Retry-After", str(e.data["retry_after"])))
    return Reply((e.message.replace("\n", " ") + "\n").encode(), headers, e.status)


REFUSALS_PER_LOG = 20  # refused add-checkpoint requests kept per followed log for GET /v1/refusals,
# and as many for everything unauthenticated together (a stranger's requests never push a log's out)

SIGNED_REFUSALS = frozenset({409, 422, 429})
"""Statuses given only after the log's signature on the checkpoint verified (witness.core:
parsing (400), the origin (404) and the signature (403) come first): only these are kept
as the log's own refusals. Anyone can send a checkpoint that claims a followed origin."""


def _origin_of(body: bytes) -> str | None:
    """The origin line of the checkpoint in an add-checkpoint body, if it has one."""
    _, sep, rest = body.partition(b"\n\n")
    line = rest.split(b"\n", 1)[0][:255] if sep else b""
    try:
        return line.decode() or None
    except UnicodeDecodeError:
        return None


def _printable(text: str) -> str:
    """`text` with every character that is not printable (controls, NUL, bidi overrides)
    written as an escape: what a client sent is shown, never interpreted."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text)


class WitnessAPI:
    """The witness's handlers, over a `WitnessService`. `routes` is the whole routing table."""

    def __init__(self, svc: WitnessService) -> None:
        self.svc, self.cfg, self.m = svc, svc.config, svc.metrics
        self._paths: dict[str, str] = {}
        self.requests = RequestMetrics(self.m.requests)  # by route and status, here and on the fast path
        self.limits = Limits(self.cfg.rate_limit, self.cfg.rate_limit_burst)  # every request, either path
        # Per-request label lookups are a measurable share of a cosignature: bind each once
        # (per log on its first cosignature, so that a log never cosigned has no series).
        self._ok = self.m.add_checkpoint.labels("200")
        self._per_log: dict[str, tuple] = {}
        self.refusals: dict[str | None, deque[tuple[int, dict]]] = {
            log_.origin: deque(maxlen=REFUSALS_PER_LOG) for log_ in self.cfg.logs}
        self._other_refusals: deque[tuple[int, dict]] = deque(maxlen=REFUSALS_PER_LOG)
        self._refused = 0  # refusals so far: their order across the per-log lists

    def routes(self) -> list[web.RouteDef]:
        subtrees = [web.post("/sign-subtree", self.sign_subtree)] if self.svc.witness.subtree_signers else []
        return [
            web.post("/add-checkpoint", self.add_checkpoint),
            *subtrees,
            web.get("/{hash:[0-9a-f]{64}}/checkpoint", self.monitoring),
            web.post("/v1/conformance/witness", self.conformance_witness),
            web.get("/v1/info", self.info),
            web.get("/v1/refusals", self.refusals_list),
        ]

    def fast_routes(self) -> FastRoutes:
        return FastRoutes({}, posts={"/add-checkpoint": ("/add-checkpoint", self.add_checkpoint_fast,
                                                         self.cfg.max_body)},
                          limits=self.limits, record=self.requests.record, trusted_proxies=self.cfg.trusted_proxies)

    async def cosign(self, body: bytes, t0: float) -> Reply:
        """The answer to one add-checkpoint body (fast path and aiohttp alike)."""
        m = self.m
        try:
            c = await self.svc.witness.submit(body, max_body=self.cfg.max_body)
        except OAPError as e:
            m.add_checkpoint.labels(str(e.status)).inc()
            if e.status >= 500:
                log.error("add-checkpoint refused with %d: %s", e.status, e.message)
            self._refuse(body, e)
            return protocol_error(e)
        self._ok.inc()
        m.cosign_seconds.observe(time.perf_counter() - t0)
        series = self._per_log.get(c.origin)
        if series is None:
            series = self._per_log[c.origin] = (m.cosignatures.labels(c.origin), m.log_size.labels(c.origin))
        cosignatures, log_size = series
        cosignatures.inc()
        log_size.set(c.size)
        return Reply(c.body.encode(), TEXT_HEADERS)

    def _refuse(self, body: bytes, e: OAPError) -> None:
        """Keep a refusal (time, the checkpoint's origin, status, reason, how many times):
        in its log's list when the checkpoint was the log's (signed by it: SIGNED_REFUSALS),
        else in the list of everything else. A refusal seen before moves to the front with
        its count raised, so replaying one signed checkpoint cannot push the others out."""
        origin = _origin_of(body)
        self._refused += 1
        kept = self._other_refusals
        if origin is not None and e.status in SIGNED_REFUSALS and origin in self.svc.witness.logs:
            kept = self.refusals.setdefault(origin, deque(maxlen=REFUSALS_PER_LOG))
        shown = _printable(origin) if origin is not None else None
        reason = _printable(e.message[:300])
        count = 1
        for i, (_, old) in enumerate(kept):
            if (old["origin"], old["status"], old["reason"]) == (shown, e.status, reason):
                count += old["count"]
                del kept[i]
                break
        kept.append((self._refused, {"time": format_utc(datetime.now(UTC).replace(microsecond=0)),
                                     "origin": shown, "status": e.status, "reason": reason, "count": count}))

    async def refusals_list(self, request: web.Request) -> web.Response:
        """The last refused add-checkpoint requests, newest first (the last `REFUSALS_PER_LOG`
        distinct ones per followed log, of checkpoints the log signed, and as many of all
        others, in memory): why a log's checkpoints are not being cosigned, for its operator
        and the explorer."""
        kept = sorted((r for q in (*self.refusals.values(), self._other_refusals) for r in q),
                      key=lambda r: r[0], reverse=True)
        return respond(request, {"per_log": REFUSALS_PER_LOG, "refusals": [r for _, r in kept]})

    async def add_checkpoint(self, request: web.Request) -> web.Response:
        t0 = time.perf_counter()
        try:
            if request.content.is_eof() and content_encoding(request) == "identity":  # in full with the head
                body = request.content.read_nowait()
                if len(body) > self.cfg.max_body:
                    raise TooLarge(f"request body over {self.cfg.max_body} bytes")
            else:
                body = await read_body(request, self.cfg.max_body)
        except OAPError as e:
            self.m.add_checkpoint.labels(str(e.status)).inc()
            return protocol_error(e).response()
        return (await self.cosign(body, t0)).response()

    def add_checkpoint_fast(self, body: bytes, req: FastRequest) -> Awaitable[Reply]:
        """POST /add-checkpoint on the fast path (tlog.http.fastpath): every log's hot request.
        Its request token is taken there, as the middleware takes it for aiohttp."""
        return self.cosign(body, time.perf_counter())

    async def sign_subtree(self, request: web.Request) -> web.Response:
        """POST /sign-subtree (tlog-witness): a subtree cosignature for a checkpoint we cosigned."""
        try:
            body = await read_body(request, self.cfg.max_body)
            lines = await self.svc.witness.sign_subtree(body, max_body=self.cfg.max_body)
        except OAPError as e:
            self.m.sign_subtree.labels(str(e.status)).inc()
            return protocol_error(e).response()
        self.m.sign_subtree.labels("200").inc()
        return web.Response(body=lines.encode(), headers=dict(TEXT_HEADERS))

    def _origin(self, digest: str) -> str | None:
        """The origin whose monitoring path is `digest`: a followed log, or one cosigned before."""
        origin = self._paths.get(digest)
        if origin is None:
            for o in (*self.svc.witness.logs, *self.svc.state.known_origins()):
                self._paths.setdefault(origin_path(o), o)
            if len(self._paths) > 100_000:
                self._paths.clear()
            origin = self._paths.get(digest)
        return origin

    async def monitoring(self, request: web.Request) -> web.Response:
        origin = self._origin(request.match_info["hash"])
        rec = await self.svc.state.get(origin) if origin is not None else None
        if rec is None:
            raise NotFound("no cosigned checkpoint for this log")
        return web.Response(text=rec.note, content_type="text/plain", charset="utf-8",
                            headers={"Cache-Control": MONITORING_CACHE})

    async def conformance_witness(self, request: web.Request) -> web.Response:
        try:
            # A receipt and its .tlog-proof bundle: parsed within the document budget, and
            # decoded and checked off the event loop, so the cosigning path is never held up.
            doc = await read_document(request, self.cfg.max_conformance_body)
            peer = self.svc.peer
            dids = peer.dids_to_resolve(doc)
            lookup = await self.svc.resolver.lookup_for(dids) if dids and self.svc.resolver else None
            checked = await offload(partial(peer.check, lookup=lookup), doc)
            out = peer.sign(checked, await peer.consult(checked))  # the registry's word last (§22.1)
        except OAPError as e:
            self.m.conformance.labels(str(e.status)).inc()
            raise
        self.m.conformance.labels("200").inc()
        return respond(request, out)

    async def info(self, request: web.Request) -> web.Response:
        records = {r.origin: r for r in await self.svc.state.all()}
        logs = []
        for log_, _ in self.svc.witness.logs.values():
            rec = records.get(log_.origin)
            logs.append({"origin": log_.origin, "vkey": log_.vkey, "vkeys": [log_.vkey, *log_.extra_vkeys],
                         "url": log_.url,
                         "checkpoint_path": f"/{origin_path(log_.origin)}/checkpoint",
                         "size": rec.size if rec else None, "cosigned_at": rec.cosigned_at if rec else None,
                         "qpd": log_.qpd, "list": log_.source})
        peer = self.svc.peer
        out = {"name": self.svc.signer.name, "verifier_key": self.svc.signer.vkey,
               "verifier_keys": [s.vkey for s in self.svc.signers], "identity": peer.did,
               "signs_as": peer.signer, "registry": peer.registry.url if peer.registry else None,
               "sign_subtree": bool(self.svc.witness.subtree_signers), "logs": logs}
        if self.svc.lists is not None:
            out["log_lists"] = self.svc.lists.info()
        return respond(request, out)

    async def health(self) -> dict:
        await self.svc.state.all()  # the database answers
        return {}


def build_app(svc: WitnessService) -> web.Application:
    api = WitnessAPI(svc)
    cfg = svc.config
    app = make_app(cfg, api.requests, max_body=max(cfg.max_body, cfg.max_conformance_body), limits=api.limits)
    app.add_routes(api.routes())
    add_ops_routes(app, svc.metrics.registry, health=api.health)
    app[FAST_ROUTES_KEY] = api.fast_routes()
    if svc.lists is not None:
        lists = svc.lists

        async def start_lists(_: web.Application) -> None:
            await lists.start()

        async def stop_lists(_: web.Application) -> None:
            await lists.close()
        app.on_startup.append(start_lists)
        app.on_cleanup.append(stop_lists)
    if svc.resolver is not None:
        resolver = svc.resolver

        async def close_resolver(_: web.Application) -> None:
            await resolver.close()
        app.on_cleanup.append(close_resolver)
    if svc.peer.registry is not None:
        registry = svc.peer.registry

        async def close_registry(_: web.Application) -> None:
            await registry.close()
        app.on_cleanup.append(close_registry)
    return app
