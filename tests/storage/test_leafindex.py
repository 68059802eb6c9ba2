"""The leaf-hash index (tlog.storage.leafindex) against a plain dict, through resizes,
forced tag collisions, torn slots, crashes and read-only directories."""
from __future__ import annotations

import gc
import mmap
import os
import random
import threading
import time

import numpy as np
import pytest

from tlog.formats.hashing import hash_rows, leaf_hash
from tlog.storage import leafindex
from tlog.storage.leafindex import LeafIndex

from tests.support.procmem import cached_pages, mapped_kb


class Leaves:
    """A stand-in level-0 hash file: the list of leaf hashes in log order."""

    def __init__(self) -> None:
        self.hashes: list[bytes] = []

    def at(self, ix: np.ndarray) -> np.ndarray:
        assert ix.size == 0 or int(ix.max()) < len(self.hashes)  # never asked past the end
        return np.frombuffer(b"".join(self.hashes[int(i)] for i in ix), dtype=np.uint8).reshape(-1, 32)

    def range(self, start: int, count: int) -> np.ndarray:
        return np.frombuffer(b"".join(self.hashes[start : start + count]), dtype=np.uint8).reshape(count, 32)


def make(tmp_path, leaves: Leaves, **kw) -> LeafIndex:
    idx = LeafIndex(tmp_path / "leafindex.bin", leaf_at=leaves.at, leaves=leaves.range, **kw)
    idx.catch_up(len(leaves.hashes))
    return idx


def append(idx: LeafIndex, leaves: Leaves, new: list[bytes]) -> bool:
    old = len(leaves.hashes)
    leaves.hashes.extend(new)
    return idx.add(new, old, old + len(new))


def test_matches_a_dict_across_resizes(tmp_path):
    rng = random.Random(7)
    leaves = Leaves()
    idx = make(tmp_path, leaves)
    start_capacity = idx._table.capacity
    want: dict[bytes, int] = {}
    for _ in range(40):
        new = [rng.randbytes(32) for _ in range(rng.choice([1, 2, 999, 3000, 7000]))]
        assert append(idx, leaves, new)
        want.update({h: len(want) + i for i, h in enumerate(new)})
    idx.finish_resize()  # one may still be under way in the background
    assert idx._table.capacity > start_capacity  # resized at least once
    assert idx.count == len(want) and 2 * idx.count <= idx._table.capacity
    probe = rng.sample(list(want), 5000) + [rng.randbytes(32) for _ in range(5000)]
    assert idx.lookup(probe) == {h: want[h] for h in probe if h in want}
    for h in probe[:50]:
        assert idx.index_of(h, len(want)) == want.get(h)
    assert idx.index_of(probe[0], want[probe[0]]) is None  # not yet in a tree of that size
    idx.close()
    # reopened cleanly: same answers, count from the header
    again = make(tmp_path, leaves)
    assert again.count == len(want)
    assert again.lookup(probe) == {h: want[h] for h in probe if h in want}
    again.close()


def test_same_tag_different_hash_is_told_apart_by_the_full_hash(tmp_path):
    """Tags are only 8 bytes: entries sharing a tag (ground by an attacker, or
    by chance) share a probe chain, and the level-0 check keeps them apart."""
    leaves = Leaves()
    idx = make(tmp_path, leaves)
    base = os.urandom(8)
    same_tag = [base + os.urandom(24) for _ in range(50)]
    assert append(idx, leaves, same_tag[:40])
    assert idx.lookup(same_tag) == {h: i for i, h in enumerate(same_tag[:40])}
    assert append(idx, leaves, same_tag[40:])
    assert idx.lookup(same_tag) == {h: i for i, h in enumerate(same_tag)}
    idx.close()


