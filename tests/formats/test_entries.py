"""tlog.formats.entries: OAP log entries (docs/architecture.md §3.1)."""
from __future__ import annotations

import hashlib
import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlog.errors import InvalidInput, TooLarge
from tlog.formats import ed25519
from tlog.formats.canonical import dcbor, jcs
from tlog.formats.conformance import sign_conformance, witness_signature
from tlog.formats.did import did_key_from_public
from tlog.formats.encoding import b64dec, b64enc
from tlog.formats.entries import (
    MAX_ENTRY_BYTES,
    MAX_SEQ,
    canonical_entry,
    commitment_entry,
    commitment_for,
    decode_entry,
    receipt_entry,
    receipt_hash,
    registry_entry,
)
from tlog.formats.strict import loads_cbor, loads_json

from tests.support.conformance import WebSubject, audit_for

NOW = datetime(2026, 5, 2, 10, 0, 0, tzinfo=UTC)
SEED = bytes([7]) * 32
SUBJECT_SEED = bytes([1]) * 32
WITNESS_SEEDS = [bytes([10 + i]) * 32 for i in range(3)]
DIGEST = hashlib.sha256(b"an OAP receipt").digest()
SUBJECT = WebSubject("did:web:impl.example", SUBJECT_SEED)  # L3+ subjects are did:web publishers (§31)
LOOKUP = SUBJECT.lookup()
COMMIT = "3b18e512dba79e4c8300dd08aeb37f8e728b8dad"
TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def did_of(seed: bytes) -> str:
    return did_key_from_public(ed25519.public_from_seed(seed))


def conformance_receipt(level: str = "L4", witnesses: int = 1, profile: str = "commercial",
                        suite_name: str = "oap-test-suite") -> dict[str, Any]:
    body = {
        "id": "urn:oap:conformance:01J9V8",
        "subject": SUBJECT.did,
        "level": level,
        "profile": profile,
        "suite": {"name": suite_name, "version": "1.0.3"},
        "results_digest": "sha256:" + "cd" * 32,
        "issued_at": "2026-05-01T00:00:00Z",
        "expires_at": "2026-07-01T00:00:00Z",
    }
    if level == "L5":
        body["audit"] = audit_for(SUBJECT.did, bytes([30]) * 32)
    r = sign_conformance(body, SUBJECT_SEED, by=SUBJECT.key_id)
    for seed in WITNESS_SEEDS[:witnesses]:
        r["signatures"].append(witness_signature(r, seed))
    return r


def all_entries() -> dict[str, dict[str, Any]]:
    return {
        "receipt": receipt_entry(DIGEST, SEED, "urn:oap:receipt:01J9V8"),
        "receipt_no_id": receipt_entry(DIGEST, SEED),
        "commitment": commitment_entry(commitment_for(DIGEST, bytes(range(32)))),
        "conformance": {"type": "conformance", "receipt": conformance_receipt()},
        "registry": registry_entry(COMMIT, TREE, 17, SEED),
    }


def canon(obj: object) -> bytes:
    return canonical_entry(obj, now=NOW, lookup=LOOKUP)


def shuffled(obj: Any, rng: random.Random) -> Any:
    if isinstance(obj, dict):
        items = list(obj.items())
        rng.shuffle(items)
        return {k: shuffled(v, rng) for k, v in items}
    if isinstance(obj, list):
        return [shuffled(v, rng) for v in obj]
    return obj


# --- JSON and CBOR submissions agree ---------------------------------------------


@pytest.mark.parametrize("name", list(all_entries()))
def test_json_and_cbor_forms_give_identical_bytes(name: str) -> None:
    entry = all_entries()[name]
    rng = random.Random(name)
    forms = [
        loads_json(json.dumps(entry).encode()),
        loads_json(json.dumps(shuffled(entry, rng), indent=2, ensure_ascii=True).encode()),
        loads_json(jcs(entry)),
        loads_cbor(cbor2.dumps(shuffled(entry, rng))),  # not canonical: insertion order
        loads_cbor(dcbor(entry)),
    ]
    results = {canon(f) for f in forms}
    assert results == {dcbor(entry)}
    assert decode_entry(dcbor(entry)) == entry


