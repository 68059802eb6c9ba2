"""DID documents to verification keys, offline (OAP-CORE-1.0 §5.1; W3C DID Core;
the did:web and did:plc method specifications). The signing side is the
`cryptography` package (tests/support/didhosts.py), independent of the verifier."""
from __future__ import annotations

import pytest

from tlog.errors import InvalidInput, SignatureError
from tlog.formats.did import did_key_from_public
from tlog.formats.diddoc import (
    ED25519,
    P256,
    SECP256K1,
    did_web_url,
    dids_to_resolve,
    keys_from_document,
    lookup_from,
    needs_resolution,
    plc_url,
    signer_keys,
    verify_signed_by,
)

from tests.support.didhosts import Key, document

MSG = b"a receipt hash, say"


# The examples of the did:web Method Specification §3.2 (Create/Read).
@pytest.mark.parametrize("did, url", [
    ("did:web:w3c-ccg.github.io", "https://w3c-ccg.github.io/.well-known/did.json"),
    ("did:web:w3c-ccg.github.io:user:alice", "https://w3c-ccg.github.io/user/alice/did.json"),
    ("did:web:example.com%3A3000:user:alice", "https://example.com:3000/user/alice/did.json"),
    ("did:web:Example.COM", "https://example.com/.well-known/did.json"),
])
def test_did_web_urls_follow_the_method_specification(did, url):
    assert did_web_url(did) == url


@pytest.mark.parametrize("did", [
    "did:web:exa_mple.com", "did:web:example.com:..:etc", "did:web:example.com::x", "did:web:-bad.com",
    "did:web:example.com%3A99999", "did:web:user@example.com", "did:plc:abc", "did:web:",
])
def test_bad_did_web_identifiers_are_refused(did):
    with pytest.raises(InvalidInput):
        did_web_url(did)


def test_plc_urls_and_their_syntax():
    did = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"  # the example of the did:plc specification
    assert plc_url("https://plc.directory/", did) == "https://plc.directory/did:plc:ewvi7nxzyoun6zhxrhs64oiz"
    for bad in ("did:plc:EWVI7NXZYOUN6ZHXRHS64OIZ", "did:plc:ewvi7nxzyoun6zhxrhs64oi", "did:plc:ewvi7nxzyoun6zhxrhs64oi1"):
        with pytest.raises(InvalidInput):
            plc_url("https://plc.directory", bad)


@pytest.mark.parametrize("curve", [ED25519, P256, SECP256K1])
@pytest.mark.parametrize("style", ["multikey", "jwk"])
def test_each_curve_and_key_encoding_verifies_its_own_signatures_only(curve, style):
    did = "did:web:example.com"
    key, other = Key(curve), Key(curve)
    keys = keys_from_document(did, document(did, {"k1": key}, style=style))
    assert [(k.id, k.curve) for k in keys] == [(f"{did}#k1", curve)]
    lookup = lookup_from([(did, document(did, {"k1": key}, style=style))])
    assert verify_signed_by(did, MSG, key.sign(MSG), lookup).id == f"{did}#k1"
    assert verify_signed_by(f"{did}#k1", MSG, key.sign(MSG), lookup).curve == curve
    with pytest.raises(SignatureError):
        verify_signed_by(did, MSG, other.sign(MSG), lookup)
    with pytest.raises(SignatureError):
        verify_signed_by(did, MSG + b"!", key.sign(MSG), lookup)


def test_ed25519_2018_base58_keys_are_read():
    did, key = "did:web:example.com", Key()
    (k,) = keys_from_document(did, document(did, {"a": key}, style="2018"))
    assert k.public == key.raw_public and k.curve == ED25519


def test_assertion_method_limits_which_keys_sign_and_a_fragment_picks_one():
    did = "did:web:example.com:people:carol"
    signing, auth_only, second = Key(), Key(P256), Key(SECP256K1)
    doc = document(did, {"sign": signing, "auth": auth_only, "two": second}, assertion=["sign", "two"])
    lookup = lookup_from([(did, doc)])
    assert [k.id.rpartition("#")[2] for k in signer_keys(did, lookup)] == ["sign", "two"]
    with pytest.raises(SignatureError):  # listed, but not for assertions
        verify_signed_by(did, MSG, auth_only.sign(MSG), lookup)
    with pytest.raises(SignatureError):  # the fragment names the other signing key
        verify_signed_by(f"{did}#two", MSG, signing.sign(MSG), lookup)
    with pytest.raises(InvalidInput, match="no signing key #auth"):
        signer_keys(f"{did}#auth", lookup)
    assert verify_signed_by(f"{did}#two", MSG, second.sign(MSG), lookup).curve == SECP256K1


