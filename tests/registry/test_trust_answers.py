"""Trust answers that must fail safe (OAP-CORE-1.0 §22, §22.1, §22.3, §28.5, §31;
docs/architecture.md §6.1), in-process: records validated and indexed as the writer does, at
chosen commit times (`tests.registry.test_standing.Registry`), answers read from
`registry.standing` and the status producer's `known` set.

- a credential's status is scoped by its issuer: a revoked credential asked for by its bare id
  never answers `good` (the id is refused, and never `known`);
- a did:web witness or auditor that signed with a key revoked for compromise (a `kind=key`
  revocation of the key's did:key, §28.5) does not count, as a did:key witness would not.
"""
from __future__ import annotations

import pytest

from registry.client import make_key_event, make_revocation
from registry.records import sign_record
from registry.standing import counting, epoch_record, standing, standings, token_epochs, whole_lists
from registry.statusverify import status_id_of
from tlog.errors import Forbidden, InvalidInput
from tlog.formats.diddoc import lookup_from
from tlog.formats.ed25519 import generate_seed

from tests.registry.test_standing import Registry
from tests.support.conformance import WebSubject, web_audit_for, web_receipt
from tests.support.registry import conformance_doc, did


def credential_revocation(issuer: bytes, cred: str, index: int, r: Registry, **kw) -> dict:
    body = make_revocation(issuer, kind="vc", subject=cred, effective_at=r.t(0), **kw)
    body["status_list_index"] = index
    return sign_record(body, issuer)


# --- a credential asked for without its issuer ----------------------------------------------


def test_a_revoked_credential_asked_for_by_its_bare_id_is_never_good():
    issuer, cred = generate_seed(), "https://issuer.example/cred/9"
    r = Registry()
    rec = r.submit(credential_revocation(issuer, cred, 9, r, reason="key_compromise"), 0)
    assert standing(r.index, rec.status_keys()[0], r.at(1)).status == "revoked"
    # the bare id is not a status id the registry knows (it would answer `good`) ...
    assert cred not in r.index.known and rec.status_keys()[0] in r.index.known
    # ... and asking for it is refused, saying how to ask
    with pytest.raises(InvalidInput, match=r"\?issuer="):
        status_id_of(cred)
    assert status_id_of(cred, did(issuer)) == rec.status_keys()[0]


@pytest.mark.parametrize("sid", ["did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
                                 "did:web:a.example#oauth_grants", "urn:oap:conformance:1"])
def test_dids_token_classes_and_receipt_ids_are_asked_for_without_an_issuer(sid):
    assert status_id_of(sid) == sid


# --- a did:web signer's compromised key ----------------------------------------------------


def web_net() -> tuple[WebSubject, WebSubject, bytes, Registry]:
    subj = WebSubject("did:web:impl.example", generate_seed())
    k = generate_seed()
    wit = WebSubject("did:web:witness.example", k)
    return subj, wit, k, Registry(lookup=lookup_from([(subj.did, subj.document), (wit.did, wit.document)]))


def compromise(k: bytes, r: Registry, minutes: float) -> dict:
    """The key's owner revokes it for compromise, from `minutes` (§28.5: a did:web participant
    revokes the key, its DID lives on with a new key)."""
    return make_revocation(k, kind="key", subject=did(k), reason="key_compromise", effective_at=r.t(minutes))


def test_a_did_web_witness_whose_key_was_compromised_before_it_signed_is_refused():
    subj, wit, k, r = web_net()
    r.submit(compromise(k, r, -60), 0)
    assert standing(r.index, did(k), r.at(1)).status == "revoked" and standing(r.index, wit.did, r.at(1)) is None
    with pytest.raises(Forbidden, match="key_compromise") as e:
        r.submit(conformance_doc(web_receipt(subj, "L4", witnesses=(wit,))), 1)
    assert e.value.data == {"witness": wit.did, "key": did(k), "reason": "key_compromise"}
    assert f"signed with the key {did(k)}" in e.value.message


def test_a_did_web_witness_compromise_found_later_revokes_the_receipt_with_the_key_as_evidence():
    subj, wit, k, r = web_net()
    rec = r.submit(conformance_doc(web_receipt(subj, "L4", witnesses=(wit,))), 0)
    assert rec.signing_key(wit.did) == did(k) and rec.signing_key(subj.did) == did(subj.seed)
    assert standing(r.index, rec.id, r.at(1)) is None
    revocation = r.submit(compromise(k, r, -60), 5)  # found at minute 5, suspected from an hour before
    s = standing(r.index, rec.id, r.at(6))
    assert s is not None and (s.status, s.reason, s.since) == ("revoked", "witness_invalid", rec.effective_at)
    assert s.signer == wit.did and s.record is revocation and s.via is rec
    assert s.signer_standing.key == did(k) and s.signer_standing.reason == "key_compromise"