def test_golden_commitment_bytes() -> None:
    # Hand-assembled RFC 8949 §4.2.1 encoding, independent of cbor2: "type"
    # (4 bytes) sorts before "commitment" (10 bytes).
    c = bytes(32)
    expected = (
        b"\xa2" + b"\x64type" + b"\x6acommitment" + b"\x6acommitment" + b"\x78\x47" + b"sha256:" + b"00" * 32
    )
    assert canon({"commitment": "sha256:" + "00" * 32, "type": "commitment"}) == expected
    assert canon(commitment_entry(c)) == expected
    assert canon(loads_json(b'{"type":"commitment","commitment":"sha256:' + b"00" * 32 + b'"}')) == expected


def test_hex_is_normalised_to_lowercase() -> None:
    upper = {"type": "commitment", "commitment": "sha256:" + "AB" * 32}
    assert decode_entry(canon(upper))["commitment"] == "sha256:" + "ab" * 32
    e = receipt_entry(DIGEST, SEED)
    e_upper = {**e, "receipt_hash": "sha256:" + DIGEST.hex().upper()}
    assert canon(e_upper) == canon(e)
    assert decode_entry(canon(e_upper))["receipt_hash"] == "sha256:" + DIGEST.hex()


def test_conformance_receipt_is_stored_verbatim() -> None:
    r = conformance_receipt("L5", 3)
    stored = decode_entry(canon({"type": "conformance", "receipt": r}))
    assert stored == {"type": "conformance", "receipt": r}


# --- receipt entries -------------------------------------------------------------


def test_receipt_signer_may_be_raw_ed25519_key() -> None:
    e = receipt_entry(DIGEST, SEED)
    raw = {**e, "signer": "ed25519:" + b64enc(ed25519.public_from_seed(SEED))}
    assert decode_entry(canon(raw))["signer"] == raw["signer"]


def test_receipt_signature_is_over_the_raw_digest() -> None:
    e = receipt_entry(DIGEST, SEED)
    assert b64dec(e["signature"]) == ed25519.sign(SEED, DIGEST)
    assert e["signer"] == did_of(SEED)


def _flip(sig_b64: str) -> str:
    raw = bytearray(b64dec(sig_b64))
    raw[10] ^= 0x40
    return b64enc(bytes(raw))


@pytest.mark.parametrize(
    "change,reason",
    [
        ({"signature": None}, "signature must be a base64 string"),
        ({"signature": b64enc(bytes(63))}, "64 bytes"),
        ({"signature": "!!!"}, "base64"),
        ({"signer": did_of(WITNESS_SEEDS[0])}, "signature does not verify"),
        ({"signer": "did:web:agent.example"}, "signer"),
        ({"signer": "ed25519:" + b64enc(bytes(16))}, "signer"),
        ({"receipt_hash": "sha256:" + hashlib.sha256(b"other").hexdigest()}, "signature does not verify"),
        ({"receipt_hash": "sha256:" + "ab" * 31}, "receipt_hash"),
        ({"receipt_hash": "sha256:" + "ab" * 31 + "  "}, "receipt_hash"),
        ({"receipt_hash": "SHA256:" + DIGEST.hex()}, "receipt_hash"),
        ({"receipt_hash": DIGEST.hex()}, "receipt_hash"),
        ({"receipt_hash": 5}, "receipt_hash"),
        ({"receipt_id": "urn:other:1"}, "receipt_id"),
        ({"receipt_id": "oap:receipt:1"}, "receipt_id"),
        ({"receipt_id": "urn:oap:receipt:a b"}, "receipt_id"),
        ({"receipt_id": "urn:oap:"}, "receipt_id"),
        ({"receipt_id": "urn:oap:receipt:" + "x" * 241}, "receipt_id"),
        ({"receipt_id": 7}, "receipt_id"),
        ({"receipt_id": None}, "receipt_id"),
        ({"principal_did": "did:plc:abc"}, "unknown field\\(s\\): principal_did"),
    ],
)
def test_receipt_rejections(change: dict[str, Any], reason: str) -> None:
    e = {**receipt_entry(DIGEST, SEED), **change}
    with pytest.raises(InvalidInput, match=reason):
        canon(e)


