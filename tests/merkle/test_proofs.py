"""Batched inclusion and consistency proofs (tlog.merkle.proofs) and their JSON and CBOR
encoders, from hash files of random trees, against the RFC 9162 recursion (`ref_inclusion`,
`ref_consistency`, `mth`), `TreeView`, `tlog.merkle.verify`, pymerkle, json and cbor2."""
from __future__ import annotations

import base64
import json
import random

import cbor2
import numpy as np
import pytest
from pymerkle import InmemoryTree

from tlog.errors import InvalidInput
from tlog.formats.hashing import EMPTY_ROOT, leaf_hash
from tlog.merkle.proofs import ProofBatch, b64_rows, cbor_map, consistency_levels, inclusion_levels
from tlog.merkle.tree import TreeView, mth, ref_consistency, ref_inclusion
from tlog.merkle.verify import verify_consistency, verify_inclusion

from tests.support.trees import SIZES, filled, leaves_for


@pytest.mark.parametrize("n", SIZES)
def test_inclusion_levels_match_rfc_reference(tmp_path, n):
    leaves = leaves_for(n)
    hf = filled(tmp_path, leaves, seed=n)
    rng = random.Random(n)
    # Read the proofs at the full size and at an older size from the same files.
    for size in {n, max(1, n - rng.randrange(0, n)), 1}:
        view = TreeView(size, hf.read)
        idx = [rng.randrange(size) for _ in range(30)] + [0, size - 1] + list(range(max(0, size - 5), size))
        pb = inclusion_levels(view, hf, np.array(idx))
        want = [ref_inclusion(i, leaves[:size]) for i in idx]
        assert pb.split(text=False) == want
        b64 = [[base64.b64encode(h).decode() for h in p] for p in want]
        assert pb.split(text=True) == b64
        assert json.loads(pb.json()) == b64
        doc = pb.json_document(b'{"tree_size":%d,"proofs":' % size, b"}").tobytes()
        assert doc == b'{"tree_size":%d,"proofs":' % size + pb.json() + b"}"
        assert json.loads(doc) == {"tree_size": size, "proofs": b64}
        assert [json.loads(x) for x in pb.json_items()] == b64
        assert pb.cbor() == cbor2.dumps(want, canonical=True)


def test_inclusion_levels_against_pymerkle_and_verifier(tmp_path):
    n = 700
    rng = random.Random(11)
    data = [rng.randbytes(rng.randrange(0, 40)) for _ in range(n)]
    tree = InmemoryTree(algorithm="sha256")
    for d in data:
        tree.append_entry(d)
    leaves = [leaf_hash(d) for d in data]
    hf = filled(tmp_path, leaves, seed=2)
    for size in (n, 513, 64, 3):
        view = TreeView(size, hf.read)
        assert view.root == tree.get_root(size)
        idx = [rng.randrange(size) for _ in range(25)]
        for i, proof in zip(idx, inclusion_levels(view, hf, np.array(idx)).split(text=False)):
            theirs = [bytes.fromhex(h) for h in tree.prove_inclusion(i + 1, size).serialize()["path"]]
            assert proof == theirs[1:]
            verify_inclusion(i, size, leaves[i], proof, view.root)


def test_inclusion_levels_rejects_bad_indices(tmp_path):
    hf = filled(tmp_path, leaves_for(10))
    view = TreeView(10, hf.read)
    for bad in ([10], [-1], [[1, 2]]):
        with pytest.raises(InvalidInput):
            inclusion_levels(view, hf, np.array(bad))
    assert inclusion_levels(view, hf, np.array([], dtype=np.int64)).split(text=False) == []


