"""Strict base64 and small text helpers shared by every wire format.

C2SP formats use standard base64 with padding; a decoder that accepts
whitespace or missing padding would let two different texts mean the same
bytes, so decoding here is strict (and round-trips exactly).
"""
from __future__ import annotations

import base64
import binascii

from .errors import FormatError


def b64enc(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


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
        out = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise FormatError(f"{what}: invalid base64") from None
    if base64.b64encode(out) != raw:
        raise FormatError(f"{what}: non-canonical base64")
    return out


def b64dec_hash(text: str, *, what: str = "hash") -> bytes:
    out = b64dec(text, what=what)
    if len(out) != 32:
        raise FormatError(f"{what}: must decode to 32 bytes, got {len(out)}")
    return out
