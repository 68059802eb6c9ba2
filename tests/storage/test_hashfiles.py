"""Hash files (tlog.storage.hashfiles) against the plain reference on random trees:
vectorised appends, windowed (bounded-memory) reads, huge pages, read-only readers.

The references: the RFC 9162 recursion (`ref_inclusion`, `mth`) and `TreeView` over
an in-memory tree. No timing here: the benchmarks measure speed, these tests pin
down that the fast code computes the same bytes.
"""
from __future__ import annotations

import random
import shutil

import numpy as np
import pytest

from tlog.formats.hashing import node_hash
from tlog.merkle.proofs import inclusion_levels
from tlog.merkle.tree import TreeView, build_levels, memory_view, mth, ref_inclusion
from tlog.storage import hashfiles as hashfiles_mod
from tlog.storage.hashfiles import HashFiles

from tests.support.mapped import MappedReader, digest
from tests.support.procmem import mapped_kb
from tests.support.trees import filled, leaves_for


@pytest.mark.parametrize("n", [1, 2, 3, 255, 256, 257, 1000, 1500])
def test_vectorized_append_writes_every_complete_node(tmp_path, n, hash_impl):
    leaves = leaves_for(n)
    hf = filled(tmp_path, leaves, seed=n)
    levels = build_levels(leaves)
    for k, nodes in enumerate(levels):
        if not nodes:
            break
        assert hf.read_range(k, 0, len(nodes)) == b"".join(nodes)
        j = random.Random(k).randrange(len(nodes))
        assert hf.read(k, j) == nodes[j]
        idx = np.array([random.Random(k + i).randrange(len(nodes)) for i in range(20)])
        assert [r.tobytes() for r in hf.gather(k, idx)] == [nodes[i] for i in idx]
    assert TreeView(n, hf.read).root == mth(leaves)
    assert hf.intact_size(n) == n


@pytest.mark.parametrize("mask_windows", [64, 2])
def test_windowed_reads_equal_mapped_reads(tmp_path, monkeypatch, mask_windows):
    """The bounded-memory default (levels over the window read window by window
    through the map, each window unmapped after its rows are taken; single nodes
    and ranges by pread) reads the same bytes as the plain maps, whether a gather
    picks each window's rows by a mask or (over many windows) by sorting."""
    monkeypatch.setattr(hashfiles_mod, "_MASK_WINDOWS", mask_windows)
    n = 3000
    leaves = leaves_for(n, 3)
    plain = filled(tmp_path, leaves, seed=1, window=0)  # no limit: the plain maps
    windowed = HashFiles(plain.dir, window=4096)  # 128 nodes per window
    rng = np.random.default_rng(5)
    for k in range(4):
        rows = (n >> k)
        for idx in (rng.integers(0, rows, 500), np.arange(rows)[::-1], np.array([rows - 1]),
                    np.array([0, rows - 1, 127, 128, 129, 0])):  # any order, window edges, repeats
            assert np.array_equal(windowed.gather(k, idx), plain.gather(k, idx))
        assert windowed._maps[k].windowed == (rows * 32 > 4096)
        assert windowed.read(k, rows - 1) == plain.read(k, rows - 1)
        assert windowed.read_range(k, 3, 200) == plain.read_range(k, 3, 200)
    view = TreeView(n, windowed.read)
    idx = rng.integers(0, n, 300)
    assert inclusion_levels(view, windowed, idx).split(text=False) == [view.inclusion_proof(int(i)) for i in idx]


def test_windowed_gathers_keep_at_most_a_window_mapped(tmp_path):
    """What bounds the RSS: after gathers over every window of a 1 MiB level, at most
    one window (plus the kernel's 64 KiB fault-around at its edge) is still mapped,
    where the plain maps keep the whole level."""
    n = 1 << 15  # level 0: 1 MiB
    leaves = leaves_for(n, 4)
    plain = filled(tmp_path, leaves, seed=1, window=0)
    windowed = HashFiles(shutil.copytree(plain.dir, tmp_path / "copy"), window=64 << 10)  # own files for smaps
    idx = np.random.default_rng(6).integers(0, n, 20_000)
    for _ in range(3):
        assert np.array_equal(windowed.gather(0, idx), plain.gather(0, idx))
    assert mapped_kb(plain.dir / "level-00") == 1024
    assert mapped_kb(windowed.dir / "level-00") <= 128
    view, ref = TreeView(n, windowed.read), memory_view(leaves)
    assert inclusion_levels(view, windowed, idx[:500]).split(text=False) == [ref.inclusion_proof(int(i)) for i in idx[:500]]
    assert mapped_kb(windowed.dir / "level-00") <= 128


