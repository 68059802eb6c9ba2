"""Leaf hash -> index, for deduplication and lookup by leaf hash (docs/architecture.md §3.1, §3.2).

Derived data, kept out of the fsync path: every leaf hash is also in the
level-0 hash file (and the entries table), so this index can always be
rebuilt from them.

Why not a B-tree: leaf hashes are uniformly random, so every insert into a
sorted index dirties a different page; in SQLite that was ~4 MB of WAL per
1,000-entry batch and 60 % of the time of a durable append. Here it is an
open-addressing hash table in one memory-mapped file: a slot is 16 bytes, the
first 8 bytes of the leaf hash (the tag) and index + 1 (0 = empty), at a
position derived from the tag with a per-file secret key (so submitters
cannot aim entries at one probe chain). Lookups and inserts are numpy
operations over the whole batch (in a large table, after asking for all the
pages the batch will probe at once: `_Table.prefetch`); a tag match is confirmed against the full
32-byte leaf hash in the level-0 hash file, so a torn slot or a 64-bit tag
collision can never return a wrong index.

Growth never pauses appends: at half load a background thread builds a table
of twice the capacity (same key) from the old one and from the level-0 hash
file, while the writer goes on inserting into the old table; the writer swaps
the new table in at its next batch once the thread has caught up to within one
batch. Only if the old table reached three quarters load first would the
writer wait for the thread (at 2^26 entries the copy takes seconds, while
filling the remaining quarter would take tens of millions of appends).

Crash model: writes go to the page cache through the mapping and are never
fsynced. `indexed_size` in the header says how far the index is complete; on
open the tail is re-read from the level-0 hash file (a process crash loses
nothing the OS already has). A reboot since the last write (power loss) may
have lost pages, so then the index is rebuilt from scratch.
"""
from __future__ import annotations

import ctypes
import logging
import mmap
import os
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from tlog.formats.hashing import hash_rows

log = logging.getLogger("oap.tlog.leafindex")

MAGIC = b"OAPLIDX1"
HEADER = 4096
# magic, capacity, indexed_size, count (valid when clean), key, clean, boot_id
_HDR = struct.Struct("<8sQQQQQ36s")
# In place of the boot id after a clean close: the table was fsynced before the header
# said so, so it holds across a machine restart (no boot id is ever this string).
SYNCED = "synced"
SLOT = np.dtype([("tag", "<u8"), ("idx", "<u8")])  # the file layout; in memory an (n, 2) uint64 view
SLOT_SIZE = 16
MIN_CAPACITY = 1 << 16
_REBUILD_CHUNK = 1 << 20
_REHASH_CHUNK = 1 << 17  # slots of the old table moved per step of a resize (2 MiB; see _rehash)
# Each step's pages of the new table are written out before the next (`_Resize._flush`), and
# whatever an append reads or syncs meanwhile queues behind the step in flight: at 2^26 entries
# on a virtual disk, the longest append was 69-165 ms with steps of 2^18 slots and 37-124 ms
# with 2^17 (benchmarks/growth.py). Most of what remained was the lookups' page faults, one
# read after another (see _Table.prefetch).
_SCALAR_TAIL = 8  # keys left after the vectorised rounds that are probed one by one
_SWAP_GAP = 1 << 11  # entries the background resize leaves for the writer to insert at the swap
# Entries inserted into a growing table between two unmappings of it (when the window says so)
# and between two flushes: each lands on a page of its own (in the catch-up, pages in one band,
# in ascending order), and each read fault maps its 64 KiB neighbourhood (fault-around), so
# 1,024 entries map up to 64 MiB, and a larger step would map most of a large table at once.
_CATCH_UP_CHUNK = 1 << 10
# Entries a resize's catch-up sorts by position at once (~56 bytes each while it runs; see
# _Resize._catch_up): the more, the closer together each chunk's pages lie.
_CATCH_UP_BATCH = 1 << 19
# Tables of at least this many bytes have the pages a batch of lookups needs read in parallel
# first (`_Table.prefetch`); smaller ones stay in the page cache, where it would only cost time.
PREFETCH_AT = 64 << 20
GROW_AT = 0.5  # load at which a background resize starts
WAIT_AT = 0.75  # load the writer may not pass while a resize is under way: it waits for it