def test_receipt_signature_tamper() -> None:
    e = receipt_entry(DIGEST, SEED)
    canon(e)
    with pytest.raises(InvalidInput, match="receipt entry: signature does not verify"):
        canon({**e, "signature": _flip(e["signature"])})


def test_receipt_id_length_boundary() -> None:
    rid = "urn:oap:receipt:" + "x" * 240
    assert len(rid) == 256
    assert decode_entry(canon(receipt_entry(DIGEST, SEED, rid)))["receipt_id"] == rid


@pytest.mark.parametrize("field", ["receipt_hash", "signer", "signature"])
def test_receipt_missing_field(field: str) -> None:
    e = receipt_entry(DIGEST, SEED)
    del e[field]
    with pytest.raises(InvalidInput, match=f"receipt entry: missing field\\(s\\): {field}"):
        canon(e)


# --- commitment entries ----------------------------------------------------------


@pytest.mark.parametrize(
    "extra", [{"signer": did_of(SEED)}, {"receipt_id": "urn:oap:receipt:1"}, {"salt": "00"}, {"note": None}]
)
def test_commitment_carries_nothing_else(extra: dict[str, Any]) -> None:
    e = {**commitment_entry(bytes(32)), **extra}
    with pytest.raises(InvalidInput, match="commitment entry: unknown field"):
        canon(e)


@pytest.mark.parametrize("value", ["sha256:" + "0" * 63, "00" * 32, b"\x00" * 32, None, ["sha256:" + "00" * 32]])
def test_commitment_bad_value(value: object) -> None:
    with pytest.raises(InvalidInput):
        canon({"type": "commitment", "commitment": value})


def test_commitment_for() -> None:
    salt = bytes(range(32))
    assert commitment_for(DIGEST, salt) == hashlib.sha256(DIGEST + salt).digest()
    assert commitment_for(DIGEST, salt) != commitment_for(DIGEST, bytes(32))
    with pytest.raises(InvalidInput, match="salt"):
        commitment_for(DIGEST, bytes(31))
    with pytest.raises(InvalidInput, match="receipt_hash"):
        commitment_for(DIGEST[:31], salt)


# --- conformance entries ---------------------------------------------------------


def test_conformance_entry_rules_are_applied() -> None:
    # The log anchors receipts before peers witness them (they check inclusion
    # first), so the witness count is the registry's rule, not the log's...
    assert canon({"type": "conformance", "receipt": conformance_receipt("L5", 2)})
    assert canon({"type": "conformance", "receipt": conformance_receipt("L4", 0)})
    # ... but every witness signature present must verify.
    r = conformance_receipt("L5", 2)
    r["signatures"][-1]["value"] = r["signatures"][0]["value"]
    with pytest.raises(InvalidInput, match="does not verify"):
        canon({"type": "conformance", "receipt": r})
    with pytest.raises(InvalidInput, match="level L5 needs at least 3"):
        from tlog.formats.conformance import validate_conformance

        validate_conformance(conformance_receipt("L5", 2), now=NOW, lookup=LOOKUP)
    with pytest.raises(InvalidInput, match="expired"):
        canonical_entry({"type": "conformance", "receipt": conformance_receipt()}, now=NOW + timedelta(days=90),
                        lookup=LOOKUP)
    with pytest.raises(InvalidInput, match="unknown field\\(s\\): anchor"):
        canon({"type": "conformance", "receipt": conformance_receipt(), "anchor": "x"})
    with pytest.raises(InvalidInput, match="must be an object"):
        canon({"type": "conformance", "receipt": [conformance_receipt()]})
    r = conformance_receipt()
    r["profile"] = "standard"  # any edit after signing
    with pytest.raises(InvalidInput, match="self signature does not verify"):
        canon({"type": "conformance", "receipt": r})