def test_torn_and_garbage_slots_never_give_a_wrong_index(tmp_path):
    leaves = Leaves()
    idx = make(tmp_path, leaves)
    hashes = [leaf_hash(str(i).encode()) for i in range(2000)]
    assert append(idx, leaves, hashes)
    slots = idx._table.slots
    rng = np.random.default_rng(3)
    full = np.flatnonzero(slots[:, 1] != 0)
    victims = rng.choice(full, 300, replace=False)
    slots[victims[:100], 1] = rng.integers(1, 2001, 100, dtype=np.uint64)  # idx torn: wrong index
    slots[victims[100:200], 0] = rng.integers(0, 2**63, 100, dtype=np.uint64)  # tag torn
    slots[victims[200:], 1] = 0  # not written at all
    got = idx.lookup(hashes)
    assert all(hashes[i] == h for h, i in zip(got, got.values()))  # every answer is right
    assert all(got[h] == i for i, h in enumerate(hashes) if h in got)
    idx.close()


def test_lost_update_and_crash_tail_are_refilled(tmp_path):
    leaves = Leaves()
    idx = make(tmp_path, leaves)
    assert append(idx, leaves, [os.urandom(32) for _ in range(100)])
    old = len(leaves.hashes)
    leaves.hashes.extend(os.urandom(32) for _ in range(50))  # committed, index update lost
    later = [os.urandom(32) for _ in range(10)]
    assert not append(idx, leaves, later)  # refuses to paper over the gap
    idx.catch_up(len(leaves.hashes))
    assert idx.lookup(leaves.hashes) == {h: i for i, h in enumerate(leaves.hashes)}
    assert idx.indexed_size == old + 60
    # a kill -9: no clean close, the header says 160; entries 160..199 never indexed
    leaves.hashes.extend(os.urandom(32) for _ in range(40))
    os.close(idx._fd)
    idx._fd = None
    again = make(tmp_path, leaves)
    assert again.lookup(leaves.hashes) == {h: i for i, h in enumerate(leaves.hashes)}
    again.close()


@pytest.mark.parametrize("clean", [True, False])
def test_after_a_machine_restart_only_an_unclean_index_is_rebuilt(tmp_path, monkeypatch, clean):
    """A clean close fsyncs the table and marks it valid on any boot; a table left by
    a process that did not close it may have lost mapped stores with the machine."""
    leaves = Leaves()
    idx = make(tmp_path, leaves)
    assert append(idx, leaves, [os.urandom(32) for _ in range(3000)])
    if clean:
        idx.close()
        assert leafindex._HDR.unpack(os.pread(os.open(tmp_path / "leafindex.bin", os.O_RDONLY),
                                              leafindex._HDR.size, 0))[6].rstrip(b"\0") == b"synced"
    else:
        os.close(idx._fd)  # a kill -9: the header still names this boot
        idx._fd = None
    monkeypatch.setattr(leafindex, "boot_id", lambda: "another-boot")
    rebuilt = []
    real = leaves.range
    leaves.range = lambda start, count: rebuilt.append(count) or real(start, count)
    again = make(tmp_path, leaves)
    assert (sum(rebuilt) == 3000) != clean  # read every leaf again only when unclean
    assert again.lookup(leaves.hashes) == {h: i for i, h in enumerate(leaves.hashes)}
    assert append(again, leaves, [os.urandom(32) for _ in range(10)])
    again.close()
    ro = make(tmp_path, leaves, read_only=True)  # a read-only directory takes a synced table as it is
    assert ro._table.mm is not None
    assert ro.lookup(leaves.hashes[::97]) == {h: i * 97 for i, h in enumerate(leaves.hashes[::97])}
    ro.close()


def test_reopening_a_synced_table_syncs_its_new_header_before_any_store(tmp_path, monkeypatch):
    """Once a SYNCED table is opened for writing, its header must say so on disk before
    the map takes a store: a SYNCED header surviving a power loss over a changed table
    would be trusted on the next boot with a count that is too small."""
    leaves = Leaves()
    idx = make(tmp_path, leaves)
    assert append(idx, leaves, [os.urandom(32) for _ in range(100)])
    idx.close()
    assert not append(idx, leaves, [os.urandom(32)])  # a closed index takes nothing more
    leaves.hashes.pop()
    path = tmp_path / "leafindex.bin"
    synced_at = []  # the header's boot field on disk at each fdatasync
    real = os.fdatasync

    def spy(fd):
        real(fd)
        synced_at.append(leafindex._HDR.unpack(os.pread(fd, leafindex._HDR.size, 0))[6].rstrip(b"\0"))

    monkeypatch.setattr(leafindex.os, "fdatasync", spy)
    again = make(tmp_path, leaves)
    assert synced_at and synced_at[0] == leafindex.boot_id().encode()  # synced, and no longer "synced"
    assert append(again, leaves, [os.urandom(32) for _ in range(10)])
    assert again.lookup(leaves.hashes) == {h: i for i, h in enumerate(leaves.hashes)}
    again.close()
    assert leafindex._HDR.unpack(path.read_bytes()[: leafindex._HDR.size])[6].rstrip(b"\0") == b"synced"


