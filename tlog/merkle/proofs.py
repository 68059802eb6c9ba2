"""Batched inclusion proofs: one numpy gather per tree level (docs/architecture.md §3.2).

For indices I in a tree of size n, the sibling at level k is s = (I >> k) ^ 1:
absent if it starts at or past n, a stored complete node if it ends by n, and
otherwise the single right-edge node of that level (cached in the TreeView).

`inclusion_levels` returns a `ProofBatch`: the proofs level-major, an
(H, B, 32) array whose row k holds every proof's k-th sibling. That layout
makes each level one contiguous `np.take` from the level's hash file, which is
what makes a batch fast; the encoders (`json`, `cbor`, `split`) put the
hashes in per-proof (RFC 9162) order in one transposing pass and then write
the whole document with a few numpy operations, never a Python loop per hash.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

import numpy as np

from tlog.errors import InvalidInput
from tlog.formats.encoding import b64encode_bytes
from tlog.formats.hashing import node_hashes
from tlog.merkle.tree import HashReader, TreeView, height

if TYPE_CHECKING:
    from typing_extensions import Buffer  # numpy's stubs give arrays __buffer__ on Python 3.12+ only


class ProofBatch:
    """Inclusion proofs for B indices of one tree size, level-major.

    `nodes[k, b]` is the k-th sibling of proof b where `mask[k, b]` (None means
    every sibling is present, the usual case away from the right edge).
    """

    __slots__ = ("mask", "nodes")

    def __init__(self, nodes: np.ndarray, mask: np.ndarray | None) -> None:
        self.nodes, self.mask = nodes, mask

    def __len__(self) -> int:
        return self.nodes.shape[1]

    def counts(self) -> np.ndarray:
        """Number of hashes in each proof, shape (B,)."""
        h, b = self.nodes.shape[:2]
        if self.mask is None:
            return np.full(b, h, dtype=np.int64)
        return self.mask.sum(axis=0)

    def rows(self) -> np.ndarray:
        """Every hash of every proof in proof order, as one (M, 32) array."""
        h, b = self.nodes.shape[:2]
        if h == 0 or b == 0:
            return np.empty((0, 32), dtype=np.uint8)
        # Transposing 32-byte void items is one strided copy, far cheaper than
        # moving the (H, B, 32) uint8 array byte by byte.
        pm = np.ascontiguousarray(self.nodes.view("V32").reshape(h, b).T)
        flat = pm.reshape(-1) if self.mask is None else pm[self.mask.T]
        return flat.view(np.uint8).reshape(-1, 32)

    def split(self, *, text: bool) -> list[list]:
        """Per-proof lists of hashes: base64 strings if `text`, else 32-byte bytes."""
        rows = self.rows()
        if text:
            s = b64_rows(rows).tobytes().decode("ascii")
            flat: list = [s[i : i + 44] for i in range(0, len(s), 44)]
        else:
            flat = rows.view("V32").reshape(-1).tolist()
        out, pos = [], 0
        for c in self.counts().tolist():
            out.append(flat[pos : pos + c])
            pos += c
        return out

    def json(self) -> bytes:
        return _json_from_rows(self.rows(), self.counts()).tobytes()

    def json_document(self, prefix: bytes = b"", suffix: bytes = b"") -> np.ndarray:
        """prefix + `json()` + suffix as one flat uint8 array, written in place (the
        JSON twin of `cbor_document`: a 10,000-proof response is ~12 MB, built once)."""
        return _json_from_rows(self.rows(), self.counts(), prefix, suffix)

    def json_items(self) -> list[bytes]:
        """Each proof as its own JSON array of base64 strings (slices of `json()`)."""
        counts = self.counts()
        doc = _json_from_rows(self.rows(), counts).tobytes()
        if not counts.size or not counts.all():
            return [b"[]"] * counts.size
        ends = np.cumsum(counts)
        starts = (ends - counts) * _REC + 1  # +1: the document's opening "["
        stops = ends * _REC  # each proof's last record ends "]," + one filler byte
        return [doc[a:b] for a, b in zip(starts.tolist(), stops.tolist())]

    def cbor(self) -> bytes:
        """Deterministic CBOR array of arrays of 32-byte byte strings, as cbor2 writes it."""
        return self.cbor_document().tobytes()

    def cbor_document(self, prefix: bytes = b"", suffix: bytes = b"") -> np.ndarray:
        """prefix + `cbor()` + suffix as one flat uint8 array, written in place.

        A response is this array and nothing else: the server hands its buffer to
        aiohttp, so a 7 MB proof document is not copied again to be framed (see
        `cbor_map_parts`). When every proof has the same length (the usual case)
        each proof is a fixed-width row: its array head (one byte below 24 items,
        else two), then its hashes as 0x58 0x20 <32 bytes> items, filled by one
        32-byte-item transposing copy from the level-major nodes (masked proofs
        packed left by rank). Otherwise the rows are built at the widest length
        and each proof's used part is joined (one memoryview slice per proof).
        """
        h, b = self.nodes.shape[:2]
        head = cbor_head(4, b)
        if b == 0:
            return np.frombuffer(prefix + head + suffix, dtype=np.uint8)
        if h > 255:
            raise ValueError("proof too long")
        counts = self.counts()
        first = int(counts[0])
        if (counts == first).all():
            hw = 1 if first < 24 else 2
            width = hw + 34 * first
            start = len(prefix) + len(head)
            buf = np.empty(start + b * width + len(suffix), dtype=np.uint8)
            buf[: len(prefix)] = np.frombuffer(prefix, dtype=np.uint8)
            buf[len(prefix) : start] = np.frombuffer(head, dtype=np.uint8)
            if suffix:
                buf[start + b * width :] = np.frombuffer(suffix, dtype=np.uint8)
            rows = buf[start : start + b * width].reshape(b, width)
            if hw == 1:
                rows[:, 0] = 0x80 | first
            else:
                rows[:, 0], rows[:, 1] = 0x98, first
            self._fill_items(rows[:, hw:], first)
            return buf
        width = 2 + 34 * h
        out = np.empty((b, width), dtype=np.uint8)
        self._fill_items(out[:, 2:], h)
        small = counts < 24
        out[:, 0] = np.where(small, 0, 0x98)
        out[:, 1] = np.where(small, 0x80 | np.minimum(counts, 23), counts)
        flat = memoryview(cast("Buffer", out.reshape(-1)))
        starts = np.arange(b, dtype=np.int64) * width + small
        stops = np.arange(b, dtype=np.int64) * width + 2 + 34 * counts
        return np.frombuffer(b"".join([prefix, head, *[flat[a:z] for a, z in zip(starts.tolist(), stops.tolist())],
                                       suffix]), dtype=np.uint8)

    def _fill_items(self, region: np.ndarray, slots_per_row: int) -> None:
        """Write each proof's present hashes, packed left, as CBOR byte-string items into
        the (B, 34 * slots_per_row) `region` (slots past a proof's count are left as is)."""
        _h, b = self.nodes.shape[:2]
        items = region.reshape(b, slots_per_row, 34)
        items[:, :, 0] = 0x58
        items[:, :, 1] = 32
        slots = items[:, :, 2:].view("V32")[:, :, 0]  # (B, slots) 32-byte items
        src = self.nodes.view("V32")[:, :, 0]  # (H, B)
        if self.mask is None:
            slots[...] = src.T
        else:
            present = self.mask.T  # (B, H), proof-major
            pj, pk = np.nonzero(present)
            rank = np.cumsum(present, axis=1) - 1
            slots[pj, rank[pj, pk]] = src[pk, pj]


def inclusion_levels(view: TreeView, hashes: HashReader, indices: np.ndarray) -> ProofBatch:
    """RFC 9162 PATH(i, D[0:n]) for every i in `indices`, as one ProofBatch."""
    n = view.size
    idx = np.asarray(indices, dtype=np.int64)
    if idx.ndim != 1:
        raise InvalidInput("indices must be a flat list")
    b = idx.size
    h = height(n)
    nodes = np.empty((h, b, 32), dtype=np.uint8)
    if b == 0:
        return ProofBatch(nodes, None)
    lo, hi = int(idx.min()), int(idx.max())
    if lo < 0 or hi >= n:
        raise InvalidInput(f"every index must be in 0..{n - 1} for tree size {n}")
    mask: np.ndarray | None = None
    p = idx.copy()  # p = idx >> k
    for k in range(h):
        if k:
            np.right_shift(p, 1, out=p)
        s = p ^ 1
        full = n >> k  # nodes at level k that are complete
        if ((hi >> k) | 1) < full:  # every sibling is a stored complete node
            nodes[k] = hashes.gather(k, s, need=full)
            continue
        if mask is None:
            mask = np.ones((h, b), dtype=bool)
        complete = s < full
        exists = s <= (n - 1) >> k
        mask[k] = exists
        partial = exists & ~complete
        if complete.any():
            nodes[k, complete] = hashes.gather(k, s[complete], need=full)
        if partial.any():
            nodes[k, partial] = np.frombuffer(view.edge[k], dtype=np.uint8)
    return ProofBatch(nodes, mask)


PROOF_CHUNK = 2048
"""Proofs per piece of a streamed answer: ~2.4 MB of JSON, ~1.7 MB of CBOR at 2^24 leaves."""


def inclusion_pieces(view: TreeView, hashes: HashReader, indices: np.ndarray, *, cbor: bool,
                     chunk: int = PROOF_CHUNK) -> Iterator[bytes | memoryview]:
    """The array of the proofs of `indices` (JSON, or deterministic CBOR), `chunk` proofs
    at a time: each piece is gathered and encoded only when the one before was taken.

    Joined, the pieces are the same document as one `json_document`/`cbor_document`
    (the JSON up to the spaces between elements).
    """
    idx = np.asarray(indices, dtype=np.int64)
    yield cbor_head(4, idx.size) if cbor else b"["
    for a in range(0, idx.size, chunk):
        batch = inclusion_levels(view, hashes, idx[a:a + chunk])
        if cbor:
            yield memoryview(cast("Buffer", batch.cbor_document()))[len(cbor_head(4, len(batch))):]
        else:
            if a:
                yield b","
            yield memoryview(cast("Buffer", batch.json_document()))[1:-1]
    if not cbor:
        yield b"]"


def consistency_levels(hashes: HashReader, olds: np.ndarray, news: np.ndarray) -> ProofBatch:
    """RFC 9162 §2.1.4.1 PROOF(old, D[0:new]) for many (old, new) pairs, as one ProofBatch.

    Every `new` must be a size whose nodes are all in `hashes`. Slot 0 holds
    the proof's first hash (the subtree ending at `old`, omitted when it is
    the whole old tree), slot k + 1 the sibling at level k of that subtree's
    path to the root of `new`. At most one of those siblings is incomplete
    (the new tree's right-edge node where the path meets it); it is hashed
    here from stored complete nodes, one `node_hashes` pass per bit level for
    the whole batch.
    """
    old = np.asarray(olds, dtype=np.int64)
    new = np.asarray(news, dtype=np.int64)
    if old.ndim != 1 or old.shape != new.shape:
        raise InvalidInput("old and new sizes must be flat lists of the same length")
    b = old.size
    if b and (int(old.min()) < 0 or bool((old > new).any())):
        raise InvalidInput("every pair must have 0 <= old <= new")
    h = height(int(new.max())) if b else 0
    nodes = np.empty((h + 1, b, 32), dtype=np.uint8)
    mask = np.zeros((h + 1, b), dtype=bool)
    live = (old > 0) & (old < new)
    lv = np.zeros(b, dtype=np.int64)  # level of the subtree ending at old: ctz(old)
    low = old & -old
    for k in range(h + 1):
        lv[low == (1 << k)] = k
    ix = np.where(live, (old - 1) >> lv, 0)
    # Slot 0: node (lv, ix) unless ix == 0 (then the verifier knows it as the old root).
    first = live & (ix > 0)
    for k in np.unique(lv[first]).tolist():
        sel = np.flatnonzero(first & (lv == k))
        nodes[0, sel] = hashes.gather(k, ix[sel])
        mask[0, sel] = True
    edge_pairs: list[np.ndarray] = []
    edge_levels: list[int] = []
    for k in range(h):
        act = live & (lv <= k) & ((1 << k) < new)
        if not act.any():
            continue
        s = ((old - 1) >> k) ^ 1
        exists = act & ((s << k) < new)
        complete = exists & (((s + 1) << k) <= new)
        sel = np.flatnonzero(complete)
        if sel.size:
            nodes[k + 1, sel] = hashes.gather(k, s[sel])
        mask[k + 1] = exists
        part = np.flatnonzero(exists & ~complete)
        if part.size:
            edge_pairs.append(part)
            edge_levels.append(k)
    if edge_pairs:
        pairs = np.concatenate(edge_pairs)
        levels = np.concatenate([np.full(p.size, k, dtype=np.int64) for p, k in zip(edge_pairs, edge_levels)])
        nodes[levels + 1, pairs] = _edge_nodes(hashes, new[pairs], levels)
    return ProofBatch(nodes, mask)


def _edge_nodes(hashes: HashReader, new: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """MTH of the leaves [(new >> k) << k, new) for each (new, k): the incomplete node at level k.

    It folds, from the right, the complete nodes at the set bits b of
    r = new mod 2^k: node (b, (new >> b) - 1), lowest bit first.
    """
    m = new.size
    r = new & ((np.int64(1) << levels) - 1)
    acc = np.empty((m, 32), dtype=np.uint8)
    started = np.zeros(m, dtype=bool)
    for bit in range(int(levels.max())):
        on = np.flatnonzero((r >> bit) & 1)
        if not on.size:
            continue
        node = hashes.gather(bit, (new[on] >> bit) - 1)
        fresh = ~started[on]
        if fresh.any():
            acc[on[fresh]] = node[fresh]
        old = on[~fresh]
        if old.size:
            acc[old] = node_hashes(node[~fresh], acc[old])
        started[on] = True
    return acc


# --- encoders -------------------------------------------------------------------

_B64 = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", dtype=np.uint8)


def b64_rows(flat: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Standard padded base64 of each 32-byte row as an (M, 44) uint8 array (written
    into `out`, an (M, 44) uint8 view, when given).

    Padding each row to 33 bytes keeps 3-byte groups aligned per row; the last
    group then encodes (x, y, 0), whose first three characters equal those of
    the padded encoding of (x, y); only the fourth becomes "=".
    """
    m = flat.shape[0]
    padded = np.zeros((m, 33), dtype=np.uint8)
    padded[:, :32] = flat
    enc = np.frombuffer(b64encode_bytes(memoryview(cast("Buffer", padded.reshape(-1)))), dtype=np.uint8).reshape(m, 44)
    if out is None:
        out = enc.copy()
    else:
        out[...] = enc
    out[:, 43] = ord("=")
    return out


_REC = 49  # one hash in the JSON document: sep '"' 44 base64 chars '"' ',' filler


def _json_from_rows(flat: np.ndarray, counts: np.ndarray, prefix: bytes = b"", suffix: bytes = b"") -> np.ndarray:
    """prefix + JSON array of arrays of base64 strings + suffix, as one uint8 array;
    the JSON equals json.dumps(..., separators=(",", ":")) except for spaces between
    elements."""
    b = counts.shape[0]
    if b == 0 or (counts == 0).any():
        if b and flat.shape[0]:
            raise ValueError("empty proofs only occur when every proof is empty")
        body = b"[" + b",".join(b"[]" for _ in range(b)) + b"]"  # (only in a tree of size 1)
        return np.frombuffer(prefix + body + suffix, dtype=np.uint8)
    m = flat.shape[0]
    start = len(prefix) + 1
    buf = np.empty(start + m * _REC + 1 + len(suffix), dtype=np.uint8)
    buf[: len(prefix)] = np.frombuffer(prefix, dtype=np.uint8)
    buf[start - 1] = ord("[")
    buf[start + m * _REC] = ord("]")
    buf[start + m * _REC + 1 :] = np.frombuffer(suffix, dtype=np.uint8)
    rec = buf[start : start + m * _REC].reshape(m, _REC)
    ends = np.cumsum(counts) - 1
    firsts = ends - counts + 1
    rec[:, 0] = ord(" ")
    rec[:, 1] = ord('"')
    b64_rows(flat, rec[:, 2:46])
    rec[:, 46] = ord('"')
    rec[:, 47] = ord(",")
    rec[:, 48] = ord(" ")
    rec[firsts, 0] = ord("[")
    rec[ends, 47] = ord("]")
    rec[ends[:-1], 48] = ord(",")
    return buf


def cbor_head(major: int, n: int) -> bytes:
    """RFC 8949 §3 head: the shortest encoding of argument n (as deterministic CBOR requires)."""
    mt = major << 5
    if n < 24:
        return bytes([mt | n])
    for ai, width in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * width):
            return bytes([mt | ai]) + n.to_bytes(width, "big")
    raise ValueError("CBOR argument too large")


def cbor_map(items: dict[str, bytes]) -> bytes:
    """A deterministic CBOR map from text keys to already-encoded values.

    Keys are ordered as `cbor2.dumps(..., canonical=True)` orders them
    (shorter encoded key first, then bytewise), so a document assembled here
    is byte-identical to one cbor2 would encode.
    """
    keys = sorted(((_cbor_text(k), v) for k, v in items.items()), key=lambda kv: (len(kv[0]), kv[0]))
    return cbor_head(5, len(keys)) + b"".join(k + v for k, v in keys)


def cbor_map_parts(items: dict[str, bytes], hole: str) -> tuple[bytes, bytes]:
    """`cbor_map(items)` split around the value of key `hole` (which `items` omits):
    the bytes before that value and the bytes after it."""
    keys = sorted(((_cbor_text(k), k, v) for k, v in {**items, hole: b""}.items()),
                  key=lambda kv: (len(kv[0]), kv[0]))
    before: list[bytes] = [cbor_head(5, len(keys))]
    after: list[bytes] = []
    seen = False
    for enc, k, v in keys:
        if k == hole:
            before.append(enc)
            seen = True
        else:
            (after if seen else before).append(enc + v)
    return b"".join(before), b"".join(after)


def _cbor_text(s: str) -> bytes:
    raw = s.encode("utf-8")
    return cbor_head(3, len(raw)) + raw
