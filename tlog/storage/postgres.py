"""The scale-out backend of `tlog.storage.interface`: PostgreSQL, for any number of frontends.

PostgreSQL holds the entries (with their leaf hashes, unique: the dedup index), the
sequence and the signed checkpoints; it is the truth. Every frontend (`oap-log
serve` with `storage = "postgres"`) accepts writes and serves reads:

1. **Sequencing** (`append`, any frontend): one transaction locks the one-row
   sequence counter, gives the entries not already in the log the next indices and
   inserts them. Exactly once: the counter lock serialises sequencers, and an entry
   seen before (in this batch or any earlier one) gets its existing index.
2. **Integration** (one frontend at a time: the holder of a session-level advisory
   lock, which PostgreSQL releases when its connection ends): extends the tree over
   everything sequenced, stages tiles and entry bundles in the bucket (when one is
   configured), signs the checkpoint, and moves the head by compare-and-swap
   (`UPDATE ... WHERE size = old`). Checkpoints are keyed by size: a second, different
   root for a size is refused by the database itself (the fork guard), and an
   integrator whose CAS fails, or whose connection drops, stops at once.
3. **Publication**: the integrator has the new checkpoint cosigned (the witness
   quorum, when witnesses are configured), records the cosigned note as the published
   head, writes the checkpoint object to the bucket, and NOTIFYs every frontend.
   `append` returns once the published head covers its entries.

Every frontend keeps the tree's hashes in local hash files (`tlog.storage.hashfiles`):
derived data, caught up from the entries' leaf hashes as the head moves and checked
against each signed root, so batched proofs are the same numpy gathers as in the
embedded backend.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tlog.errors import ForkError, LogHalted, NotFound, Unavailable
from tlog.formats.entries import ReceiptRow, receipt_rows
from tlog.formats.hashing import leaf_hashes
from tlog.formats.tiles import encode_entry_bundle
from tlog.merkle.tree import TreeView
from tlog.storage import hashfiles
from tlog.storage.files import lock_dir
from tlog.storage.hashfiles import HashFiles
from tlog.storage.interface import BatchResult, CorruptionError, LogState, Signer
from tlog.storage.transfer import Snapshot

log = logging.getLogger("oap.tlog.postgres")

SCHEMA = """
CREATE TABLE IF NOT EXISTS oap_entries (
    idx  BIGINT PRIMARY KEY,
    leaf BYTEA NOT NULL UNIQUE CHECK (length(leaf) = 32),
    data BYTEA NOT NULL CHECK (length(data) <= 65535)
);
CREATE TABLE IF NOT EXISTS oap_sequence (
    one  BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    next BIGINT NOT NULL CHECK (next >= 0)
);
CREATE TABLE IF NOT EXISTS oap_checkpoints (
    size      BIGINT PRIMARY KEY,
    root      BYTEA NOT NULL CHECK (length(root) = 32),
    note      TEXT NOT NULL,
    signed_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS oap_head (
    one            BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    size           BIGINT NOT NULL,
    root           BYTEA NOT NULL,
    note           TEXT NOT NULL,
    published_size BIGINT NOT NULL,
    published_note TEXT NOT NULL,
    integrator     TEXT NOT NULL DEFAULT '',
    updated_at     DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS oap_receipts (
    signer       TEXT NOT NULL,
    idx          BIGINT NOT NULL,
    receipt_hash BYTEA NOT NULL,
    ts           TEXT,
    signed_at    DOUBLE PRECISION,
    logged_at    DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (signer, idx)
);
CREATE INDEX IF NOT EXISTS oap_receipts_by_hash ON oap_receipts (receipt_hash);
INSERT INTO oap_sequence (one, next) VALUES (TRUE, 0) ON CONFLICT DO NOTHING;
"""

INTEGRATOR_LOCK = 0x0A9_1065  # pg advisory lock key of the integrator role
SCHEMA_LOCK = 0x0A9_5C4E  # serialises schema creation between frontends starting together
HEAD_CHANNEL = "oap_head"
SEQUENCE_CHANNEL = "oap_sequenced"

Publish = Callable[[LogState], Coroutine[Any, Any, LogState]]
"""Has a signed state cosigned (the witness quorum): the sequencer's publisher."""


def _connect(dsn: str, *, autocommit: bool = True):
    import psycopg

    try:
        return psycopg.connect(dsn, autocommit=autocommit, connect_timeout=10)
    except psycopg.OperationalError as e:
        raise Unavailable(f"PostgreSQL is not reachable: {str(e).strip().splitlines()[0]}", retry_after=1) from None


class PostgresStorage:
    """`LogStorage` on PostgreSQL, with a local hash cache in `cache_dir`.

    `append` runs on the sequencer's writer thread; integration runs on this
    frontend's integrator thread while it holds the role; a listener thread follows
    the published head (LISTEN/NOTIFY, and a poll as a fallback).
    """

    read_only = False

    def __init__(self, dsn: str, cache_dir: Path, *, bucket: Any = None,
                 map_window: int = hashfiles.DEFAULT_MAP_WINDOW_MB << 20,
                 integrate: bool = True, poll_interval: float = 0.5, wait_timeout: float = 30.0,
                 name: str = "") -> None:
        self.dsn, self.bucket = dsn, bucket
        self.dir = Path(cache_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd: int | None = lock_dir(self.dir, "cache.lock", "frontend")  # one process per cache directory
        self.hashes = HashFiles(self.dir / "hashes", window=map_window)
        self.integrate_enabled = integrate
        self.poll_interval, self.wait_timeout = poll_interval, wait_timeout
        self.name = name or f"{__import__('socket').gethostname()}:{__import__('os').getpid()}"
        self.state: LogState | None = None  # the published head this frontend serves
        self.publish: Publish | None = None  # set by the log service: cosigning
        self.loop: asyncio.AbstractEventLoop | None = None
        self.integrating = False  # this frontend holds the integrator role
        self.lost_role = 0  # times the role was lost (a failed CAS, a dropped connection)
        self.lag = 0  # entries sequenced beyond the published head, when the integrator last looked
        self._bucket_conn: Any = None
        self._bucket_lock = threading.Lock()
        self._sign: Signer | None = None
        self._writer = None  # the sequencer's connection
        self._cond = threading.Condition()  # guards self.state
        self._extend_lock = threading.Lock()  # one thread extends the hash files at a time
        self._cache_size = 0  # leaves in the local hash files (0: not checked yet)
        self.on_state: Callable[[LogState], None] | None = None  # called with each newer published state
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._halted: ForkError | LogHalted | None = None

    # --- open and close ------------------------------------------------------------

    def open(self, sign: Signer) -> LogState:
        """Create the schema if this is a new database, sign the empty tree if nothing is
        signed yet, bring the local hash cache to the published head, and start following it."""
        self._sign = sign
        conn = _connect(self.dsn)
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                conn.execute(SCHEMA)
                head = conn.execute("SELECT size FROM oap_head").fetchone()
                if head is None:
                    view = TreeView(0, self.hashes.read)
                    note = sign(0, view.root)
                    conn.execute("INSERT INTO oap_checkpoints (size, root, note, signed_at) VALUES (0, %s, %s, %s) "
                                 "ON CONFLICT DO NOTHING", (view.root, note, time.time()))
                    conn.execute("INSERT INTO oap_head (size, root, note, published_size, published_note, updated_at) "
                                 "VALUES (0, %s, %s, 0, %s, %s)", (view.root, note, note, time.time()))
        finally:
            conn.close()
        self._writer = _connect(self.dsn, autocommit=False)
        state = self._catch_up(self._read_head(self._writer)[1])
        self._serve(state)
        self._start_thread("oap-pg-listen", self._listen)
        if self.integrate_enabled:
            self._start_thread("oap-pg-integrate", self._integrate_loop)
        return state

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        for t in self._threads:
            t.join(10)
        if self._writer is not None:
            self._writer.close()
        if self.bucket is not None:
            self.bucket.close()
        if self._bucket_conn is not None:
            self._bucket_conn.close()
        self.hashes.sync()
        self.hashes.close()
        if self._lock_fd is not None:
            import os

            os.close(self._lock_fd)
            self._lock_fd = None

    def _start_thread(self, name: str, target: Callable[[], None]) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    # --- sequencing ----------------------------------------------------------------------

    def append(self, datas: Sequence[bytes], sign: Signer) -> BatchResult:
        """Sequence the entries (durably, exactly once), then wait until a published
        checkpoint covers them. Unavailable (503) when the database cannot be reached
        or no integrator publishes in time; the entries that were sequenced stay."""
        if self._halted is not None:
            raise self._halted
        rows = leaf_hashes(datas)
        digests = rows.tobytes()
        leaves = [digests[i:i + 32] for i in range(0, len(digests), 32)]
        indices, fresh = self._sequence(leaves, datas)
        state = self._wait_published(max(indices) + 1 if indices else 0)
        return BatchResult(indices, fresh, state, leaves)

    def _sequence(self, leaves: list[bytes], datas: Sequence[bytes]) -> tuple[list[int], list[bool]]:
        import psycopg

        conn = self._writer
        # decoded before the sequence row is locked: other frontends wait on that lock
        receipts = {r.index: r for r in receipt_rows(list(zip(range(len(datas)), leaves, datas)), 0.0)}
        try:
            if conn is None or conn.closed:
                conn = self._writer = _connect(self.dsn, autocommit=False)
            with conn.transaction():
                nxt = conn.execute("SELECT next FROM oap_sequence FOR UPDATE").fetchone()[0]
                known = dict(conn.execute("SELECT leaf, idx FROM oap_entries WHERE leaf = ANY(%s)",
                                          (list(set(leaves)),)).fetchall())
                indices: list[int] = []
                fresh: list[bool] = []
                new: list[tuple[int, bytes, bytes]] = []
                rows: list[tuple] = []
                now = time.time()
                for k, (lh, data) in enumerate(zip(leaves, datas)):
                    idx = known.get(lh)
                    if idx is None:
                        idx = known[lh] = nxt + len(new)
                        new.append((idx, lh, data))
                        if k in receipts:
                            rows.append(receipts[k]._replace(index=idx, logged_at=now))
                        fresh.append(True)
                    else:
                        fresh.append(False)
                    indices.append(idx)
                if new:
                    with conn.cursor().copy("COPY oap_entries (idx, leaf, data) FROM STDIN (FORMAT BINARY)") as cp:
                        cp.set_types(["int8", "bytea", "bytea"])
                        for row in new:
                            cp.write_row(row)
                    if rows:
                        with conn.cursor().copy("COPY oap_receipts FROM STDIN (FORMAT BINARY)") as cp:
                            cp.set_types(["text", "int8", "bytea", "text", "float8", "float8"])
                            for r in rows:
                                cp.write_row(r)
                    conn.execute("UPDATE oap_sequence SET next = %s", (nxt + len(new),))
                    conn.execute(f"NOTIFY {SEQUENCE_CHANNEL}")
            return indices, fresh
        except psycopg.Error as e:
            self._writer = None
            try:
                if conn is not None:
                    conn.close()
            except Exception:  # noqa: BLE001 - already broken
                pass
            raise Unavailable(f"the log's database refused the batch: {type(e).__name__}", retry_after=1) from None

    def _wait_published(self, covering: int) -> LogState:
        deadline = time.monotonic() + self.wait_timeout
        with self._cond:
            while self.state is None or self.state.size < covering:
                if self._halted is not None:
                    raise self._halted
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    raise Unavailable("the entries are sequenced but no checkpoint covering them was published in "
                                      "time (is an integrator running?)", retry_after=1)
                self._cond.wait(min(left, 0.25))
            return self.state

    def refresh(self) -> LogState:
        assert self.state is not None, "open() first"
        return self.state

    def entries(self) -> PostgresEntries:
        return PostgresEntries(self.dsn)

    # --- following the published head ---------------------------------------------------------

    @staticmethod
    def _read_head(conn) -> tuple[tuple[int, bytes, str], tuple[int, str]]:
        """((signed size, root, note), (published size, published note))."""
        size, root, note, psize, pnote = conn.execute(
            "SELECT size, root, note, published_size, published_note FROM oap_head").fetchone()
        if conn.info.transaction_status != 0:  # autocommit=False: end the read's transaction
            conn.rollback()
        return (size, bytes(root), note), (psize, pnote)

    def _catch_up(self, published: tuple[int, str], conn: Any = None) -> LogState:
        """The published head as a LogState, the local hashes extended to it (and checked)."""
        size, note = published
        own = conn or _connect(self.dsn)
        try:
            root = self._extend(own, size)
        finally:
            if conn is None:
                own.close()
        return LogState(size, root, note, TreeView(size, self.hashes.read))

    def _extend(self, conn, size: int) -> bytes:
        """The root of the tree of `size` leaves, the local hash files extended to it from the
        entries' leaf hashes if they are shorter; checked against the root signed for `size`.

        One thread at a time (the listener, the integrator, open); readers may gather from
        the files meanwhile, as they only read nodes of smaller, published trees.
        """
        with self._extend_lock:
            have = self._cache_size
            if have == 0:
                have = self._valid_cache(conn, self.hashes.intact_size(size))
            cur = have
            while cur < size:
                n = min(1 << 16, size - cur)
                rows = conn.execute("SELECT leaf FROM oap_entries WHERE idx >= %s AND idx < %s ORDER BY idx",
                                    (cur, cur + n)).fetchall()
                if len(rows) != n:
                    raise CorruptionError(f"entries {cur}..{cur + n - 1} are missing below size {size}")
                leaves = np.frombuffer(b"".join(bytes(r[0]) for r in rows), dtype=np.uint8).reshape(n, 32)
                self.hashes.append(cur, leaves)
                cur += n
            root = TreeView(size, self.hashes.read).root
            signed = conn.execute("SELECT root FROM oap_checkpoints WHERE size = %s", (size,)).fetchone()
            if signed is not None and bytes(signed[0]) != root:
                self.hashes.truncate(0)
                self._cache_size = 0
                raise CorruptionError(f"the entries do not hash to the root signed for size {size}")
            self._cache_size = max(have, size)
            return root

    def _valid_cache(self, conn, intact: int) -> int:
        """How much of the hash files left by an earlier run to keep: up to the largest
        signed size they reproduce the root of (0: rebuild)."""
        have = 0
        if intact:
            signed = conn.execute("SELECT size, root FROM oap_checkpoints WHERE size <= %s ORDER BY size DESC "
                                  "LIMIT 1", (intact,)).fetchone()
            if signed is not None and TreeView(signed[0], self.hashes.read).root == bytes(signed[1]):
                have = signed[0]
        self.hashes.truncate(have)
        return have

    def _serve(self, state: LogState) -> None:
        newer = False
        with self._cond:
            if self.state is None or state.size > self.state.size or \
                    (state.size == self.state.size and state.note != self.state.note):
                self.state, newer = state, True
            self._cond.notify_all()
        if newer and self.on_state is not None:
            self.on_state(state)

    def _listen(self) -> None:
        """Follow the published head: NOTIFY wakes this thread at once, a poll catches
        anything missed (a notification is lost while a connection is down)."""
        conn = None
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = _connect(self.dsn)
                    conn.execute(f"LISTEN {HEAD_CHANNEL}")
                _, published = self._read_head(conn)
                if self.state is None or published[0] > self.state.size or published[1] != self.state.note:
                    self._serve(self._catch_up(published, conn))
                for _ in conn.notifies(timeout=self.poll_interval, stop_after=1):
                    pass
            except CorruptionError as e:
                log.critical("frontend cache: %s", e)
                time.sleep(1)
            except Exception as e:  # noqa: BLE001 - the database is down: retry
                log.warning("following the head failed (retrying): %s: %s", type(e).__name__, e)
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:  # noqa: BLE001
                        pass
                conn = None
                self._stop.wait(1.0)
        if conn is not None:
            conn.close()

    # --- integration (one frontend at a time) -------------------------------------------------

    def _integrate_loop(self) -> None:
        conn = None
        backoff = 0.5
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = _connect(self.dsn)
                    conn.execute(f"LISTEN {SEQUENCE_CHANNEL}")
                if not self.integrating:
                    got = conn.execute("SELECT pg_try_advisory_lock(%s)", (INTEGRATOR_LOCK,)).fetchone()[0]
                    if not got:
                        self._stop.wait(1.0)
                        continue
                    self.integrating = True
                    log.info("this frontend is the integrator")
                if not self._integrate_once(conn):
                    if self.bucket is not None:
                        self.bucket.flush_due()  # a checkpoint object held back by the interval
                    for _ in conn.notifies(timeout=0.05, stop_after=1):
                        pass
                backoff = 0.5
            except Unavailable as e:  # no witness quorum, the bucket down: the head is kept, retried
                log.warning("publishing the checkpoint failed (retrying in %.1f s): %s", backoff, e.message)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            except (ForkError, LogHalted) as e:
                log.critical("HALTED: %s", e.message)
                self._halted = e
                with self._cond:
                    self._cond.notify_all()
                return
            except Exception as e:  # noqa: BLE001 - lost the database or the role: stop signing at once
                if self.integrating:
                    self.lost_role += 1
                    log.warning("integrator role lost: %s: %s", type(e).__name__, e)
                self.integrating = False
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:  # noqa: BLE001
                        pass
                conn = None
                self._stop.wait(0.5)
        if conn is not None:
            conn.close()

    def _integrate_once(self, conn) -> bool:
        """Integrate everything sequenced; False when there was nothing to do."""
        (size, root, note), (psize, pnote) = self._read_head(conn)
        target = conn.execute("SELECT next FROM oap_sequence").fetchone()[0]
        self.lag = target - psize
        if target > size:
            self._sign_and_cas(conn, size, target)
            return True
        if psize < size:  # signed but not yet published (an integrator died in between)
            self._publish(conn, LogState(size, root, note, TreeView(size, self.hashes.read)))
            return True
        return False

    def _sign_and_cas(self, conn, old: int, target: int) -> None:
        assert self._sign is not None
        root = self._extend(conn, target)
        if self.bucket is not None:
            self.bucket.stage(self.hashes, self._entries_between(conn), old, target)
        note = self._sign(target, root)
        with conn.transaction():
            conn.execute("INSERT INTO oap_checkpoints (size, root, note, signed_at) VALUES (%s, %s, %s, %s) "
                         "ON CONFLICT (size) DO NOTHING", (target, root, note, time.time()))
            row = conn.execute("SELECT root FROM oap_checkpoints WHERE size = %s", (target,)).fetchone()
            if bytes(row[0]) != root:
                raise ForkError(f"refusing a second root for tree size {target}: the database holds another")
            moved = conn.execute("UPDATE oap_head SET size = %s, root = %s, note = %s, integrator = %s, "
                                 "updated_at = %s WHERE size = %s AND size < %s",
                                 (target, root, note, self.name, time.time(), old, target)).rowcount
            if moved != 1:
                raise RuntimeError(f"the head moved past {old} under this integrator")
        self._publish(conn, LogState(target, root, note, TreeView(target, self.hashes.read)))

    def _publish(self, conn, state: LogState) -> None:
        """Cosign (when witnesses are configured), write the checkpoint object to the bucket
        when its interval is due, then record the published note and notify.

        The bucket comes before the database's published head: while the bucket refuses
        writes, nothing new is published, so writes answer 503 (the entries stay sequenced)
        rather than being acknowledged into a log its readers cannot see.
        """
        published = state
        if self.publish is not None and self.loop is not None:
            fut: concurrent.futures.Future[LogState] = asyncio.run_coroutine_threadsafe(self.publish(state),
                                                                                          self.loop)
            try:
                published = fut.result(self.wait_timeout)
            except TimeoutError:
                fut.cancel()
                raise Unavailable("the witnesses did not cosign in time", retry_after=1) from None
        if self.bucket is not None:
            self.bucket.publish_checkpoint(published.note, published.size)
        with conn.transaction():
            conn.execute("UPDATE oap_head SET published_size = %s, published_note = %s "
                         "WHERE published_size < %s OR (published_size = %s AND published_note <> %s)",
                         (published.size, published.note, published.size, published.size, published.note))
            conn.execute(f"NOTIFY {HEAD_CHANNEL}")
        self._serve(published)

    def _entries_between(self, conn: Any = None) -> Callable[[int, int], list[bytes]]:
        """Entry reads for the bucket's entry bundles, on a connection of their own (the
        last checkpoint is flushed at close, after the integrator's connection is gone)."""
        def read(start: int, count: int) -> list[bytes]:
            with self._bucket_lock:
                if self._bucket_conn is None or self._bucket_conn.closed:
                    self._bucket_conn = _connect(self.dsn)
                rows = self._bucket_conn.execute(
                    "SELECT data FROM oap_entries WHERE idx >= %s AND idx < %s ORDER BY idx",
                    (start, start + count)).fetchall()
            if len(rows) != count:
                raise CorruptionError(f"entries {start}..{start + count - 1} are missing")
            return [bytes(r[0]) for r in rows]

        return read


def snapshot(dsn: str) -> Snapshot:
    """The published head of the log in this database and a reader of its entries."""
    conn = _connect(dsn)
    try:
        row = conn.execute("SELECT published_size, published_note FROM oap_head").fetchone()
    except Exception as e:  # noqa: BLE001 - no schema: no log
        raise NotFound(f"no log in this database: {type(e).__name__}") from None
    finally:
        conn.close()
    if row is None:
        raise NotFound("the log in this database has signed nothing yet")
    return Snapshot(row[0], row[1], PostgresEntries(dsn))


class PostgresEntries:
    """The `EntryReader` of the PostgreSQL backend: a few async connections."""

    def __init__(self, dsn: str, connections: int = 2) -> None:
        self.dsn, self.n = dsn, connections
        self._conns: list = []
        self._next = 0

    async def open(self) -> None:
        import psycopg

        for _ in range(self.n):
            self._conns.append(await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, connect_timeout=10))
        self._locks = [asyncio.Lock() for _ in self._conns]

    async def close(self) -> None:
        for c in self._conns:
            await c.close()

    async def _query(self, sql: str, args: tuple) -> list:
        import psycopg

        k = self._next = (self._next + 1) % len(self._conns)
        async with self._locks[k]:
            for attempt in (1, 2):  # reads are idempotent: once more on a fresh connection
                try:
                    if self._conns[k].closed:
                        self._conns[k] = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True,
                                                                               connect_timeout=10)
                    cur = await self._conns[k].execute(sql, args)
                    return await cur.fetchall()
                except (psycopg.OperationalError, psycopg.InterfaceError):
                    if attempt == 2:
                        raise Unavailable("the log's database is not reachable", retry_after=1) from None
                    try:
                        await self._conns[k].close()
                    except Exception:  # noqa: BLE001 - already broken
                        pass
        raise AssertionError("unreachable")

    async def entry(self, index: int, size: int) -> tuple[bytes, bytes]:
        if not 0 <= index < size:
            raise NotFound(f"no entry {index} in a tree of size {size}")
        rows = await self._query("SELECT leaf, data FROM oap_entries WHERE idx = %s", (index,))
        if not rows:
            raise NotFound(f"no entry {index}")
        return bytes(rows[0][0]), bytes(rows[0][1])

    async def bundle(self, start: int, count: int) -> bytes:
        rows = await self._query("SELECT data FROM oap_entries WHERE idx >= %s AND idx < %s ORDER BY idx",
                                 (start, start + count))
        if len(rows) != count:
            raise NotFound("entries not available")
        return encode_entry_bundle([bytes(r[0]) for r in rows])

    async def receipts(self, size: int, *, signer: str | None = None, receipt_hash: bytes | None = None,
                       since: float | None = None, after: int = -1, limit: int = 1000) -> list[ReceiptRow]:
        where: list[str] = ["idx < %s", "idx > %s"]
        args: list = [size, after]
        if since is not None:
            where.append("(logged_at >= %s OR signed_at >= %s)")
            args += [since, since]
        if signer is not None:
            where.append("signer = %s")
            args.append(signer)
        if receipt_hash is not None:
            where.append("receipt_hash = %s")
            args.append(receipt_hash)
        rows = await self._query(f"SELECT signer, idx, receipt_hash, ts, signed_at, logged_at FROM oap_receipts "
                                 f"WHERE {' AND '.join(where)} ORDER BY idx LIMIT %s", (*args, limit))
        return [ReceiptRow(r[0], int(r[1]), bytes(r[2]), r[3], r[4], float(r[5])) for r in rows]

    async def index_of(self, leaf_hash: bytes, size: int) -> int:
        rows = await self._query("SELECT idx FROM oap_entries WHERE leaf = %s AND idx < %s", (leaf_hash, size))
        if not rows:
            raise NotFound("no entry with that leaf hash")
        return int(rows[0][0])