@pytest.mark.parametrize("n", [129, 200, 1000, 1023, 1029, 3001])
def test_bounded_mode_proofs_at_every_size(tmp_path, n):
    """Windowed gathers give the RFC 9162 proofs at the full size and at older sizes
    (whose right edge cuts a window), with the indices in any order."""
    leaves = leaves_for(n, 11)
    windowed = filled(tmp_path, leaves, seed=2, window=4096)  # levels over 128 nodes are windowed
    rng = random.Random(n)
    for size in sorted({n, max(1, n - rng.randrange(0, 12)), n // 2 + 3, 17, 16, 15, 9, 8, 7, 1}):
        if size > n:
            continue
        view = TreeView(size, windowed.read)
        idx = [rng.randrange(size) for _ in range(40)] + [0, size - 1] + list(range(max(0, size - 9), size))
        rng.shuffle(idx)
        got = inclusion_levels(view, windowed, np.array(idx)).split(text=False)
        assert got == [ref_inclusion(i, leaves[:size]) for i in idx]


def test_windows_in_small_pages_are_dropped_once_to_come_back_huge(tmp_path):
    """Pages our own appends write are small, and re-mapping them on every gather costs
    ~5x the gather: a window whose take faults more than 2 MiB pages would is dropped
    from the page cache (posix_fadvise) so the next fault reads it back as huge pages,
    at most once a minute per window. The rows read are the same either way."""
    n = 1 << 17  # level 0: 4 MiB, two 2 MiB windows, written by small appends (small pages)
    leaves = leaves_for(n, 6)
    hf = filled(tmp_path, leaves, seed=4, window=2 << 20)
    idx = np.random.default_rng(7).integers(0, n, 20_000)
    want = b"".join(leaves[i] for i in idx.tolist())
    assert hf.gather(0, idx).tobytes() == want
    assert hf.regrown == 2  # both windows took one fault per 64 KiB, not one per 2 MiB
    assert hf.gather(0, idx).tobytes() == want  # read back in (as huge pages where the kernel can)
    assert hf.regrown == 2  # not again within the minute
    assert hf.gather(1, np.arange(10)).tobytes() == b"".join(leaves_for_level(leaves, 1)[:10])


def test_only_the_maps_faults_count_towards_dropping_a_window(tmp_path, monkeypatch):
    """A large gather from a few pages faults many anonymous pages for its own buffers;
    those must not make a window look small (the first version counted them, and then
    dropped windows already in huge pages and re-read them every minute). And a window
    that is found small again waits twice as long each time before the next drop."""
    n = 1 << 17
    leaves = leaves_for(n, 8)
    hf = filled(tmp_path, leaves, seed=5, window=2 << 20)
    for few in (np.arange(300_000) % 500, np.r_[np.arange(200_000) % 500, (1 << 16) + np.arange(200_000) % 500]):
        assert hf.gather(0, few).tobytes() == b"".join(leaves[i] for i in few[:600].tolist()) + \
            b"".join(leaves[i] for i in few[600:].tolist())
    assert hf.regrown == 0  # two windows, a few 64 KiB blocks each: small pages, but few faults
    m = hf._maps[0]
    clock = [1000.0]
    monkeypatch.setattr(hashfiles_mod.time, "monotonic", lambda: clock[0])
    drops = []
    for step in (0, 30, 59, 60, 121, 179, 180, 419, 420):  # seconds since the first drop
        clock[0] = 1000.0 + step
        before = hf.regrown
        hf._regrow(0, m, 0)
        drops.append(hf.regrown - before)
    assert drops == [1, 0, 0, 1, 0, 0, 1, 0, 1]  # waits of 60, then 120, then 240 s


def leaves_for_level(leaves: list[bytes], k: int) -> list[bytes]:
    """Complete nodes of level k (k >= 0) of the tree over `leaves`."""
    level = leaves
    for _ in range(k):
        level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
    return level


def test_map_window_is_checked_and_huge_pages_are_only_a_hint(tmp_path, monkeypatch):
    """A window the kernel could not unmap by (not whole pages) is refused; a kernel that
    refuses the huge-page advice (EINVAL without transparent huge pages) still serves."""
    for bad in (-4096, 100, 4097):
        with pytest.raises(ValueError):
            HashFiles(tmp_path / "bad", window=bad)
    leaves = leaves_for(300, 5)
    hf = filled(tmp_path, leaves, seed=3, window=4096)
    monkeypatch.setattr(hashfiles_mod, "_HUGEPAGE", 0x7FFF)  # an advice no kernel knows: EINVAL
    fresh = HashFiles(hf.dir, window=4096)
    assert fresh.gather(0, np.array([299, 0, 150])).tobytes() == leaves[299] + leaves[0] + leaves[150]


def test_map_window_setting(tmp_path, monkeypatch):
    """Bounded memory is the default (16 MiB per level); map_window_mb = 0 lifts the limit."""
    from tlog.errors import ConfigError
    from tlog.runtime.config import load
    from tlog.server.config import LogConfig
    from tlog.storage.embedded import EmbeddedStorage

    assert LogConfig().map_window_mb == hashfiles_mod.DEFAULT_MAP_WINDOW_MB == 16
    assert HashFiles(tmp_path / "a").window == EmbeddedStorage(tmp_path / "b").hashes.window == 16 << 20
    monkeypatch.setenv("OAP_LOG_MAP_WINDOW_MB", "0")
    assert load(LogConfig, section="log", env_prefix="OAP_LOG_").map_window_mb == 0
    with pytest.raises(ConfigError):
        LogConfig(map_window_mb=-1).validate()


def test_readers_never_create_or_write_files(tmp_path):
    """Reads use read-only descriptors: a read-only data directory still serves."""
    leaves = leaves_for(20)
    filled(tmp_path, leaves).close()
    reader = HashFiles(tmp_path / "h0-20")
    before = sorted(p.name for p in reader.dir.iterdir())
    with pytest.raises(IndexError):
        reader.read(9, 0)
    with pytest.raises(IndexError):
        reader.gather(9, np.array([0]))
    assert reader.read(0, 19) == leaves[19]
    assert sorted(p.name for p in reader.dir.iterdir()) == before
    assert not reader._fds  # no read-write descriptor was opened


def test_a_cut_never_shortens_a_file_under_a_reader_that_mapped_it(tmp_path):
    """A cut writes what it keeps to a new file and renames it over the old one: a reader in
    another process that mapped the old file reads every byte of its map afterwards (a file
    shortened in place would kill it with SIGBUS), and the same reader's next read, like a
    new reader's, sees the files as the writer left them."""
    n = 3000
    leaves, other = leaves_for(n, 1), leaves_for(n, 2)
    writer = filled(tmp_path, leaves)
    reader = MappedReader(writer.dir, [0, 1, 8])
    try:
        before = {k: digest(writer.read_range(k, 0, n >> k)) for k in (0, 1, 8)}
        assert reader.mapped == before
        writer.cut(1000)  # keeps 1000 nodes of level 0, 500 of level 1, 3 of level 8
        died, old, seen = reader.check({0: 1000, 1: 500, 8: 3})
        assert died is None, f"the reader died with {died}"  # -7: SIGBUS, a map past the end of its file
        assert old == before  # its maps are of the old files, whole and unchanged
        assert seen == {k: digest(writer.read_range(k, 0, (1000 >> k))) for k in (0, 1, 8)}
        writer.append(1000, other[1000:])  # the repaired nodes differ from the ones the reader mapped
        now = build_levels(leaves[:1000] + other[1000:])
        died, old, seen = reader.check({k: n >> k for k in (0, 1, 8)})
        assert died is None and old == before
        assert seen == {k: digest(b"".join(now[k])) for k in (0, 1, 8)}  # its next reads: the new files
        assert reader.close() == 0
    finally:
        reader.kill()
    fresh = HashFiles(writer.dir)
    try:
        assert TreeView(n, fresh.read).root == mth(leaves[:1000] + other[1000:])
        assert fresh.read_range(0, 0, n) == b"".join(now[0])
    finally:
        fresh.close()
    assert sorted(p.name for p in writer.dir.iterdir() if not p.name.startswith("level-")) == ["generation"]


def test_a_cut_reaches_the_readers_of_the_same_process(tmp_path):
    """Threads reading through the writer's own HashFiles move to the new files at once; a
    level that keeps nothing is removed, and a new node there is written to a new file."""
    leaves, other = leaves_for(600, 3), leaves_for(600, 4)
    hf = filled(tmp_path, leaves, window=0)
    held = hf._map(9, 1)  # a gather under way holds its map
    assert hf.read(9, 0) == build_levels(leaves)[9][0]
    hf.cut(300)
    assert not (hf.dir / "level-09").exists() and (hf.dir / "level-00").stat().st_size == 300 * 32
    assert held.arr.tobytes() == build_levels(leaves)[9][0]  # still readable
    with pytest.raises(IndexError):
        hf.read(9, 0)
    hf.append(300, other[300:])
    assert TreeView(600, hf.read).root == mth(leaves[:300] + other[300:])
    assert hf.gather(0, np.array([299, 300, 599])).tobytes() == leaves[299] + other[300] + other[599]
