"""The mirror's embedded store: SQLite (WAL) for entries and checkpoints, hash files for the tree.

One SQLite database in the data directory is the truth: every log's entries, 256 to a
row as entry bundles (the tlog-tiles encoding, so a full bundle is served as stored),
its next entry, its pending and mirror checkpoints, and a history of every (size, root)
it recorded, whose primary key makes a second root for one size impossible. The tree's
hashes are kept per log in hash files (`tlog.storage.hashfiles`, the log's own format):
derived data, synced every `hash_sync_interval` seconds and recomputed from the entries
above the last synced size when the store opens, so a crash never leaves a wrong hash.

Durability (the contract of `witness.mirror.store`): an append is one small transaction
with `synchronous=NORMAL` (no fsync: SQLite's WAL keeps transactions atomic and in order,
so a crash keeps a prefix of them); `sync` is one transaction with `synchronous=FULL`,
whose fsync of the WAL makes every earlier transaction durable. Pending and mirror
checkpoints are written with `synchronous=FULL`. The mirror answers and cosigns only after
one of those returned. One process per data directory (`mirror.lock`).
"""
from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from tlog.errors import ForkError, Unavailable
from tlog.formats.hashing import EMPTY_ROOT, leaf_hashes
from tlog.formats.tiles import TILE_HEIGHT, TILE_WIDTH, parse_entry_bundle
from tlog.merkle.tree import TreeView
from tlog.storage.durable import lock_dir
from tlog.storage.hashfiles import HashFiles

from .store import Checkpointed, LogRecord

log = logging.getLogger("oap.mirror.store")

SCHEMA = """
CREATE TABLE IF NOT EXISTS logs (
    origin TEXT PRIMARY KEY,
    id INTEGER NOT NULL UNIQUE,
    next_entry INTEGER NOT NULL DEFAULT 0 CHECK (next_entry >= 0),
    hashed INTEGER NOT NULL DEFAULT 0  -- the hash files are synced for this many entries
);
CREATE TABLE IF NOT EXISTS checkpoints (  -- kind 0: pending checkpoint, 1: mirror checkpoint
    origin TEXT NOT NULL,
    kind INTEGER NOT NULL CHECK (kind IN (0, 1)),
    size INTEGER NOT NULL CHECK (size >= 0),
    root BLOB NOT NULL CHECK (length(root) = 32),
    note TEXT NOT NULL,
    cosigned_at INTEGER NOT NULL,
    PRIMARY KEY (origin, kind)
);
CREATE TABLE IF NOT EXISTS pending_history (
    origin TEXT NOT NULL,
    size INTEGER NOT NULL,
    root BLOB NOT NULL,
    note TEXT NOT NULL,
    PRIMARY KEY (origin, size)
);
CREATE TABLE IF NOT EXISTS cosigned (
    origin TEXT NOT NULL,
    size INTEGER NOT NULL,
    root BLOB NOT NULL,
    cosigned_at INTEGER NOT NULL,
    PRIMARY KEY (origin, size)
);
CREATE TABLE IF NOT EXISTS bundles (  -- key = log id << 40 | bundle index
    key INTEGER PRIMARY KEY,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS barrier (id INTEGER PRIMARY KEY CHECK (id = 0), n INTEGER NOT NULL);
INSERT OR IGNORE INTO barrier (id, n) VALUES (0, 0);
"""

PENDING_KEPT = 1024
"""Past pending checkpoints kept per log, for add-entries requests that name one (besides tickets)."""

_PENDING, _MIRROR = 0, 1


class _Log:
    __slots__ = ("hashed", "hashes", "id", "mirror", "next_entry", "origin", "pending")

    def __init__(self, origin: str, id_: int, next_entry: int, hashed: int, hashes: HashFiles) -> None:
        self.origin, self.id, self.next_entry, self.hashed, self.hashes = origin, id_, next_entry, hashed, hashes
        self.pending: Checkpointed | None = None
        self.mirror: Checkpointed | None = None


def _key(log_id: int, index: int) -> int:
    return (log_id << 40) | index


