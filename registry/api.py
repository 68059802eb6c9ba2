"""The registry's HTTP API (aiohttp): thin handlers over `RegistryService`.

Writes (primary only):
  POST /v1/records                     a record (JSON or CBOR) -> committed + anchored
Reads (primary and mirrors):
  GET  /v1/records?type=&subject=&offset=&limit=   records in commit order
  GET  /v1/records/<id>                one record, where and when it was committed
  GET  /v1/subjects/<DID or id>        every record naming it
  GET  /v1/files/<path>                raw bytes of a file in the registry tree
  GET  /v1/anchors/<seq>               anchor of registry commit <seq>: its .tlog-proof, or with several
                                       logs an oap-anchors/v1 file (one tlog-proof per log)
  GET  /v1/commits?limit=&before=      the latest commits (newest first), their records and log anchors
  GET  /v1/info
  GET  /v1/key-rotations               the registry's genesis key and its key rotations, each signed by the
                                       key before it (registry.keyrotation)
  GET  /v1/status/<id>[?issuer=<DID>]  signed OCSP-style status (see registry.status)
  GET  /v1/status-events?id=<id>[&id=..]  push: the signed answer of each id, again whenever it changes (SSE)
  GET  /v1/status-lists/<issuer>[/<n>[/suspension]]  W3C BitstringStatusListCredential
  GET  /<name>.git/...                 read-only Git smart HTTP (registry.githttp)
  GET  /healthz, /readyz, /metrics
Errors become `{"error": <App. B code>, "message": ...}` in `tlog.http.responses` only.
"""
from __future__ import annotations

import asyncio
import email.utils
import logging
import re
import time
from bisect import bisect_left
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from functools import lru_cache

import cbor2
from aiohttp import web

from tlog.errors import Forbidden, InvalidInput, NotFound, OAPError, RateLimited, Unavailable
from tlog.formats.anchors import parse_anchors
from tlog.formats.checkpoint import parse_checkpoint
from tlog.formats.did import is_did
from tlog.formats.diddoc import dids_to_resolve
from tlog.formats.encoding import parse_decimal
from tlog.formats.note import parse_note
from tlog.formats.times import format_utc
from tlog.http.app import add_ops_routes, make_app
from tlog.http.bodies import query_int, read_document
from tlog.http.fastpath import FAST_ROUTES_KEY, FastRoutes
from tlog.http.limits import Limits
from tlog.http.metrics import RequestMetrics
from tlog.http.middleware import listening_url, request_client
from tlog.http.reply import Reply
from tlog.http.responses import CBOR, CONTENT_TYPES, JSON, reply_format, respond
from tlog.http.sending import send_large, stream
from tlog.http.ui import CORS

from .anchoring import is_anchors_file
from .githttp import GitReadOnly
from .layout import classify
from .service import RegistryService
from .status import Produced
from .statusverify import status_id_of

log = logging.getLogger("oap.registry.server")
IMMUTABLE = "public, max-age=31536000, immutable"
MAX_ID = 1024
MAX_COMMITS = 100  # commits per page of /v1/commits
RECORDS_PER_COMMIT = 20  # records listed per commit there (record_count has them all)
MAX_WATCHED_IDS = 16  # ids per push stream
MAX_WATCHERS = 1000  # push streams open at once
MAX_WATCHERS_PER_CLIENT = 16  # of them from one client (tlog.http.limits.client_address): no one takes them all
WATCH_SECONDS = 3600.0  # a push stream ends after this; EventSource reconnects by itself
KEEPALIVE_SECONDS = 15.0


def _record_json(svc: RegistryService, path: str) -> dict:
    rec = svc.index.records[path]
    seq = svc.index.seq_of[path]
    return {"type": rec.type, "id": rec.id, "path": path, "seq": seq, "commit": svc.index.commits[seq].commit,
            "record": rec.body}


def _paths_of(order: list[str], seq_of: dict[str, int], seq: int) -> list[str]:
    """The record paths commit `seq` added: `order` is in commit order, so they are one run."""
    start = bisect_left(order, seq, key=seq_of.__getitem__)
    end = bisect_left(order, seq + 1, lo=start, key=seq_of.__getitem__)
    return order[start:end]


