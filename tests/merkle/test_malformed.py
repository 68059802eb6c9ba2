"""The offline verifiers refuse malformed input with the project's error type, never a
crash or a silent accept, and the batch verifier accepts exactly what the single one
accepts (docs/architecture.md §3.2): hypothesis-made cases with hashes of the wrong
length, indices and sizes out of range or of the wrong type, extra, missing and empty
proof hashes, empty inputs and huge numbers. The same cases are run in the browser's
verifiers by tests/ui/test_differential.py."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from tlog.errors import ConsistencyProofError, InclusionProofError, OAPError
from tlog.formats.hashing import EMPTY_ROOT, leaf_hash
from tlog.merkle.batchverify import flatten_proofs, verify_inclusion_batch
from tlog.merkle.verify import root_from_inclusion, verify_consistency, verify_inclusion

from tests.support.malformed import batch_cases, consistency_cases, inclusion_cases, proof_length, tree, verdict

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- what an independent check found -----------------------------------------------------------


def test_a_size_1_proof_with_an_empty_leaf_and_an_empty_root_is_refused():
    with pytest.raises(InclusionProofError, match="leaf hash is not 32 bytes"):
        verify_inclusion(0, 1, b"", [], b"\0" * 32)
    with pytest.raises(InclusionProofError, match="root is not 32 bytes"):
        verify_inclusion(0, 1, b"", [], b"")
    with pytest.raises(InclusionProofError, match="leaf hash is not 32 bytes"):
        root_from_inclusion(0, 1, b"", [])
    with pytest.raises(InclusionProofError):
        verify_inclusion_batch([0], 1, [b""], [[]], b"")


def test_an_index_of_2_64_minus_1_is_refused_not_a_crash():
    leaves, view = tree(8)
    for bad in (2**64 - 1, 2**64, 2**63, -1, 2**100):
        with pytest.raises(InclusionProofError) as e:
            verify_inclusion_batch([0, bad], 8, [leaves[0], leaves[1]], [view.inclusion_proof(0),
                                                                         view.inclusion_proof(1)], view.root)
        assert e.value.data["failed"] == [1] and f"index {bad} is outside a tree of size 8" in e.value.message
    with pytest.raises(InclusionProofError) as e:
        verify_inclusion_batch(np.array([2**64 - 1], dtype=np.uint64), 8, [leaves[0]], [view.inclusion_proof(0)],
                               view.root)
    assert e.value.data["failed"] == [0]


def test_sizes_beyond_uint64_and_wrong_types_are_refused():
    leaves, view = tree(4)
    with pytest.raises(InclusionProofError, match=r"tree size 18446744073709551616 is outside 0..2\^64-1"):
        verify_inclusion(0, 2**64, leaves[0], view.inclusion_proof(0), view.root)
    for index in (1.0, True, "0", None):
        with pytest.raises(InclusionProofError, match="index must be an integer"):
            verify_inclusion(index, 4, leaves[0], view.inclusion_proof(0), view.root)  # type: ignore[arg-type]
    with pytest.raises(InclusionProofError, match="proof must be a list of hashes"):
        verify_inclusion(0, 4, leaves[0], b"".join(view.inclusion_proof(0)), view.root)  # type: ignore[arg-type]
    with pytest.raises(InclusionProofError, match="proof hash is not 32 bytes"):
        verify_inclusion(0, 4, leaves[0], ["x" * 32, view.inclusion_proof(0)[1]], view.root)  # type: ignore[list-item]
    # a float index used to be truncated by numpy and the proof accepted
    with pytest.raises(InclusionProofError) as e:
        verify_inclusion_batch([1.0], 4, [leaves[1]], [view.inclusion_proof(1)], view.root)  # type: ignore[list-item]
    assert e.value.data["failed"] == [0]


def test_the_empty_tree_has_one_root():
    other = leaf_hash(b"not empty")
    for old_root, new_root in ((other, other), (b"", b""), (EMPTY_ROOT, other)):
        with pytest.raises(ConsistencyProofError):
            verify_consistency(0, 0, old_root, new_root, [])
    verify_consistency(0, 0, EMPTY_ROOT, EMPTY_ROOT, [])
    with pytest.raises(ConsistencyProofError, match="size-0 root"):
        verify_consistency(0, 5, other, tree(5)[1].root, [])
    with pytest.raises(ConsistencyProofError, match="new root is not 32 bytes"):
        verify_consistency(0, 5, EMPTY_ROOT, b"", [])
    with pytest.raises(ConsistencyProofError, match="old root is not 32 bytes"):
        verify_consistency(3, 3, b"", b"", [])


def test_a_huge_valid_tree_verifies_in_both():
    """Sizes up to 2^64 - 1 are valid (RFC 9162 §4 uint64): both verifiers accept a proof
    whose root is the one it leads to, the batch through its proof-by-proof path."""
    size = 2**64 - 1
    assert proof_length(0, size) == 64
    for index in (0, 2**63, 2**64 - 2):
        length = proof_length(index, size)
        proof = [bytes([k]) * 32 for k in range(length)]
        leaf = leaf_hash(b"x")
        root = root_from_inclusion(index, size, leaf, proof)
        verify_inclusion(index, size, leaf, proof, root)
        verify_inclusion_batch([index, index], size, [leaf, leaf], [proof, proof], root)
        with pytest.raises(InclusionProofError):
            verify_inclusion_batch([index, index], size, [leaf, leaf], [proof, proof[:-1]], root)


def test_inputs_that_describe_no_proofs_are_refused_with_the_error_type():
    leaves, view = tree(4)
    p = view.inclusion_proof(0)
    for args in (([0, 1], 4, [leaves[0]], [p], view.root),
                 ([0], 4, np.zeros((1, 31), dtype=np.uint8), [p], view.root),
                 ([0], 4, [leaves[0]], (np.zeros((2, 32), dtype=np.uint8), np.array([3])), view.root),
                 ([0], 4, [leaves[0]], (np.zeros((2, 32), dtype=np.uint8), np.array([-1])), view.root),
                 (0, 4, [leaves[0]], [p], view.root),
                 ([], "4", [], [], view.root),
                 ([], 4, [], [], b"")):
        with pytest.raises(InclusionProofError):
            verify_inclusion_batch(*args)  # type: ignore[arg-type]
    verify_inclusion_batch([], 4, [], [], view.root)  # nothing to check, on a well-formed tree


# --- differential: single vs batch, over hypothesis-made cases ---------------------------------


def _single(case: dict) -> dict:
    return verdict(lambda: verify_inclusion(case["index"], case["size"], case["leaf"], case["proof"], case["root"]))


@SETTINGS
@given(inclusion_cases())
def test_single_verifier_refuses_with_the_error_type_or_accepts_a_valid_proof(case):
    got = _single(case)  # raises on anything but OAPError
    if got["ok"]:  # accepted: then the inputs were well-formed and the root is the one the proof leads to
        assert isinstance(case["size"], int) and 0 <= case["index"] < case["size"] <= 2**64 - 1
        assert len(case["leaf"]) == len(case["root"]) == 32 and all(len(p) == 32 for p in case["proof"])
        assert root_from_inclusion(case["index"], case["size"], case["leaf"], case["proof"]) == case["root"]
    got_batch = verdict(lambda: verify_inclusion_batch([case["index"]], case["size"], [case["leaf"]], [case["proof"]],
                                                       case["root"]))
    assert got_batch["ok"] == got["ok"], (case, got, got_batch)
    if not got["ok"]:
        assert got_batch["message"].endswith(got["message"]), (got, got_batch)


def _batch_forms(case: dict):
    """The batch's inputs as lists, and in each array form they are well-formed enough for."""
    yield case["indices"], case["leaves"], case["proofs"]
    if all(isinstance(h, bytes) and len(h) == 32 for h in case["leaves"]):
        arr = np.frombuffer(b"".join(case["leaves"]), dtype=np.uint8).reshape(-1, 32)
        yield case["indices"], arr, case["proofs"]
        try:
            flat = flatten_proofs(case["proofs"])
        except InclusionProofError:
            return
        yield case["indices"], arr, flat
        if all(type(i) is int and -(2**63) <= i < 2**63 for i in case["indices"]):
            yield np.array(case["indices"], dtype=np.int64), arr, flat


