"""Signed-note keys (SPEC: https://c2sp.org/signed-note@v1.0.0; C2SP tlog-cosignature).

Verifier keys ("vkeys") are `name+hex8(key ID)+base64(type || public key)`;
signer keys use the Go convention `PRIVATE+KEY+name+hex8+base64(type || seed)`.
Supported types: 0x01 Ed25519 note signatures, 0x02 ECDSA P-256 (verify only,
as used by some real logs), 0x04 Ed25519 cosignature/v1 and 0x06 ML-DSA-44
subtree/v1 cosignatures (tlog-cosignature). This is the one place that knows
key types and cosignature formats. Verifiers raise `SignatureError`; they never
return a bool a caller could ignore. No I/O.

Every signature the project makes goes through one abstraction, `RawSigner`: a public key
and `sign(message) -> signature`. A key file's seed held in this process
(`ed25519.Signer`, `mldsa.Signer`) and a key inside a PKCS#11 token
(`tlog.runtime.pkcs11.TokenSigner`) both are one; the note signers and cosigners below
wrap one, and the entry and record builders take one (`Ed25519Key`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar, NoReturn, Protocol, Self

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tlog.errors import FormatError, SignatureError
from tlog.formats import ed25519, mldsa
from tlog.formats.checkpoint import (
    MAX_COSIGNATURE_TIMESTAMP,
    Checkpoint,
    cosignature_message,
    parse_checkpoint,
    subtree_message,
)
from tlog.formats.encoding import b64dec, b64enc
from tlog.formats.hashing import sha256

ED25519 = 0x01
ECDSA = 0x02
COSIGNATURE_V1 = 0x04
COSIGNATURE_MLDSA44 = 0x06
KEY_TYPES = frozenset({ED25519, ECDSA, COSIGNATURE_V1, COSIGNATURE_MLDSA44})
COSIGNER_TYPES = frozenset({COSIGNATURE_V1, COSIGNATURE_MLDSA44})
"""Key types a witness cosigns with (and that a tlog-policy witness line may name)."""

_HEX8_RE = re.compile(r"[0-9a-f]{8}")
_NAME_BAD_RE = re.compile(r"[\s\x00-\x1f]")
_COSIG_BLOB_LEN = 8 + 64  # u64 timestamp || Ed25519 signature (tlog-cosignature)
_MLDSA_BLOB_LEN = 8 + mldsa.SIGNATURE_SIZE  # u64 timestamp || ML-DSA-44 signature


def check_key_name(name: str) -> None:
    """Raise FormatError unless `name` is a valid key name (signed-note §Format).

    Non-empty, no Unicode spaces (they delimit signature lines) and no "+"
    (it delimits vkeys). Control characters are refused too: a name holding
    one could never appear in a valid note.
    """
    if not isinstance(name, str) or not name:
        raise FormatError("key name must be a non-empty string")
    if "+" in name:
        raise FormatError("key name must not contain '+'")
    # \s in a str pattern is str.isspace (both Py_UNICODE_ISSPACE), which covers the
    # Unicode White_Space property (Go's unicode.IsSpace); one regex scan, not a loop.
    if _NAME_BAD_RE.search(name):
        raise FormatError("key name must not contain spaces or control characters")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise FormatError("key name is not valid UTF-8") from None


def key_id(name: str, key_type: int, public: bytes) -> bytes:
    """The 4-byte key ID binding name, algorithm and key (signed-note §Signatures).

    SHA-256(name || 0x0A || type || public)[:4]; for ECDSA (0x02) the spec
    instead uses SHA-256(DER SubjectPublicKeyInfo)[:4].
    """
    if key_type == ECDSA:
        return sha256(public)[:4]
    return sha256(name.encode("utf-8") + b"\n" + bytes([key_type]) + public)[:4]


def _load_ecdsa(public: bytes) -> ec.EllipticCurvePublicKey:
    try:
        key = serialization.load_der_public_key(public)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise FormatError("ECDSA key is not a DER SubjectPublicKeyInfo") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise FormatError("ECDSA key must be NIST P-256")
    # The key ID hashes the DER bytes, so accept only the canonical encoding.
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if der != public:
        raise FormatError("ECDSA key is not canonical DER")
    return key


def _check_public(key_type: int, public: bytes) -> None:
    if isinstance(key_type, bool) or key_type not in KEY_TYPES:
        raise FormatError(f"unknown key type {key_type!r}")
    if key_type == ECDSA:
        _load_ecdsa(public)
    elif key_type == COSIGNATURE_MLDSA44:
        mldsa.check_public(public)
    elif len(public) != 32:
        raise FormatError(f"Ed25519 key must be 32 bytes, got {len(public)}")


@dataclass(frozen=True)
class Verifier:
    """A trusted public key; construction checks the key and that key_id matches it."""

    name: str
    key_id: bytes
    key_type: int
    public: bytes

    def __post_init__(self) -> None:
        check_key_name(self.name)
        if not isinstance(self.public, bytes) or not isinstance(self.key_id, bytes):
            raise FormatError("key_id and public must be bytes")
        _check_public(self.key_type, self.public)
        if self.key_id != key_id(self.name, self.key_type, self.public):
            raise FormatError(f"key ID does not match the key for {self.name!r}")

    @classmethod
    def from_public(cls, name: str, key_type: int, public: bytes) -> Verifier:
        return cls(name, key_id(name, key_type, public), key_type, public)

    @property
    def vkey(self) -> str:
        return format_vkey(self.name, self.key_type, self.public)

    def verify(self, message: bytes, blob: bytes) -> int | None:
        """Verify `blob` (signature bytes after the key ID) over note text `message`.

        Returns the cosignature timestamp for types 0x04 and 0x06, else None;
        raises SignatureError on any failure. A 0x06 signature covers only the
        checkpoint's origin, size and root (and the cosigner's name), so the text
        must be a checkpoint.
        """
        if self.key_type == COSIGNATURE_MLDSA44:
            try:
                cp = parse_checkpoint(message)
            except FormatError:
                raise SignatureError(f"ML-DSA-44 cosignature by {self.name!r} on a note that is not a checkpoint") \
                    from None
            return self.verify_subtree(cp.origin, 0, cp.size, cp.root, blob)
        if self.key_type == ED25519:
            try:
                ed25519.verify(self.public, message, blob)
            except SignatureError:
                raise SignatureError(f"signature by {self.name!r} does not verify") from None
            return None
        if self.key_type == COSIGNATURE_V1:
            if len(blob) != _COSIG_BLOB_LEN or not message.endswith(b"\n"):
                raise SignatureError(f"malformed cosignature by {self.name!r}")
            ts = int.from_bytes(blob[:8], "big")
            if ts > MAX_COSIGNATURE_TIMESTAMP:
                raise SignatureError(f"cosignature by {self.name!r} has timestamp > 2^63-1")
            try:
                ed25519.verify(self.public, cosignature_message(message, ts), blob[8:])
            except SignatureError:
                raise SignatureError(f"cosignature by {self.name!r} does not verify") from None
            return ts
        # ECDSA (0x02): DER signature, SHA-256 of the note text (transparency-dev/witness).
        try:
            _load_ecdsa(self.public).verify(blob, message, ec.ECDSA(hashes.SHA256()))
        except (InvalidSignature, ValueError):
            raise SignatureError(f"ECDSA signature by {self.name!r} does not verify") from None
        return None


    def verify_subtree(self, origin: str, start: int, end: int, root: bytes, blob: bytes) -> int:
        """Verify an ML-DSA-44 subtree/v1 cosignature `blob` (after the key ID) of leaves
        [start, end) of `origin` with hash `root`; return its timestamp (0 unless start is 0)."""
        if self.key_type != COSIGNATURE_MLDSA44:
            raise SignatureError(f"key {self.name!r} cannot sign subtrees (type 0x{self.key_type:02x})")
        if len(blob) != _MLDSA_BLOB_LEN:
            raise SignatureError(f"malformed ML-DSA-44 cosignature by {self.name!r}")
        ts = int.from_bytes(blob[:8], "big")
        try:
            msg = subtree_message(self.name, ts, origin, start, end, root)
        except FormatError as e:
            raise SignatureError(f"cosignature by {self.name!r}: {e.message}") from None
        try:
            mldsa.verify(self.public, msg, blob[8:])
        except SignatureError:
            raise SignatureError(f"cosignature by {self.name!r} does not verify") from None
        return ts


def parse_vkey(text: str) -> Verifier:
    """Parse "name+hex8+base64(type||key)" (C2SP signed-note verifier keys).

    Raises FormatError on a bad shape, unknown type, wrong key length or a
    key ID that does not match the key (so a typo can never pin a wrong key).
    """
    if not isinstance(text, str):
        raise FormatError("vkey must be a string")
    parts = text.split("+", 2)  # base64 may itself contain "+"
    if len(parts) != 3:
        raise FormatError("vkey must be name+keyid+key")
    name, hex8, b64 = parts
    check_key_name(name)
    if not _HEX8_RE.fullmatch(hex8):
        raise FormatError("vkey key ID must be 8 lowercase hex digits")
    raw = b64dec(b64, what="vkey key")
    if len(raw) < 2:
        raise FormatError("vkey key is empty")
    key_type, public = raw[0], raw[1:]
    _check_public(key_type, public)
    if bytes.fromhex(hex8) != key_id(name, key_type, public):
        raise FormatError(f"vkey key ID does not match the key for {name!r}")
    return Verifier(name, bytes.fromhex(hex8), key_type, public)


def format_vkey(name: str, key_type: int, public: bytes) -> str:
    check_key_name(name)
    _check_public(key_type, public)
    return f"{name}+{key_id(name, key_type, public).hex()}+{b64enc(bytes([key_type]) + public)}"


def cosigner_verifier(v: Verifier) -> Verifier:
    """The cosignature form of a witness key (C2SP tlog-cosignature): 0x04 or 0x06.

    Ed25519 witness keys are often published as 0x01 vkeys, but cosignature lines
    carry the 0x04 key ID; recomputing it lets a policy list either form.
    """
    if v.key_type in COSIGNER_TYPES:
        return v
    if v.key_type != ED25519:
        raise FormatError("a cosigner key must be Ed25519 (0x01/0x04) or ML-DSA-44 (0x06)")
    return Verifier.from_public(v.name, COSIGNATURE_V1, v.public)


def cosignature_timestamp(blob: bytes) -> int:
    """Timestamp of a cosignature blob (after the key ID), without verifying it."""
    if len(blob) not in (_COSIG_BLOB_LEN, _MLDSA_BLOB_LEN):
        raise FormatError("cosignature blob must be 72 (Ed25519) or 2428 (ML-DSA-44) bytes")
    return int.from_bytes(blob[:8], "big")


# --- signers ----------------------------------------------------------------


class RawSigner(Protocol):
    """A private key that signs: `public` is its raw public key (32 bytes for Ed25519, 1312
    for ML-DSA-44), `sign` returns the raw signature (64 bytes for Ed25519; pure ML-DSA-44,
    empty context). Implemented by `ed25519.Signer` and `mldsa.Signer` (a seed in this
    process) and by `tlog.runtime.pkcs11.TokenSigner` (a key that never leaves its token)."""

    public: bytes

    def sign(self, message: bytes) -> bytes: ...


Ed25519Key = bytes | RawSigner
"""What the entry, receipt and record builders sign with: the 32-byte seed of an Ed25519 key
held in this process, or any Ed25519 `RawSigner` (e.g. a PKCS#11 token key)."""

# Deriving the key pair from a seed is a scalar multiplication, as costly as the signature
# itself; builders that sign per request with one seed reuse the derived key.
_seed_signer = lru_cache(maxsize=16)(ed25519.Signer)


def ed25519_signer(key: Ed25519Key) -> RawSigner:
    """The signer of an `Ed25519Key`: a seed's (cached), or the signer itself."""
    if isinstance(key, (bytes, bytearray)):
        return _seed_signer(bytes(key))
    if len(key.public) != 32:
        raise ValueError("not an Ed25519 signer (its public key is not 32 bytes)")
    return key


def parse_signer_key(text: str) -> tuple[str, int, bytes]:
    """Go skey "PRIVATE+KEY+name+hex8+base64(type||seed)" -> (name, type, 32-byte seed).

    Types: 0x01 Ed25519 (Go's note.GenerateKey; our cosigners load it as 0x04) and
    0x06 ML-DSA-44 (transparency-dev/formats GenerateMLDSAKey). The key ID must be
    the one of the derived public key under that type, so a file holding another
    key than its name says is refused.
    """
    if not isinstance(text, str):
        raise FormatError("signer key must be a string")
    parts = text.split("+", 4)  # base64 may itself contain "+"
    if len(parts) != 5 or parts[0] != "PRIVATE" or parts[1] != "KEY":
        raise FormatError("signer key must be PRIVATE+KEY+name+keyid+key")
    _, _, name, hex8, b64 = parts
    check_key_name(name)
    if not _HEX8_RE.fullmatch(hex8):
        raise FormatError("signer key ID must be 8 lowercase hex digits")
    raw = b64dec(b64, what="signer key")
    if len(raw) != 33 or raw[0] not in (ED25519, COSIGNATURE_MLDSA44):
        raise FormatError("signer key must be 0x01 (Ed25519) or 0x06 (ML-DSA-44) followed by a 32-byte seed")
    key_type, seed = raw[0], raw[1:]
    public = ed25519.public_from_seed(seed) if key_type == ED25519 else mldsa.public_from_seed(seed)
    if bytes.fromhex(hex8) != key_id(name, key_type, public):
        raise FormatError("signer key ID does not match the key")
    return name, key_type, seed


def parse_skey(text: str) -> tuple[str, bytes]:
    """Go skey "PRIVATE+KEY+name+hex8+base64(0x01||seed)" -> (name, seed): Ed25519 only."""
    name, key_type, seed = parse_signer_key(text)
    if key_type != ED25519:
        raise FormatError("signer key must be 0x01 followed by a 32-byte Ed25519 seed")
    return name, seed


class _Ed25519Key:
    """Shared by note signers and cosigners; `repr` never shows the seed.

    `key` is the 32-byte seed of a key file, or an Ed25519 `RawSigner` held elsewhere (a
    PKCS#11 token key), which has no seed to write out or export."""

    __slots__ = ("_ed", "_seed", "key_id", "name", "public")
    key_type: ClassVar[int]

    def __init__(self, name: str, key: Ed25519Key) -> None:
        check_key_name(name)
        if isinstance(key, (bytes, bytearray)):
            self._ed: RawSigner = ed25519.Signer(bytes(key))  # ValueError unless 32 bytes
            self._seed: bytes | None = bytes(key)
        else:
            self._ed, self._seed = ed25519_signer(key), None
        self.name = name
        self.public = self._ed.public
        self.key_id = key_id(name, self.key_type, self.public)

    @classmethod
    def generate(cls, name: str) -> Self:
        return cls(name, ed25519.generate_seed())

    @classmethod
    def from_skey(cls, text: str) -> Self:
        """Load a Go-format signer key (always written with type 0x01)."""
        name, seed = parse_skey(text)
        return cls(name, seed)

    def to_skey(self) -> str:
        """Go format; the key ID in it is the 0x01 one even for cosigners, as Go writes it."""
        hex8 = key_id(self.name, ED25519, self.public).hex()
        return f"PRIVATE+KEY+{self.name}+{hex8}+{b64enc(bytes([ED25519]) + self._exportable())}"

    def _exportable(self) -> bytes:
        if self._seed is None:
            raise ValueError(f"the key {self.name!r} is held outside this process (a token): it has no seed to export")
        return self._seed

    def export_seed(self) -> bytes:
        """The raw 32-byte seed of a key file (ValueError for a token key). Never log or
        return it; the entry and record builders take `raw_signer` instead."""
        return self._exportable()

    @property
    def raw_signer(self) -> RawSigner:
        """The key's `RawSigner`, for the entry, receipt and record builders (`Ed25519Key`)."""
        return self._ed

    @property
    def in_process(self) -> bool:
        """Whether the key is held in this process (a key file) rather than in a token: a
        token's signature is a round trip to it, worth a worker thread on a hot path."""
        return self._seed is not None

    @property
    def verifier(self) -> Verifier:
        return Verifier(self.name, self.key_id, self.key_type, self.public)

    @property
    def vkey(self) -> str:
        return format_vkey(self.name, self.key_type, self.public)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, key_id={self.key_id.hex()})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("signing keys are not picklable (keep the seed in this process)")