def test_conformance_entry_uses_current_time_by_default() -> None:
    # issued 2026-05-01, expires 2026-07-01: against the real clock it is either
    # valid or expired, never accepted silently after July 2026.
    entry = {"type": "conformance", "receipt": conformance_receipt()}
    real_now = datetime.now(UTC)
    if datetime(2026, 4, 30, 23, 55, tzinfo=UTC) <= real_now < datetime(2026, 7, 1, tzinfo=UTC):
        assert canonical_entry(entry, lookup=LOOKUP) == dcbor(entry)
    else:
        with pytest.raises(InvalidInput, match=r"expired|future"):
            canonical_entry(entry, lookup=LOOKUP)


# --- registry entries ------------------------------------------------------------


def test_registry_signature_covers_jcs_without_signature() -> None:
    e = registry_entry(COMMIT, TREE, 17, SEED)
    unsigned = {k: v for k, v in e.items() if k != "signature"}
    assert b64dec(e["signature"]) == ed25519.sign(SEED, jcs(unsigned))
    assert decode_entry(canon(e)) == e


@pytest.mark.parametrize("seq", [0, 1, MAX_SEQ])
def test_registry_seq_bounds_accepted(seq: int) -> None:
    assert decode_entry(canon(registry_entry(COMMIT, TREE, seq, SEED)))["seq"] == seq


@pytest.mark.parametrize(
    "change,reason",
    [
        ({"commit": COMMIT.upper()}, "commit must be 40 lowercase hex"),
        ({"commit": COMMIT[:39]}, "commit must be 40 lowercase hex"),
        ({"commit": COMMIT + "0"}, "commit must be 40 lowercase hex"),
        ({"tree": "g" * 40}, "tree must be 40 lowercase hex"),
        ({"tree": 12}, "tree must be 40 lowercase hex"),
        ({"seq": -1}, "seq must be an integer"),
        ({"seq": True}, "seq must be an integer"),
        ({"seq": "17"}, "seq must be an integer"),
        ({"seq": MAX_SEQ + 1}, "seq must be an integer"),
        ({"seq": 1.0}, "floating"),
        ({"seq": 18}, "registry entry: signature does not verify"),
        ({"tree": COMMIT}, "registry entry: signature does not verify"),
        ({"signer": "ed25519:" + b64enc(ed25519.public_from_seed(WITNESS_SEEDS[0]))}, "signature does not verify"),
        ({"signature": b64enc(bytes(64))}, "signature does not verify"),
        ({"signature": b64enc(bytes(65))}, "64 bytes"),
        ({"branch": "main"}, "unknown field\\(s\\): branch"),
    ],
)
def test_registry_rejections(change: dict[str, Any], reason: str) -> None:
    e = {**registry_entry(COMMIT, TREE, 17, SEED), **change}
    with pytest.raises(InvalidInput, match=reason):
        canon(e)


def test_registry_signature_tamper() -> None:
    e = registry_entry(COMMIT, TREE, 17, SEED)
    with pytest.raises(InvalidInput, match="signature does not verify"):
        canon({**e, "signature": _flip(e["signature"])})


def test_registry_raw_key_signer() -> None:
    pub = ed25519.public_from_seed(SEED)
    e: dict[str, Any] = {"type": "registry", "commit": COMMIT, "tree": TREE, "seq": 3, "signer": "ed25519:" + b64enc(pub)}
    e["signature"] = b64enc(ed25519.sign(SEED, jcs(e)))
    assert decode_entry(canon(e)) == e


# --- envelope --------------------------------------------------------------------


@pytest.mark.parametrize(
    "obj,reason",
    [
        (None, "must be an object"),
        ([], "must be an object"),
        (b"\xa0", "must be an object"),
        ({}, "entry type must be one of"),
        ({"type": "invocation"}, "entry type must be one of"),
        ({"type": ["receipt"]}, "entry type must be one of"),
        ({"type": "Receipt"}, "entry type must be one of"),
        ({"type": "commitment", "commitment": 0.5}, "floating"),
        ({"type": "commitment", 1: "x"}, "keys must be text"),
    ],
)
def test_envelope_rejections(obj: object, reason: str) -> None:
    with pytest.raises(InvalidInput, match=reason):
        canon(obj)


