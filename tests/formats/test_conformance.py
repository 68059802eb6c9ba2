"""tlog.formats.conformance: OAP conformance receipts (OAP-CORE-1.0 §31, docs/architecture.md §5)."""
from __future__ import annotations

import copy
import dataclasses
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlog.errors import Forbidden, InvalidInput
from tlog.formats import ed25519
from tlog.formats.canonical import jcs
from tlog.formats.conformance import (
    ConformanceReceipt,
    sign_conformance,
    signing_bytes,
    witness_signature,
)
from tlog.formats.conformance import validate_conformance as _validate
from tlog.formats.did import did_key_from_public
from tlog.formats.diddoc import lookup_from
from tlog.formats.encoding import b64dec, b64enc

from tests.support.conformance import WebSubject, audit_for, web_receipt

NOW = datetime(2026, 5, 2, 10, 0, 0, tzinfo=UTC)
SUBJECT_SEED = bytes([1]) * 32
WITNESS_SEEDS = [bytes([10 + i]) * 32 for i in range(5)]
AUDITOR_SEED = bytes([30]) * 32
SUBJECT = WebSubject("did:web:impl.example", SUBJECT_SEED)  # L3+ needs a did:web publisher (§31)
LOOKUP = SUBJECT.lookup()


def validate_conformance(receipt: object, **kw: Any) -> ConformanceReceipt:
    """The module under test, with the subject's DID document pinned (as a log or registry
    holds it after resolving it)."""
    kw.setdefault("lookup", LOOKUP)
    return _validate(receipt, **kw)


def did_of(seed: bytes) -> str:
    return did_key_from_public(ed25519.public_from_seed(seed))


def ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def unsigned(level: str = "L3", **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "urn:oap:conformance:01J9V8TEST",
        "subject": SUBJECT.did,
        "level": level,
        "profile": "commercial",
        "suite": {"name": "oap-test-suite", "version": "1.0.3"},
        "results_digest": "sha256:" + "ab" * 32,
        "issued_at": ts(NOW - timedelta(days=1)),
        "expires_at": ts(NOW + timedelta(days=60)),
    }
    if level == "L5":
        body["audit"] = audit_for(SUBJECT.did, AUDITOR_SEED)
    body.update(over)
    return body


def make(level: str = "L3", witnesses: int = 0, **over: Any) -> dict[str, Any]:
    receipt = sign_conformance(unsigned(level, **over), SUBJECT_SEED, by=SUBJECT.key_id)
    for seed in WITNESS_SEEDS[:witnesses]:
        receipt["signatures"].append(witness_signature(receipt, seed))
    return receipt


def resign(receipt: dict[str, Any], witnesses: int = 0) -> dict[str, Any]:
    """Re-sign after editing fields, so only the edited rule can fail."""
    out = sign_conformance(receipt, SUBJECT_SEED, by=SUBJECT.key_id)
    for seed in WITNESS_SEEDS[:witnesses]:
        out["signatures"].append(witness_signature(out, seed))
    return out


# --- acceptance ------------------------------------------------------------------


@pytest.mark.parametrize(
    "level,witnesses",
    [("L0", 0), ("L1", 0), ("L2", 0), ("L3", 0), ("L1-NC", 0), ("L3-NC", 0), ("L3", 2), ("L4", 1), ("L4", 2), ("L5", 3), ("L5", 5)],
)
def test_valid_receipts(level: str, witnesses: int) -> None:
    r = make(level, witnesses, **({"profile": "non-commercial"} if level.endswith("-NC") else {}))
    got = validate_conformance(r, now=NOW)
    assert (got.audit is not None) == (level == "L5")
    assert dataclasses.replace(got, audit=None, signing_keys=()) == ConformanceReceipt(
        id="urn:oap:conformance:01J9V8TEST",
        subject=SUBJECT.did,
        level=level,
        issued_at=NOW - timedelta(days=1),
        expires_at=NOW + timedelta(days=60),
        witnesses=tuple(did_of(s) for s in WITNESS_SEEDS[:witnesses]),
    )
    # the key each signature verified with, as a did:key (§28.5: what a key revocation names)
    assert dict(got.signing_keys) == {SUBJECT.did: did_of(SUBJECT_SEED), **{did_of(s): did_of(s) for s in
                                      WITNESS_SEEDS[:witnesses]}, **({did_of(AUDITOR_SEED): did_of(AUDITOR_SEED)}
                                                                     if level == "L5" else {})}


