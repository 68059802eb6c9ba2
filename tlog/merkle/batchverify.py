"""Batched offline verification: many inclusion proofs against one tree head.

`verify_inclusion_batch` accepts exactly the proofs that `tlog.merkle.verify.
verify_inclusion` accepts, one by one, but hashes every node shared by
several proofs once. Proofs of one tree overlap heavily near the root: for
100,000 random leaves of a 2^20 tree, 2,000,000 per-proof node hashes become
about 360,000 distinct ones.

How it stays sound. Walking up level by level, each distinct node on some
proof's path gets one value, computed from its two children; every proof's
claimed sibling must equal that value when the sibling is itself on a path,
and otherwise every claim about the same sibling must be equal. If all of
those checks hold and the top value is the root, then each proof, run on its
own through the RFC 9162 §2.1.3.2 loop, would compute exactly these values
level by level (by induction from its leaf), so it verifies. If any check
fails, every proof of the batch is verified alone by the reference verifier,
which names the ones that fail: a bad batch costs the slow path, a good one
never does.

Pure: numpy and hashlib only. Like `tlog.merkle.verify`, it shares no code with the
proof builders.
"""
from __future__ import annotations

import hmac
from collections.abc import Sequence
from typing import Any

import numpy as np

from tlog.errors import InclusionProofError, VerificationError
from tlog.formats.hashing import HASH_SIZE, node_hashes
from tlog.merkle.verify import hash32, tree_size, verify_inclusion

_FAST_LIMIT = 1 << 62
"""Trees and indices below this take the numpy walk (int64 shifts cannot overflow);
larger ones, valid up to 2^64 - 1, are verified proof by proof."""


def _rows_or_none(hashes: Any) -> np.ndarray | None:
    """(m, 32) uint8 rows of well-formed hashes; None when any is not 32 bytes (then each
    proof is checked alone, which names the bad ones)."""
    if isinstance(hashes, np.ndarray):
        if hashes.dtype == np.uint8 and hashes.ndim == 2 and hashes.shape[1] == HASH_SIZE:
            return hashes
        return None
    if not isinstance(hashes, (list, tuple)):
        return None
    if not all(type(h) is bytes and len(h) == HASH_SIZE for h in hashes):
        return None
    return np.frombuffer(b"".join(hashes), dtype=np.uint8).reshape(len(hashes), HASH_SIZE)


def flatten_proofs(proofs: Sequence[Sequence[bytes]]) -> tuple[np.ndarray, np.ndarray]:
    """Proofs as lists of hashes -> (rows (M, 32), counts (B,)) for `verify_inclusion_batch`."""
    if not isinstance(proofs, (list, tuple)) or not all(isinstance(p, (list, tuple)) for p in proofs):
        raise InclusionProofError("proofs must be a list of lists of hashes")
    counts = np.fromiter((len(p) for p in proofs), dtype=np.int64, count=len(proofs))
    rows = _rows_or_none([h for p in proofs for h in p])
    if rows is None:
        raise InclusionProofError("proof hash is not 32 bytes")
    return rows, counts


def _indices_or_none(indices: Any, n: int) -> np.ndarray | None:
    """The indices as int64 when every one is an int in 0..n-1 and n is small enough for
    the numpy walk; None sends the batch to the proof-by-proof path."""
    if isinstance(indices, np.ndarray):
        if indices.ndim != 1 or indices.dtype.kind not in "iu":
            return None
        if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= min(n, _FAST_LIMIT)):
            return None
        return indices.astype(np.int64, copy=False)
    if not all(type(i) is int and 0 <= i < n for i in indices):
        return None
    return np.fromiter(indices, dtype=np.int64, count=len(indices))