def test_decode_entry_rejections() -> None:
    good = canon(commitment_entry(bytes(32)))
    with pytest.raises(InvalidInput, match="trailing"):
        decode_entry(good + b"\x00")
    with pytest.raises(InvalidInput, match="not an OAP log entry"):
        decode_entry(dcbor({"type": "other"}))
    with pytest.raises(InvalidInput, match="not an OAP log entry"):
        decode_entry(dcbor([1, 2]))


# --- size cap (413) --------------------------------------------------------------


def _conformance_entry_of_size(size: int) -> dict[str, Any]:
    base = len(dcbor({"type": "conformance", "receipt": conformance_receipt(suite_name="p" * 1000)}))
    entry = {"type": "conformance", "receipt": conformance_receipt(suite_name="p" * (1000 + size - base))}
    assert len(dcbor(entry)) == size  # 1000..65535-char strings share a 3-byte header
    return entry


def test_size_cap_boundary() -> None:
    at_limit = _conformance_entry_of_size(MAX_ENTRY_BYTES)
    assert len(canon(at_limit)) == 65535
    assert len(canon(loads_json(json.dumps(at_limit).encode()))) == 65535
    over = _conformance_entry_of_size(MAX_ENTRY_BYTES + 1)
    with pytest.raises(TooLarge) as info:
        canon(over)
    assert info.value.status == 413
    assert info.value.data == {"limit": 65535}
    with pytest.raises(TooLarge):
        canon(loads_cbor(cbor2.dumps(over)))


# --- receipt_hash ----------------------------------------------------------------


def test_receipt_hash_is_sha256_of_jcs() -> None:
    receipt = {"type": "invocation", "receipt_id": "urn:oap:receipt:1", "cost": {"currency": "EUR", "amount": "0.001"}}
    expected = hashlib.sha256(
        b'{"cost":{"amount":"0.001","currency":"EUR"},"receipt_id":"urn:oap:receipt:1","type":"invocation"}'
    ).digest()
    assert receipt_hash(receipt) == expected
    assert receipt_hash(dict(reversed(list(receipt.items())))) == expected
    assert receipt_hash({**receipt, "signatures": []}) != expected  # the whole receipt, signatures included


def test_builders_validate_lengths() -> None:
    with pytest.raises(InvalidInput):
        receipt_entry(DIGEST[:31], SEED)
    with pytest.raises(InvalidInput):
        commitment_entry(bytes(33))


# --- fuzz: only InvalidInput escapes ---------------------------------------------

junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30) | st.floats() | st.binary(max_size=8),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=12), c, max_size=4),
    max_leaves=10,
)


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_invalid_input(data: bytes) -> None:
    for parse in (loads_json, loads_cbor):
        try:
            obj = parse(data)
        except InvalidInput:
            continue
        try:
            out = canon(obj)
        except InvalidInput:
            continue
        assert decode_entry(out)["type"] in {"receipt", "commitment", "conformance", "registry"}
    with pytest.raises(InvalidInput):
        canon(data)


@settings(max_examples=1000, deadline=None)
@given(junk)
def test_arbitrary_objects_raise_only_invalid_input(obj: object) -> None:
    try:
        canon(obj)
    except InvalidInput:
        return
    raise AssertionError(f"accepted junk {obj!r}")


@settings(max_examples=1000, deadline=None)
@given(st.sampled_from(sorted(all_entries())), st.data())
def test_mutated_entries_raise_only_invalid_input(name: str, data: st.DataObject) -> None:
    entry = all_entries()[name]
    target: Any = entry
    if name == "conformance" and data.draw(st.booleans()):
        target = entry["receipt"]
    if data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(target)))
        if data.draw(st.booleans()):
            del target[key]
        else:
            target[key] = data.draw(junk)
    else:
        target[data.draw(st.text(max_size=12))] = data.draw(junk)
    try:
        out = canon(entry)
    except InvalidInput:
        pass
    else:
        assert decode_entry(out) == loads_cbor(out)
    try:
        canon(loads_cbor(cbor2.dumps(entry)))
    except InvalidInput:
        pass


_hexish = st.text(alphabet="0123456789abcdefABCDEFg \n", min_size=62, max_size=66)


