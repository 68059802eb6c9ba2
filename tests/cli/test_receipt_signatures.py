"""`oap-log verify --receipt` checks every signature an OAP receipt carries (OAP-CORE-1.0
§19.1: the agent's and the tool's), offline, and reports each as verified, failed (why),
not checked (why) or missing, in text and JSON; exit 0 only when every signature was
checked and verified, 1 when any failed or is missing, 3 when some could not be checked.
Against a real `oap-log serve` on 127.0.0.1."""
from __future__ import annotations

import json
from pathlib import Path

import cbor2
import pytest
from click.testing import CliRunner

from tlog.formats.diddoc import P256, SECP256K1
from tlog.formats.encoding import b64enc
from tlog.formats.entries import receipt_hash
from tlog.formats.hashing import format_sha256, sha256
from tlog.server.cli import main

from tests.support.didhosts import Key, did_key, document, invocation_receipt, receipt_message, sign_receipt

TOOL_WEB = "did:web:weatherpro.example"
VERIFIED, FAILED, NOT_CHECKABLE, MISSING = "verified", "failed", "not_checkable", "missing"


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def anchored(server, tmp_path):
    """anchor(receipt) -> (bundle path, receipt path, policy path): the receipt anchored in a
    real log by a did:key entry signer, as `oap-log add` does it."""
    srv = server()
    key = tmp_path / "me.key"
    assert run("keygen", "--name", "me", "--out", str(key)).exit_code == 0
    n = [0]

    def anchor(receipt: dict) -> tuple[Path, Path, Path]:
        n[0] += 1
        path = tmp_path / f"receipt{n[0]}.json"
        path.write_text(json.dumps(receipt))
        r = run("add", str(path), "--key", str(key), "--url", srv.url)
        assert r.exit_code == 0, r.output
        return Path(str(path) + ".tlog-proof"), path, srv.data / "log.policy"
    return anchor


def verify(bundle: Path, receipt: Path, policy: Path, *extra: str):
    text = run("verify", str(bundle), "--policy", str(policy), "--receipt", str(receipt), *extra)
    js = run("verify", str(bundle), "--policy", str(policy), "--receipt", str(receipt), "--json", *extra)
    assert js.exit_code == text.exit_code
    lines = js.output.strip().splitlines()
    return text.exit_code, text.output, json.loads(lines[0]), json.loads(lines[1])


def test_agent_and_tool_signatures_verified_exit_0(anchored):
    agent, tool = Key(), Key(P256)
    web_doc = document(TOOL_WEB, {"key-1": tool})
    receipt = sign_receipt(invocation_receipt(did_key(agent), TOOL_WEB), (did_key(agent), agent),
                           (f"{TOOL_WEB}#key-1", tool))
    bundle, path, policy = anchored(receipt)
    pinned = path.parent / "tool.did.json"
    pinned.write_text(json.dumps(web_doc))
    code, out, one, summary = verify(bundle, path, policy, "--did-document", str(pinned))
    assert code == 0, out
    assert out.startswith("OK   ") and "its signatures: all verified" in out
    assert f"signature 0 by {did_key(agent)} (agent): verified (EdDSA), with the did:key itself" in out, out
    assert (f"signature 1 by {TOOL_WEB}#key-1 (tool): verified (ES256), with key {TOOL_WEB}#key-1 from a pinned DID "
            "document") in out, out
    assert "1 verified, 0 failed" in out
    assert one["ok"] and one["verdict"] == "ok" and summary == {"verified": 1, "failed": 0, "incomplete": 0}
    sigs = one["receipt"]["signatures"]
    assert [(s["index"], s["status"], s["roles"], s["alg"], s["source"]) for s in sigs] == [
        (0, VERIFIED, ["agent"], "EdDSA", "did:key"), (1, VERIFIED, ["tool"], "ES256", "pinned")]
    assert one["receipt"]["receipt_hash"] == format_sha256(receipt_hash(receipt))


def test_a_forged_tool_signature_fails_exit_1(anchored):
    agent, tool, mallory = Key(), Key(), Key()
    receipt = sign_receipt(invocation_receipt(did_key(agent), did_key(tool)), (did_key(agent), agent),
                           (did_key(tool), mallory))  # the tool's name, another key
    code, out, one, summary = verify(*anchored(receipt))
    assert code == 1, out
    assert out.startswith("FAIL ") and "its signatures: FAILED" in out
    assert f"signature 1 by {did_key(tool)} (tool): FAILED (EdDSA): does not verify with the EdDSA key(s) of " \
           f"{did_key(tool)}" in out, out
    assert [s["status"] for s in one["receipt"]["signatures"]] == [VERIFIED, FAILED]
    assert not one["ok"] and one["verdict"] == "failed" and summary["failed"] == 1
    assert "0 verified, 1 failed" in out


