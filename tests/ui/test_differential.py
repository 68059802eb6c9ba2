"""The browser's verifiers (tlog/ui/static/lib) decide every malformed or well-formed case
exactly as the Python ones do: the same accept, or the same error type and reason.
The cases are hypothesis-made (tests/support/malformed.py): inclusion and consistency
proofs with hashes of the wrong length, indices and sizes out of range or of the wrong
type, extra, missing and empty proof hashes, huge trees; and .tlog-proof bundles with
broken lines, signed checkpoints of size 0 with a bogus root, leaves of the wrong length.
They run in Node when it is installed, else in Chromium (tests/ui/jsrun.py)."""
from __future__ import annotations

import base64
from functools import cache
from typing import Any

from hypothesis import strategies as st

from tlog.client.verifier import TrustPolicy
from tlog.formats.checkpoint import Checkpoint
from tlog.formats.encoding import b64enc
from tlog.formats.hashing import EMPTY_ROOT, leaf_hash
from tlog.formats.keys import Signer
from tlog.formats.note import sign_note
from tlog.formats.proofbundle import parse_proof_bundle
from tlog.merkle.tree import memory_view
from tlog.merkle.verify import verify_consistency, verify_inclusion

from tests.support.malformed import EDGE_INTS, consistency_cases, examples, inclusion_cases, to_json, verdict
from tests.ui.jsrun import run_js

ORIGIN = "diff.test/log"
SEED = bytes(range(32))


@cache
def log(n: int) -> tuple[list[bytes], Any, str]:
    """A log of n entries: its entries, tree and signed checkpoint (size 0: any root given)."""
    entries = [b"entry %d" % i for i in range(n)]
    view = memory_view([leaf_hash(e) for e in entries]) if n else None
    root = view.root if view is not None else EMPTY_ROOT
    note = sign_note(Checkpoint(ORIGIN, n, root).to_text(), [Signer(ORIGIN, SEED)])
    return entries, view, note


def policy_text() -> str:
    return f"log {Signer(ORIGIN, SEED).vkey}\nquorum none\n"


@st.composite
def bundle_cases(draw: st.DrawFn) -> dict[str, Any]:
    """A .tlog-proof of a real small log, then broken at the text level, or verified with
    a leaf or entry of the wrong shape, or against a bogus size-0 checkpoint."""
    n = draw(st.sampled_from([1, 2, 3, 5, 8, 13]))
    entries, view, note = log(n)
    i = draw(st.integers(0, n - 1))
    lines = ["c2sp.org/tlog-proof@v1", "extra " + b64enc(entries[i]), f"index {i}",
             *[b64enc(h) for h in view.inclusion_proof(i)]]
    case: dict[str, Any] = {"kind": "bundle_verify", "policy": policy_text()}
    kind = draw(st.sampled_from(["none", "index", "hash_len", "extra_hash", "drop_hash", "no_extra", "empty_extra",
                                 "size0", "leaf", "entry", "index_text", "many_hashes"]))
    if kind == "index":
        lines[2] = f"index {draw(st.sampled_from([x for x in EDGE_INTS if x >= 0]) | st.integers(0, n + 2))}"
    elif kind == "index_text":
        lines[2] = draw(st.sampled_from(["index -1", "index 01", "index 1.0", "index ", "index 99999999999999999999",
                                         "index 18446744073709551615", "index 0x1", "index  1"]))
    elif kind == "hash_len":
        k = draw(st.sampled_from([0, 1, 31, 33, 64]))
        pos = draw(st.integers(3, len(lines))) if len(lines) > 3 else 3
        lines.insert(pos, base64.b64encode(bytes(k)).decode() if k else "=")
    elif kind == "extra_hash":
        lines.append(b64enc(bytes(32)))
    elif kind == "drop_hash" and len(lines) > 3:
        lines.pop()
    elif kind == "no_extra":
        del lines[1]
        case["leaf"] = leaf_hash(entries[i]) if draw(st.booleans()) else None
    elif kind == "empty_extra":
        lines[1] = "extra "
    elif kind == "many_hashes":
        lines += [b64enc(bytes(32))] * draw(st.sampled_from([60, 64, 70]))
    elif kind == "leaf":
        case["leaf"] = draw(st.sampled_from([b"", b"\0" * 31, b"\0" * 33, leaf_hash(entries[i])]))
    elif kind == "entry":
        case["entry"] = draw(st.sampled_from([entries[i], b"other", b""]))
    if kind == "size0":  # a log that signed an empty tree with a root that is not SHA-256("")
        bogus = draw(st.sampled_from([EMPTY_ROOT, leaf_hash(b"x")]))
        note = sign_note(Checkpoint(ORIGIN, 0, bogus).to_text(), [Signer(ORIGIN, SEED)])
        lines[2] = "index 0"
        del lines[3:]
    case["bundle"] = "\n".join(lines) + "\n\n" + note
    return case