def test_encoders_edge_cases():
    empty = ProofBatch(np.empty((0, 3, 32), dtype=np.uint8), None)  # tree of size 1: every proof empty
    assert json.loads(empty.json()) == [[], [], []]
    assert empty.cbor() == cbor2.dumps([[], [], []], canonical=True)
    assert empty.json_items() == [b"[]"] * 3
    rng = np.random.default_rng(3)
    for h in (2, 23, 24, 25, 30):  # CBOR array heads change at 24 items
        nodes = rng.integers(0, 256, (h, 4, 32), dtype=np.uint8)
        mask = np.ones((h, 4), dtype=bool)
        mask[h - 1, 1] = False
        pb = ProofBatch(nodes, mask)
        assert cbor2.loads(pb.cbor()) == pb.split(text=False)
        assert pb.cbor() == cbor2.dumps(pb.split(text=False), canonical=True)
    for h in (1, 5, 23, 24, 25):  # no mask; a mask dropping the same level everywhere; random masks
        nodes = rng.integers(0, 256, (h, 7, 32), dtype=np.uint8)
        same = np.ones((h, 7), dtype=bool)
        same[h // 2] = False
        for mask in (None, same, rng.random((h, 7)) < 0.7, np.zeros((h, 7), dtype=bool)):
            pb = ProofBatch(nodes, mask)
            want = [[nodes[k, j].tobytes() for k in range(h) if mask is None or mask[k, j]] for j in range(7)]
            assert pb.split(text=False) == want
            assert pb.cbor() == cbor2.dumps(want, canonical=True)
    rows = rng.integers(0, 256, (50, 32), dtype=np.uint8)
    assert [bytes(r) for r in b64_rows(rows)] == [base64.b64encode(r.tobytes()) for r in rows]


def test_cbor_document_equals_cbor_map_of_the_parts():
    from tlog.merkle.proofs import cbor_map_parts

    rng = np.random.default_rng(9)
    for h, mask in ((20, None), (24, None), (5, rng.random((5, 9)) < 0.6), (3, np.zeros((3, 9), dtype=bool))):
        pb = ProofBatch(rng.integers(0, 256, (h, 9, 32), dtype=np.uint8), mask)
        for note in ("a checkpoint\n", None):
            items = {"tree_size": cbor2.dumps(77), "checkpoint": cbor2.dumps(note)}
            prefix, suffix = cbor_map_parts(items, "proofs")
            doc = pb.cbor_document(prefix, suffix)
            assert doc.tobytes() == cbor_map({**items, "proofs": pb.cbor()})
            assert cbor2.loads(doc.tobytes()) == {"tree_size": 77, "checkpoint": note, "proofs": pb.split(text=False)}
    empty = ProofBatch(np.empty((4, 0, 32), dtype=np.uint8), None)
    assert empty.cbor_document(b"x", b"y").tobytes() == b"x\x80y"


def test_cbor_map_is_cbor2_canonical():
    note = "origin\n5\nabc=\n\n— sig\n"
    for doc in ({"tree_size": 5, "checkpoint": note, "proofs": [[b"x" * 32]]},
                {"tree_size": 2**40, "checkpoint": None, "proofs": []},
                {"b": 1, "aa": 2, "a": 3, "ccc": [1, 2]}):
        got = cbor_map({k: cbor2.dumps(v, canonical=True) for k, v in doc.items()})
        assert got == cbor2.dumps(doc, canonical=True)


# --- batched consistency proofs -------------------------------------------------------


def test_consistency_levels_match_reference(tmp_path, hash_impl):
    n = 1100
    leaves = leaves_for(n, 4)
    hf = filled(tmp_path, leaves, seed=4)
    rng = random.Random(4)
    pairs = [(o, w) for w in range(0, 34) for o in range(0, w + 1)]
    pairs += [(rng.randrange(0, w + 1), w) for w in (rng.randrange(1, n + 1) for _ in range(400))]
    pairs += [(1, n), (n - 1, n), (n, n), (512, 1024), (511, 1025)]
    pb = consistency_levels(hf, np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]))
    for (old, new), proof in zip(pairs, pb.split(text=False)):
        assert proof == TreeView(new, hf.read).consistency_proof(old), (old, new)
        if new <= 300:
            assert proof == ref_consistency(old, leaves[:new])
        old_root = mth(leaves[:old]) if old else EMPTY_ROOT
        verify_consistency(old, new, old_root, mth(leaves[:new]), proof)
    with pytest.raises(InvalidInput):
        consistency_levels(hf, np.array([5]), np.array([4]))
