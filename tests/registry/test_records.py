"""Registry records, layout, sorted-tree proofs and status lists: pure, no I/O."""
from __future__ import annotations

import base64
import gzip
import re
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.client import make_key_event, make_kill_switch, make_revocation
from registry.index import Index
from registry.layout import anchor_path, classify, record_path
from registry.records import (
    STATUS_LIST_BITS,
    check_record,
    check_rules,
    controllers,
    holds_high_level,
    sign_record,
    signing_bytes,
    validate_submission,
)
from registry.sortedtree import Leaf, SortedTree
from registry.standing import next_change, standings
from registry.status import build_tree
from registry.statuslist import add_proof, bit, decode_list, encode_list, verify_proof
from registry.statusverify import StatusVerificationError, verify_absence
from tlog.errors import Conflict, Forbidden, InvalidInput, SignatureError
from tlog.formats.canonical import jcs
from tlog.formats.conformance import sign_conformance
from tlog.formats.diddoc import lookup_from
from tlog.formats.ed25519 import generate_seed
from tlog.formats.ed25519 import sign as ed25519_sign
from tlog.formats.encoding import b64enc
from tlog.formats.hashing import sha256

from tests.support.conformance import WebSubject, audit_for, multikey, web_receipt
from tests.support.registry import conformance_doc, did, now_utc, receipt, utc

A, B, C, W1, W2, W3 = (generate_seed() for _ in range(6))


def state(*docs, bootstrap=()) -> Index:
    """An index holding `docs`, each validated in turn (as the writer does)."""
    idx = Index(bootstrap)
    for i, doc in enumerate(docs):
        rec, fresh = validate_submission(doc, idx, now_utc())
        assert fresh
        idx.add(rec, i)
    return idx


# --- layout ------------------------------------------------------------------------


def test_paths_are_sharded_by_the_hash_of_the_id():
    rid = "urn:oap:revocation:1"
    h = sha256(rid.encode()).hex()
    assert record_path("revocation", rid, "key") == f"revocations/key/{h[:2]}/{h[2:4]}/{h}.json"
    assert record_path("conformance", "urn:oap:conformance:x").startswith("conformance/")
    assert record_path("kill_switch", "urn:oap:kill-switch:x").startswith("killswitch/")
    assert record_path("key_event", "urn:oap:key-event:x").startswith("keys/")
    assert anchor_path(1234) == "anchors/1/1234.tlog-proof"
    assert classify(anchor_path(1234)).seq == 1234
    assert classify(record_path("revocation", rid, "vc")).kind == "vc"


@pytest.mark.parametrize("path", [
    "README.md", "revocations/key/01/00/" + "0" * 64 + ".json", "anchors/2/1234.tlog-proof",
    "revocations/other/ab/cd/" + "ab" * 32 + ".json", "conformance/ab/cd/" + "ab" * 32 + ".tlog-proof",
    "anchors/0/01.tlog-proof",
])
def test_paths_outside_the_layout_are_refused(path):
    with pytest.raises(InvalidInput):
        classify(path)


# --- revocations, controllers, kill switch ----------------------------------------------------


