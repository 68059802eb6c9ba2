"""Strict base64, canonical decimals and small text helpers shared by every wire format.

C2SP formats use standard base64 with padding; a decoder that accepts
whitespace or missing padding would let two different texts mean the same
bytes, so decoding here is strict (and round-trips exactly).

The codec is pybase64 (SIMD; the same alphabet, padding and validate=True
semantics as the standard library's, checked by tests): proof batches are
megabytes of base64, and binascii encodes at ~0.3 GB/s here, pybase64 at ~14.
"""
from __future__ import annotations

import binascii
import re

import pybase64

from tlog.errors import FormatError

MAX_INT63 = 2**63 - 1
"""The largest integer storage holds (SQLite INTEGER, PostgreSQL BIGINT): no index, size or
sequence number a request names can be larger and still be found."""

_DECIMAL = re.compile(r"0|[1-9][0-9]*", re.ASCII)


def parse_decimal(text: str, what: str, *, minimum: int = 0, maximum: int = MAX_INT63) -> int:
    """A number a request spells in a path or query: ASCII digits only, no sign, no space and
    no leading zero, so one value has one spelling (like a tile path). `str.isdigit()` is
    not this check: it is true for '²' (which `int()` refuses) and for Arabic-Indic digits
    (which `int()` reads). FormatError (400) outside `minimum`..`maximum`."""
    if len(text) > len(str(maximum)) + 1 or not _DECIMAL.fullmatch(text):
        raise FormatError(f"{what} must be a decimal integer in {minimum}..{maximum} "
                          "(ASCII digits, no sign or leading zeros)")
    value = int(text)
    if not minimum <= value <= maximum:
        raise FormatError(f"{what} must be in {minimum}..{maximum}")
    return value


def b64enc(data: bytes) -> str:
    return pybase64.b64encode(data).decode("ascii")


def b64encode_bytes(data: bytes | bytearray | memoryview) -> bytes:
    """Standard padded base64 as bytes (for writers that assemble documents in bytes)."""
    return pybase64.b64encode(data)


def b64decode_noncanonical(raw: bytes) -> bytes:
    """Standard base64, nothing outside the alphabet (binascii.Error otherwise), but
    non-zero trailing bits tolerated, as Go's base64.StdEncoding does."""
    return pybase64.b64decode(raw, validate=True)


def b64dec(text: str | bytes, *, what: str = "base64") -> bytes:
    """Strict standard base64 (padding required, no whitespace, canonical)."""
    if isinstance(text, str):
        try:
            raw = text.encode("ascii")
        except UnicodeEncodeError:
            raise FormatError(f"{what}: not ASCII base64") from None
    else:
        raw = text
    if len(raw) % 4:
        raise FormatError(f"{what}: bad base64 length")
    try:
        out = pybase64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise FormatError(f"{what}: invalid base64") from None
    if pybase64.b64encode(out) != raw:
        raise FormatError(f"{what}: non-canonical base64")
    return out


def b64dec_hash(text: str, *, what: str = "hash") -> bytes:
    out = b64dec(text, what=what)
    if len(out) != 32:
        raise FormatError(f"{what}: must decode to 32 bytes, got {len(out)}")
    return out


def b64url_dec(text: object, *, what: str = "base64url") -> bytes:
    """Strict base64url without padding (RFC 4648 §5, as JOSE writes it), canonical."""
    if not isinstance(text, str) or not text.isascii():
        raise FormatError(f"{what}: not base64url text")
    if len(text) % 4 == 1 or "=" in text:
        raise FormatError(f"{what}: bad base64url length or padding")
    raw = text.encode("ascii")
    try:
        out = pybase64.b64decode(raw + b"=" * (-len(raw) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise FormatError(f"{what}: invalid base64url") from None
    if pybase64.b64encode(out, altchars=b"-_").rstrip(b"=") != raw:
        raise FormatError(f"{what}: non-canonical base64url")
    return out


def b64dec_either(text: object, *, what: str = "base64") -> bytes:
    """Standard base64 with padding, or base64url without: OAP's examples write
    signatures as base64url (OAP-CORE-1.0 §8.2), C2SP and this log as standard base64.
    Both are strict, so one text still decodes one way."""
    if not isinstance(text, str):
        raise FormatError(f"{what}: must be a base64 string")
    if "-" in text or "_" in text or len(text) % 4:
        return b64url_dec(text, what=what)
    return b64dec(text, what=what)
