"""Batched inclusion verification (tlog.merkle.batchverify) against `tlog.merkle.verify`
proof by proof: it accepts, and rejects, exactly what the reference does."""
from __future__ import annotations

import random

import numpy as np
import pytest

from tlog.errors import InclusionProofError, VerificationError
from tlog.formats.hashing import leaf_hash
from tlog.merkle.batchverify import flatten_proofs, verify_inclusion_batch
from tlog.merkle.tree import memory_view
from tlog.merkle.verify import verify_inclusion

from tests.support.trees import SIZES, leaves_for


def _batch(n: int, b: int, seed: int):
    leaves = leaves_for(n, seed)
    view = memory_view(leaves)
    rng = random.Random(seed)
    idx = [rng.randrange(n) for _ in range(b)]
    if b > 3:
        idx[1] = idx[0]  # the same leaf twice
    return leaves, view, idx, [view.inclusion_proof(i) for i in idx]


@pytest.mark.parametrize("n", SIZES)
def test_verify_batch_accepts_valid_proofs(n, hash_impl):
    leaves, view, idx, proofs = _batch(n, 40, n)
    verify_inclusion_batch(idx, n, [leaves[i] for i in idx], proofs, view.root)
    rows, counts = flatten_proofs(proofs)
    verify_inclusion_batch(np.array(idx), n, np.frombuffer(b"".join(leaves[i] for i in idx), dtype=np.uint8)
                           .reshape(-1, 32), (rows, counts), view.root)


def _reference_failures(idx, n, leaves, proofs, root) -> list[int]:
    bad = []
    for pos, (i, leaf, proof) in enumerate(zip(idx, leaves, proofs)):
        try:
            verify_inclusion(i, n, leaf, proof, root)
        except VerificationError:
            bad.append(pos)
    return bad


@pytest.mark.parametrize("seed", range(40))
def test_verify_batch_rejects_exactly_what_the_reference_rejects(seed, hash_impl):
    rng = random.Random(seed)
    n = rng.choice([2, 3, 5, 16, 17, 100, 257, 1000])
    leaves, view, idx, proofs = _batch(n, rng.randrange(1, 30), seed)
    lv = [leaves[i] for i in idx]
    root = view.root
    proofs = [list(p) for p in proofs]
    for _ in range(rng.randrange(1, 4)):
        pos = rng.randrange(len(idx))
        kind = rng.choice(["flip", "drop", "extra", "index", "leaf", "swap", "root", "size"])
        if kind == "flip" and proofs[pos]:
            k = rng.randrange(len(proofs[pos]))
            proofs[pos][k] = bytes([proofs[pos][k][0] ^ 1]) + proofs[pos][k][1:]
        elif kind == "drop" and proofs[pos]:
            proofs[pos].pop()
        elif kind == "extra":
            proofs[pos].append(b"\x00" * 32)
        elif kind == "index":
            idx[pos] = (idx[pos] + 1) % n
        elif kind == "leaf":
            lv[pos] = leaf_hash(b"forged")
        elif kind == "swap" and len(proofs[pos]) > 1:
            proofs[pos][0], proofs[pos][1] = proofs[pos][1], proofs[pos][0]
        elif kind == "root":
            root = leaf_hash(b"other root")
    want = _reference_failures(idx, n, lv, proofs, root)
    if not want:
        verify_inclusion_batch(idx, n, lv, proofs, root)
        return
    with pytest.raises(InclusionProofError) as e:
        verify_inclusion_batch(idx, n, lv, proofs, root)
    assert e.value.data["failed"] == want


def test_verify_batch_conflicting_claims_and_bad_sizes():
    leaves, view, idx, proofs = _batch(64, 10, 9)
    idx = [5, 4]  # siblings: each proof's first hash is the other's leaf
    proofs = [view.inclusion_proof(5), view.inclusion_proof(4)]
    lv = [leaves[5], leaves[4]]
    verify_inclusion_batch(idx, 64, lv, proofs, view.root)
    lv2 = [leaves[5], leaf_hash(b"x")]  # proof 1's leaf contradicts proof 0's sibling claim
    with pytest.raises(InclusionProofError) as e:
        verify_inclusion_batch(idx, 64, lv2, proofs, view.root)
    assert e.value.data["failed"] == [1]
    with pytest.raises(InclusionProofError):
        verify_inclusion_batch([64], 64, [leaves[0]], [view.inclusion_proof(0)], view.root)
    with pytest.raises(InclusionProofError):
        verify_inclusion_batch([0], 64, [leaves[0]], [[b"short"]], view.root)
    verify_inclusion_batch([], 64, [], [], view.root)
