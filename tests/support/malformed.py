"""Malformed and well-formed proof inputs for the differential tests of the offline
verifiers (single vs batch in Python, Python vs the browser's): hypothesis strategies
that start from a valid proof of a small real tree, or of a huge tree (sizes up to
2^64 - 1, with the root the proof leads to), and break it the ways an attacker or a bug
would: hashes of the wrong length, indices and sizes out of range or of the wrong type,
extra, missing or empty proof hashes, empty roots and leaves, huge numbers.

`verdict` runs a Python verifier and says what it decided, in the form the JavaScript
runner (tests/ui/js/differential.js) answers; `to_json` encodes a case for it."""
from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from hypothesis import strategies as st

from tlog.errors import InclusionProofError, OAPError
from tlog.formats.hashing import EMPTY_ROOT
from tlog.merkle.tree import TreeView, memory_view
from tlog.merkle.verify import root_from_inclusion

from tests.support.trees import leaves_for

SMALL_SIZES = [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33, 100]
HUGE_SIZES = [2**62 - 1, 2**62, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 2, 2**64 - 1]
EDGE_INTS = [-(2**64), -(2**63), -1, 0, 1, 2**31, 2**53, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1,
             2**64, 2**65, 2**100]
WRONG_TYPES: list[Any] = [None, True, False, 1.0, 0.5, "3", [], {}]


@cache
def tree(n: int) -> tuple[list[bytes], TreeView]:
    leaves = leaves_for(n, 4242)
    return leaves, memory_view(leaves)


def bad_hash() -> st.SearchStrategy[bytes]:
    return st.sampled_from([0, 1, 16, 31, 33, 64]).flatmap(lambda k: st.binary(min_size=k, max_size=k))


def any_hash() -> st.SearchStrategy[bytes]:
    return st.binary(min_size=32, max_size=32)


def odd_int(n: int) -> st.SearchStrategy[int]:
    return st.sampled_from(EDGE_INTS) | st.integers(-3, n + 3)


def proof_length(index: int, size: int) -> int:
    """How many hashes RFC 9162 §2.1.3.2 consumes for (index, size): found by trying."""
    for k in range(65):
        try:
            root_from_inclusion(index, size, b"\0" * 32, [b"\1" * 32] * k)
            return k
        except InclusionProofError:
            continue
    raise AssertionError("no proof length fits")