@pytest.mark.parametrize("level, profile, message", [
    ("L1-NC", "commercial", "level L1-NC is the Non-Commercial Profile (§31): its profile must be 'non-commercial', "
                            "not 'commercial'"),
    ("L3-NC", "standard", "level L3-NC is the Non-Commercial Profile"),
    ("L3", "non-commercial", "profile 'non-commercial' waives requirements of level L3 (§31)"),
    ("L5", "non-commercial", "profile 'non-commercial' waives requirements of level L5"),
])
def test_the_non_commercial_profile_goes_with_its_levels_only(level: str, profile: str, message: str) -> None:
    """§31: L1-NC and L3-NC are L1 and L3 with the Wallet, Subscription and refund requirements
    waived, produced under `--profile non-commercial`: a receipt saying otherwise contradicts
    itself (signed as it is, so only the profile rule can fail)."""
    with pytest.raises(InvalidInput, match=re.escape(message)):
        validate_conformance(make(level, 3 if level == "L5" else 0, profile=profile), now=NOW)
    assert validate_conformance(make("L0", profile="non-commercial"), now=NOW).level == "L0"


def test_signature_order_does_not_matter() -> None:
    r = make("L5", 3)
    r["signatures"].reverse()
    assert validate_conformance(r, now=NOW).witnesses == tuple(did_of(s) for s in reversed(WITNESS_SEEDS[:3]))


def test_signatures_cover_jcs_without_signatures() -> None:
    r = make("L4", 1)
    msg = jcs({k: v for k, v in r.items() if k != "signatures"})
    assert signing_bytes(r) == msg
    for sig in r["signatures"]:
        seed = SUBJECT_SEED if sig["by"] == SUBJECT.key_id else WITNESS_SEEDS[0]
        assert b64dec(sig["value"]) == ed25519.sign(seed, msg)


def test_fractional_seconds_accepted() -> None:
    r = make(issued_at="2026-05-01T10:00:00.215Z")
    assert validate_conformance(r, now=NOW).issued_at == datetime(2026, 5, 1, 10, 0, 0, 215000, tzinfo=UTC)


# --- level rules -----------------------------------------------------------------


@pytest.mark.parametrize("level,witnesses", [("L4", 0), ("L5", 0), ("L5", 1), ("L5", 2)])
def test_too_few_witnesses(level: str, witnesses: int) -> None:
    with pytest.raises(InvalidInput, match=f"level {level} needs at least"):
        validate_conformance(make(level, witnesses), now=NOW)


def test_duplicate_witness_does_not_count_twice() -> None:
    r = make("L5", 2)
    r["signatures"].append(witness_signature(r, WITNESS_SEEDS[0]))
    with pytest.raises(InvalidInput, match="duplicate witness"):
        validate_conformance(r, now=NOW)


def test_subject_cannot_witness_itself() -> None:
    r = make("L4", 0)
    r["signatures"].append({**witness_signature(r, SUBJECT_SEED), "by": SUBJECT.key_id})
    with pytest.raises(InvalidInput, match=r"exactly one self signature.*has 2"):
        validate_conformance(r, now=NOW)


def test_the_subjects_own_key_under_another_name_is_not_an_independent_witness() -> None:
    """§31 independence, rule 4: the did:key of a key the subject's DID document lists is
    the subject under another name."""
    r = make("L4", 0)
    r["signatures"].append(witness_signature(r, SUBJECT_SEED))  # by the did:key of the subject's key
    with pytest.raises(Forbidden, match=f"witness {did_of(SUBJECT_SEED)} is not independent of the subject "
                                        f"{SUBJECT.did}: it holds a key that the subject's DID document lists"):
        validate_conformance(r, now=NOW)


def test_missing_self_signature() -> None:
    r = make("L4", 1)
    r["signatures"] = r["signatures"][1:]
    with pytest.raises(InvalidInput, match=r"exactly one self signature.*has 0"):
        validate_conformance(r, now=NOW)


def test_raising_the_level_breaks_the_self_signature() -> None:
    r = make("L3", 3)
    r["level"] = "L5"
    with pytest.raises(InvalidInput, match="self signature does not verify"):
        validate_conformance(r, now=NOW)


def test_tampered_witness_signature() -> None:
    r = make("L4", 1)
    raw = bytearray(b64dec(r["signatures"][1]["value"]))
    raw[0] ^= 1
    r["signatures"][1]["value"] = b64enc(bytes(raw))
    with pytest.raises(InvalidInput, match=r"signatures\[1\]: witness signature by did:key:.* does not verify"):
        validate_conformance(r, now=NOW)


def test_witness_signature_by_wrong_key() -> None:
    r = make("L4", 0)
    sig = witness_signature(r, WITNESS_SEEDS[0])
    sig["by"] = did_of(WITNESS_SEEDS[1])
    r["signatures"].append(sig)
    with pytest.raises(InvalidInput, match="does not verify"):
        validate_conformance(r, now=NOW)


