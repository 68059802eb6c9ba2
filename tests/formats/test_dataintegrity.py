"""tlog.formats.dataintegrity (W3C vc-di-eddsa eddsa-jcs-2022) against the specification's
test vectors, and conformance receipts in W3C VC 2.0 form (OAP-CORE-1.0 §5.2)."""
from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tlog.errors import Forbidden, InvalidInput, SignatureError
from tlog.formats.canonical import jcs
from tlog.formats.conformance import (
    add_proof,
    add_witness_signature,
    claims_of,
    sign_conformance,
    to_vc,
    validate_conformance,
)
from tlog.formats.dataintegrity import create_proof, from_multibase, hash_data, verify_proof
from tlog.formats.hashing import sha256

from tests.support.conformance import WebSubject, audit_for, did

VECTORS = json.loads((Path(__file__).parent / "vectors" / "eddsa-jcs-2022.json").read_text())
NOW = datetime(2026, 5, 2, 10, 0, 0, tzinfo=UTC)
SUBJECT = WebSubject("did:web:impl.example", bytes([1]) * 32)
WITNESSES = [bytes([10 + i]) * 32 for i in range(3)]


# --- the specification's vectors ------------------------------------------------------------


def _seed() -> bytes:
    raw = from_multibase(VECTORS["keyPair"]["privateKeyMultibase"], what="key")
    assert raw[:2] == b"\x80\x26" and len(raw) == 34  # multicodec ed25519-priv
    return raw[2:]


def test_canonical_forms_and_hashes_match_the_vectors():
    unsigned, config = VECTORS["unsigned"], VECTORS["proofConfig"]
    assert jcs(unsigned).decode() == VECTORS["canonDoc"]
    assert sha256(jcs(unsigned)).hex() == VECTORS["docHash"]
    assert jcs(config).decode() == VECTORS["proofCanon"]
    assert sha256(jcs(config)).hex() == VECTORS["proofHash"]
    assert hash_data(unsigned, config).hex() == VECTORS["combinedHash"]


def test_create_proof_reproduces_the_signed_vector():
    proof = create_proof(VECTORS["unsigned"], _seed(), created=VECTORS["proofConfig"]["created"])
    assert from_multibase(proof["proofValue"], what="proofValue").hex() == VECTORS["sigHex"]
    assert proof["proofValue"] == VECTORS["sigBTC58"]
    assert proof == VECTORS["signed"]["proof"]


def test_verify_proof_accepts_the_vector_and_refuses_any_change():
    signed = VECTORS["signed"]
    key = verify_proof(signed, signed["proof"], None)
    assert key.id == "did:key:" + VECTORS["keyPair"]["publicKeyMultibase"]
    for path, value in ((("credentialSubject", "alumniOf"), "Another School"), (("validFrom",), "2023-01-02T00:00:00Z"),
                        (("proof", "created"), "2023-02-24T23:36:39Z")):
        tampered = copy.deepcopy(signed)
        target: Any = tampered
        for p in path[:-1]:
            target = target[p]
        target[path[-1]] = value
        with pytest.raises(SignatureError):
            verify_proof(tampered, tampered["proof"], None)


@pytest.mark.parametrize("mutate,reason", [
    (lambda p: p.update(cryptosuite="eddsa-rdfc-2022"), "cryptosuite"),
    (lambda p: p.update(type="Ed25519Signature2020"), "cryptosuite"),
    (lambda p: p.update(proofPurpose="authentication"), "proofPurpose"),
    (lambda p: p.update(proofValue="u" + p["proofValue"][1:]), "base58btc"),
    (lambda p: p.update(proofValue="z" + "1" * 10), "64-byte"),
    (lambda p: p.update(previousProof="urn:uuid:1"), "proof chains"),
    (lambda p: p.update(created="yesterday"), "created"),
    (lambda p: p.pop("verificationMethod"), "missing"),
    (lambda p: p.update(verificationMethod=p["verificationMethod"].split("#")[0] + "#z6Mkother"), "did:key:<key>#<key>"),
    (lambda p: p.update(nonce="x"), "unknown field"),
])
def test_malformed_proofs_are_refused_with_the_reason(mutate, reason):
    signed = copy.deepcopy(VECTORS["signed"])
    mutate(signed["proof"])
    with pytest.raises(InvalidInput, match=reason):
        verify_proof(signed, signed["proof"], None)


def test_a_proof_context_that_the_document_does_not_start_with_is_refused():
    signed = copy.deepcopy(VECTORS["signed"])
    signed["@context"] = list(reversed(signed["@context"]))
    with pytest.raises(SignatureError, match="@context"):
        verify_proof(signed, signed["proof"], None)


# --- OAPConformance as a W3C VC 2.0 -----------------------------------------------------------


def compact(level: str = "L4", **over: Any) -> dict[str, Any]:
    body = {"id": "urn:oap:conformance:vc-1", "subject": SUBJECT.did, "level": level, "profile": "commercial",
            "suite": {"name": "oap-test-suite", "version": "1.0.3"}, "results_digest": "sha256:" + "ab" * 32,
            "issued_at": "2026-05-01T00:00:00Z", "expires_at": "2026-07-01T00:00:00Z", **over}
    return sign_conformance(body, SUBJECT.seed, by=SUBJECT.key_id)