def test_a_did_web_witness_compromise_dated_after_the_commit_leaves_the_receipt_good():
    subj, wit, k, r = web_net()
    rec = r.submit(conformance_doc(web_receipt(subj, "L4", witnesses=(wit,))), 0)
    r.submit(compromise(k, r, 2), 5)
    assert standing(r.index, rec.id, r.at(6)) is None  # the anchored commit proves the signature older


def test_a_did_web_auditor_whose_key_was_compromised_voids_the_audit():
    subj, _, _, r = web_net()
    a = generate_seed()
    auditor = WebSubject("did:web:auditor.example", a)
    r.lookup = lookup_from([(subj.did, subj.document), (auditor.did, auditor.document)])
    rec = r.submit(conformance_doc(web_receipt(subj, "L4", witnesses=(generate_seed(),),
                                               audit=web_audit_for(subj.did, auditor))), 0)
    assert rec.signing_key(auditor.did) == did(a)
    r.submit(compromise(a, r, -60), 5)
    s = standing(r.index, rec.id, r.at(6))
    assert s is not None and (s.reason, s.signer, s.signer_standing.key) == ("auditor_invalid", auditor.did, did(a))


def test_a_did_web_subject_whose_key_was_compromised_before_the_commit_loses_the_receipt():
    """The subject's own signature counts only while the key it made it with stands too: a did:web
    implementation that revoked its key for compromise keeps its DID, and the receipts that key
    signed by then no longer prove anything (the thief may have made them)."""
    subj, _, _, r = web_net()
    rec = r.submit(conformance_doc(web_receipt(subj, "L3")), 0)
    later = r.submit(conformance_doc(web_receipt(subj, "L3")), 10)
    revocation = r.submit(compromise(subj.seed, r, 5), 20)  # found at 20, suspected from 5
    s = standing(r.index, rec.id, r.at(21))
    assert standing(r.index, subj.did, r.at(21)) is None  # its DID stands
    assert s is None  # committed before the suspected compromise: the owner signed it
    s = standing(r.index, later.id, r.at(21))
    assert s is not None and (s.status, s.reason, s.since, s.record) == \
        ("revoked", "subject_invalid", later.effective_at, revocation)
    assert (s.signer, s.signer_standing.key) == (subj.did, did(subj.seed))
    with pytest.raises(Forbidden, match=f"signed it with the key {did(subj.seed)}") as e:
        r.submit(conformance_doc(web_receipt(subj, "L3")), 22)
    assert e.value.data == {"subject": subj.did, "key": did(subj.seed), "reason": "key_compromise"}


# --- a credential and its issuer's status lists agree ------------------------------------------


def test_a_credential_answers_revoked_once_its_issuer_is_revoked_for_cause_as_its_status_list_does():
    issuer = generate_seed()
    r = Registry()
    revocation = r.submit(make_revocation(issuer, kind="key", subject=did(issuer), reason="key_compromise",
                                          effective_at=r.t(0)), 0)
    body = make_revocation(issuer, kind="vc", subject="https://issuer.example/cred/1", effective_at=r.t(60 * 24))
    body["status_list_index"] = 5
    key = r.submit(sign_record(body, issuer), 1).status_keys()[0]  # its own revocation is a day away
    assert "revocation" in whole_lists(r.index, did(issuer), r.at(2))  # every bit of the list is set
    s = standing(r.index, key, r.at(2))
    assert s is not None and (s.status, s.since, s.reason, s.record) == \
        ("revoked", r.at(0), "key_compromise", revocation)


def test_a_credential_answers_suspended_while_its_issuer_is():
    issuer = generate_seed()
    r = Registry()
    key = r.submit(credential_revocation(issuer, "https://issuer.example/cred/2", 2, r, reason="unspecified"),
                   0).status_keys()[0]
    assert standing(r.index, key, r.at(1)).status == "revoked"  # its own revocation decides
    other = generate_seed()
    body = make_revocation(other, kind="vc", subject="https://issuer.example/cred/3", effective_at=r.t(600))
    body["status_list_index"] = 3
    later = r.submit(sign_record(body, other), 1).status_keys()[0]
    suspend = r.submit(make_key_event(other, subject=did(other), event="suspend"), 2)
    assert "suspension" in whole_lists(r.index, did(other), r.at(3))
    s = standing(r.index, later, r.at(3))
    assert s is not None and (s.status, s.record) == ("suspended", suspend)
    r.submit(make_key_event(other, subject=did(other), event="resume", effective_at=r.t(4)), 4)
    assert standing(r.index, later, r.at(5)) is None and not whole_lists(r.index, did(other), r.at(5))