@settings(max_examples=400, deadline=None)
@given(st.one_of(
    st.builds(lambda h: {"type": "commitment", "commitment": "sha256:" + h}, _hexish),
    st.builds(lambda h, k: {"type": "commitment", "commitment": "sha256:" + h, k: 1}, _hexish, st.sampled_from(["x", "type"])),
    st.builds(lambda v: {"type": "commitment", "commitment": v},
              st.one_of(st.integers(), st.none(), st.text(max_size=80), st.binary(max_size=4))),
    st.builds(lambda h: {"commitment": "sha256:" + h}, _hexish),
))
def test_commitment_fast_path_equals_the_general_path(doc):
    """The concatenating encoder for commitments gives dcbor's bytes, and leaves
    every malformed submission to the general path (and its error message)."""
    import tlog.formats.entries as E

    fast = E._commitment_bytes(doc)
    try:
        general = E.dcbor(E._VALIDATORS["commitment"](doc, datetime.now(UTC), None)) \
            if doc.get("type") == "commitment" else None
    except InvalidInput:
        general = None
    if fast is not None:
        assert fast == general == canonical_entry(doc)
    else:
        assert general is None  # whatever the fast path leaves, the general path refuses


# --- the DID document a signed entry keeps (docs/architecture.md §3.1) ---------------------------


def _web_signed(kind: str, key, did: str = "did:web:tool.example") -> dict[str, Any]:
    if kind == "receipt":
        return {"type": "receipt", "receipt_hash": "sha256:" + DIGEST.hex(), "signer": did,
                "signature": b64enc(key.sign(DIGEST))}
    body = {"type": "registry", "commit": COMMIT, "tree": TREE, "seq": 3, "signer": did}
    return {**body, "signature": b64enc(key.sign(jcs(body)))}


@pytest.mark.parametrize("kind", ["receipt", "registry"])
def test_a_did_signed_entry_keeps_the_document_it_was_checked_with(kind: str) -> None:
    from tlog.formats.diddoc import lookup_from, skip_resolved_signatures
    from tlog.formats.entries import check_entry_signature

    from tests.support.didhosts import Key, document

    key, other = Key(), Key()
    did = "did:web:tool.example"
    doc = document(did, {"k": key})
    sub = _web_signed(kind, key)
    resolved = lookup_from([(did, doc)])
    stored = canonical_entry(sub, now=NOW, lookup=resolved)
    assert decode_entry(stored)["did_document"] == doc  # the log's copy, in the leaf
    assert canonical_entry({**sub, "did_document": doc}, now=NOW, lookup=resolved) == stored  # one leaf, two forms
    with pytest.raises(InvalidInput, match=r"not the DID document of did:web:tool.example as resolved"):
        canonical_entry({**sub, "did_document": document(did, {"k": other})}, now=NOW, lookup=resolved)
    # offline: the entry's own document checks it, whatever the caller pins
    assert check_entry_signature(stored, None) == did
    assert check_entry_signature(stored, lookup_from([(did, document(did, {"k": other}))])) == did
    forged = decode_entry(stored) | {"did_document": document(did, {"k": other})}
    with pytest.raises(InvalidInput, match="signature does not verify"):
        check_entry_signature(dcbor(forged), None)
    # a client's expected entry keeps its copy unchecked (the log checks it); a log without
    # a resolver never takes a sender's copy on trust
    assert canonical_entry({**sub, "did_document": doc}, now=NOW, lookup=skip_resolved_signatures) == stored
    with pytest.raises(InvalidInput):
        canonical_entry({**sub, "did_document": doc}, now=NOW, lookup=None)
    with pytest.raises(InvalidInput, match="must be the DID document of"):
        canonical_entry({**sub, "did_document": document("did:web:else.example", {"k": key})}, now=NOW,
                        lookup=skip_resolved_signatures)


def test_a_did_key_signed_entry_keeps_no_document() -> None:
    from tests.support.didhosts import document

    sub = receipt_entry(DIGEST, SEED)
    with pytest.raises(InvalidInput, match="did_document is only for signers named by a DID other than did:key"):
        canonical_entry({**sub, "did_document": document(sub["signer"], {})}, now=NOW)