def test_index_ahead_of_the_log_or_damaged_is_rebuilt(tmp_path):
    leaves = Leaves()
    idx = make(tmp_path, leaves)
    assert append(idx, leaves, [os.urandom(32) for _ in range(300)])
    idx.close()
    del leaves.hashes[200:]  # an older backup of the log
    again = make(tmp_path, leaves)
    assert again.indexed_size == 200
    assert again.lookup(leaves.hashes) == {h: i for i, h in enumerate(leaves.hashes)}
    again.close()
    path = tmp_path / "leafindex.bin"
    with open(path, "r+b") as f:
        f.write(b"garbage!")
    third = make(tmp_path, leaves)
    assert third.lookup(leaves.hashes) == {h: i for i, h in enumerate(leaves.hashes)}
    third.close()
    path.write_bytes(path.read_bytes()[:5000])  # truncated
    fourth = make(tmp_path, leaves)
    assert fourth.lookup(leaves.hashes[:3]) == {h: i for i, h in enumerate(leaves.hashes[:3])}
    fourth.close()


def test_old_sqlite_index_is_removed(tmp_path):
    (tmp_path / "leafindex.db").write_bytes(b"x")
    (tmp_path / "leafindex.db-wal").write_bytes(b"x")
    idx = make(tmp_path, Leaves())
    assert not (tmp_path / "leafindex.db").exists() and not (tmp_path / "leafindex.db-wal").exists()
    idx.close()


@pytest.mark.parametrize("stale", [False, True])
def test_read_only_serves_from_file_or_memory(tmp_path, stale):
    leaves = Leaves()
    idx = make(tmp_path, leaves)
    assert append(idx, leaves, [os.urandom(32) for _ in range(500)])
    idx.close()
    if stale:
        leaves.hashes.extend(os.urandom(32) for _ in range(70000))  # behind, and past one resize
    before = (tmp_path / "leafindex.bin").read_bytes()
    ro = make(tmp_path, leaves, read_only=True)
    assert ro.lookup(leaves.hashes[::7]) == {h: i * 7 for i, h in enumerate(leaves.hashes[::7])}
    ro.close()
    assert (tmp_path / "leafindex.bin").read_bytes() == before  # nothing written


def test_positions_are_keyed_per_file(tmp_path):
    tags = np.arange(1000, dtype=np.uint64)
    a = leafindex._positions(tags, 1, (1 << 16) - 1)
    b = leafindex._positions(tags, 2, (1 << 16) - 1)
    assert (a != b).mean() > 0.99
    assert a.min() >= 0 and a.max() < 1 << 16


@pytest.mark.parametrize("window", [0, 64 << 10, 4 << 20])
def test_a_table_larger_than_the_window_stays_out_of_rss(tmp_path, window):
    """The log's map window (bytes; 0: none) bounds the table's share of RSS: a table
    larger than the window (here 1 MiB against 64 KiB) is unmapped after every batch;
    one that fits stays mapped, as it would with no window."""
    leaves = Leaves()
    idx = make(tmp_path, leaves, window=window)
    for _ in range(5):
        assert append(idx, leaves, [os.urandom(32) for _ in range(4000)])
    assert idx._table.capacity * leafindex.SLOT_SIZE == 1 << 20
    path = tmp_path / "leafindex.bin"
    if window == 64 << 10:
        assert mapped_kb(path) == 0
    else:
        assert mapped_kb(path) > 100  # thousands of random slots touched
    assert idx.lookup(leaves.hashes[:50]) == {h: i for i, h in enumerate(leaves.hashes[:50])}
    idx.close()


