"""The browser's verifiers (tlog/ui/static/lib) decide every malformed or well-formed case
exactly as the Python ones do: the same accept, or the same error type and reason.
The cases are hypothesis-made (tests/support/malformed.py): inclusion and consistency
proofs with hashes of the wrong length, indices and sizes out of range or of the wrong
type, extra, missing and empty proof hashes, huge trees; and .tlog-proof bundles with
broken lines, signed checkpoints of size 0 with a bogus root, leaves of the wrong length.
They run in Node when it is installed, else in Chromium (tests/ui/jsrun.py)."""
from __future__ import annotations

import base64
import json
from functools import cache
from typing import Any

from hypothesis import strategies as st

from tlog.client.receipts import (
    SignatureCheck,
    entry_document,
    verdict_of,
    verify_entry_signature,
    verify_receipt_signatures,
)
from tlog.client.verifier import TrustPolicy
from tlog.formats.canonical import dcbor, jcs
from tlog.formats.checkpoint import Checkpoint
from tlog.formats.conformance import ALGS
from tlog.formats.did import did_key_from_public
from tlog.formats.encoding import b64enc
from tlog.formats.entries import receipt_hash
from tlog.formats.hashing import EMPTY_ROOT, leaf_hash
from tlog.formats.keys import Signer
from tlog.formats.note import sign_note
from tlog.formats.policy import parse_policy
from tlog.formats.proofbundle import parse_proof_bundle
from tlog.formats.times import format_utc, parse_utc
from tlog.merkle.tree import memory_view
from tlog.merkle.verify import verify_consistency, verify_inclusion

from tests.support.didhosts import PLC_WITNESS, Key, did_key, document, invocation_receipt, receipt_message
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
    if kind == "anchored":
        policy = TrustPolicy.from_text(case["policy"])
        result: dict[str, Any] = {}

        def anchored() -> None:
            v = policy.verify_anchored(case["text"], entry=case.get("entry"), leaf=case.get("leaf"),
                                       read_extra=case.get("read_extra", True))
            result.update(logs=list(v.logs), failures=[list(f) for f in v.failures], index=v.entries[0].index)
        out = verdict(anchored)
        if out["ok"]:
            out["result"] = result
        return out
    if kind == "policy":
        got: dict[str, Any] = {}

        def parse() -> None:
            p = parse_policy(case["text"])
            got.update(text=p.to_text(), quorum=p.quorum, registries=[[r.did, r.url] for r in p.registries])
        out = verdict(parse)
        if out["ok"]:
            out["result"] = got
        return out
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
    if kind == "time":  # parse, then write: the spelling both sides write for the instant read
        written: dict[str, str] = {}
        got = verdict(lambda: written.update(text=format_utc(parse_utc(case["text"], "t"))))
        if got["ok"]:
            got["result"] = written["text"]
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
    cases = [{"kind": "inclusion", **c} for c in examples(inclusion_cases(), 700)]
    cases += [{"kind": "consistency", **c} for c in examples(consistency_cases(), 400)]
    refused = compare(cases)
    assert 0.2 * len(cases) < refused < len(cases), refused  # both outcomes are exercised


def test_times_read_and_written_alike_in_the_browser():
    """tlog/formats/times.py and lib/times.js: the same times accepted and refused, and an accepted
    one written back with the same spelling, over the whole range (four-digit years, fractions
    before 1970)."""
    spellings = st.builds(
        lambda y, mo, d, h, mi, sec, frac: f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{sec:02d}{frac}Z",
        st.integers(0, 9999) | st.sampled_from([1, 999, 1969, 1970]), st.integers(0, 13), st.integers(0, 32),
        st.integers(0, 24), st.integers(0, 60), st.integers(0, 60),
        st.one_of(st.just(""), st.from_regex(r"\.[0-9]{1,7}", fullmatch=True)))
    cases = [{"kind": "time", "text": t} for t in examples(spellings, 400)]
    cases += [{"kind": "time", "text": t} for t in ("0001-01-01T00:00:00Z", "1969-12-31T23:59:59.5Z",
                                                     "9999-12-31T23:59:59.999999Z", "1-01-01T00:00:00Z")]
    refused = compare(cases)
    assert 0.1 * len(cases) < refused < len(cases), refused