# leaf_at(indices) -> (m, 32) uint8 rows of the level-0 hash file; rows past its end are never asked for
LeafReader = Callable[[np.ndarray], np.ndarray]
# leaves(start, count) -> (count, 32) uint8: the leaf hashes of entries start..start+count-1
LeafRange = Callable[[int, int], np.ndarray]
# on_resize(step): a test hook called by the background resize at "copied" (the old table's
# slots are in the new one) and "ready" (caught up to within _SWAP_GAP entries); None here
ResizeHook = Callable[[str], None]


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def _positions(tags: np.ndarray, key: int, mask: int) -> np.ndarray:
    """Keyed splitmix64 finaliser of the tags: the probe start of each."""
    with np.errstate(over="ignore"):
        x = tags ^ np.uint64(key)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x & np.uint64(mask)).astype(np.int64)


def _tags(rows: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(rows[:, :8]).view("<u8").ravel()


class _Table:
    """One hash table: a mapped file (or, read-only, anonymous memory) of slots."""

    def __init__(self, capacity: int, key: int, slots: np.ndarray, mm: mmap.mmap | None) -> None:
        self.capacity, self.key, self.slots, self.mm = capacity, key, slots, mm
        self.mask = capacity - 1

    def find(self, rows: np.ndarray, leaf_at: LeafReader, limit: int) -> np.ndarray:
        """Index of each row's leaf hash, or -1. Only indices below `limit` are trusted."""
        m = rows.shape[0]
        out = np.full(m, -1, dtype=np.int64)
        if m == 0:
            return out
        tags = _tags(rows)
        pos = _positions(tags, self.key, self.mask)
        self.prefetch(pos)
        active = np.arange(m)
        for _ in range(self.capacity):
            if active.size == 0:
                break
            s = np.take(self.slots, pos[active], axis=0)
            occupied = s[:, 1] != 0
            cand = occupied & (s[:, 0] == tags[active])
            if cand.any():
                ci = np.flatnonzero(cand)
                idx = s[ci, 1].astype(np.int64) - 1
                ok = (idx >= 0) & (idx < limit)  # a damaged slot may hold anything
                good = np.zeros(ci.size, dtype=bool)
                if ok.any():
                    good[ok] = (leaf_at(idx[ok]) == rows[active[ci[ok]]]).all(axis=1)
                out[active[ci[good]]] = idx[good]
                occupied[ci[good]] = False  # found: stop probing
            active = active[occupied]
            pos[active] = (pos[active] + 1) & self.mask
        return out

    def insert(self, tags: np.ndarray, idx: np.ndarray) -> int:
        """Insert (tag, index) pairs of leaf hashes not in the table; returns how many slots
        were filled (a pair already present with the same index is skipped)."""
        m = tags.shape[0]
        if m == 0:
            return 0
        want = idx.astype(np.uint64) + np.uint64(1)
        pos = _positions(tags, self.key, self.mask)
        active = np.arange(m)
        filled = 0
        for _ in range(self.capacity):
            if active.size <= _SCALAR_TAIL:  # a few long probe chains: cheaper one by one
                return filled + self._insert_scalar(tags[active], want[active], pos[active])
            p = pos[active]
            s = np.take(self.slots, p, axis=0)
            done = (s[:, 1] == want[active]) & (s[:, 0] == tags[active])
            empty = np.flatnonzero(s[:, 1] == 0)
            if empty.size:
                # several keys may aim at one empty slot this round: the first takes it
                pe = p[empty]
                if empty.size > 1:
                    order = np.argsort(pe, kind="stable")
                    ps = pe[order]
                    first = np.ones(ps.size, dtype=bool)
                    np.not_equal(ps[1:], ps[:-1], out=first[1:])
                    win = empty[order[first]]
                else:
                    win = empty
                new = np.empty((win.size, 2), dtype=np.uint64)
                new[:, 0] = tags[active[win]]
                new[:, 1] = want[active[win]]
                self.slots[p[win]] = new
                filled += win.size
                done[win] = True
            active = active[~done]
            pos[active] = (pos[active] + 1) & self.mask
        return filled

    def _insert_scalar(self, tags: np.ndarray, want: np.ndarray, pos: np.ndarray) -> int:
        slots, mask, filled = self.slots, self.mask, 0
        for tag, w, p in zip(tags.tolist(), want.tolist(), pos.tolist()):
            while True:
                t, i = slots[p].tolist()
                if i == 0:
                    slots[p] = (tag, w)
                    filled += 1
                    break
                if i == w and t == tag:
                    break
                p = (p + 1) & mask
        return filled

    def prefetch(self, pos: np.ndarray) -> None:
        """Start reading the pages of the slots at `pos` from the file, all at once.

        A lookup touches one page at random per leaf hash, and numpy faults them in one
        after another: at 2^26 entries (a 2 GiB table, most of it not in the page cache after
        a start) a batch of 256 lookups made ~200 major faults, 22 ms of disk reads in a row,
        and 277 ms while a resize was writing its table out (benchmarks/growth.py). With
        MADV_WILLNEED per page the reads are queued together and the faults then wait for
        reads already under way; for a page in the page cache it only costs a syscall."""
        if self.mm is None or _WILLNEED is None or self.capacity * SLOT_SIZE < PREFETCH_AT or pos.size == 0:
            return
        for page in np.unique((pos * SLOT_SIZE + HEADER) // _PAGE).tolist():
            try:
                self.mm.madvise(_WILLNEED, page * _PAGE, _PAGE)
            except OSError:  # only a hint
                return

    def release(self) -> None:
        """Unmap every page of the table from this process (RSS only: a shared file
        mapping's pages, dirty ones included, stay in the page cache)."""
        if self.mm is not None:
            self.mm.madvise(mmap.MADV_DONTNEED)

    def count(self) -> int:
        """Occupied slots, read in order (with read-ahead, then the table's random-access
        hint again: see _small_pages)."""
        self.advise(getattr(mmap, "MADV_SEQUENTIAL", None))
        try:
            return int(sum(int(np.count_nonzero(self.slots[lo : lo + _REBUILD_CHUNK, 1]))
                           for lo in range(0, self.capacity, _REBUILD_CHUNK)))
        finally:
            self.advise(getattr(mmap, "MADV_RANDOM", None))

    def advise(self, advice: int | None) -> None:
        """An madvise hint for the whole table (ignored where refused or unknown)."""
        if self.mm is not None and advice is not None:
            try:
                self.mm.madvise(advice)
            except OSError:
                pass


class LeafIndex:
    """The table plus its header; one writer thread, any number of readers.

    Readers take `self._table` once per call and never write; the writer
    only fills empty slots and swaps in a resized table whole, so a reader
    sees each slot either empty, filled, or torn (rejected by the full-hash
    check), and never needs a lock.
    """

    def __init__(self, path: Path, *, read_only: bool = False, leaf_at: LeafReader,
                 leaves: LeafRange, window: int = 0, on_resize: ResizeHook | None = None) -> None:
        self.path = Path(path)
        self.on_resize = on_resize
        self._resize: _Resize | None = None  # a larger table being built in the background
        # window: the log's bounded-memory setting (bytes; 0: none). A table larger than
        # the window is unmapped after every batch: each batch then faults its ~2 pages
        # per entry in again, but the table never adds its size to the process's RSS.
        self.window = window
        self.read_only = read_only
        self.leaf_at = leaf_at
        self.leaves = leaves
        self.indexed_size = 0
        self.count = 0
        self._table: _Table | None = None
        self._fd: int | None = None
        self._closed = False
        self._boot = boot_id()  # read once: the boot this process runs in

    # --- file ---------------------------------------------------------------------

    def _map_file(self, path: Path, writable: bool) -> tuple[int, _Table, tuple] | None:
        try:
            fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            head = os.pread(fd, _HDR.size, 0)
            if len(head) != _HDR.size:
                raise ValueError("short header")
            magic, capacity, indexed, count, key, clean, boot = _HDR.unpack(head)
            if magic != MAGIC or capacity < MIN_CAPACITY or capacity & (capacity - 1):
                raise ValueError("bad header")
            if os.fstat(fd).st_size != HEADER + capacity * SLOT_SIZE:
                raise ValueError("bad length")
            prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
            mm = _small_pages(mmap.mmap(fd, 0, mmap.MAP_SHARED, prot))
        except (ValueError, OSError) as e:
            os.close(fd)
            log.warning("leaf index %s is unusable (%s); rebuilding it", path, e)
            return None
        return fd, _Table(capacity, key, _slots(mm, capacity), mm), (indexed, count if clean else None,
                                                                   boot.rstrip(b"\0").decode("ascii", "replace"))

    def _create_file(self, path: Path, capacity: int, key: int | None = None) -> tuple[int, _Table]:
        """A new table file; `key` None: a new random key."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            # Reserve every block now: a store into a mapped hole on a full disk is a SIGBUS
            # that kills the process; here it is an ENOSPC the caller turns into a 503.
            os.posix_fallocate(fd, 0, HEADER + capacity * SLOT_SIZE)
        except OSError:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        mm = _small_pages(mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE))
        if key is None:
            key = int.from_bytes(os.urandom(8), "little")
        table = _Table(capacity, key, _slots(mm, capacity), mm)
        self._pack_header(fd, table, indexed=0, count=0, clean=False)
        return fd, table

    def _pack_header(self, fd: int, t: _Table, *, indexed: int, count: int, clean: bool,
                     boot: str | None = None) -> None:
        os.pwrite(fd, _HDR.pack(MAGIC, t.capacity, indexed, count, t.key, int(clean),
                                (self._boot if boot is None else boot).encode()), 0)

    def _write_header(self, clean: bool) -> None:
        if self._fd is not None and self._table is not None:
            self._pack_header(self._fd, self._table, indexed=self.indexed_size, count=self.count, clean=clean)

    def _set_table(self, fd: int | None, table: _Table) -> None:
        old, box = self._fd, [self._table]  # the box holds this thread's only reference to it
        self._table, self._fd = table, fd
        if old is not None and old != fd:
            # Dropping the old table frees its pages and, once replaced, its file's blocks:
            # hundreds of MiB at 2^26 entries, 70 ms and more on the writer's thread. A
            # thread of its own does it; the mapping stays valid for readers still holding it.
            threading.Thread(target=_drop, args=(old, box), name="tlog-leafindex-drop", daemon=True).start()

    # --- open and repair ------------------------------------------------------------

    def catch_up(self, size: int) -> None:
        """Make the index cover entries [0, size), whose leaf hashes `leaves` returns."""
        self._cancel_resize()  # a repair: the table is brought up to date whole, here
        if self._table is None:
            self._open(size)
        if self.indexed_size > size:  # the log is behind its index (a restored backup): start over
            log.warning("leaf index covers %d entries but the log holds %d; rebuilding it", self.indexed_size, size)
            self._reset(size)
        if self.indexed_size < size:
            self._grow_for(size - self.indexed_size)
            table = self._table  # opened above, perhaps grown into a new one
            assert table is not None
            for lo in range(self.indexed_size, size, _REBUILD_CHUNK):
                hi = min(size, lo + _REBUILD_CHUNK)
                self.count += table.insert(_tags(self.leaves(lo, hi - lo)), np.arange(lo, hi, dtype=np.int64))
            table.release()  # a rebuild touches every page: do not keep them all mapped
            self.indexed_size = size
            self._write_header(clean=False)

    def _open(self, size: int) -> None:
        if self.read_only:
            got = self._map_file(self.path, writable=False)
            if got is not None and got[2][0] == size and got[2][2] in (self._boot, SYNCED):
                fd, table, _ = got
                self._set_table(fd, table)
                self.indexed_size = size
                return
            if got is not None:
                os.close(got[0])
            # a read-only directory with a stale index: rebuild it in memory
            self._table = _anon_table(_capacity_for(size))
            self.indexed_size = 0
            return
        for stale in ("leafindex.db", "leafindex.db-wal", "leafindex.db-shm"):  # the earlier SQLite index
            (self.path.parent / stale).unlink(missing_ok=True)
        got = self._map_file(self.path, writable=True)
        if got is None:
            self._reset(size)
            return
        fd, table, (indexed, count, boot) = got
        self._set_table(fd, table)
        if boot not in (self._boot, SYNCED):
            log.warning("the machine restarted since the leaf index was written; rebuilding it")
            self._reset(size)
            return
        self.indexed_size = indexed
        if count is None:  # not closed cleanly: count the slots, then unmap what that touched
            count = table.count()
            table.release()
        self.count = count
        self._write_header(clean=False)
        if boot == SYNCED:
            # Before the first store through the map: a SYNCED header that outlived a power
            # loss over a table that had changed after it would be trusted with a wrong count.
            os.fdatasync(fd)

    def _reset(self, size: int) -> None:
        if self.read_only:
            self._table = _anon_table(_capacity_for(size))
            self.indexed_size, self.count = 0, 0
            return
        # A new file, not the old one truncated: the old table's descriptor goes to _drop,
        # which punches its blocks out, and must not share an inode with the new table.
        tmp = self.path.with_name(self.path.name + ".new")
        fd, table = self._create_file(tmp, _capacity_for(size))
        os.replace(tmp, self.path)
        self._set_table(fd, table)
        self.indexed_size, self.count = 0, 0

    def _grow_for(self, more: int) -> None:
        """Keep the load at or below one half: double into a new file, then swap it in."""
        t = self._table
        assert t is not None, "the index is open (catch_up)"
        if 2 * (self.count + more) <= t.capacity:
            return
        capacity = _capacity_for(self.count + more)
        # The same key: see _rehash (it is what keeps a resize out of the process's RSS).
        if self.read_only:
            new_fd, new = None, _anon_table(capacity, t.key)
        else:
            tmp = self.path.with_name(self.path.name + ".new")
            new_fd, new = self._create_file(tmp, capacity, t.key)
        self.count = _rehash(t, new, release=0 < self.window < capacity * SLOT_SIZE)
        if new_fd is not None:  # not read-only: the new file
            self._pack_header(new_fd, new, indexed=self.indexed_size, count=self.count, clean=False)
            os.replace(tmp, self.path)
        self._set_table(new_fd, new)

    # --- the write path (writer thread) ---------------------------------------------

    def add(self, leaf_hashes: Sequence[bytes] | np.ndarray, old: int, size: int) -> bool:
        """Index the leaf hashes of entries old..size-1, already committed.

        `indexed_size` moves only from `old`: if an earlier update was lost,
        the index stays marked behind (returns False) and `catch_up` fills the
        gap, instead of a later update papering over it.
        """
        if self.indexed_size != old or self._closed:  # (closed: the header already says SYNCED)
            return False
        keys = hash_rows(leaf_hashes)
        if keys.shape[0] != size - old:
            raise ValueError("one leaf hash per entry of [old, size) is needed")
        self._make_room(keys.shape[0])
        table = self._table  # open: _make_room has checked
        assert table is not None
        self.count += table.insert(_tags(keys), np.arange(old, size, dtype=np.int64))
        if 0 < self.window < table.capacity * SLOT_SIZE:
            table.release()
        self.indexed_size = size
        self._write_header(clean=False)  # ~2 us: keeps the tail to re-read after a crash short
        if self._resize is None and self.count > GROW_AT * table.capacity and not self.read_only:
            self._resize = _Resize(self, table, size)
        return True

    # --- growth in the background (writer thread, except _Resize.run) ----------------

    def _make_room(self, more: int) -> None:
        """Before inserting `more` entries: swap in a finished resize; wait for one under way
        only if the old table would pass WAIT_AT; without one, grow at once only if it would
        (a single batch larger than the room left)."""
        t = self._table
        assert t is not None, "the index is open (catch_up)"
        r = self._resize
        if r is None:
            if self.count + more > WAIT_AT * t.capacity:
                self._grow_for(more)
            return
        if r.ready.is_set() or self.count + more > WAIT_AT * t.capacity:
            self._finish_resize()
            t = self._table
            assert t is not None
            if self.count + more > WAIT_AT * t.capacity:  # the resize failed, or this batch is huge
                self._grow_for(more)

    @property
    def resizing(self) -> bool:
        """A larger table is being built in the background."""
        return self._resize is not None

    def finish_resize(self) -> None:
        """Wait for a resize under way and swap it in (tests; a clean close cancels instead)."""
        if self._resize is not None:
            self._finish_resize()

    def _finish_resize(self) -> None:
        r = self._resize
        assert r is not None
        r.thread.join()
        self._resize = None
        if r.error is not None or r.new is None:
            log.error("growing the leaf index failed (it stays at its size for now): %s", r.error)
            r.discard()
            return
        new = r.new
        count = r.count
        release = 0 < self.window < new.capacity * SLOT_SIZE
        for lo in range(r.done, self.indexed_size, _CATCH_UP_CHUNK):  # the last gap: about _SWAP_GAP entries
            hi = min(self.indexed_size, lo + _CATCH_UP_CHUNK)
            count += new.insert(_tags(self.leaves(lo, hi - lo)), np.arange(lo, hi, dtype=np.int64))
            if release:
                new.release()
        if r.fd is not None:
            self._pack_header(r.fd, new, indexed=self.indexed_size, count=count, clean=False)
            os.replace(r.tmp, self.path)
        self._set_table(r.fd, new)
        self.count = count

    def _cancel_resize(self) -> None:
        r, self._resize = self._resize, None
        if r is not None:
            r.stop.set()
            r.thread.join()
            r.discard()

    # --- reads (any thread) -------------------------------------------------------------

    def lookup(self, leaf_hashes: Sequence[bytes]) -> dict[bytes, int]:
        """The indices of those of `leaf_hashes` that are in the log."""
        t = self._table
        if t is None or not leaf_hashes:
            return {}
        rows = hash_rows(leaf_hashes)
        found = t.find(rows, self.leaf_at, self.indexed_size)
        return {leaf_hashes[i]: int(found[i]) for i in np.flatnonzero(found >= 0).tolist()}

    def index_of(self, leaf_hash: bytes, size: int) -> int | None:
        if len(leaf_hash) != 32:
            return None
        t = self._table
        if t is None:
            return None
        i = int(t.find(hash_rows([leaf_hash]), self.leaf_at, min(size, self.indexed_size))[0])
        return i if i >= 0 else None

    def close(self) -> None:
        """A clean close syncs the table, then marks it SYNCED: the next start, even
        after a machine restart, uses it as it is instead of rebuilding it (which at
        2^24 entries takes seconds and maps the whole table)."""
        self._closed = True
        self._cancel_resize()  # the next start resizes again from the table kept here
        if self._fd is not None and not self.read_only and self._table is not None:
            try:
                os.fdatasync(self._fd)  # the mapped stores too: they dirty the file's pages
                self._pack_header(self._fd, self._table, indexed=self.indexed_size, count=self.count,
                                  clean=True, boot=SYNCED)
                os.fdatasync(self._fd)
            except OSError:
                pass
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


_PAGE = mmap.PAGESIZE
_WILLNEED = getattr(mmap, "MADV_WILLNEED", None)
_SMALL_PAGE_HINTS = [h for h in (getattr(mmap, "MADV_RANDOM", None), getattr(mmap, "MADV_NOHUGEPAGE", None))
                     if h is not None]


def _libc_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """sync_file_range(2) from the C library (Linux); None where there is none, and then a
    resize leaves its pages to the kernel's writeback."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _libc_sync_file_range()
# SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER: write every
# dirty page of the file and wait for it, as fdatasync would, but without a journal commit.
_SYNC_FILE_RANGE_ALL = 1 | 2 | 4


def _libc_fallocate() -> Callable[[int, int, int, int], int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
    fn.restype = ctypes.c_int
    return fn


_fallocate = _libc_fallocate()
_PUNCH_HOLE = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
_DROP_STEP = 64 << 20
_DROP_WAIT_S = 60.0


def _drop(fd: int, box: list) -> None:
    """Free a replaced table (see _set_table): its blocks a step at a time, then its file.

    Freeing a 2 GiB file at once (its last close, once os.replace has unlinked it) is one
    large journal transaction that the writer's next fsync waited for: 0.8 s at 2^26
    entries. Punching it out 64 MiB at a time keeps each transaction small. A reader that
    took the old table before the swap may still be reading it: the holes would read as
    empty slots, so the punching waits until no one else holds it (none can take it again:
    the writer replaced it); past _DROP_WAIT_S it leaves the file whole."""
    table = box.pop()
    deadline = time.monotonic() + _DROP_WAIT_S
    while sys.getrefcount(table) > 2 and time.monotonic() < deadline:  # this frame's and the call's
        time.sleep(0.01)
    if _fallocate is not None and sys.getrefcount(table) <= 2:
        try:
            st = os.fstat(fd)
            end = st.st_size if st.st_nlink == 0 else 0  # only a replaced (unlinked) file
        except OSError:
            end = 0
        for off in range(0, end, _DROP_STEP):
            if _fallocate(fd, _PUNCH_HOLE, off, min(_DROP_STEP, end - off)) != 0:
                break  # a filesystem without hole punching: the close frees it all
            time.sleep(0.002)
    del table
    os.close(fd)


def _small_pages(mm: mmap.mmap) -> mmap.mmap:
    """Keep the table's pages small. Lookups and inserts touch a few random slots per entry,
    and the kernel maps a large page-cache folio whole at the first touch of any of its
    slots (Linux 6.18 maps every page of the folio; earlier kernels a 2 MiB folio with one
    PMD entry). With the read-around of a fault (read_ahead_kb, 8 MiB on the benchmark
    machine) the table's pages came in as 2 MiB folios, and a batch of 256 lookups mapped
    ~200 MB of a 256 MiB table until the batch's release. MADV_RANDOM turns off that
    read-around, so a fault brings in (or creates) one 4 KiB page; MADV_NOHUGEPAGE refuses
    PMD maps of large folios already in the page cache (a copied file's)."""
    for hint in _SMALL_PAGE_HINTS:
        try:
            mm.madvise(hint)
        except OSError:  # EINVAL (e.g. a kernel without transparent huge pages): only a hint
            pass
    return mm


def _slots(mm: mmap.mmap, capacity: int) -> np.ndarray:
    """The slots of a mapped table file as an (capacity, 2) uint64 array: tag, index + 1."""
    return np.frombuffer(mm, dtype="<u8", count=2 * capacity, offset=HEADER).reshape(capacity, 2)


def _capacity_for(n: int) -> int:
    cap = MIN_CAPACITY
    while cap < 2 * n:
        cap *= 2
    return cap


def _anon_table(capacity: int, key: int | None = None) -> _Table:
    if key is None:
        key = int.from_bytes(os.urandom(8), "little")
    return _Table(capacity, key, np.zeros((capacity, 2), dtype=np.uint64), None)


def _rehash(old: _Table, new: _Table, *, release: bool, below: int | None = None,
            stop: threading.Event | None = None, old_fd: int | None = None,
            step: Callable[[], None] | None = None) -> int:
    """Move every (tag, index + 1) of `old` into the larger `new`, which has the same key
    (no full-hash checks needed: all distinct); returns how many. With `below`, only the
    slots of entries below it (a background resize: the writer may be filling others as
    they are read, and those are inserted from the hash file instead); with `stop`, stops
    early when it is set; with `old_fd`, the old table is read from its file (pread, with the
    kernel's read-ahead) instead of through its map, whose random-access hint the writer
    still needs (see _small_pages); `step` is called after each chunk.

    `old` is read in slot order, a chunk at a time. A slot's position is the keyed hash of
    its tag masked to the table size, so with the same key a chunk of `old` lands in `new`
    at the same positions plus multiples of `old`'s capacity, give or take the probe
    chains: a chunk touches about its own share of each table. With `release` both tables
    are unmapped after each chunk, so a resize never brings either table whole into the
    process's RSS. (Copying out every pair, then filling the new table at random, peaked
    at 313 MB on the first append to a 2^20-entry log and 556 MB at 2^22, measured with
    benchmarks/growth.py; the tables there are 32 + 64 MiB and 128 + 256 MiB.)
    """
    if old_fd is None:
        old.advise(getattr(mmap, "MADV_SEQUENTIAL", None))  # read in order, with read-ahead (it is replaced after)
    count = 0
    for lo in range(0, old.capacity, _REHASH_CHUNK):
        if stop is not None and stop.is_set():
            break
        if old_fd is None:
            s = old.slots[lo : lo + _REHASH_CHUNK]
        else:
            n = min(_REHASH_CHUNK, old.capacity - lo)
            raw = os.pread(old_fd, n * SLOT_SIZE, HEADER + lo * SLOT_SIZE)
            s = np.frombuffer(raw, dtype="<u8", count=2 * n).reshape(n, 2)
        keep = s[:, 1] != 0 if below is None else (s[:, 1] != 0) & (s[:, 1] <= np.uint64(below))
        count += new.insert(s[keep, 0], s[keep, 1].astype(np.int64) - 1)
        if release:
            if old_fd is None:
                old.release()
            new.release()
        if step is not None:
            step()
    if old_fd is None:
        old.release()
    return count


class _Resize:
    """A table of twice the capacity, built by a background thread while the writer goes on
    with the old one (see the module docstring).

    The thread copies the slots of entries below `base` (all in the old table before the
    thread started), then inserts the entries the writer indexed since, reading their leaf
    hashes from the level-0 hash file, until it is within _SWAP_GAP entries of the writer;
    the writer inserts that last gap and swaps the table in (`LeafIndex._finish_resize`).
    Readers use the old table, complete, until then.

    The new table's pages are written out after each step (`_flush`); they are not made
    durable here: a clean close fsyncs the table and a crash rebuilds it (see the module
    docstring).
    """

    def __init__(self, index: LeafIndex, old: _Table, base: int) -> None:
        self.index, self.old, self.base = index, old, base
        self.old_fd = index._fd  # the old table's file: closed only after this thread is joined
        assert self.old_fd is not None, "background resizes are for writable files"
        self.capacity = old.capacity * 2
        self.tmp = index.path.with_name(index.path.name + ".new")
        self.fd: int | None = None
        self.new: _Table | None = None
        self.count = 0  # slots filled in `new`
        self.done = base  # entries [0, done) are in `new`, once the copy is done
        self.ready = threading.Event()  # finished: caught up, or failed (`error`)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self.run, name="tlog-leafindex-resize", daemon=True)
        self.thread.start()

    def run(self) -> None:
        index = self.index
        try:
            self.fd, self.new = index._create_file(self.tmp, self.capacity, self.old.key)
            release = 0 < index.window < self.capacity * SLOT_SIZE
            self.count = _rehash(self.old, self.new, release=release, below=self.base, stop=self.stop,
                                 old_fd=self.old_fd, step=self._flush)
            self._hook("copied")
            while not self.stop.is_set():
                target = index.indexed_size  # the writer's progress (it only grows)
                if target - self.done <= _SWAP_GAP:
                    break
                hi = min(target, self.done + _CATCH_UP_BATCH)
                filled = self._catch_up(self.done, hi, release)
                if filled is None:
                    break  # cancelled part-way: `done` and `count` no longer describe the table
                self.count += filled
                self.done = hi
            self._hook("ready")
        except BaseException as e:  # noqa: BLE001 - reported to the writer, which keeps the old table
            self.error = e
        finally:
            self.ready.set()

    def _catch_up(self, lo: int, hi: int, release: bool) -> int | None:
        """Insert entries [lo, hi) (the writer indexed them since the copy started) in the
        order of their positions in the new table, a chunk at a time, flushing each chunk;
        returns the slots filled, or None if cancelled part-way (the table is discarded).

        In index order each entry dirtied a page at random: at 2^26 entries the catch-up
        was ~1.8 million random 4 KiB writes over 60 s, and the writer's fsyncs, which on a
        virtual disk persist whatever was written before them, waited behind them for up
        to 386 ms. Sorted, a chunk's ~1,000 pages lie in ascending order in one band of the
        file (8 MiB of a 4 GiB table for a batch of 2^19), and the whole batch is one sweep
        over the table: the catch-up took half as long, and appends waited at most 60 ms."""
        assert self.new is not None
        tags = _tags(self.index.leaves(lo, hi - lo))
        order = np.argsort(_positions(tags, self.new.key, self.new.mask), kind="stable")
        filled = 0
        for a in range(0, order.size, _CATCH_UP_CHUNK):
            if self.stop.is_set():
                return None
            sel = order[a : a + _CATCH_UP_CHUNK]
            filled += self.new.insert(tags[sel], sel.astype(np.int64) + lo)
            if release:
                self.new.release()
            self._flush()
        return filled

    def _flush(self) -> None:
        """Write the new table's dirty pages out now, the few MiB of a step at a time, so that
        they never pile up (a table of 4 GiB at 2^26 entries left to the kernel reached its
        dirty limit and throttled the writer's own writes: an append waited 800 ms). With
        sync_file_range, not fdatasync: it writes the pages without committing the
        filesystem's journal, which the writer's fsyncs would queue behind (220 ms)."""
        if self.fd is not None and _sync_file_range is not None:
            _sync_file_range(self.fd, 0, 0, _SYNC_FILE_RANGE_ALL)

    def _hook(self, step: str) -> None:
        if self.index.on_resize is not None:
            self.index.on_resize(step)

    def discard(self) -> None:
        """Drop an unfinished or failed table and its file."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        self.tmp.unlink(missing_ok=True)
