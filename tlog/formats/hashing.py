"""RFC 9162 §2.1 hashing: the only place the project hashes tree nodes.

leaf = SHA-256(0x00 || data), node = SHA-256(0x01 || left || right), and the
root of the empty tree is SHA-256(""). OAP hash strings are "sha256:<64 hex>".
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TypeGuard

import numpy as np

from tlog.errors import FormatError, InvalidInput
from tlog.formats.encoding import b64dec

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()
_sha256 = hashlib.sha256


def sha256(data: bytes) -> bytes:
    return _sha256(data).digest()


def parse_leaf_hash(text: str, what: str = "leaf_hash") -> bytes:
    """A leaf hash as people paste it: 64 hex digits, or standard or URL-safe base64 of 32
    bytes (the log's lookups and `oap-log verify --leaf-hash` take the same spellings)."""
    if len(text) == 64:
        try:
            return bytes.fromhex(text)
        except ValueError:
            pass
    try:
        raw = b64dec(text.replace("-", "+").replace("_", "/"), what=what)
    except FormatError:
        raw = b""
    if len(raw) != HASH_SIZE:
        raise InvalidInput(f"{what} must be 64 hex digits or base64 of 32 bytes")
    return raw


def leaf_hash(data: bytes) -> bytes:
    return _sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return _sha256(b"\x01" + left + right).digest()


_CHUNK = 1 << 16  # rows per hashing pass: bounds the temporary Python objects

try:  # the optional C extension (setup.py), or None: then every batch goes through hashlib
    import tlog._native as native
except ImportError:  # pragma: no cover - exercised where the extension is not built
    native = None


def node_hashes(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Many node hashes at once: row i of the (m, 32) result is node_hash(left[i], right[i]).

    hashlib has no batch API and costs ~0.5 us per call from Python, four times the
    SHA-NI work of a node; the batch paths hash millions of nodes, so they go
    through `tlog._native` (OpenSSL's SHA-256 in one C loop, GIL released) when it
    is built, and through hashlib row by row otherwise. Both give the same bytes;
    tests compare them.
    """
    m = left.shape[0]
    if right.shape[0] != m:
        raise ValueError("left and right must have the same number of rows")
    if native is None:
        return node_hashes_hashlib(left, right)
    pairs = np.empty((m, 2 * HASH_SIZE), dtype=np.uint8)
    pairs[:, :HASH_SIZE] = left
    pairs[:, HASH_SIZE:] = right
    return node_hashes_of_pairs(pairs)


def node_hashes_of_pairs(pairs: np.ndarray) -> np.ndarray:
    """node_hashes for an (m, 64) C-contiguous array of left||right rows, without a copy."""
    if native is None or not pairs.flags.c_contiguous:
        return node_hashes(pairs[:, :HASH_SIZE], pairs[:, HASH_SIZE:])
    out = np.empty((pairs.shape[0], HASH_SIZE), dtype=np.uint8)
    native.node_hashes_into(pairs, out)
    return out


def node_hashes_hashlib(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """The hashlib path of node_hashes: numpy lays out every 0x01||left||right message in
    one buffer and a void-dtype view turns its rows into bytes without a Python loop."""
    m = left.shape[0]
    out = np.empty((m, HASH_SIZE), dtype=np.uint8)
    for lo in range(0, m, _CHUNK):
        hi = min(m, lo + _CHUNK)
        msg = np.empty((hi - lo, 1 + 2 * HASH_SIZE), dtype=np.uint8)
        msg[:, 0] = 1
        msg[:, 1 : 1 + HASH_SIZE] = left[lo:hi]
        msg[:, 1 + HASH_SIZE :] = right[lo:hi]
        rows = msg.view(f"V{1 + 2 * HASH_SIZE}").ravel().tolist()
        digests = b"".join([_sha256(r).digest() for r in rows])
        out[lo:hi] = np.frombuffer(digests, dtype=np.uint8).reshape(hi - lo, HASH_SIZE)
    return out


def hash_rows(hashes: Sequence[bytes] | np.ndarray) -> np.ndarray:
    """32-byte hashes as an (m, 32) uint8 array (an array of that shape passes through)."""
    if isinstance(hashes, np.ndarray):
        if hashes.dtype != np.uint8 or hashes.ndim != 2 or hashes.shape[1] != HASH_SIZE:
            raise ValueError("hashes must be an (m, 32) uint8 array")
        return hashes
    if hashes and set(map(len, hashes)) != {HASH_SIZE}:
        raise ValueError("hashes must be 32 bytes each")
    return np.frombuffer(b"".join(hashes), dtype=np.uint8).reshape(len(hashes), HASH_SIZE)


def leaf_hashes(entries: Sequence[bytes]) -> np.ndarray:
    """Leaf hashes of many entries as an (m, 32) array."""
    if native is not None:
        digests = native.leaf_hashes(entries)
    else:
        digests = leaf_hashes_hashlib(entries)
    return np.frombuffer(digests, dtype=np.uint8).reshape(len(entries), HASH_SIZE)


def leaf_hashes_hashlib(entries: Sequence[bytes]) -> bytes:
    """The hashlib path of leaf_hashes, as concatenated digests."""
    return b"".join([_sha256(b"\x00" + e).digest() for e in entries])


def format_sha256(digest: bytes) -> str:
    """32 raw bytes -> "sha256:<lowercase hex>" (the OAP receipt convention)."""
    if len(digest) != HASH_SIZE:
        raise ValueError("sha256 digest must be 32 bytes")
    return "sha256:" + digest.hex()


def parse_sha256(text: object, field: str = "hash") -> bytes:
    """"sha256:<64 hex>" -> 32 bytes; anything else is invalid input."""
    if not is_sha256_text(text):  # not fromhex alone: it would skip spaces
        raise InvalidInput(f"{field} must be 'sha256:' followed by 64 hex digits")
    return bytes.fromhex(text[7:])


_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


def is_sha256_text(text: object) -> TypeGuard[str]:
    """True for "sha256:" followed by exactly 64 ASCII hex digits (either case)."""
    return (type(text) is str and len(text) == 71 and text.startswith("sha256:")
            and _HEX64.fullmatch(text, 7) is not None)
