"""W3C Bitstring Status List v1.0 credentials for revoked verifiable credentials.

SPEC: https://www.w3.org/TR/vc-bitstring-status-list/ . One list per
(credential issuer, list number) and status purpose. `revocation`: bit
`status_list_index` is set when a `vc` revocation record by that issuer is in
force, and every bit is set once the issuer itself is revoked for any reason but
a rotation (a credential cannot outlive the standing of the key that issued it;
a key retired by a rotation keeps the credentials it issued before). `suspension`:
every bit is set while the issuer is suspended (OAP-CORE-1.0 §5.3) and clear
again once it recovers; W3C revocation bits never clear, so a suspension cannot
use them (docs/architecture.md §6.1). `encodedList` is the multibase
base64url ("u", no padding) of the GZIP-compressed bitstring; index 0 is the
left-most (most significant) bit of the first byte; the list holds at least
131,072 entries (16 KiB) as the spec requires, and `ttl` (milliseconds) tells
verifiers how long they may cache it.

The registry publishes these credentials on behalf of issuers, from records
the issuers signed, and secures each with a Data Integrity proof, cryptosuite
`eddsa-jcs-2022` (W3C vc-di-eddsa §3.3) by the registry key. GZIP output uses
mtime 0 so the same revocations always give the same bytes.
"""
from __future__ import annotations

import base64
import gzip
import zlib
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import base58

from tlog.errors import InvalidInput, SignatureError
from tlog.formats import ed25519
from tlog.formats.canonical import jcs
from tlog.formats.hashing import sha256
from tlog.formats.keys import Ed25519Key, ed25519_signer
from tlog.formats.times import format_utc

from .records import STATUS_LIST_BITS

VC_CONTEXT = "https://www.w3.org/ns/credentials/v2"
MAX_DECODED = 16 * 1024 * 1024  # a hostile list cannot make us inflate more than this


def encode_list(indices: Iterable[int], size: int = STATUS_LIST_BITS, *, fill: bool = False) -> str:
    """`fill`: every bit set (an issuer revoked or suspended as a whole)."""
    if size < STATUS_LIST_BITS or size % 8:
        raise ValueError(f"a status list holds at least {STATUS_LIST_BITS} entries, a multiple of 8")
    bits = bytearray(b"\xff" * (size // 8) if fill else size // 8)
    for i in indices:
        if not 0 <= i < size:
            raise ValueError(f"index {i} outside the list")
        bits[i // 8] |= 0x80 >> (i % 8)
    packed = gzip.compress(bytes(bits), compresslevel=9, mtime=0)
    return "u" + base64.urlsafe_b64encode(packed).decode("ascii").rstrip("=")


def decode_list(encoded: str) -> bytes:
    """`encodedList` -> the raw bitstring; InvalidInput when malformed."""
    if not isinstance(encoded, str) or not encoded.startswith("u"):
        raise InvalidInput("encodedList must be multibase base64url ('u' prefix)")
    body = encoded[1:]
    if "=" in body:
        raise InvalidInput("encodedList must not be padded")
    try:
        packed = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        bits = d.decompress(packed, MAX_DECODED)
    except (ValueError, zlib.error):
        raise InvalidInput("encodedList is not base64url of GZIP data") from None
    if d.unconsumed_tail or not d.eof:
        raise InvalidInput("encodedList is truncated or too large")
    if len(bits) * 8 < STATUS_LIST_BITS:
        raise InvalidInput(f"status list shorter than {STATUS_LIST_BITS} entries")
    return bits


def bit(bits: bytes, index: int) -> bool:
    if not 0 <= index < len(bits) * 8:
        raise InvalidInput(f"status index {index} outside the list")
    return bool(bits[index // 8] & (0x80 >> (index % 8)))


# --- eddsa-jcs-2022 (W3C vc-di-eddsa §3.3) -----------------------------------------


def _hash_data(document: dict[str, Any], proof_config: dict[str, Any]) -> bytes:
    return sha256(jcs(proof_config)) + sha256(jcs(document))


def add_proof(document: dict[str, Any], seed: Ed25519Key, did: str, created: datetime) -> dict[str, Any]:
    proof: dict[str, Any] = {
        "type": "DataIntegrityProof", "cryptosuite": "eddsa-jcs-2022", "created": format_utc(created),
        "verificationMethod": f"{did}#{did[len('did:key:'):]}", "proofPurpose": "assertionMethod",
        "@context": document["@context"],
    }
    sig = ed25519_signer(seed).sign(_hash_data(document, proof))
    return {**document, "proof": {**proof, "proofValue": "z" + base58.b58encode(sig).decode("ascii")}}


def verify_proof(secured: dict[str, Any], public: bytes) -> None:
    """Raise SignatureError unless the eddsa-jcs-2022 proof verifies with `public`."""
    proof = secured.get("proof")
    if not isinstance(proof, dict) or proof.get("cryptosuite") != "eddsa-jcs-2022":
        raise SignatureError("no eddsa-jcs-2022 proof")
    value = proof.get("proofValue")
    if not isinstance(value, str) or not value.startswith("z"):
        raise SignatureError("proofValue must be multibase base58btc")
    try:
        sig = base58.b58decode(value[1:])
    except ValueError:
        raise SignatureError("proofValue is not base58btc") from None
    document = {k: v for k, v in secured.items() if k != "proof"}
    config = {k: v for k, v in proof.items() if k != "proofValue"}
    if config.get("@context") != document.get("@context"):
        raise SignatureError("proof @context differs from the document's")
    ed25519.verify(public, _hash_data(document, config), sig)


STATUS_PURPOSES = ("revocation", "suspension")


def status_list_credential(*, url: str, registry: str, seed: Ed25519Key, indices: Iterable[int], this_update: datetime,
                           next_update: datetime, ttl_ms: int, purpose: str = "revocation",
                           fill: bool = False) -> dict[str, Any]:
    """A BitstringStatusListCredential signed by the registry. `purpose` is the W3C
    statusPurpose: `revocation` (bits never clear again) or `suspension` (reversible)."""
    if purpose not in STATUS_PURPOSES:
        raise ValueError(f"statusPurpose must be one of {STATUS_PURPOSES}")
    doc = {
        "@context": [VC_CONTEXT],
        "id": url,
        "type": ["VerifiableCredential", "BitstringStatusListCredential"],
        "issuer": registry,
        "validFrom": format_utc(this_update),
        "validUntil": format_utc(next_update),
        "credentialSubject": {
            "id": f"{url}#list",
            "type": "BitstringStatusList",
            "statusPurpose": purpose,
            "encodedList": encode_list(indices, fill=fill),
            "ttl": ttl_ms,
        },
    }
    return add_proof(doc, seed, registry, this_update)
