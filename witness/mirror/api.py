"""The mirror's HTTP API (C2SP tlog-mirror, tlog-tiles): a thin aiohttp layer over `witness.mirror.core`.

    POST /add-checkpoint                       the pending checkpoint (tlog-witness request; 200, empty body)
    POST /add-entries                          streamed entry packages (gzip accepted); 200 cosignature
                                               lines, 202/409 text/x.tlog.mirror-info
    GET  /<hex sha256(origin)>/checkpoint      the mirror checkpoint, with the mirror's cosignature
    GET  /<hex sha256(origin)>/tile/<L>/<N>[.p/<W>]        hash tiles of the copy (tlog-tiles)
    GET  /<hex sha256(origin)>/tile/entries/<N>[.p/<W>]    entry bundles, gzip when accepted
    GET  /v1/info                              name, keys, and per log: prefixes, sizes, minimum index
    GET  /healthz, GET /metrics

The submission and monitoring prefixes are the server's root. Protocol answers are text
(`protocol_error`); /v1/info uses the shared OAP JSON mapping.
"""
from __future__ import annotations

import asyncio
import logging
import time

from aiohttp import web

from tlog.errors import NotFound, OAPError, Unavailable, UnsupportedMediaType
from tlog.formats.mirror import MIRROR_INFO
from tlog.formats.tiles import TILE_HEIGHT, TILE_WIDTH, tile_coords
from tlog.http.app import add_ops_routes, make_app
from tlog.http.bodies import content_encoding, payload_error, read_body
from tlog.http.limits import Limits
from tlog.http.metrics import RequestMetrics
from tlog.http.middleware import listening_url
from tlog.http.reply import Reply
from tlog.http.responses import respond
from tlog.http.sending import entry_bundle_body

from ..core import SizeConflict, origin_path
from .config import MirroredLog
from .core import BodyEnded, MirrorConflict
from .service import MirrorService

log = logging.getLogger("oap.mirror.server")

TEXT = "text/plain; charset=utf-8"
TLOG_SIZE = "text/x.tlog.size"
CHECKPOINT_CACHE = "public, max-age=1, must-revalidate"
IMMUTABLE = "public, max-age=31536000, immutable"
OCTETS = "application/octet-stream"


def protocol_error(e: OAPError) -> Reply:
    """The text answers of tlog-witness and tlog-mirror."""
    if isinstance(e, MirrorConflict):
        return Reply(e.info.encode(), (("Content-Type", MIRROR_INFO),), 409)
    if isinstance(e, SizeConflict):
        return Reply(f"{e.known_size}\n".encode(), (("Content-Type", TLOG_SIZE),), 409)
    headers: tuple[tuple[str, str], ...] = (("Content-Type", TEXT),)
    if isinstance(e, Unavailable):
        headers += (("Retry-After", str(e.data.get("retry_after", 1))),)
    return Reply((e.message.replace("\n", " ") + "\n").encode(), headers, e.status)


