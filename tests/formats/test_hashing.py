"""Batch hashing (tlog.formats.hashing): `node_hashes` and `leaf_hashes`, through the C
extension and through hashlib alone (the `hash_impl` fixture), against one hash at a time."""
from __future__ import annotations

import numpy as np
import pytest

from tlog.formats import hashing
from tlog.formats.hashing import leaf_hash, leaf_hashes, node_hash, node_hashes

from tests.support.tools import need


def test_node_hashes_matches_node_hash(monkeypatch, hash_impl):
    monkeypatch.setattr(hashing, "_CHUNK", 7)  # exercise the chunk boundaries
    rng = np.random.default_rng(1)
    for m in (0, 1, 6, 7, 8, 50, 1000):
        left = rng.integers(0, 256, (m, 32), dtype=np.uint8)
        right = rng.integers(0, 256, (m, 32), dtype=np.uint8)
        want = [node_hash(a.tobytes(), b.tobytes()) for a, b in zip(left, right)]
        got = node_hashes(left, right)
        assert got.shape == (m, 32)
        assert [r.tobytes() for r in got] == want
        pairs = np.concatenate([left, right], axis=1)
        assert [r.tobytes() for r in hashing.node_hashes_of_pairs(pairs)] == want
        # a strided (non-contiguous) view of the same pairs
        wide = np.zeros((m, 128), dtype=np.uint8)
        wide[:, :64] = pairs
        assert [r.tobytes() for r in hashing.node_hashes_of_pairs(wide[:, :64])] == want
    entries = [bytes([i % 256]) * i for i in range(300)]
    assert [r.tobytes() for r in leaf_hashes(entries)] == [leaf_hash(e) for e in entries]
    assert leaf_hashes([]).shape == (0, 32)


def test_native_hashing_is_built_where_it_can_be():
    """`make` builds tlog._native wherever gcc and OpenSSL's headers exist; a silent
    fallback to hashlib would cost 4x on every batch path."""
    need("c-compiler")
    assert hashing.native is not None


def test_native_hashing_rejects_bad_buffers():
    need("native")
    from tlog import _native

    with pytest.raises(ValueError):
        _native.node_hashes_into(bytes(65), bytearray(32))
    with pytest.raises(ValueError):
        _native.node_hashes_into(bytes(64), bytearray(64))
    with pytest.raises(TypeError):
        _native.node_hashes_into(bytes(64), bytes(32))  # not writable
    with pytest.raises(TypeError):
        _native.leaf_hashes([b"ok", "not bytes"])
    with pytest.raises(TypeError):
        _native.leaf_hashes(5)
