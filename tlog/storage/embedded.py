"""The embedded driver of `tlog.storage.interface`: SQLite + hash files in one directory.

SQLite in WAL mode is the truth. A batch costs one fsync: `sequence` commits the entries
with `synchronous=NORMAL` (written to the WAL, not synced), and `record_checkpoint`
commits the checkpoint that covers them with `synchronous=FULL`, whose fsync of the WAL
makes the earlier frames durable too. Nothing is acknowledged before that commit returns,
so "acknowledged" and "durable" stay one event. After a crash between the two commits the
entries may or may not be there; if they are, the appender integrates and signs them on
the next start. The per-level hash files and the leaf-hash index are derived data,
repaired from the database on open.

The head last published (with its cosignatures) is recorded too, with no fsync of its own
(the next checkpoint's makes it durable): a restart serves it again at once, from this
directory alone, while the witnesses or the bucket are still out of reach; if a crash
lost it, an older one (or none) is served, and the appender publishes the signed head again.

One process per data directory (`log.lock`): its holder is the only writer, so the
integrator role is always its own (`acquire` never waits) and nothing needs following.
`EmbeddedStorage` is used from one thread (the appender's driver thread); readers use
`EmbeddedEntries` on their own connection and see only what the appender serves.
"""
from __future__ import annotations

import bisect
import logging
import math
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from itertools import pairwise
from pathlib import Path

import aiosqlite
import numpy as np

from tlog.errors import ForkError, FormatError, NotFound, Unavailable
from tlog.formats.entries import ReceiptRow, receipt_rows
from tlog.formats.hashing import hash_rows, leaf_hash, leaf_hashes
from tlog.formats.note import parse_note
from tlog.formats.tiles import encode_entry_bundle, parse_entry_bundle
from tlog.merkle.tree import TreeView
from tlog.storage import hashfiles
from tlog.storage.durable import lock_dir, read_only_sqlite_uri
from tlog.storage.hashfiles import HashFiles
from tlog.storage.interface import (
    CorruptionError,
    Fault,
    Head,
    Lease,
    LeaseLost,
    Sequenced,
    SignedHead,
    frozen_error,
)
from tlog.storage.leafindex import LeafIndex
from tlog.storage.receiptsql import receipts_query
from tlog.storage.transfer import Snapshot

log = logging.getLogger("oap.tlog.store")

# Entries are stored in runs: one row holds up to RUN_ENTRIES consecutive entries as a
# tlog-tiles entry bundle (16-bit length, bytes; 16-bit lengths suffice: entries are at
# most 65,535 bytes). A row per entry cost more to insert (~3.5 us of binding and
# B-tree work each) than everything else in a durable append together. Leaf hashes
# are not stored: they are SHA-256 of the bytes, recomputed in C when needed.
RUN_ENTRIES = 256

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    first INTEGER PRIMARY KEY,
    count INTEGER NOT NULL CHECK (count BETWEEN 1 AND 256),
    data BLOB NOT NULL
);
-- The runs' extents without their data: the start-up check that runs are contiguous reads
-- this (~20 bytes a run) instead of every run's first page (~4 KiB each: 10 s at 2^26 entries
-- with a cold page cache). Built once when a data directory from before it is opened.
CREATE INDEX IF NOT EXISTS runs_extent ON runs (first, count);
CREATE TABLE IF NOT EXISTS checkpoints (
    size INTEGER PRIMARY KEY,
    root BLOB NOT NULL,
    note TEXT NOT NULL,
    signed_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value);