def test_self_revocation_of_a_key_is_valid_and_revokes_its_status_key():
    doc = make_revocation(A, kind="key", subject=did(A), reason="key_compromise")
    rec, fresh = validate_submission(doc, Index(), now_utc())
    assert fresh and rec.status_keys() == (did(A),)
    assert rec.content == jcs(doc) and rec.path.startswith("revocations/key/")


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(reason="because"), "reason"),
    (lambda d: d.update(kind="cert"), "kind"),
    (lambda d: d.update(extra=1), "unknown field"),
    (lambda d: d.pop("effective_at"), "missing"),
    (lambda d: d.update(id="urn:other:1"), "id must be"),
    (lambda d: d.update(effective_at="2026-01-01T00:00:00+01:00"), "RFC 3339"),
])
def test_schema_errors_name_the_problem(mutate, message):
    doc = make_revocation(A, kind="key", subject=did(A))
    mutate(doc)
    with pytest.raises(InvalidInput, match=message):
        check_record(doc, now=now_utc())


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(type=["revocation"]), "type must be one of"),
    (lambda d: d.update(reason=["key_compromise"]), "reason must be one of"),
])
def test_values_of_the_wrong_json_type_are_refused_not_a_crash(mutate, message):
    """A list where a name is expected (a status answer's record is checked with now=None, an
    answer comes from anyone) is invalid input, never a TypeError."""
    doc = make_revocation(A, kind="key", subject=did(A))
    mutate(doc)
    with pytest.raises(InvalidInput, match=message):
        check_record(doc, now=None)
    for field, value in (("event", ["suspend"]), ("reason", {"r": 1})):
        event = make_key_event(A, subject=did(A), event="suspend", reason="loss_of_key")
        event[field] = value
        with pytest.raises(InvalidInput, match=r"event must be one of|only suspend takes a reason"):
            check_record(event, now=None)


def test_a_modified_record_no_longer_verifies():
    doc = make_revocation(A, kind="did", subject=did(A))
    doc["reason"] = "superseded"
    with pytest.raises(InvalidInput, match="does not verify"):
        check_record(doc, now=now_utc())


def test_issued_in_the_future_is_refused():
    doc = make_revocation(A, kind="key", subject=did(A))
    doc["issued_at"] = utc(now_utc() + timedelta(hours=1))
    with pytest.raises(InvalidInput, match="future"):
        check_record(sign_record(doc, A), now=now_utc())


def test_only_the_subject_or_a_controller_may_revoke():
    with pytest.raises(Forbidden, match="controller"):
        validate_submission(make_revocation(B, kind="did", subject=did(A)), Index(), now_utc())
    idx = state(make_key_event(A, subject=did(A), key=did(B)))
    assert did(B) in controllers(idx, did(A), now_utc())
    rec, fresh = validate_submission(make_revocation(B, kind="did", subject=did(A)), idx, now_utc())
    assert fresh and rec.issued_by == did(B)


def test_rotate_retires_the_old_key_and_add_controller_does_not():
    D = generate_seed()
    idx = state(make_key_event(A, subject=did(A), key=did(D)),  # D: a recovery key beside A
                make_key_event(A, subject=did(A), key=did(B), event="rotate"))
    assert controllers(idx, did(A), now_utc()) == {did(B), did(D)}  # A itself is retired
    with pytest.raises(Forbidden, match="retired by a rotation"):
        validate_submission(make_key_event(A, subject=did(A), key=did(C)), idx, now_utc())
    rec, _ = validate_submission(make_key_event(B, subject=did(A), key=did(C), event="rotate"), idx, now_utc())
    idx.add(rec, 9)
    assert controllers(idx, did(A), now_utc()) == {did(C), did(D)}  # B retired by the next rotation
    with pytest.raises(Forbidden, match="retired by a rotation"):
        validate_submission(make_kill_switch(B, principal=did(A)), idx, now_utc())
    assert validate_submission(make_kill_switch(C, principal=did(A)), idx, now_utc())[1]


def test_a_did_web_controller_speaks_for_the_subject_with_its_document_keys():
    """Controllers and kill-switch principals named by any DID (OAP-CORE-1.0 §5.1, §5.3):
    an organisation's did:web recovers a did:key agent."""
    from registry.records import signing_bytes
    from tlog.formats.diddoc import lookup_from

    from tests.support.didhosts import Key, document

    org, org_key = "did:web:org.example", Key("P-256")
    lookup = lookup_from([(org, document(org, {"k": org_key}))])
    idx = state(make_key_event(A, subject=did(A), key=org, event="rotate"))
    assert controllers(idx, did(A), now_utc()) == {org}

    def by_org(body: dict) -> dict:
        body = {k: v for k, v in body.items() if k != "signature"} | {"issued_by": org}
        return body | {"signature": base64.b64encode(org_key.sign(signing_bytes(body))).decode()}

    kill = by_org(make_kill_switch(A, principal=did(A)))
    assert validate_submission(kill, idx, now_utc(), lookup=lookup)[1]
    with pytest.raises(InvalidInput, match="does not verify"):  # another key than the document's
        validate_submission(kill | {"signature": base64.b64encode(Key("P-256").sign(b"x")).decode()}, idx,
                            now_utc(), lookup=lookup)
    with pytest.raises(Forbidden, match="retired by a rotation"):  # the rotation retired A itself
        validate_submission(make_kill_switch(A, principal=did(A)), idx, now_utc())


