"""The log's HTTP API: C2SP tlog-tiles reads, OAP writes and proofs.

    GET  /checkpoint                        signed checkpoint with cosignatures (tlog-checkpoint)
    GET  /tile/<L>/<N>[.p/<W>]              hash tiles, and entry bundles under /tile/entries/ (tlog-tiles)
    POST /v1/entries                        one entry -> index, proof, checkpoint, .tlog-proof bundle
    POST /v1/entries:batch                  {"entries": [...]} -> results in request order
    GET  /v1/entries/<index>                an entry
    GET  /v1/entries:lookup?leaf_hash=      index of a leaf hash
    GET  /v1/entries:lookup?receipt_hash=   the receipt entries that anchor a receipt hash
    GET  /v1/receipts?signer=&since=        receipt entries by signer (OAP-CORE-1.0 §28.5)
    GET  /v1/policy                         the tlog-policy for this log's clients
    GET  /ui/                               the explorer (tlog/ui)
    GET  /v1/proof/inclusion?index=&size=   RFC 9162 inclusion proof (or by leaf_hash=)
    POST /v1/proof/inclusion:batch          {"indices": [...], "size"?} -> proofs, streamed
    GET  /v1/proof/consistency?old=&new=    RFC 9162 consistency proof
    GET  /v1/info                           origin, key, size, and the URLs of its registry, witnesses, mirrors
    GET  /healthz, /readyz, /metrics

Handlers parse, call the core (appender, tree view, entry reader) and shape the
answer; errors become responses in `tlog.http.responses` only. The reads clients
send in bulk and single appends are also answered on the fast path
(`tlog.http.fastpath`) by the same functions.
"""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable
from datetime import UTC, datetime
from functools import partial

import cbor2
import numpy as np
from aiohttp import web

from tlog.errors import InvalidInput, NotFound, NotPublished, OAPError, TooLarge
from tlog.formats.did import did_key_from_public, is_did, parse_signer
from tlog.formats.encoding import b64enc, parse_decimal
from tlog.formats.entries import MAX_ENTRY_BYTES, ReceiptRow, decode_entry
from tlog.formats.hashing import format_sha256, parse_leaf_hash, parse_sha256
from tlog.formats.policy import parse_policy
from tlog.formats.tiles import TILE_WIDTH
from tlog.formats.times import format_utc, parse_utc
from tlog.http.app import add_ops_routes, make_app
from tlog.http.bodies import query_int, read_bounded, read_document
from tlog.http.fastpath import FAST_ROUTES_KEY, FastRoutes
from tlog.http.fastpath import Request as FastRequest
from tlog.http.metrics import RequestMetrics
from tlog.http.middleware import request_client
from tlog.http.reply import Reply
from tlog.http.responses import CBOR, CONTENT_TYPES, reply_format, respond
from tlog.http.sending import answer, entry_bundle_body, send_large
from tlog.merkle.proofs import PROOF_CHUNK, cbor_map_parts, inclusion_pieces
from tlog.server.appends import SingleAppends, batch_answer
from tlog.server.config import LogConfig
from tlog.server.limits import log_limits
from tlog.server.pipeline import WritePipeline
from tlog.server.service import LogService
from tlog.server.tiles import CHECKPOINT_HEADERS, IMMUTABLE, TILE_HEADERS, hash_tile, pruned, pruned_error, tile_at
from tlog.storage.interface import LogState

MAX_RECEIPTS = 1000  # receipts per page of /v1/receipts


def _signer_param(text: str) -> str:
    """A signer as the receipts index names it: did:key for an Ed25519 key however spelled
    (did:key or "ed25519:<base64>"), any other DID as given."""
    try:
        return did_key_from_public(parse_signer(text))
    except InvalidInput:
        if is_did(text):
            return text
    raise InvalidInput("signer must be a DID or an ed25519:<base64> key")


def _receipt_json(r: ReceiptRow) -> dict:
    out = {"index": r.index, "signer": r.signer, "receipt_hash": format_sha256(r.receipt_hash),
           "logged_at": format_utc(datetime.fromtimestamp(r.logged_at, UTC))}
    if r.timestamp is not None:
        out["timestamp"] = r.timestamp
    return out


def neighbours(cfg: LogConfig, client_policy: str) -> dict:
    """The services a reader of this log finds from its /v1/info: its own public URL, its
    registry, its witnesses (name and URL, from the witness configuration) and its mirrors."""
    witnesses = [{"name": w.name, "url": w.url} for w in parse_policy(client_policy).witnesses.values()
                 if w.url and not w.mirror] if client_policy else []
    return {"public_url": cfg.public_url or None, "registry_url": cfg.registry_url or None,
            "witnesses": witnesses, "mirrors": list(cfg.mirror_urls)}