def test_self_signature_by_other_key_claiming_subject() -> None:
    r = make("L3")
    forged = sign_conformance(unsigned(subject=did_of(WITNESS_SEEDS[0])), WITNESS_SEEDS[0])
    r["signatures"] = [{**forged["signatures"][0], "by": r["subject"]}]
    with pytest.raises(InvalidInput, match="self signature does not verify"):
        validate_conformance(r, now=NOW)


@pytest.mark.parametrize(
    "mutate,reason",
    [
        (lambda s: s.update(alg="ES256"), "alg must be EdDSA for the key that signed"),
        (lambda s: s.update(alg="RS256"), "alg must be one of EdDSA, ES256, ES256K"),
        (lambda s: s.update(by="did:web:witness.example"), "no pinned DID document for did:web:witness.example"),
        (lambda s: s.update(by="ed25519:" + b64enc(bytes(32))), "by must be a DID"),
        (lambda s: s.update(value=b64enc(bytes(63))), "64-byte"),
        (lambda s: s.update(value="not base64!"), "base64"),
        (lambda s: s.update(value=5), "base64 string"),
        (lambda s: s.update(extra=1), "exactly"),
        (lambda s: s.pop("alg"), "exactly"),
    ],
)
def test_bad_signature_objects(mutate: Any, reason: str) -> None:
    r = make("L4", 1)
    mutate(r["signatures"][1])
    with pytest.raises(InvalidInput, match=reason):
        validate_conformance(r, now=NOW)


@pytest.mark.parametrize("sigs", [[], {}, None, "sig", [None], [["by", "alg", "value"]]])
def test_signatures_member_shape(sigs: object) -> None:
    r = make("L3")
    r["signatures"] = sigs
    with pytest.raises(InvalidInput, match="signatures"):
        validate_conformance(r, now=NOW)


# --- time rules ------------------------------------------------------------------


def test_validity_exactly_90_days_accepted_one_second_more_refused() -> None:
    issued = NOW - timedelta(days=1)
    ok = make(issued_at=ts(issued), expires_at=ts(issued + timedelta(days=90)))
    assert validate_conformance(ok, now=NOW).expires_at - validate_conformance(ok, now=NOW).issued_at == timedelta(days=90)
    bad = make(issued_at=ts(issued), expires_at=ts(issued + timedelta(days=90, seconds=1)))
    with pytest.raises(InvalidInput, match="exceeds 90 days"):
        validate_conformance(bad, now=NOW)
    with pytest.raises(InvalidInput, match="exceeds 90 days"):
        validate_conformance(make(expires_at=ts(NOW + timedelta(days=365))), now=NOW)


@pytest.mark.parametrize("delta", [timedelta(0), timedelta(seconds=-1)])
def test_expires_must_follow_issued(delta: timedelta) -> None:
    issued = NOW - timedelta(days=1)
    r = make(issued_at=ts(issued), expires_at=ts(issued + delta))
    with pytest.raises(InvalidInput, match="expires_at must be after issued_at"):
        validate_conformance(r, now=NOW)


def test_expiry_at_now() -> None:
    r = make(expires_at=ts(NOW + timedelta(days=1)))
    validate_conformance(r, now=NOW + timedelta(days=1) - timedelta(microseconds=1))
    with pytest.raises(InvalidInput, match="expired"):
        validate_conformance(r, now=NOW + timedelta(days=1))
    with pytest.raises(InvalidInput, match="expired"):
        validate_conformance(r, now=NOW + timedelta(days=30))


def test_issued_in_the_future_beyond_skew() -> None:
    r = make(issued_at=ts(NOW + timedelta(minutes=5)))
    assert validate_conformance(r, now=NOW).issued_at == NOW + timedelta(minutes=5)
    r = make(issued_at=ts(NOW + timedelta(minutes=5, seconds=1)))
    with pytest.raises(InvalidInput, match="issued_at is in the future"):
        validate_conformance(r, now=NOW)


@pytest.mark.parametrize(
    "value",
    [
        "2026-05-01T10:00:00+00:00",
        "2026-05-01T10:00:00z",
        "2026-05-01t10:00:00Z",
        "2026-05-01T10:00:00",
        "2026-05-01 10:00:00Z",
        "2026-05-01T10:00:00.1234567Z",
        "2026-05-01T10:00:00.Z",
        "2026-02-30T10:00:00Z",
        "2026-05-01T10:00:60Z",
        "2026-05-01T24:00:00Z",
        "2026-5-01T10:00:00Z",
        "\uff12026-05-01T10:00:00Z",
        1777629600,
        None,
    ],
)
def test_bad_timestamps(value: object) -> None:
    with pytest.raises(InvalidInput, match="issued_at"):
        validate_conformance(make(issued_at=value), now=NOW)


