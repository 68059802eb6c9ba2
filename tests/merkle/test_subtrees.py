"""Subtree consistency proofs (draft-ietf-plants-merkle-tree-certs §4.4, as C2SP tlog-witness
`sign-subtree` uses them): the draft's accumulated test vectors, and every proof verifying
while every mutation of it fails."""
from __future__ import annotations

import hashlib
from functools import cache

import pytest

from tlog.errors import ConsistencyProofError
from tlog.formats.hashing import EMPTY_ROOT, leaf_hash, node_hash
from tlog.merkle.subtrees import subtree_consistency_proof, valid_subtree, verify_subtree_consistency

# The draft's test vectors: d[i] = the single byte i, SHA-256 (RFC 9162 hashing).
D = [bytes([i]) for i in range(131)]


@cache
def mth(lo: int, hi: int) -> bytes:
    if hi == lo:
        return EMPTY_ROOT
    if hi - lo == 1:
        return leaf_hash(D[lo])
    k = 1 << (hi - lo - 1).bit_length() - 1
    return node_hash(mth(lo, lo + k), mth(lo + k, hi))


def test_valid_subtree_definition():
    assert valid_subtree(0, 0) and valid_subtree(5, 5) and valid_subtree(0, 7) and valid_subtree(8, 13)
    assert valid_subtree(4, 8) and not valid_subtree(4, 9) and not valid_subtree(2, 5) and not valid_subtree(3, 2)
    assert valid_subtree(0, 2**63 + 1) and not valid_subtree(1, 2**63 + 1)


def test_accumulated_subtree_hashes_vector():
    h = hashlib.sha256()
    for end in range(131):
        for start in range(end + 1):
            if valid_subtree(start, end):
                h.update(f"[{start}, {end}) {mth(start, end).hex()}\n".encode())
    assert h.hexdigest() == "b82806ad4265bb151c1119c0f4db437bb4d1a1f887b3a7fba1cd4ebf552e3e81"


def test_accumulated_subtree_consistency_vector_and_every_proof_verifies():
    h = hashlib.sha256()
    for n in range(131):
        for end in range(n + 1):
            for start in range(end + 1):
                if not valid_subtree(start, end):
                    continue
                proof = subtree_consistency_proof(start, end, n, mth)
                h.update((f"[{start}, {end}) {n}" + "".join(" " + p.hex() for p in proof) + "\n").encode())
                verify_subtree_consistency(start, end, n, proof, mth(start, end), mth(0, n))
    assert h.hexdigest() == "10fa99b37bf9bf9ffa26b412fbd98bd75363256d0b75d61bc4538b9c9c5a0a74"


@pytest.mark.parametrize(("start", "end", "n"), [(4, 8, 14), (8, 13, 14), (0, 5, 7), (6, 7, 7), (0, 14, 14),
                                                 (16, 24, 30), (12, 13, 130)])
def test_every_mutation_fails(start, end, n):
    """(A wrong n alone can go unnoticed, as with RFC 9162 proofs: the signed checkpoint binds
    the root to its size, so the witness checks the proof against the checkpoint's pair.)"""
    proof = subtree_consistency_proof(start, end, n, mth)
    node, root = mth(start, end), mth(0, n)
    verify_subtree_consistency(start, end, n, proof, node, root)
    bad = []
    for i in range(len(proof)):
        p = list(proof)
        p[i] = bytes([p[i][0] ^ 1]) + p[i][1:]
        bad.append((start, end, n, p, node, root))
        bad.append((start, end, n, proof[:i] + proof[i + 1:], node, root))
    bad += [(start, end, n, [*proof, root], node, root), (start, end, n, proof, root if root != node else EMPTY_ROOT, root),
            (start, end, n, proof, node, node if root != node else EMPTY_ROOT),
            (start, end + 1, n, proof, node, root), (start + 1, end, n, proof, node, root),
            (start, end, end - 1, proof, node, root)]
    for args in bad:
        with pytest.raises(ConsistencyProofError):
            verify_subtree_consistency(*args)


def test_the_spec_example_proofs():
    """draft §4.4.2: [4, 8) in 14 is {MTH(D[0:4]), MTH(D[8:14])}; [8, 13) in 14 is
    {MTH(d12), MTH(d13), MTH(D[8:12]), MTH(D[0:8])}."""
    assert subtree_consistency_proof(4, 8, 14, mth) == [mth(0, 4), mth(8, 14)]
    assert subtree_consistency_proof(8, 13, 14, mth) == [mth(12, 13), mth(13, 14), mth(8, 12), mth(0, 8)]
    with pytest.raises(ConsistencyProofError):
        verify_subtree_consistency(3, 3, 5, [], mth(0, 1), mth(0, 5))
    verify_subtree_consistency(3, 3, 5, [], EMPTY_ROOT, mth(0, 5))
