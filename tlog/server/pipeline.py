"""The path of a write: one pipeline for every route that appends entries.

`POST /v1/entries` (on the fast path, or in aiohttp when the fast path hands the request
over) and `POST /v1/entries:batch` run the same steps in the same order, so a request is
answered the same whichever route and path it takes (docs/architecture.md §3.3). The
first refusal wins:

0. a temporal shard outside its window (docs/architecture.md §3.8) refuses every write
   (410 after it, 403 before it, naming the window and the successor); a frozen log
   refuses at step 8 (410, the appender and the store decide);
1. admit, before a byte of the body is read (`WriteGate.admit`): the bearer token (401
   where every write needs one); then, where tokens are used, a request without a valid
   one takes a token of the client's small bucket of such requests (429); then every
   request takes one token of the client's write bucket (429), refused later or not;
2. media type: JSON or CBOR by Content-Type (415);
3. body: read within the route's cap (413, before a byte is read when Content-Length says
   so) and the read timeout (408); the fast path has it in hand, within the same cap;
4. decode: the strict parser within the item budget (a quarter of it without a valid
   token where tokens are used) and the depth limit (400, or 413 over the budget or a
   batch's entry count); a batch must not be empty (400);
5. authorize (`WriteGate.authorize`): each entry type the token may write (401/403), the
   rest of a batch's entries in the write bucket (429); then at most 16 DIDs to resolve
   per request (400);
6. resolve those DIDs: did:web and did:plc documents (400 or 502 when one cannot be had);
7. canonicalize each entry to its one byte form (400, naming `entries[i]` in a batch;
   413 over the entry size cap);
8. submit to the appender, answered once durable and published (503 when the log
   refuses the entry or cannot publish it).

Steps 1, 2, 4, 5 and 7 are plain functions; 3, 6 and 8 wait for I/O. Steps 4 and 7 run on
the CPU pool for a body over 4 KiB (`tlog.http.bodies.SMALL_BODY`) and for a batch of
more than 16 entries. A small single entry in hand (the fast path's common case) goes
from step 1 to step 8 with no task and no await: `entry` returns the future of its answer.
"""
from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

from tlog.didresolver import DidResolver
from tlog.errors import InvalidInput, OutsideWindow
from tlog.formats.diddoc import MAX_DIDS_PER_DOCUMENT, KeyLookup, dids_to_resolve, needs_resolution
from tlog.formats.entries import canonical_entry, commitment_json_entry
from tlog.formats.strict import ITEMS_PER_ENTRY, MAX_DOCUMENT_ITEMS, loads, loads_member_array
from tlog.http.bodies import SMALL_BODY, body_is_cbor, decode, offload
from tlog.http.limits import Admitted, WriteGate
from tlog.http.reply import Reply
from tlog.server.appender import AddedBatch, Appender
from tlog.server.appends import SingleAppends
from tlog.server.config import LogConfig
from tlog.server.metrics import LogMetrics

BodyReader = Callable[[int], Awaitable[bytes]]
"""Reads the request's body within a cap (413) and the read timeout (408): how a route
gives the pipeline a body it has not read yet (aiohttp's, `tlog.http.bodies.read_bounded`)."""

OFFLOAD_ENTRIES = 16
"""A batch of more entries is canonicalized on the CPU pool."""

_COMMITMENT = ("commitment",)  # the entry types of a commitment submission (step 5)


