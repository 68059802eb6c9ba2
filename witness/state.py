"""The witness's durable state: latest cosigned (size, root) per origin (C2SP tlog-witness).

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

Group commit: the swaps of concurrent requests (for any origins) are queued
and applied, in arrival order, in ONE transaction with ONE fsync, by a flush
task that runs while there is work and exits when there is none; each swap
keeps its own CAS and history check, so swaps of one origin in one group
linearize exactly as if they had been committed one by one. A caller is woken
only after that COMMIT returned (durable); if the transaction fails, every
swap of the group fails with 503 and none of them is persisted.

`cached(origin)` answers the hot path's read without I/O: the record this
process last read from or committed to the database. It is only a hint (the
database is the source of truth, and another process may share it): a request
that matches it is still decided by the CAS, which on failure refreshes the
hint from the row it found; a request that does not match it is re-checked
against the database before the witness answers 409.

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tlog.errors import ForkError, Unavailable
from tlog.formats.encoding import MAX_INT63
from tlog.storage.durable import read_only_sqlite_uri

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

MAX_SIZE = MAX_INT63
"""SQLite integers are signed 64-bit; no real log comes near this."""

Stall = Callable[[str], Awaitable[None]]
Trace = Callable[[str, "list[tuple[Record | None, Record]]"], None]
"""A test hook told of each group of swaps: ("blocking", swaps) when a group is handed to
`swap_group_sync` (which may wait for the database's write lock), ("statements", swaps)
when its statements run inside the transaction."""

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
    """One SQLite database, its connection serialised by a lock. Reads and COMMITs (fsync)
    run in worker threads; a group's statements run on the event loop (no I/O)."""

    MAX_GROUP = 1024
    """At most this many swaps share one transaction (a bound on its size, not a wait)."""

    def __init__(self, path: Path | str, *, stall: Stall | None = None, trace: Trace | None = None,
                 busy_timeout: float = 10.0) -> None:
        """`stall`, `trace`: test hooks (None in production), see `Stall` and `Trace`."""
        self.path = Path(path)
        self.stall = stall
        self._trace = trace
        self._busy_ms = int(busy_timeout * 1000)
        self._lock = threading.Lock()
        self._cache: dict[str, Record | None] = {}
        self._queue: list[tuple[Record | None, Record, asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None
        self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="witness-commit")
        parent = self.path.parent
        self.read_only = self.path.exists() and (not os.access(parent, os.W_OK)
                                                 or bool(os.statvfs(parent).f_flag & os.ST_RDONLY))
        if self.read_only:
            # A read-only state directory (e.g. remounted ro after disk errors): serve the
            # monitoring reads; every cosign attempt fails its write and answers 503.
            self._db = sqlite3.connect(read_only_sqlite_uri(self.path), uri=True, timeout=busy_timeout,
                                       isolation_level=None, check_same_thread=False)
            log.error("witness state %s is read-only: serving reads, answering 503 to add-checkpoint", self.path)
        else:
            self._db = sqlite3.connect(self.path, timeout=busy_timeout, isolation_level=None,
                                       check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(SCHEMA)
        # Every origin absent here was never cosigned when the database was opened.
        for rec in self.all_sync():
            self._cache[rec.origin] = rec

    def close(self) -> None:
        self._committer.shutdown(wait=True)
        with self._lock:
            self._db.close()

    # --- the in-memory hint ---------------------------------------------------------

    def cached(self, origin: str) -> Record | None:
        """The latest record this process read or committed for `origin` (None: none known); no I/O."""
        return self._cache.get(origin)

    def known_origins(self) -> list[str]:
        """Every origin this process knows a cosigned checkpoint of (no I/O)."""
        return [o for o, rec in list(self._cache.items()) if rec is not None]

    def _remember(self, origin: str, rec: Record | None) -> None:
        """Move the hint forward only: a read that raced a commit must not undo it."""
        old = self._cache.get(origin)
        if rec is None:
            if origin not in self._cache:
                self._cache[origin] = None
        elif old is None or (rec.size, rec.cosigned_at) >= (old.size, old.cosigned_at):
            self._cache[origin] = rec

    # --- synchronous core (any thread) ----------------------------------------------

    def _row(self, origin: str) -> Record | None:
        row = self._db.execute(f"SELECT {_COLUMNS} FROM checkpoints WHERE origin = ?", (origin,)).fetchone()
        return _record(row) if row else None

    def get_sync(self, origin: str) -> Record | None:
        with self._lock:
            return self._row(origin)

    def all_sync(self) -> list[Record]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM checkpoints ORDER BY origin").fetchall()
        return [_record(r) for r in rows]

    def history_sync(self, origin: str) -> list[tuple[int, bytes]]:
        """Every (size, root) ever cosigned for `origin`, by size (audit, tests)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT size, root FROM history WHERE origin = ? ORDER BY size", (origin,)
            ).fetchall()
        return [(r[0], bytes(r[1])) for r in rows]

    @staticmethod
    def _check(expected: Record | None, new: Record) -> None:
        if expected is not None and (expected.origin != new.origin or new.size < expected.size):
            raise ValueError("a witness state never moves backwards or to another origin")
        if not 0 <= new.size <= MAX_SIZE or len(new.root) != 32:
            raise ValueError("bad size or root")

    def swap_sync(self, expected: Record | None, new: Record) -> bool:
        """Replace `expected` (None: no row yet) by `new`; False if the row is not `expected`.

        Refuses (ValueError) to move backwards, and (ForkError) to record a
        second root for a size already cosigned: both would be a bug in the
        caller, and nothing is written.
        """
        self._check(expected, new)
        ((outcome, current),) = self.swap_group_sync([(expected, new)])
        self._remember(new.origin, current)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def swap_group_sync(
        self, swaps: list[tuple[Record | None, Record]]
    ) -> list[tuple[bool | ForkError, Record | None]]:
        """Apply `swaps` in order in one transaction and one COMMIT (synchronous=FULL: durable
        when this returns). Per swap: (True | False | ForkError, the row it left or found).

        Each swap is its own CAS against the rows as the earlier swaps of the group
        left them. A swap that would record a second root for a size (a bug: the
        caller verified consistency) gets a ForkError and has written nothing; the
        others still commit. A database error rolls the whole group back and is
        raised: no swap of the group is persisted.
        """
        if self._trace is not None:
            self._trace("blocking", swaps)
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                out = self._statements(swaps)
                db.execute("COMMIT")
                return out
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    def _statements(self, swaps: list[tuple[Record | None, Record]]) -> list[tuple[bool | ForkError, Record | None]]:
        """The writes of `swap_group_sync`, inside its transaction. A swap that would fork
        its history rolls the group back to the savepoint, and it is redone without it."""
        if self._trace is not None:
            self._trace("statements", swaps)
        self._db.execute("SAVEPOINT swaps")
        refused: dict[int, ForkError] = {}
        while True:
            out = self._apply_group(swaps, refused)
            if not isinstance(out, int):
                return out
            self._db.execute("ROLLBACK TO swaps")
            new = swaps[out][1]
            refused[out] = ForkError(f"refusing to cosign a second root for {new.origin} size {new.size}")

    def _apply_group(self, swaps: list[tuple[Record | None, Record]],
                     refused: dict[int, ForkError]) -> list[tuple[bool | ForkError, Record | None]] | int:
        """The statements of `swap_group_sync` (inside its transaction): the results, or the
        index of the first swap that would record a second root for a size."""
        db = self._db
        out: list[tuple[bool | ForkError, Record | None]] = []
        for i, (expected, new) in enumerate(swaps):
            if i in refused:
                out.append((refused[i], self._row(new.origin)))
                continue
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
            if cur.rowcount != 1:  # the row is not `expected`: nothing was written
                out.append((False, self._row(new.origin)))
                continue
            cur = db.execute(
                "INSERT INTO history (origin, size, root, cosigned_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(origin, size) DO NOTHING",
                (new.origin, new.size, new.root, new.cosigned_at),
            )
            if cur.rowcount != 1:  # this size was cosigned before: it must be the same root
                (root,) = db.execute(
                    "SELECT root FROM history WHERE origin = ? AND size = ?", (new.origin, new.size)
                ).fetchone()
                if bytes(root) != new.root:
                    return i
            out.append((True, new))
        return out

    # --- async wrappers (the event loop never waits on fsync) -------------------------

    async def get(self, origin: str) -> Record | None:
        """The database's row (and the hint moves to it)."""
        rec = await _storage(asyncio.to_thread(self.get_sync, origin))
        self._remember(origin, rec)
        return rec

    async def all(self) -> list[Record]:
        return await _storage(asyncio.to_thread(self.all_sync))

    async def compare_and_swap(self, expected: Record | None, new: Record) -> bool:
        """`swap_sync` through the group commit: True once `new` is durable."""
        self._check(expected, new)
        if self.stall is not None:
            await self.stall(new.origin)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if self._flusher is not None and self._flusher.get_loop() is not loop:
            # Left over from a closed event loop (tests run one per test): its waiters are gone.
            self._queue = [q for q in self._queue if q[2].get_loop() is loop]
            self._flusher = None
        self._queue.append((expected, new, fut))
        if self._flusher is None:
            self._flusher = loop.create_task(self._flush())
        return await fut

    async def _flush(self) -> None:
        """Commit queued swaps, one group per transaction, until the queue is empty.

        Swaps that arrive while a group's COMMIT (fsync) runs form the next group,
        so a lone request waits for nothing but its own commit.
        """
        loop = asyncio.get_running_loop()
        try:
            while self._queue:
                group, self._queue = self._queue[: self.MAX_GROUP], self._queue[self.MAX_GROUP :]
                try:
                    results = await self._commit_group(loop, [(e, n) for e, n, _ in group])
                except sqlite3.Error as e:
                    log.error("could not persist the witness state (answering 503 until this clears): %s", e)
                    for _, _, fut in group:
                        if not fut.done():
                            fut.set_exception(_unavailable(e))
                    continue
                except Exception as e:  # a bug: fail this group (500), keep serving the next
                    log.exception("witness state group commit failed")
                    for _, _, fut in group:
                        if not fut.done():
                            fut.set_exception(e)
                    continue
                except BaseException:
                    # Cancelled (the loop is shutting down): nobody may wait forever, and
                    # nothing is reported as committed (it may have landed: a 409 resyncs the log).
                    for _, _, fut in group + self._queue:
                        if not fut.done():
                            fut.set_exception(Unavailable("the witness is shutting down", retry_after=1))
                    self._queue = []
                    raise
                for (_, new, fut), (outcome, current) in zip(group, results):
                    self._remember(new.origin, current)
                    if fut.done():  # the caller went away; its swap is committed all the same
                        continue
                    if isinstance(outcome, Exception):
                        fut.set_exception(outcome)
                    else:
                        fut.set_result(outcome)
        finally:
            self._flusher = None

    async def _commit_group(self, loop: asyncio.AbstractEventLoop,
                            swaps: list[tuple[Record | None, Record]]) -> list[tuple[bool | ForkError, Record | None]]:
        """`swap_group_sync`, with its statements on the event loop and only the COMMIT (the
        fsync, and any WAL checkpoint) in a worker thread.

        The statements write only to SQLite's page cache (nothing reaches the file before
        COMMIT; the few pages they read are cached) and cost about 20 us a swap. Run
        here, they need no hand-off of the GIL per statement to a worker competing with
        the busy loop, which made a group's commit several times slower than its fsync.
        The loop never waits for a lock here: if the connection is in use by a read, or
        another process holds the write lock, the whole group goes to a worker instead.
        """
        db = self._db
        if not self._lock.acquire(blocking=False):  # a read (or a sync caller) is using the connection
            return await loop.run_in_executor(None, self.swap_group_sync, swaps)
        try:
            db.execute("PRAGMA busy_timeout = 0")
            try:
                db.execute("BEGIN IMMEDIATE")
            finally:
                db.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            busy = False
        except sqlite3.OperationalError as e:
            self._rollback_and_unlock()
            if e.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:
                raise
            busy = True
        except BaseException:
            self._rollback_and_unlock()
            raise
        if busy:  # another process is writing: wait for it in a worker
            return await loop.run_in_executor(None, self.swap_group_sync, swaps)
        try:
            out = self._statements(swaps)
            # From here the committer thread holds the lock and releases it. Its own thread:
            # reads wait for the lock on the default pool, and if they filled every worker
            # of a shared pool the COMMIT that releases the lock could never start.
            committed = loop.run_in_executor(self._committer, self._commit_and_unlock)
        except BaseException:
            self._rollback_and_unlock()
            raise
        await committed
        return out

    def _rollback_and_unlock(self) -> None:
        try:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
        finally:
            self._lock.release()

    def _commit_and_unlock(self) -> None:
        """COMMIT the transaction `_commit_group` opened (worker thread), then release its lock."""
        db = self._db
        try:
            db.execute("COMMIT")  # synchronous=FULL: durable when this returns
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        finally:
            self._lock.release()


_COLUMNS = "origin, size, root, note, cosigned_at"


def _record(row: tuple) -> Record:
    return Record(row[0], row[1], bytes(row[2]), row[3], row[4])


def _unavailable(e: sqlite3.Error) -> Unavailable:
    return Unavailable(f"the witness could not persist its state: {e}", retry_after=1)


async def _storage(call):
    """A full disk or read-only state directory answers 503, never 500. Safe even if a
    failed COMMIT did land: no cosignature was returned, and the log resyncs via 409."""
    try:
        return await call
    except sqlite3.Error as e:
        log.error("could not read or persist the witness state (answering 503 until this clears): %s", e)
        raise _unavailable(e) from None
