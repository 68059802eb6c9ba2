"""Subtrees and subtree consistency proofs (draft-ietf-plants-merkle-tree-certs §4.1, §4.4),
which C2SP tlog-witness `sign-subtree` requests carry.

A subtree [start, end) of a tree of n leaves is MTH(D[start:end]) with start a multiple
of BIT_CEIL(end - start). The verifier is transcribed step by step from the draft's
"Verifying a Subtree Consistency Proof"; the builder from its SUBTREE_PROOF definition
(for clients and tests), kept separate so a shared bug cannot make a bad proof pass.
"""
from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence

from tlog.errors import ConsistencyProofError
from tlog.formats.hashing import EMPTY_ROOT, node_hash
from tlog.merkle.tree import CompleteNode, TreeView


def valid_subtree(start: int, end: int) -> bool:
    """0 <= start <= end and start is a multiple of BIT_CEIL(end - start) (draft §4.1)."""
    if not 0 <= start <= end:
        return False
    size = end - start
    ceil = 1 << (size - 1).bit_length() if size > 1 else 1
    return start % ceil == 0


def _largest_power_of_two_below(n: int) -> int:
    return 1 << (n - 1).bit_length() - 1


def subtree_root(lo: int, hi: int, complete: CompleteNode) -> bytes:
    """MTH(D[lo:hi]) of a valid subtree, from the complete nodes of the log's tree: the node
    (k, lo >> k) with 2^k = BIT_CEIL(hi - lo), complete when hi - lo is a power of two, else
    the right edge of the tree of size hi. What `subtree_consistency_proof` needs as `mth`
    for a log that keeps its complete nodes (hash files, hash tiles)."""
    if not valid_subtree(lo, hi) or lo == hi:
        raise ValueError(f"[{lo}, {hi}) is not a non-empty valid subtree")
    level = (hi - lo - 1).bit_length()
    if hi - lo == 1 << level:
        return complete(level, lo >> level)
    return TreeView(hi, complete).node(level, lo >> level)


def subtree_consistency_proof(start: int, end: int, n: int, mth: Callable[[int, int], bytes]) -> list[bytes]:
    """SUBTREE_PROOF(start, end, D_n) (draft §4.4.1); `mth(lo, hi)` is MTH(D[lo:hi])."""
    if not valid_subtree(start, end) or end > n:
        raise ValueError(f"[{start}, {end}) is not a valid subtree of a tree of size {n}")
    if start == end:
        return []

    def sub(start: int, end: int, lo: int, hi: int, b: bool) -> list[bytes]:
        n = hi - lo
        if start == 0 and end == n:
            return [] if b else [mth(lo, hi)]
        k = _largest_power_of_two_below(n)
        if end <= k:
            return [*sub(start, end, lo, lo + k, b), mth(lo + k, hi)]
        if k <= start:
            return [*sub(start - k, end - k, lo + k, hi, b), mth(lo, lo + k)]
        return [*sub(0, end - k, lo + k, hi, False), mth(lo, lo + k)]

    return sub(start, end, 0, n, True)


def verify_subtree_consistency(start: int, end: int, n: int, proof: Sequence[bytes], subtree_hash: bytes,
                               root: bytes) -> None:
    """Raise ConsistencyProofError unless `proof` shows that the subtree [start, end) with hash
    `subtree_hash` is part of the tree of size `n` with hash `root` (draft §4.4.3)."""
    # 1.
    if not valid_subtree(start, end) or end > n:
        raise ConsistencyProofError(f"[{start}, {end}) is not a valid subtree of a tree of size {n}")
    if any(len(p) != 32 for p in proof):
        raise ConsistencyProofError("proof hash is not 32 bytes")
    # 2.
    if start == end:
        if proof or not hmac.compare_digest(subtree_hash, EMPTY_ROOT):
            raise ConsistencyProofError("an empty subtree has an empty proof and the empty hash")
        return
    # 3.-5.
    fn, sn, tn = start, end - 1, n - 1
    if sn == tn:
        while fn != sn:
            fn, sn, tn = fn >> 1, sn >> 1, tn >> 1
    else:
        while fn != sn and sn & 1:
            fn, sn, tn = fn >> 1, sn >> 1, tn >> 1
    # 6.
    rest = list(proof)
    if fn == sn:
        fr = sr = subtree_hash
    else:
        if not rest:
            raise ConsistencyProofError("subtree consistency proof is too short")
        fr = sr = rest.pop(0)
    # 7.
    for c in rest:
        if tn == 0:
            raise ConsistencyProofError("subtree consistency proof is too long")
        if sn & 1 or sn == tn:
            if fn < sn:
                fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while sn and not sn & 1:
                fn, sn, tn = fn >> 1, sn >> 1, tn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn, tn = fn >> 1, sn >> 1, tn >> 1
    # 8.
    if tn != 0:
        raise ConsistencyProofError("subtree consistency proof is too short")
    if not hmac.compare_digest(fr, subtree_hash):
        raise ConsistencyProofError("subtree consistency proof does not match the subtree hash")
    if not hmac.compare_digest(sr, root):
        raise ConsistencyProofError("subtree consistency proof does not match the root")
