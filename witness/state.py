"""The witness's durable state: latest cosigned (size, root) per origin (c2sp.md §4).

SQLite in WAL mode with synchronous=FULL; a row is replaced only by a
compare-and-swap, `UPDATE ... WHERE origin = ? AND size = ? AND root = ?`
(or an INSERT for an origin never cosigned), committed before the witness
answers 200. Why a CAS rather than one transaction spanning read, verify and
write: the verification (signatures, consistency proof) happens between the
read and the write, outside any lock, and the CAS makes the write conditional
on exactly the state that was verified against. A concurrent request, a
feeder process sharing the database, or a restart after kill -9 can only make
the CAS fail (the caller answers 409), never make it cosign from a stale
state. The same transaction records (origin, size, root) in `history`, whose
primary key (origin, size) makes a second root for one size impossible even if
a bug got past the CAS.

`stall` is a hook for race tests: awaited after the caller has read and
verified, right before the swap, so a test can interleave two requests.
"""
from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from tlog.fileio import read_only_sqlite_uri
from tlog.errors import ForkError, Unavailable

SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    origin TEXT PRIMARY KEY,
    size INTEGER NOT NULL CHECK (size >= 0),
    root BLOB NOT NULL CHECK (length(root) = 32),
    note TEXT NOT NULL,
    cosigned_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS history (
    origin TEXT NOT NULL,
    size INTEGER NOT NULL,
    root BLOB NOT NULL,
    cosigned_at INTEGER NOT NULL,
    PRIMARY KEY (origin, size)
);
"""

MAX_SIZE = 2**63 - 1
"""SQLite integers are signed 64-bit; no real log comes near this."""

Stall = Callable[[str], Awaitable[None]]

log = logging.getLogger("oap.witness.state")


@dataclass(frozen=True)
class Record:
    """The latest checkpoint this witness cosigned for `origin`.

    `note` is the checkpoint text with the log signatures that verified and
    this witness's cosignature: what the monitoring endpoint serves.
    """

    origin: str
    size: int
    root: bytes
    note: str
    cosigned_at: int


class WitnessState:
    """One SQLite database; calls run in a worker thread, serialised by a lock."""

    def __init__(self, path: Path | str, *, stall: Stall | None = None, busy_timeout: float = 10.0) -> None:
        self.path = Path(path)
        self.stall = stall
        self._lock = threading.Lock()
        parent = self.path.parent
        self.read_only = self.path.exists() and (not os.access(parent, os.W_OK)
                                                 or bool(os.statvfs(parent).f_flag & os.ST_RDONLY))
        if self.read_only:
            # A read-only state directory (e.g. remounted ro after disk errors): serve the
            # monitoring reads; every cosign attempt fails its write and answers 503.
            self._db = sqlite3.connect(read_only_sqlite_uri(self.path), uri=True, timeout=busy_timeout,
                                       isolation_level=None, check_same_thread=False)
            log.error("witness state %s is read-only: serving reads, answering 503 to add-checkpoint", self.path)
            return
        self._db = sqlite3.connect(self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- synchronous core (any thread) ----------------------------------------------

    def get_sync(self, origin: str) -> Record | None:
        with self._lock:
            row = self._db.execute(
                "SELECT origin, size, root, note, cosigned_at FROM checkpoints WHERE origin = ?", (origin,)
            ).fetchone()
        return Record(row[0], row[1], bytes(row[2]), row[3], row[4]) if row else None

    def all_sync(self) -> list[Record]:
        with self._lock:
            rows = self._db.execute(
                "SELECT origin, size, root, note, cosigned_at FROM checkpoints ORDER BY origin"
            ).fetchall()
        return [Record(r[0], r[1], bytes(r[2]), r[3], r[4]) for r in rows]

    def history_sync(self, origin: str) -> list[tuple[int, bytes]]:
        """Every (size, root) ever cosigned for `origin`, by size (audit, tests)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT size, root FROM history WHERE origin = ? ORDER BY size", (origin,)
            ).fetchall()
        return [(r[0], bytes(r[1])) for r in rows]

    def swap_sync(self, expected: Record | None, new: Record) -> bool:
        """Replace `expected` (None: no row yet) by `new`; False if the row is not `expected`.

        Refuses (ValueError) to move backwards, and (ForkError) to record a
        second root for a size already cosigned: both would be a bug in the
        caller, and the transaction is rolled back.
        """
        if expected is not None and (expected.origin != new.origin or new.size < expected.size):
            raise ValueError("a witness state never moves backwards or to another origin")
        if not 0 <= new.size <= MAX_SIZE or len(new.root) != 32:
            raise ValueError("bad size or root")
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                if expected is None:
                    cur = db.execute(
                        "INSERT INTO checkpoints (origin, size, root, note, cosigned_at) VALUES (?, ?, ?, ?, ?) "
                        "ON CONFLICT(origin) DO NOTHING",
                        (new.origin, new.size, new.root, new.note, new.cosigned_at),
                    )
                else:
                    cur = db.execute(
                        "UPDATE checkpoints SET size = ?, root = ?, note = ?, cosigned_at = ? "
                        "WHERE origin = ? AND size = ? AND root = ?",
                        (new.size, new.root, new.note, new.cosigned_at, expected.origin, expected.size, expected.root),
                    )
                if cur.rowcount != 1:
                    db.execute("ROLLBACK")
                    return False
                db.execute(
                    "INSERT INTO history (origin, size, root, cosigned_at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(origin, size) DO NOTHING",
                    (new.origin, new.size, new.root, new.cosigned_at),
                )
                (root,) = db.execute(
                    "SELECT root FROM history WHERE origin = ? AND size = ?", (new.origin, new.size)
                ).fetchone()
                if bytes(root) != new.root:
                    db.execute("ROLLBACK")
                    raise ForkError(f"refusing to cosign a second root for {new.origin} size {new.size}")
                db.execute("COMMIT")  # synchronous=FULL: durable when this returns
                return True
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    # --- async wrappers (the event loop never waits on fsync) -------------------------

    async def get(self, origin: str) -> Record | None:
        return await _storage(asyncio.to_thread(self.get_sync, origin))

    async def all(self) -> list[Record]:
        return await _storage(asyncio.to_thread(self.all_sync))

    async def compare_and_swap(self, expected: Record | None, new: Record) -> bool:
        if self.stall is not None:
            await self.stall(new.origin)
        return await _storage(asyncio.to_thread(self.swap_sync, expected, new))


async def _storage(call):
    """A full disk or read-only state directory answers 503, never 500. Safe even if a
    failed COMMIT did land: no cosignature was returned, and the log resyncs via 409."""
    try:
        return await call
    except sqlite3.Error as e:
        log.error("could not read or persist the witness state (answering 503 until this clears): %s", e)
        raise Unavailable(f"the witness could not persist its state: {e}", retry_after=1) from None