def test_naive_now_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        validate_conformance(make(), now=NOW.replace(tzinfo=None))


# --- schema ----------------------------------------------------------------------

FIELDS = ["id", "subject", "level", "profile", "suite", "results_digest", "issued_at", "expires_at", "signatures"]


@pytest.mark.parametrize("field", FIELDS)
def test_missing_field(field: str) -> None:
    r = make()
    del r[field]
    with pytest.raises(InvalidInput, match=f"missing field\\(s\\): {field}"):
        validate_conformance(r, now=NOW)


def test_unknown_field() -> None:
    r = resign({**unsigned(), "comment": "hi"})
    with pytest.raises(InvalidInput, match="unknown field\\(s\\): comment"):
        validate_conformance(r, now=NOW)


@pytest.mark.parametrize(
    "field,value,reason",
    [
        ("id", "urn:oap:receipt:1", "id must be"),
        ("id", "urn:oap:conformance:", "id must be"),
        ("id", "urn:oap:conformance:a b", "id must be"),
        ("id", "urn:oap:conformance:" + "x" * 237, "id must be"),
        ("id", 7, "id must be"),
        ("subject", "did:web:other.example", "does not verify"),
        ("subject", "did:web:impl.example#key-1", "subject must be a DID"),
        ("subject", "ed25519:" + b64enc(bytes(32)), "subject"),
        ("level", "L6", "level must be one of"),
        ("level", "l4", "level must be one of"),
        ("level", "L2-NC", "level must be one of"),
        ("level", 4, "level must be one of"),
        ("profile", "", "profile"),
        ("profile", ["commercial"], "profile"),
        ("suite", {"name": "s"}, "suite"),
        ("suite", {"name": "s", "version": "1", "x": "y"}, "suite"),
        ("suite", {"name": "s", "version": 1}, "suite"),
        ("suite", "oap-test-suite@1.0", "suite"),
        ("results_digest", "sha256:" + "ab" * 31, "results_digest"),
        ("results_digest", "sha512:" + "ab" * 32, "results_digest"),
        ("results_digest", "sha256:" + "ab" * 31 + "  ", "results_digest"),
        ("results_digest", "sha256:" + "zz" * 32, "results_digest"),
    ],
)
def test_bad_fields(field: str, value: object, reason: str) -> None:
    if field == "subject":  # cannot be signed for; the subject is checked before signatures
        r = make()
        r[field] = value
    else:
        r = resign(unsigned(**{field: value}))  # signatures valid: only the field is wrong
    with pytest.raises(InvalidInput, match=reason):
        validate_conformance(r, now=NOW)


def test_id_of_256_chars_accepted() -> None:
    rid = "urn:oap:conformance:" + "x" * 236
    assert len(rid) == 256
    assert validate_conformance(make(id=rid), now=NOW).id == rid


def test_subject_must_match_signing_key() -> None:
    with pytest.raises(InvalidInput, match="subject is not the did:key"):
        sign_conformance(unsigned(), WITNESS_SEEDS[0])
    # a subject whose key never signed is caught by validation too
    r = make()
    r["subject"] = did_of(WITNESS_SEEDS[0])
    with pytest.raises(InvalidInput, match=r"exactly one self signature|does not verify"):
        validate_conformance(r, now=NOW)


@pytest.mark.parametrize("receipt", [None, [], "receipt", 5, {"id": 1.5}])
def test_not_an_object(receipt: object) -> None:
    with pytest.raises(InvalidInput):
        validate_conformance(receipt, now=NOW)


# --- fuzz ------------------------------------------------------------------------

junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20) | st.floats() | st.binary(max_size=8),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=8,
)


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_mutations_raise_only_invalid_input(data: st.DataObject) -> None:
    r = make("L4", data.draw(st.integers(0, 3)))
    target: Any = r
    if data.draw(st.booleans()):
        target = data.draw(st.sampled_from([r, r["suite"], r["signatures"][0], r["signatures"]]))
    if isinstance(target, list):
        target.append(data.draw(junk))
    elif data.draw(st.booleans()) and target:
        key = data.draw(st.sampled_from(sorted(target)))
        target[key] = data.draw(junk)
    else:
        target[data.draw(st.text(max_size=10))] = data.draw(junk)
    before = copy.deepcopy(r)
    try:
        validate_conformance(r, now=NOW)
    except (InvalidInput, Forbidden):
        pass
    assert r == before  # validation never mutates its input


