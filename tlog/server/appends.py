"""Answers to single-entry appends, built one committed batch at a time.

`POST /v1/entries` answers with the entry's index, leaf hash, inclusion proof and a
tlog-proof bundle against the checkpoint that covers it. A batch commits a few
hundred such entries at once; built one by one (a task woken per entry, a proof
read node by node, the checkpoint JSON-escaped again for every answer) the answers
cost more than everything else an append does. Here the appender.s futures for a
batch land in one list, the batch's proofs come from one `inclusion_levels` call,
and the parts every answer shares (the checkpoint, escaped once) are rendered once.

`added_document` is the plain form of an answer; the JSON bytes written here are
byte-identical to `encode_document(added_document(...))` (tests compare them).
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import cbor2
import numpy as np

from tlog.formats.encoding import b64enc
from tlog.formats.proofbundle import HEADER, ProofBundle
from tlog.http.reply import Reply
from tlog.http.responses import CBOR, CONTENT_TYPES, encode_document
from tlog.merkle.proofs import PROOF_CHUNK, b64_rows, cbor_head, cbor_map_parts, inclusion_levels
from tlog.server.appender import AddedBatch, Appender
from tlog.server.metrics import LogMetrics
from tlog.storage.interface import HashReader, LogState

log = logging.getLogger("oap.tlog.appends")

_JSON = tuple((("Content-Type", t), ("Vary", "Accept")) for t in CONTENT_TYPES[:2])
_HEADER_JSON = json.dumps(HEADER)[1:-1]


def added_document(state: LogState, index: int, leaf_hash: bytes, fresh: bool, proof: list[bytes],
                   entry: bytes) -> dict[str, Any]:
    """The answer to one appended entry (docs/architecture.md §3.5), as a plain document."""
    return {
        "index": index,
        "leaf_hash": b64enc(leaf_hash),
        "inclusion_proof": [b64enc(h) for h in proof],
        "duplicate": not fresh,
        "tree_size": state.size,
        "checkpoint": state.note,
        "bundle": ProofBundle(index=index, proof=tuple(proof), checkpoint=state.note, extra=entry).to_text(),
    }


class SingleAppends:
    """Submits single entries to the appender; answers them per published batch."""

    def __init__(self, appender: Appender, hashes: HashReader, metrics: LogMetrics) -> None:
        self._appender, self._hashes, self._m = appender, hashes, metrics
        self._inclusion = metrics.proofs.labels("inclusion")
        self._done: list[tuple[asyncio.Future, bytes, int, float, asyncio.Future]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def submit(self, entry: bytes, fmt: int, t0: float) -> asyncio.Future:
        """The future of the Reply to one entry, once it is durable (and published).

        Its exception is the appender's (e.g. Unavailable) when it refused the entry or
        the batch failed.
        """
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        out = self._loop.create_future()
        try:
            added = self._appender.submit(entry)
        except Exception as e:  # noqa: BLE001 - refused at once (halted, full, shutting down): answered the same way
            out.set_exception(e)
            return out
        added.add_done_callback(lambda f: self._landed(f, entry, fmt, t0, out))
        return out

    def _landed(self, added: asyncio.Future, entry: bytes, fmt: int, t0: float, out: asyncio.Future) -> None:
        # The appender resolves a whole batch's futures in one go, so their callbacks run
        # back to back and the flush scheduled by the first runs after the last.
        if not self._done:
            loop = self._loop
            assert loop is not None, "submit() set the loop before any entry could land"
            loop.call_soon(self._flush)
        self._done.append((added, entry, fmt, t0, out))

    def _flush(self) -> None:
        done, self._done = self._done, []
        now = time.perf_counter()
        groups: dict[int, tuple[LogState, list]] = {}
        for item in done:
            added, _, _, t0, out = item
            if out.done():  # the waiter went away (aiohttp cancels a handler whose client left)
                continue
            error = added.exception()
            if error is not None:
                out.set_exception(error)
                continue
            self._m.append_seconds.observe(now - t0)
            state = added.result().state
            groups.setdefault(id(state), (state, []))[1].append(item)
        for state, items in groups.values():
            try:
                self._answer(state, items)
            except Exception as e:  # noqa: BLE001 - e.g. EIO reading a hash file: durable, but no proof to give
                log.error("could not build the answers of %d appended entries: %s: %s", len(items),
                          type(e).__name__, e)
                for item in items:
                    if not item[4].done():
                        item[4].set_exception(e)  # answered 500; the entries are durable all the same

    def _answer(self, state: LogState, items: list) -> None:
        results: list[AddedBatch] = [item[0].result() for item in items]
        indices = [r.indices[0] for r in results]
        fresh = sum(r.fresh[0] for r in results)
        self._m.entries.inc(fresh)
        self._m.duplicates.inc(len(items) - fresh)
        self._m.tree_size.set(max(state.size, self._appender.state.size if self._appender.state else 0))
        self._inclusion.inc(len(items))
        batch = inclusion_levels(state.view, self._hashes, np.array(indices, dtype=np.int64))
        proofs = batch.split(text=True)  # per proof, its base64 strings
        leaves = b64_rows(np.frombuffer(b"".join(r.leaf_hashes[0] for r in results), dtype=np.uint8)
                          .reshape(-1, 32)).tobytes().decode("ascii")
        note = json.dumps(state.note)  # "..." with the checkpoint escaped once
        shared = ',"tree_size":%d,"checkpoint":%s,"bundle":"%s\\nextra ' % (state.size, note, _HEADER_JSON)
        tail = "\\n" + note[1:] + "}"
        proof_bytes = None
        for k, ((_, entry, fmt, _, out), r, i, proof) in enumerate(zip(items, results, indices, proofs)):
            if fmt == CBOR:  # rare: the plain document, deterministic CBOR
                if proof_bytes is None:
                    proof_bytes = batch.split(text=False)
                doc = added_document(state, i, r.leaf_hashes[0], r.fresh[0], proof_bytes[k], entry)
                body, ctype = encode_document(doc, True)
                out.set_result(Reply(body, (("Content-Type", ctype),)))
                continue
            hashes = '"%s"' % '","'.join(proof) if proof else ""  # base64 needs no JSON escapes
            lines = "\\n".join(proof) + "\\n" if proof else ""
            body = "".join((
                '{"index":%d,"leaf_hash":"%s","inclusion_proof":[%s],"duplicate":%s'
                % (i, leaves[44 * k:44 * k + 44], hashes, "false" if r.fresh[0] else "true"),
                shared, b64enc(entry), "\\nindex %d\\n" % i, lines, tail,
            )).encode()
            out.set_result(Reply(body, _JSON[fmt]))


def batch_answer(state: LogState, hashes: HashReader, added: AddedBatch, *, cbor: bool,
                 chunk: int = PROOF_CHUNK) -> Iterator[bytes | memoryview]:
    """The answer to `POST /v1/entries:batch` in pieces of `chunk` results, each built
    when asked for: `{"tree_size", "checkpoint", "results": [{"index", "leaf_hash",
    "inclusion_proof", "duplicate"}, ...]}` in request order, JSON or deterministic CBOR.
    """
    n = len(added)
    if cbor:
        prefix, suffix = cbor_map_parts({"tree_size": cbor2.dumps(state.size),
                                         "checkpoint": cbor2.dumps(state.note)}, "results")
        yield prefix + cbor_head(4, n)
    else:
        head = json.dumps({"tree_size": state.size, "checkpoint": state.note}, separators=(",", ":"))
        yield head[:-1].encode() + b',"results":['
    for a in range(0, n, chunk):
        indices, fresh = added.indices[a:a + chunk], added.fresh[a:a + chunk]
        batch = inclusion_levels(state.view, hashes, np.array(indices, dtype=np.int64))
        if cbor:
            results = [{"index": i, "leaf_hash": lh, "inclusion_proof": p, "duplicate": not f}
                       for i, lh, f, p in zip(indices, added.leaf_hashes[a:a + chunk], fresh, batch.split(text=False))]
            yield memoryview(cbor2.dumps(results, canonical=True))[len(cbor_head(4, len(results))):]
            continue
        # JSON written directly: proofs and leaf hashes base64-encoded by numpy in one pass each.
        leaves = np.frombuffer(b"".join(added.leaf_hashes[a:a + chunk]), dtype=np.uint8).reshape(-1, 32)
        b64 = b64_rows(leaves).tobytes()
        parts = [
            b'{"index":%d,"leaf_hash":"%s","inclusion_proof":%s,"duplicate":%s}'
            % (i, b64[44 * k:44 * k + 44], p, b"false" if f else b"true")
            for k, (i, f, p) in enumerate(zip(indices, fresh, batch.json_items()))
        ]
        yield (b"," if a else b"") + b",".join(parts)
    yield suffix if cbor else b"]}"