def test_bundle_verdicts_are_the_same_in_the_browser():
    cases = examples(bundle_cases(), 600)
    cases += [{"kind": "bundle_parse", "text": c["bundle"]} for c in cases[:200]]
    refused = compare(cases)
    assert 0.2 * len(cases) < refused < len(cases), refused


@st.composite
def policy_cases(draw: st.DrawFn) -> dict[str, Any]:
    """Policy texts with the OAP extensions (`mirror`, `logs <k>`, `registry`), well-formed and
    broken line by line: a registry that is no did:key, one listed twice, a line too long or
    too short, a key that is no key."""
    reg = [did_key_from_public(bytes([i]) * 32) for i in (1, 2)]
    log_line = f"log {Signer(ORIGIN, SEED).vkey}" + draw(st.sampled_from(["", " https://log.example"]))
    witness = Signer("w1.example", bytes(range(1, 33))).vkey
    lines = [log_line]
    pool = [f"registry {reg[0]}", f"registry {reg[1]} https://registry.example", f"registry {reg[0]}",
            "registry did:web:registry.example", f"registry {reg[0][:-2]}", f"registry {reg[0]}x", "registry",
            f"registry {reg[0]} a b", f"registry {reg[1].upper()}", f"mirror m1 {witness} https://m.example",
            f"witness w1 {witness}", "quorum none", "quorum m1", "logs 1", "# a comment", "",
            f"registry\t{reg[1]}", "registry did:key:z6Mk", "registry did:key:zé"]
    lines += draw(st.lists(st.sampled_from(pool), max_size=6))
    return {"kind": "policy", "text": "\n".join(lines) + "\n"}


def test_proofs_checked_against_a_named_entry_or_leaf_are_the_same_in_the_browser():
    """verify_anchored with the entry or leaf hash the caller names, the bundles' extra lines
    read or ignored (a proof made by another C2SP log, whose extra line is its own business)."""
    cases = []
    for c in examples(bundle_cases(), 300):
        named = {k: c[k] for k in ("entry", "leaf") if c.get(k) is not None}
        if not named and c["bundle"].count("\nextra ") == 1:  # name the bundle's own entry, or its leaf hash
            extra = base64.b64decode(c["bundle"].split("\nextra ", 1)[1].split("\n", 1)[0] or "=")
            named = {"entry": extra} if len(extra) % 2 else {"leaf": leaf_hash(extra)}
        cases.append({"kind": "anchored", "policy": c["policy"], "text": c["bundle"], **named,
                      "read_extra": bool(len(c["bundle"]) % 3)})
    refused = compare(cases)
    assert 0.2 * len(cases) < refused < 0.9 * len(cases), refused


def test_policy_verdicts_are_the_same_in_the_browser():
    """tlog-policy texts with `registry` lines (and the other OAP extensions) parse, refuse and
    write back alike in the browser and in Python."""
    refused = compare(examples(policy_cases(), 300))
    assert 20 < refused < 280, refused


# --- receipt and entry signatures (OAP-CORE-1.0 §19.1) ----------------------------------------


class Principals:
    """A fixed pool of signers: did:key (Ed25519) and did:web / did:plc principals with
    Ed25519, P-256 and secp256k1 keys, their documents in each style, and wrong twins."""

    def __init__(self) -> None:
        self.ed = [Key() for _ in range(3)]
        self.keyed = [(did_key(k), k, None) for k in self.ed]
        self.webs = []
        for i, (curve, style) in enumerate([("Ed25519", "multikey"), ("P-256", "jwk"), ("secp256k1", "multikey"),
                                            ("Ed25519", "2018"), ("P-256", "multikey")]):
            key = Key(curve)
            did = f"did:web:tool{i}.example" if i != 4 else PLC_WITNESS
            doc = document(did, {"key-1": key}, style=style)
            wrong = document(did, {"key-1": Key(curve)}, style=style)
            self.webs.append((did, key, doc, wrong))
        self.document = document


