"""The scale-out driver of `tlog.storage.interface`: PostgreSQL, for any number of frontends.

PostgreSQL holds the entries (with their leaf hashes, unique: the dedup index), the
sequence, the signed checkpoints, the head and the integrator role; it is the truth.
Every frontend (`oap-log serve` with `storage = "postgres"`) runs the same appender
(`tlog.server.appender`) on this driver:

- `sequence` (any frontend): one transaction locks the one-row sequence counter, gives the
  entries not already in the log the next indices and inserts them. Exactly once: the
  counter lock serialises the frontends, and an entry seen before (in this batch or any
  earlier one) gets its existing index. The rows go in with one INSERT, not COPY: a
  frontend frozen in the middle of a COPY would hold the counter's lock for as long as it
  stays frozen, while one frozen between statements is cut off by the server (below).
- The integrator role is a lease in `oap_head`: a fencing epoch, incremented on every
  acquisition, and an expiry on the database's clock (`lease_until`), pushed `LEASE_TTL`
  ahead by every renewal. The lease is also bound to its holder's lease session, which
  holds the advisory lock (LEASE_LOCK, epoch): a frontend takes the role once the holder's
  lease lapsed (a paused or cut-off holder), was released (a clean stop), or its session
  is gone (a holder that died: the database closed its connections, so the role moves at
  once rather than after the TTL); a holder whose lease session breaks has lost the role.
  Every write of the holder checks its epoch and the expiry in the same statement as the
  write (`WHERE epoch = %s AND lease_until > clock_timestamp()`), so a holder that was
  paused, cut off or slow writes nothing more, whatever it still believes. The lease has a
  connection and a thread of its own, so that no long query of the holder delays a renewal.
- A frozen peer never holds a lock for long: every session sets
  `idle_in_transaction_session_timeout` (the server ends a session left idle inside a
  transaction, which releases its row locks: what a stopped process leaves, since its
  kernel keeps the TCP connection up), the server's TCP keepalives and user timeout (a
  peer whose machine or network is gone), and the client's (a database that is gone);
  lease statements wait at most `LEASE_LOCK_WAIT` for a row lock.
- Checkpoints are keyed by size: a second, different root for a size is refused by the
  database itself (the fork guard), and the head moves only by compare-and-swap
  (`UPDATE ... WHERE size = old`).
- `follow` wakes on NOTIFY when another frontend sequences or publishes.

Every frontend keeps the tree's hashes in local hash files (`tlog.storage.hashfiles`):
derived data, extended from the entries' leaf hashes as the head moves and checked against
each signed root, so batched proofs are the same numpy gathers as in the embedded driver.
A frontend of a log published to a bucket does not build them whole before it serves: it
starts from the right-edge tiles of the bucket's checkpoint, checked against the root the
database recorded for that size, and fills the rest tile by tile as reads need it
(`tlog.storage.lazyhashes`).
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from tlog.errors import ForkError, FormatError, NotFound, Unavailable
from tlog.formats.checkpoint import parse_checkpoint
from tlog.formats.entries import ReceiptRow, receipt_rows
from tlog.formats.hashing import leaf_hashes
from tlog.formats.note import parse_note
from tlog.formats.tiles import TILE_HEIGHT, TILE_WIDTH, encode_entry_bundle, tile_path
from tlog.merkle.tree import TreeView
from tlog.storage import hashfiles
from tlog.storage.durable import fsync_dir, lock_dir
from tlog.storage.hashfiles import HashFiles
from tlog.storage.interface import CorruptionError, Fault, Head, Lease, LeaseLost, Sequenced, SignedHead
from tlog.storage.lazyhashes import SPARSE, LazyHashes, TileFetch
from tlog.storage.receiptsql import receipts_query
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
ALTER TABLE oap_head ADD COLUMN IF NOT EXISTS epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE oap_head ADD COLUMN IF NOT EXISTS failure TEXT NOT NULL DEFAULT '';
ALTER TABLE oap_head ADD COLUMN IF NOT EXISTS failed_at DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE oap_head ADD COLUMN IF NOT EXISTS lease_until TIMESTAMPTZ NOT NULL DEFAULT '-infinity';
ALTER TABLE oap_head ADD COLUMN IF NOT EXISTS swept BIGINT NOT NULL DEFAULT 0;
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
CREATE TABLE IF NOT EXISTS oap_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO oap_sequence (one, next) VALUES (TRUE, 0) ON CONFLICT DO NOTHING;
"""
# A new log's head: nothing signed (size -1) or published yet, epoch 0; and nothing to
# backfill into the receipts index.
NEW_HEAD = "INSERT INTO oap_head (size, root, note, published_size, published_note, updated_at) " \
           "VALUES (-1, '', '', -1, '', %s)"