def test_a_revoked_key_cannot_sign_new_records_but_can_revoke_itself_again():
    idx = state(make_revocation(A, kind="key", subject=did(A)))
    with pytest.raises(Forbidden, match="revoked"):
        validate_submission(make_key_event(A, subject=did(A), key=did(B)), idx, now_utc())
    _rec, fresh = validate_submission(make_revocation(A, kind="key", subject=did(A)), idx, now_utc())
    assert fresh


def test_a_revoked_controller_loses_its_authority_to_give_trust_not_to_take_it():
    idx = state(make_key_event(A, subject=did(A), key=did(B)), make_revocation(B, kind="key", subject=did(B)))
    assert did(B) not in controllers(idx, did(A), now_utc())
    for enabling in (make_key_event(B, subject=did(A), key=did(C), event="rotate"),
                     make_key_event(B, subject=did(A), event="resume")):
        with pytest.raises(Forbidden, match="is revoked"):
            validate_submission(enabling, idx, now_utc())
    # a revocation only takes trust away: the revoked controller may still sign it
    assert validate_submission(make_revocation(B, kind="did", subject=did(A)), idx, now_utc())[1]


def test_a_principal_that_revoked_its_own_key_for_compromise_can_still_pull_its_kill_switch():
    """§28.5 says to revoke a compromised key at once; §22.3 says every principal can pull its
    kill switch. Refusing the kill switch because the key is revoked failed unsafe: a kill
    switch, a revocation or a suspend only takes trust away (at worst a thief holding the key
    revokes the tokens). Anything that restores trust is still refused."""
    past = utc(now_utc() - timedelta(hours=1))
    idx = state(make_revocation(A, kind="key", subject=did(A), reason="key_compromise", effective_at=past))
    for restricting in (make_kill_switch(A), make_key_event(A, subject=did(A), event="suspend")):
        rec, fresh = validate_submission(restricting, idx, now_utc())
        assert fresh
        idx.add(rec, len(idx.order), now_utc())
    for restoring in (make_key_event(A, subject=did(A), event="resume"),
                      make_key_event(A, subject=did(A), key=did(B), event="rotate"),
                      make_key_event(A, subject=did(A), key=did(B))):
        with pytest.raises(Forbidden, match=f"signer {did(A)} is revoked"):
            validate_submission(restoring, idx, now_utc())
    # a key a rotation retired still signs nothing but its own revocation (docs §6.1 Rotation)
    idx = state(make_key_event(B, subject=did(B), key=did(C), event="rotate"))
    with pytest.raises(Forbidden, match="retired by a rotation"):
        validate_submission(make_kill_switch(B), idx, now_utc())


def test_same_id_other_content_is_a_conflict_and_same_record_is_a_duplicate():
    doc = make_revocation(A, kind="key", subject=did(A))
    idx = state(doc)
    _rec, fresh = validate_submission(doc, idx, now_utc())
    assert not fresh
    other = make_revocation(A, kind="key", subject=did(A), reason="superseded", record_id=doc["id"])
    with pytest.raises(Conflict):
        validate_submission(other, idx, now_utc())