class Signer(_Ed25519Key):
    """An Ed25519 (0x01) note signer: `sign(text)` returns the blob after the key ID."""

    __slots__ = ()
    key_type = ED25519

    def __init__(self, name: str, key: Ed25519Key, key_type: int = ED25519) -> None:
        if key_type != ED25519:
            raise ValueError("Signer only makes 0x01 signatures; use CosignatureSigner for 0x04")
        super().__init__(name, key)

    def sign(self, message: bytes) -> bytes:
        return self._ed.sign(message)


class CosignatureSigner(_Ed25519Key):
    """An Ed25519 cosignature/v1 (0x04) signer (C2SP tlog-cosignature).

    Deliberately has no `sign(message)`: a cosignature needs a timestamp and
    must only ever cover a checkpoint, so the one entry point is `cosign`.
    """

    __slots__ = ()
    key_type = COSIGNATURE_V1

    def cosign(self, checkpoint_text: str, timestamp: int) -> bytes:
        """Blob = u64 BE timestamp || Ed25519 sig over the cosignature/v1 message.

        The text is parsed first so this key never signs anything but a checkpoint.
        """
        return self.cosign_checkpoint(parse_checkpoint(checkpoint_text), timestamp)

    def cosign_checkpoint(self, cp: Checkpoint, timestamp: int) -> bytes:
        """`cosign` of a checkpoint already parsed. Parsing is strict, so `cp.to_text()`
        is the very text it was parsed from, extension lines included."""
        if isinstance(timestamp, bool) or not isinstance(timestamp, int):
            raise ValueError("timestamp must be an int")
        if not 0 <= timestamp <= MAX_COSIGNATURE_TIMESTAMP:
            raise ValueError("timestamp must be in 0..2^63-1")
        msg = cosignature_message(cp.to_text(), timestamp)
        return timestamp.to_bytes(8, "big") + self._ed.sign(msg)