def test_a_missing_tool_signature_and_an_unsigned_receipt_fail(anchored):
    agent, tool = Key(), Key()
    only_agent = sign_receipt(invocation_receipt(did_key(agent), did_key(tool)), (did_key(agent), agent))
    code, out, one, _ = verify(*anchored(only_agent))
    assert code == 1 and f"signature by {did_key(tool)} (tool): MISSING: no signature by the tool" in out, out
    assert one["receipt"]["signatures"][-1] == {"status": MISSING, "by": did_key(tool), "roles": ["tool"],
                                                "reason": f"no signature by the tool {did_key(tool)} "
                                                          "(OAP-CORE-1.0 §19.1)"}
    unsigned = invocation_receipt(did_key(agent), did_key(tool), 2)
    code, out, one, _ = verify(*anchored(unsigned))
    assert code == 1 and "the receipt carries no signatures" in out, out


def test_a_signer_without_a_document_is_not_checked_exit_3_and_a_wrong_pinned_one_fails(anchored):
    agent, tool = Key(), Key(SECP256K1)
    receipt = sign_receipt(invocation_receipt(did_key(agent), TOOL_WEB), (did_key(agent), agent), (TOOL_WEB, tool))
    bundle, path, policy = anchored(receipt)
    code, out, one, summary = verify(bundle, path, policy)
    assert code == 3, out
    assert out.startswith("INCOMPLETE ") and "0 verified, 0 failed, 1 not fully checked" in out
    assert f"signature 1 by {TOOL_WEB} (tool): NOT CHECKED (ES256K): no DID document of {TOOL_WEB} was anchored " \
           "with the entry or pinned (pass a copy with --did-document)" in out, out
    assert one["verdict"] == "incomplete" and not one["ok"] and summary == {"verified": 0, "failed": 0,
                                                                            "incomplete": 1}
    right, wrong = path.parent / "right.json", path.parent / "wrong.json"
    right.write_text(json.dumps(document(TOOL_WEB, {"k": tool})))
    wrong.write_text(json.dumps(document(TOOL_WEB, {"k": Key(SECP256K1)})))
    code, out, _, _ = verify(bundle, path, policy, "--did-document", str(right))
    assert code == 0 and "(ES256K), with key did:web:weatherpro.example#k from a pinned DID document" in out, out
    code, out, _, _ = verify(bundle, path, policy, "--did-document", str(wrong))
    assert code == 1 and "FAILED (ES256K): does not verify with the ES256K key(s)" in out, out


def test_an_unknown_algorithm_is_not_checked_and_a_wrong_alg_or_key_fails():
    from tlog.client.receipts import verify_receipt_signatures

    agent, tool = Key(), Key(P256)
    body = invocation_receipt(did_key(agent), TOOL_WEB)
    doc = document(TOOL_WEB, {"key-1": tool})
    msg = receipt_message(body)
    good_agent = {"by": did_key(agent), "alg": "EdDSA", "value": b64enc(agent.sign(msg))}

    def report(tool_sig: dict) -> dict:
        r = verify_receipt_signatures({**body, "signatures": [good_agent, tool_sig]}, pinned={TOOL_WEB: doc})
        return r.signatures[1].to_json() | {"verdict": r.verdict}

    value = b64enc(tool.sign(msg))
    got = report({"by": TOOL_WEB, "alg": "ML-DSA-65", "value": value})
    assert got["status"] == NOT_CHECKABLE and got["verdict"] == "incomplete" and "'ML-DSA-65'" in got["reason"]
    got = report({"by": TOOL_WEB, "alg": "EdDSA", "value": value})
    assert got["status"] == FAILED and got["reason"] == f"{TOOL_WEB} has no EdDSA signing key"
    got = report({"by": f"{TOOL_WEB}#key-9", "alg": "ES256", "value": value})
    assert got["status"] == FAILED and got["reason"] == f"the DID document of {TOOL_WEB} lists no signing key #key-9"
    got = report({"by": TOOL_WEB, "alg": "ES256", "value": value[:-4]})
    assert got["status"] == FAILED and got["reason"] in ("value is not base64 or base64url",
                                                         "value must be base64 of a 64-byte signature")
    got = report({"by": TOOL_WEB, "alg": "ES256", "value": value, "kid": "x"})
    assert got["status"] == FAILED and "exactly" in got["reason"]
    url_safe = value.replace("+", "-").replace("/", "_").rstrip("=")  # §8.2's base64url spelling
    assert report({"by": TOOL_WEB, "alg": "ES256", "value": url_safe})["status"] == VERIFIED
    assert report({"by": TOOL_WEB, "alg": "ES256", "value": value})["verdict"] == "ok"