def test_vc_revocations_are_scoped_to_their_issuer_and_need_an_index():
    with pytest.raises(InvalidInput, match="status_list_index"):
        check_record(make_revocation(A, kind="vc", subject="https://issuer.example/vc/1"), now=now_utc())
    with pytest.raises(InvalidInput, match="credential id"):
        check_record(make_revocation(A, kind="vc", subject=did(B) + "#oauth_grants", status_list_index=1),
                     now=now_utc())
    with pytest.raises(InvalidInput, match="0 to 131071"):
        check_record(make_revocation(A, kind="vc", subject="urn:uuid:1", status_list_index=STATUS_LIST_BITS),
                     now=now_utc())
    rec = check_record(make_revocation(A, kind="vc", subject="urn:uuid:1", status_list_index=7), now=now_utc())
    assert rec.status_keys() == (f"vc {did(A)} urn:uuid:1",) and rec.issuer_list == (0, 7)


def test_kill_switch_by_the_principal_revokes_its_four_token_classes():
    rec, _ = validate_submission(make_kill_switch(A), Index(), now_utc())
    assert set(rec.status_keys()) == {f"{did(A)}#{c}" for c in
                                      ("subscription_tokens", "oauth_grants", "trust_tokens", "webhook_subscriptions")}
    with pytest.raises(Forbidden):
        validate_submission(make_kill_switch(B, principal=did(A)), Index(), now_utc())


# --- conformance: §31 witness rule -----------------------------------------------------------


# did:web publishers (§31 L3+ publisher check), their documents as a registry resolved them.
SA, SW1, SW2, SW3 = (WebSubject(f"did:web:{n}.example", s) for n, s in (("a", A), ("w1", W1), ("w2", W2),
                                                                     ("w3", W3)))
DOCS = {p.did: p.document for p in (SA, SW1, SW2, SW3)}
LOOKUP = lookup_from(DOCS.items())


def submit(doc, idx, now=None, **kw):
    return validate_submission(doc, idx, now or now_utc(), lookup=LOOKUP, documents=DOCS, **kw)


def web_state(*docs, bootstrap=()) -> Index:
    idx = Index(bootstrap)
    for i, doc in enumerate(docs):
        rec, fresh = submit(doc, idx)
        assert fresh
        idx.add(rec, i)
    return idx


def test_l0_to_l2_need_no_witness_and_no_publisher():
    rec, fresh = validate_submission(conformance_doc(receipt(A, "L2")), Index(), now_utc())
    assert fresh and rec.level == "L2" and rec.subject == did(A)


@pytest.mark.parametrize("level", ["L3", "L3-NC"])
def test_l3_needs_a_did_web_publisher(level):
    with pytest.raises(Forbidden, match=f"level {level} needs the publisher check.*is a did:key"):
        validate_submission(conformance_doc(receipt(A, level)), Index(), now_utc())
    rec, fresh = submit(conformance_doc(web_receipt(SA, level)), Index())
    assert fresh and rec.level == level and rec.subject == SA.did


@pytest.mark.parametrize("level", ["L1-NC", "L3-NC"])
def test_a_non_commercial_level_needs_the_non_commercial_profile(level):
    """§31: L1-NC and L3-NC are produced under `--profile non-commercial`; one that says
    `commercial` is refused, and a non-commercial receipt claiming a full level too."""
    def with_profile(profile: str, lvl: str = level) -> dict:
        body = {k: v for k, v in web_receipt(SA, lvl).items() if k != "signatures"}
        return conformance_doc(sign_conformance({**body, "profile": profile}, SA.seed, by=SA.key_id))
    with pytest.raises(InvalidInput, match=f"level {level} is the Non-Commercial Profile"):
        submit(with_profile("commercial"), Index())
    with pytest.raises(InvalidInput, match="profile 'non-commercial' waives requirements of level L3"):
        submit(with_profile("non-commercial", "L3"), Index())
    rec, fresh = submit(with_profile("non-commercial"), Index())
    assert fresh and rec.level == level