def test_a_lookup_in_a_large_table_reads_its_pages_together(tmp_path, monkeypatch):
    """On a table of PREFETCH_AT bytes or more, a batch of lookups first asks for every page it
    will probe (MADV_WILLNEED), so that their reads are under way together instead of one
    major fault after another (at 2^26 entries, a 256-entry append waited 22-277 ms on those).
    Here: a table evicted from the page cache has exactly those pages read by `prefetch`, and
    lookups through that path answer as a dict does."""
    monkeypatch.setattr(leafindex, "PREFETCH_AT", 0)  # a 1 MiB table stands in for a 2 GiB one
    leaves = Leaves()
    idx = make(tmp_path, leaves)
    assert append(idx, leaves, [os.urandom(32) for _ in range(20_000)])
    idx.close()  # synced: its pages are clean, and can be dropped once nothing maps them
    del idx
    gc.collect()
    path = tmp_path / "leafindex.bin"
    idx = make(tmp_path, leaves)  # a clean close: only the header is read, and nothing faulted in
    fd = os.open(path, os.O_RDONLY)
    try:  # (after the open: reading the header reads ahead)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    npages = path.stat().st_size // mmap.PAGESIZE
    if sum(cached_pages(path, range(1, npages))) > npages // 10:
        pytest.skip("this filesystem keeps the file's pages in memory (tmpfs)")
    probe = random.Random(5).sample(leaves.hashes, 40)
    table = idx._table
    pos = leafindex._positions(leafindex._tags(hash_rows(probe)), table.key, table.mask)
    pages = sorted({(leafindex.HEADER + int(p) * leafindex.SLOT_SIZE) // mmap.PAGESIZE for p in pos})
    assert not any(cached_pages(path, pages))
    table.prefetch(pos)
    deadline = time.monotonic() + 30
    while not all(cached_pages(path, pages)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(cached_pages(path, pages))
    others = sorted(set(range(1, npages)) - set(pages))
    assert sum(cached_pages(path, others)) < len(others) // 2  # those pages, not the whole file
    assert idx.lookup(probe + [os.urandom(32) for _ in range(40)]) == {h: leaves.hashes.index(h) for h in probe}
    idx.close()


def test_a_resize_keeps_both_tables_out_of_rss(tmp_path, monkeypatch):
    """A table larger than the window doubles a chunk at a time, keeping its key, with both
    tables unmapped after each chunk: the process never holds either whole. Reading the
    old table whole and filling the new one at random held both (556 MB of peak RSS on
    the first append to a log of 2^22 entries)."""
    monkeypatch.setattr(leafindex, "_REHASH_CHUNK", 1 << 12)  # 64 KiB of slots
    rng = random.Random(3)
    leaves = Leaves()
    idx = make(tmp_path, leaves, window=64 << 10)
    assert append(idx, leaves, [rng.randbytes(32) for _ in range(1 << 16)])
    assert idx._table.capacity == 1 << 17  # 2 MiB, exactly half full: the next entry doubles it
    key = idx._table.key
    seen: list[tuple[int, int]] = []
    real_insert = leafindex._Table.insert

    def insert(self, tags, ix):
        filled = real_insert(self, tags, ix)
        seen.append((mapped_kb(tmp_path / "leafindex.bin"), mapped_kb(tmp_path / "leafindex.bin.new")))
        return filled

    monkeypatch.setattr(leafindex._Table, "insert", insert)
    assert append(idx, leaves, [rng.randbytes(32)])
    idx.finish_resize()
    monkeypatch.setattr(leafindex._Table, "insert", real_insert)
    assert idx._table.capacity == 1 << 18 and idx._table.key == key
    assert len(seen) >= 32  # one insert per chunk of the old table
    assert max(old for old, _ in seen) <= 512 and max(new for _, new in seen) <= 1024  # kB, of 2 and 4 MiB
    want = {h: i for i, h in enumerate(leaves.hashes)}
    probe = rng.sample(leaves.hashes, 3000) + [rng.randbytes(32) for _ in range(1000)]
    assert idx.lookup(probe) == {h: want[h] for h in probe if h in want}
    idx.close()
    again = make(tmp_path, leaves)  # reopened: the same answers
    assert again.lookup(probe) == {h: want[h] for h in probe if h in want}
    again.close()


class HeldResize:
    """An `on_resize` hook that holds the background resize at one step until released."""

    def __init__(self, step: str) -> None:
        import threading

        self.step = step
        self.reached = threading.Event()
        self.release = threading.Event()
        self.timed_out = False

    def __call__(self, step: str) -> None:
        if step == self.step:
            self.reached.set()
            self.timed_out = not self.release.wait(120)  # bounded: a broken test must not hang


def _fill_to_half(idx: LeafIndex, leaves: Leaves, rng: random.Random) -> None:
    cap = idx._table.capacity
    assert append(idx, leaves, [rng.randbytes(32) for _ in range(cap // 2)])
    assert idx._resize is None  # exactly half: no resize yet
    assert append(idx, leaves, [rng.randbytes(32)])  # one more starts it
    assert idx._resize is not None


@pytest.mark.parametrize("catch_up", ["one batch", "several batches"])
def test_appends_go_on_while_the_table_grows_in_the_background(tmp_path, monkeypatch, catch_up):
    """A resize never holds the writer: with the background copy held, batches keep going
    into the old table (which lookups keep reading), and the grown table, swapped in at the
    next batch after the copy, holds every entry, the ones indexed during the copy too
    (inserted by the catch-up in position order: in one sorted batch, or in several)."""
    if catch_up == "several batches":
        monkeypatch.setattr(leafindex, "_CATCH_UP_BATCH", 4096)
        monkeypatch.setattr(leafindex, "_CATCH_UP_CHUNK", 256)
    rng = random.Random(11)
    leaves = Leaves()
    held = HeldResize("copied")
    idx = make(tmp_path, leaves, on_resize=held)
    cap = idx._table.capacity
    _fill_to_half(idx, leaves, rng)
    assert held.reached.wait(120)
    for _ in range(15):  # up to 0.5 + 15 * 1000 / 2^16 < 0.75 of the old table
        assert append(idx, leaves, [rng.randbytes(32) for _ in range(1000)])
        assert idx._table.capacity == cap  # still the old table: the writer did not wait
    want = {h: i for i, h in enumerate(leaves.hashes)}
    probe = rng.sample(leaves.hashes, 2000) + [rng.randbytes(32) for _ in range(500)]
    assert idx.lookup(probe) == {h: want[h] for h in probe if h in want}
    held.release.set()
    idx._resize.ready.wait(120)
    assert append(idx, leaves, [rng.randbytes(32)])  # swaps the new table in
    assert not held.timed_out
    assert idx._resize is None and idx._table.capacity == 2 * cap
    want = {h: i for i, h in enumerate(leaves.hashes)}
    assert idx.count == len(want)
    probe = rng.sample(leaves.hashes, 5000) + [rng.randbytes(32) for _ in range(500)]
    assert idx.lookup(probe) == {h: want[h] for h in probe if h in want}
    assert not (tmp_path / "leafindex.bin.new").exists()
    idx.close()
    again = make(tmp_path, leaves)
    assert again._table.capacity == 2 * cap and again.count == len(want)
    assert again.lookup(probe) == {h: want[h] for h in probe if h in want}
    again.close()


def test_the_writer_waits_for_the_resize_only_at_three_quarters(tmp_path):
    """The one case a batch waits: the old table would pass three quarters load before the
    background copy is done. The batch then completes into the grown table."""
    import threading

    rng = random.Random(12)
    leaves = Leaves()
    held = HeldResize("copied")
    idx = make(tmp_path, leaves, on_resize=held)
    cap = idx._table.capacity
    _fill_to_half(idx, leaves, rng)
    assert held.reached.wait(120)
    big = [rng.randbytes(32) for _ in range(cap // 4)]  # 0.5 + 1/2^16 + 0.25 > 0.75
    done = threading.Event()
    t = threading.Thread(target=lambda: (append(idx, leaves, big), done.set()))
    t.start()
    # The batch cannot finish while the copy is held: it is waiting for it.
    assert not done.wait(0.5)
    held.release.set()
    t.join(120)
    assert done.is_set() and not held.timed_out
    assert idx._table.capacity == 2 * cap
    want = {h: i for i, h in enumerate(leaves.hashes)}
    assert idx.count == len(want)
    assert idx.lookup(big[:1000] + leaves.hashes[:1000]) == {h: want[h] for h in big[:1000] + leaves.hashes[:1000]}
    idx.close()


def test_a_close_or_crash_during_a_resize_keeps_the_old_table(tmp_path):
    """Closing during a resize drops the half-built table; a file left by a crash in the
    middle of one is ignored and replaced by the next resize. Either way the next start
    answers from the old table, and grows it again."""
    rng = random.Random(13)
    leaves = Leaves()
    held = HeldResize("copied")
    idx = make(tmp_path, leaves, on_resize=held)
    cap = idx._table.capacity
    _fill_to_half(idx, leaves, rng)
    assert held.reached.wait(120)
    assert (tmp_path / "leafindex.bin.new").exists()
    held.release.set()
    idx.close()
    assert not (tmp_path / "leafindex.bin.new").exists()
    (tmp_path / "leafindex.bin.new").write_bytes(os.urandom(5000))  # as a kill -9 mid-resize leaves it
    again = make(tmp_path, leaves)
    assert again._table.capacity == cap
    want = {h: i for i, h in enumerate(leaves.hashes)}
    assert again.lookup(leaves.hashes[::97]) == {h: want[h] for h in leaves.hashes[::97]}
    assert append(again, leaves, [rng.randbytes(32)])
    again.finish_resize()
    assert again._table.capacity == 2 * cap
    want = {h: i for i, h in enumerate(leaves.hashes)}
    assert again.lookup(leaves.hashes[::31]) == {h: want[h] for h in leaves.hashes[::31]}
    again.close()


def test_a_replaced_table_is_freed_only_once_no_reader_holds_it(tmp_path):
    """The old table of a swap is freed by a thread of its own, its file punched out a step
    at a time (freeing it whole held the writer's next fsync); a reader that took the old
    table before the swap must go on reading every entry, never a punched hole, until it
    lets go; then the thread frees it and ends."""
    import threading
    import time

    rng = random.Random(17)
    leaves = Leaves()
    idx = make(tmp_path, leaves)
    cap = idx._table.capacity
    _fill_to_half(idx, leaves, rng)
    reader_table = idx._table  # what a lookup under way before the swap holds
    idx.finish_resize()
    assert idx._table.capacity == 2 * cap and idx._table is not reader_table
    want = {h: i for i, h in enumerate(leaves.hashes)}

    def droppers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "tlog-leafindex-drop"]

    deadline = time.monotonic() + 30
    while not droppers() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert droppers(), "the old table is freed by a thread of its own"
    probe = rng.sample(leaves.hashes, 3000)
    rows = np.frombuffer(b"".join(probe), dtype=np.uint8).reshape(-1, 32)
    for _ in range(3):  # while held, every entry is still found in the old table
        found = reader_table.find(rows, leaves.at, len(leaves.hashes))
        assert [int(i) for i in found] == [want[h] for h in probe]
        time.sleep(0.05)
    del reader_table
    deadline = time.monotonic() + 30
    while droppers() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not droppers(), "once no one holds it, the old table is freed"
    assert idx.lookup(probe) == {h: want[h] for h in probe}
    idx.close()


def test_a_rebuilt_table_survives_the_freeing_of_the_one_it_replaced(tmp_path, monkeypatch):
    """A rebuild after a machine restart writes a new file: the thread that punches out the
    replaced table's blocks must never reach the new table's (they once shared an inode)."""
    leaves = Leaves()
    idx = make(tmp_path, leaves)
    assert append(idx, leaves, [os.urandom(32) for _ in range(3000)])
    os.close(idx._fd)  # a kill -9
    idx._fd = None
    monkeypatch.setattr(leafindex, "boot_id", lambda: "another-boot")
    again = make(tmp_path, leaves)
    deadline = time.monotonic() + 60
    while any(t.name == "tlog-leafindex-drop" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the replaced table was never freed"
        time.sleep(0.01)
    assert again.lookup(leaves.hashes) == {h: i for i, h in enumerate(leaves.hashes)}
    again.close()