def _python(case: dict[str, Any]) -> dict[str, Any]:
    kind = case["kind"]
    if kind == "inclusion":
        return verdict(lambda: verify_inclusion(case["index"], case["size"], case["leaf"], case["proof"], case["root"]))
    if kind == "consistency":
        return verdict(lambda: verify_consistency(case["old"], case["new"], case["old_root"], case["new_root"],
                                                  case["proof"]))
    if kind == "bundle_parse":
        return verdict(lambda: parse_proof_bundle(case["text"]))
    if kind == "bundle_verify":
        policy = TrustPolicy.from_text(case["policy"])
        out: dict[str, Any] = {}

        def run() -> None:
            v = policy.verify_bundle(case["bundle"], entry=case.get("entry"), leaf=case.get("leaf"))
            out.update(index=v.index, leaf_hash=v.leaf_hash)
        got = verdict(run)
        if got["ok"]:
            got["result"] = to_json(out)
        return got
    raise AssertionError(kind)


def _integral_float(v: Any) -> bool:
    """A float such as 1.0 is a distinct type in Python and the number 1 in JavaScript (JSON
    has one number type): such cases have no JavaScript twin and are compared in Python only."""
    if isinstance(v, float):
        return v.is_integer()
    if isinstance(v, (list, tuple)):
        return any(map(_integral_float, v))
    if isinstance(v, dict):
        return any(map(_integral_float, v.values()))
    return False


def compare(cases: list[dict[str, Any]]) -> int:
    """Run every case in Python and in JavaScript; assert the same verdicts. Returns how
    many were refused (so a test can check it exercised refusals too)."""
    cases = [c for c in cases if not _integral_float(c)]
    want = [_python(c) for c in cases]
    got = run_js([to_json(c) for c in cases])
    assert len(got) == len(cases)
    diffs = [(c, w, g) for c, w, g in zip(cases, want, got)
             if w["ok"] != g["ok"] or (not w["ok"] and (w["error"], w["message"]) != (g["error"], g["message"]))
             or (w["ok"] and "result" in w and w["result"] != g.get("result"))]
    crashes = [g for g in got if g.get("error") == "CRASH"]
    assert not crashes, crashes[:5]
    assert not diffs, "\n".join(f"{c}\n  python: {w}\n  js:     {g}" for c, w, g in diffs[:5])
    return sum(not w["ok"] for w in want)


def test_inclusion_and_consistency_verdicts_are_the_same_in_the_browser():
    cases = [{"kind": "inclusion", **c} for c in examples(inclusion_cases(), 1500)]
    cases += [{"kind": "consistency", **c} for c in examples(consistency_cases(), 800)]
    refused = compare(cases)
    assert 0.2 * len(cases) < refused < len(cases), refused  # both outcomes are exercised


def test_bundle_verdicts_are_the_same_in_the_browser():
    cases = examples(bundle_cases(), 600)
    cases += [{"kind": "bundle_parse", "text": c["bundle"]} for c in cases[:200]]
    refused = compare(cases)
    assert 0.2 * len(cases) < refused < len(cases), refused