@pytest.mark.parametrize("profile", ["noncommercial", "non_commercial", "Non-Commercial", "standard ", "", "free"])
def test_a_profile_that_is_not_one_of_the_suites_is_refused(profile):
    """§31: the profile is the test suite's --profile: the full profile (`standard`, or `commercial`)
    or `non-commercial`. Any other string would be read as the full profile and let a receipt that
    skipped the Wallet, Subscription and refund requirements claim L3: refused, saying the values."""
    body = {k: v for k, v in web_receipt(SA, "L3").items() if k != "signatures"}
    doc = conformance_doc(sign_conformance({**body, "profile": profile}, SA.seed, by=SA.key_id))
    with pytest.raises(InvalidInput, match="profile must be one of commercial, non-commercial, standard"):
        submit(doc, Index())


@pytest.mark.parametrize("profile", ["standard", "commercial"])
def test_the_full_profile_is_standard_or_commercial(profile):
    body = {k: v for k, v in web_receipt(SA, "L3").items() if k != "signatures"}
    rec, fresh = submit(conformance_doc(sign_conformance({**body, "profile": profile}, SA.seed, by=SA.key_id)),
                        Index())
    assert fresh and rec.level == "L3"


def test_l4_needs_one_peer_witness_of_any_standing_as_31_says():
    doc = conformance_doc(web_receipt(SA, "L4", witnesses=(W1,)))
    rec, fresh = submit(doc, Index())  # W1 holds no receipt: fine for L4
    assert fresh and rec.witnesses == (did(W1),)
    with pytest.raises(InvalidInput, match="at least 1 witness"):
        submit(conformance_doc(web_receipt(SA, "L4")), Index())


def test_l4_witness_standing_is_a_registry_setting():
    doc = conformance_doc(web_receipt(SA, "L4", witnesses=(SW1,)))
    with pytest.raises(Forbidden, match="L4/L5"):
        submit(doc, Index(), strict_l4=True)
    assert submit(doc, Index([SW1.did]), strict_l4=True)[1]
    idx = web_state(conformance_doc(web_receipt(SW1, "L4", witnesses=(W2,))), bootstrap=[did(W2)])
    assert holds_high_level(idx, SW1.did, now_utc())
    assert submit(doc, idx, strict_l4=True)[1]


def test_l5_needs_three_qualified_witnesses():
    idx = web_state(*(conformance_doc(web_receipt(w, "L4", witnesses=(C,))) for w in (SW1, SW2)),
                    bootstrap=[did(C)])
    audit = audit_for(SA.did, B)
    two = conformance_doc(web_receipt(SA, "L5", witnesses=(SW1, SW2, SW3), audit=audit))
    with pytest.raises(Forbidden, match="qualified: 2"):
        submit(two, idx)
    three = conformance_doc(web_receipt(SA, "L5", witnesses=(SW1, SW2, C), audit=audit))
    assert submit(three, idx)[1]


def test_an_expired_or_revoked_witness_receipt_does_not_qualify():
    w_receipt = web_receipt(SW1, "L4", witnesses=(C,), issued=now_utc() - timedelta(days=10),
                            valid=timedelta(days=20))
    idx = web_state(conformance_doc(w_receipt), bootstrap=[did(C), SW2.did, SW3.did])
    later = now_utc() + timedelta(days=11)
    assert holds_high_level(idx, SW1.did, now_utc()) and not holds_high_level(idx, SW1.did, later)
    l5 = conformance_doc(web_receipt(SA, "L5", witnesses=(SW1, SW2, SW3), audit=audit_for(SA.did, B)))
    assert submit(l5, idx)[1]  # SW1 qualifies while its receipt is valid
    revocation = sign_record({"type": "revocation", "id": "urn:oap:revocation:w1", "kind": "conformance",
                              "subject": w_receipt["id"], "reason": "superseded", "issued_at": utc(now_utc()),
                              "effective_at": utc(now_utc())}, W1)
    revocation["issued_by"] = SW1.key_id.split("#")[0]
    revocation = {**revocation, "signature": b64enc(ed25519_sign(W1, signing_bytes(revocation)))}
    rec, _ = submit(revocation, idx)
    idx.add(rec, 9)
    assert not holds_high_level(idx, SW1.did, now_utc())
    with pytest.raises(Forbidden, match="qualified: 2"):
        submit(l5, idx)