@st.composite
def inclusion_base(draw: st.DrawFn) -> dict[str, Any]:
    """A valid inclusion proof: of a small real tree, or of a huge one (random proof
    hashes, and the root they lead to)."""
    if draw(st.integers(0, 4)) == 0:
        size = draw(st.sampled_from(HUGE_SIZES))
        index = draw(st.sampled_from([0, 1, size // 2, size - 2, size - 1]) | st.integers(0, size - 1))
        proof = [draw(any_hash()) for _ in range(proof_length(index, size))]
        leaf = draw(any_hash())
        return {"index": index, "size": size, "leaf": leaf, "proof": proof,
                "root": root_from_inclusion(index, size, leaf, proof)}
    size = draw(st.sampled_from(SMALL_SIZES))
    leaves, view = tree(size)
    index = draw(st.integers(0, size - 1))
    return {"index": index, "size": size, "leaf": leaves[index], "proof": list(view.inclusion_proof(index)),
            "root": view.root}


MUTATIONS = ["leaf", "root", "proof_hash", "extra", "missing", "empty_proof", "long_proof", "index", "size",
             "size0", "flip", "type", "empty_all", "none"]


def mutate(draw: st.DrawFn, case: dict[str, Any], kinds: list[str]) -> dict[str, Any]:
    case = {**case, "proof": list(case["proof"])}
    n = case["size"] if isinstance(case["size"], int) and not isinstance(case["size"], bool) else 8
    for kind in kinds:
        proof = case["proof"] if isinstance(case["proof"], list) else []
        if kind == "leaf":
            case["leaf"] = draw(bad_hash() | any_hash())
        elif kind == "root":
            case["root"] = draw(bad_hash() | any_hash() | st.just(EMPTY_ROOT))
        elif kind == "proof_hash":
            bad = draw(bad_hash())
            if proof:
                proof[draw(st.integers(0, len(proof) - 1))] = bad
            else:
                proof.append(bad)
            case["proof"] = proof
        elif kind == "extra":
            case["proof"] = proof + draw(st.lists(any_hash(), min_size=1, max_size=3))
        elif kind == "missing" and proof:
            del proof[draw(st.integers(0, len(proof) - 1))]
            case["proof"] = proof
        elif kind == "empty_proof":
            case["proof"] = []
        elif kind == "long_proof":
            case["proof"] = [b"\7" * 32] * draw(st.sampled_from([63, 64, 65, 127, 128, 129, 200]))
        elif kind == "index":
            case["index"] = draw(odd_int(n))
        elif kind == "size":
            case["size"] = draw(odd_int(n))
        elif kind == "size0":
            case["size"] = 0
            case["root"] = draw(st.sampled_from([EMPTY_ROOT, b""]) | any_hash())
        elif kind == "flip" and proof:
            k = draw(st.integers(0, len(proof) - 1))
            if isinstance(proof[k], bytes) and proof[k]:
                proof[k] = bytes([proof[k][0] ^ 1]) + proof[k][1:]
            case["proof"] = proof
        elif kind == "type":
            field = draw(st.sampled_from(["index", "size", "leaf", "root", "proof"]))
            case[field] = draw(st.sampled_from(WRONG_TYPES))
        elif kind == "empty_all":
            case.update(leaf=b"", root=b"", proof=[], size=draw(st.sampled_from([0, 1])), index=0)
    return case


@st.composite
def inclusion_cases(draw: st.DrawFn) -> dict[str, Any]:
    case = draw(inclusion_base())
    return mutate(draw, case, draw(st.lists(st.sampled_from(MUTATIONS), max_size=3)))


@st.composite
def consistency_cases(draw: st.DrawFn) -> dict[str, Any]:
    new = draw(st.sampled_from([*SMALL_SIZES, 0]))
    old = draw(st.integers(0, new))
    _leaves, view = tree(max(new, 1))
    new_root = view.root if new else EMPTY_ROOT
    old_root = tree(old)[1].root if old else EMPTY_ROOT
    proof = list(view.consistency_proof(old)) if 0 < old < new else []
    case: dict[str, Any] = {"old": old, "new": new, "old_root": old_root, "new_root": new_root, "proof": proof}
    for kind in draw(st.lists(st.sampled_from(["old", "new", "old_root", "new_root", "proof_hash", "extra", "missing",
                                               "long", "type", "zero", "none"]), max_size=3)):
        proof = case["proof"] if isinstance(case["proof"], list) else []
        if kind in ("old", "new"):
            case[kind] = draw(odd_int(new))
        elif kind in ("old_root", "new_root"):
            case[kind] = draw(bad_hash() | any_hash() | st.just(EMPTY_ROOT))
        elif kind == "proof_hash":
            case["proof"] = [*proof[:-1], draw(bad_hash())]
        elif kind == "extra":
            case["proof"] = [*proof, draw(any_hash())]
        elif kind == "missing":
            case["proof"] = proof[1:]
        elif kind == "long":
            case["proof"] = [b"\7" * 32] * draw(st.sampled_from([127, 128, 129, 300]))
        elif kind == "type":
            field = draw(st.sampled_from(["old", "new", "old_root", "new_root", "proof"]))
            case[field] = draw(st.sampled_from(WRONG_TYPES))
        elif kind == "zero":
            case.update(old=0, new=draw(st.sampled_from([0, new])), old_root=draw(st.sampled_from([EMPTY_ROOT, b""])
                                                                                  | any_hash()), proof=[])
    return case


@st.composite
def batch_cases(draw: st.DrawFn) -> dict[str, Any]:
    """Several proofs of one tree, each possibly broken, and possibly a broken tree."""
    n = draw(st.sampled_from(SMALL_SIZES))
    leaves, view = tree(n)
    items = []
    for _ in range(draw(st.integers(0, 8))):
        i = draw(st.integers(0, n - 1))
        one = {"index": i, "size": n, "leaf": leaves[i], "proof": list(view.inclusion_proof(i)), "root": view.root}
        kinds = draw(st.lists(st.sampled_from(["leaf", "proof_hash", "extra", "missing", "empty_proof", "long_proof",
                                               "index", "flip", "none", "none", "none"]), max_size=2))
        if draw(st.booleans()) and draw(st.booleans()):
            kinds.append("type")
        one = mutate(draw, one, kinds)
        if "type" in kinds:  # per-proof inputs only: the tree is the batch's
            one["size"], one["root"] = n, view.root
        items.append(one)
    size: Any = n
    root: Any = view.root
    tree_fault = draw(st.sampled_from(["none", "none", "none", "size", "root", "size0", "huge"]))
    if tree_fault == "size":
        size = draw(odd_int(n) | st.sampled_from(WRONG_TYPES))
    elif tree_fault == "root":
        root = draw(bad_hash() | st.sampled_from([None, "root"]))
    elif tree_fault == "size0":
        size, root = 0, EMPTY_ROOT
    elif tree_fault == "huge":
        size = draw(st.sampled_from(HUGE_SIZES))
    return {"indices": [x["index"] for x in items], "size": size, "leaves": [x["leaf"] for x in items],
            "proofs": [x["proof"] for x in items], "root": root}


# --- verdicts, and the JSON the JavaScript runner reads -------------------------------------


def verdict(fn: Callable[[], object]) -> dict[str, Any]:
    """{"ok": True} or {"ok": False, "error": <class>, "message": <reason>}; an exception
    that is not the project's error type is a crash, and is raised."""
    try:
        fn()
    except OAPError as e:
        return {"ok": False, "error": type(e).__name__, "message": e.message}
    return {"ok": True}


def to_json(value: Any) -> Any:
    """A Python test value for tests/ui/js/differential.js: ints as {"$int": decimal}
    (BigInt there), bytes as {"$hex": hex} (Uint8Array), lists and dicts element-wise;
    None, bools, floats and strings as JSON has them."""
    if isinstance(value, bool) or value is None or isinstance(value, (float, str)):
        return value
    if isinstance(value, int):
        return {"$int": str(value)}
    if isinstance(value, (bytes, bytearray)):
        return {"$hex": bytes(value).hex()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    raise TypeError(type(value))


def examples(strategy: st.SearchStrategy[Any], count: int) -> list[Any]:
    """About `count` draws of a strategy, the same ones on every run (derandomized): the
    cases one JavaScript run checks against the Python verdicts."""
    from hypothesis import HealthCheck, given, settings

    out: list[Any] = []

    @settings(max_examples=count, database=None, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(case: Any) -> None:
        out.append(case)

    collect()
    return out