def test_a_relative_method_reference_and_an_embedded_method_resolve():
    did, key = "did:web:example.com", Key()
    doc = {"@context": "https://www.w3.org/ns/did/v1", "id": did,
           "verificationMethod": [{"id": "#rel", "type": "Multikey", "controller": did,
                                   "publicKeyMultibase": key.multibase}],
           "assertionMethod": ["#rel"]}
    (k,) = keys_from_document(did, doc)
    assert k.id == f"{did}#rel"
    embedded = Key(P256)
    doc2 = {"@context": "https://www.w3.org/ns/did/v1", "id": did,
            "assertionMethod": [{"id": f"{did}#e", "type": "JsonWebKey2020", "controller": did,
                                 "publicKeyJwk": embedded.jwk()}]}
    (k2,) = keys_from_document(did, doc2)
    assert k2.id == f"{did}#e" and k2.curve == P256


@pytest.mark.parametrize("doc, message", [
    ("not a dict", "not a JSON object"),
    ({"id": "did:web:other.example", "verificationMethod": []}, "names another DID"),
    ({"id": "did:web:example.com", "verificationMethod": [
        {"id": "did:web:example.com#x", "type": "RsaVerificationKey2018", "controller": "did:web:example.com",
         "publicKeyPem": "-----BEGIN PUBLIC KEY-----"}]}, "lists no Ed25519, P-256 or secp256k1"),
    ({"id": "did:web:example.com", "verificationMethod": [
        {"id": "did:web:example.com#x", "type": "Multikey", "controller": "did:web:example.com",
         "publicKeyMultibase": "z" + "1" * 40}]}, "lists no"),
    ({"id": "did:web:example.com", "verificationMethod": "nope"}, "not valid"),
])
def test_unusable_documents_are_refused_with_the_reason(doc, message):
    with pytest.raises(InvalidInput, match=message):
        keys_from_document("did:web:example.com", doc)


def test_an_off_curve_ec_point_is_skipped():
    did = "did:web:example.com"
    bad = {"kty": "EC", "crv": "P-256", "x": "AQ" + "A" * 41, "y": "AQ" + "A" * 41}
    doc = {"id": did, "verificationMethod": [{"id": f"{did}#x", "type": "JsonWebKey2020", "controller": did,
                                             "publicKeyJwk": bad}]}
    with pytest.raises(InvalidInput, match="lists no"):
        keys_from_document(did, doc)


def test_ecdsa_signatures_must_be_64_bytes_of_r_and_s():
    did, key = "did:web:example.com", Key(P256)
    lookup = lookup_from([(did, document(did, {"k": key}))])
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    der = key.private.sign(MSG, ec.ECDSA(hashes.SHA256()))
    with pytest.raises(SignatureError):
        verify_signed_by(did, MSG, der, lookup)


def test_did_key_and_raw_keys_need_no_resolution_others_need_a_lookup():
    key = Key()
    dk = did_key_from_public(key.raw_public)
    assert needs_resolution(dk) is None and needs_resolution("ed25519:AAAA") is None
    assert needs_resolution("did:web:example.com#k") == "did:web:example.com"
    assert verify_signed_by(dk, MSG, key.sign(MSG), None).curve == ED25519
    with pytest.raises(InvalidInput, match="no DID resolver or pinned"):
        verify_signed_by("did:web:example.com", MSG, key.sign(MSG), None)
    with pytest.raises(InvalidInput, match="no pinned DID document"):
        verify_signed_by("did:web:example.com", MSG, key.sign(MSG), lookup_from([]))


def test_dids_to_resolve_finds_signers_anywhere_and_caps_them():
    doc = {"type": "receipt", "signer": "did:web:a.example#k",
           "receipt": {"subject": "did:plc:ewvi7nxzyoun6zhxrhs64oiz",
                       "signatures": [{"by": "did:web:b.example"}, {"by": did_key_from_public(Key().raw_public)}]},
           "note": "did:web:not-a-signer.example"}
    assert dids_to_resolve(doc) == {"did:web:a.example", "did:plc:ewvi7nxzyoun6zhxrhs64oiz", "did:web:b.example"}
    many = {"signatures": [{"by": f"did:web:h{i}.example"} for i in range(17)]}
    with pytest.raises(InvalidInput, match="at most 16"):
        dids_to_resolve(many)