def verify_inclusion_batch(indices: Sequence[int] | np.ndarray, size: int, leaves: Sequence[bytes] | np.ndarray,
                           proofs: Sequence[Sequence[bytes]] | tuple[np.ndarray, np.ndarray], root: bytes) -> None:
    """Verify proof b for leaf hash `leaves[b]` at `indices[b]` in the tree (size, root), for every b.

    `proofs` is a list of proofs (lists of 32-byte hashes) or the flat form
    (rows, counts) from `flatten_proofs`. Raises InclusionProofError naming
    the failing positions (`failed`) and the first reason: exactly the positions
    whose proofs `tlog.merkle.verify.verify_inclusion` refuses, malformed ones included
    (a hash of the wrong length, an index or size out of range), with its reason.
    Inputs that do not describe proofs at all (lists of different lengths, arrays of
    the wrong shape) are an InclusionProofError for the whole batch.
    """
    b = _count(indices, leaves, proofs)
    try:  # a bad tree fails every proof, and a batch of none too: nothing is accepted on it
        size = tree_size(size, InclusionProofError)
        root = hash32(root, "root", InclusionProofError)
    except InclusionProofError as e:
        raise InclusionProofError(e.message, failed=list(range(b))) from None
    if b == 0:
        return
    idx = _indices_or_none(indices, size) if size < _FAST_LIMIT else None
    leaf_rows = _rows_or_none(leaves)
    flat = _flat_or_none(proofs)
    if idx is not None and leaf_rows is not None and flat is not None \
            and _batch_ok(idx, size, leaf_rows, flat[0], flat[1], root):
        return
    _verify_each(*_per_proof(indices, leaves, proofs), size, root)


def _is_flat(proofs: Any) -> bool:
    return isinstance(proofs, tuple) and len(proofs) == 2 and isinstance(proofs[0], np.ndarray)


def _count(indices: Any, leaves: Any, proofs: Any) -> int:
    """The number of proofs the three inputs describe; InclusionProofError when they do
    not describe the same number, or are not lists or arrays of the documented shapes."""
    if isinstance(indices, np.ndarray) and indices.ndim == 1:
        n_idx = indices.size
    elif isinstance(indices, (list, tuple)):
        n_idx = len(indices)
    else:
        raise InclusionProofError("indices must be a list or a 1-d array of integers")
    if isinstance(leaves, np.ndarray):
        if leaves.dtype != np.uint8 or leaves.ndim != 2 or leaves.shape[1] != HASH_SIZE:
            raise InclusionProofError("leaves must be a list of hashes or an (m, 32) uint8 array")
        n_leaves = leaves.shape[0]
    elif isinstance(leaves, (list, tuple)):
        n_leaves = len(leaves)
    else:
        raise InclusionProofError("leaves must be a list of hashes or an (m, 32) uint8 array")
    if _is_flat(proofs):
        rows, counts = proofs
        counts = np.asarray(counts)
        if rows.dtype != np.uint8 or rows.ndim != 2 or rows.shape[1] != HASH_SIZE or counts.ndim != 1 \
                or counts.dtype.kind not in "iu" or (counts.size and int(counts.min()) < 0) \
                or int(counts.sum()) != rows.shape[0]:
            raise InclusionProofError("flat proofs are (rows: an (M, 32) uint8 array, counts: M split into "
                                      "non-negative integers)")
        n_proofs = counts.size
    elif isinstance(proofs, (list, tuple)):
        n_proofs = len(proofs)
    else:
        raise InclusionProofError("proofs must be a list of lists of hashes, or (rows, counts)")
    if not n_idx == n_leaves == n_proofs:
        raise InclusionProofError("indices, leaves and proofs must describe the same number of proofs")
    return n_idx


def _per_proof(indices: Any, leaves: Any, proofs: Any) -> tuple[list, list, list]:
    """(indices, leaves, proofs) as one item per proof, for the reference verifier
    (the inputs are known to have the shapes `_count` accepts)."""
    idx = indices.tolist() if isinstance(indices, np.ndarray) else list(indices)
    lv = [r.tobytes() for r in leaves] if isinstance(leaves, np.ndarray) else list(leaves)
    if _is_flat(proofs):
        rows, counts = proofs
        offsets = np.concatenate([[0], np.cumsum(np.asarray(counts, dtype=np.int64))])
        pf: list = [[rows[r].tobytes() for r in range(int(offsets[k]), int(offsets[k + 1]))]
                    for k in range(len(offsets) - 1)]
    else:
        pf = list(proofs)
    return idx, lv, pf


def _flat_or_none(proofs: Any) -> tuple[np.ndarray, np.ndarray] | None:
    if _is_flat(proofs):
        rows, counts = proofs
        return rows, np.asarray(counts).astype(np.int64)
    try:
        return flatten_proofs(proofs)
    except InclusionProofError:
        return None


def _verify_each(idx: list, leaves: list, proofs: list, size: int, root: bytes) -> None:
    """The slow path: the reference verifier on every proof, collecting failures."""
    failed: list[int] = []
    first = ""
    for pos in range(len(idx)):
        try:
            verify_inclusion(idx[pos], size, leaves[pos], proofs[pos], root)
        except VerificationError as e:
            if not failed:
                first = e.message
            failed.append(pos)
    if failed:
        raise InclusionProofError(
            f"{len(failed)} of {len(idx)} inclusion proofs do not verify; first at position {failed[0]}: {first}",
            failed=failed,
        )