@cache
def principals() -> Principals:
    return Principals()


def _bad_docs(did: str, doc: dict) -> list[Any]:
    return [{**doc, "id": "did:web:other.example"}, {**doc, "assertionMethod": [f"{did}#nope"]},
            {**doc, "verificationMethod": "x"}, {**doc, "verificationMethod": [], "assertionMethod": []}, "not json"]


@st.composite
def receipt_cases(draw: st.DrawFn) -> dict[str, Any]:
    p = principals()
    agent_did, agent_key, _ = draw(st.sampled_from(p.keyed))
    tool = draw(st.sampled_from(p.webs + [(d, k, None, None) for d, k, _ in p.keyed]))
    tool_did, tool_key, tool_doc, tool_wrong = tool
    body = invocation_receipt(agent_did, tool_did, draw(st.integers(0, 3)))
    named = draw(st.sampled_from(["both"] * 8 + ["no_agent", "no_tool", "neither", "agent_not_did", "tool_null",
                                                  "tool_number"]))
    if named in ("no_agent", "neither"):
        del body["agent_did"]
    if named in ("no_tool", "neither"):
        del body["tool_did"]
    if named == "agent_not_did":
        body["agent_did"] = "agent_xyz"
    elif named == "tool_null":
        body["tool_did"] = None
    elif named == "tool_number":
        body["tool_did"] = 7
    msg = receipt_message(body)

    def sig(by: str, key: Any) -> dict[str, Any]:
        s: dict[str, Any] = {"by": by, "alg": ALGS[key.curve], "value": b64enc(key.sign(msg))}
        fault = draw(st.sampled_from(["none"] * 6 + ["by_frag", "by_wrong_frag", "by_not_did", "alg_other",
                                                     "alg_unknown", "alg_type", "value_other", "value_short",
                                                     "value_url", "value_junk", "extra_field", "missing_field"]))
        if fault == "by_frag":
            s["by"] = by + ("#key-1" if not by.startswith("did:key:") else "#" + by[8:])
        elif fault == "by_wrong_frag":
            s["by"] = by + "#key-9"
        elif fault == "by_not_did":
            s["by"] = "tool"
        elif fault == "alg_other":
            s["alg"] = draw(st.sampled_from([a for a in ("EdDSA", "ES256", "ES256K") if a != s["alg"]]))
        elif fault == "alg_unknown":
            s["alg"] = draw(st.sampled_from(["ML-DSA-65", "RS256", "", "eddsa"]))
        elif fault == "alg_type":
            s["alg"] = 5
        elif fault == "value_other":
            s["value"] = b64enc(p.ed[2].sign(msg) if key.curve == "Ed25519" else p.webs[1][1].sign(msg))
        elif fault == "value_short":
            s["value"] = b64enc(key.sign(msg)[:63])
        elif fault == "value_url":
            s["value"] = s["value"].replace("+", "-").replace("/", "_").rstrip("=")
        elif fault == "value_junk":
            s["value"] = draw(st.sampled_from(["!!!!", "", "AAA", "A" * 85 + "=", 12]))
        elif fault == "extra_field":
            s["kid"] = "x"
        elif fault == "missing_field":
            del s["alg"]
        return s

    shape = draw(st.sampled_from(["both"] * 5 + ["agent_only", "tool_only", "none", "empty", "not_list", "not_obj",
                                                  "reversed", "third"]))
    sigs: Any = [sig(agent_did, agent_key), sig(tool_did, tool_key)]
    if shape == "agent_only":
        sigs = sigs[:1]
    elif shape == "tool_only":
        sigs = sigs[1:]
    elif shape == "reversed":
        sigs = sigs[::-1]
    elif shape == "third":
        sigs.append(sig(p.keyed[2][0], p.keyed[2][1]))
    elif shape == "not_obj":
        sigs[0] = "signature"
    receipt: dict[str, Any] = dict(body)
    if shape == "not_list":
        receipt["signatures"] = {"by": agent_did}
    elif shape == "empty":
        receipt["signatures"] = []
    elif shape != "none":
        receipt["signatures"] = sigs
    documents: list[Any] = []
    entry = None
    if tool_doc is not None:
        where = draw(st.sampled_from(["pinned", "entry", "both", "neither", "wrong_pinned", "wrong_entry",
                                      "bad_pinned", "bad_entry", "entry_wrong_pinned", "wrong_entry_pinned"]))
        if where in ("pinned", "both", "wrong_entry_pinned"):
            documents.append(tool_doc)
        if where in ("wrong_pinned", "entry_wrong_pinned"):  # a pin is the only document used for its DID
            documents.append(tool_wrong)
        if where == "bad_pinned":
            documents.append(draw(st.sampled_from(_bad_docs(tool_did, tool_doc))))
        if where in ("entry", "both", "wrong_entry", "bad_entry", "entry_wrong_pinned", "wrong_entry_pinned"):
            kept = {"entry": tool_doc, "both": tool_doc, "wrong_entry": tool_wrong, "entry_wrong_pinned": tool_doc,
                    "wrong_entry_pinned": tool_wrong}.get(where) \
                or draw(st.sampled_from([d for d in _bad_docs(tool_did, tool_doc) if isinstance(d, dict)]))
            rh = receipt_hash(receipt)
            entry = dcbor({"type": "receipt", "receipt_hash": "sha256:" + rh.hex(), "signer": tool_did,
                           "signature": b64enc(tool_key.sign(rh)), "did_document": kept})
    return {"kind": "receipt_signatures", "receipt": receipt, "documents": documents, "entry": entry}