NEW_META = "INSERT INTO oap_meta (key, value) VALUES ('receipts_indexed', 'all') ON CONFLICT DO NOTHING"
INSERT_ENTRIES = "INSERT INTO oap_entries (idx, leaf, data) SELECT * FROM unnest(%b::int8[], %b::bytea[], %b::bytea[])"
INSERT_RECEIPTS = "INSERT INTO oap_receipts SELECT * FROM unnest(%b::text[], %b::int8[], %b::bytea[], %b::text[], " \
                  "%b::float8[], %b::float8[])"

SCHEMA_LOCK = 0x0A9_5C4E  # serialises schema creation between frontends starting together
LEASE_LOCK = 0x0A9_1E45  # advisory locks (LEASE_LOCK, epoch): held by the lease session of the epoch's holder
HEAD_CHANNEL = "oap_head"
SEQUENCE_CHANNEL = "oap_sequenced"
LEASE_TTL = 5.0  # seconds a lease lasts after each renewal (the appender renews it every second)
LEASE_LOCK_WAIT = "1s"  # the longest a lease statement waits for a row lock before it is tried again
IDLE_IN_TRANSACTION = "5s"  # a session left idle inside a transaction this long is ended by the server
# Client side (libpq): a database or network that is gone is noticed within about 10 s.
CLIENT_TCP = {"keepalives": "1", "keepalives_idle": "5", "keepalives_interval": "2", "keepalives_count": "3",
              "tcp_user_timeout": "10000"}
# Server side, set by every session for itself: a peer that is gone loses its session, and its locks.
SESSION = (f"SET idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION}'; SET tcp_keepalives_idle = 5; "
           "SET tcp_keepalives_interval = 2; SET tcp_keepalives_count = 3; SET tcp_user_timeout = 10000")
# The fence, in the statement that writes: this holder's epoch, and its lease not lapsed.
FENCE = "epoch = %s AND lease_until > clock_timestamp()"
LAZY_GAP = 1 << 16  # a hash cache this many entries behind starts again from the bucket's edge instead


