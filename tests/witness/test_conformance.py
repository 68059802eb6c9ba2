"""POST /v1/conformance/witness: peer-witnessing of conformance receipts (OAP-CORE-1.0 §31,
docs/architecture.md §4)."""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tlog.formats import ed25519
from tlog.formats.conformance import sign_conformance, validate_conformance, witness_signature
from tlog.formats.did import did_key_from_public
from tlog.formats.entries import canonical_entry
from tlog.formats.hashing import leaf_hash
from tlog.formats.keys import Signer
from tlog.formats.proofbundle import ProofBundle
from tlog.merkle.tree import memory_view
from tlog.runtime.keyfiles import write_private_key
from witness.keyfiles import identity_key_name

from tests.support.conformance import WebSubject, audit_for
from tests.support.witness import V8_NAME, MemLog, running_witness, witness_config

IDENTITY = bytes([41]) * 32  # the witness's did:key
SUBJECT = bytes([42]) * 32  # the implementation asking to be witnessed
PEERS = [bytes([50 + i]) * 32 for i in range(3)]  # other witnesses
AUDITOR = bytes([60]) * 32
# The implementation is a did:web publisher (§31 L3+), its document pinned in the witness's
# did_documents_dir as the resolver would fetch it.
WEB = WebSubject("did:web:impl.example", SUBJECT)
LOOKUP = WEB.lookup()


def did(seed: bytes) -> str:
    if seed == SUBJECT:
        return WEB.did
    return did_key_from_public(ed25519.public_from_seed(seed))


def ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def receipt(subject: bytes, level: str, peers: list[bytes], *, days: tuple[int, int] = (-1, 60),
            rid: str = "urn:oap:conformance:test-1") -> dict[str, Any]:
    now = datetime.now(UTC).replace(microsecond=0)
    body = {
        "id": rid, "subject": did(subject), "level": level, "profile": "commercial",
        "suite": {"name": "oap-suite", "version": "1.0.0"}, "results_digest": "sha256:" + "cd" * 32,
        "issued_at": ts(now + timedelta(days=days[0])), "expires_at": ts(now + timedelta(days=days[1])),
    }
    if level == "L5":
        body["audit"] = audit_for(did(subject), AUDITOR)
    r = sign_conformance(body, subject, by=WEB.key_id if subject == SUBJECT else None)
    for p in peers:
        r["signatures"].append(witness_signature(r, p))
    return r


def anchored(log: MemLog, rec: dict[str, Any], *, others: int = 4, lookup=LOOKUP) -> str:
    """A .tlog-proof for the conformance entry of `rec` at index 2 of a small in-memory log."""
    entry = canonical_entry({"type": "conformance", "receipt": rec}, lookup=lookup)
    entries = [bytes([i]) * 8 for i in range(2)] + [entry] + [bytes([9, i]) for i in range(others)]
    log.leaves = [leaf_hash(e) for e in entries]
    size = len(entries)
    proof = tuple(memory_view(log.leaves).inclusion_proof(2))
    return ProofBundle(index=2, proof=proof, checkpoint=log.checkpoint(size), extra=entry).to_text()


def setup(tmp: Path, *, own: dict | str | None = "L4", trusted: list[str] | None = None, **kw):
    tmp.mkdir(parents=True, exist_ok=True)
    ident = tmp / "identity.key"
    if not ident.exists():
        write_private_key(ident, Signer(identity_key_name(V8_NAME), IDENTITY).to_skey())
    own_path = tmp / "own.json"
    if isinstance(own, str):
        own = receipt(IDENTITY, own, PEERS[:1 if own == "L4" else 3 if own == "L5" else 0],
                      rid="urn:oap:conformance:witness")
    if own is not None:
        own_path.write_text(json.dumps(own))
    log = MemLog(origin="conformance.example/log", seed=bytes([3]) * 32)
    pinned = tmp / "dids"
    pinned.mkdir(exist_ok=True)
    (pinned / "impl.json").write_text(json.dumps(WEB.document))
    kw.setdefault("did_documents_dir", pinned)
    cfg = witness_config(tmp, [], own_receipt=own_path,
                         trusted_logs=tuple(trusted if trusted is not None else [log.vkey]), **kw)
    return cfg, log