def test_a_conformance_revocation_needs_the_receipt_and_its_subject():
    r = receipt(A)
    with pytest.raises(InvalidInput, match="not in this registry"):
        validate_submission(make_revocation(A, kind="conformance", subject=r["id"]), Index(), now_utc())
    idx = state(conformance_doc(r))
    with pytest.raises(Forbidden):
        validate_submission(make_revocation(B, kind="conformance", subject=r["id"]), idx, now_utc())
    assert validate_submission(make_revocation(A, kind="conformance", subject=r["id"]), idx, now_utc())[1]


def test_expired_receipts_and_scheduled_revocations_show_in_status_at_their_time():
    r = receipt(A, valid=timedelta(days=1))
    later = utc(now_utc() + timedelta(hours=2))
    idx = state(conformance_doc(r), make_revocation(B, kind="key", subject=did(B), effective_at=later))
    assert standings(idx, now_utc()) == {}
    assert next_change(idx, now_utc()) == now_utc() + timedelta(hours=2)
    after = standings(idx, now_utc() + timedelta(days=2))
    assert after[r["id"]].reason == "expired" and did(B) in after
    assert check_rules(check_record(make_revocation(C, kind="key", subject=did(C)), now=now_utc()), idx, now_utc())


# --- sorted Merkle tree: non-revocation proofs ---------------------------------------------------


def _tree(keys) -> SortedTree:
    return SortedTree([Leaf(k, jcs({"id": k, "reason": "x", "record": "sha256:" + "0" * 64,
                                     "revoked_at": "2026-01-01T00:00:00Z"})) for k in keys])


@settings(max_examples=60, deadline=None)
@given(st.sets(st.text(alphabet="abcdz:#", min_size=1, max_size=4), max_size=12),
       st.text(alphabet="abcdz:#", min_size=1, max_size=4))
def test_absence_proofs_verify_exactly_for_absent_ids(keys, probe):
    t = _tree(keys)
    if probe in keys:
        with pytest.raises(KeyError):
            t.absence(probe)
        proof = t.membership(probe)
        assert t.leaves[proof["index"]].key == probe
    else:
        verify_absence(t.absence(probe), probe, t.size, t.root)
        for member in list(keys)[:3]:  # a proof for one id never vouches for a revoked one
            with pytest.raises(StatusVerificationError):
                verify_absence(t.absence(probe), member, t.size, t.root)


def test_absence_proof_with_a_gap_between_leaves_is_refused():
    t = _tree(["a", "c", "e"])
    proof = t.absence("d")  # brackets c (1) and e (2)
    forged = {**proof, "left": t.absence("b")["left"]}  # a (0) and e (2): skips c
    with pytest.raises(StatusVerificationError, match="adjacent"):
        verify_absence(forged, "d", t.size, t.root)
    with pytest.raises(StatusVerificationError):
        verify_absence(proof, "d", t.size, _tree(["a", "c"]).root)


@pytest.mark.parametrize("field, value", [("leaf", 7), ("leaf", None), ("inclusion_proof", [1]),
                                          ("inclusion_proof", [None]), ("index", "0")])
def test_a_leaf_of_the_wrong_json_type_is_a_verification_error_not_a_crash(field, value):
    t = _tree(["a", "c", "e"])
    proof = t.absence("d")
    forged = {**proof, "left": {**proof["left"], field: value}}
    with pytest.raises(StatusVerificationError, match="malformed"):
        verify_absence(forged, "d", t.size, t.root)