def _take(a: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return np.take(a, rows, axis=0)


def _rows_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool((a.view(np.uint64) == b.view(np.uint64)).all())


def _batch_ok(idx: np.ndarray, n: int, leaf_rows: np.ndarray, rows: np.ndarray, counts: np.ndarray,
              root: bytes) -> bool:
    """The shared-node walk; False means "could not show every proof valid"."""
    h = (n - 1).bit_length() if n > 1 else 0
    # Expected proof length: the number of levels whose sibling starts inside the tree.
    expected = np.zeros(idx.size, dtype=np.int64)
    for k in range(h):
        expected += (((idx >> k) ^ 1) << k) < n
    if not np.array_equal(expected, counts):
        return False
    order = np.argsort(idx, kind="stable")
    j = idx[order]  # node of each proof at the current level, sorted
    offsets = (np.cumsum(counts) - counts)[order]  # row of each proof's next unused sibling
    # Level 0: proofs of the same index must agree on the leaf.
    first = np.empty(j.size, dtype=bool)
    first[0] = True
    np.not_equal(j[1:], j[:-1], out=first[1:])
    slot = np.cumsum(first) - 1  # each proof's distinct node
    leaves_sorted = _take(leaf_rows, order)
    cur = _take(leaves_sorted, np.flatnonzero(first))
    if not _rows_equal(leaves_sorted, _take(cur, slot)):
        return False
    for k in range(h):
        ids = j[first]  # distinct nodes at level k, sorted
        m = ids.size
        partner = ids ^ 1
        has_sib = (partner << k) < n  # the sibling starts inside the tree
        # Is the sibling itself one of our nodes? Sorted ids: it is a neighbour.
        sib_known = np.zeros(m, dtype=bool)
        if m > 1:
            adj = ids[1:] == ids[:-1] + 1
            pair = adj & ((ids[:-1] & 1) == 0)  # (even, odd) neighbours are siblings
            sib_known[:-1] |= pair
            sib_known[1:] |= pair
        # Claims: every proof whose sibling exists consumes one proof row here.
        p_has = has_sib[slot]
        claim_rows = offsets[p_has]
        offsets[p_has] += 1
        claims = _take(rows, claim_rows)
        claim_slot = slot[p_has]
        # The sibling's value, as a row of `both` = cur followed by claims:
        # a known sibling is its neighbour's computed value, an unknown one
        # the first claim made about it (claims are grouped by slot, sorted).
        slots = np.arange(m)
        sib_at = np.where(ids & 1, slots - 1, slots + 1)
        unk = np.flatnonzero(has_sib & ~sib_known)
        if unk.size:
            sib_at[unk] = m + np.searchsorted(claim_slot, unk)
        both = np.concatenate([cur, claims])
        if not _rows_equal(claims, _take(both, sib_at[claim_slot])):
            return False
        # Parents: one per pair; a known pair is hashed once, from its even member.
        even = (ids & 1) == 0
        emit = np.flatnonzero(even | ~sib_known)
        parent_ids = ids[emit] >> 1
        e_even, e_self, e_sib = even[emit], emit, sib_at[emit]
        hashed = has_sib[emit]
        if hashed.all():
            left = _take(both, np.where(e_even, e_self, e_sib))
            right = _take(both, np.where(e_even, e_sib, e_self))
            cur = node_hashes(left, right)
        else:  # no sibling (only even nodes): RFC 9162 promotes the node unchanged
            cur = _take(both, e_self)
            hx = np.flatnonzero(hashed)
            if hx.size:
                left = _take(both, np.where(e_even, e_self, e_sib)[hx])
                right = _take(both, np.where(e_even, e_sib, e_self)[hx])
                cur[hx] = node_hashes(left, right)
        # Re-index proofs onto parent nodes.
        j = j >> 1
        first = np.empty(j.size, dtype=bool)
        first[0] = True
        np.not_equal(j[1:], j[:-1], out=first[1:])
        slot = np.cumsum(first) - 1
        if not np.array_equal(j[first], parent_ids):
            return False  # cannot happen; refuse rather than guess
    return cur.shape[0] == 1 and hmac.compare_digest(cur[0].tobytes(), root)
