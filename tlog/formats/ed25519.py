"""Ed25519 (OAP App. C, C2SP key type 0x01/0x04): the one wrapper around PyNaCl.

Verification raises `SignatureError`; it never returns a bool.
"""
from __future__ import annotations

import os
from functools import lru_cache

from nacl.exceptions import BadSignatureError, CryptoError
from nacl.signing import SigningKey, VerifyKey

from tlog.errors import SignatureError


def generate_seed() -> bytes:
    return os.urandom(32)


def public_from_seed(seed: bytes) -> bytes:
    return bytes(SigningKey(seed).verify_key)


# Deriving the key pair from a seed is a scalar multiplication, as costly as the
# signature itself; services that sign per request reuse the derived key.
_signing_key = lru_cache(maxsize=16)(SigningKey)


def sign(seed: bytes, message: bytes) -> bytes:
    return _signing_key(bytes(seed)).sign(message).signature


class Signer:
    """Holds a signing key; `repr` never shows the seed."""

    __slots__ = ("_sk", "public")

    def __init__(self, seed: bytes) -> None:
        if len(seed) != 32:
            raise ValueError("Ed25519 seed must be 32 bytes")
        self._sk = SigningKey(seed)
        self.public = bytes(self._sk.verify_key)

    def sign(self, message: bytes) -> bytes:
        return self._sk.sign(message).signature

    def __repr__(self) -> str:
        return f"Signer(public={self.public.hex()})"


def verify(public: bytes, message: bytes, signature: bytes) -> None:
    """Raise SignatureError unless `signature` is a valid Ed25519 signature."""
    if len(public) != 32 or len(signature) != 64:
        raise SignatureError("malformed Ed25519 key or signature")
    try:
        VerifyKey(public).verify(message, signature)
    except (BadSignatureError, CryptoError, ValueError):
        raise SignatureError("Ed25519 signature does not verify") from None