async def ask(session, url: str, body: Any, *, ctype: str = "application/json") -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with session.post(url + "/v1/conformance/witness", data=data, headers={"Content-Type": ctype}) as r:
        return r.status, await r.json()


async def test_happy_path_signature_in_receipt_form(tmp_path):
    cfg, log = setup(tmp_path)
    rec = receipt(SUBJECT, "L4", PEERS[1:2])
    bundle = anchored(log, rec)
    async with running_witness(cfg) as (svc, url, session):
        assert svc.peer.did == did(IDENTITY)
        status, out = await ask(session, url, {"receipt": rec, "bundle": bundle})
        assert status == 200, out
        sig = out["signature"]
        assert set(sig) == {"by", "alg", "value"} and sig["by"] == did(IDENTITY) and sig["alg"] == "EdDSA"
        assert sig == witness_signature(rec, IDENTITY)
        checked = validate_conformance(out["receipt"], now=datetime.now(UTC), lookup=LOOKUP)
        assert did(IDENTITY) in checked.witnesses and len(checked.witnesses) == 2
        assert out["inclusion"] == {"origin": log.origin, "index": 2, "tree_size": 7}
        assert validate_conformance(out["witness_receipt"], now=datetime.now(UTC),
                                    check_publisher=False).subject == did(IDENTITY)
        # Asking again gives the same signature and does not add it twice.
        status, again = await ask(session, url, {"receipt": out["receipt"], "bundle": anchored(log, out["receipt"])})
        assert status == 200 and again["signature"] == sig
        assert again["receipt"]["signatures"].count(sig) == 1
        async with session.get(url + "/metrics") as r:
            assert 'oap_witness_conformance_requests_total{status="200"} 2.0' in await r.text()


@pytest.mark.parametrize("own,why", [
    (None, "missing"),
    ("L3", "level L3"),
    ("expired", "expired"),
    ("other", "about"),
    ("tampered", "does not verify"),
    ("L4-no-peer", "needs at least 1 witness"),
])
async def test_refuses_without_its_own_valid_l4_receipt(tmp_path, own, why):
    if own == "expired":
        own = receipt(IDENTITY, "L4", PEERS[:1], days=(-100, -10))
    elif own == "other":
        own = receipt(PEERS[2], "L4", PEERS[:1])
    elif own == "tampered":
        own = receipt(IDENTITY, "L4", PEERS[:1])
        own["profile"] = "research"
    elif own == "L4-no-peer":
        own = receipt(IDENTITY, "L4", [])
    cfg, log = setup(tmp_path, own=own)
    rec = receipt(SUBJECT, "L4", PEERS[1:2])
    async with running_witness(cfg) as (_svc, url, session):
        status, out = await ask(session, url, {"receipt": rec, "bundle": anchored(log, rec)})
    assert status == 403 and out["error"] == "policy_block"
    assert why in out["message"] and "own conformance receipt" in out["message"]


async def test_own_level_l5_required_when_configured(tmp_path):
    cfg, log = setup(tmp_path, own="L4", require_own_level="L5")
    rec = receipt(SUBJECT, "L4", PEERS[1:2])
    async with running_witness(cfg) as (_svc, url, session):
        status, out = await ask(session, url, {"receipt": rec, "bundle": anchored(log, rec)})
        assert status == 403 and "L5" in out["message"]
    cfg2, log2 = setup(tmp_path / "l5", own="L5", require_own_level="L5")
    async with running_witness(cfg2) as (_svc, url, session):
        assert (await ask(session, url, {"receipt": rec, "bundle": anchored(log2, rec)}))[0] == 200


