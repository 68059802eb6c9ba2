"""W3C Data Integrity proofs with the `eddsa-jcs-2022` cryptosuite (W3C vc-di-eddsa v1.0 §3.3).

OAP-CORE-1.0 §5.2 makes OAPConformance a W3C Verifiable Credential 2.0; this is how such
a credential is signed without JSON-LD processing: the document without `proof` is
canonicalized with RFC 8785 (`tlog.formats.canonical.jcs`, the project's one JCS), the
proof options likewise, and Ed25519 signs

    hashData = SHA-256(jcs(proofConfig)) || SHA-256(jcs(unsecuredDocument))

`proofValue` is the 64-byte signature in multibase base58btc ("z..."). `proofConfig` is
the proof without `proofValue`, carrying the document's `@context` (Create Proof step 2).

Proof sets (VC Data Integrity §2.1.2): `proof` may be a list; each proof signs the
document without any proof, so proofs can be added in any order without invalidating
one another. Proof chains (`previousProof`) are refused: OAP has no use for them.

Pure: verification keys come from `tlog.formats.diddoc` (did:key offline, other DIDs
through a `KeyLookup`).
"""
from __future__ import annotations

import re
from typing import Any

import base58

from tlog.errors import InvalidInput, SignatureError
from tlog.formats.canonical import jcs
from tlog.formats.did import DID_KEY_PREFIX, did_key_from_public
from tlog.formats.diddoc import ED25519, UNCHECKED, KeyLookup, VerificationKey, split_did_url, verify_signed_by
from tlog.formats.hashing import sha256
from tlog.formats.keys import Ed25519Key, ed25519_signer

__all__ = ["CRYPTOSUITE", "PROOF_TYPE", "create_proof", "did_key_method", "from_multibase", "hash_data",
           "proofs_of", "to_multibase", "verify_proof"]

CRYPTOSUITE = "eddsa-jcs-2022"
PROOF_TYPE = "DataIntegrityProof"
ASSERTION = "assertionMethod"
MAX_PROOFS = 16
_REQUIRED = frozenset({"type", "cryptosuite", "verificationMethod", "proofPurpose", "proofValue"})
_OPTIONAL = frozenset({"@context", "id", "created", "expires"})
# XML Schema dateTime (what `created` must be), with the time zone OAP requires for signed times.
_XSD_DATETIME = re.compile(r"-?\d{4,}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})", re.ASCII)


def to_multibase(data: bytes) -> str:
    """Multibase base58btc: "z" + base58 (Bitcoin alphabet)."""
    return "z" + base58.b58encode(data).decode("ascii")


