"""Passphrase-encrypted files in the age format (C2SP age, https://c2sp.org/age; age-encryption.org/v1)
with its scrypt recipient, over pyca/cryptography's primitives: what encrypted key files are.

The format is age's so that operators can also read and write these files with the age tools
(`age -p`, rage); the work factor is ours and fixed, so decryption does not depend on how busy
the machine is (rage refuses files whose work factor is far above what it measures the
machine doing in a second). Only what a key file needs: one scrypt stanza (the spec allows no
other beside it), armored or binary, at most 1 MiB. No I/O; failures are FormatError.
"""
from __future__ import annotations

import base64
import binascii
import hmac
import os
import re

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from tlog.errors import FormatError

VERSION_LINE = b"age-encryption.org/v1\n"
ARMOR_BEGIN = b"-----BEGIN AGE ENCRYPTED FILE-----"
ARMOR_END = b"-----END AGE ENCRYPTED FILE-----"
LOG_N = 18
"""The scrypt work factor written: age's own (2^18, r = 8: 256 MiB, about a second)."""
MAX_LOG_N = 22
"""The largest work factor read (age's limit too): a bigger one is a denial of service."""
MAX_FILE = 1 << 20

_SCRYPT_LABEL = b"age-encryption.org/v1/scrypt"
_CHUNK = 64 * 1024
_B64_NOPAD = re.compile(rb"[A-Za-z0-9+/]*")


def _b64_nopad(data: bytes) -> bytes:
    return base64.b64encode(data).rstrip(b"=")


def _unb64_nopad(text: bytes, what: str) -> bytes:
    if not _B64_NOPAD.fullmatch(text) or len(text) % 4 == 1:
        raise FormatError(f"age: {what} is not unpadded base64")
    try:
        data = base64.b64decode(text + b"=" * (-len(text) % 4), validate=True)
    except binascii.Error:
        raise FormatError(f"age: {what} is not unpadded base64") from None
    if _b64_nopad(data) != text:  # one spelling per value
        raise FormatError(f"age: {what} is not canonical base64")
    return data


def _hkdf(key: bytes, salt: bytes, info: bytes) -> bytes:
    return HKDF(hashes.SHA256(), 32, salt, info).derive(key)


def _scrypt_key(passphrase: bytes, salt: bytes, log_n: int) -> bytes:
    return Scrypt(_SCRYPT_LABEL + salt, 32, 1 << log_n, 8, 1).derive(passphrase)


def _payload(file_key: bytes, nonce: bytes, data: bytes, *, decrypt: bool) -> bytes:
    aead = ChaCha20Poly1305(_hkdf(file_key, nonce, b"payload"))
    size = _CHUNK + 16 if decrypt else _CHUNK
    chunks = [data[i:i + size] for i in range(0, len(data), size)] or [b""]
    out = []
    for i, chunk in enumerate(chunks):
        last = i == len(chunks) - 1
        chunk_nonce = i.to_bytes(11, "big") + (b"\x01" if last else b"\x00")
        if decrypt:
            if not last and len(chunk) != size:
                raise FormatError("age: truncated payload")
            plain = aead.decrypt(chunk_nonce, chunk, None)
            if last and not plain and i > 0:
                raise FormatError("age: an empty last chunk after a full one")
            out.append(plain)
        else:
            out.append(aead.encrypt(chunk_nonce, chunk, None))
    return b"".join(out)


def encrypt(plaintext: bytes, passphrase: bytes, *, log_n: int = LOG_N, armor: bool = True) -> bytes:
    """`plaintext` encrypted to `passphrase` (one scrypt recipient, work factor 2^log_n)."""
    if not passphrase:
        raise FormatError("age: an empty passphrase encrypts nothing")
    if not 1 <= log_n <= MAX_LOG_N:
        raise FormatError(f"age: the scrypt work factor must be 1..{MAX_LOG_N}")
    file_key, salt, nonce = os.urandom(16), os.urandom(16), os.urandom(16)
    wrapped = ChaCha20Poly1305(_scrypt_key(passphrase, salt, log_n)).encrypt(bytes(12), file_key, None)
    header = VERSION_LINE + b"-> scrypt " + _b64_nopad(salt) + b" %d\n" % log_n + _b64_nopad(wrapped) + b"\n---"
    mac = hmac.new(_hkdf(file_key, b"", b"header"), header, "sha256").digest()
    data = header + b" " + _b64_nopad(mac) + b"\n" + nonce + _payload(file_key, nonce, plaintext, decrypt=False)
    if not armor:
        return data
    body = base64.b64encode(data)
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    return ARMOR_BEGIN + b"\n" + b"\n".join(lines) + b"\n" + ARMOR_END + b"\n"


