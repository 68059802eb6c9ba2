"""Principals beyond did:key: DID documents -> verification keys, and signatures by
any DID (OAP-CORE-1.0 §5.1, W3C DID Core §5).

Pure: the documents come from a resolver (`tlog.didresolver`) or are pinned by the
caller for offline verification; everything here takes a `KeyLookup`, a function from
a DID to its keys, and never fetches anything. did:key and the raw "ed25519:<base64>"
spelling need no lookup.

Documents are parsed with pydid (W3C DID Core data model, relative references and
embedded methods handled); the key material of the methods OAP signatures use is
decoded here: Ed25519 (App. C, required), and ECDSA P-256 (App. C, FIPS profiles) and
secp256k1 (the keys did:plc documents carry), from Multikey / Ed25519VerificationKey2018
and 2020 / JsonWebKey2020 / EcdsaSecp256k1VerificationKey2019. ECDSA signatures are the
64-byte r||s of JOSE (ES256, ES256K) over SHA-256.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import base58
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from tlog.errors import FormatError, InvalidInput, SignatureError
from tlog.formats import ed25519
from tlog.formats.did import DID_KEY_PREFIX, RAW_KEY_PREFIX, did_key_from_public, is_did, parse_signer
from tlog.formats.encoding import b64url_dec

__all__ = [
    "MAX_DIDS_PER_DOCUMENT",
    "UNCHECKED",
    "DocumentLookup",
    "KeyLookup",
    "VerificationKey",
    "did_web_url",
    "dids_to_resolve",
    "document_of",
    "ed25519_document",
    "key_did",
    "key_material",
    "keys_from_document",
    "lookup_from",
    "needs_resolution",
    "normal_public",
    "plc_url",
    "signer_keys",
    "skip_resolved_signatures",
    "split_did_url",
    "verify_signed_by",
]

ED25519, P256, SECP256K1 = "Ed25519", "P-256", "secp256k1"
_MULTICODEC = {b"\xed\x01": (ED25519, 32), b"\x80\x24": (P256, 33), b"\xe7\x01": (SECP256K1, 33)}
_CURVES = {P256: ec.SECP256R1(), SECP256K1: ec.SECP256K1()}
MAX_DIDS_PER_DOCUMENT = 16  # DIDs one submission may make a service resolve
MAX_KEYS = 32  # verification methods read from one document
_DOMAIN = re.compile(r"(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
                     r"(?::[0-9]{1,5})?", re.ASCII)
_SEGMENT = re.compile(r"[A-Za-z0-9._~-]+|%[0-9A-Fa-f]{2}", re.ASCII)
_PLC = re.compile(r"did:plc:[a-z2-7]{24}", re.ASCII)
# Fields whose values name a principal that signs something the services check.
# (`issuer` and `verificationMethod` sign W3C credentials; `auditor` signs an audit attestation.)
_SIGNER_FIELDS = frozenset({"signer", "by", "issued_by", "subject", "principal", "issuer", "verificationMethod",
                            "auditor"})


@dataclass(frozen=True)
class VerificationKey:
    """A public key a DID controls: `id` is the absolute DID URL of its method."""

    id: str
    curve: str
    public: bytes

    def verify(self, message: bytes, signature: bytes) -> None:
        """Raise SignatureError unless `signature` by this key covers `message`."""
        if self.curve == ED25519:
            ed25519.verify(self.public, message, signature)
            return
        if len(signature) != 64:
            raise SignatureError("an ECDSA signature must be 64 bytes (r || s)")
        r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
        try:
            key = ec.EllipticCurvePublicKey.from_encoded_point(_CURVES[self.curve], self.public)
            key.verify(encode_dss_signature(r, s), message, ec.ECDSA(hashes.SHA256()))
        except (InvalidSignature, ValueError):
            raise SignatureError(f"{self.curve} signature does not verify") from None


KeyLookup = Callable[[str], Sequence[VerificationKey]]
"""A DID (no fragment) -> the keys its document lists for signing; raises an OAPError
(InvalidInput, Unavailable, ...) saying why when it cannot."""


def split_did_url(text: str) -> tuple[str, str | None]:
    """"did:web:a.example#key-1" -> ("did:web:a.example", "key-1")."""
    did, sep, fragment = text.partition("#")
    return did, (fragment if sep else None)


def needs_resolution(text: object) -> str | None:
    """The DID to resolve for a signer named `text`; None for did:key, a raw key, or no DID."""
    if not isinstance(text, str) or text.startswith((DID_KEY_PREFIX, RAW_KEY_PREFIX)):
        return None
    did, _ = split_did_url(text)
    return did if is_did(did) and not did.startswith("did:key:") else None


def dids_to_resolve(doc: object, *, limit: int = MAX_DIDS_PER_DOCUMENT) -> set[str]:
    """DIDs named as signers anywhere in a parsed submission (signer, by, issued_by,
    subject, principal): what a service resolves before it checks the signatures. More
    than `limit` distinct ones is refused: one request must not make a service fetch
    hundreds of documents."""
    found: set[str] = set()
    stack: list[tuple[object, int]] = [(doc, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > 8:
            continue
        if isinstance(node, dict):
            for k, v in node.items():
                if k in _SIGNER_FIELDS and (did := needs_resolution(v)) is not None:
                    found.add(did)
                elif isinstance(v, (dict, list)):
                    stack.append((v, depth + 1))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
        if len(found) > limit:
            raise InvalidInput(f"at most {limit} distinct DIDs other than did:key may sign one submission")
    return found


def did_web_url(did: str) -> str:
    """The HTTPS URL of a did:web document (did:web Method Specification §3.2):
    did:web:example.com -> https://example.com/.well-known/did.json,
    did:web:example.com:user:alice -> https://example.com/user/alice/did.json,
    a port as %3A in the host part."""
    if not did.startswith("did:web:") or not is_did(did):
        raise InvalidInput("not a did:web DID")
    host, *path = did[len("did:web:"):].split(":")
    host = unquote(host).lower()
    if not _DOMAIN.fullmatch(host):
        raise InvalidInput("did:web: the host must be a domain name (with an optional %3A port)")
    if host.rpartition(":")[2].isdigit() and ":" in host and not 0 < int(host.rpartition(":")[2]) < 65536:
        raise InvalidInput("did:web: port out of range")
    for seg in path:
        if not seg or seg in (".", "..") or not all(_SEGMENT.fullmatch(p) for p in re.findall(r"%..|[^%]+", seg)):
            raise InvalidInput("did:web: bad path segment")
    return f"https://{host}/{'/'.join(path)}/did.json" if path else f"https://{host}/.well-known/did.json"


def plc_url(directory: str, did: str) -> str:
    """Where a PLC directory serves the document of `did` (did:plc Method Specification)."""
    if not _PLC.fullmatch(did):
        raise InvalidInput("did:plc identifiers are 24 characters of base32 (a-z, 2-7)")
    return f"{directory.rstrip('/')}/{did}"


def _multibase_key(value: object) -> tuple[str, bytes]:
    if not isinstance(value, str) or not value.startswith("z") or len(value) > 128:
        raise FormatError("publicKeyMultibase must be base58btc ('z...')")
    try:
        raw = base58.b58decode(value[1:].encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise FormatError("publicKeyMultibase is not base58btc") from None
    got = _MULTICODEC.get(raw[:2])
    if got is None or len(raw) != 2 + got[1]:
        raise FormatError("publicKeyMultibase is not an Ed25519, P-256 or secp256k1 public key")
    return got[0], raw[2:]


def _jwk_key(jwk: object) -> tuple[str, bytes]:
    if not isinstance(jwk, dict):
        raise FormatError("publicKeyJwk must be an object")
    kty, crv = jwk.get("kty"), jwk.get("crv")
    if kty == "OKP" and crv == "Ed25519":
        x = b64url_dec(jwk.get("x"), what="publicKeyJwk x")
        if len(x) != 32:
            raise FormatError("Ed25519 JWK x must be 32 bytes")
        return ED25519, x
    if kty == "EC" and crv in (P256, SECP256K1):
        x, y = b64url_dec(jwk.get("x"), what="publicKeyJwk x"), b64url_dec(jwk.get("y"), what="publicKeyJwk y")
        if len(x) != 32 or len(y) != 32:
            raise FormatError("EC JWK coordinates must be 32 bytes")
        return crv, b"\x04" + x + y  # uncompressed: decoding it checks the point is on the curve
    raise FormatError("publicKeyJwk must be an Ed25519, P-256 or secp256k1 key")


def _material(method: dict[str, Any]) -> tuple[str, bytes]:
    if "publicKeyMultibase" in method:
        return _multibase_key(method["publicKeyMultibase"])
    if "publicKeyJwk" in method:
        return _jwk_key(method["publicKeyJwk"])
    if "publicKeyBase58" in method and method.get("type") == "Ed25519VerificationKey2018":
        raw = base58.b58decode(str(method["publicKeyBase58"]).encode("ascii"))
        if len(raw) != 32:
            raise FormatError("publicKeyBase58 must be a 32-byte Ed25519 key")
        return ED25519, raw
    raise FormatError("no supported key material")


def key_material(method: object) -> tuple[str, bytes] | None:
    """(curve, public key) of one verification method of a DID document, or None when it
    holds no key of the three curves read here. EC keys come back uncompressed, whichever
    form the method wrote, so that equal keys compare equal."""
    if not isinstance(method, dict):
        return None
    try:
        curve, public = _material(method)
        return curve, normal_public(curve, public)
    except (FormatError, ValueError):
        return None


def normal_public(curve: str, public: bytes) -> bytes:
    """One spelling per key: EC points uncompressed (ValueError when not on the curve)."""
    if curve == ED25519:
        return public
    point = ec.EllipticCurvePublicKey.from_encoded_point(_CURVES[curve], public)
    return point.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)


def ed25519_document(did: str, keys: dict[str, bytes]) -> dict[str, Any]:
    """A minimal DID document for `did` listing Ed25519 public keys (fragment -> 32-byte
    key) as Multikey verification methods, each for assertions (what signs conformance
    receipts and registry records) and authentication: what a participant publishes at
    its did:web URL. OAP-CORE-1.0 §5.1 asks more of a participant's document (a
    key-agreement key, the OAPInvocationEndpoint and OAPRevocationStatus services); add
    them before publishing."""
    methods = [{"id": f"{did}#{frag}", "type": "Multikey", "controller": did,
                "publicKeyMultibase": "z" + base58.b58encode(b"\xed\x01" + public).decode()}
               for frag, public in keys.items()]
    refs = [m["id"] for m in methods]
    return {"@context": ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/multikey/v1"], "id": did,
            "verificationMethod": methods, "assertionMethod": refs, "authentication": refs}


def keys_from_document(did: str, document: object) -> tuple[VerificationKey, ...]:
    """The keys a DID document lists for signing claims: those of `assertionMethod`
    when it has one, else every verification method (did:plc documents list only
    those). Methods of other key types are skipped; a document whose `id` is not
    `did`, or with no usable key, is refused."""
    import pydid  # its import costs ~0.2 s: only when a document is read

    if not isinstance(document, dict):
        raise InvalidInput(f"the DID document of {did} is not a JSON object")
    if document.get("id") != did:
        raise InvalidInput(f"the DID document served for {did} names another DID")
    try:
        doc = pydid.deserialize_document(document)
        refs = doc.assertion_method if doc.assertion_method else doc.verification_method or []
        methods = [doc.dereference(str(r)) if not isinstance(r, pydid.VerificationMethod) else r
                   for r in list(refs)[:MAX_KEYS]]
    except Exception as e:  # noqa: BLE001 - pydid raises ValueError, pydantic errors and its own
        raise InvalidInput(f"the DID document of {did} is not valid: {str(e).splitlines()[0][:200]}") from None
    keys = []
    for m in methods:
        raw = m.serialize() if hasattr(m, "serialize") else {}
        mid = str(raw.get("id", ""))
        mid = did + mid if mid.startswith("#") else mid
        try:
            curve, public = _material(raw)
            if curve != ED25519:
                ec.EllipticCurvePublicKey.from_encoded_point(_CURVES[curve], public)  # a point on the curve
        except (FormatError, ValueError):
            continue
        keys.append(VerificationKey(mid, curve, public))
    if not keys:
        raise InvalidInput(f"the DID document of {did} lists no Ed25519, P-256 or secp256k1 signing key")
    return tuple(keys)


def signer_keys(signer: object, lookup: KeyLookup | None) -> tuple[VerificationKey, ...]:
    """The keys that may have made a signature attributed to `signer`: a did:key or
    "ed25519:" key itself, or the keys of a resolved DID document (only the one named
    by the fragment of a DID URL like did:web:a.example#key-1)."""
    did = needs_resolution(signer)
    if did is None:
        try:
            return (VerificationKey(str(signer), ED25519, parse_signer(signer)),)
        except InvalidInput:
            raise InvalidInput("signer must be a DID or 'ed25519:<base64 key>'") from None
    if lookup is None:
        raise InvalidInput(f"{did} must be resolved to check its signature, and no DID resolver or pinned "
                           "DID document is configured here")
    keys = tuple(lookup(did))
    _, fragment = split_did_url(str(signer))
    if fragment is not None:
        keys = tuple(k for k in keys if k.id == f"{did}#{fragment}")
        if not keys:
            raise InvalidInput(f"the DID document of {did} lists no signing key #{fragment}")
    return keys


UNCHECKED = "unchecked"


def key_did(key: VerificationKey) -> str | None:
    """The did:key naming the Ed25519 key that made a signature, whoever it signed for: what a
    `kind=key` revocation (§28.5) names, so a compromise of a did:web's key is seen in the
    signatures it made. None for other curves (a key revocation names Ed25519 keys only) and
    for signatures left unchecked."""
    return did_key_from_public(key.public) if key.curve == ED25519 and len(key.public) == 32 else None


def skip_resolved_signatures(did: str) -> Sequence[VerificationKey]:
    """A KeyLookup for a client that only needs an entry's canonical form (to check the
    leaf hash a log answers with): signatures by DIDs that need resolution are left to
    the log, which resolves them; did:key signatures are still checked."""
    return (VerificationKey(did, UNCHECKED, b""),)


def verify_signed_by(signer: object, message: bytes, signature: bytes,
                     lookup: KeyLookup | None) -> VerificationKey:
    """The key of `signer` whose signature `signature` over `message` is; SignatureError
    when none of its keys made it."""
    if lookup is skip_resolved_signatures and needs_resolution(signer) is not None:
        return VerificationKey(str(signer), UNCHECKED, b"")
    for key in signer_keys(signer, lookup):
        try:
            key.verify(message, signature)
            return key
        except SignatureError:
            continue
    raise SignatureError(f"signature does not verify for {signer}")


class DocumentLookup:
    """A KeyLookup over DID documents this process resolved or was given (a resolver's
    answers, pinned copies): it also hands out the document each key came from, which the
    log stores in the entries those keys signed (docs/architecture.md §3.1), so that they
    verify offline years later. `entry(did)` gives (document, keys) or raises the OAPError
    that says why there is none."""

    def __init__(self, entry: Callable[[str], tuple[Any, Sequence[VerificationKey]]]) -> None:
        self._entry = entry

    def __call__(self, did: str) -> Sequence[VerificationKey]:
        return self._entry(did)[1]

    def document(self, did: str) -> Any:
        return self._entry(did)[0]


def document_of(lookup: KeyLookup | None, did: str) -> Any | None:
    """The document `lookup` took the keys of `did` from, when it is a DocumentLookup;
    None for lookups that only give keys."""
    return lookup.document(did) if isinstance(lookup, DocumentLookup) else None


def lookup_from(documents: Iterable[tuple[str, object]]) -> DocumentLookup:
    """A KeyLookup over pinned documents (offline verification): DID -> document."""
    table = {did: (doc, keys_from_document(did, doc)) for did, doc in documents}

    def entry(did: str) -> tuple[Any, Sequence[VerificationKey]]:
        if did not in table:
            raise InvalidInput(f"no pinned DID document for {did}")
        return table[did]
    return DocumentLookup(entry)