def test_a_privileged_commitment_opens_to_the_receipt_and_its_signatures_are_checked(server, tmp_path):
    srv = server()
    agent, tool = Key(), Key()
    receipt = tmp_path / "r.json"
    receipt.write_text(json.dumps(sign_receipt(invocation_receipt(did_key(agent), did_key(tool)),
                                               (did_key(agent), agent), (did_key(tool), tool))))
    r = run("add", str(receipt), "--commitment", "--url", srv.url, "--out", str(tmp_path / "c.tlog-proof"))
    assert r.exit_code == 0, r.output
    ok = run("verify", str(tmp_path / "c.tlog-proof"), "--policy", str(srv.data / "log.policy"), "--receipt",
             str(receipt), "--salt", str(tmp_path / "c.tlog-proof.salt.json"))
    assert ok.exit_code == 0 and ok.output.count(": verified (EdDSA)") == 2, ok.output


def test_an_entry_that_keeps_no_document_of_its_did_signer_is_not_checked_unless_pinned():
    """Entries logged before the log kept DID documents name a did:web signer and nothing
    more: a pinned copy checks them; without one they are not checked (not OK)."""
    from tlog.client.receipts import verify_entry_signature

    signer = Key(P256)
    did = "did:web:old.example"
    h = sha256(b"receipt")
    entry = cbor2.dumps({"type": "receipt", "receipt_hash": format_sha256(h), "signer": did,
                         "signature": b64enc(signer.sign(h))}, canonical=True)
    got = verify_entry_signature(entry)
    assert got is not None and got.status == NOT_CHECKABLE and "keeps no DID document" in got.reason
    got = verify_entry_signature(entry, pinned={did: document(did, {"k": signer})})
    assert got is not None and (got.status, got.source) == (VERIFIED, "pinned")
    got = verify_entry_signature(entry, pinned={did: document(did, {"k": Key(P256)})})
    assert got is not None and got.status == FAILED and "does not verify" in got.reason


def _kept_fake_document(tmp_path: Path) -> tuple[Path, Path, Path, Path, Path]:
    """A receipt of a did:web tool anchored by the tool itself in an entry that keeps a DID
    document the tool's domain never served (a key of the log's choosing): (bundle, receipt,
    policy, the real document, the fake one), the bundle a real tlog-proof of a small log."""
    from tlog.formats.diddoc import lookup_from
    from tlog.formats.entries import canonical_entry

    from tests.support.conformance import memlog_bundle
    from tests.support.witness import MemLog

    agent, real, fake = Key(), Key(), Key()
    real_doc, fake_doc = document(TOOL_WEB, {"k1": real}), document(TOOL_WEB, {"k1": fake})
    receipt = sign_receipt(invocation_receipt(did_key(agent), TOOL_WEB), (did_key(agent), agent),
                           (f"{TOOL_WEB}#k1", fake))
    rh = receipt_hash(receipt)
    entry = canonical_entry({"type": "receipt", "receipt_hash": format_sha256(rh), "signer": TOOL_WEB,
                             "signature": b64enc(fake.sign(rh)), "did_document": fake_doc},
                            lookup=lookup_from([(TOOL_WEB, fake_doc)]))
    log = MemLog(origin="log.example/kept", seed=bytes([7]) * 32)
    paths = [tmp_path / n for n in ("r.tlog-proof", "r.json", "log.policy", "real.did.json", "fake.did.json")]
    for p, text in zip(paths, (memlog_bundle(entry, log), json.dumps(receipt), f"log {log.vkey}\nquorum none\n",
                               json.dumps(real_doc), json.dumps(fake_doc)), strict=True):
        p.write_text(text)
    return paths[0], paths[1], paths[2], paths[3], paths[4]