class EmbeddedStore:
    """`witness.mirror.store.MirrorStore` over SQLite and hash files in `directory`."""

    def __init__(self, directory: Path, *, hash_sync_interval: float = 10.0) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = lock_dir(self.dir, "mirror.lock", "oap-mirror")
        self.hash_sync_interval = hash_sync_interval
        self._last_hash_sync = time.monotonic()
        self._db = sqlite3.connect(self.dir / "mirror.db", isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._wlock = threading.Lock()  # the write connection (one writer thread; `close` from another)
        self._local = threading.local()  # a read connection per reader thread
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._logs: dict[str, _Log] = {}
        for origin, id_, nxt, hashed in self._db.execute("SELECT origin, id, next_entry, hashed FROM logs"):
            lg = self._logs[origin] = _Log(origin, id_, nxt, hashed, HashFiles(self._hash_dir(origin)))
            self._repair(lg)
        for origin, kind, size, root, note, at in self._db.execute(
                "SELECT origin, kind, size, root, note, cosigned_at FROM checkpoints"):
            lg = self._log(origin)
            cp = Checkpointed(size, bytes(root), note, at)
            if kind == _PENDING:
                lg.pending = cp
            else:
                lg.mirror = cp
        self._pending_writes = 0
        # What a crash left in the WAL may not have reached the disk yet: make it durable
        # before the mirror reports any of it as stored.
        self.sync()

    def _hash_dir(self, origin: str) -> Path:
        from hashlib import sha256

        return self.dir / "hashes" / sha256(origin.encode()).hexdigest()

    def _log(self, origin: str) -> _Log:
        lg = self._logs.get(origin)
        if lg is None:
            with self._wlock:
                (id_,) = self._db.execute("SELECT coalesce(max(id), 0) + 1 FROM logs").fetchone()
                self._db.execute("INSERT INTO logs (origin, id) VALUES (?, ?)", (origin, id_))
            lg = self._logs[origin] = _Log(origin, id_, 0, 0, HashFiles(self._hash_dir(origin)))
        return lg

    # --- recovery ----------------------------------------------------------------------

    def _repair(self, lg: _Log) -> None:
        """Hash files above their last synced size (or shorter than it) are recomputed from
        the entries; nodes past the stored entries (a crash before the commit) are dropped."""
        good = min(lg.hashed, lg.hashes.intact_size(lg.next_entry))
        lg.hashes.cut(lg.next_entry if good else 0)  # from `good` on, _rehash rewrites the nodes in place
        if good < lg.next_entry:
            log.info("%s: recomputing the hashes of entries %d..%d", lg.origin, good, lg.next_entry)
            self._rehash(lg, good)
        lg.hashed = good

    def _rehash(self, lg: _Log, start: int) -> None:
        pos = start
        while pos < lg.next_entry:
            n = min(TILE_WIDTH - pos % TILE_WIDTH, lg.next_entry - pos)
            entries = self.entries(lg.origin, pos, n, db=self._db)
            lg.hashes.append(pos, leaf_hashes(entries))
            pos += n

    def rebuild_hashes(self, origin: str) -> None:
        lg = self._log(origin)
        with self._wlock:
            lg.hashes.cut(0)
            self._rehash(lg, 0)
            lg.hashes.sync()
            lg.hashed = lg.next_entry
            self._db.execute("UPDATE logs SET hashed = ? WHERE id = ?", (lg.hashed, lg.id))

    # --- state ---------------------------------------------------------------------------

    def record(self, origin: str) -> LogRecord:
        lg = self._logs.get(origin)
        if lg is None:
            return LogRecord(origin, None, None, 0)
        return LogRecord(origin, lg.pending, lg.mirror, lg.next_entry)

    def pending_at(self, origin: str, size: int) -> Checkpointed | None:
        row = self._reader().execute("SELECT root, note FROM pending_history WHERE origin = ? AND size = ?",
                                     (origin, size)).fetchone()
        return Checkpointed(size, bytes(row[0]), row[1]) if row else None

    def _durable(self, fn) -> None:
        """Run `fn(db)` in one transaction committed with synchronous=FULL."""
        with _unavailable_on_failure(), self._wlock:
            db = self._db
            db.execute("PRAGMA synchronous=FULL")
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    fn(db)
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
            finally:
                db.execute("PRAGMA synchronous=NORMAL")
        if time.monotonic() - self._last_hash_sync >= self.hash_sync_interval:
            self.sync_hashes()

    def set_pending(self, origin: str, new: Checkpointed) -> None:
        lg = self._log(origin)

        def write(db: sqlite3.Connection) -> None:
            _guard(db, "pending_history", origin, new.size, new.root, "pending")
            db.execute("INSERT OR IGNORE INTO pending_history (origin, size, root, note) VALUES (?, ?, ?, ?)",
                       (origin, new.size, new.root, new.note))
            db.execute("INSERT OR REPLACE INTO checkpoints (origin, kind, size, root, note, cosigned_at) "
                       "VALUES (?, 0, ?, ?, ?, 0)", (origin, new.size, new.root, new.note))
            self._pending_writes += 1
            if self._pending_writes % 64 == 0:  # now and then: keep the last PENDING_KEPT
                db.execute("DELETE FROM pending_history WHERE origin = ? AND size < (SELECT size FROM pending_history "
                           "WHERE origin = ? ORDER BY size DESC LIMIT 1 OFFSET ?)", (origin, origin, PENDING_KEPT))

        self._durable(write)
        lg.pending = new

    def commit(self, origin: str, new: Checkpointed) -> None:
        lg = self._log(origin)
        if lg.mirror is not None and new.size < lg.mirror.size:
            raise ValueError("the mirror checkpoint never moves backwards")
        if new.size > lg.next_entry:
            raise ValueError("a mirror checkpoint needs every entry stored")

        def write(db: sqlite3.Connection) -> None:
            _guard(db, "cosigned", origin, new.size, new.root, "mirror")
            db.execute("INSERT OR REPLACE INTO cosigned (origin, size, root, cosigned_at) VALUES (?, ?, ?, ?)",
                       (origin, new.size, new.root, new.cosigned_at))
            db.execute("INSERT OR REPLACE INTO checkpoints (origin, kind, size, root, note, cosigned_at) "
                       "VALUES (?, 1, ?, ?, ?, ?)", (origin, new.size, new.root, new.note, new.cosigned_at))

        self._durable(write)
        lg.mirror = new

    def cosigned(self, origin: str) -> list[tuple[int, bytes, int]]:
        """Every (size, root, timestamp) this mirror cosigned for `origin`, by size (audits, tests)."""
        rows = self._reader().execute("SELECT size, root, cosigned_at FROM cosigned WHERE origin = ? ORDER BY size",
                                      (origin,)).fetchall()
        return [(s, bytes(r), t) for s, r, t in rows]

    # --- entries -------------------------------------------------------------------------

    def append(self, origin: str, first: int, blob: bytes, leaves: bytes) -> None:
        lg = self._log(origin)
        n = len(leaves) // 32
        if first != lg.next_entry or n == 0 or first // TILE_WIDTH != (first + n - 1) // TILE_WIDTH:
            raise ValueError(f"append {first}+{n} to {origin} at next entry {lg.next_entry}")
        key = _key(lg.id, first // TILE_WIDTH)
        with _unavailable_on_failure(), self._wlock:
            lg.hashes.append(first, np.frombuffer(leaves, dtype=np.uint8).reshape(n, 32))
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                if first % TILE_WIDTH == 0:
                    db.execute("INSERT INTO bundles (key, data) VALUES (?, ?)", (key, blob))
                else:  # extend the stored partial bundle (concatenated here: SQLite's || makes text)
                    row = db.execute("SELECT data FROM bundles WHERE key = ?", (key,)).fetchone()
                    if row is None:
                        raise RuntimeError(f"{origin}: bundle {first // TILE_WIDTH} is missing")
                    db.execute("UPDATE bundles SET data = ? WHERE key = ?", (bytes(row[0]) + blob, key))
                db.execute("UPDATE logs SET next_entry = ? WHERE id = ?", (first + n, lg.id))
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        lg.next_entry = first + n

    def sync(self) -> None:
        self._durable(lambda db: db.execute("UPDATE barrier SET n = n + 1 WHERE id = 0"))

    def sync_hashes(self) -> None:
        """fdatasync every log's hash files and record the size they are good for."""
        self._last_hash_sync = time.monotonic()
        for lg in list(self._logs.values()):
            if lg.hashed == lg.next_entry:
                continue
            upto = lg.next_entry
            lg.hashes.sync()
            with self._wlock:
                self._db.execute("UPDATE logs SET hashed = ? WHERE id = ?", (upto, lg.id))
            lg.hashed = upto

    def next_entry(self, origin: str) -> int:
        lg = self._logs.get(origin)
        return lg.next_entry if lg is not None else 0

    # --- reads ---------------------------------------------------------------------------

    def _reader(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.dir / "mirror.db", isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA query_only=ON")
            self._local.db = db
            with self._readers_lock:
                self._readers.append(db)
        return db

    def _row(self, origin: str, index: int, db: sqlite3.Connection | None = None) -> bytes | None:
        lg = self._logs.get(origin)
        if lg is None:
            return None
        row = (db or self._reader()).execute("SELECT data FROM bundles WHERE key = ?",
                                             (_key(lg.id, index),)).fetchone()
        return bytes(row[0]) if row else None

    def entries(self, origin: str, first: int, count: int, *, db: sqlite3.Connection | None = None) -> list[bytes]:
        if count == 0:
            return []
        index, off = divmod(first, TILE_WIDTH)
        data = self._row(origin, index, db)
        got = parse_entry_bundle(data or b"", off + count)
        if len(got) < off + count:
            raise RuntimeError(f"{origin}: entries {first}..{first + count} are not stored")
        return got[off:]

    def bundle(self, origin: str, index: int, width: int) -> bytes | None:
        lg = self._logs.get(origin)
        if lg is None or index * TILE_WIDTH + width > lg.next_entry:
            return None
        data = self._row(origin, index)
        if data is None:
            return None
        return data if width == TILE_WIDTH else _prefix(data, width)

    def tile(self, origin: str, level: int, index: int, width: int) -> bytes | None:
        lg = self._logs.get(origin)
        if lg is None or (index * TILE_WIDTH + width) << (TILE_HEIGHT * level) > lg.next_entry:
            return None
        return lg.hashes.read_range(TILE_HEIGHT * level, index * TILE_WIDTH, width)

    def root(self, origin: str, size: int) -> bytes:
        lg = self._logs[origin]
        if size > lg.next_entry:
            raise ValueError("root of entries not stored")
        if size == 0:
            return EMPTY_ROOT
        return TreeView(size, lg.hashes.read).root

    def close(self) -> None:
        import os

        with self._wlock:
            for lg in self._logs.values():
                if lg.hashed != lg.next_entry:
                    lg.hashes.sync()
                    self._db.execute("UPDATE logs SET hashed = ? WHERE id = ?", (lg.next_entry, lg.id))
                lg.hashes.close()
            self._db.close()
        with self._readers_lock:
            for db in self._readers:
                db.close()
            self._readers.clear()
        os.close(self._lock_fd)


@contextlib.contextmanager
def _unavailable_on_failure() -> Iterator[None]:
    """A full disk or a read-only data directory is a 503 for the writer, never a 500:
    nothing was acknowledged, and the client retries."""
    try:
        yield
    except (sqlite3.Error, OSError) as e:
        log.error("the mirror could not write its store (answering 503 until this clears): %s", e)
        raise Unavailable(f"the mirror could not write its store: {e}", retry_after=1) from None


def _guard(db: sqlite3.Connection, table: str, origin: str, size: int, root: bytes, what: str) -> None:
    row = db.execute(f"SELECT root FROM {table} WHERE origin = ? AND size = ?", (origin, size)).fetchone()
    if row is not None and bytes(row[0]) != root:
        raise ForkError(f"refusing to record a second {what} root for {origin} size {size}")


def _prefix(data: bytes, width: int) -> bytes:
    pos = 0
    for _ in range(width):
        pos += 2 + int.from_bytes(data[pos:pos + 2], "big")
    return data[:pos]