@st.composite
def entry_cases(draw: st.DrawFn) -> dict[str, Any]:
    p = principals()
    did, key, doc, wrong = draw(st.sampled_from(p.webs + [(d, k, None, None) for d, k, _ in p.keyed]))
    signer = did + draw(st.sampled_from(["", "", "#key-1", "#key-9"])) if doc is not None else did
    kind = draw(st.sampled_from(["receipt", "registry"]))
    digest = bytes(range(32))
    if kind == "receipt":
        obj: dict[str, Any] = {"type": "receipt", "receipt_hash": "sha256:" + digest.hex(), "signer": signer}
        message = digest
    else:
        obj = {"type": "registry", "commit": "ab" * 20, "tree": "cd" * 20, "seq": 7, "signer": signer}
        message = jcs(obj)
    sig = key.sign(message)
    fault = draw(st.sampled_from(["none", "none", "none", "tamper", "other_key", "short"]))
    if fault == "tamper":
        sig = bytes([sig[0] ^ 1]) + sig[1:]
    elif fault == "other_key":
        sig = (p.ed[2] if key.curve == "Ed25519" else p.webs[1][1]).sign(message)
    obj["signature"] = b64enc(sig if fault != "short" else sig[:40])
    documents: list[Any] = []
    if doc is not None:
        where = draw(st.sampled_from(["entry", "entry", "wrong_entry", "bad_entry", "pinned", "wrong_pinned",
                                      "bad_pinned", "none", "entry_wrong_pinned", "wrong_entry_pinned"]))
        if where == "entry":
            obj["did_document"] = doc
        elif where == "entry_wrong_pinned":  # a pin is the only document used for its DID
            obj["did_document"] = doc
            documents.append(wrong)
        elif where == "wrong_entry_pinned":
            obj["did_document"] = wrong
            documents.append(doc)
        elif where == "wrong_entry":
            obj["did_document"] = wrong
        elif where == "bad_entry":
            obj["did_document"] = draw(st.sampled_from([d for d in _bad_docs(did, doc) if isinstance(d, dict)]))
        elif where == "pinned":
            documents.append(doc)
        elif where == "wrong_pinned":
            documents.append(wrong)
        elif where == "bad_pinned":
            documents.append(draw(st.sampled_from(_bad_docs(did, doc))))
    return {"kind": "entry_signature", "entry": dcbor(obj), "documents": documents}