def from_multibase(text: object, *, what: str) -> bytes:
    if not isinstance(text, str) or not text.startswith("z") or len(text) > 256:
        raise InvalidInput(f"{what} must be multibase base58btc ('z...')")
    try:
        raw = base58.b58decode(text[1:].encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise InvalidInput(f"{what} is not base58btc") from None
    if to_multibase(raw) != text:
        raise InvalidInput(f"{what} is not in canonical base58btc form")
    return raw


def did_key_method(did: str) -> str:
    """The verification method id of a did:key's one key: "did:key:z6Mk...#z6Mk..."."""
    return f"{did}#{did[len('did:key:'):]}"


def proofs_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The proofs of a secured document: `proof` as one object or a non-empty list (a proof set)."""
    proof = doc.get("proof")
    proofs: list[Any] = proof if isinstance(proof, list) else [proof]
    if not proofs or len(proofs) > MAX_PROOFS or not all(isinstance(p, dict) for p in proofs):
        raise InvalidInput(f"proof must be a Data Integrity proof object or a list of 1 to {MAX_PROOFS} of them")
    return proofs


def _check_options(options: dict[str, Any], where: str) -> None:
    if options.get("type") != PROOF_TYPE or options.get("cryptosuite") != CRYPTOSUITE:
        raise InvalidInput(f"{where}: type must be {PROOF_TYPE!r} with cryptosuite {CRYPTOSUITE!r}")
    created = options.get("created")
    if created is not None and not (isinstance(created, str) and _XSD_DATETIME.fullmatch(created)):
        raise InvalidInput(f"{where}: created must be an XML Schema dateTime with a time zone")


def hash_data(unsecured: dict[str, Any], proof_config: dict[str, Any]) -> bytes:
    """vc-di-eddsa §3.3.4 Hashing: SHA-256(jcs(proofConfig)) || SHA-256(jcs(unsecuredDocument)).
    `proof_config` is the proof without `proofValue`."""
    _check_options(proof_config, "proof")
    return sha256(jcs(proof_config)) + sha256(jcs(unsecured))


def create_proof(unsecured: dict[str, Any], seed: Ed25519Key, verification_method: str | None = None, *,
                 created: str | None = None, purpose: str = ASSERTION) -> dict[str, Any]:
    """vc-di-eddsa §3.3.1 Create Proof, with the Ed25519 key `seed`. The verification method
    defaults to the did:key of `seed`. Without `created` the proof is deterministic (Ed25519
    is), so signing the same document twice gives the same proof."""
    if "proof" in unsecured:
        raise InvalidInput("create_proof signs an unsecured document (without proof)")
    proof: dict[str, Any] = {"type": PROOF_TYPE, "cryptosuite": CRYPTOSUITE}
    if created is not None:
        proof["created"] = created
    proof["verificationMethod"] = verification_method or did_key_method(
        did_key_from_public(ed25519_signer(seed).public))
    proof["proofPurpose"] = purpose
    if "@context" in unsecured:
        proof["@context"] = unsecured["@context"]
    proof["proofValue"] = to_multibase(ed25519_signer(seed).sign(hash_data(unsecured, proof)))
    return proof


def _signer(verification_method: object, where: str) -> str:
    """The signer to look keys up for: a did:key's fragment must name its own key."""
    if not isinstance(verification_method, str) or len(verification_method) > 512:
        raise InvalidInput(f"{where}: verificationMethod must be a DID URL")
    did, fragment = split_did_url(verification_method)
    if did.startswith(DID_KEY_PREFIX):
        if fragment is not None and fragment != did[len("did:key:"):]:
            raise InvalidInput(f"{where}: a did:key verification method is did:key:<key>#<key>")
        return did
    if fragment is None:
        raise InvalidInput(f"{where}: verificationMethod must name one key (a DID URL with a fragment)")
    return verification_method


def verify_proof(secured: dict[str, Any], proof: dict[str, Any], lookup: KeyLookup | None, *,
                 where: str = "proof", purpose: str = ASSERTION) -> VerificationKey:
    """vc-di-eddsa §3.3.2 Verify Proof of one proof of `secured` (which may hold a proof set):
    the key that made it, or InvalidInput / SignatureError saying why not."""
    missing = sorted(_REQUIRED - proof.keys())
    if missing:
        raise InvalidInput(f"{where}: missing field(s): {', '.join(missing)}")
    if "previousProof" in proof:
        raise InvalidInput(f"{where}: proof chains (previousProof) are not accepted")
    unknown = sorted(proof.keys() - _REQUIRED - _OPTIONAL)
    if unknown:
        raise InvalidInput(f"{where}: unknown field(s): {', '.join(unknown)}")
    _check_options(proof, where)
    if proof["proofPurpose"] != purpose:
        raise InvalidInput(f"{where}: proofPurpose must be {purpose!r}")
    signature = from_multibase(proof["proofValue"], what=f"{where}: proofValue")
    if len(signature) != 64:
        raise InvalidInput(f"{where}: proofValue must be a 64-byte Ed25519 signature")
    unsecured = {k: v for k, v in secured.items() if k != "proof"}
    options = {k: v for k, v in proof.items() if k != "proofValue"}
    if "@context" in options:
        ctx, doc_ctx = options["@context"], secured.get("@context")
        ctx_list = ctx if isinstance(ctx, list) else [ctx]
        doc_list = doc_ctx if isinstance(doc_ctx, list) else [doc_ctx]
        if doc_list[:len(ctx_list)] != ctx_list:
            raise SignatureError(f"{where}: the document's @context does not start with the proof's @context")
        unsecured["@context"] = ctx
    key = verify_signed_by(_signer(proof["verificationMethod"], where), hash_data(unsecured, options), signature,
                           lookup)
    if key.curve not in (ED25519, UNCHECKED):
        raise InvalidInput(f"{where}: {CRYPTOSUITE} needs an Ed25519 key; {proof['verificationMethod']} "
                           f"is a {key.curve} key")
    return key