CREATE TABLE IF NOT EXISTS receipts (
    signer TEXT NOT NULL,
    idx INTEGER NOT NULL,
    receipt_hash BLOB NOT NULL,
    ts TEXT,
    signed_at REAL,
    logged_at REAL NOT NULL,
    PRIMARY KEY (signer, idx)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS receipts_by_hash ON receipts (receipt_hash);
"""

FAULT_POINTS = ("after_sequence", "after_hash_append", "before_commit", "after_commit")
"""Where the embedded driver calls its `faults` hook: after the entries' commit, after the
hash files grew, and just before and just after the checkpoint's commit."""


def _read_only_fs(path: Path) -> bool:
    return bool(os.statvfs(path).f_flag & os.ST_RDONLY)


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    # NORMAL: a commit appends to the WAL without syncing it. The commits that must be
    # durable (checkpoints, one-time upgrades) switch to FULL for themselves (_transaction).
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=5000")
    # 8 MiB. It was 64 MiB when the leaf-hash index lived in SQLite; opening a large log
    # filled it (60 MB of the server's RSS) and appends touch only the rightmost pages.
    conn.execute("PRAGMA cache_size=-8192")
    # Checkpoints run on their own connection and thread (Checkpointer), so a
    # batch commit costs one WAL append and one fsync, nothing more.
    conn.execute("PRAGMA wal_autocheckpoint=0")
    return conn


class Checkpointer:
    """Copies the WAL back into the database in the background (PASSIVE: never
    blocks the writer or readers), keeping the WAL bounded without putting a
    checkpoint inside a batch commit.

    It runs while the log is quiet (no batch commit during the last `interval`),
    and every `max_age` seconds of steady writes. A checkpoint's fsync of the database
    file shares the disk with the commits' WAL fsyncs: run every second under load
    it made one commit in twenty several times slower (measured with
    `benchmarks/run.py --only http_appends`). The WAL stays bounded by `max_age` of
    writes (at the measured peak append rate, tens of MB).
    """

    def __init__(self, db_path: Path, commits: Callable[[], int], interval: float = 1.0,
                 max_age: float = 30.0) -> None:
        import threading

        self.db_path, self.commits, self.interval, self.max_age = db_path, commits, interval, max_age
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tlog-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn = sqlite3.connect(self.db_path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout=5000")
        seen = self.commits()  # batch commits at the last look
        last = time.monotonic()  # the last checkpoint under load
        try:
            while not self._stop.wait(self.interval):
                now, n = time.monotonic(), self.commits()
                quiet, seen = n == seen, n
                if not quiet:
                    if now - last < self.max_age:
                        continue
                    last = now
                # Quiet: every look (a no-op once the WAL is copied back), so that writes other
                # than batch commits (a migration, meta updates) and checkpoints a reader cut
                # short are finished too.
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.Error as e:  # disk full, read-only: retried next time
                    log.warning("WAL checkpoint failed: %s", e)
        finally:
            conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


class HashSyncer:
    """Syncs the hash files in the background, every `interval` seconds while they grow.

    An fdatasync of appended hash files commits the filesystem's journal; on the writer's
    thread it waited behind whatever else the disk was writing (a leaf-index resize: 150 ms
    at 2^26 entries, measured with benchmarks/growth.py). Here no append waits for it: the
    next checkpoint commit only records the last size this thread has synced."""

    def __init__(self, storage: EmbeddedStorage, interval: float) -> None:
        self.storage, self.interval = storage, interval
        self.lock = threading.Lock()  # held while syncing, and by the writer while it rebuilds
        self.synced: int | None = None  # synced, not yet recorded (taken by the next checkpoint)
        self._done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tlog-hashsync", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with self.lock:
                size = self.storage._hashed  # its hashes are written: pwrite returned before it was set
                if size <= self._done:
                    continue
                try:
                    self.storage.hashes.sync()
                except OSError as e:  # the writer's next sync, or close, retries
                    log.warning("syncing the hash files failed: %s", e)
                    continue
                self._done = self.synced = size

    def take(self) -> int | None:
        """The size synced since the last call, if any (for the next checkpoint commit)."""
        out, self.synced = self.synced, None
        return out

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


class EmbeddedStorage:
    """The embedded `Driver`: SQLite and hash files in `data_dir`, one process."""

    shared = False  # one process per directory: no one else sequences or publishes
    lease_ttl = math.inf  # the directory lock is the lease: held until close
    parallel_sequencing = False  # one connection, one set of hash files for everything

    def __init__(self, data_dir: Path, *, hash_sync_interval: float = 5.0,
                 map_window: int = hashfiles.DEFAULT_MAP_WINDOW_MB << 20, faults: Fault | None = None) -> None:
        """`map_window`: bytes of a hash-file level kept mapped (tlog.storage.hashfiles; 0: no limit).
        `faults`: a test hook called at `FAULT_POINTS` (None in production)."""
        self.dir = Path(data_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.db_path = self.dir / "log.db"
        self.faults = faults
        self.read_only = not os.access(self.dir, os.W_OK) or _read_only_fs(self.dir)
        self._lock_fd: int | None = None
        if self.read_only:
            # A read-only data directory (e.g. remounted ro after disk errors):
            # serve what is committed, refuse writes with 503.
            self.conn = sqlite3.connect(read_only_sqlite_uri(self.db_path), uri=True,
                                        isolation_level=None, check_same_thread=False)
            log.error("data directory %s is read-only: serving reads, refusing writes", self.dir)
        else:
            # One writer per data directory: a second one would reset the mapped leaf
            # index under the first and interleave appends. Released by close().
            self._lock_fd = lock_dir(self.dir, "log.lock", "log")
            self.conn = connect(self.db_path)
            self.conn.executescript(SCHEMA)
        self.commits = 0  # checkpoint commits by this process: the checkpointer's measure of load
        self.checkpointer = None if self.read_only else Checkpointer(self.db_path, lambda: self.commits)
        self.hashes = HashFiles(self.dir / "hashes", window=map_window)
        self.leaves = LeafIndex(self.dir / "leafindex.bin", read_only=self.read_only,
                                leaf_at=lambda ix: self.hashes.gather(0, ix), leaves=self._leaf_range,
                                window=self.hashes.window)
        self.hash_sync_interval = hash_sync_interval
        self._last_hash_sync = time.monotonic()
        self._hash_syncer: HashSyncer | None = None  # started by open() (interval > 0)
        self._sequenced = 0  # entries committed to the database
        self._hashed = 0  # leaves in the hash files (== _sequenced unless an append failed)
        self._leaves_behind = False  # the leaf index missed an update: caught up before the next lookup
        self._signed: SignedHead | None = None
        self._published: tuple[int, str] | None = None
        self._failure = ""
        self._failed_at = 0.0
        self._swept = 0  # the bucket's sweep of partial tiles (record_swept)
        self._frozen: str | None = None  # the successor once frozen (freeze)
        self._closed = False

    def _fault(self, name: str) -> None:
        if self.faults is not None:
            self.faults(name)

    # --- open and repair ---------------------------------------------------------

    def open(self) -> Head:
        """Recover: the database's entries are the truth; hash files and the leaf index are
        repaired to them. Entries sequenced past the last checkpoint (a crash between the
        two commits of a batch) are kept: the appender integrates them."""
        if not self.read_only:
            self._migrate_entries_table()
        elif self.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'").fetchone() is None:
            raise CorruptionError("this data directory predates entry runs and is read-only: "
                                  "start the log once on a writable copy to upgrade it")
        size = self._committed_size(check=True)
        if not self.read_only:
            self._index_receipts(size)
        synced = self.hashes.intact_size(min(int(self._meta("hashes_synced") or 0), size))
        if self.read_only:
            synced = self.hashes.intact_size(size)
            if synced != size:
                raise CorruptionError("the data directory is read-only and its hash files need repair")
        self._rebuild_hashes(synced, size)
        latest = self.conn.execute("SELECT size, root, note FROM checkpoints ORDER BY size DESC LIMIT 1").fetchone()
        if latest is not None and latest[0] > size:
            raise CorruptionError(f"the latest checkpoint has size {latest[0]} but the log holds {size} entries")
        if latest is not None and TreeView(latest[0], self.hashes.read).root != latest[1]:
            log.warning("hash files disagree with the signed root; rebuilding them from the database")
            self._rebuild_hashes(0, size)
            if TreeView(latest[0], self.hashes.read).root != latest[1]:
                raise CorruptionError("the entries do not hash to the latest signed root")
        self.leaves.catch_up(size)
        if latest is not None and latest[0] < size:
            log.warning("%d entries were sequenced after the last checkpoint (a crash between the commits of a "
                        "batch); they are integrated now", size - latest[0])
        self._signed = None if latest is None else SignedHead(latest[0], latest[1], latest[2])
        self._published = self._recorded_publication()
        self._swept = int(self._meta("bucket_swept") or 0)
        frozen = self._meta("frozen")
        self._frozen = None if frozen is None else str(frozen)
        if not self.read_only and self.hash_sync_interval > 0 and self._hash_syncer is None:
            self._hash_syncer = HashSyncer(self, self.hash_sync_interval)
        return self.head()

    def head(self) -> Head:
        return Head(self._sequenced, self._signed, self._published, self._failure, self._failed_at, self._swept,
                    self._frozen)

    def _recorded_publication(self) -> tuple[int, str] | None:
        """The head `record_published` last recorded, if it is a checkpoint signed here (the
        same checkpoint text as the signed row of its size); else None: nothing is served
        before the appender publishes again."""
        size, note = self._meta("published_size"), self._meta("published_note")
        if size is None or note is None:
            return None  # nothing published yet, or a data directory from before this record
        row = self.conn.execute("SELECT note FROM checkpoints WHERE size = ?", (size,)).fetchone()
        try:
            same = row is not None and parse_note(note).text == parse_note(row[0]).text
        except FormatError:
            same = False
        if not same:
            log.error("the head recorded as published (size %s) is not a checkpoint signed here; "
                      "the signed head is published again", size)
            return None
        return int(size), str(note)

    def _index_receipts(self, size: int) -> None:
        """Index the receipts of a log written before the index existed (once): sequencing
        keeps it current from then on. Their logged time is that of the first checkpoint
        that covered them."""
        if self._meta("receipts_indexed") == "all":
            return
        signed = self.conn.execute("SELECT size, signed_at FROM checkpoints ORDER BY size").fetchall()
        sizes = [r[0] for r in signed]
        with self._transaction(durable=True) as c:
            for start in range(0, size, 65536):
                datas = read_entries(c, start, min(65536, size - start))
                rows = receipt_rows([(start + k, None, data) for k, data in enumerate(datas)], 0.0)
                for r in rows:
                    at = bisect.bisect_right(sizes, r.index)
                    r = r._replace(logged_at=signed[at][1] if at < len(signed) else time.time())
                    c.execute("INSERT OR IGNORE INTO receipts VALUES (?, ?, ?, ?, ?, ?)", r)
            c.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('receipts_indexed', 'all')")

    def _committed_size(self, *, check: bool = False) -> int:
        """Entries in the database; with `check`, refuse runs that leave a gap or overlap."""
        if not check:
            size = self.conn.execute("SELECT COALESCE(MAX(first + count), 0) FROM runs").fetchone()[0]
        else:
            size = 0
            for first, count in self.conn.execute("SELECT first, count FROM runs ORDER BY first"):
                if first != size:
                    raise CorruptionError(f"entries are not contiguous: a run starts at {first}, expected {size}")
                size = first + count
        self._sequenced = size
        return size

    def _migrate_entries_table(self) -> None:
        """Move a data directory written before runs existed (one row per entry) into runs,
        in one transaction: the old table is dropped only with its rows moved."""
        c = self.conn
        if c.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'entries'").fetchone() is None:
            return
        log.warning("moving entries into runs (one-time upgrade of %s)", self.db_path)
        with self._transaction(durable=True):
            start = 0
            cur = c.execute("SELECT idx, data FROM entries ORDER BY idx")
            while rows := cur.fetchmany(65536):
                if rows[0][0] != start or rows[-1][0] != start + len(rows) - 1:
                    raise CorruptionError(f"entries are not contiguous near index {start}")
                c.executemany("INSERT INTO runs (first, count, data) VALUES (?, ?, ?)",
                              entry_runs([(r[0], None, r[1]) for r in rows]))
                start += len(rows)
            c.execute("DROP TABLE entries")

    def _rebuild_hashes(self, start: int, size: int) -> None:
        """Hash files = the entries [0, size): kept up to `start`, recomputed from there."""
        if self.read_only:
            self._hashed = size
            return
        # Not while the syncer reads _hashed and syncs: it would record a size it saw before the cut.
        with self._hash_syncer.lock if self._hash_syncer is not None else nullcontext():
            # Nodes from `start` on are rewritten in place below; a cut copies what it keeps
            # (hashfiles.cut), so only what lies past `size` is cut, unless nothing is kept.
            self.hashes.cut(size if start else 0)
            self._hashed = cur = start
            while cur < size:
                datas = read_entries(self.conn, cur, min(65536, size - cur))
                if not datas:
                    raise CorruptionError(f"no entries at {cur} below the committed size {size}")
                self.hashes.append(cur, leaf_hashes(datas))
                cur += len(datas)
            self.hashes.sync()
            self._hashed = size
            self._set_meta("hashes_synced", size)

    def _repair(self) -> None:
        """Derived data behind the database after a failed update: catch it up."""
        if self._hashed != self._sequenced:
            self._rebuild_hashes(min(self._hashed, self._sequenced), self._sequenced)
        if self._leaves_behind:
            self.leaves.catch_up(self._sequenced)
            self._leaves_behind = False

    @contextmanager
    def _transaction(self, *, durable: bool) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT; `durable`: the commit fsyncs the WAL (and with it every
        earlier commit of this connection). Rolled back on any error."""
        c = self.conn
        if durable:
            c.execute("PRAGMA synchronous=FULL")
        try:
            c.execute("BEGIN IMMEDIATE")
            try:
                yield c
                c.execute("COMMIT")
            except BaseException:
                if c.in_transaction:
                    try:
                        c.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                raise
        finally:
            if durable:
                c.execute("PRAGMA synchronous=NORMAL")

    # --- sequencing -------------------------------------------------------------------

    def sequence(self, datas: Sequence[bytes], *, logged_at: Sequence[float] | None = None) -> Sequenced:
        """Give the entries not already present the next indices: one transaction, no fsync
        (the checkpoint's commit makes it durable). Entries repeated in the batch or already
        in the log get their existing index. Leaf hashes are computed here, in one C call."""
        if self.read_only:
            raise Unavailable("the data directory is read-only; the log serves reads only")
        if self._frozen is not None:
            raise frozen_error(self._frozen)
        rows = leaf_hashes(datas)
        digests = rows.tobytes()
        leaves = [digests[i : i + 32] for i in range(0, len(digests), 32)]
        self._repair()
        old = self._sequenced
        known = self.leaves.lookup(leaves)
        if not known and len(set(leaves)) == len(leaves):  # the common case: all new, all distinct
            n = len(leaves)
            new_rows = list(zip(range(old, old + n), leaves, datas))
            indices, fresh = list(range(old, old + n)), [True] * n
            new_leaves: list[bytes] | np.ndarray = rows
            times = logged_at
        else:
            indices, fresh, new_rows = [], [], []
            kept: list[float] = []
            for k, (lh, data) in enumerate(zip(leaves, datas)):
                if lh in known:
                    indices.append(known[lh])
                    fresh.append(False)
                    continue
                idx = old + len(new_rows)
                known[lh] = idx
                new_rows.append((idx, lh, data))
                if logged_at is not None:
                    kept.append(logged_at[k])
                indices.append(idx)
                fresh.append(True)
            new_leaves = [r[1] for r in new_rows]
            times = kept if logged_at is not None else None
        if not new_rows:
            return Sequenced(indices, fresh, leaves, old)
        size = old + len(new_rows)
        try:
            self._commit_entries(new_rows, times)
        except BaseException:
            self._resync(old)
            raise
        self._sequenced = size
        self._fault("after_sequence")
        try:  # derived data: on failure, caught up from the database before it is next needed
            leaf_rows = hash_rows(new_leaves)
            self.hashes.append(old, leaf_rows)
            self._hashed = size
            self._fault("after_hash_append")
            self._leaves_behind = not self.leaves.add(leaf_rows, old, size)
        except (OSError, ValueError) as e:
            log.error("hash file or leaf index update failed (repaired before the next batch): %s", e)
            self._leaves_behind = True
        return Sequenced(indices, fresh, leaves, size)

    def _commit_entries(self, rows: list[tuple[int, bytes, bytes]], logged_at: Sequence[float] | None) -> None:
        now = time.time()
        receipts = receipt_rows(rows, now)
        if logged_at is not None:
            first = rows[0][0]
            receipts = [r._replace(logged_at=logged_at[r.index - first]) for r in receipts]
        with self._transaction(durable=False) as c:
            c.executemany("INSERT INTO runs (first, count, data) VALUES (?, ?, ?)", entry_runs(rows))
            c.executemany("INSERT OR IGNORE INTO receipts VALUES (?, ?, ?, ?, ?, ?)", receipts)

    def _resync(self, old: int) -> None:
        """After a failed commit of entries, believe the disk, not the error.

        A failed COMMIT (disk full, an I/O error) may or may not have landed; assuming a
        rollback could later reuse indices that are in fact taken. So re-read the
        committed size: larger means the batch landed (its waiters got an error and find
        their entries by retrying), and the derived data is caught up before the next batch.
        """
        try:
            size = self._committed_size()
        except sqlite3.Error as e:  # still failing (e.g. disk still full): keep what we knew
            log.error("could not re-read the store after a failed batch: %s", e)
            self._sequenced = old
            return
        if size != old:
            log.warning("a batch reported failure but was committed; %d entries are sequenced", size)
            self._leaves_behind = True  # the hash files are behind too: _repair catches both up

    # --- integration ------------------------------------------------------------------

    def extend(self, size: int) -> bytes:
        """The hash files are extended as entries are sequenced; here they are only repaired
        if an update failed. The root is checked against the one recorded for `size`."""
        if size > self._sequenced:
            raise ValueError(f"cannot integrate {size} entries: {self._sequenced} are sequenced")
        self._repair()
        root = TreeView(size, self.hashes.read).root
        signed = self._signed
        if signed is not None and size <= signed.size:
            row = (signed.root,) if size == signed.size else \
                self.conn.execute("SELECT root FROM checkpoints WHERE size = ?", (size,)).fetchone()
            if row is not None and row[0] != root:
                raise CorruptionError(f"the hash files do not hash to the root signed for size {size}")
        return root

    def read_entries(self, start: int, count: int) -> list[bytes]:
        got = read_entries(self.conn, start, count)
        if len(got) != count:
            raise CorruptionError(f"entries {start}..{start + count - 1} are missing")
        return got

    # --- the lease: this process's directory lock --------------------------------------

    def acquire(self) -> Lease | None:
        return None if self.read_only else Lease(0)

    def renew(self, lease: Lease) -> None:
        if self._lock_fd is None:
            raise LeaseLost("the data directory is closed")

    def release(self, lease: Lease) -> None:
        """The directory lock is released by close()."""

    def backfill(self, lease: Lease) -> bool:
        """Nothing to do: open() indexed the receipts of an older log."""
        return False

    def record_checkpoint(self, lease: Lease, old: int | None, signed: SignedHead) -> None:
        """Fork guard, then commit the checkpoint with an fsync (durable: it and every entry
        sequenced before it)."""
        if self.read_only:
            raise Unavailable("the data directory is read-only; the log serves reads only")
        current = None if self._signed is None else self._signed.size
        if old != current:
            raise LeaseLost(f"the signed head is at {current}, not {old}")
        row = self.conn.execute("SELECT root FROM checkpoints WHERE size = ?", (signed.size,)).fetchone()
        if row is not None and row[0] != signed.root:
            raise ForkError(f"refusing to sign a second root for tree size {signed.size}")
        top = self.conn.execute("SELECT MAX(size) FROM checkpoints").fetchone()[0]
        if top is not None and signed.size < top:
            raise ForkError(f"refusing to sign size {signed.size} below the signed size {top}")
        synced = self._maybe_sync_hashes()
        with self._transaction(durable=True) as c:
            c.execute("INSERT OR IGNORE INTO checkpoints (size, root, note, signed_at) VALUES (?, ?, ?, ?)",
                      (signed.size, signed.root, signed.note, time.time()))
            if synced is not None:
                c.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('hashes_synced', ?)", (synced,))
            self._fault("before_commit")
        self.commits += 1
        self._signed = signed
        self._fault("after_commit")

    def record_published(self, lease: Lease, size: int, note: str) -> None:
        """Publication is this process's own: nothing to fence. The head is recorded for the
        next start without an fsync (a crash may lose it: see the module docstring); a
        failure to record it is logged, not raised, for what was published stays published."""
        if self._published is not None and size < self._published[0]:
            return
        if (size, note) != self._published and not self.read_only:
            try:
                with self._transaction(durable=False) as c:
                    c.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                                  (("published_size", size), ("published_note", note)))
            except sqlite3.Error as e:
                log.warning("could not record the published head %d (a restart publishes it again): %s", size, e)
        self._published, self._failure = (size, note), ""

    def record_failure(self, lease: Lease, message: str) -> None:
        self._failure, self._failed_at = message, time.time()

    def record_swept(self, lease: Lease, size: int) -> None:
        """Kept without an fsync: a crash may lose it, and the next start sweeps again."""
        if size <= self._swept or self.read_only:
            return
        try:
            with self._transaction(durable=False) as c:
                c.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('bucket_swept', ?)", (size,))
        except sqlite3.Error as e:
            log.warning("could not record the bucket's sweep at %d (the next start sweeps again): %s", size, e)
            return
        self._swept = size

    def freeze(self, successor: str) -> None:
        """One durable write of `meta`; this process is the only one that sequences here, so
        every later `sequence` sees it."""
        if self.read_only:
            raise Unavailable("the data directory is read-only; the log serves reads only")
        if self._frozen is not None:
            return
        with self._transaction(durable=True) as c:
            c.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('frozen', ?)", (successor,))
        self._frozen = str(self._meta("frozen"))

    def follow(self, timeout: float) -> Head:
        """No other process writes here: nothing to wait for."""
        threading.Event().wait(timeout)
        return self.head()

    def _maybe_sync_hashes(self) -> int | None:
        """The size up to which the hash files are synced, if it moved: recorded with the next
        checkpoint (it is durable with it: the entries it covers are in that commit's WAL).
        Synced by `HashSyncer` every `hash_sync_interval`; with 0, here at every checkpoint."""
        if self._hash_syncer is not None:
            return self._hash_syncer.take()
        now = time.monotonic()
        if now - self._last_hash_sync < self.hash_sync_interval:
            return None
        self.hashes.sync()
        self._last_hash_sync = now
        return self._hashed

    def _leaf_range(self, start: int, count: int) -> np.ndarray:
        return np.frombuffer(self.hashes.read_range(0, start, count), dtype=np.uint8).reshape(count, 32)

    def _meta(self, key: str):
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def _set_meta(self, key: str, value) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def entries(self) -> EmbeddedEntries:
        return EmbeddedEntries(self.db_path, self.leaves, read_only_dir=self.read_only)

    def close(self) -> None:
        """Clean shutdown: sync the hash files so the next open repairs nothing."""
        if self._closed:
            return
        self._closed = True
        if self.checkpointer is not None:
            self.checkpointer.stop()
        if self._hash_syncer is not None:
            self._hash_syncer.stop()
        if not self.read_only:
            try:
                self._repair()
                self.hashes.sync()
                self._set_meta("hashes_synced", self._hashed)
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except (sqlite3.Error, OSError, CorruptionError) as e:  # repaired on the next open
                log.warning("closing the data directory: %s", e)
        self.hashes.close()
        self.leaves.close()
        self.conn.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def entry_runs(rows: Sequence[tuple[int, object, bytes]]) -> list[tuple[int, int, bytes]]:
    """Rows (index, _, data) of consecutive entries -> (first, count, bundle) runs, cut at
    multiples of RUN_ENTRIES so a tile's entry bundle spans at most two runs."""
    out = []
    i, n = 0, len(rows)
    while i < n:
        first = rows[i][0]
        k = min(n - i, RUN_ENTRIES - first % RUN_ENTRIES)
        out.append((first, k, encode_entry_bundle([r[2] for r in rows[i : i + k]])))
        i += k
    return out


# The runs that hold entries start..start+count-1: runs never cross a multiple of
# RUN_ENTRIES, so the first of them starts at or after start rounded down to one.
_RUNS_SQL = "SELECT first, count, data FROM runs WHERE first >= ? AND first < ? ORDER BY first"


def _runs_args(start: int, count: int) -> tuple[int, int]:
    return start - start % RUN_ENTRIES, start + count


def read_entries(conn: sqlite3.Connection, start: int, count: int) -> list[bytes]:
    """Entries start..start+count-1 from the runs table (fewer if the log is shorter)."""
    return _slice_runs(conn.execute(_RUNS_SQL, _runs_args(start, count)).fetchall(), start, count)


def _slice_runs(rows: list, start: int, count: int) -> list[bytes]:
    out: list[bytes] = []
    end = start + count
    for first, n, data in rows:
        if first + n <= start:
            continue
        want = min(n, end - first)
        try:
            entries = parse_entry_bundle(data, want)
        except FormatError:
            entries = []
        if len(entries) != want:
            raise CorruptionError(f"the run of entries at {first} is damaged")
        out.extend(entries[max(0, start - first):])
    return out


def snapshot(data_dir: Path) -> Snapshot:
    """The latest committed checkpoint of the log in `data_dir` and a reader of its entries,
    read-only: the log may be running (its writer is not disturbed) or stopped."""
    db_path = Path(data_dir) / "log.db"
    if not db_path.exists():
        raise NotFound(f"no log in {data_dir}")
    read_only = not os.access(data_dir, os.W_OK) or _read_only_fs(Path(data_dir))
    uri = read_only_sqlite_uri(db_path) if read_only else f"file:{db_path}?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    try:
        row = conn.execute("SELECT size, note FROM checkpoints ORDER BY size DESC LIMIT 1").fetchone()
    finally:
        conn.close()
    if row is None:
        raise NotFound(f"the log in {data_dir} has signed nothing yet")
    return Snapshot(row[0], row[1], EmbeddedEntries(db_path, None, read_only_dir=read_only))


class EmbeddedEntries:
    """The `EntryReader` of the embedded backend: its own aiosqlite connection (WAL
    readers never block the writer), and the writer's leaf-hash index (lock-free reads)."""

    def __init__(self, db_path: Path, leaves: LeafIndex | None, *, read_only_dir: bool = False) -> None:
        self.db_path = db_path
        self.read_only_dir = read_only_dir
        self.db: aiosqlite.Connection | None = None
        self.leaves = leaves  # the writer's own index: lock-free reads (see LeafIndex)

    def _uri(self, path: Path) -> str:
        # With a live writer, plain mode=ro; in a read-only directory nothing writes (see fileio).
        return read_only_sqlite_uri(path) if self.read_only_dir else f"file:{path}?mode=ro"

    async def open(self) -> None:
        self.db = await aiosqlite.connect(self._uri(self.db_path), uri=True)
        await self.db.execute("PRAGMA busy_timeout=5000")

    async def close(self) -> None:
        if self.db is not None:
            await self.db.close()

    async def entry(self, index: int, size: int) -> tuple[bytes, bytes]:
        if not 0 <= index < size:
            raise NotFound(f"no entry {index} in a tree of size {size}")
        got = _slice_runs(await self._runs(index, 1), index, 1)
        if not got:
            raise NotFound(f"no entry {index}")
        return leaf_hash(got[0]), got[0]

    async def bundle(self, start: int, count: int) -> bytes:
        """Entries start..start+count-1 as a tlog-tiles entry bundle: the stored runs
        themselves when they cover exactly that range (the usual case for a full tile)."""
        rows = await self._runs(start, count)
        if rows and rows[0][0] == start and sum(r[1] for r in rows) == count \
                and all(a[0] + a[1] == b[0] for a, b in pairwise(rows)):
            return b"".join(r[2] for r in rows)
        got = _slice_runs(rows, start, count)
        if len(got) != count:
            raise NotFound("entries not available")
        return encode_entry_bundle(got)

    async def _runs(self, start: int, count: int) -> list:
        db = self.db
        if db is None:
            raise Unavailable("the entry reader is not open")
        async with db.execute(_RUNS_SQL, _runs_args(start, count)) as cur:
            return list(await cur.fetchall())

    async def receipts(self, size: int, *, signer: str | None = None, receipt_hash: bytes | None = None,
                       since: float | None = None, after: int = -1, limit: int = 1000) -> list[ReceiptRow]:
        sql, args = receipts_query("receipts", "?", size, signer=signer, receipt_hash=receipt_hash, since=since,
                                   after=after, limit=limit)
        assert self.db is not None
        try:
            async with self.db.execute(sql, args) as cur:
                return [ReceiptRow(*row) for row in await cur.fetchall()]
        except sqlite3.OperationalError:  # a read-only copy of a log from before the index
            raise NotFound("this copy of the log has no receipt index") from None

    async def logged_times(self, size: int) -> AsyncIterator[tuple[int, float]]:
        db = self.db
        if db is None:
            raise Unavailable("the entry reader is not open")
        try:
            async with db.execute("SELECT idx, logged_at FROM receipts WHERE idx < ?", (size,)) as cur:
                async for idx, at in cur:
                    yield idx, at
        except sqlite3.OperationalError:  # a read-only copy of a log from before the index
            return

    async def index_of(self, leaf_hash: bytes, size: int) -> int:
        if self.leaves is None:
            raise NotFound("this reader has no leaf-hash index (a snapshot)")
        idx = self.leaves.index_of(leaf_hash, size)
        if idx is None:
            raise NotFound("no entry with that leaf hash")
        return idx