def _pinned(documents: list[Any]) -> dict[str, Any]:
    return {d["id"]: d for d in documents if isinstance(d, dict) and isinstance(d.get("id"), str)}


def _python_signatures(case: dict[str, Any]) -> dict[str, Any]:
    if case["kind"] == "entry_signature":
        got = verify_entry_signature(case["entry"], pinned=_pinned(case["documents"]))
        return {"ok": True, "result": got.to_json() if got else None}
    kept = entry_document(case["entry"]) if case["entry"] is not None else None
    report = verify_receipt_signatures(case["receipt"], anchored=dict([kept]) if kept else {},
                                       pinned=_pinned(case["documents"]))
    return {"ok": True, "result": report.to_json()}


def _in_browser(row: dict[str, Any]) -> dict[str, Any]:
    """What the browser should say for a Python signature verdict: the same, except that a
    DID document pydid finds invalid is invalid for a reason worded by pydid."""
    row = dict(row)
    if "is not valid:" in row["reason"]:
        row["reason"] = row["reason"].split("is not valid:")[0] + "is not valid:"
    return row


def test_receipt_and_entry_signature_verdicts_are_the_same_in_the_browser():
    cases = examples(receipt_cases(), 500) + examples(entry_cases(), 300)
    want = [_python_signatures(c) for c in cases]
    js_cases = [{"kind": c["kind"], "receipt": json.dumps(c["receipt"]) if "receipt" in c else None,
                 "documents": [json.dumps(d) for d in c["documents"]],
                 "entry": {"$hex": c["entry"].hex()} if c.get("entry") is not None else None} for c in cases]
    got = run_js(js_cases)
    statuses: dict[str, int] = {}
    for case, w, g in zip(cases, want, got, strict=True):
        assert g["ok"], (case, g)
        if case["kind"] == "entry_signature":
            expect = _in_browser(w["result"]) if w["result"] else None
            actual = g["result"]
            if actual and "is not valid:" in actual["reason"]:
                actual = {**actual, "reason": actual["reason"].split("is not valid:")[0] + "is not valid:"}
            assert actual == expect, f"{case}\n  python: {w}\n  js:     {g}"
            statuses[expect["status"] if expect else "none"] = statuses.get(expect["status"] if expect else "none",
                                                                            0) + 1
            continue
        rows = [_in_browser(r) for r in w["result"]["signatures"]]
        expect_report = {"receipt_hash": w["result"]["receipt_hash"],
                         "verdict": verdict_of([SignatureCheck(r["status"], r["reason"]) for r in rows]),
                         "signatures": rows}
        actual = dict(g["result"])
        actual["signatures"] = [{**r, "reason": r["reason"].split("is not valid:")[0] + "is not valid:"}
                                if "is not valid:" in r["reason"] else r for r in actual["signatures"]]
        assert actual == expect_report, f"{case}\n  python: {w}\n  js:     {g}"
        for r in rows:
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
            if r["status"] == "verified":
                statuses[f"{r['status']} {r['alg']} {r.get('source')}"] = statuses.get(
                    f"{r['status']} {r['alg']} {r.get('source')}", 0) + 1
    # every verdict is exercised, and the page verified Ed25519, P-256 and secp256k1 keys from each source
    assert all(statuses.get(s, 0) > 10 for s in ("verified", "failed", "not_checkable", "missing")), statuses
    for seen in ("verified EdDSA did:key", "verified EdDSA pinned", "verified EdDSA anchored", "verified ES256 pinned",
                 "verified ES256 anchored", "verified ES256K pinned", "verified ES256K anchored"):
        assert statuses.get(seen, 0) > 0, (seen, statuses)
    # receipts that do not name their agent and tool by DID were among them (both refuse them alike)
    reasons = [r["reason"] for w in want if w["result"] and "signatures" in w["result"]
               for r in w["result"]["signatures"]]
    for said in ("names no agent", "names no tool", "agent_did is not a DID", "tool_did is not a DID"):
        assert any(said in x for x in reasons), said