class MirrorAPI:
    def __init__(self, svc: MirrorService) -> None:
        self.svc, self.cfg, self.m, self.mirror = svc, svc.config, svc.metrics, svc.mirror
        self.by_path = {origin_path(lg.origin): lg for lg in self.cfg.logs}
        self.requests = RequestMetrics(self.m.requests)
        self.limits = Limits(self.cfg.rate_limit, self.cfg.rate_limit_burst, applies=self.limited)
        self.uploads = 0

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/add-checkpoint", self.add_checkpoint),
            web.post("/add-entries", self.add_entries),
            *([web.post("/sign-subtree", self.sign_subtree)] if self.mirror.subtree_signers else []),
            web.get("/{hash:[0-9a-f]{64}}/checkpoint", self.checkpoint),
            web.get("/{hash:[0-9a-f]{64}}/tile/{path:.+}", self.tile),
            web.get("/v1/info", self.info),
        ]

    @staticmethod
    def limited(method: str, path: str) -> bool:
        """Writes are rate-limited per client; the read API belongs behind a cache."""
        return method == "POST"

    # --- writes ----------------------------------------------------------------------------

    async def add_checkpoint(self, request: web.Request) -> web.Response:
        try:
            body = await read_body(request, self.cfg.max_body)
            cp = await self.mirror.add_checkpoint(body, max_body=self.cfg.max_body)
        except OAPError as e:
            self.m.add_checkpoint.labels(str(e.status)).inc()
            if e.status >= 500:
                log.error("add-checkpoint refused with %d: %s", e.status, e.message)
            return protocol_error(e).response()
        self.m.add_checkpoint.labels("200").inc()
        self.svc.refresh_gauges()
        log.debug("pending checkpoint of size %d", cp.size)
        return web.Response(body=b"", headers={"Content-Type": TEXT})

    async def sign_subtree(self, request: web.Request) -> web.Response:
        """POST /sign-subtree (C2SP tlog-mirror, as tlog-witness): subtree cosignatures by the
        mirror's ML-DSA-44 key(s) for a checkpoint this mirror cosigned."""
        try:
            body = await read_body(request, self.cfg.max_body)
            lines = await self.mirror.sign_subtree(body, max_body=self.cfg.max_body)
        except OAPError as e:
            self.m.sign_subtree.labels(str(e.status)).inc()
            return protocol_error(e).response()
        self.m.sign_subtree.labels("200").inc()
        return web.Response(body=lines.encode(), headers={"Content-Type": TEXT})

    async def add_entries(self, request: web.Request) -> web.Response:
        t0 = time.perf_counter()
        headers = {"Accept-Encoding": "gzip"}  # C2SP tlog-mirror: say which encodings we take
        try:
            media = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
            if media != OCTETS:
                raise UnsupportedMediaType(f"add-entries takes {OCTETS}, not {media or 'no Content-Type'!r}")
            content_encoding(request)
            if self.uploads >= self.cfg.max_uploads:
                raise Unavailable(f"{self.uploads} uploads in progress; retry shortly", retry_after=1)
            self.uploads += 1
            self.m.uploads.set(self.uploads)
            try:
                result = await self.mirror.add_entries(self._reader(request))
            finally:
                self.uploads -= 1
                self.m.uploads.set(self.uploads)
                self.svc.refresh_gauges()
        except OAPError as e:
            self.m.add_entries.labels(str(e.status)).inc()
            if e.status >= 500:
                log.error("add-entries refused with %d: %s", e.status, e.message)
            resp = protocol_error(e).response()
            resp.headers.update(headers)
            return resp
        except Exception:  # a bug or a failing disk: still a 500 in the protocol's text form
            log.exception("add-entries failed")
            self.m.add_entries.labels("500").inc()
            resp = protocol_error(OAPError("internal error")).response()
            resp.headers.update(headers)
            return resp
        self.m.add_entries.labels(str(result.status)).inc()
        self.m.upload_seconds.observe(time.perf_counter() - t0)
        ctype = TEXT if result.status == 200 else MIRROR_INFO
        return web.Response(body=result.body, status=result.status, headers={"Content-Type": ctype, **headers})

    def _reader(self, request: web.Request):
        """The body a chunk at a time; a stall longer than read_timeout, a reset connection or a
        broken compressed stream ends it (BodyEnded), and the mirror keeps what it authenticated."""
        content, timeout = request.content, self.cfg.read_timeout

        async def read() -> bytes:
            try:
                async with asyncio.timeout(timeout):
                    return await content.readany()
            except TimeoutError:
                raise BodyEnded("the client stopped sending") from None
            except web.RequestPayloadError as e:  # a bad gzip stream, a body cut short
                raise BodyEnded(payload_error(request, e).message) from None
            except Exception as e:  # noqa: BLE001 - a reset: the body ends here
                raise BodyEnded(f"{type(e).__name__}: {e}") from None

        return read

    # --- the monitoring prefix (tlog-tiles) -------------------------------------------------

    def _log(self, request: web.Request):
        lg = self.by_path.get(request.match_info["hash"])
        if lg is None:
            raise NotFound("this mirror keeps no copy of that log")
        return lg

    async def checkpoint(self, request: web.Request) -> web.Response:
        cp = self.mirror.checkpoint(self._log(request).origin)
        if cp is None:
            raise NotFound("no mirror checkpoint for this log yet")
        return web.Response(text=cp.note, content_type="text/plain", charset="utf-8",
                            headers={"Cache-Control": CHECKPOINT_CACHE})

    def _minimum_index(self, lg: MirroredLog) -> int:
        """The pruning bound in force: the configured one, but never above the mirror
        checkpoint's size (C2SP tlog-tiles: the minimum index "MUST be less than or equal to
        the tree size of the log's current checkpoint"; a copy still catching up prunes
        nothing it has not stored yet)."""
        rec = self.mirror.store.record(lg.origin)
        return min(lg.minimum_index, rec.mirror.size if rec.mirror is not None else 0)

    async def tile(self, request: web.Request) -> web.Response:
        lg = self._log(request)
        level, index, width = tile_coords("tile/" + request.match_info["path"])
        end = (index + 1) * TILE_WIDTH << (TILE_HEIGHT * (level or 0))
        if lg.minimum_index and end <= (minimum := self._minimum_index(lg)):
            raise NotFound(f"pruned: this copy starts at index {minimum}")
        store = self.mirror.store
        if level is None:
            data = await asyncio.to_thread(store.bundle, lg.origin, index, width)
        elif level * TILE_HEIGHT >= 64:
            data = None
        else:
            data = await asyncio.to_thread(store.tile, lg.origin, level, index, width)
        if data is None:
            raise NotFound("tile not available: the mirror has not stored those entries")
        headers = {"Content-Type": OCTETS, "Cache-Control": IMMUTABLE}
        if level is None:
            data, more = await entry_bundle_body(data, request.headers.get("Accept-Encoding", ""))
            headers.update(more)
        return web.Response(body=data, headers=headers)

    async def info(self, request: web.Request) -> web.Response:
        base = self.cfg.monitoring_prefix.rstrip("/") or listening_url(request)
        logs = []
        for lg in self.mirror.logs.values():  # as reloaded (SIGHUP), in configuration order
            rec = self.mirror.store.record(lg.origin)
            h = origin_path(lg.origin)
            logs.append({"origin": lg.origin, "vkey": lg.vkey, "vkeys": [lg.vkey, *lg.extra_vkeys], "url": lg.url,
                         "monitoring_prefix": f"{base}/{h}",
                         "checkpoint_path": f"/{h}/checkpoint",
                         "pending_size": rec.pending.size if rec.pending else None, "next_entry": rec.next_entry,
                         "size": rec.mirror.size if rec.mirror else None,
                         "cosigned_at": rec.mirror.cosigned_at if rec.mirror else None,
                         "minimum_index": self._minimum_index(lg), "retention_policy": lg.retention_policy or None})
        signers = self.svc.signers
        return respond(request, {"kind": "mirror", "name": signers[0].name,
                                 "verifier_key": signers[0].vkey, "verifier_keys": [s.vkey for s in signers],
                                 "monitoring_prefix": base, "logs": logs})

    async def health(self) -> dict:
        await asyncio.to_thread(self.mirror.store.record, "")
        return {}


def build_app(svc: MirrorService) -> web.Application:
    api = MirrorAPI(svc)
    cfg = svc.config
    app = make_app(cfg, api.requests, max_body=cfg.max_body, limits=api.limits)
    app.add_routes(api.routes())
    add_ops_routes(app, svc.metrics.registry, health=api.health)
    return app

