"""RFC 9162 trees, proofs and verifiers against the RFC 6962 vectors of transparency-dev/merkle (V11), the
naive RFC recursion and pymerkle (an independent implementation)."""
from __future__ import annotations

import base64
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymerkle import InmemoryTree

from tlog.errors import ConsistencyProofError, InclusionProofError
from tlog.formats.hashing import EMPTY_ROOT, leaf_hash
from tlog.merkle.tree import StreamingRoot, memory_view, mth, ref_consistency, ref_inclusion
from tlog.merkle.verify import verify_consistency, verify_inclusion

V11_LEAVES = [bytes.fromhex(h) for h in
              ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"]]
V11_ROOTS = """e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d
fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125
aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77
d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7
4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4
76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef
ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c
5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328""".split()
V11_PROOF_0_8 = ["lqKW0iTyhcZ77pPDD4owkVfw2qNdxbh+QQt4YwoJz8c=", "Xwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=",
                 "a0eq8p7jwq+a+Im8H7klTavTEXfxYjLdaqsDXKOb9uQ="]


def test_v11_roots_for_sizes_0_to_8():
    hashes = [leaf_hash(x) for x in V11_LEAVES]
    for n in range(9):
        assert memory_view(hashes[:n]).root.hex() == V11_ROOTS[n]
    assert memory_view([]).root == EMPTY_ROOT


def test_v11_inclusion_and_consistency_1_to_8():
    hashes = [leaf_hash(x) for x in V11_LEAVES]
    v = memory_view(hashes)
    want = [base64.b64decode(x) for x in V11_PROOF_0_8]
    assert v.inclusion_proof(0) == want
    assert v.consistency_proof(1) == want
    verify_inclusion(0, 8, hashes[0], want, v.root)
    verify_consistency(1, 8, hashes[0], v.root, want)


def test_hello_world_leaf():
    assert base64.b64encode(leaf_hash(b"hello world")).decode() == "TszzRgjTG6xce+z2AG31kAXYKBgQVtCSCE40HmuwBb0="


def _sizes() -> list[int]:
    out = {0, 1, 2, 3}
    for k in range(2, 11):
        out |= {2**k - 1, 2**k, 2**k + 1}
    rng = random.Random(7)
    out |= {rng.randrange(2, 1500) for _ in range(8)}
    return sorted(out)


def _random_log(n: int) -> tuple[random.Random, list[bytes], InmemoryTree]:
    """n random entries (seeded by n) and pymerkle's tree of them."""
    rng = random.Random(n)
    data = [rng.randbytes(rng.randrange(0, 40)) for _ in range(n)]
    tree = InmemoryTree(algorithm="sha256")
    for d in data:
        tree.append_entry(d)
    return rng, data, tree


@pytest.mark.parametrize("n", _sizes())
def test_a_streamed_root_in_any_chunks_is_pymerkles_at_every_size(n: int):
    """StreamingRoot, fed the leaves in random chunks, has pymerkle's root after each chunk."""
    import numpy as np

    rng, data, tree = _random_log(n)
    hashes = np.frombuffer(b"".join(leaf_hash(d) for d in data), dtype=np.uint8).reshape(-1, 32)
    s = StreamingRoot()
    assert s.root() == EMPTY_ROOT
    i = 0
    while i < n:
        j = min(n, i + rng.choice([1, 2, 3, 7, 64, 100, 1024]))
        s.add(hashes[i:j])
        assert (s.size, s.root()) == (j, tree.get_root(j)), (i, j)
        i = j


@pytest.mark.parametrize("n", _sizes())
def test_against_pymerkle(n: int):
    rng, data, tree = _random_log(n)
    hashes = [leaf_hash(d) for d in data]
    v = memory_view(hashes)
    assert v.root == (tree.get_root(n) if n else EMPTY_ROOT)
    if n == 0:
        return
    for m in [*rng.sample(range(n), min(n, 25)), 0, n - 1]:
        ours = v.inclusion_proof(m)
        theirs = [bytes.fromhex(h) for h in tree.prove_inclusion(m + 1, n).serialize()["path"]]
        assert theirs[0] == hashes[m]  # pymerkle's path starts with the leaf itself
        assert ours == theirs[1:]
        verify_inclusion(m, n, hashes[m], ours, v.root)
    for old in [*rng.sample(range(n + 1), min(n + 1, 25)), 0, 1, n]:
        proof = v.consistency_proof(old)
        assert proof == ref_consistency(old, hashes)
        old_root = tree.get_root(old) if old else EMPTY_ROOT
        verify_consistency(old, n, old_root, v.root, proof)


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=1, max_value=300), st.data())
def test_view_matches_rfc_recursion(n, data):
    hashes = [leaf_hash(i.to_bytes(4, "big")) for i in range(n)]
    v = memory_view(hashes)
    assert v.root == mth(hashes)
    m = data.draw(st.integers(0, n - 1))
    assert v.inclusion_proof(m) == ref_inclusion(m, hashes)
    old = data.draw(st.integers(0, n))
    assert v.consistency_proof(old) == ref_consistency(old, hashes)


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=2, max_value=200), st.data())
def test_verifiers_reject_tampering(n, data):
    hashes = [leaf_hash(i.to_bytes(4, "big")) for i in range(n)]
    v = memory_view(hashes)
    root = v.root
    m = data.draw(st.integers(0, n - 1))
    proof = v.inclusion_proof(m)
    bad = data.draw(st.sampled_from(["flip", "drop", "extra", "index", "size", "leaf"]))
    if bad == "flip" and proof:
        i = data.draw(st.integers(0, len(proof) - 1))
        proof = [*proof[:i], bytes([proof[i][0] ^ 1]) + proof[i][1:], *proof[i + 1:]]
    elif bad == "drop" and proof:
        proof = proof[:-1]
    elif bad == "extra":
        proof = [*proof, b"\x00" * 32]
    elif bad == "index":
        m = (m + 1) % n
    elif bad == "size":  # the same proof against the next tree's root
        root = mth([*hashes, leaf_hash(b"next")])
        n = n + 1
    else:
        hashes = [*hashes[:m], leaf_hash(b"other"), *hashes[m + 1:]]
    with pytest.raises(InclusionProofError):
        verify_inclusion(m, n, hashes[m], proof, root)


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=2, max_value=200), st.data())
def test_consistency_verifier_rejects_tampering(n, data):
    hashes = [leaf_hash(i.to_bytes(4, "big")) for i in range(n)]
    v = memory_view(hashes)
    old = data.draw(st.integers(1, n - 1))
    proof = v.consistency_proof(old)
    old_root = mth(hashes[:old])
    verify_consistency(old, n, old_root, v.root, proof)
    i = data.draw(st.integers(0, len(proof) - 1))
    tampered = [*proof[:i], bytes([proof[i][0] ^ 128]) + proof[i][1:], *proof[i + 1:]]
    with pytest.raises(ConsistencyProofError):
        verify_consistency(old, n, old_root, v.root, tampered)
    with pytest.raises(ConsistencyProofError):
        verify_consistency(old, n, leaf_hash(b"forged"), v.root, proof)
    with pytest.raises(ConsistencyProofError):
        verify_consistency(old, n, old_root, v.root, proof[:-1])


def test_consistency_edge_cases():
    with pytest.raises(ConsistencyProofError):
        verify_consistency(3, 3, b"\x00" * 32, b"\x01" * 32, [])
    with pytest.raises(ConsistencyProofError):
        verify_consistency(0, 3, EMPTY_ROOT, b"\x01" * 32, [b"\x00" * 32])
    with pytest.raises(ConsistencyProofError):
        verify_consistency(4, 3, EMPTY_ROOT, EMPTY_ROOT, [])
    verify_consistency(0, 5, EMPTY_ROOT, b"\x01" * 32, [])
    with pytest.raises(InclusionProofError):
        verify_inclusion(0, 0, b"\x00" * 32, [], EMPTY_ROOT)