def test_a_pinned_document_is_the_only_one_used_for_its_did(tmp_path):
    """`--did-document` pins the relying party's own copy: the document the log kept in the
    entry is then not trusted for that DID, for the entry's signature nor the receipt's."""
    from tlog.client.receipts import entry_document, verify_entry_signature, verify_receipt_signatures
    from tlog.formats.proofbundle import parse_proof_bundle

    bundle, receipt, policy, real, fake = _kept_fake_document(tmp_path)
    entry = parse_proof_bundle(bundle.read_text()).extra
    assert entry is not None
    real_doc, fake_doc = json.loads(real.read_text()), json.loads(fake.read_text())
    kept = entry_document(entry)
    assert kept == (TOOL_WEB, fake_doc)
    # trusting the log's copy, everything verifies: the log vouches for the key
    got = verify_entry_signature(entry)
    assert got is not None and (got.status, got.source) == (VERIFIED, "anchored")
    r = verify_receipt_signatures(json.loads(receipt.read_text()), anchored=dict([kept]))
    assert r.verdict == "ok" and r.signatures[1].source == "anchored"
    # pinned: the real document alone decides
    got = verify_entry_signature(entry, pinned={TOOL_WEB: real_doc})
    assert got is not None and (got.status, got.source) == (FAILED, "pinned"), got
    r = verify_receipt_signatures(json.loads(receipt.read_text()), anchored=dict([kept]), pinned={TOOL_WEB: real_doc})
    assert r.verdict == "failed" and (r.signatures[1].status, r.signatures[1].reason) == (
        FAILED, f"does not verify with the EdDSA key(s) of {TOOL_WEB}")
    # the CLI: OK with the log's copy (and says so), FAIL with the real one pinned
    code, out, one, _ = verify(bundle, receipt, policy)
    assert code == 0 and f"signed by {TOOL_WEB} (checked with the DID document kept in the log entry)" in out, out
    assert one["entry_signature"]["source"] == "anchored"
    code, out, one, summary = verify(bundle, receipt, policy, "--did-document", str(real))
    assert code == 1 and out.startswith("FAIL "), out
    assert one["entry_signature"]["status"] == FAILED and one["entry_signature"]["source"] == "pinned"
    assert [(s["status"], s.get("source")) for s in one["receipt"]["signatures"]] == [
        (VERIFIED, "did:key"), (FAILED, None)]
    assert summary["failed"] == 1
    code, out, one, _ = verify(bundle, receipt, policy, "--did-document", str(fake))
    assert code == 0 and one["entry_signature"]["source"] == "pinned", out
    assert f"signed by {TOOL_WEB} (checked with a pinned DID document)" in out, out


def test_a_receipt_must_name_its_agent_and_tool_by_did(tmp_path):
    """§19.1: a receipt names its agent and its tool, and both sign it. One that names
    neither, or names them by something else than a DID, is not OK, whoever signed it."""
    from tlog.client.receipts import verify_receipt_signatures

    x = Key()
    body = {"receipt_id": "urn:oap:receipt:1", "type": "invocation"}

    def signed(extra: dict) -> dict:
        return sign_receipt({**body, **extra}, (did_key(x), x))

    cases = {
        "names neither": ({}, [("agent", "names no agent (agent_did;"), ("tool", "names no tool (tool_did;")]),
        "no tool_did": ({"agent_did": did_key(x)}, [("tool", "names no tool (tool_did;")]),
        "agent_did not a DID": ({"agent_did": "agent_xyz", "tool_did": did_key(x)},
                                [("agent", "agent_did is not a DID")]),
        "tool_did null": ({"agent_did": did_key(x), "tool_did": None}, [("tool", "tool_did is not a DID")]),
    }
    for name, (extra, problems) in cases.items():
        r = verify_receipt_signatures(signed(extra))
        assert r.verdict == "failed", name
        assert r.signatures[0].status == VERIFIED, name  # the signature itself is fine
        got = [(s.roles, s.status, s.reason) for s in r.signatures[1:]]
        assert [(roles, status) for roles, status, _ in got] == [((role,), FAILED) for role, _ in problems], name
        assert all(want in reason for (_, _, reason), (_, want) in zip(got, problems, strict=True)), (name, got)
    ok = verify_receipt_signatures(signed({"agent_did": did_key(x), "tool_did": did_key(x)}))
    assert ok.verdict == "ok"  # one DID as agent and tool: one signature covers both roles
    assert ok.signatures[0].roles == ("agent", "tool")
    # the CLI exits 1 on it
    from tlog.formats.entries import canonical_entry, receipt_entry

    from tests.support.conformance import memlog_bundle
    from tests.support.witness import MemLog

    receipt = signed({"agent_did": "agent_xyz"})
    log = MemLog(origin="log.example/f8", seed=bytes([8]) * 32)
    seed = bytes([9]) * 32
    (tmp_path / "r.json").write_text(json.dumps(receipt))
    (tmp_path / "r.tlog-proof").write_text(memlog_bundle(canonical_entry(receipt_entry(receipt_hash(receipt), seed)),
                                                         log))
    (tmp_path / "p").write_text(f"log {log.vkey}\nquorum none\n")
    code, out, one, summary = verify(tmp_path / "r.tlog-proof", tmp_path / "r.json", tmp_path / "p")
    assert code == 1 and out.startswith("FAIL ") and "agent_did is not a DID" in out, out
    assert "names no tool (tool_did;" in out and one["verdict"] == "failed" and summary["failed"] == 1
