"""Subtree consistency proofs (tlog.merkle.subtrees) against transparency-dev/merkle's
language-neutral vectors (testdata/subtreeconsistency: 12 valid proofs and 106 corrupted
ones, from an implementation independent of ours), and built proofs against the verifier."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tlog.errors import ConsistencyProofError
from tlog.formats.hashing import leaf_hash
from tlog.merkle.subtrees import subtree_consistency_proof, valid_subtree, verify_subtree_consistency
from tlog.merkle.tree import TreeView, build_levels

VECTORS = json.loads((Path(__file__).parent / "vectors/subtree_consistency.json").read_text())["vectors"]


def _b(s: str | None) -> bytes:
    return base64.b64decode(s) if s else b""


@pytest.mark.parametrize("v", VECTORS, ids=[v["file"] for v in VECTORS])
def test_transparency_dev_vectors(v):
    args = (v["start"], v["end"], v["size"], [_b(p) for p in v["proof"] or []], _b(v["root1"]), _b(v["root2"]))
    if v["wantErr"]:
        with pytest.raises(ConsistencyProofError):
            verify_subtree_consistency(*args)
    else:
        verify_subtree_consistency(*args)


def test_the_vectors_hold_positive_and_negative_cases():
    assert sum(not v["wantErr"] for v in VECTORS) >= 10 and sum(v["wantErr"] for v in VECTORS) >= 100


def test_every_package_subtree_of_every_size_up_to_1030():
    """The subtrees a mirror checks: [256 i, min(256 (i + 1), end)) in trees of every size."""
    levels = build_levels([leaf_hash(b"%d" % i) for i in range(1030)])

    def mth(lo: int, hi: int) -> bytes:
        level = (hi - lo - 1).bit_length()
        return TreeView(hi, lambda k, j: levels[k][j]).node(level, lo >> level)

    for n in list(range(1, 40)) + list(range(250, 270)) + list(range(500, 530)) + [767, 768, 769, 1024, 1030]:
        for sub in range(0, n, 256):
            for end in {min(n, sub + 256), min(n, sub + 1), min(n, sub + 100)}:
                assert valid_subtree(sub, end)
                proof = subtree_consistency_proof(sub, end, n, mth)
                verify_subtree_consistency(sub, end, n, proof, mth(sub, end), mth(0, n))
                if proof:
                    with pytest.raises(ConsistencyProofError):
                        verify_subtree_consistency(sub, end, n, proof[:-1], mth(sub, end), mth(0, n))