async def test_refusals_of_the_request(tmp_path):
    cfg, log = setup(tmp_path)
    rec = receipt(SUBJECT, "L4", PEERS[1:2])
    good = anchored(log, rec)
    async with running_witness(cfg) as (_svc, url, session):
        async def expect(body, status, code, fragment="", **kw):
            got, out = await ask(session, url, body, **kw)
            assert (got, out["error"]) == (status, code), out
            assert fragment in out["message"], out

        # Not the shape asked for.
        await expect(b"{not json", 400, "invalid_input")
        await expect({"receipt": rec}, 400, "invalid_input", "bundle")
        await expect({"receipt": rec, "bundle": 5}, 400, "invalid_input")
        await expect({"receipt": rec, "bundle": good}, 415, "invalid_input", ctype="text/plain")
        # The receipt itself.
        bad_sig = dict(rec, profile="research")
        await expect({"receipt": bad_sig, "bundle": good}, 400, "invalid_input", "does not verify")
        old = receipt(SUBJECT, "L4", PEERS[1:2], days=(-100, -10))
        await expect({"receipt": old, "bundle": anchored(log, rec)}, 400, "invalid_input", "expired")
        mine = receipt(IDENTITY, "L2", PEERS[1:2])  # (a did:key cannot claim L3+: no publisher)
        await expect({"receipt": mine, "bundle": anchored(log, mine)}, 403, "policy_block", "own")
        # Its inclusion.
        other_rec = receipt(SUBJECT, "L4", PEERS[1:2], rid="urn:oap:conformance:test-2")
        await expect({"receipt": rec, "bundle": anchored(MemLog(origin=log.origin, seed=log.seed), other_rec)},
                     422, "output_unverifiable", "differs")
        stranger = MemLog(origin="evil.example/log", seed=bytes([4]) * 32)
        await expect({"receipt": rec, "bundle": anchored(stranger, rec)}, 422, "output_unverifiable", "not signed")
        lines = good.split("\n")
        lines[3] = lines[4]  # a wrong inclusion-proof hash
        await expect({"receipt": rec, "bundle": "\n".join(lines)}, 422, "output_unverifiable", "inclusion")
        await expect({"receipt": rec, "bundle": "not a bundle\n"}, 400, "invalid_input")
        # And the good request still works.
        assert (await ask(session, url, {"receipt": rec, "bundle": good}))[0] == 200


async def test_refuses_when_no_log_is_trusted(tmp_path):
    cfg, log = setup(tmp_path, trusted=[])
    rec = receipt(SUBJECT, "L4", PEERS[1:2])
    async with running_witness(cfg) as (_svc, url, session):
        status, out = await ask(session, url, {"receipt": rec, "bundle": anchored(log, rec)})
    assert status == 403 and "trusts no log" in out["message"]


async def test_own_receipt_check_can_be_disabled(tmp_path):
    cfg, log = setup(tmp_path, own=None, require_own_level="none")
    rec = receipt(SUBJECT, "L3", [])
    async with running_witness(cfg) as (_svc, url, session):
        status, out = await ask(session, url, {"receipt": rec, "bundle": anchored(log, rec)})
    assert status == 200 and "witness_receipt" not in out


