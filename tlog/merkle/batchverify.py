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

import numpy as np

from tlog.errors import InclusionProofError, VerificationError
from tlog.formats.hashing import node_hashes
from tlog.merkle.verify import verify_inclusion


def _as_rows(hashes: Sequence[bytes] | np.ndarray, what: str) -> np.ndarray:
    if isinstance(hashes, np.ndarray):
        if hashes.dtype != np.uint8 or hashes.ndim != 2 or hashes.shape[1] != 32:
            raise ValueError(f"{what} must be an (m, 32) uint8 array")
        return hashes
    if any(len(h) != 32 for h in hashes):
        raise InclusionProofError(f"{what}: every hash must be 32 bytes")
    return np.frombuffer(b"".join(hashes), dtype=np.uint8).reshape(len(hashes), 32)


def flatten_proofs(proofs: Sequence[Sequence[bytes]]) -> tuple[np.ndarray, np.ndarray]:
    """Proofs as lists of hashes -> (rows (M, 32), counts (B,)) for `verify_inclusion_batch`."""
    counts = np.fromiter((len(p) for p in proofs), dtype=np.int64, count=len(proofs))
    flat = [h for p in proofs for h in p]
    return _as_rows(flat, "proof"), counts


def verify_inclusion_batch(indices: Sequence[int] | np.ndarray, size: int, leaves: Sequence[bytes] | np.ndarray,
                           proofs: Sequence[Sequence[bytes]] | tuple[np.ndarray, np.ndarray], root: bytes) -> None:
    """Verify proof b for leaf hash `leaves[b]` at `indices[b]` in the tree (size, root), for every b.

    `proofs` is a list of proofs (lists of 32-byte hashes) or the flat form
    (rows, counts) from `flatten_proofs`. Raises InclusionProofError naming
    the failing positions (`failed`) and the first reason.
    """
    idx = np.asarray(indices, dtype=np.int64)
    b = idx.size
    leaf_rows = _as_rows(leaves, "leaf")
    rows, counts = proofs if isinstance(proofs, tuple) else flatten_proofs(proofs)
    rows = _as_rows(rows, "proof")
    if leaf_rows.shape[0] != b or counts.shape[0] != b or int(counts.sum()) != rows.shape[0]:
        raise ValueError("indices, leaves and proofs must describe the same number of proofs")
    if b == 0:
        return
    if len(root) != 32 or not _batch_ok(idx, size, leaf_rows, rows, counts.astype(np.int64), root):
        _verify_each(idx, size, leaf_rows, rows, counts, root)


def _verify_each(idx, size, leaf_rows, rows, counts, root) -> None:
    """The slow path: the reference verifier on every proof, collecting failures."""
    failed: list[int] = []
    first = ""
    offsets = np.concatenate([[0], np.cumsum(counts)])
    for pos in range(idx.size):
        proof = [rows[r].tobytes() for r in range(int(offsets[pos]), int(offsets[pos + 1]))]
        try:
            verify_inclusion(int(idx[pos]), size, leaf_rows[pos].tobytes(), proof, root)
        except VerificationError as e:
            if not failed:
                first = e.message
            failed.append(pos)
    if failed:
        raise InclusionProofError(
            f"{len(failed)} of {idx.size} inclusion proofs do not verify; first at position {failed[0]}: {first}",
            failed=failed,
        )


def _take(a: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return np.take(a, rows, axis=0)


def _rows_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool((a.view(np.uint64) == b.view(np.uint64)).all())


def _batch_ok(idx: np.ndarray, n: int, leaf_rows: np.ndarray, rows: np.ndarray, counts: np.ndarray,
              root: bytes) -> bool:
    """The shared-node walk; False means "could not show every proof valid"."""
    if int(idx.min()) < 0 or int(idx.max()) >= n:
        return False
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