class MLDSACosigner:
    """An ML-DSA-44 subtree/v1 (0x06) cosigner (C2SP tlog-cosignature); `repr` never shows the seed.

    Like `CosignatureSigner` it has no `sign(message)`: it signs checkpoints
    (`cosign`, timestamped) and subtrees (`cosign_subtree`, timestamp 0), nothing else.
    """

    __slots__ = ("_seed", "_sk", "key_id", "name", "public")
    key_type = COSIGNATURE_MLDSA44

    def __init__(self, name: str, key: bytes | RawSigner) -> None:
        """`key`: the 32-byte seed of a key file, or an ML-DSA-44 `RawSigner` held elsewhere
        (a PKCS#11 token that supports ML-DSA)."""
        check_key_name(name)
        if len(name.encode("utf-8")) > 255:
            raise FormatError("an ML-DSA-44 cosigner name must be at most 255 bytes")
        if isinstance(key, (bytes, bytearray)):
            self._sk: RawSigner = mldsa.Signer(bytes(key))  # ValueError unless 32 bytes
            self._seed: bytes | None = bytes(key)
        else:
            if len(key.public) != mldsa.PUBLIC_KEY_SIZE:
                raise ValueError("not an ML-DSA-44 signer")
            self._sk, self._seed = key, None
        self.name = name
        self.public = self._sk.public
        self.key_id = key_id(name, COSIGNATURE_MLDSA44, self.public)

    @classmethod
    def generate(cls, name: str) -> MLDSACosigner:
        return cls(name, mldsa.generate_seed())

    @classmethod
    def from_skey(cls, text: str) -> MLDSACosigner:
        name, key_type, seed = parse_signer_key(text)
        if key_type != COSIGNATURE_MLDSA44:
            raise FormatError("not an ML-DSA-44 (0x06) signer key")
        return cls(name, seed)

    def to_skey(self) -> str:
        """transparency-dev/formats' form: the key ID is the 0x06 one, the key the seed."""
        if self._seed is None:
            raise ValueError(f"the key {self.name!r} is held outside this process (a token): it has no seed to export")
        raw = bytes([COSIGNATURE_MLDSA44]) + self._seed
        return f"PRIVATE+KEY+{self.name}+{self.key_id.hex()}+{b64enc(raw)}"

    @property
    def in_process(self) -> bool:
        """Whether the key is held in this process (a key file) rather than in a token."""
        return self._seed is not None

    @property
    def verifier(self) -> Verifier:
        return Verifier(self.name, self.key_id, COSIGNATURE_MLDSA44, self.public)

    @property
    def vkey(self) -> str:
        return format_vkey(self.name, COSIGNATURE_MLDSA44, self.public)

    def cosign(self, checkpoint_text: str, timestamp: int) -> bytes:
        """Blob = u64 BE timestamp || ML-DSA-44 signature over the subtree/v1 message of
        the checkpoint's [0, size) (extension lines are not covered)."""
        return self.cosign_checkpoint(parse_checkpoint(checkpoint_text), timestamp)

    def cosign_checkpoint(self, cp: Checkpoint, timestamp: int) -> bytes:
        """`cosign` of a checkpoint already parsed (a `Checkpoint` is valid by construction):
        a witness parses each request once, and a second parse would be GIL-held work on
        the signing threads."""
        if isinstance(timestamp, bool) or not isinstance(timestamp, int):
            raise ValueError("timestamp must be an int")
        if not 0 <= timestamp <= MAX_COSIGNATURE_TIMESTAMP:
            raise ValueError("timestamp must be in 0..2^63-1")
        msg = subtree_message(self.name, timestamp, cp.origin, 0, cp.size, cp.root)
        return timestamp.to_bytes(8, "big") + self._sk.sign(msg)

    def cosign_subtree(self, origin: str, start: int, end: int, root: bytes) -> bytes:
        """A sign-subtree cosignature (tlog-witness): timestamp 0, the subtree [start, end)."""
        msg = subtree_message(self.name, 0, origin, start, end, root)
        return bytes(8) + self._sk.sign(msg)

    def __repr__(self) -> str:
        return f"MLDSACosigner(name={self.name!r}, key_id={self.key_id.hex()})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("signing keys are not picklable (keep the seed in this process)")


Cosigner = CosignatureSigner | MLDSACosigner
"""A witness's cosigning key: Ed25519 cosignature/v1 (0x04) or ML-DSA-44 subtree/v1 (0x06)."""


def load_cosigner(text: str) -> Cosigner:
    """A cosigner from its key file text: 0x01 Ed25519 keys cosign as 0x04, 0x06 as ML-DSA-44."""
    _, key_type, _ = parse_signer_key(text)
    if key_type == COSIGNATURE_MLDSA44:
        return MLDSACosigner.from_skey(text)
    return CosignatureSigner.from_skey(text)
