"""Proof verifiers, transcribed from RFC 9162 §2.1.3.2 and §2.1.4.2.

Deliberately independent of the builders in `tlog.merkle.tree`: a shared bug would
otherwise make bad proofs look good. Failures raise typed errors.

Inputs are checked before any hashing (docs/architecture.md §3.2): every hash is
exactly 32 bytes (leaf, root and each proof hash), sizes and indices are integers
with 0 <= index < size <= 2^64 - 1 (RFC 9162 §4 carries them as uint64, and so do
C2SP checkpoints), a proof has at most as many hashes as a tree of 2^64 - 1 leaves
can need, and a size of 0 has exactly one root, SHA-256 of the empty string.
Anything else is an `InclusionProofError` or `ConsistencyProofError` saying what is
wrong, never a crash or a silent accept. The browser's verifiers
(tlog/ui/static/lib/merkle.js) check the same things in the same order, with the
same reasons (tests/merkle/test_malformed.py compares them case by case).
"""
from __future__ import annotations

import hmac
import operator
from collections.abc import Sequence
from typing import Any

from tlog.errors import ConsistencyProofError, InclusionProofError, VerificationError
from tlog.formats.checkpoint import MAX_TREE_SIZE
from tlog.formats.hashing import EMPTY_ROOT, HASH_SIZE, node_hash

MAX_INCLUSION_HASHES = 64
"""An inclusion proof in a tree of at most 2^64 - 1 leaves has at most 64 hashes."""
MAX_CONSISTENCY_HASHES = 128
"""A consistency proof between two such trees has fewer than 2 x 64 hashes."""


def tree_int(value: Any, what: str, error: type[VerificationError]) -> int:
    """An index or size as an int (Python ints and numpy integers; never a bool or a float)."""
    if isinstance(value, bool):
        raise error(f"{what} must be an integer")
    try:
        return operator.index(value)
    except TypeError:
        raise error(f"{what} must be an integer") from None


def tree_size(value: Any, error: type[VerificationError], what: str = "tree size") -> int:
    size = tree_int(value, what, error)
    if not 0 <= size <= MAX_TREE_SIZE:
        raise error(f"{what} {size} is outside 0..2^64-1")
    return size


def hash32(value: Any, what: str, error: type[VerificationError]) -> bytes:
    """A 32-byte hash (bytes or bytearray), or `error` naming it."""
    if not isinstance(value, (bytes, bytearray)) or len(value) != HASH_SIZE:
        raise error(f"{what} is not 32 bytes")
    return bytes(value)


def _proof_list(proof: Any, limit: int, too_long: str, error: type[VerificationError]) -> Sequence[Any]:
    if isinstance(proof, (str, bytes, bytearray)) or not isinstance(proof, Sequence):
        raise error("proof must be a list of hashes")
    if len(proof) > limit:
        raise error(too_long)
    return proof


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """RFC 9162 §2.1.3.2 steps 1-5: the root implied by an inclusion proof."""
    size = tree_size(size, InclusionProofError)
    index = tree_int(index, "index", InclusionProofError)
    if not 0 <= index < size:
        raise InclusionProofError(f"index {index} is outside a tree of size {size}")
    r = hash32(leaf, "leaf hash", InclusionProofError)
    hashes = _proof_list(proof, MAX_INCLUSION_HASHES, "inclusion proof is too long", InclusionProofError)
    fn, sn = index, size - 1
    for p in hashes:
        if not isinstance(p, (bytes, bytearray)) or len(p) != HASH_SIZE:
            raise InclusionProofError("proof hash is not 32 bytes")
        if sn == 0:
            raise InclusionProofError("inclusion proof is too long")
        if fn & 1 or fn == sn:
            r = node_hash(bytes(p), r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, bytes(p))
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise InclusionProofError("inclusion proof is too short")
    return r


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> None:
    size = tree_size(size, InclusionProofError)
    root = hash32(root, "root", InclusionProofError)
    if not hmac.compare_digest(root_from_inclusion(index, size, leaf, proof), root):
        raise InclusionProofError("inclusion proof does not lead to the checkpoint root")


def verify_consistency(old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> None:
    """RFC 9162 §2.1.4.2."""
    E = ConsistencyProofError
    old = tree_int(old, "old size", E)
    new = tree_size(new, E, "new size")
    if not 0 <= old <= new:
        raise E(f"old size {old} is not within 0..{new}")
    old_root = hash32(old_root, "old root", E)
    new_root = hash32(new_root, "new root", E)
    given = _proof_list(proof, MAX_CONSISTENCY_HASHES, "consistency proof is too long", E)
    if any(not isinstance(p, (bytes, bytearray)) or len(p) != HASH_SIZE for p in given):
        raise E("proof hash is not 32 bytes")
    path = [bytes(p) for p in given]
    if old == 0 and not hmac.compare_digest(old_root, EMPTY_ROOT):
        raise E("size-0 root must be SHA-256 of the empty string")
    if old == new:
        if path:
            raise E("proof must be empty for equal sizes")
        if not hmac.compare_digest(old_root, new_root):
            raise E("same size, different roots")
        return
    if old == 0:
        if path:
            raise E("proof from the empty tree must be empty")
        return
    if old & (old - 1) == 0:  # step 1: old is a power of two
        path.insert(0, old_root)
    if not path:
        raise E("consistency proof is empty")
    fn, sn = old - 1, new - 1
    while fn & 1:  # step 3
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise E("consistency proof is too long")
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
        raise E("consistency proof is too short")
    if not (hmac.compare_digest(fr, old_root) and hmac.compare_digest(sr, new_root)):
        raise E("consistency proof does not match the two roots")