def _anchored_in(anchor: str | None) -> dict:
    """Where a commit's anchor is: each log's origin and index (`log_index`: the first's)."""
    if anchor is None:
        return {"log_index": None, "anchored_in": []}
    bundles = parse_anchors(anchor)
    out = [{"origin": parse_checkpoint(parse_note(b.checkpoint).text).origin, "index": b.index} for b in bundles]
    return {"log_index": bundles[0].index, "anchored_in": out}


_STATUS_ID = re.compile(r"[^\s\x00-\x1f]{1,%d}" % MAX_ID)  # \s is str.isspace()


def _status_key(raw: str, issuer: str | None) -> str:
    if not _STATUS_ID.fullmatch(raw):
        raise InvalidInput(f"status id must be 1..{MAX_ID} printable characters without spaces")
    if issuer is not None and not is_did(issuer):
        raise InvalidInput("issuer must be the DID of the credential's issuer")
    return status_id_of(raw, issuer)


@lru_cache(maxsize=64)
def _http_date(when: datetime) -> str:
    return email.utils.format_datetime(when, usegmt=True)


@lru_cache(maxsize=64)
def _timestamp(when: datetime) -> float:
    return when.timestamp()


def _cache_headers(next_update: datetime, this_update: datetime) -> tuple[tuple[str, str], ...]:
    """Cache-Control whose max-age never reaches past next_update (OCSP-style caching).

    The answer's format follows Accept, so caches key on it (Vary) and each format has
    its own ETag: a JSON ETag never validates a cached CBOR answer, or the reverse.
    """
    max_age = max(0, int(_timestamp(next_update) - time.time()))
    return (("Vary", "Accept"), ("Cache-Control", f"public, max-age={max_age}, no-transform"),
            ("Expires", _http_date(next_update)), ("Last-Modified", _http_date(this_update)), CORS)


def _etag(p: Produced, fmt: int) -> str:
    """One ETag per representation: the two JSON types have the same bytes but a cache keyed
    on Accept must not revalidate one with the other's tag."""
    return p.etag if fmt == JSON else p.etag[:-1] + ('-cbor"' if fmt == CBOR else '-oap"')


def _produced_reply(p: Produced, cache: tuple[tuple[str, str], ...], fmt: int) -> Reply:
    body = cbor2.dumps(p.body, canonical=True) if fmt == CBOR else p.json
    return Reply(body, (("Content-Type", CONTENT_TYPES[fmt]), ("ETag", _etag(p, fmt)), *cache))


def _matches(if_none_match: str, etag: str) -> bool:
    """If-None-Match (RFC 9110 §13.1.2): "*" matches any current representation; tags
    compare weakly (W/ ignored)."""
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags


def _cached(request: web.Request, p: Produced, next_update: datetime, this_update: datetime) -> web.StreamResponse:
    cache = _cache_headers(next_update, this_update)
    fmt = reply_format(request.headers.get("Accept", ""))
    etag = _etag(p, fmt)
    if _matches(request.headers.get("If-None-Match", ""), etag):
        return web.Response(status=304, headers={"ETag": etag, **dict(cache)})
    return _produced_reply(p, cache, fmt).response()