def _conninfo(dsn: str) -> str:
    """`dsn` with the client's TCP keepalives and user timeout, unless it sets them itself."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    given = conninfo_to_dict(dsn)
    return make_conninfo(dsn, **{k: v for k, v in CLIENT_TCP.items() if k not in given})


def _connect(dsn: str):
    import psycopg

    try:
        conn = psycopg.connect(_conninfo(dsn), autocommit=True, connect_timeout=10)
        conn.execute(SESSION)
        return conn
    except psycopg.Error as e:
        raise Unavailable(f"PostgreSQL is not reachable: {str(e).strip().splitlines()[0]}", retry_after=1) from None


def _close(conn: Any) -> None:
    if conn is not None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - already broken
            pass


class _Session:
    """One connection, opened on first use (then `setup` run on it); a database error drops
    it (it is opened again next time) and is a 503."""

    def __init__(self, dsn: str, setup: str = "") -> None:
        self.dsn, self.setup = dsn, setup
        self.conn: Any = None

    @contextmanager
    def use(self) -> Iterator[Any]:
        import psycopg

        if self.conn is None or self.conn.closed:
            self.conn = _connect(self.dsn)
            if self.setup:
                try:
                    self.conn.execute(self.setup)
                except psycopg.Error as e:
                    self.close()
                    raise Unavailable(f"the log's database refused the request: {type(e).__name__}",
                                      retry_after=1) from None
        try:
            yield self.conn
        except psycopg.Error as e:
            self.close()
            raise Unavailable(f"the log's database refused the request: {type(e).__name__}", retry_after=1) from None

    def close(self) -> None:
        _close(self.conn)
        self.conn = None


class PostgresStorage:
    """The PostgreSQL `Driver`, with a local hash cache in `cache_dir`.

    Connections: one for sequencing (the appender's sequencing thread), one for heads, the
    hash cache, entry reads and the holder's fenced writes (its driver thread), one for the
    lease (`acquire`, `renew`, `release`: its lease thread), and one that listens for other
    frontends' notifications (`follow`, the appender's follow thread).
    """

    read_only = False
    shared = True
    lease_ttl = LEASE_TTL
    parallel_sequencing = True  # its own connection, and no hash files: beside integration, not behind it

    def __init__(self, dsn: str, cache_dir: Path, *, map_window: int = hashfiles.DEFAULT_MAP_WINDOW_MB << 20,
                 name: str = "", tiles: TileFetch | None = None, faults: Fault | None = None) -> None:
        """`name` identifies this frontend in the head row (default host:pid); `tiles` reads
        the objects of the bucket the log is published to (None: no bucket; the hash cache is
        then built whole from the entries); `faults` is a test hook called at `FAULT_POINTS`
        (None in production)."""
        self.dsn = dsn
        self.dir = Path(cache_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd: int | None = lock_dir(self.dir, "cache.lock", "frontend")  # one process per cache directory
        self.tiles = tiles
        self._fills = _Session(dsn)  # leaf hashes for the tiles readers fill (under the cache's lock)
        self.hashes = LazyHashes(HashFiles(self.dir / "hashes", window=map_window), fetch=tiles,
                                 leaves=self._leaf_rows)
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.faults = faults
        self._main = _Session(dsn)  # heads, cache extension, entry reads, the holder's fenced writes
        self._seq = _Session(dsn)  # sequencing
        # acquire, renew, release. A renewal commits without waiting for the WAL to reach the
        # disk, so it holds the head row (which the holder's own writes lock) for no fsync:
        # lost in a crash, it only ends the lease sooner, and the session it holds dies anyway.
        self._lease = _Session(dsn, f"SET lock_timeout = '{LEASE_LOCK_WAIT}'; SET synchronous_commit = off")
        self._locked: int | None = None  # the epoch whose advisory lock the lease session holds
        self._listen: Any = None  # follow()
        self._cache_size = 0  # leaves in the local hash files (0: not checked yet)

    def _fault(self, name: str) -> None:
        if self.faults is not None:
            self.faults(name)

    # --- connections ---------------------------------------------------------------------

    @contextmanager
    def _db(self) -> Iterator[Any]:
        with self._main.use() as conn:
            yield conn

    @contextmanager
    def _fenced(self, lease: Lease, update: str, args: tuple) -> Iterator[Any]:
        """A transaction of the holder that begins with `update`, an UPDATE of the head row
        whose WHERE clause includes FENCE: the epoch and the expiry are checked by the
        statement that writes, which also locks the row until the transaction ends. LeaseLost
        if it changed nothing because of the fence; the caller's other refusals are its own."""
        import psycopg

        try:
            with self._main.use() as conn, conn.transaction():
                if conn.execute(update, args).rowcount != 1:
                    epoch, lapsed = conn.execute("SELECT epoch, lease_until <= clock_timestamp() "
                                                 "FROM oap_head").fetchone()
                    if epoch != lease.epoch:
                        raise LeaseLost(f"the integrator role moved on (epoch {epoch}, ours {lease.epoch})")
                    if lapsed:
                        raise LeaseLost(f"the integrator's lease (epoch {epoch}) lapsed")
                    yield None  # the fence held: the caller says why nothing was written
                else:
                    yield conn
        except psycopg.Error as e:  # not written (the transaction rolled back)
            raise Unavailable(f"the log's database refused the write: {type(e).__name__}", retry_after=1) from None

    # --- open and close ------------------------------------------------------------------

    def open(self) -> Head:
        """Create the schema if this is a new database (or add what a newer version needs)."""
        with self._db() as conn:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                conn.execute(SCHEMA)
                if conn.execute("SELECT 1 FROM oap_head").fetchone() is None:
                    conn.execute(NEW_HEAD, (time.time(),))
                    conn.execute(NEW_META)
        # The sequencing session too, with the tables its transaction reads: opened here, the
        # connection and the server's first look at them are not paid by the first write.
        with self._seq.use() as conn:
            conn.execute("SELECT next FROM oap_sequence").fetchone()
            conn.execute("SELECT leaf, idx FROM oap_entries WHERE leaf = ANY(%s)", ([],)).fetchall()
        return self.head()

    def close(self) -> None:
        if self._lock_fd is None:  # closed already
            return
        self._main.close()
        self._seq.close()
        self._fills.close()
        self._lease.close()
        _close(self._listen)
        self._listen = None
        self.hashes.sync()
        self.hashes.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- heads -----------------------------------------------------------------------------

    @staticmethod
    def _read_head(conn: Any) -> Head:
        size, root, note, psize, pnote, failure, failed_at, swept, sequenced = conn.execute(
            "SELECT h.size, h.root, h.note, h.published_size, h.published_note, h.failure, h.failed_at, h.swept, "
            "s.next FROM oap_head h, oap_sequence s").fetchone()
        return Head(sequenced, None if size < 0 else SignedHead(size, bytes(root), note),
                    None if psize < 0 else (psize, pnote), failure, failed_at, swept)

    def head(self) -> Head:
        with self._db() as conn:
            return self._read_head(conn)

    def follow(self, timeout: float) -> Head:
        """Wait for a NOTIFY (another frontend sequenced or published) or `timeout`, then
        read the head; a notification lost while the connection was down is made up for
        by the read that follows every wait."""
        import psycopg

        try:
            if self._listen is None or self._listen.closed:
                self._listen = _connect(self.dsn)
                self._listen.execute(f"LISTEN {HEAD_CHANNEL}")
                self._listen.execute(f"LISTEN {SEQUENCE_CHANNEL}")
            else:
                for _ in self._listen.notifies(timeout=timeout, stop_after=1):
                    pass
            return self._read_head(self._listen)
        except psycopg.Error as e:
            _close(self._listen)
            self._listen = None
            raise Unavailable(f"following the log's database failed: {type(e).__name__}", retry_after=1) from None

    # --- sequencing ----------------------------------------------------------------------

    def sequence(self, datas: Sequence[bytes], *, logged_at: Sequence[float] | None = None) -> Sequenced:
        """Durably give the new entries the next indices, in one transaction (exactly once)."""
        rows = leaf_hashes(datas)
        digests = rows.tobytes()
        leaves = [digests[i:i + 32] for i in range(0, len(digests), 32)]
        # decoded before the sequence row is locked: other frontends wait on that lock
        receipts = {r.index: r for r in receipt_rows(list(zip(range(len(datas)), leaves, datas)), 0.0)}
        with self._seq.use() as conn:
            with conn.transaction():
                nxt = conn.execute("SELECT next FROM oap_sequence FOR UPDATE").fetchone()[0]
                known = dict(conn.execute("SELECT leaf, idx FROM oap_entries WHERE leaf = ANY(%s)",
                                          (list(set(leaves)),)).fetchall())
                indices: list[int] = []
                fresh: list[bool] = []
                new: list[tuple[int, bytes, bytes]] = []
                receipt_rows_new: list[tuple] = []
                now = time.time()
                for k, (lh, data) in enumerate(zip(leaves, datas)):
                    idx = known.get(lh)
                    if idx is None:
                        idx = known[lh] = nxt + len(new)
                        new.append((idx, lh, data))
                        if k in receipts:
                            at = now if logged_at is None else logged_at[k]
                            receipt_rows_new.append(receipts[k]._replace(index=idx, logged_at=at))
                        fresh.append(True)
                    else:
                        fresh.append(False)
                    indices.append(idx)
                if new:
                    # One statement each (see the module docstring: no COPY while the counter is locked)
                    conn.execute(INSERT_ENTRIES, [list(c) for c in zip(*new)])
                    if receipt_rows_new:
                        conn.execute(INSERT_RECEIPTS, [list(c) for c in zip(*receipt_rows_new)])
                    conn.execute("UPDATE oap_sequence SET next = %s", (nxt + len(new),))
                    conn.execute(f"NOTIFY {SEQUENCE_CHANNEL}")
        self._fault("after_sequence")
        return Sequenced(indices, fresh, leaves, nxt + len(new))

    # --- the hash cache ------------------------------------------------------------------

    def extend(self, size: int) -> bytes:
        """The root of the tree of `size` leaves, the local hash files extended to it from the
        entries' leaf hashes if they are shorter; checked against the root signed for `size`.
        Readers may gather from the files meanwhile: they read only nodes of smaller trees."""
        with self._db() as conn:
            have = self._cache_size
            if have == 0:
                have = self._start_cache(conn, size)
            cur = have
            while cur < size:
                n = min(1 << 16, size - cur)
                self.hashes.append(cur, self._leaves(conn, cur, n))
                cur += n
            root = TreeView(size, self.hashes.read).root
            signed = conn.execute("SELECT root FROM oap_checkpoints WHERE size = %s", (size,)).fetchone()
            if signed is not None and bytes(signed[0]) != root:
                self.hashes.reset()
                self._cache_size = 0
                raise CorruptionError(f"the entries do not hash to the root signed for size {size}")
            self._cache_size = max(have, size)
            return root

    @staticmethod
    def _leaves(conn: Any, start: int, count: int) -> np.ndarray:
        rows = conn.execute("SELECT leaf FROM oap_entries WHERE idx >= %s AND idx < %s ORDER BY idx",
                            (start, start + count)).fetchall()
        if len(rows) != count:
            raise CorruptionError(f"entries {start}..{start + count - 1} are missing")
        return np.frombuffer(b"".join(bytes(r[0]) for r in rows), dtype=np.uint8).reshape(count, 32)

    def _leaf_rows(self, start: int, count: int) -> np.ndarray:
        """Leaf hashes for a tile a reader fills (its own session: the driver's may be busy)."""
        with self._fills.use() as conn:
            return self._leaves(conn, start, count)

    def _start_cache(self, conn: Any, size: int) -> int:
        """The hash cache at the first `extend` of this process; the size it holds a tree of
        (0: built from the entries). The files an earlier run left are kept up to the largest
        signed size they reproduce, unless they may hold holes (`SPARSE`) or, with a bucket,
        lie `LAZY_GAP` or more behind `size`: then the right edge is loaded from the bucket."""
        sparse = self.hashes.files.dir / SPARSE
        if not sparse.exists():
            have = self._valid_cache(conn, self.hashes.files.intact_size(size))
            if self.tiles is None or size - have < LAZY_GAP:
                self.hashes.mark_complete(have)
                return have
        self.hashes.reset()
        if self.tiles is None:  # a sparse cache, and no bucket now: built whole from the entries
            sparse.unlink()
            fsync_dir(sparse.parent)
            return 0
        try:
            return self._edge_from_bucket(conn)
        except Unavailable as e:
            log.warning("the hash cache is built from the entries: %s", e)
            self.hashes.reset()
            return 0

    def _edge_from_bucket(self, conn: Any) -> int:
        """Load the right edge of the tree of the bucket's checkpoint: its partial tiles, which
        must give the root the database recorded for that size. The size loaded (0: none)."""
        assert self.tiles is not None
        note = self.tiles("checkpoint")
        if note is None:
            return 0
        try:
            cp = parse_checkpoint(parse_note(note).text)
        except FormatError as e:
            log.warning("the bucket's checkpoint is unreadable (%s): the hash cache is built from the entries", e)
            return 0
        recorded = conn.execute("SELECT root FROM oap_checkpoints WHERE size = %s", (cp.size,)).fetchone()
        if recorded is None or bytes(recorded[0]) != cp.root:
            log.warning("the bucket's checkpoint (size %d) is not one the database recorded: the hash cache is "
                        "built from the entries", cp.size)
            return 0
        partials: dict[int, bytes] = {}
        for level in range(64 // TILE_HEIGHT):
            width = (cp.size >> (TILE_HEIGHT * level)) % TILE_WIDTH
            if not width:
                continue
            index = (cp.size >> (TILE_HEIGHT * level)) // TILE_WIDTH
            data = self.tiles(tile_path(level, index, width))
            if data is None:  # swept since: the full tile begins with the same hashes
                full = self.tiles(tile_path(level, index))
                data = None if full is None else full[:32 * width]
            if data is None:
                log.warning("the bucket lacks tile %s of its checkpoint: the hash cache is built from the entries",
                            tile_path(level, index, width))
                return 0
            partials[level] = data
        sparse = self.hashes.files.dir / SPARSE
        sparse.touch()  # before the first node of a file with holes is written
        fsync_dir(sparse.parent)
        self.hashes.load_edge(cp.size, partials)
        if TreeView(cp.size, self.hashes.read).root != cp.root:
            log.warning("the bucket's edge tiles do not give its checkpoint's root: the hash cache is built from the "
                        "entries")
            self.hashes.reset()
            return 0
        log.info("hash cache: the right edge of size %d loaded from the bucket; the rest is filled as it is read",
                 cp.size)
        return cp.size

    def _valid_cache(self, conn: Any, intact: int) -> int:
        """How much of the hash files left by an earlier run to keep: up to the largest
        signed size they reproduce the root of (0: rebuild)."""
        have = 0
        if intact:
            signed = conn.execute("SELECT size, root FROM oap_checkpoints WHERE size <= %s ORDER BY size DESC "
                                  "LIMIT 1", (intact,)).fetchone()
            if signed is not None and TreeView(signed[0], self.hashes.files.read).root == bytes(signed[1]):
                have = signed[0]
        self.hashes.files.cut(have)
        return have

    def read_entries(self, start: int, count: int) -> list[bytes]:
        with self._db() as conn:
            rows = conn.execute("SELECT data FROM oap_entries WHERE idx >= %s AND idx < %s ORDER BY idx",
                                (start, start + count)).fetchall()
        if len(rows) != count:
            raise CorruptionError(f"entries {start}..{start + count - 1} are missing")
        return [bytes(r[0]) for r in rows]

    # --- the integrator role: a lease in oap_head -------------------------------------------

    def _lease_session(self) -> Any:
        """The lease's own connection (its lock waits are short)."""
        with self._lease.use() as conn:
            return conn

    def _drop_lease_session(self) -> None:
        self._lease.close()
        self._locked = None

    def acquire(self) -> Lease | None:
        """Take the role if its lease lapsed or was released, or if its holder's lease session
        is gone (a process that died: the database closed its sessions): a new epoch (which
        fences out every earlier holder), valid for LEASE_TTL on the database's clock, and
        bound to this frontend's lease session by the advisory lock (LEASE_LOCK, epoch)."""
        import psycopg

        conn = self._lease_session()
        try:
            if not self._takeable(conn):  # the common case, tried every half second: no row lock, no commit
                return None
            with conn.transaction():
                conn.execute("SET LOCAL synchronous_commit = on")  # a new epoch is durable before it is used
                epoch, lapsed = conn.execute("SELECT epoch, lease_until <= clock_timestamp() FROM oap_head "
                                             "FOR UPDATE").fetchone()
                if not lapsed:  # its holder's session still holds the epoch's lock: it is alive
                    if not conn.execute("SELECT pg_try_advisory_lock(%s, %s)", _lock_key(epoch)).fetchone()[0]:
                        return None
                    conn.execute("SELECT pg_advisory_unlock(%s, %s)", _lock_key(epoch))
                # locked before any other session can read the new epoch
                conn.execute("SELECT pg_advisory_lock(%s, %s)", _lock_key(epoch + 1))
                conn.execute("UPDATE oap_head SET epoch = %s, integrator = %s, updated_at = %s, "
                             "lease_until = clock_timestamp() + make_interval(secs => %s)",
                             (epoch + 1, self.name, time.time(), self.lease_ttl))
        except _lock_wait():  # the row is locked (by a peer's transaction): not now
            return None
        except psycopg.Error as e:
            self._drop_lease_session()
            raise Unavailable(f"taking the integrator role failed: {type(e).__name__}", retry_after=1) from None
        self._locked = epoch + 1
        return Lease(epoch + 1)

    @staticmethod
    def _takeable(conn: Any) -> bool:
        """Whether the role looks free: its lease lapsed, or its holder's session is gone."""
        epoch, lapsed = conn.execute("SELECT epoch, lease_until <= clock_timestamp() FROM oap_head").fetchone()
        if lapsed:
            return True
        if not conn.execute("SELECT pg_try_advisory_lock(%s, %s)", _lock_key(epoch)).fetchone()[0]:
            return False
        conn.execute("SELECT pg_advisory_unlock(%s, %s)", _lock_key(epoch))
        return True

    def renew(self, lease: Lease) -> None:
        """LEASE_TTL more, from now on the database's clock (a lapsed lease that no one took is
        renewed: nothing else happened meanwhile). LeaseLost if the role moved on, or if the
        lease's session broke: its lock is gone, so another frontend may take the role at once."""
        import psycopg

        conn = self._lease.conn
        if conn is None or conn.closed or self._locked != lease.epoch:
            raise LeaseLost("the lease's database session is gone: another frontend may hold the role")
        try:
            renewed = conn.execute("UPDATE oap_head SET lease_until = clock_timestamp() + make_interval(secs => %s) "
                                   "WHERE epoch = %s", (self.lease_ttl, lease.epoch)).rowcount == 1
        except _lock_wait():  # the row is locked by a transaction (ours, or a frozen peer's): try again
            raise Unavailable("the head row is locked; the lease is renewed next time", retry_after=1) from None
        except psycopg.Error as e:
            self._drop_lease_session()
            raise LeaseLost(f"the lease's database session failed: {type(e).__name__}") from None
        if not renewed:
            self._drop_lease_session()
            raise LeaseLost(f"the integrator role moved on from epoch {lease.epoch}")

    def release(self, lease: Lease) -> None:
        """End the lease now (never someone else's), and its session: another frontend takes
        the role at once."""
        import psycopg

        conn = self._lease.conn
        try:
            if conn is not None and not conn.closed:
                conn.execute("UPDATE oap_head SET lease_until = '-infinity' WHERE epoch = %s", (lease.epoch,))
        except psycopg.Error as e:  # its session ends below: the role is free all the same
            log.warning("could not release the integrator role: %s", type(e).__name__)
        self._drop_lease_session()

    def record_checkpoint(self, lease: Lease, old: int | None, signed: SignedHead) -> None:
        with self._fenced(lease, "UPDATE oap_head SET size = %s, root = %s, note = %s, integrator = %s, "
                          f"updated_at = %s WHERE {FENCE} AND size = %s AND size < %s",
                          (signed.size, signed.root, signed.note, self.name, time.time(), lease.epoch,
                           -1 if old is None else old, signed.size)) as conn:
            if conn is None:
                head = self.head().signed
                have = None if head is None else head.size
                if have != old:
                    raise LeaseLost(f"the head moved to {have} under this integrator (it read {old})")
                if head is not None and head.size == signed.size:
                    if head.root == signed.root:
                        return  # recorded already
                    raise ForkError(f"refusing a second root for tree size {signed.size}: the database holds another")
                raise ForkError(f"refusing to sign size {signed.size} below the signed size {have}")
            conn.execute("INSERT INTO oap_checkpoints (size, root, note, signed_at) VALUES (%s, %s, %s, %s) "
                         "ON CONFLICT (size) DO NOTHING", (signed.size, signed.root, signed.note, time.time()))
            have = conn.execute("SELECT root FROM oap_checkpoints WHERE size = %s", (signed.size,)).fetchone()
            if bytes(have[0]) != signed.root:
                raise ForkError(f"refusing a second root for tree size {signed.size}: the database holds another")

    def record_published(self, lease: Lease, size: int, note: str) -> None:
        with self._fenced(lease, "UPDATE oap_head SET published_size = %s, published_note = %s, failure = '' "
                          f"WHERE {FENCE} AND published_size <= %s AND size >= %s",
                          (size, note, lease.epoch, size, size)) as conn:
            if conn is None:
                signed = self.head().signed
                if signed is None or size > signed.size:
                    raise CorruptionError(f"publishing size {size} beyond the signed head "
                                          f"{None if signed is None else signed.size}")
                return  # a larger head is published already: never backwards
            conn.execute(f"NOTIFY {HEAD_CHANNEL}")

    def record_failure(self, lease: Lease, message: str) -> None:
        with self._fenced(lease, f"UPDATE oap_head SET failure = %s, failed_at = %s WHERE {FENCE}",
                          (message[:500], time.time(), lease.epoch)) as conn:
            if conn is not None:
                conn.execute(f"NOTIFY {HEAD_CHANNEL}")

    def record_swept(self, lease: Lease, size: int) -> None:
        with self._fenced(lease, f"UPDATE oap_head SET swept = GREATEST(swept, %s) WHERE {FENCE}",
                          (size, lease.epoch)):
            pass

    def backfill(self, lease: Lease) -> bool:
        """Index the receipts of entries sequenced before the index existed (a database from an
        older version), 65,536 entries a step, the progress kept in `oap_meta` (sequencing
        indexes every entry from the first step on). Their logged time is that of the first
        checkpoint that covered them."""
        with self._db() as conn:
            done = dict(conn.execute("SELECT key, value FROM oap_meta WHERE key LIKE 'receipts_%'").fetchall())
            if done.get("receipts_indexed") == "all":
                return False
            if "receipts_backfill_to" not in done:  # the first step: what sequencing did not index
                end = conn.execute("SELECT next FROM oap_sequence").fetchone()[0]
                conn.execute("INSERT INTO oap_meta (key, value) VALUES ('receipts_backfill_to', %s), "
                             "('receipts_indexed', '0') ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                             (str(end),))
                log.warning("indexing the receipts of %d entries (one-time upgrade, in steps)", end)
                start = 0
            else:
                end, start = int(done["receipts_backfill_to"]), int(done.get("receipts_indexed", "0"))
            stop = min(end, start + (1 << 16))
            rows = conn.execute("SELECT idx, leaf, data FROM oap_entries WHERE idx >= %s AND idx < %s ORDER BY idx",
                                (start, stop)).fetchall()
            signed = conn.execute("SELECT size, signed_at FROM oap_checkpoints WHERE size > %s ORDER BY size LIMIT 1",
                                  (start,)).fetchall()
            found = []
            for r in receipt_rows([(int(i), bytes(lh), bytes(d)) for i, lh, d in rows], 0.0):
                if not signed or signed[0][0] <= r.index:
                    signed = conn.execute("SELECT size, signed_at FROM oap_checkpoints WHERE size > %s ORDER BY size "
                                          "LIMIT 1", (r.index,)).fetchall()
                found.append(r._replace(logged_at=signed[0][1] if signed else time.time()))
            with conn.transaction():
                if found:
                    conn.cursor().executemany("INSERT INTO oap_receipts VALUES (%s, %s, %s, %s, %s, %s) "
                                              "ON CONFLICT DO NOTHING", found)
                conn.execute("UPDATE oap_meta SET value = %s WHERE key = 'receipts_indexed'",
                             ("all" if stop >= end else str(stop),))
            return stop < end

    def entries(self) -> PostgresEntries:
        return PostgresEntries(self.dsn)


FAULT_POINTS = ("after_sequence",)
"""Where the PostgreSQL driver calls its `faults` hook: after the entries' commit."""


def _lock_key(epoch: int) -> tuple[int, int]:
    """The advisory lock (two 32-bit keys) a holder's lease session holds for its epoch."""
    return LEASE_LOCK, epoch & 0x7FFFFFFF


def _lock_wait() -> type[Exception]:
    """The error of a statement that waited LEASE_LOCK_WAIT for a row lock."""
    from psycopg.errors import LockNotAvailable

    return LockNotAvailable


def snapshot(dsn: str) -> Snapshot:
    """The published head of the log in this database and a reader of its entries."""
    conn = _connect(dsn)
    try:
        row = conn.execute("SELECT published_size, published_note FROM oap_head").fetchone()
    except Exception as e:  # noqa: BLE001 - no schema: no log
        raise NotFound(f"no log in this database: {type(e).__name__}") from None
    finally:
        conn.close()
    if row is None or row[0] < 0:
        raise NotFound("the log in this database has published nothing yet")
    return Snapshot(row[0], row[1], PostgresEntries(dsn))


class PostgresEntries:
    """The `EntryReader` of the PostgreSQL backend: a few async connections."""

    def __init__(self, dsn: str, connections: int = 2) -> None:
        self.dsn, self.n = _conninfo(dsn), connections  # with the client's keepalives (see _conninfo)
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
        rows = await self._query(*receipts_query("oap_receipts", "%s", size, signer=signer, receipt_hash=receipt_hash,
                                                 since=since, after=after, limit=limit))
        return [ReceiptRow(r[0], int(r[1]), bytes(r[2]), r[3], r[4], float(r[5])) for r in rows]

    async def logged_times(self, size: int) -> AsyncIterator[tuple[int, float]]:
        import psycopg

        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
            async with conn.cursor() as cur:
                async for idx, at in cur.stream("SELECT idx, logged_at FROM oap_receipts WHERE idx < %s", (size,)):
                    yield int(idx), float(at)

    async def index_of(self, leaf_hash: bytes, size: int) -> int:
        rows = await self._query("SELECT idx FROM oap_entries WHERE leaf = %s AND idx < %s", (leaf_hash, size))
        if not rows:
            raise NotFound("no entry with that leaf hash")
        return int(rows[0][0])