def vc_of(c: dict[str, Any], witnesses: list[bytes]) -> dict[str, Any]:
    vc = add_proof(to_vc(claims_of(c)), SUBJECT.seed, SUBJECT.key_id)
    for w in witnesses:
        vc = add_proof(vc, w)
    return vc


def test_the_vc_form_maps_field_by_field_and_means_what_the_compact_form_means():
    c = compact("L5", audit=audit_for(SUBJECT.did, bytes([30]) * 32))
    c["signatures"] += [add_witness_signature(c, w)[0] for w in WITNESSES]
    vc = vc_of(c, WITNESSES)
    assert vc["type"] == ["VerifiableCredential", "OAPConformance"] and vc["issuer"] == SUBJECT.did
    assert vc["@context"] == ["https://www.w3.org/ns/credentials/v2"]
    assert vc["validFrom"] == c["issued_at"] and vc["validUntil"] == c["expires_at"]
    assert vc["credentialSubject"] == {"id": SUBJECT.did, "level": "L5", "profile": "commercial",
                                       "suite": c["suite"], "resultsDigest": c["results_digest"], "audit": c["audit"]}
    assert claims_of(vc) == claims_of(c)
    a = validate_conformance(c, now=NOW, lookup=SUBJECT.lookup())
    b = validate_conformance(vc, now=NOW, lookup=SUBJECT.lookup())
    assert (a.form, b.form) == ("compact", "vc")
    assert (a.id, a.subject, a.level, a.issued_at, a.expires_at, a.witnesses, a.audit) == \
        (b.id, b.subject, b.level, b.issued_at, b.expires_at, b.witnesses, b.audit)
    assert b.witnesses == tuple(did(w) for w in WITNESSES)


def test_proofs_in_any_order_and_a_single_proof_object():
    vc = vc_of(compact("L4"), WITNESSES[:2])
    vc["proof"].reverse()
    assert validate_conformance(vc, now=NOW, lookup=SUBJECT.lookup()).witnesses == (did(WITNESSES[1]),
                                                                                    did(WITNESSES[0]))
    alone = vc_of(compact("L3"), [])
    assert isinstance(alone["proof"], dict)
    assert validate_conformance(alone, now=NOW, lookup=SUBJECT.lookup()).level == "L3"


def test_a_tampered_vc_is_refused():
    vc = vc_of(compact("L4"), WITNESSES[:1])
    for field, value in (("level", "L5"), ("profile", "standard")):
        bad = copy.deepcopy(vc)
        bad["credentialSubject"][field] = value
        with pytest.raises(InvalidInput, match=r"proof\[0\]: self signature does not verify"):
            validate_conformance(bad, now=NOW, lookup=SUBJECT.lookup())
    bad = copy.deepcopy(vc)
    bad["validUntil"] = "2026-07-30T00:00:00Z"
    with pytest.raises(InvalidInput, match="does not verify"):
        validate_conformance(bad, now=NOW, lookup=SUBJECT.lookup())


@pytest.mark.parametrize("mutate,reason", [
    (lambda v: v.update(type=["VerifiableCredential"]), "type must be"),
    (lambda v: v.update(type=["VerifiableCredential", {"OAPConformance": 1}]), "type must be"),  # not a TypeError
    (lambda v: v.update({"@context": ["https://www.w3.org/2018/credentials/v1"]}), "@context must be"),
    (lambda v: v["credentialSubject"].update(id="did:web:other.example"), "credentialSubject.id must be the issuer"),
    (lambda v: v.update(issuer={"id": SUBJECT.did}), "issuer must be"),
    (lambda v: v.pop("validUntil"), "missing field"),
    (lambda v: v.update(credentialStatus={}), "unknown field"),
    (lambda v: v["credentialSubject"].update(extra=1), "unknown field"),
    (lambda v: v.update(proof=[]), "proof must be"),
])
def test_vc_schema(mutate, reason):
    vc = vc_of(compact("L4"), WITNESSES[:1])
    mutate(vc)
    with pytest.raises(InvalidInput, match=reason):
        validate_conformance(vc, now=NOW, lookup=SUBJECT.lookup())


def test_vc_level_rules_are_the_compact_forms():
    key_subject = bytes([2]) * 32
    unsigned = to_vc(claims_of({**claims_of(compact("L3")), "subject": did(key_subject)}))
    with pytest.raises(Forbidden, match="publisher check"):
        validate_conformance(add_proof(unsigned, key_subject), now=NOW)
    with pytest.raises(InvalidInput, match="needs at least 1 witness"):
        validate_conformance(vc_of(compact("L4"), []), now=NOW, lookup=SUBJECT.lookup())
    with pytest.raises(Forbidden, match="is not independent"):
        validate_conformance(vc_of(compact("L4"), [SUBJECT.seed]), now=NOW, lookup=SUBJECT.lookup())
    with pytest.raises(InvalidInput, match="expired"):
        validate_conformance(vc_of(compact("L4"), WITNESSES[:1]), now=NOW + timedelta(days=90),
                             lookup=SUBJECT.lookup())