class WritePipeline:
    """Steps 1 to 8 (module doc) for one entry (`entry`) and for a batch (`batch`)."""

    def __init__(self, cfg: LogConfig, gate: WriteGate, appender: Appender, appends: SingleAppends,
                 resolver: DidResolver | None, metrics: LogMetrics) -> None:
        self._gate, self._appender, self._appends = gate, appender, appends
        self._resolver, self._m = resolver, metrics
        self.max_entry_body, self.max_body = cfg.max_entry_body, cfg.max_body
        self.max_batch_entries = cfg.max_batch_entries
        self._window, self._successor = cfg.window(), cfg.successor_url
        self._window_text: dict[str, Any] = {"accept_from": cfg.accept_from or None,
                                             "accept_until": cfg.accept_until or None}
        # Items a body may hold: what the route's largest honest body holds, no more; a quarter
        # of it for a request without a valid token, where tokens are used.
        one, many = (max(MAX_DOCUMENT_ITEMS, n * ITEMS_PER_ENTRY + 16) for n in (1, cfg.max_batch_entries))
        self._budgets = {False: (one, many), True: (one // 4, many // 4)}

    def budget(self, admitted: Admitted, *, batch: bool) -> int:
        return self._budgets[admitted.strict][batch]

    # --- one entry: POST /v1/entries --------------------------------------------------------

    def entry(self, authorization: str | None, client: str, content_type: str | None, body: bytes | BodyReader,
              fmt: int, t0: float) -> Awaitable[Reply]:
        """The answer to one entry, in `fmt` (`tlog.http.responses.reply_format`).

        `body`: the bytes (the fast path has them, within `max_entry_body`) or how to read
        them. Refusals of steps 1, 2 and, for a small body in hand, 4 to 7 are raised here;
        later ones come with the awaitable.
        """
        self._in_window()  # 0
        admitted = self._gate.admit(authorization, client)  # 1
        cbor = body_is_cbor(content_type)  # 2
        if isinstance(body, bytes):
            return self._entry(body, cbor, admitted, fmt, t0)
        return self._read_entry(body, cbor, admitted, fmt, t0)

    async def _read_entry(self, read: BodyReader, cbor: bool, admitted: Admitted, fmt: int, t0: float) -> Reply:
        body = await read(self.max_entry_body)  # 3
        return await self._entry(body, cbor, admitted, fmt, t0)

    def _entry(self, body: bytes, cbor: bool, admitted: Admitted, fmt: int, t0: float) -> Awaitable[Reply]:
        """Steps 4 to 8 of one entry whose body is in hand."""
        if not cbor:
            entry = commitment_json_entry(body)
            if entry is not None:  # the common submission: decoded and canonical at once (4, 7)
                self._gate.authorize(admitted, _COMMITMENT, 1)  # 5; no DID to resolve (6)
                return self._appends.submit(entry, fmt, t0)  # 8
        if len(body) > SMALL_BODY:
            return self._large_entry(body, cbor, admitted, fmt, t0)
        doc = loads(body, cbor=cbor, max_items=self.budget(admitted, batch=False))  # 4
        dids = self._authorize(admitted, (doc,))  # 5
        if dids:
            return self._resolved_entry(doc, dids, fmt, t0, large=False)  # 6 to 8
        return self._appends.submit(canonical_entry(doc), fmt, t0)  # 7, 8

    async def _large_entry(self, body: bytes, cbor: bool, admitted: Admitted, fmt: int, t0: float) -> Reply:
        doc = await decode(body, cbor=cbor, max_items=self.budget(admitted, batch=False))  # 4, on the CPU pool
        dids = self._authorize(admitted, (doc,))  # 5
        return await self._resolved_entry(doc, dids, fmt, t0, large=True)

    async def _resolved_entry(self, doc: object, dids: set[str], fmt: int, t0: float, *, large: bool) -> Reply:
        lookup = await self._lookup(dids)  # 6
        if large:
            entry = await offload(partial(canonical_entry, lookup=lookup), doc)  # 7
        else:
            entry = canonical_entry(doc, lookup=lookup)
        return await self._appends.submit(entry, fmt, t0)  # 8

    # --- a batch: POST /v1/entries:batch ----------------------------------------------------

    async def batch(self, authorization: str | None, client: str, content_type: str | None, read: BodyReader,
                    t0: float) -> AddedBatch:
        """Every entry of a batch appended, in request order, once all are durable and published."""
        self._in_window()  # 0
        admitted = self._gate.admit(authorization, client)  # 1
        cbor = body_is_cbor(content_type)  # 2
        body = await read(self.max_body)  # 3
        parse = partial(loads_member_array, body, cbor=cbor, key="entries", max_elements=self.max_batch_entries,
                        max_items=self.budget(admitted, batch=True))
        items = parse() if len(body) <= SMALL_BODY else await offload(parse)  # 4
        if not items:
            raise InvalidInput("entries must not be empty")
        lookup = await self._lookup(self._authorize(admitted, items))  # 5, 6
        canon = await offload(_canonical_all, items, lookup) if len(items) > OFFLOAD_ENTRIES \
            else _canonical_all(items, lookup)  # 7
        added = await self._appender.add_many(canon)  # 8
        m = self._m
        fresh = sum(added.fresh)
        m.entries.inc(fresh)
        m.duplicates.inc(len(added) - fresh)
        m.append_seconds.observe(time.perf_counter() - t0)
        state = self._appender.state
        m.tree_size.set(max(added.state.size, state.size if state is not None else 0))
        m.proofs.labels("inclusion").inc(len(added))
        return added

    # --- the steps both share ---------------------------------------------------------------

    def _in_window(self) -> None:
        """Step 0: OutsideWindow unless the log's clock is inside the shard's window."""
        start, end = self._window
        if start is None and end is None:
            return
        now = time.time()
        if start is not None and now < start:
            raise OutsideWindow(f"this log accepts entries from {self._window_text['accept_from']}",
                                early=True, successor=None, **self._window_text)
        if end is not None and now >= end:
            where = f"; write to its successor, {self._successor}" if self._successor else ""
            raise OutsideWindow(f"this log accepted entries until {self._window_text['accept_until']}{where}",
                                successor=self._successor or None, **self._window_text)

    def _authorize(self, admitted: Admitted, docs: Sequence[object]) -> set[str]:
        """Step 5: the entry types the token may write, the rest of a batch's write tokens;
        then the DIDs step 6 resolves (at most MAX_DIDS_PER_DOCUMENT)."""
        self._gate.authorize(admitted, _entry_types(docs), len(docs))
        return _dids_of(docs)

    async def _lookup(self, dids: set[str]) -> KeyLookup | None:
        resolver = self._resolver
        return None if resolver is None or not dids else await resolver.lookup_for(dids)


def _entry_types(docs: Sequence[object]) -> set[str]:
    return {e["type"] for e in docs if isinstance(e, dict) and isinstance(e.get("type"), str)}


def _dids_of(docs: Sequence[object]) -> set[str]:
    """The DIDs to resolve before the entries can be checked: receipt and registry signers
    that are not did:key, and the principals of conformance receipts."""
    dids: set[str] = set()
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("type") == "commitment":
            continue
        if doc.get("type") == "conformance":
            dids |= dids_to_resolve(doc)
        elif (did := needs_resolution(doc.get("signer"))) is not None:
            dids.add(did)
        if len(dids) > MAX_DIDS_PER_DOCUMENT:
            raise InvalidInput(f"at most {MAX_DIDS_PER_DOCUMENT} distinct DIDs other than did:key per request")
    return dids


def _canonical_all(docs: list, lookup: KeyLookup | None) -> list[bytes]:
    out = []
    for i, doc in enumerate(docs):
        try:
            out.append(canonical_entry(doc, lookup=lookup))
        except InvalidInput as e:
            raise type(e)(f"entries[{i}]: {e.message}", index=i) from None
    return out
