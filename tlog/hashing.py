"""RFC 9162 §2.1 hashing: the only place the project hashes tree nodes.

leaf = SHA-256(0x00 || data), node = SHA-256(0x01 || left || right), and the
root of the empty tree is SHA-256(""). OAP hash strings are "sha256:<64 hex>".
"""
from __future__ import annotations

import hashlib

from .errors import InvalidInput

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()
_sha256 = hashlib.sha256


def sha256(data: bytes) -> bytes:
    return _sha256(data).digest()


def leaf_hash(data: bytes) -> bytes:
    return _sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return _sha256(b"\x01" + left + right).digest()


def format_sha256(digest: bytes) -> str:
    """32 raw bytes -> "sha256:<lowercase hex>" (the OAP receipt convention)."""
    if len(digest) != HASH_SIZE:
        raise ValueError("sha256 digest must be 32 bytes")
    return "sha256:" + digest.hex()


def parse_sha256(text: object, field: str = "hash") -> bytes:
    """"sha256:<64 hex>" -> 32 bytes; anything else is invalid input."""
    if not isinstance(text, str) or not text.startswith("sha256:") or len(text) != 71:
        raise InvalidInput(f"{field} must be 'sha256:' followed by 64 hex digits")
    hexpart = text[7:]
    if any(c not in "0123456789abcdefABCDEF" for c in hexpart):  # fromhex would skip spaces
        raise InvalidInput(f"{field} must be 'sha256:' followed by 64 hex digits")
    return bytes.fromhex(hexpart)