def test_empty_tree_proves_absence_with_no_leaves():
    t = build_tree({})
    verify_absence(t.absence("anything"), "anything", 0, t.root)


# --- W3C Bitstring Status List ------------------------------------------------------------------


def test_bitstring_encoding_follows_the_w3c_format():
    enc = encode_list([0, 42, STATUS_LIST_BITS - 1])
    assert enc.startswith("u") and "=" not in enc
    raw = gzip.decompress(base64.urlsafe_b64decode(enc[1:] + "=" * (-len(enc[1:]) % 4)))
    assert len(raw) * 8 >= 131072
    assert raw[0] == 0x80  # index 0 is the left-most bit
    bits = decode_list(enc)
    assert [i for i in (0, 1, 41, 42, 43, STATUS_LIST_BITS - 1) if bit(bits, i)] == [0, 42, STATUS_LIST_BITS - 1]
    assert encode_list([42, 0]) == encode_list([0, 42])  # deterministic bytes
    with pytest.raises(InvalidInput):
        decode_list("u" + base64.urlsafe_b64encode(gzip.compress(b"\0" * 100)).decode().rstrip("="))


def test_eddsa_jcs_2022_proof_verifies_and_detects_tampering():
    doc = {"@context": ["https://www.w3.org/ns/credentials/v2"], "id": "urn:x", "credentialSubject": {"n": 1}}
    secured = add_proof(doc, A, did(A), now_utc())
    from tlog.formats.ed25519 import public_from_seed

    verify_proof(secured, public_from_seed(A))
    with pytest.raises(SignatureError):
        verify_proof({**secured, "credentialSubject": {"n": 2}}, public_from_seed(A))
    with pytest.raises(SignatureError):
        verify_proof(secured, public_from_seed(B))


# --- §31 independence of witnesses and auditors ------------------------------------------------


def test_a_controller_of_the_subject_is_not_an_independent_witness():
    event = sign_record({"type": "key_event", "id": "urn:oap:key-event:c", "subject": SA.did, "event": "add_controller",
                         "key": did(W1), "issued_at": utc(now_utc()), "effective_at": utc(now_utc())}, A)
    event["issued_by"] = SA.did
    event["signature"] = b64enc(ed25519_sign(A, signing_bytes(event)))
    idx = web_state(event)
    doc = conformance_doc(web_receipt(SA, "L4", witnesses=(W1,)))
    with pytest.raises(Forbidden, match=f"witness {did(W1)} is not independent of the subject {SA.did}: it is a "
                                        "controller of the subject"):
        submit(doc, idx)
    assert submit(doc, Index())[1]  # the same receipt before the key event


@pytest.mark.parametrize("witness_did, rule", [
    ("did:web:a.example:team", "on the subject's host a.example"),
    ("did:web:a.example%3A8443", "on the subject's host a.example"),
    ("did:web:ci.a.example", "subdomain of the subject's host a.example"),
    ("did:web:example", "parent domain of the subject's host a.example"),
])
def test_a_did_web_on_the_subjects_host_is_not_independent(witness_did, rule):
    w = WebSubject(witness_did, W2)
    docs = {**DOCS, w.did: w.document}
    doc = conformance_doc(web_receipt(SA, "L4", witnesses=(w,)))
    with pytest.raises(Forbidden, match=f"witness {re.escape(w.did)} is not independent.*{rule}"):
        validate_submission(doc, Index(), now_utc(), lookup=lookup_from(docs.items()), documents=docs)


def test_a_sibling_host_and_an_unrelated_host_are_independent():
    for witness_did in ("did:web:b.example", "did:web:w.other.example"):
        w = WebSubject(witness_did, W2)
        docs = {**DOCS, w.did: w.document}
        doc = conformance_doc(web_receipt(SA, "L4", witnesses=(w,)))
        assert validate_submission(doc, Index(), now_utc(), lookup=lookup_from(docs.items()), documents=docs)[1]


