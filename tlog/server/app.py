"""The log's HTTP API (DESIGN §3.5): tlog-tiles reads, OAP writes and proofs.

Handlers parse, call the core (sequencer, tree view, entry reader) and shape
the answer; errors are mapped in `tlog.service.http` only.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from functools import lru_cache
from dataclasses import dataclass
from pathlib import Path

import cbor2
import numpy as np
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tlog.storage import hashfiles

from tlog.formats import keys
from tlog.merkle.proofs import PROOF_CHUNK, cbor_map_parts, inclusion_pieces
from tlog.formats.checkpoint import Checkpoint
from tlog.service.config import ConfigError, LogConfig
from tlog.formats.encoding import b64dec, b64enc
from tlog.server.appends import SingleAppends, batch_answer
from tlog.formats.entries import MAX_ENTRY_BYTES, canonical_entry, commitment_json_entry, decode_entry
from tlog.errors import FormatError, InvalidInput, NotFound, NotPublished, OAPError, TooLarge
from tlog.service.fastpath import FAST_ROUTES_KEY, FastRoutes, Reply
from tlog.service.fastpath import Request as FastRequest
from tlog.service.http import (READ_TIMEOUT_KEY, SMALL_BODY, RequestMetrics, accepts_cbor, answer, body_is_cbor, decode,
                   decode_document,
                   is_json, large_body_limit, make_error_middleware, offload, query_int, rate_limit_middleware,
                   read_document, read_member_array, request_client, respond, send_large, send_limits,
                   send_timeout_middleware, wants_cbor)
from tlog.service.limits import Admitted, RateLimiter, TokenAuth, WriteGate
from tlog.formats.strict import ITEMS_PER_ENTRY, MAX_DOCUMENT_ITEMS
from tlog.merkle.tree import TreeView
from tlog.server.metrics import LogMetrics
from tlog.formats.note import sign_note
from tlog.server.sequencer import Sequencer
from tlog.storage.embedded import EntryReader, LogState, LogStore
from tlog.formats.tiles import TILE_HEIGHT, TILE_WIDTH, tile_coords
from tlog.server.witnessing import WitnessSet, policy_text

log = logging.getLogger("oap.tlog.server")

IMMUTABLE = "public, max-age=31536000, immutable"
CHECKPOINT_CACHE = "public, max-age=1, must-revalidate"
CHECKPOINT_HEADERS = (("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control", CHECKPOINT_CACHE))
TILE_HEADERS = (("Content-Type", "application/octet-stream"), ("Cache-Control", IMMUTABLE))
_COMMITMENT_DOC = {"type": "commitment"}  # what `authorize` looks at in a commitment submission


def load_or_create_key(data_dir: Path, origin: str) -> keys.Signer:
    """The log key: generated on first start (0600, never printed), reused after.

    A key is bound to its origin (key name = origin); a new origin needs a new
    key and a new data directory, so a mismatch is refused, not papered over.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "log.key"
    if not path.exists():
        signer = keys.Signer.generate(origin)
        keys.write_private_key(path, signer.to_skey())
        (data_dir / "log.vkey").write_text(signer.vkey + "\n")
        (data_dir / "log.policy").write_text(f"# tlog-policy for {origin}\nlog {signer.vkey}\nquorum none\n")
        log.info("generated a new log key for origin %s", origin)
    signer = keys.Signer.from_skey(keys.read_private_key(path))
    if signer.name != origin:
        raise ConfigError(
            f"{path} is the key of origin {signer.name!r}, but origin {origin!r} is configured; "
            "a new origin needs a new key and a new data directory"
        )
    vkey_path = data_dir / "log.vkey"
    if not vkey_path.exists():
        vkey_path.write_text(signer.vkey + "\n")
    return signer


def _witness_set(config: LogConfig, signer: keys.Signer) -> WitnessSet | None:
    """Witnesses from the config; also (re)writes data/log.policy for clients."""
    if config.witness_policy is not None:
        text = Path(config.witness_policy).read_text()
        ws = WitnessSet.from_policy(text, timeout=config.witness_timeout)
        client_policy = text if f"log {signer.vkey}" in text else f"log {signer.vkey}\n" + text
    elif config.witnesses:
        client_policy = policy_text(signer.vkey, config.witnesses, config.witness_quorum)
        ws = WitnessSet.from_policy(client_policy, timeout=config.witness_timeout)
    else:
        return None
    try:
        (config.data_dir / "log.policy").write_text(client_policy)
    except OSError as e:  # read-only data directory: clients keep the policy they have
        log.warning("could not write %s: %s", config.data_dir / "log.policy", e)
    return ws


