"""ML-DSA-44 (FIPS 204; C2SP signed-note type 0x06): the one wrapper around pyca/cryptography.

Pure ML-DSA with an empty context string, as C2SP tlog-cosignature and every
implementation of it sign (transparency-dev/formats, Sunlight). Keys are kept in
their 32-byte seed form (FIPS 204 ML-DSA.KeyGen_internal(xi)), the form Go's
filippo.io/mldsa and the `PRIVATE+KEY+...+base64(0x06 || seed)` key files use.
Signing is hedged (fresh randomness per signature, FIPS 204 default), so two
signatures of one message differ; both verify. Verification raises
`SignatureError`; it never returns a bool.
"""
from __future__ import annotations

import os
from functools import lru_cache

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.mldsa import MLDSA44PrivateKey, MLDSA44PublicKey

from tlog.errors import FormatError, SignatureError

SEED_SIZE = 32
PUBLIC_KEY_SIZE = 1312
SIGNATURE_SIZE = 2420


def generate_seed() -> bytes:
    return os.urandom(SEED_SIZE)


def _private(seed: bytes) -> MLDSA44PrivateKey:
    if not isinstance(seed, bytes) or len(seed) != SEED_SIZE:
        raise ValueError("ML-DSA-44 seed must be 32 bytes")
    return MLDSA44PrivateKey.from_seed_bytes(seed)


def public_from_seed(seed: bytes) -> bytes:
    return _private(seed).public_key().public_bytes_raw()


# Loading a public key expands its matrix A (a third of a verification's cost): logs
# and clients verify the same few witness keys over and over, so keep them loaded.
@lru_cache(maxsize=256)
def _public(public: bytes) -> MLDSA44PublicKey:
    if len(public) != PUBLIC_KEY_SIZE:
        raise FormatError(f"ML-DSA-44 public key must be {PUBLIC_KEY_SIZE} bytes, got {len(public)}")
    try:
        return MLDSA44PublicKey.from_public_bytes(public)
    except (ValueError, UnsupportedAlgorithm):
        raise FormatError("not an ML-DSA-44 public key") from None


def check_public(public: bytes) -> None:
    """Raise FormatError unless `public` is an encoded ML-DSA-44 public key."""
    _public(bytes(public))


class Signer:
    """Holds an ML-DSA-44 signing key; `repr` never shows the seed.

    pyca/cryptography releases the GIL while it signs, so signers on worker
    threads use every core.
    """

    __slots__ = ("_sk", "public")

    def __init__(self, seed: bytes) -> None:
        self._sk = _private(seed)
        self.public = self._sk.public_key().public_bytes_raw()

    def sign(self, message: bytes) -> bytes:
        return self._sk.sign(message)

    def __repr__(self) -> str:
        return f"mldsa.Signer(public={self.public[:8].hex()}...)"


def verify(public: bytes, message: bytes, signature: bytes) -> None:
    """Raise SignatureError unless `signature` is a valid ML-DSA-44 signature (empty context)."""
    if len(signature) != SIGNATURE_SIZE:
        raise SignatureError("malformed ML-DSA-44 signature")
    try:
        key = _public(bytes(public))
    except FormatError:
        raise SignatureError("malformed ML-DSA-44 key") from None
    try:
        key.verify(signature, message)
    except InvalidSignature:
        raise SignatureError("ML-DSA-44 signature does not verify") from None