def test_a_key_or_name_the_subjects_document_lists_is_not_independent():
    # The subject's document lists a second key (#backup) and names a partner in alsoKnownAs.
    listed = WebSubject(SA.did, A)
    listed.document["verificationMethod"].append({"id": f"{SA.did}#backup", "type": "Multikey",
                                                  "controller": SA.did, "publicKeyMultibase": multikey(W1)})
    listed.document["alsoKnownAs"] = [SW2.did]
    docs = {**DOCS, SA.did: listed.document}
    lookup = lookup_from(docs.items())
    backup = conformance_doc(web_receipt(SA, "L4", witnesses=(W1,)))
    with pytest.raises(Forbidden, match="holds a key that the subject's DID document lists"):
        validate_submission(backup, Index(), now_utc(), lookup=lookup, documents=docs)
    aka = conformance_doc(web_receipt(SA, "L4", witnesses=(SW2,)))
    with pytest.raises(Forbidden, match="the subject's DID document names it"):
        validate_submission(aka, Index(), now_utc(), lookup=lookup, documents=docs)


def test_the_auditor_must_be_independent_too():
    idx = Index([did(C), SW1.did, SW2.did])
    own_audit = audit_for(SA.did, A)  # the subject audits itself with its own key
    doc = conformance_doc(web_receipt(SA, "L5", witnesses=(SW1, SW2, C), audit=own_audit))
    with pytest.raises(Forbidden, match=f"auditor {did(A)} is not independent"):
        submit(doc, idx)


def test_l5_witnesses_that_are_one_party_count_once():
    """§31 L5 "at least three independent peer witnesses": one key published as a did:key
    and two did:web names is one party, whatever the registry thinks of each DID; so are two
    witnesses one of which controls the other. Three independent ones still pass."""
    wa, wb = WebSubject("did:web:wa.example", W1), WebSubject("did:web:wb.example", W1)  # one key, three names
    docs = {**DOCS, wa.did: wa.document, wb.did: wb.document}
    audit = audit_for(SA.did, B)
    idx = Index([did(W1), wa.did, wb.did, SW2.did, SW3.did, did(C)])  # all bootstrap witnesses: all qualified
    one = conformance_doc(web_receipt(SA, "L5", witnesses=(W1, wa, wb), audit=audit))
    with pytest.raises(Forbidden) as e:
        validate_submission(one, idx, now_utc(), lookup=lookup_from(docs.items()), documents=docs)
    assert f"needs at least 3 independent peer witnesses, and its 3 witnesses are 1 party " \
           f"({did(W1)} = {wa.did} = {wb.did})" in e.value.message
    assert e.value.data["witness"] == wa.did and "the same public key" in e.value.data["rule"]
    # a key event makes C a controller of SW2: C and SW2 are one party (the registry's fuller facts)
    event = sign_record({"type": "key_event", "id": "urn:oap:key-event:w2", "subject": SW2.did,
                         "event": "add_controller", "key": did(C), "issued_at": utc(now_utc()),
                         "effective_at": utc(now_utc())}, W2)
    event["issued_by"] = SW2.did
    event["signature"] = b64enc(ed25519_sign(W2, signing_bytes(event)))
    rec, fresh = submit(event, idx)
    assert fresh
    idx.add(rec, 0)
    controlled = conformance_doc(web_receipt(SA, "L5", witnesses=(SW2, C, SW3), audit=audit))
    with pytest.raises(Forbidden, match=f"3 independent qualified peer witnesses, and its 3 qualified witnesses are 2 "
                                        f"parties .*{re.escape(did(C))}: it is a controller of the witness {SW2.did}"):
        submit(controlled, idx)
    assert submit(controlled, Index([did(C), SW2.did, SW3.did]))[1]  # before the key event: three parties
    three = conformance_doc(web_receipt(SA, "L5", witnesses=(W1, SW2, SW3), audit=audit))
    assert submit(three, idx)[1]