def checkpoint_signer(signer: keys.Signer):
    def sign(size: int, root: bytes) -> str:
        return sign_note(Checkpoint(signer.name, size, root).to_text(), [signer])

    return sign


@dataclass
class LogService:
    """Everything a running log holds; built by `LogService.open`."""

    config: LogConfig
    signer: keys.Signer
    store: LogStore
    sequencer: Sequencer
    reader: EntryReader
    metrics: LogMetrics
    witnesses: WitnessSet | None = None

    @classmethod
    async def open(cls, config: LogConfig) -> "LogService":
        signer = load_or_create_key(config.data_dir, config.origin)
        store = LogStore(config.data_dir, hash_sync_interval=config.hash_sync_interval,
                         map_window=config.map_window_mb << 20)
        metrics = LogMetrics()

        def on_batch(n: int, seconds: float) -> None:
            metrics.batch_size.observe(n)
            metrics.batch_seconds.observe(seconds)

        witnesses = _witness_set(config, signer)
        publisher = None
        if witnesses is not None:
            async def publisher(state: LogState) -> LogState:
                t0 = time.perf_counter()
                try:
                    published, outcomes = await witnesses.cosign(state)
                finally:
                    metrics.cosign_seconds.observe(time.perf_counter() - t0)
                for o in outcomes:
                    metrics.witness_results.labels(o.name, "ok" if o.signature else "failed").inc()
                return published

        seq = Sequencer(
            store, checkpoint_signer(signer), max_batch=config.max_batch,
            batch_interval=config.batch_interval_ms / 1000, max_pending=config.max_pending, on_batch=on_batch,
            publisher=publisher,
        )
        state = await seq.start()
        metrics.tree_size.set(state.size)
        reader = EntryReader(store.db_path, store.leaves, read_only_dir=store.read_only)
        await reader.open()
        return cls(config, signer, store, seq, reader, metrics, witnesses)

    async def close(self) -> None:
        await self.sequencer.close()
        await self.reader.close()
        if self.witnesses is not None:
            await self.witnesses.close()

    def view_at(self, size: int) -> TreeView:
        """The tree of an older committed size (right edge cached for a few sizes)."""
        if size == self.state.size:
            return self.state.view
        return _view_cache(self.store.hashes, size)

    @property
    def state(self) -> LogState:
        return self.sequencer.state

    @property
    def origin(self) -> str:
        return self.signer.name


@lru_cache(maxsize=64)
def _view_cache(hashes, size: int) -> TreeView:
    return TreeView(size, hashes.read)


def _canonical_all(items: list) -> list[bytes]:
    out = []
    for i, item in enumerate(items):
        try:
            out.append(canonical_entry(item))
        except InvalidInput as e:
            raise type(e)(f"entries[{i}]: {e.message}", index=i) from None
    return out


def _leaf_param(text: str) -> bytes:
    """A leaf hash given as 64 hex digits or standard/url-safe base64."""
    if len(text) == 64:
        try:
            return bytes.fromhex(text)
        except ValueError:
            pass
    try:
        raw = b64dec(text.replace("-", "+").replace("_", "/"), what="leaf_hash")
    except FormatError:
        raw = b""
    if len(raw) != 32:
        raise InvalidInput("leaf_hash must be 64 hex digits or base64 of 32 bytes")
    return raw


# Clients walk the same tiles: parsing a path costs more than serving it from the cache.
_tile_at = lru_cache(maxsize=16384)(tile_coords)


def hash_tile(hashes: hashfiles.HashFiles, size: Callable[[], int], path: str) -> Reply | None:
    """The hash tile at `path` (after "tile/") of the served tree of `size()` leaves.

    None for an entry bundle: it is read from SQLite, off the loop. Shared by the
    log process and its read workers (`tlog.server.readworkers`).
    """
    level, index, width = _tile_at("tile/" + path)
    if level is None:
        return None
    level *= TILE_HEIGHT
    if level >= 64 or index * TILE_WIDTH + width > size() >> level:
        raise NotFound("tile not available for the current tree size")
    return Reply(hashes.read_range(level, index * TILE_WIDTH, width), TILE_HEADERS)


