"""did:key for Ed25519, resolved offline (OAP-CORE-1.0 §5.1, docs/architecture.md §5).

A did:key DID *is* its public key: "did:key:" + multibase base58btc ("z") of
the multicodec varint for ed25519-pub (0xed 0x01) followed by the 32 key bytes
(W3C CCG did:key Method v0.7). So a log, witness or verifier can check an OAP
signature with no network and no resolver. Every Ed25519 did:key therefore
starts with "did:key:z6Mk".

Parsing is strict and round-trips: a DID is accepted only if re-encoding its key
gives the same string, so one key has exactly one DID and DIDs can be compared
as strings (the conformance rules count *distinct* witness DIDs, §31).
"""
from __future__ import annotations

import re
from functools import lru_cache

import base58

from tlog.errors import FormatError, InvalidInput
from tlog.formats.encoding import b64dec

ED25519_MULTICODEC = b"\xed\x01"
DID_KEY_PREFIX = "did:key:z"
RAW_KEY_PREFIX = "ed25519:"
_MAX_DID_LEN = 64  # an Ed25519 did:key is 56 characters; longer input is never valid
MAX_DID = 256  # any DID this project accepts
_DID = re.compile(r"did:[a-z0-9]+:(?:[A-Za-z0-9._\-]|%[0-9A-Fa-f]{2})+(?::(?:[A-Za-z0-9._\-]|%[0-9A-Fa-f]{2})*)*")


def is_did(text: object) -> bool:
    """DID syntax (W3C DID Core §3.1), any method, at most MAX_DID characters."""
    return isinstance(text, str) and len(text) <= MAX_DID and _DID.fullmatch(text) is not None


def did_key_from_public(pub: bytes) -> str:
    """32-byte Ed25519 public key -> "did:key:z6Mk..."."""
    if not isinstance(pub, (bytes, bytearray)) or len(pub) != 32:
        raise InvalidInput("Ed25519 public key must be 32 bytes")
    return DID_KEY_PREFIX + base58.b58encode(ED25519_MULTICODEC + bytes(pub)).decode("ascii")


def public_from_did_key(did: object) -> bytes:
    """"did:key:z6Mk..." -> the 32-byte Ed25519 public key; InvalidInput otherwise.

    Refused: other DID methods (did:web needs a resolver and is not handled
    here), other multibase encodings, other key types (multicodec prefix other
    than 0xed01), wrong key length, and non-canonical base58.
    """
    if not isinstance(did, str) or not did.startswith(DID_KEY_PREFIX):
        raise InvalidInput("expected an Ed25519 did:key ('did:key:z6Mk...')")
    if len(did) > _MAX_DID_LEN:
        raise InvalidInput("did:key is too long for an Ed25519 key")
    encoded = did[len(DID_KEY_PREFIX) :]
    try:
        raw = base58.b58decode(encoded.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise InvalidInput("did:key is not valid base58btc") from None
    if raw[:2] != ED25519_MULTICODEC:
        raise InvalidInput("did:key is not an Ed25519 key (multicodec prefix must be 0xed01)")
    if len(raw) != 34:
        raise InvalidInput("did:key Ed25519 key must be 32 bytes")
    if did_key_from_public(raw[2:]) != did:
        raise InvalidInput("did:key is not in canonical base58btc form")
    return raw[2:]


def parse_signer(text: object) -> bytes:
    """A signer as OAP entries name it -> 32-byte Ed25519 public key.

    Cached: busy submitters sign many entries with one key, and base58
    decoding showed in profiles of the append path. Failures are not cached.

    Accepts "did:key:z6Mk..." or a raw key "ed25519:<standard base64 of 32
    bytes>" (docs/architecture.md §3.1, signers).
    """
    if isinstance(text, str) and len(text) <= 128:
        return _parse_signer_cached(text)
    return _parse_signer(text)


def _parse_signer(text: object) -> bytes:
    if isinstance(text, str) and text.startswith(RAW_KEY_PREFIX):
        try:
            pub = b64dec(text[len(RAW_KEY_PREFIX) :], what="ed25519 key")
        except FormatError as e:
            raise InvalidInput(f"signer: {e}") from None
        if len(pub) != 32:
            raise InvalidInput("signer: ed25519 key must be 32 bytes")
        return pub
    if isinstance(text, str) and text.startswith("did:"):
        return public_from_did_key(text)
    raise InvalidInput("signer must be a did:key or 'ed25519:<base64 key>'")


@lru_cache(maxsize=4096)
def _parse_signer_cached(text: str) -> bytes:
    return _parse_signer(text)