# --- L5 audit attestation (§31) ----------------------------------------------------------------


def _with_audit(audit: dict[str, Any]) -> dict[str, Any]:
    return make("L5", 3, audit=audit)


def test_l5_needs_an_audit_attestation() -> None:
    body = unsigned("L5")
    del body["audit"]
    r = sign_conformance(body, SUBJECT_SEED, by=SUBJECT.key_id)
    for seed in WITNESS_SEEDS[:3]:
        r["signatures"].append(witness_signature(r, seed))
    with pytest.raises(InvalidInput, match="level L5 needs an audit attestation"):
        validate_conformance(r, now=NOW)


def test_audit_anchor_must_be_the_auditors_entry_of_the_digest() -> None:
    from tlog.formats.audit import sign_audit
    from tlog.formats.entries import canonical_entry

    from tests.support.conformance import audit_entry, memlog_bundle
    from tests.support.witness import MemLog

    good = audit_for(SUBJECT.did, AUDITOR_SEED)
    assert validate_conformance(_with_audit(good), now=NOW).audit.auditor == did_of(AUDITOR_SEED)
    log = MemLog(origin="audit.example/log", seed=bytes([77]) * 32)
    other_doc = memlog_bundle(canonical_entry(audit_entry(AUDITOR_SEED, b"another document")), log)
    by_other = memlog_bundle(canonical_entry(audit_entry(WITNESS_SEEDS[4])), log)
    for anchor, reason in ((other_doc, "not a receipt entry of the attestation's digest"),
                           (by_other, "not by the auditor"), ("not a bundle", "anchor")):
        ref = {k: good[k] for k in ("standard", "uri", "digest")} | {"anchor": anchor}
        with pytest.raises(InvalidInput, match=reason):
            validate_conformance(_with_audit(sign_audit(SUBJECT.did, ref, AUDITOR_SEED)), now=NOW)
    with pytest.raises(InvalidInput, match="auditor's signature"):
        validate_conformance(_with_audit({**good, "uri": "https://elsewhere.example/r.json"}), now=NOW)
    with pytest.raises(InvalidInput, match="exactly the fields"):
        validate_conformance(_with_audit({k: v for k, v in good.items() if k != "anchor"}), now=NOW)


def test_witnesses_that_are_one_party_count_once() -> None:
    """§31 L5 counts independent parties: one key as a did:key and two did:web names is one
    witness, two did:web on one host are one; an L5 receipt needs three parties."""
    w = bytes([40]) * 32
    issued = NOW - timedelta(days=1)
    wa, wb = WebSubject("did:web:wa.example", w), WebSubject("did:web:wb.example", w)
    lookup = lookup_from([(SUBJECT.did, SUBJECT.document), (wa.did, wa.document), (wb.did, wb.document)])
    with pytest.raises(Forbidden, match=re.escape(
            f"level L5 needs at least 3 independent peer witnesses, and its 3 witnesses are 1 party "
            f"({did_of(w)} = {wa.did} = {wb.did}): {wa.did}: it holds a key that the witness {did_of(w)}'s DID "
            "document lists (the same public key)")):
        validate_conformance(web_receipt(SUBJECT, "L5", witnesses=(w, wa, wb), audit=unsigned("L5")["audit"],
                                         issued=issued), now=NOW, lookup=lookup)
    h1, h2 = WebSubject("did:web:w.example", WITNESS_SEEDS[0]), WebSubject("did:web:ci.w.example", WITNESS_SEEDS[1])
    lookup = lookup_from([(SUBJECT.did, SUBJECT.document), (h1.did, h1.document), (h2.did, h2.document)])
    two_parties = web_receipt(SUBJECT, "L5", witnesses=(WITNESS_SEEDS[2], h1, h2), audit=unsigned("L5")["audit"],
                              issued=issued)
    with pytest.raises(Forbidden, match=r"are 2 parties .*subdomain of the witness did:web:w\.example's host"):
        validate_conformance(two_parties, now=NOW, lookup=lookup)
    four = web_receipt(SUBJECT, "L5", witnesses=(WITNESS_SEEDS[2], WITNESS_SEEDS[3], h1, h2),
                       audit=unsigned("L5")["audit"], issued=issued)
    assert validate_conformance(four, now=NOW, lookup=lookup).level == "L5"  # three parties among four
    # L4 needs one: two names of one party are still one witness
    l4 = web_receipt(SUBJECT, "L4", witnesses=(h1, h2), issued=issued)
    assert validate_conformance(l4, now=NOW, lookup=lookup).level == "L4"