def _entry_types(entries: list) -> set[str]:
    return {e["type"] for e in entries if isinstance(e, dict) and isinstance(e.get("type"), str)}


def build_app(svc: LogService) -> web.Application:
    cfg = svc.config
    m = svc.metrics

    request_metrics = RequestMetrics(m.requests, m.request_seconds)

    limiter = RateLimiter(cfg.rate_limit_read, cfg.rate_limit_read_burst)
    gate = WriteGate(TokenAuth.from_file(cfg.auth_required_for, cfg.tokens_file),
                     RateLimiter(cfg.rate_limit_write, cfg.rate_limit_write_burst),
                     RateLimiter(cfg.rate_limit_unauthenticated, max(1.0, 2 * cfg.rate_limit_unauthenticated)))
    proxies = cfg.trusted_proxies

    def read_limited(request: web.Request) -> bool:
        """Dynamic reads take a token of the read bucket; writes are counted by the WriteGate.
        Checkpoints and tiles are immutable (or nearly): served through a cache, not limited."""
        if request.method == "POST":
            return request.path.startswith("/v1/proof/")
        return cfg.rate_limit_tiles or not (request.path == "/checkpoint" or request.path.startswith("/tile/"))

    # Item budgets: a body may hold what the route's largest honest body holds, no more.
    # A client without a valid token, where tokens are used, gets a quarter.
    def budget(entries: int, admitted: Admitted) -> int:
        items = max(MAX_DOCUMENT_ITEMS, entries * ITEMS_PER_ENTRY + 16)
        return items // 4 if admitted.strict else items

    app = web.Application(middlewares=[send_timeout_middleware(), make_error_middleware(request_metrics.on_request),
                                       rate_limit_middleware(limiter, trusted_proxies=proxies, applies=read_limited)],
                          client_max_size=cfg.max_body)
    app[READ_TIMEOUT_KEY] = cfg.read_timeout
    send_limits(app, send_timeout=cfg.send_timeout, bytes_in_flight=cfg.bytes_in_flight_mb << 20)
    large_body_limit(app)

    # --- tlog-tiles reads ------------------------------------------------------------

    def served() -> LogState:
        """The published state; nothing of an unwitnessed tree is served before its quorum."""
        if not svc.sequencer.published:
            raise NotPublished("no checkpoint has reached the witness quorum yet", retry_after=1)
        return svc.state

    # The reads clients poll in bulk are answered by these Reply functions, on the
    # fast path (tlog.service.fastpath) or, for anything unusual, by the aiohttp handlers.

    def checkpoint_reply(rest: str = "", accept: str = "") -> Reply:
        return Reply(served().note.encode(), CHECKPOINT_HEADERS)

    def hash_tile_reply(path: str, accept: str = "") -> Reply | None:
        return hash_tile(svc.store.hashes, lambda: served().size, path)

    async def checkpoint(request: web.Request) -> web.Response:
        return checkpoint_reply().response()

    async def tile(request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        reply = hash_tile_reply(path)
        if reply is None:
            _, index, width = _tile_at("tile/" + path)
            start = index * TILE_WIDTH
            if start + width > served().size:
                raise NotFound("entry bundle not available for the current tree size")
            # Up to 256 entries of 64 KiB: counted against the bytes in flight while sent.
            return await send_large(request, Reply(await svc.reader.bundle(start, width), TILE_HEADERS).response())
        return reply.response()

    # --- OAP writes -------------------------------------------------------------------

    appends = SingleAppends(svc.sequencer, svc.store.hashes, m)

    def add_entry_fast(body: bytes, req: FastRequest) -> Awaitable[Reply]:
        """POST /v1/entries on the fast path: the token and the write bucket, then the body.

        A small body is handled here, with no task per request (the common case, and
        the one single appends' throughput depends on); a larger one is decoded off the loop.
        """
        t0 = time.perf_counter()
        try:
            admitted = gate.admit(req.authorization, req.client)
            entry = commitment_json_entry(body) if is_json(req.content_type) else None
            if entry is not None:  # the common submission, recognised without parsing it
                doc: object = _COMMITMENT_DOC
            elif len(body) > SMALL_BODY:
                return add_large_entry(body, req, admitted, t0)
            else:
                doc = decode_document(body, req.content_type or "", max_items=budget(1, admitted))
                entry = canonical_entry(doc)
            gate.authorize(admitted, _entry_types([doc]), 1)
        except OAPError as e:
            failed = asyncio.get_running_loop().create_future()
            failed.set_exception(e)  # answered through the error middleware's mapping
            return failed
        return appends.submit(entry, accepts_cbor(req.accept), t0)

    async def add_large_entry(body: bytes, req: FastRequest, admitted: Admitted, t0: float) -> Reply:
        doc = await decode(body, cbor=body_is_cbor(req.content_type), max_items=budget(1, admitted))
        entry = await offload(canonical_entry, doc)
        gate.authorize(admitted, _entry_types([doc]), 1)
        return await appends.submit(entry, accepts_cbor(req.accept), t0)

    async def add_entry(request: web.Request) -> web.Response:
        t0 = time.perf_counter()
        admitted = gate.admit(request.headers.get("Authorization"), request_client(request, proxies))
        doc = await read_document(request, cfg.max_entry_body, max_items=budget(1, admitted))
        gate.authorize(admitted, _entry_types([doc]), 1)
        entry = canonical_entry(doc)
        return (await appends.submit(entry, wants_cbor(request), t0)).response()

    app[FAST_ROUTES_KEY] = FastRoutes(
        {"/checkpoint": ("/checkpoint", checkpoint_reply), "/tile/": ("/tile/{path}", hash_tile_reply)},
        posts={"/v1/entries": ("/v1/entries", add_entry_fast, cfg.max_entry_body)},
        limiter=limiter if cfg.rate_limit_tiles else None, record=request_metrics.record, trusted_proxies=proxies)

    async def add_batch(request: web.Request) -> web.StreamResponse:
        t0 = time.perf_counter()
        admitted = gate.admit(request.headers.get("Authorization"), request_client(request, proxies))
        items = await read_member_array(request, cfg.max_body, key="entries", max_elements=cfg.max_batch_entries,
                                        max_items=budget(cfg.max_batch_entries, admitted))
        if not items:
            raise InvalidInput("entries must not be empty")
        gate.authorize(admitted, _entry_types(items), len(items))
        canon = await offload(_canonical_all, items) if len(items) > 16 else _canonical_all(items)
        added = await svc.sequencer.add_many(canon)
        fresh = sum(added.fresh)
        m.entries.inc(fresh)
        m.duplicates.inc(len(added) - fresh)
        m.append_seconds.observe(time.perf_counter() - t0)
        m.tree_size.set(svc.state.size)
        m.proofs.labels("inclusion").inc(len(added))
        cbor = wants_cbor(request)
        return await answer(request, batch_answer(added.state, svc.store.hashes, added, cbor=cbor),
                            content_type="application/oap+cbor" if cbor else "application/json",
                            streamed=len(added) > PROOF_CHUNK, reserve=4 * PROOF_CHUNK * 1024)

    # --- reads and proofs ---------------------------------------------------------------

    async def get_entry(request: web.Request) -> web.Response:
        raw = request.match_info["index"]
        if not raw.isdigit() or len(raw) > 19 or (len(raw) > 1 and raw[0] == "0"):
            raise InvalidInput("index must be a non-negative decimal integer")
        state = served()
        lh, data = await svc.reader.entry(int(raw), state.size)
        body = {"index": int(raw), "leaf_hash": b64enc(lh), "entry": decode_entry(data), "entry_cbor": b64enc(data)}
        return respond(request, body, headers={"Cache-Control": IMMUTABLE})

    async def lookup(request: web.Request) -> web.Response:
        lh = _leaf_param(request.query.get("leaf_hash", ""))
        state = served()
        idx = await svc.reader.index_of(lh, state.size)
        return respond(request, {"index": idx, "leaf_hash": b64enc(lh)})

    async def inclusion(request: web.Request) -> web.Response:
        state = served()
        size = query_int(request, "size", default=state.size)
        if size > state.size or size == 0:
            raise InvalidInput(f"size must be in 1..{state.size}")
        if "leaf_hash" in request.query:
            index = await svc.reader.index_of(_leaf_param(request.query["leaf_hash"]), size)
        else:
            index = query_int(request, "index")
        if index >= size:
            raise InvalidInput(f"index {index} is not in a tree of size {size}")
        view = state.view if size == state.size else svc.view_at(size)
        m.proofs.labels("inclusion").inc()
        body = {"index": index, "tree_size": size, "inclusion_proof": [b64enc(h) for h in view.inclusion_proof(index)]}
        if size == state.size:
            body["checkpoint"] = state.note
        return respond(request, body)

    async def inclusion_batch(request: web.Request) -> web.StreamResponse:
        doc = await read_document(request, min(cfg.max_body, 64 + 24 * cfg.max_proof_batch),
                                  max_items=cfg.max_proof_batch + 16)
        if not isinstance(doc, dict) or not set(doc) <= {"indices", "size"} or not isinstance(doc.get("indices"), list):
            raise InvalidInput('body must be {"indices": [int, ...], "size": optional int}')
        state = served()
        size = doc.get("size", state.size)
        if type(size) is not int or not 1 <= size <= state.size:
            raise InvalidInput(f"size must be an integer in 1..{state.size}")
        indices = doc["indices"]
        if len(indices) > cfg.max_proof_batch:
            raise TooLarge(f"at most {cfg.max_proof_batch} indices per request")
        if not all(type(i) is int for i in indices):
            raise InvalidInput("indices must be integers")
        view = state.view if size == state.size else svc.view_at(size)
        try:
            idx = np.array(indices, dtype=np.int64)
        except OverflowError:
            raise InvalidInput("index out of range") from None
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= size):
            raise InvalidInput(f"every index must be in 0..{size - 1} for tree size {size}")
        m.proofs.labels("inclusion").inc(len(indices))
        # Both encodings are written by numpy (tlog.merkle.proofs), PROOF_CHUNK proofs at a
        # time: a 100,000-proof answer (~115 MB of JSON) is never held whole.
        cbor = wants_cbor(request)
        note = state.note if size == state.size else None
        if cbor:
            prefix, suffix = cbor_map_parts({"tree_size": cbor2.dumps(size), "checkpoint": cbor2.dumps(note)},
                                            "proofs")
        else:
            head = {"tree_size": size} if note is None else {"tree_size": size, "checkpoint": note}
            prefix, suffix = json.dumps(head, separators=(",", ":"))[:-1].encode() + b',"proofs":', b"}"

        def pieces():
            yield prefix
            yield from inclusion_pieces(view, svc.store.hashes, idx, cbor=cbor)
            yield suffix

        return await answer(request, pieces(), content_type="application/oap+cbor" if cbor else "application/json",
                            streamed=idx.size > PROOF_CHUNK, reserve=4 * PROOF_CHUNK * 1024)

    async def consistency(request: web.Request) -> web.Response:
        state = served()
        new = query_int(request, "new", default=state.size)
        old = query_int(request, "old")
        if new > state.size:
            raise InvalidInput(f"new must be at most the tree size {state.size}")
        if old > new:
            raise InvalidInput("old must not exceed new")
        view = state.view if new == state.size else svc.view_at(new)
        m.proofs.labels("consistency").inc()
        return respond(request, {"old": old, "new": new,
                                 "consistency_proof": [b64enc(h) for h in view.consistency_proof(old)]})

    async def info(request: web.Request) -> web.Response:
        body = {"origin": svc.origin, "verifier_key": svc.signer.vkey, "max_entry_bytes": MAX_ENTRY_BYTES,
                "published": svc.sequencer.published, "halted": svc.sequencer.halted is not None}
        if svc.sequencer.published:
            state = svc.state
            body.update(tree_size=state.size, root_hash=b64enc(state.root), checkpoint=state.note)
        if svc.sequencer.halted is not None:
            body["halted_reason"] = svc.sequencer.halted.message
        return respond(request, body)

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        seq = svc.sequencer
        ok = seq._task is not None and not seq._task.done() and seq.published and seq.halted is None
        return web.json_response({"status": "ok" if ok else "not ready", "tree_size": svc.state.size},
                                 status=200 if ok else 503)

    async def metrics(request: web.Request) -> web.Response:
        resp = web.Response(body=generate_latest(m.registry))
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    app.router.add_get("/checkpoint", checkpoint)
    app.router.add_get("/tile/{path:.+}", tile)
    app.router.add_post("/v1/entries", add_entry)
    app.router.add_post("/v1/entries:batch", add_batch)
    app.router.add_get("/v1/entries:lookup", lookup)
    app.router.add_get("/v1/entries/{index}", get_entry)
    app.router.add_get("/v1/proof/inclusion", inclusion)
    app.router.add_post("/v1/proof/inclusion:batch", inclusion_batch)
    app.router.add_get("/v1/proof/consistency", consistency)
    app.router.add_get("/v1/info", info)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app