async def test_a_did_web_subject_with_a_did_plc_peer_is_witnessed(tmp_path):
    """Subjects and peers named by did:web / did:plc (OAP-CORE-1.0 §5.1), resolved from
    local hosts: the witness checks their ES256 / ES256K signatures, then adds its own."""
    from tlog.formats.diddoc import lookup_from

    from tests.support.didhosts import PLC_WITNESS, DidHosts, Key, did_receipt, document

    hosts = await DidHosts().start(tmp_path / "tls")
    try:
        subject_key, peer_key = Key("P-256"), Key("secp256k1")
        subject = hosts.web_did("impl")
        hosts.publish_web(subject, document(subject, {"k": subject_key}))
        hosts.publish_plc(PLC_WITNESS, document(PLC_WITNESS, {"atproto": peer_key}))
        cfg, log = setup(tmp_path / "w", did_ca_file=hosts.ca_file, did_allow_private_networks=True,
                         did_plc_directory=hosts.plc_url)
        rec = did_receipt(subject, subject_key, witnesses=((PLC_WITNESS, peer_key),), level="L4")
        forged = did_receipt(subject, Key("P-256"), level="L4")
        pinned = lookup_from([(subject, hosts.docs["/impl/did.json"]), (PLC_WITNESS, hosts.docs[f"/{PLC_WITNESS}"])])
        async with running_witness(cfg) as (_svc, url, session):
            status, out = await ask(session, url, {"receipt": rec, "bundle": anchored(log, rec, lookup=pinned)})
            assert status == 200, out
            assert out["signature"] == witness_signature(rec, IDENTITY)
            status, out = await ask(session, url, {"receipt": forged, "bundle": anchored(log, rec, lookup=pinned)})
            assert status == 400 and "does not verify" in out["message"]
        assert hosts.hits["/impl/did.json"] >= 1 and hosts.hits[f"/{PLC_WITNESS}"] == 1
    finally:
        await hosts.close()


async def test_refuses_a_subject_whose_did_document_lists_its_identity_key(tmp_path):
    """§31 independence: an implementation that lists the witness's identity key in its own
    DID document is the witness under another name; the witness refuses and says why."""
    related = WebSubject("did:web:impl.example", SUBJECT)
    related.document["verificationMethod"].append(
        {"id": "did:web:impl.example#ops", "type": "Multikey", "controller": "did:web:impl.example",
         "publicKeyMultibase": "z" + __import__("base58").b58encode(
             b"\xed\x01" + ed25519.public_from_seed(IDENTITY)).decode()})
    related.document["assertionMethod"].append("did:web:impl.example#ops")
    cfg, log = setup(tmp_path)
    (tmp_path / "dids" / "impl.json").write_text(json.dumps(related.document))
    rec = receipt(SUBJECT, "L4", PEERS[1:2])
    async with running_witness(cfg) as (_svc, url, session):
        status, out = await ask(session, url, {"receipt": rec, "bundle": anchored(log, rec, lookup=related.lookup())})
    assert status == 403 and out["error"] == "policy_block", out
    assert f"witness {did(IDENTITY)} is not independent of the subject did:web:impl.example" in out["message"]
    assert "holds a key that the subject's DID document lists" in out["message"]


async def test_a_vc_receipt_gets_an_eddsa_jcs_2022_proof(tmp_path):
    """A receipt in W3C VC 2.0 form is witnessed with a Data Integrity proof added to its
    proof set (docs/architecture.md §5), deterministically."""
    from tlog.formats.conformance import add_proof, claims_of, to_vc
    from tlog.formats.dataintegrity import did_key_method

    cfg, log = setup(tmp_path)
    compact = receipt(SUBJECT, "L4", [])
    vc = add_proof(to_vc(claims_of(compact)), SUBJECT, WEB.key_id)
    vc = add_proof(vc, PEERS[1])
    async with running_witness(cfg) as (_svc, url, session):
        status, out = await ask(session, url, {"receipt": vc, "bundle": anchored(log, vc)})
        assert status == 200, out
        proof = out["signature"]
        assert proof["cryptosuite"] == "eddsa-jcs-2022" and proof["verificationMethod"] == did_key_method(did(IDENTITY))
        assert out["receipt"]["proof"][-1] == proof and len(out["receipt"]["proof"]) == 3
        checked = validate_conformance(out["receipt"], now=datetime.now(UTC), lookup=LOOKUP)
        assert checked.form == "vc" and checked.witnesses == (did(PEERS[1]), did(IDENTITY))
        again = await ask(session, url, {"receipt": out["receipt"], "bundle": anchored(log, out["receipt"])})
        assert again[0] == 200 and again[1]["signature"] == proof and len(again[1]["receipt"]["proof"]) == 3