class RegistryAPI:
    """The registry's handlers, over a `RegistryService`. `routes` is the whole routing table."""

    def __init__(self, svc: RegistryService) -> None:
        self.svc, self.cfg, self.m = svc, svc.config, svc.metrics
        self.requests = RequestMetrics(self.m.requests, self.m.request_seconds)
        self.limits = Limits(self.cfg.rate_limit, self.cfg.rate_limit_burst)  # every request, either path
        self.watchers_of: dict[str, int] = {}  # open push streams per client

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/records", self.submit),
            web.get("/v1/records", self.list_records),
            web.get("/v1/records/{id:.+}", self.get_record),
            web.get("/v1/subjects/{who:.+}", self.about),
            web.get("/v1/files/{path:.+}", self.get_file),
            web.get("/v1/anchors/{seq}", self.get_anchor),
            web.get("/v1/commits", self.commits),
            web.get("/v1/info", self.info),
            web.get("/v1/log-list", self.log_list),
            web.get("/v1/key-rotations", self.key_rotations),
            web.get("/v1/status/{id:.+}", self.status),
            web.get("/v1/status-lists/{issuer}", self.status_list),
            web.get("/v1/status-lists/{issuer}/{n}", self.status_list),
            web.get("/v1/status-lists/{issuer}/{n}/{purpose}", self.status_list),
            web.get("/v1/status-events", self.status_events),
        ]

    def fast_routes(self) -> FastRoutes:
        return FastRoutes({"/v1/status/": ("/v1/status/{id}", self.status_reply)}, limits=self.limits,
                          record=self.requests.record, trusted_proxies=self.cfg.trusted_proxies)

    async def submit(self, request: web.Request) -> web.Response:
        if self.svc.read_only:
            raise Unavailable("the registry's data directory is read-only; it serves its history but accepts "
                              "no records until this clears", retry_after=60)
        if self.svc.batcher is None:
            raise Forbidden("this is a read-only mirror; submit records to the primary registry")
        try:
            doc = await read_document(request, self.cfg.max_body)
            dids = dids_to_resolve(doc)
            documents = await self.svc.resolver.documents_for(dids) if dids and self.svc.resolver else {}
            acc = await self.svc.batcher.submit(doc, documents)
        except OAPError as e:
            self.m.rejected.labels(e.code).inc()
            raise
        body = {"type": acc.record.type, "id": acc.record.id, "path": acc.record.path, "seq": acc.seq,
                "commit": acc.commit, "duplicate": not acc.fresh, "anchor": acc.anchor}
        if acc.receipt_anchor is not None:
            body["receipt_anchor"] = acc.receipt_anchor
        return respond(request, body)

    async def list_records(self, request: web.Request) -> web.Response:
        rtype, subject = request.query.get("type"), request.query.get("subject")
        offset = query_int(request, "offset", default=0)
        limit = min(query_int(request, "limit", default=100, minimum=1), 1000)
        index = self.svc.index
        paths = [r.path for r in index.about(subject)] if subject else index.order
        if rtype:
            paths = [p for p in paths if index.records[p].type == rtype]
        page = paths[offset:offset + limit]
        out = [{"type": index.records[p].type, "id": index.records[p].id, "path": p, "seq": index.seq_of[p]}
               for p in page]
        nxt = offset + len(page) if offset + len(page) < len(paths) else None
        return respond(request, {"records": out, "total": len(paths), "next_offset": nxt})

    async def get_record(self, request: web.Request) -> web.Response:
        rid = request.match_info["id"]
        path = self.svc.index.by_id.get(rid)
        if path is None:
            raise NotFound(f"no record with id {rid}")
        return respond(request, _record_json(self.svc, path), headers={"Cache-Control": IMMUTABLE})

    async def about(self, request: web.Request) -> web.Response:
        who = request.match_info["who"]
        recs = self.svc.index.about(who)
        if not recs:
            raise NotFound(f"no record names {who}")
        return respond(request, {"subject": who, "records": [_record_json(self.svc, r.path) for r in recs]})

    async def get_file(self, request: web.Request) -> web.Response:
        path = request.match_info["path"]
        try:
            classify(path)
        except InvalidInput:
            raise NotFound(f"{path} is not a registry path") from None
        rec = self.svc.index.records.get(path)
        data: bytes | None
        if rec is not None:
            data = rec.content
        else:
            head = self.svc.index.head
            data = await self.svc.in_thread(self.svc.repo.read, head.tree, path) if head else None
            if data is None:
                raise NotFound(f"{path} is not in the registry")
        ctype = "application/json" if path.endswith(".json") else "text/plain"
        return await send_large(request, web.Response(body=data, content_type=ctype,
                                                      headers={"Cache-Control": IMMUTABLE}))

    async def get_anchor(self, request: web.Request) -> web.Response:
        text = self.svc.anchor_text(parse_decimal(request.match_info["seq"], "seq"))
        # A log that was down adds its proof when it catches up: until every log's is in, the
        # answer may still grow (never lose a proof), so it is not cached as immutable.
        cache = IMMUTABLE if self.svc.anchor_complete(text) else "public, max-age=5"
        ctype = "application/json" if is_anchors_file(text) else "text/plain"
        return web.Response(text=text, content_type=ctype, headers={"Cache-Control": cache})

    async def commits(self, request: web.Request) -> web.Response:
        """The latest commits, newest first, each with the records it added and its log
        anchor (the .tlog-proof, or null until it is in the log): what the explorer lists and
        verifies, without a request per commit. Pages go back with `before` (a seq)."""
        limit = query_int(request, "limit", default=20, minimum=1)
        if limit > MAX_COMMITS:
            raise InvalidInput(f"limit must be in 1..{MAX_COMMITS}")
        index = self.svc.index
        commits = index.commits
        end = len(commits)
        if "before" in request.query:
            end = min(end, query_int(request, "before"))
        page = commits[max(0, end - limit):end][::-1]
        anchors = await self.svc.in_thread(self._anchors, [c.seq for c in page])
        out = []
        for c, anchor in zip(page, anchors):
            paths = _paths_of(index.order, index.seq_of, c.seq)
            out.append({
                "seq": c.seq, "commit": c.commit, "tree": c.tree,
                "time": format_utc(datetime.fromtimestamp(c.time, UTC)),
                "record_count": len(paths),
                "records": [{"type": index.records[p].type, "id": index.records[p].id, "path": p}
                            for p in paths[:RECORDS_PER_COMMIT]],
                "anchor": anchor,
                **_anchored_in(anchor),
            })
        body = {"head": commits[-1].seq if commits else None, "commits": out,
                "next_before": page[-1].seq if page and page[-1].seq > 0 else None}
        return respond(request, body)

    def _anchors(self, seqs: list[int]) -> list[str | None]:
        out: list[str | None] = []
        for seq in seqs:
            try:
                out.append(self.svc.anchor_text(seq))
            except NotFound:  # not in the log yet (or a mirror that has not fetched it)
                out.append(None)
        return out

    async def info(self, request: web.Request) -> web.Response:
        return respond(request, self.svc.info())

    async def log_list(self, request: web.Request) -> web.Response:
        """The signed log list (§6.2): verify it with the pinned registry key before use."""
        if self.svc.log_list is None:
            raise NotFound("this registry publishes no log list (log_list is not set)")
        return respond(request, self.svc.log_list.current())

    async def key_rotations(self, request: web.Request) -> web.Response:
        return respond(request, self.svc.key_rotations())

    def status_reply(self, raw: str, accept: str) -> Reply | None:
        """The fast path's status answer (tlog.http.fastpath): no query, no conditional request."""
        now = self.svc.status_now(_status_key(raw, None))
        if now is None:
            return None
        epoch, p = now
        return _produced_reply(p, _cache_headers(epoch.next_update, epoch.this_update), reply_format(accept))

    async def status(self, request: web.Request) -> web.StreamResponse:
        key = _status_key(request.match_info["id"], request.query.get("issuer"))
        epoch, p = await self.svc.status(key)
        return _cached(request, p, epoch.next_update, epoch.this_update)

    async def status_list(self, request: web.Request) -> web.StreamResponse:
        issuer = request.match_info["issuer"]
        number = parse_decimal(request.match_info.get("n", "0"), "list number", maximum=65535)
        purpose = request.match_info.get("purpose", "revocation")
        if not is_did(issuer):
            raise InvalidInput("status lists are per issuer DID: /v1/status-lists/<issuer DID>/<n>")
        if purpose not in ("revocation", "suspension") or ("purpose" in request.match_info and purpose != "suspension"):
            raise NotFound("the suspension list is /v1/status-lists/<issuer DID>/<n>/suspension")
        base = self.svc.config.public_url or listening_url(request)  # loopback only: see RegistryConfig
        url = f"{base}/v1/status-lists/{issuer}/{number}" + ("/suspension" if purpose == "suspension" else "")
        epoch, p = self.svc.status_list(issuer, number, url, purpose)
        return _cached(request, p, epoch.next_update, epoch.this_update)

    async def status_events(self, request: web.Request) -> web.StreamResponse:
        """Push (Server-Sent Events): the signed answer of each id now, then again within
        seconds of every epoch that changes it (a kill switch, revocation, suspension or
        recovery), so a relying party need not wait for `next_update`. Each event is
        `event: status`, `id: <epoch>`, `data: <the answer, JSON on one line>`; a comment
        line every 15 s keeps proxies from closing the stream; it ends after an hour."""
        ids = request.query.getall("id", [])
        if not 1 <= len(ids) <= MAX_WATCHED_IDS:
            raise InvalidInput(f"give the status ids to follow as 1..{MAX_WATCHED_IDS} id parameters")
        issuer = request.query.get("issuer")
        keys = list(dict.fromkeys(_status_key(i, issuer) for i in ids))
        first = {k: (await self.svc.status(k))[1] for k in keys}  # a registry without status answers 404/503 here
        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no", CORS[0]: CORS[1]}
        if request.method == "HEAD":  # the head only: no stream, no watcher
            return await stream(request, (), content_type="text/event-stream", reserve=0, headers=headers)
        client = request_client(request, self.cfg.trusted_proxies)
        if self.svc.watchers >= MAX_WATCHERS:
            raise Unavailable("too many push streams are open; retry shortly", retry_after=5)
        if self.watchers_of.get(client, 0) >= MAX_WATCHERS_PER_CLIENT:
            raise RateLimited(f"at most {MAX_WATCHERS_PER_CLIENT} push streams per client; follow up to "
                              f"{MAX_WATCHED_IDS} ids in each", retry_after=15)
        self.svc.watchers += 1
        self.watchers_of[client] = self.watchers_of.get(client, 0) + 1
        try:
            return await stream(request, self._events(keys, first), content_type="text/event-stream",
                                reserve=16 * 1024, headers=headers)
        finally:
            self.svc.watchers -= 1
            if self.watchers_of[client] == 1:
                del self.watchers_of[client]
            else:
                self.watchers_of[client] -= 1

    async def _events(self, keys: list[str], answers: dict[str, Produced]) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        end = loop.time() + WATCH_SECONDS
        sent: dict[str, tuple] = {}
        yield b"retry: 2000\n\n"
        while True:
            for key, p in answers.items():
                mark = (p.body["status"], p.body["proof"].get("leaf"))
                if sent.get(key) != mark:
                    sent[key] = mark
                    yield b"event: status\nid: %d\ndata: %s\n\n" % (p.body["epoch"]["epoch"], p.json)
            left = end - loop.time()
            if left <= 0 or not self.svc.watching:
                return
            number = max(p.body["epoch"]["epoch"] for p in answers.values())
            epoch = await self.svc.next_epoch(number, min(KEEPALIVE_SECONDS, left))
            if epoch is None:
                if not self.svc.watching:
                    return
                yield b": keep-alive\n\n"
                continue
            answers = {k: (await self.svc.status(k))[1] for k in keys}

    async def ready(self) -> dict:
        svc = self.svc
        problems = []
        if svc.index.head is None:
            problems.append("no history")
        if svc.writer is not None and svc.writer.broken:
            problems.append(svc.writer.broken)
        if svc.batcher is not None and not svc.batcher.running:
            problems.append("batcher stopped")
        if svc.producer is not None and svc.epoch is None:
            problems.append("no status epoch yet")
        return {"problems": problems, "seq": svc.index.head.seq if svc.index.head else None}



def build_app(svc: RegistryService) -> web.Application:
    api = RegistryAPI(svc)
    app = make_app(svc.config, api.requests, max_body=svc.config.max_git_body, limits=api.limits)
    app.add_routes(api.routes())
    add_ops_routes(app, svc.metrics.registry, ready=api.ready)
    app[FAST_ROUTES_KEY] = api.fast_routes()
    GitReadOnly(svc.repo.path, max_body=svc.config.max_git_body, gate=svc.gate).routes(app, svc.config.name)

    async def end_push_streams(app: web.Application) -> None:
        svc.stop_watchers()

    app.on_shutdown.append(end_push_streams)
    return app
