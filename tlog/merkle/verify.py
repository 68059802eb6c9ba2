"""Proof verifiers, transcribed from RFC 9162 §2.1.3.2 and §2.1.4.2.

Deliberately independent of the builders in `tlog.merkle.tree`: a shared bug would
otherwise make bad proofs look good. Failures raise typed errors.
"""
from __future__ import annotations

import hmac
from collections.abc import Sequence

from tlog.errors import ConsistencyProofError, InclusionProofError
from tlog.formats.hashing import EMPTY_ROOT, node_hash


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """RFC 9162 §2.1.3.2 steps 1-5: the root implied by an inclusion proof."""
    if not 0 <= index < size:
        raise InclusionProofError(f"index {index} is outside a tree of size {size}")
    fn, sn = index, size - 1
    r = leaf
    for p in proof:
        if len(p) != 32:
            raise InclusionProofError("proof hash is not 32 bytes")
        if sn == 0:
            raise InclusionProofError("inclusion proof is too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise InclusionProofError("inclusion proof is too short")
    return r


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> None:
    if not hmac.compare_digest(root_from_inclusion(index, size, leaf, proof), root):
        raise InclusionProofError("inclusion proof does not lead to the checkpoint root")


def verify_consistency(old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> None:
    """RFC 9162 §2.1.4.2."""
    if not 0 <= old <= new:
        raise ConsistencyProofError(f"old size {old} is not within 0..{new}")
    if any(len(p) != 32 for p in proof):
        raise ConsistencyProofError("proof hash is not 32 bytes")
    if old == new:
        if proof:
            raise ConsistencyProofError("proof must be empty for equal sizes")
        if not hmac.compare_digest(old_root, new_root):
            raise ConsistencyProofError("same size, different roots")
        return
    if old == 0:
        if proof:
            raise ConsistencyProofError("proof from the empty tree must be empty")
        if old_root != EMPTY_ROOT:
            raise ConsistencyProofError("size-0 root must be SHA-256 of the empty string")
        return
    path = list(proof)
    if old & (old - 1) == 0:  # step 1: old is a power of two
        path.insert(0, old_root)
    if not path:
        raise ConsistencyProofError("consistency proof is empty")
    fn, sn = old - 1, new - 1
    while fn & 1:  # step 3
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ConsistencyProofError("consistency proof is too long")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ConsistencyProofError("consistency proof is too short")
    if not (hmac.compare_digest(fr, old_root) and hmac.compare_digest(sr, new_root)):
        raise ConsistencyProofError("consistency proof does not match the two roots")