@SETTINGS
@given(batch_cases())
def test_the_batch_verifier_accepts_exactly_what_the_single_one_accepts(case):
    singles = [_single({"index": i, "size": case["size"], "leaf": lf, "proof": p, "root": case["root"]})
               for i, lf, p in zip(case["indices"], case["leaves"], case["proofs"])]
    want = [k for k, v in enumerate(singles) if not v["ok"]]
    tree_bad = verdict(lambda: verify_inclusion(0, case["size"], b"\0" * 32, [], case["root"]))
    tree_bad_reason = tree_bad.get("message", "") if tree_bad.get("message", "").startswith(("tree size", "root")) \
        else None
    for indices, leaves, proofs in _batch_forms(case):
        try:
            verify_inclusion_batch(indices, case["size"], leaves, proofs, case["root"])
        except InclusionProofError as e:
            if tree_bad_reason is not None:  # a bad tree: refused whole, even with no proofs
                assert e.message == tree_bad_reason and e.data["failed"] == list(range(len(singles)))
                continue
            assert e.data["failed"] == want, (case, singles)
            assert e.message.endswith(singles[want[0]]["message"]), (e.message, singles)
        except OAPError as e:  # pragma: no cover - the assertion says what
            raise AssertionError(f"batch raised {type(e).__name__}, not InclusionProofError") from e
        else:
            assert tree_bad_reason is None and not want, (case, singles)


@SETTINGS
@given(consistency_cases())
def test_consistency_verifier_refuses_with_the_error_type(case):
    got = verdict(lambda: verify_consistency(case["old"], case["new"], case["old_root"], case["new_root"],
                                             case["proof"]))
    if got["ok"]:
        assert 0 <= case["old"] <= case["new"] <= 2**64 - 1
        assert len(case["old_root"]) == len(case["new_root"]) == 32
        if case["old"] == 0:
            assert case["old_root"] == EMPTY_ROOT
    else:
        assert got["error"] == "ConsistencyProofError", got
