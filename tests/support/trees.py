"""Random trees for the batch-path tests: leaf hashes, and hash files filled as the writer fills them."""
from __future__ import annotations

import random

import numpy as np

from tlog.formats.hashing import leaf_hash
from tlog.storage.hashfiles import HashFiles

SIZES = [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 100, 255, 256, 257, 511, 777, 1000, 1025]


def leaves_for(n: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed * 7919 + n)
    return [leaf_hash(rng.randbytes(rng.randrange(0, 24)) + i.to_bytes(4, "big")) for i in range(n)]


OPENED: list[HashFiles] = []
"""What `filled` opened: closed after each test (tests/conftest.py), so that a worker running
hundreds of these tests does not pile up their descriptors."""


def close_filled() -> None:
    while OPENED:
        OPENED.pop().close()


def filled(tmp_path, leaves: list[bytes], seed: int = 0, **kw) -> HashFiles:
    """Hash files filled by appends of random sizes (the writer's real pattern)."""
    hf = HashFiles(tmp_path / f"h{seed}-{len(leaves)}", **kw)
    OPENED.append(hf)
    rng = random.Random(seed)
    i = 0
    while i < len(leaves):
        k = rng.choice([1, 2, 3, 5, 64, 255, 256, 257, 1000])
        if rng.random() < 0.5:
            hf.append(i, leaves[i : i + k])
        else:
            hf.append(i, np.frombuffer(b"".join(leaves[i : i + k]), dtype=np.uint8).reshape(-1, 32))
        i += len(leaves[i : i + k])
    return hf