def is_encrypted(data: bytes) -> bool:
    """Whether `data` is an age file (binary or armored)."""
    return data.startswith(VERSION_LINE) or data.lstrip().startswith(ARMOR_BEGIN)


def _dearmor(data: bytes) -> bytes:
    text = data.strip()
    if not text.startswith(ARMOR_BEGIN) or not text.endswith(ARMOR_END):
        raise FormatError("age: malformed armor")
    lines = text[len(ARMOR_BEGIN):-len(ARMOR_END)].replace(b"\r\n", b"\n").strip(b"\n").split(b"\n")
    if any(len(line) != 64 for line in lines[:-1]) or not 0 < len(lines[-1]) <= 64:
        raise FormatError("age: armor lines must be 64 columns")
    try:
        return base64.b64decode(b"".join(lines), validate=True)
    except binascii.Error:
        raise FormatError("age: armor is not base64") from None


def decrypt(data: bytes, passphrase: bytes, *, max_log_n: int = MAX_LOG_N) -> bytes:
    """The plaintext of an age file encrypted to `passphrase`; FormatError if it is malformed,
    is not for a passphrase, asks for more work than 2^max_log_n, or the passphrase is wrong."""
    if len(data) > MAX_FILE:
        raise FormatError("age: file larger than 1 MiB")
    if not data.startswith(VERSION_LINE):
        data = _dearmor(data)
    end = data.find(b"\n---")
    if not data.startswith(VERSION_LINE) or end < 0:
        raise FormatError("age: not an age-encryption.org/v1 file")
    header, rest = data[:end + 4], data[end + 4:]
    stanzas = header[len(VERSION_LINE):-3].split(b"-> ")
    if not any(x.startswith(b"scrypt ") for x in stanzas[1:]):
        raise FormatError("age: not encrypted with a passphrase (scrypt)")
    if stanzas[0] != b"" or len(stanzas) != 2:
        raise FormatError("age: expected exactly one recipient stanza (a passphrase file has one scrypt stanza)")
    first, _, body = stanzas[1].partition(b"\n")
    args = first.split(b" ")
    if args[0] != b"scrypt":
        raise FormatError("age: not encrypted with a passphrase (scrypt)")
    if len(args) != 3 or not re.fullmatch(rb"[1-9][0-9]?", args[2]):
        raise FormatError("age: malformed scrypt stanza")
    salt, log_n = _unb64_nopad(args[1], "scrypt salt"), int(args[2])
    if len(salt) != 16:
        raise FormatError("age: the scrypt salt must be 16 bytes")
    if log_n > max_log_n:
        raise FormatError(f"age: scrypt work factor 2^{log_n} is above 2^{max_log_n}")
    lines = body[:-1].split(b"\n")
    if not body.endswith(b"\n") or any(len(line) != 64 for line in lines[:-1]) or len(lines[-1]) >= 64:
        raise FormatError("age: malformed stanza body (64-column lines, the last one shorter)")
    wrapped = _unb64_nopad(body[:-1].replace(b"\n", b""), "stanza body")
    if len(wrapped) != 32:
        raise FormatError("age: the scrypt stanza must hold a 16-byte file key")
    if not rest.startswith(b" ") or b"\n" not in rest:
        raise FormatError("age: malformed header MAC line")
    mac_text, _, payload = rest[1:].partition(b"\n")
    mac = _unb64_nopad(mac_text, "header MAC")
    try:
        file_key = ChaCha20Poly1305(_scrypt_key(passphrase, salt, log_n)).decrypt(bytes(12), wrapped, None)
    except InvalidTag:
        raise FormatError("age: wrong passphrase") from None
    if not hmac.compare_digest(mac, hmac.new(_hkdf(file_key, b"", b"header"), header, "sha256").digest()):
        raise FormatError("age: the header MAC does not verify")
    if len(payload) < 16 + 16:
        raise FormatError("age: truncated payload")
    try:
        return _payload(file_key, payload[:16], payload[16:], decrypt=True)
    except InvalidTag:
        raise FormatError("age: the payload does not authenticate") from None
