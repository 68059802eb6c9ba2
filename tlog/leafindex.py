"""Leaf hash -> index, for deduplication and lookup by leaf hash (DESIGN §3.1).

Derived data, kept out of the fsync path: every leaf hash is also in the
entries table, so this index lives in its own SQLite file with
synchronous=OFF. Random inserts into a large B-tree dirty about one page per
entry; in the main database each of those pages would be written to the WAL
and fsynced on every batch. Here the OS writes them back at leisure.

Recovery: `indexed_size` says how far the index is known to be complete; on
open the tail is re-read from the entries table. A process crash loses
nothing (the OS keeps unsynced writes); a reboot since the last write (power
loss) may have corrupted an unsynced file, so then the index is rebuilt
from scratch, in sorted order.
"""
from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from .fileio import read_only_sqlite_uri

log = logging.getLogger("oap.tlog.leafindex")

SCHEMA = """
CREATE TABLE IF NOT EXISTS leaves (leaf_hash BLOB PRIMARY KEY, idx INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value);
"""


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


class LeafIndex:
    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        if read_only:
            self.conn = sqlite3.connect(read_only_sqlite_uri(path), uri=True, isolation_level=None,
                                        check_same_thread=False)
        else:
            self.conn = self._open()

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")  # a process crash mid-commit cannot corrupt it
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-65536")
        conn.executescript(SCHEMA)
        return conn

    def _meta(self, key: str):
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def catch_up(self, main: sqlite3.Connection, size: int) -> None:
        """Make the index cover entries [0, size) of the main database."""
        if self.read_only:
            return
        indexed = self._meta("indexed_size")
        if self._meta("boot_id") != boot_id() and indexed is not None:
            log.warning("the machine restarted since the leaf index was written; rebuilding it")
            indexed = None
        if indexed is None or indexed > size:
            self.conn.close()
            for suffix in ("", "-wal", "-shm"):
                Path(str(self.path) + suffix).unlink(missing_ok=True)
            self.conn = self._open()
            indexed = 0
        if indexed < size:
            rows = main.execute("SELECT leaf_hash, idx FROM entries WHERE idx >= ? ORDER BY leaf_hash",
                                (indexed,))
            self.conn.execute("BEGIN")
            while batch := rows.fetchmany(65536):
                self.conn.executemany("INSERT OR IGNORE INTO leaves (leaf_hash, idx) VALUES (?, ?)", batch)
            self.conn.execute("COMMIT")
        self.mark(size)

    def mark(self, size: int) -> None:
        self.conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                              [("indexed_size", size), ("boot_id", boot_id())])

    def lookup(self, leaf_hashes: Sequence[bytes]) -> dict[bytes, int]:
        out: dict[bytes, int] = {}
        uniq = list(dict.fromkeys(leaf_hashes))
        for i in range(0, len(uniq), 500):
            chunk = uniq[i : i + 500]
            q = "SELECT leaf_hash, idx FROM leaves WHERE leaf_hash IN (%s)" % ",".join("?" * len(chunk))
            out.update(self.conn.execute(q, chunk).fetchall())
        return out

    def add(self, rows: Sequence[tuple[int, bytes, object]], old: int, size: int) -> bool:
        """Index rows (idx, leaf_hash, ...) for [old, size), already committed to the main database.

        `indexed_size` moves only from `old`: if an earlier update was lost,
        the index stays marked behind (returns False) and `catch_up` fills the
        gap, instead of a later update papering over it.
        """
        self.conn.execute("BEGIN")
        try:
            self.conn.executemany("INSERT OR IGNORE INTO leaves (leaf_hash, idx) VALUES (?, ?)",
                                  [(r[1], r[0]) for r in rows])
            cur = self.conn.execute("UPDATE meta SET value = ? WHERE key = 'indexed_size' AND value = ?", (size, old))
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        return cur.rowcount == 1

    def close(self) -> None:
        self.conn.close()