class LogAPI:
    """The log's handlers, over a `LogService`. `routes` is the whole routing table."""

    def __init__(self, svc: LogService) -> None:
        cfg = self.cfg = svc.config
        self.svc, self.m = svc, svc.metrics
        self.requests = RequestMetrics(self.m.requests, self.m.request_seconds)
        self.limits = log_limits(cfg)
        assert self.limits.writes is not None, "the log's limits include its write gate"
        self.writes = WritePipeline(cfg, self.limits.writes, svc.appender,
                                    SingleAppends(svc.appender, svc.hashes, self.m), svc.resolver, self.m)
        self.neighbours = neighbours(cfg, svc.policy)

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/checkpoint", self.checkpoint),
            web.get("/tile/{path:.+}", self.tile),
            web.post("/v1/entries", self.add_entry),
            web.post("/v1/entries:batch", self.add_batch),
            web.get("/v1/entries:lookup", self.lookup),
            web.get("/v1/entries/{index}", self.get_entry),
            web.get("/v1/receipts", self.receipts),
            web.get("/v1/proof/inclusion", self.inclusion),
            web.post("/v1/proof/inclusion:batch", self.inclusion_batch),
            web.get("/v1/proof/consistency", self.consistency),
            web.get("/v1/info", self.info),
            web.get("/v1/policy", self.policy),
        ]

    def fast_routes(self) -> FastRoutes:
        return FastRoutes(
            {"/checkpoint": ("/checkpoint", self.checkpoint_reply), "/tile/": ("/tile/{path}", self.hash_tile_reply)},
            posts={"/v1/entries": ("/v1/entries", self.add_entry_fast, self.cfg.max_entry_body)},
            limits=self.limits, record=self.requests.record, trusted_proxies=self.cfg.trusted_proxies)

    def served(self) -> LogState:
        """The published state; nothing of an unwitnessed tree is served before its quorum."""
        if not self.svc.appender.published:
            raise NotPublished("no checkpoint has reached the witness quorum yet", retry_after=1)
        return self.svc.state

    # --- tlog-tiles reads: Reply functions for the fast path, and their aiohttp handlers ---

    def checkpoint_reply(self, rest: str = "", accept: str = "") -> Reply:
        return Reply(self.served().note.encode(), CHECKPOINT_HEADERS)

    def hash_tile_reply(self, path: str, accept: str = "") -> Reply | None:
        data = hash_tile(self.svc.hashes, lambda: self.served().size, path, self.svc.config.minimum_index)
        return None if data is None else Reply(data, TILE_HEADERS)

    async def checkpoint(self, request: web.Request) -> web.Response:
        return self.checkpoint_reply().response()

    async def tile(self, request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        reply = self.hash_tile_reply(path)
        if reply is None:
            _, index, width = tile_at("tile/" + path)
            start, minimum = index * TILE_WIDTH, self.svc.config.minimum_index
            if pruned(None, index, width, minimum):
                raise pruned_error(minimum)
            if start + width > self.served().size:
                raise NotFound("entry bundle not available for the current tree size")
            # Up to 256 entries of 64 KiB: counted against the bytes in flight while sent.
            bundle = await self.svc.reader.bundle(start, width)
            body, headers = await entry_bundle_body(bundle, request.headers.get("Accept-Encoding", ""))
            resp = Reply(body, TILE_HEADERS).response()
            resp.headers.update(headers)
            return await send_large(request, resp)
        return reply.response()

    # --- OAP writes: the write pipeline (tlog.server.pipeline), one for every route -----------

    def add_entry_fast(self, body: bytes, req: FastRequest) -> Awaitable[Reply]:
        """POST /v1/entries on the fast path, with the body in hand. A small one is answered
        with no task per request (the common case, and the one single appends' throughput
        depends on); every refusal is answered here, as the error middleware answers it."""
        t0 = time.perf_counter()
        try:
            return self.writes.entry(req.authorization, req.client, req.content_type, body,
                                     reply_format(req.accept), t0)
        except OAPError as e:
            failed = asyncio.get_running_loop().create_future()
            failed.set_exception(e)  # not raised: aiohttp would run the pipeline (and take its tokens) again
            return failed

    async def add_entry(self, request: web.Request) -> web.Response:
        t0 = time.perf_counter()
        headers = request.headers
        reply = await self.writes.entry(headers.get("Authorization"), request_client(request, self.cfg.trusted_proxies),
                                        headers.get("Content-Type"), partial(read_bounded, request),
                                        reply_format(headers.get("Accept", "")), t0)
        return reply.response()

    async def add_batch(self, request: web.Request) -> web.StreamResponse:
        t0 = time.perf_counter()
        headers = request.headers
        added = await self.writes.batch(headers.get("Authorization"), request_client(request, self.cfg.trusted_proxies),
                                        headers.get("Content-Type"), partial(read_bounded, request), t0)
        fmt = reply_format(headers.get("Accept", ""))
        return await answer(request, batch_answer(added.state, self.svc.hashes, added, cbor=fmt == CBOR),
                            content_type=CONTENT_TYPES[fmt],
                            streamed=len(added) > PROOF_CHUNK, reserve=4 * PROOF_CHUNK * 1024)

    # --- reads and proofs -----------------------------------------------------------------

    async def get_entry(self, request: web.Request) -> web.Response:
        index = parse_decimal(request.match_info["index"], "index")
        state = self.served()
        if index < self.svc.config.minimum_index:
            raise NotFound(f"pruned: this log starts at index {self.svc.config.minimum_index} (its minimum index)")
        lh, data = await self.svc.reader.entry(index, state.size)
        entry = decode_entry(data)
        body = {"index": index, "leaf_hash": b64enc(lh), "entry": entry, "entry_cbor": b64enc(data)}
        logged_at = await self._logged_at(index, entry, state.size)
        if logged_at is not None:
            body["logged_at"] = logged_at
        return respond(request, body, headers={"Cache-Control": IMMUTABLE})

    async def _logged_at(self, index: int, entry: object, size: int) -> str | None:
        """When the log committed a receipt entry (its receipt index records it; other entry
        types carry no log time). None for a copy of the log without that index."""
        if not isinstance(entry, dict) or entry.get("type") != "receipt":
            return None
        try:
            digest = parse_sha256(entry["receipt_hash"], "receipt_hash")
            rows = await self.svc.reader.receipts(size, receipt_hash=digest, after=index - 1, limit=1)
        except NotFound:
            return None
        if not rows or rows[0].index != index:
            return None
        return _receipt_json(rows[0])["logged_at"]

    async def lookup(self, request: web.Request) -> web.Response:
        if "receipt_hash" in request.query:
            digest = parse_sha256(request.query["receipt_hash"], "receipt_hash")
            state = self.served()
            rows = await self.svc.reader.receipts(state.size, receipt_hash=digest, limit=MAX_RECEIPTS)
            if not rows:
                raise NotFound("no receipt entry anchors this receipt hash")
            return respond(request, {"tree_size": state.size, "receipts": [_receipt_json(r) for r in rows]})
        lh = parse_leaf_hash(request.query.get("leaf_hash", ""))
        state = self.served()
        idx = await self.svc.reader.index_of(lh, state.size)
        return respond(request, {"index": idx, "leaf_hash": b64enc(lh)})

    async def receipts(self, request: web.Request) -> web.Response:
        """A signer's receipt entries, in index order, a page at a time: after a key is
        compromised, its owner lists what it signed since (OAP-CORE-1.0 §28.5)."""
        q = request.query
        signer = _signer_param(q.get("signer", ""))
        since = parse_utc(q["since"], "since").timestamp() if "since" in q else None
        after = query_int(request, "after") if "after" in q else -1
        limit = query_int(request, "limit", default=MAX_RECEIPTS)
        if not 1 <= limit <= MAX_RECEIPTS:
            raise InvalidInput(f"limit must be in 1..{MAX_RECEIPTS}")
        state = self.served()
        rows = await self.svc.reader.receipts(state.size, signer=signer, since=since, after=after, limit=limit)
        body: dict = {"tree_size": state.size, "signer": signer, "receipts": [_receipt_json(r) for r in rows]}
        if len(rows) == limit:
            body["next_after"] = rows[-1].index
        return respond(request, body)

    async def inclusion(self, request: web.Request) -> web.Response:
        state = self.served()
        size = query_int(request, "size", default=state.size)
        if size > state.size or size == 0:
            raise InvalidInput(f"size must be in 1..{state.size}")
        if "leaf_hash" in request.query:
            index = await self.svc.reader.index_of(parse_leaf_hash(request.query["leaf_hash"]), size)
        else:
            index = query_int(request, "index")
        if index >= size:
            raise InvalidInput(f"index {index} is not in a tree of size {size}")
        view = self.svc.view_at(size)
        self.m.proofs.labels("inclusion").inc()
        body = {"index": index, "tree_size": size, "inclusion_proof": [b64enc(h) for h in view.inclusion_proof(index)]}
        if size == state.size:
            body["checkpoint"] = state.note
        return respond(request, body)

    async def inclusion_batch(self, request: web.Request) -> web.StreamResponse:
        cfg = self.cfg
        doc = await read_document(request, min(cfg.max_body, 64 + 24 * cfg.max_proof_batch),
                                  max_items=cfg.max_proof_batch + 16)
        if not isinstance(doc, dict) or not set(doc) <= {"indices", "size"} or not isinstance(doc.get("indices"), list):
            raise InvalidInput('body must be {"indices": [int, ...], "size": optional int}')
        state = self.served()
        size = doc.get("size", state.size)
        if type(size) is not int or not 1 <= size <= state.size:
            raise InvalidInput(f"size must be an integer in 1..{state.size}")
        indices = doc["indices"]
        if len(indices) > cfg.max_proof_batch:
            raise TooLarge(f"at most {cfg.max_proof_batch} indices per request")
        if not all(type(i) is int for i in indices):
            raise InvalidInput("indices must be integers")
        try:
            idx = np.array(indices, dtype=np.int64)
        except OverflowError:
            raise InvalidInput("index out of range") from None
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= size):
            raise InvalidInput(f"every index must be in 0..{size - 1} for tree size {size}")
        view = self.svc.view_at(size)
        self.m.proofs.labels("inclusion").inc(len(indices))
        # Both encodings are written by numpy (tlog.merkle.proofs), PROOF_CHUNK proofs at a
        # time: a 100,000-proof answer (~115 MB of JSON) is never held whole.
        fmt = reply_format(request.headers.get("Accept", ""))
        cbor = fmt == CBOR
        note = state.note if size == state.size else None
        if cbor:
            prefix, suffix = cbor_map_parts({"tree_size": cbor2.dumps(size), "checkpoint": cbor2.dumps(note)},
                                            "proofs")
        else:
            head = {"tree_size": size} if note is None else {"tree_size": size, "checkpoint": note}
            prefix, suffix = json.dumps(head, separators=(",", ":"))[:-1].encode() + b',"proofs":', b"}"

        def pieces():
            yield prefix
            yield from inclusion_pieces(view, self.svc.hashes, idx, cbor=cbor)
            yield suffix

        return await answer(request, pieces(), content_type=CONTENT_TYPES[fmt],
                            streamed=idx.size > PROOF_CHUNK, reserve=4 * PROOF_CHUNK * 1024)

    async def consistency(self, request: web.Request) -> web.Response:
        state = self.served()
        new = query_int(request, "new", default=state.size)
        old = query_int(request, "old")
        if new > state.size:
            raise InvalidInput(f"new must be at most the tree size {state.size}")
        if old > new:
            raise InvalidInput("old must not exceed new")
        self.m.proofs.labels("consistency").inc()
        proof = self.svc.view_at(new).consistency_proof(old)
        return respond(request, {"old": old, "new": new, "consistency_proof": [b64enc(h) for h in proof]})

    async def info(self, request: web.Request) -> web.Response:
        seq = self.svc.appender
        body = {"origin": self.svc.origin, "verifier_key": self.svc.signer.vkey, "max_entry_bytes": MAX_ENTRY_BYTES,
                "published": seq.published, "halted": seq.halted is not None}
        if self.svc.extra_signers:  # a key rotation's overlap: every key that signs the checkpoints
            body["verifier_keys"] = [self.svc.signer.vkey, *(s.vkey for s in self.svc.extra_signers)]
        if seq.published:
            state = self.svc.state
            body.update(tree_size=state.size, root_hash=b64enc(state.root), checkpoint=state.note)
        if seq.halted is not None:
            body["halted_reason"] = seq.halted.message
        body.update(self.neighbours)
        # where the log starts (C2SP tlog-tiles pruning) and the policy that permits it
        body.update(minimum_index=self.svc.config.minimum_index,
                    retention_policy=self.svc.config.retention_policy or None)
        # a frozen log or a temporal shard (§3.8): where writes go instead, and when this log takes them
        cfg = self.svc.config
        frozen = seq.frozen
        named = frozen.data.get("successor") if frozen is not None else None
        body.update(frozen=frozen is not None, accept_from=cfg.accept_from or None,
                    accept_until=cfg.accept_until or None, successor=named or cfg.successor_url or None)
        return respond(request, body)

    async def policy(self, request: web.Request) -> web.Response:
        """The tlog-policy for this log's clients (its key, witnesses, quorum; what it writes to
        data/log.policy): what the explorer checks checkpoints against unless its user pastes
        another. A log vouching for itself proves nothing: clients should pin their own copy."""
        return web.Response(text=self.svc.policy, content_type="text/plain",
                            headers={"Cache-Control": "no-cache"})

    async def ready(self) -> dict:
        seq = self.svc.appender
        problems = [p for p, bad in (("appender stopped", not seq.running),
                                     ("no checkpoint published yet", not seq.published),
                                     ("halted", seq.halted is not None)) if bad]
        return {"tree_size": self.svc.state.size, "problems": problems}


def build_app(svc: LogService) -> web.Application:
    api = LogAPI(svc)
    app = make_app(svc.config, api.requests, max_body=svc.config.max_body, limits=api.limits)
    app.add_routes(api.routes())
    add_ops_routes(app, svc.metrics.registry, ready=api.ready)
    app[FAST_ROUTES_KEY] = api.fast_routes()
    return app
