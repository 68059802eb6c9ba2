"""The hash cache that starts from the right edge (tlog.storage.lazyhashes): it holds only the
edge's partial tiles at first, serves every read of the tree by filling the full tiles it
needs (checked against the tree, never trusted as fetched), and appends from the edge as a
full cache does. References: pymerkle for proofs, a cache built whole for the bytes."""
from __future__ import annotations

import numpy as np
import pytest
from pymerkle import InmemoryTree

from tlog.errors import Unavailable
from tlog.formats.hashing import leaf_hashes
from tlog.formats.tiles import TILE_HEIGHT, TILE_WIDTH, tile_coords
from tlog.merkle.proofs import inclusion_levels
from tlog.merkle.tree import TreeView
from tlog.merkle.verify import verify_consistency
from tlog.storage.hashfiles import HashFiles
from tlog.storage.lazyhashes import LazyHashes

N = TILE_WIDTH ** 2 + 3 * TILE_WIDTH + 77  # a full tile at tile level 1, partial tiles at levels 0, 1, 2


def datas(n: int, prefix: str = "e") -> list[bytes]:
    return [f"{prefix}:{i}".encode() for i in range(n)]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The leaf hashes, a cache built whole (what the bucket's tiles are read from) and pymerkle."""
    leaves = leaf_hashes(datas(N))
    full = HashFiles(tmp_path_factory.mktemp("full") / "hashes")
    full.append(0, leaves)
    ref = InmemoryTree(algorithm="sha256")
    for d in datas(N):
        ref.append_entry(d)
    yield leaves, full, ref
    full.close()


def edge_of(full: HashFiles, size: int) -> dict[int, bytes]:
    out = {}
    for level in range(8):
        width = (size >> (TILE_HEIGHT * level)) % TILE_WIDTH
        if width:
            out[level] = full.read_range(TILE_HEIGHT * level, (size >> (TILE_HEIGHT * level)) - width, width)
    return out


def lazy(tmp_path, world, *, tamper: str = "", reads: list | None = None) -> tuple[LazyHashes, list[str]]:
    leaves, full, _ = world
    fetched: list[str] = []

    def leaf_rows(start: int, count: int) -> np.ndarray:
        if reads is not None:
            reads.append((start, count))
        return leaves[start:start + count]

    def fetch(path: str) -> bytes | None:
        fetched.append(path)
        level, index, width = tile_coords(path)
        assert level is not None and width == TILE_WIDTH  # only full tiles are fetched on demand
        data = full.read_range(TILE_HEIGHT * level, index * TILE_WIDTH, width)
        return bytes(32) + data[32:] if path == tamper else data

    hashes = LazyHashes(HashFiles(tmp_path / "hashes"), fetch=fetch, leaves=leaf_rows)
    hashes.load_edge(N, edge_of(full, N))
    return hashes, fetched


def pymerkle_path(ref: InmemoryTree, index: int, size: int) -> list[bytes]:
    path = [bytes.fromhex(h) for h in ref.prove_inclusion(index + 1, size).serialize()["path"]]
    return path[1:]  # pymerkle's path starts with the leaf itself


def test_the_edge_alone_gives_the_root_and_holds_no_full_tile(tmp_path, world):
    leaves, full, ref = world
    hashes, fetched = lazy(tmp_path, world)
    assert hashes.missing == N // TILE_WIDTH + 1  # every full tile of levels 0 and 1
    assert TreeView(N, hashes.read).root == ref.get_root(N) == TreeView(N, full.read).root
    assert fetched == [] and hashes.fetched == 0
    assert hashes.files.read(0, 5) == bytes(32)  # a hole: nothing of the old tiles was written
    assert hashes.files.read(0, N - 1) == leaves[N - 1].tobytes()  # the edge was
    hashes.close()


def test_proofs_of_old_entries_fill_the_tiles_they_need_and_equal_pymerkle(tmp_path, world):
    leaves, full, ref = world
    hashes, fetched = lazy(tmp_path, world)
    view = TreeView(N, hashes.read)
    for index in (0, 5, 300, 65535, 65600, N - 1):
        assert view.inclusion_proof(index) == pymerkle_path(ref, index, N), index
    assert fetched == ["tile/1/000"]  # the one full tile above level 0 (level 0 is read from the entries)
    assert hashes.files.read(0, 5) == leaves[5].tobytes()
    filled = hashes.fetched
    assert 0 < filled and hashes.missing == N // TILE_WIDTH + 1 - filled
    before = hashes.missing
    view.inclusion_proof(5)  # cached: nothing fetched again
    assert hashes.missing == before and fetched == ["tile/1/000"]
    # batched proofs (gathers), tile reads and consistency proofs of older sizes
    idx = np.array([1, 700, 40_000, 66_000], dtype=np.int64)
    batch = inclusion_levels(view, hashes, idx)
    assert batch.split(text=False) == [pymerkle_path(ref, int(i), N) for i in idx]
    assert hashes.read_range(0, 256 * 100, 256) == full.read_range(0, 256 * 100, 256)
    whole = TreeView(N, full.read)
    for old in (1, 1000, 65536, 66000):
        proof = view.consistency_proof(old)
        assert proof == whole.consistency_proof(old), old
        verify_consistency(old, N, ref.get_root(old), ref.get_root(N), proof)
    hashes.close()


def test_a_batch_of_random_proofs_reads_the_entries_a_run_of_tiles_at_a_time(tmp_path, world):
    _, full, ref = world
    reads: list[tuple[int, int]] = []
    hashes, fetched = lazy(tmp_path, world, reads=reads)
    idx = np.random.default_rng(7).integers(0, N, 3000)  # nearly every one of the 259 level-0 tiles
    view = TreeView(N, hashes.read)
    batch = inclusion_levels(view, hashes, idx).split(text=False)
    assert batch == inclusion_levels(TreeView(N, full.read), full, idx).split(text=False)
    assert [batch[k] for k in range(5)] == [pymerkle_path(ref, int(i), N) for i in idx[:5]]
    assert len(reads) < 20 and fetched == ["tile/1/000"]  # runs of tiles, not a read per tile
    touched = sorted({int(i) >> 8 for i in idx if int(i) >> 8 < N // TILE_WIDTH})
    assert hashes.missing == N // TILE_WIDTH + 1 - hashes.fetched and hashes.fetched >= len(touched)
    for tile in touched:  # straight from the files, as written
        assert hashes.files.read_range(0, tile * TILE_WIDTH, TILE_WIDTH) == full.read_range(0, tile * TILE_WIDTH,
                                                                                           TILE_WIDTH)
    hashes.close()


def test_appends_go_on_from_the_edge(tmp_path, world):
    leaves = world[0]
    hashes, fetched = lazy(tmp_path, world)
    more = leaf_hashes(datas(70_000, "more"))[:TILE_WIDTH * 300]  # completes tiles at levels 0 and 1
    hashes.append(N, more)
    size = N + more.shape[0]
    whole = HashFiles(tmp_path / "whole")
    whole.append(0, np.concatenate([leaves, more]))
    assert TreeView(size, hashes.read).root == TreeView(size, whole.read).root
    assert fetched == []  # appending needed only the edge
    assert hashes.read_range(8, 256, 256) == whole.read_range(8, 256, 256)  # a tile completed by the appends
    assert TreeView(size, hashes.read).inclusion_proof(3) == TreeView(size, whole.read).inclusion_proof(3)
    whole.close()
    hashes.close()


def test_a_tile_that_does_not_hash_to_the_tree_is_refused_and_not_written(tmp_path, world):
    hashes, fetched = lazy(tmp_path, world, tamper="tile/1/000")
    for attempt in (1, 2):  # refused each time: nothing of it is kept
        with pytest.raises(Unavailable):
            TreeView(N, hashes.read).inclusion_proof(7)
        assert fetched == ["tile/1/000"] * attempt
    assert hashes.files.read(8, 0) == bytes(32)  # nothing of it was written
    assert hashes.fetched == 0
    hashes.close()


def test_a_tile_the_bucket_lacks_is_computed_from_the_entries(tmp_path, world):
    leaves, full, ref = world
    hashes = LazyHashes(HashFiles(tmp_path / "hashes"), fetch=lambda path: None,
                        leaves=lambda s, n: leaves[s:s + n])
    hashes.load_edge(N, edge_of(full, N))
    assert TreeView(N, hashes.read).inclusion_proof(9) == pymerkle_path(ref, 9, N)
    hashes.close()