# --- a receipt issued a little in the future ----------------------------------------------------


def test_a_receipt_issued_ahead_of_its_commit_is_judged_by_its_signers_at_once():
    """The registry accepts an issued_at up to 5 minutes ahead (clock skew); its signers are judged
    from the commit time, not from issued_at, so a compromise dated before the commit revokes it
    at once, before its issued_at comes."""
    subj = WebSubject("did:web:impl.example", generate_seed())
    w = generate_seed()
    r = Registry(lookup=lookup_from([(subj.did, subj.document)]))
    issued = r.at(4).replace(microsecond=0)
    rec = r.submit(conformance_doc(web_receipt(subj, "L4", witnesses=(w,), issued=issued)), 0)
    assert standing(r.index, rec.id, r.at(0.5)) is None
    r.submit(compromise(w, r, -10), 1)  # found at minute 1, suspected from before the commit
    for minute in (2, 5):
        s = standing(r.index, rec.id, r.at(minute))
        assert s is not None and (s.status, s.reason, s.since) == ("revoked", "witness_invalid", issued)


# --- a void recovery opens no token epoch --------------------------------------------------------


def test_a_token_epoch_named_by_a_void_recovery_is_not_an_epoch():
    """§6.1: a record that does not count has no effect at all; a `resume` signed with a key whose
    compromise is dated before its commit opens no token epoch, so its epoch id is not `good`."""
    p, c = generate_seed(), generate_seed()
    r = Registry()
    r.submit(make_key_event(p, subject=did(p), key=did(c), effective_at=r.t(0)), 0)  # C controls P
    rec = r.submit(make_key_event(c, subject=did(p), event="resume", effective_at=r.t(10)), 10)  # a thief with C
    eid = f"{did(p)}#oauth_grants@{rec.id}"
    assert epoch_record(r.index, did(p), rec.id) is rec
    r.submit(compromise(c, r, 5), 20)  # found later, dated before the resume's commit
    assert all(e.path != rec.path for e in counting(r.index, did(p)))  # void
    assert epoch_record(r.index, did(p), rec.id) is None and not token_epochs(r.index, did(p), r.at(30))
    assert standing(r.index, eid, r.at(30)) is None and eid not in standings(r.index, r.at(30))


# --- a dead principal's tokens ------------------------------------------------------------------


def test_the_tokens_of_a_principal_with_no_key_left_are_revoked_from_its_compromise():
    """A did:key principal with no controller revokes itself for compromise: nobody can ever pull
    its kill switch or recover it, and a thief may have issued its tokens, so they answer revoked
    from the compromise, in every epoch, for good."""
    p = generate_seed()
    r = Registry()
    revocation = r.submit(make_revocation(p, kind="did", subject=did(p), reason="key_compromise",
                                          effective_at=r.t(-5)), 0)
    s = standing(r.index, f"{did(p)}#oauth_grants", r.at(1))
    assert s is not None and (s.status, s.since, s.reason, s.record) == \
        ("revoked", r.at(-5), "key_compromise", revocation)
    assert standings(r.index, r.at(1))[f"{did(p)}#trust_tokens"].record is revocation


def test_a_principal_whose_controller_is_left_keeps_its_tokens_and_loses_them_with_its_last_controller():
    p, c = generate_seed(), generate_seed()
    r = Registry()
    r.submit(make_key_event(p, subject=did(p), key=did(c)), 0)
    revocation = r.submit(make_revocation(p, kind="key", subject=did(p), reason="key_compromise",
                                          effective_at=r.t(1)), 1)
    assert standing(r.index, f"{did(p)}#oauth_grants", r.at(2)) is None  # C can still rotate P to a new key
    r.submit(make_revocation(c, kind="key", subject=did(c), reason="cessation_of_operation",
                             effective_at=r.t(3)), 3)
    s = standing(r.index, f"{did(p)}#oauth_grants", r.at(4))
    assert s is not None and (s.status, s.since, s.record) == ("revoked", r.at(1), revocation)


def test_a_lost_key_suspends_and_a_superseded_one_does_nothing_to_the_tokens():
    p, q, k = generate_seed(), generate_seed(), generate_seed()
    r = Registry()
    r.submit(make_revocation(p, kind="did", subject=did(p), reason="loss_of_key", effective_at=r.t(0)), 0)
    assert standing(r.index, f"{did(p)}#oauth_grants", r.at(1)).status == "suspended"
    r.submit(make_key_event(q, subject=did(q), key=did(k), event="rotate", effective_at=r.t(0)), 0)
    assert standing(r.index, f"{did(q)}#oauth_grants", r.at(1)) is None
