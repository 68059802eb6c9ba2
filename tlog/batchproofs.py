"""Batched inclusion proofs: one numpy gather per tree level (DESIGN §3.2).

For indices I in a tree of size n, the sibling at level k is s = (I >> k) ^ 1:
absent if it starts at or past n, a stored complete node if it ends by n, and
otherwise the single right-edge node of that level (cached in the TreeView).
Proofs come out as a (B, H, 32) array plus a presence mask, in RFC 9162 order.
`proofs_json` encodes them as JSON text without a Python loop per hash.
"""
from __future__ import annotations

import base64

import numpy as np

from .errors import InvalidInput
from .hashfiles import HashFiles
from .merkle import TreeView, height


def inclusion_matrix(view: TreeView, hashes: HashFiles, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = view.size
    idx = np.asarray(indices, dtype=np.int64)
    if idx.ndim != 1:
        raise InvalidInput("indices must be a flat list")
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise InvalidInput(f"every index must be in 0..{n - 1} for tree size {n}")
    h = height(n)
    out = np.empty((idx.size, h, 32), dtype=np.uint8)
    mask = np.empty((idx.size, h), dtype=bool)
    for k in range(h):
        s = (idx >> k) ^ 1
        start = s << k
        exists = start < n
        complete = start + (1 << k) <= n
        mask[:, k] = exists
        if complete.all():
            out[:, k] = hashes.gather(k, s)
        else:
            if complete.any():
                out[complete, k] = hashes.gather(k, s[complete])
            partial = exists & ~complete
            if partial.any():
                out[partial, k] = np.frombuffer(view.edge[k], dtype=np.uint8)
    return out, mask


def proofs_as_bytes(out: np.ndarray, mask: np.ndarray) -> list[list[bytes]]:
    return [[row.tobytes() for row in out[b][mask[b]]] for b in range(out.shape[0])]


def _b64_rows(flat: np.ndarray) -> np.ndarray:
    """Base64 of each 32-byte row as an (M, 44) uint8 array, in one encode call.

    Padding each row to 33 bytes keeps 3-byte groups aligned per row; the last
    group then encodes (x, y, 0), whose first three characters equal those of
    the padded encoding of (x, y); only the fourth becomes "=".
    """
    m = flat.shape[0]
    padded = np.zeros((m, 33), dtype=np.uint8)
    padded[:, :32] = flat
    enc = np.frombuffer(base64.b64encode(padded.tobytes()), dtype=np.uint8).reshape(m, 44).copy()
    enc[:, 43] = ord("=")
    return enc


def proofs_json(out: np.ndarray, mask: np.ndarray) -> bytes:
    """JSON array of arrays of base64 strings, byte-identical to json.dumps(..., separators=(",", ":"))
    except for insignificant spaces after elements."""
    b = out.shape[0]
    if b == 0:
        return b"[]"
    counts = mask.sum(axis=1)
    if (counts == 0).any():  # only in a tree of size 1: every proof is empty
        return b"[" + b",".join(b"[]" for _ in range(b)) + b"]"
    flat = out[mask]
    m = flat.shape[0]
    rec = np.full((m, 49), ord(" "), dtype=np.uint8)
    ends = np.cumsum(counts) - 1
    firsts = ends - counts + 1
    rec[:, 1] = ord('"')
    rec[:, 2:46] = _b64_rows(flat)
    rec[:, 46] = ord('"')
    rec[:, 47] = ord(",")
    rec[firsts, 0] = ord("[")
    rec[ends, 47] = ord("]")
    rec[ends[:-1], 48] = ord(",")
    return b"[" + rec.tobytes() + b"]"
