"""The driver contract (`tlog.storage.interface`), the same tests for every backend:
the embedded driver alone, the embedded driver published to a bucket, and PostgreSQL
published to a bucket (a real PostgreSQL and a real SeaweedFS, `engines` in
tests/conftest.py). Some tests drive a driver through its contract directly
(tests/support/drivers.py), others run the real appender on it.

Covered: sequencing exactly once with dedup; the fork guard; the lease (expiry, fencing of
a holder whose lease lapsed or was taken over); recovery of what a crash left sequenced but
not signed, and signed but not published; publication that never goes backwards (the
store's head and the bucket's checkpoint); partial tiles kept until their full tile is in
the bucket's checkpoint; the bucket's catch-up, sweep and takeover; the receipts index
backfill; a bucket that is down.
"""
from __future__ import annotations

import shutil
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tlog.client.audit import audit
from tlog.client.verifier import TrustPolicy
from tlog.errors import ConfigError, ForkError, Unavailable
from tlog.formats.ed25519 import generate_seed
from tlog.formats.entries import receipt_entry
from tlog.formats.hashing import leaf_hash
from tlog.formats.note import add_signatures, parse_note, sign_note
from tlog.merkle.tree import memory_view
from tlog.server.appender import Appender
from tlog.server.publication import BucketTarget
from tlog.storage.bucket import Bucket, TilePublisher
from tlog.storage.embedded import EmbeddedStorage
from tlog.storage.interface import Driver, LeaseLost, SignedHead

from tests.support.drivers import Writer
from tests.support.signers import checkpoint_signer, make_signer
from tests.support.waiting import until

SIGNER = make_signer("drivers.test/log")
SIGN = checkpoint_signer(SIGNER)
SEED = generate_seed()


def entries(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}:{i}".encode() for i in range(n)]


@dataclass
class Backend:
    """One backend under test: makes drivers (and publishers) on one store."""

    kind: str  # "embedded", "embedded+bucket", "postgres+bucket"
    root: Path
    engines: Any = None
    dsn: str = ""
    bucket_url: str = ""
    made: list[Driver] = field(default_factory=list)

    @property
    def shared(self) -> bool:
        return self.kind.startswith("postgres")

    def driver(self, name: str = "a") -> Driver:
        if self.shared:
            from tlog.storage.postgres import PostgresStorage

            d: Driver = PostgresStorage(self.dsn, self.root / name, name=name)
        else:
            d = EmbeddedStorage(self.root / "log")
        self.made.append(d)
        return d

    def publisher(self) -> TilePublisher:
        return TilePublisher(self.bucket())

    def targets(self, *, interval: float = 0.05) -> list[BucketTarget]:
        """The bucket, as the appender follows it (none for the embedded driver alone)."""
        return [BucketTarget(self.publisher(), interval=interval)] if self.bucket_url else []

    def bucket(self) -> Bucket:
        return self.engines.bucket_of(self.bucket_url)

    def sql(self, statement: str, args: tuple = ()) -> list:
        """Run SQL on the store behind the drivers' back (a tool, an older version, a test)."""
        if self.shared:
            import psycopg

            with psycopg.connect(self.dsn, autocommit=True) as c:
                cur = c.execute(statement.replace("?", "%s"), args)
                return cur.fetchall() if cur.description else []
        with sqlite3.connect(self.root / "log" / "log.db", isolation_level=None) as c:
            return c.execute(statement, args).fetchall()

    def table(self, name: str) -> str:
        return f"oap_{name}" if self.shared else name


@pytest.fixture(params=["embedded", "embedded+bucket", "postgres+bucket"])
def backend(request, tmp_path) -> Any:
    kind = request.param
    b = Backend(kind, tmp_path)
    if kind != "embedded":
        b.engines = request.getfixturevalue("engines")
        b.bucket_url = b.engines.bucket()
        if b.shared:
            b.dsn = b.engines.database()
    yield b
    for d in b.made:  # whatever a failing test left open
        try:
            d.close()
        except Exception:  # noqa: BLE001 - closed already
            pass


@asynccontextmanager
async def appender(b: Backend, name: str = "a", **kw: Any) -> AsyncIterator[Appender]:
    kw.setdefault("targets", b.targets())
    app = Appender(b.driver(name), SIGN, batch_interval=0.005, **kw)
    await app.start()
    try:
        yield app
    finally:
        await app.close()


async def bucket_audit(url: str, previous: tuple[int, bytes] | None = None):
    async with aiohttp.ClientSession() as s:
        async def fetch(path: str) -> bytes:
            async with s.get(f"{url}/{path}") as r:
                assert r.status == 200, path
                return await r.read()

        return await audit(fetch, TrustPolicy.for_log(SIGNER.vkey), entries=True, previous=previous)


# --- sequencing -------------------------------------------------------------------------------


def test_sequencing_is_exactly_once_with_dedup_within_and_across_batches(backend):
    drivers = [backend.driver("a")] + ([backend.driver("b")] if backend.shared else [])
    for d in drivers:
        d.open()
    first = drivers[0].sequence([b"alpha", b"alpha", b"beta"])
    assert first.indices == [0, 0, 1] and first.fresh == [True, False, True] and first.size == 2
    assert first.leaves == [leaf_hash(b"alpha")] * 2 + [leaf_hash(b"beta")]
    again = drivers[-1].sequence([b"beta", b"gamma"])  # on another frontend, where there is one
    assert again.indices == [1, 2] and again.fresh == [False, True] and again.size == 3

    seen: dict[bytes, int] = {}
    lock = threading.Lock()

    def writer(d: Driver, key: str) -> None:
        for k in range(10):  # overlapping batches from every frontend at once
            batch = entries("shared", 300)[k * 20:k * 20 + 60] + entries(key, 10)[k:k + 1]
            got = d.sequence(batch)
            with lock:
                for data, i in zip(batch, got.indices):
                    assert seen.setdefault(data, i) == i  # one index per entry, whoever asked

    threads = [threading.Thread(target=writer, args=(d, str(n))) for n, d in enumerate(drivers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(seen.values()) == list(range(3, 3 + len(seen)))  # contiguous, no gap, no repeat
    assert drivers[0].head().sequenced == 3 + len(seen)
    for d in drivers:
        d.close()


# --- the fork guard and the lease --------------------------------------------------------------


def test_the_fork_guard_records_one_root_per_size_and_only_moves_the_head_forward(backend):
    d = backend.driver()
    d.open()
    lease = d.acquire()
    assert lease is not None
    d.sequence(entries("x", 15))
    root = d.extend(15)
    assert root == memory_view([leaf_hash(e) for e in entries("x", 15)]).root
    d.record_checkpoint(lease, None, SignedHead(15, root, SIGN(15, root)))
    with pytest.raises(ForkError):  # a second root for the size, as a damaged cache would give
        d.record_checkpoint(lease, 15, SignedHead(15, b"\x07" * 32, SIGN(15, b"\x07" * 32)))
    d.sequence(entries("y", 5))
    with pytest.raises(ForkError):  # below the signed head
        d.record_checkpoint(lease, 15, SignedHead(10, d.extend(10), SIGN(10, d.extend(10))))
    with pytest.raises(LeaseLost):  # a compare-and-swap from a size that is not the head
        d.record_checkpoint(lease, 10, SignedHead(20, d.extend(20), SIGN(20, d.extend(20))))
    table = backend.table("checkpoints")
    assert backend.sql(f"SELECT size, root FROM {table} ORDER BY size") == [(15, root)]
    assert d.head().signed == SignedHead(15, root, SIGN(15, root))
    d.close()


def test_a_frontend_that_finds_its_hash_cache_wrong_leaves_a_reader_its_maps(engines, tmp_path):
    """A PostgreSQL frontend whose hash cache does not give the signed root drops the cache and
    refuses; a reader in another process that mapped the cache keeps reading its maps whole (a
    cache emptied in place kills it with SIGBUS). Once the store is right again the cache is
    rebuilt from the entries, and the reader's next reads are the rebuilt files."""
    from tlog.storage.interface import CorruptionError

    from tests.support.mapped import MappedReader, digest

    b = Backend("postgres+bucket", tmp_path, engines, dsn=engines.database())
    d = b.driver()
    d.open()
    lease = d.acquire()
    assert lease is not None
    d.sequence(entries("m", 1000))
    root = d.extend(1000)
    d.record_checkpoint(lease, None, SignedHead(1000, root, SIGN(1000, root)))
    reader = MappedReader(tmp_path / "a" / "hashes", [0, 9])
    try:
        b.sql("UPDATE oap_checkpoints SET root = ? WHERE size = 1000", (b"\x07" * 32,))  # as a damaged cache gives
        with pytest.raises(CorruptionError):
            d.extend(1000)
        died, old, _ = reader.check({})
        assert died is None, f"the reader died with {died}"  # -7: SIGBUS
        assert old == reader.mapped
        b.sql("UPDATE oap_checkpoints SET root = ? WHERE size = 1000", (root,))
        assert d.extend(1000) == root  # rebuilt from the entries
        leaves = [leaf_hash(e) for e in entries("m", 1000)]
        died, old, seen = reader.check({0: 1000, 9: 1})
        assert died is None and old == reader.mapped
        assert seen == {0: digest(b"".join(leaves)), 9: digest(memory_view(leaves[:512]).root)}
        assert reader.close() == 0
    finally:
        reader.kill()
        d.close()


def test_lease_fencing_a_holder_whose_lease_lapsed_or_was_taken_writes_nothing(backend):
    a = backend.driver("a")
    a.open()
    lease_a = a.acquire()
    assert lease_a is not None
    a.sequence(entries("f", 10))
    root = a.extend(10)
    if not backend.shared:  # the lease is the data directory's lock: no second process gets in
        with pytest.raises(ConfigError, match="in use by another log process"):
            EmbeddedStorage(backend.root / "log")
        a.renew(lease_a)
        a.close()
        return
    b = backend.driver("b")
    b.open()
    assert b.acquire() is None  # held, its lease running
    a.renew(lease_a)
    assert b.acquire() is None
    # a stops renewing (a paused process, a partition): its lease lapses on the database's clock
    backend.sql("UPDATE oap_head SET lease_until = clock_timestamp() - interval '1 second'")
    before = backend.sql("SELECT size, published_size, published_note, failure, swept FROM oap_head")
    attempts = (lambda: a.record_checkpoint(lease_a, None, SignedHead(10, root, SIGN(10, root))),
                lambda: a.record_published(lease_a, 5, "an older note"),
                lambda: a.record_failure(lease_a, "an old holder's complaint"),
                lambda: a.record_swept(lease_a, 256))
    for attempt in attempts:  # lapsed, though no one took the role: refused all the same
        with pytest.raises(LeaseLost, match="lapsed"):
            attempt()
    lease_b = b.acquire()
    assert lease_b is not None and lease_b.epoch > lease_a.epoch
    b.record_checkpoint(lease_b, None, SignedHead(10, root, SIGN(10, root)))
    b.record_published(lease_b, 10, SIGN(10, root))
    before = backend.sql("SELECT size, published_size, published_note, failure, swept FROM oap_head")
    for attempt in (lambda: a.renew(lease_a), *attempts):  # taken over: the epoch fences a out
        with pytest.raises(LeaseLost, match="epoch"):
            attempt()
    assert backend.sql("SELECT size, published_size, published_note, failure, swept FROM oap_head") == before
    assert a.acquire() is None  # b's lease runs
    b.release(lease_b)
    lease_a2 = a.acquire()  # released: taken at once, under a new epoch
    assert lease_a2 is not None and lease_a2.epoch > lease_b.epoch
    with pytest.raises(LeaseLost):
        b.record_failure(lease_b, "released")
    # a dies (kill -9): the database closes its sessions, the lease's with them; its lease has
    # not lapsed, but the role moves at once
    from tlog.storage.postgres import LEASE_LOCK

    assert b.acquire() is None
    pids = backend.sql("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = ? AND objid = ? "
                       "AND granted", (LEASE_LOCK, lease_a2.epoch))
    assert len(pids) == 1
    assert backend.sql("SELECT pg_terminate_backend(?, 30000)", (pids[0][0],)) == [(True,)]
    lease_b2 = b.acquire()
    assert lease_b2 is not None and lease_b2.epoch > lease_a2.epoch
    with pytest.raises(LeaseLost):  # and a, if it lived on, finds its lease gone with its session
        a.renew(lease_a2)
    a.close()
    b.close()


def test_a_frozen_peer_holding_a_lock_is_cut_off_by_the_database(backend):
    """A process stopped in the middle of a transaction (SIGSTOP: its kernel keeps the TCP
    session up) would hold its row locks for as long as it stays stopped; every driver session
    sets idle_in_transaction_session_timeout, so the database ends such a session and the
    others go on: here a peer stopped inside a sequencing transaction, then the lease."""
    if not backend.shared:
        pytest.skip("one process per embedded store")
    import psycopg

    from tlog.storage.postgres import _connect

    d = backend.driver("a")
    d.open()
    frozen = _connect(backend.dsn)  # a session as a driver opens it, whose process then stops
    frozen.execute("BEGIN")
    frozen.execute("SELECT next FROM oap_sequence FOR UPDATE")
    frozen.execute("SELECT epoch FROM oap_head FOR UPDATE")
    got = d.sequence(entries("after", 3))  # waits for the lock until the database ends the frozen session
    assert got.indices == [0, 1, 2]
    assert d.acquire() is not None
    with pytest.raises(psycopg.Error, match="idle-in-transaction timeout"):
        frozen.execute("SELECT 1")
    d.close()


# --- recovery ----------------------------------------------------------------------------------


async def test_entries_sequenced_past_the_last_checkpoint_are_integrated_on_start(backend):
    w = Writer(backend.driver(), SIGN)
    w.open()
    w.append(entries("signed", 20))
    w.driver.sequence(entries("unsigned", 30))  # then a crash between the two commits of a batch
    w.close()
    async with appender(backend) as app:
        await until(lambda: app.state is not None and app.published and app.state.size == 50, what="size 50")
        ref = memory_view([leaf_hash(e) for e in entries("signed", 20) + entries("unsigned", 30)])
        assert app.state.root == ref.root and app.state.view.inclusion_proof(33) == ref.inclusion_proof(33)
        got = await app.add_many(entries("unsigned", 30)[:3])  # the same entries: their indices
        assert got.indices == [20, 21, 22] and not any(got.fresh)


async def test_a_checkpoint_signed_but_not_published_is_published_by_the_next_holder_with_no_new_entry(backend):
    w = Writer(backend.driver(), SIGN)
    w.open()
    w.append(entries("p", 300))
    d = w.driver
    d.sequence(entries("q", 100))  # the dead integrator sequenced, signed and recorded 400 ...
    root = d.extend(400)
    d.record_checkpoint(w.lease, 300, SignedHead(400, root, SIGN(400, root)))
    w.close()  # ... and died before publishing it
    shutil.rmtree(backend.root / ("a" if backend.shared else "log/hashes"))  # the next one's hash cache is cold
    async with appender(backend, name="a") as app:
        await until(lambda: app.published and app.state is not None and app.state.size == 400,
                    what="the signed head published")
        assert app.state.root == root and app.state.note == SIGN(400, root)
        if backend.shared:
            assert backend.sql("SELECT published_size, published_note FROM oap_head") == [(400, SIGN(400, root))]
        if backend.bucket_url:
            await until(lambda: backend.publisher().checkpoint_size() == 400, what="the bucket's checkpoint at 400")
    if backend.bucket_url:
        result = await bucket_audit(backend.bucket_url)
        assert result.checkpoint.checkpoint.size == 400 and result.entries == 400


# --- publication never goes backwards ---------------------------------------------------------


def test_the_published_head_and_the_bucket_checkpoint_never_go_backwards(backend):
    w = Writer(backend.driver(), SIGN)
    w.open()
    small = w.append(entries("m", 5)).state
    big = w.append(entries("n", 5)).state
    d = w.driver
    d.record_published(w.lease, small.size, small.note)  # an old note, late
    assert d.head().published == (big.size, big.note)
    if not backend.bucket_url:
        w.close()
        return
    pub = backend.publisher()
    assert pub.write_checkpoint(big.note, big.size) == 10
    assert pub.write_checkpoint(small.note, small.size) == 10  # refused: the bucket holds a larger tree
    assert backend.bucket().get("checkpoint") == big.note.encode() and pub.checkpoint_size() == 10
    forged = SIGN(10, b"\x05" * 32)
    with pytest.raises(ForkError):  # another root for the size the bucket shows
        pub.write_checkpoint(forged, 10)
    # a writer that read the checkpoint before another replaced it cannot overwrite it
    bucket = backend.bucket()
    stale = bucket.get_versioned("checkpoint")
    w.append(entries("o", 5))
    pub.write_checkpoint(w.state.note, w.state.size)
    assert stale is not None and bucket.put_if("checkpoint", small.note.encode(), stale[1]) is False
    assert pub.checkpoint_size() == 15
    # a bucket holding another log's checkpoint (a misconfiguration) is not overwritten
    other = checkpoint_signer(make_signer("another.test/log"))(3, b"\x01" * 32)
    current = bucket.get_versioned("checkpoint")
    assert current is not None and bucket.put_if("checkpoint", other.encode(), current[1])
    w.append(entries("p", 5))
    with pytest.raises(ForkError, match="another log"):
        pub.write_checkpoint(w.state.note, w.state.size)
    assert bucket.get("checkpoint") == other.encode()
    pub.close()
    w.close()


def test_the_published_head_with_its_cosignatures_survives_a_restart(backend):
    """What a restart serves before the witnesses or the bucket answer: the head last recorded
    as published, cosignatures and all; never a note the signed checkpoints do not hold."""
    w = Writer(backend.driver(), SIGN)
    w.open()
    state = w.append(entries("c", 7)).state
    text = parse_note(state.note).text
    cosigned = str(add_signatures(state.note, parse_note(sign_note(text, [make_signer("witness.test")])).signatures))
    w.driver.record_published(w.lease, state.size, cosigned)
    w.driver.sequence(entries("d", 3))  # sequenced, not signed: not published either
    w.close()
    d = backend.driver()
    head = d.open()
    assert head.published == (state.size, cosigned) and head.sequenced == 10
    d.close()
    if backend.shared:
        return
    # a recorded head whose checkpoint is not the one signed for its size is not served
    forged = str(add_signatures(SIGN(state.size, b"\x07" * 32), parse_note(cosigned).signatures[1:]))
    backend.sql("UPDATE meta SET value = ? WHERE key = 'published_note'", (forged,))
    d = backend.driver()
    assert d.open().published is None
    d.close()


# --- the bucket: catch-up on takeover, sweep, down ------------------------------------------


async def test_a_bucket_configured_later_is_backfilled_and_swept_on_takeover(backend):
    if not backend.bucket_url:
        pytest.skip("no bucket")
    async with appender(backend, targets=[]) as app:  # no bucket yet
        await app.add_many(entries("before", 700))
    bucket = backend.bucket()
    assert bucket.list("tile/") == []
    # litter a crash could have left: partial tiles of tiles that are full now, and a
    # partial of the right edge that an earlier holder wrote
    for key in ("tile/0/000.p/7", "tile/entries/001.p/3", "tile/0/002.p/5"):
        bucket.put_create_only(key, b"\0" * 32)

    def names() -> set[str]:
        return set(bucket.list("tile/"))

    async with appender(backend) as app:
        await until(lambda: backend.publisher().checkpoint_size() == 700, what="the bucket caught up")
        assert {"tile/0/000", "tile/0/001", "tile/entries/000", "tile/entries/001", "tile/0/002.p/188"} <= names()
        await until(lambda: not {"tile/0/000.p/7", "tile/entries/001.p/3"} & names(), what="the litter swept")
        assert "tile/0/002.p/5" in names()  # tile 2 is not full yet
        await app.add_many(entries("after", 100))  # tile 2 fills: its partials go, the stray one too
        await until(lambda: backend.publisher().checkpoint_size() == 800, what="size 800 in the bucket")
        await until(lambda: not [n for n in names() if n.startswith("tile/0/002.p/")],
                    what="the partials of tile 2 deleted")
        assert "tile/0/002" in names()
    result = await bucket_audit(backend.bucket_url)
    assert result.checkpoint.checkpoint.size == 800 and result.entries == 800


async def test_partial_tiles_stay_until_their_tile_is_full_in_the_buckets_checkpoint(backend):
    """C2SP tlog-tiles: a log MUST serve the partial tiles of every size it produced a
    checkpoint for, and MAY delete one once the full tile is available. Each size below is
    published to the bucket in turn; every partial tile of each stays while its tile is not
    full in the bucket's checkpoint, then goes (swept by the holder)."""
    if not backend.bucket_url:
        pytest.skip("no bucket")
    bucket = backend.bucket()

    def partials() -> set[str]:
        return {n for n in bucket.list("tile/") if ".p/" in n}

    seen: set[str] = set()
    async with appender(backend) as app:
        for n, size in ((10, 10), (90, 100), (150, 250), (10, 260), (260, 520)):
            await app.add_many(entries(f"s{size}", n))
            await until(lambda size=size: backend.publisher().checkpoint_size() == size, what=f"the bucket at {size}")
            now = partials()
            if size < 256:
                assert seen <= now, f"at {size}: {sorted(seen - now)} deleted before tile 0 was full"
            seen |= now
        await until(lambda: not {n for n in partials() if n.startswith(("tile/0/000.p/", "tile/entries/000.p/",
                                                                         "tile/0/001.p/", "tile/entries/001.p/"))},
                    what="the partials of the full tiles 0 and 1 swept")
        # level 1's tile 0 is full only at 65,536 entries: both its partials stay
        assert partials() == {"tile/0/002.p/8", "tile/entries/002.p/8", "tile/1/000.p/1", "tile/1/000.p/2"}
        assert {"tile/0/000.p/10", "tile/0/000.p/100", "tile/0/000.p/250"} <= seen


async def test_a_bucket_that_holds_more_than_the_store_signed_halts_before_anything_is_signed(backend):
    """A store restored from an old backup behind a bucket that has seen more: the holder
    reads the bucket's checkpoint before it signs anything, and halts, as it does for a
    witness that has seen more (a second root for a size the bucket shows would be a fork)."""
    if not backend.bucket_url:
        pytest.skip("no bucket")
    async with appender(backend) as app:
        await app.add_many(entries("seen", 20))
        await until(lambda: backend.publisher().checkpoint_size() == 20, what="the bucket at 20")
    old = EmbeddedStorage(backend.root / "old-backup")  # a store that never got that far
    app = Appender(old, SIGN, targets=backend.targets(), batch_interval=0.005)
    await app.start()
    try:
        assert app.halted is not None and "beyond the 0 entries signed" in app.halted.message
        with pytest.raises(Unavailable, match="old backup"):
            await app.add_many(entries("new", 3))
        assert old.head().signed is None  # nothing signed, not even the empty tree
    finally:
        await app.close()
    assert backend.publisher().checkpoint_size() == 20


async def test_with_the_bucket_down_when_the_role_is_taken_writes_are_answered_503_then_recover(backend):
    """The bucket is checked before anything is signed (it must not hold more of the log than
    the store): while that read fails, writes are answered 503 by the failed attempt; with
    the bucket back, the same entries are published at their indices."""
    if not backend.bucket_url:
        pytest.skip("no bucket")
    down = TilePublisher(Bucket.from_config(backend.bucket_url, key_id="nobody", secret="wrong"))
    async with appender(backend, targets=[BucketTarget(down, interval=0.05)]) as app:
        with pytest.raises(Unavailable) as refused:
            await app.add_many(entries("x", 300))
        assert "bucket" in refused.value.message  # answered by the failed attempt, not a timeout
        assert down.errors > 0
        down.bucket = backend.bucket()  # the bucket is back
        got = await app.add_many(entries("x", 300))  # the same entries: their indices
        assert got.indices == list(range(300)) and not any(got.fresh) and got.state.size == 300
        await until(lambda: down.checkpoint_size() == 300, what="the bucket's checkpoint")


# --- derived data the store keeps ------------------------------------------------------------


def receipts(n: int) -> list[bytes]:
    from tlog.formats.entries import canonical_entry

    return [canonical_entry(receipt_entry(leaf_hash(b"r%d" % i), SEED)) for i in range(n)]


async def test_every_receipts_filter_answers_the_same_on_every_driver(backend):
    from tlog.formats.did import did_key_from_public
    from tlog.formats.ed25519 import public_from_seed
    from tlog.formats.entries import canonical_entry

    other = generate_seed()
    entries = [canonical_entry(receipt_entry(leaf_hash(b"f%d" % i), SEED if i % 2 else other,
                                             timestamp="2001-01-01T00:00:00Z" if i < 4 else "2090-01-01T00:00:00Z"))
               for i in range(12)]
    async with appender(backend) as app:
        await app.add_many(entries)
        reader = app.driver.entries()
        await reader.open()
        try:
            me = did_key_from_public(public_from_seed(SEED))
            mine = await reader.receipts(12, signer=me)
            assert [r.index for r in mine] == [1, 3, 5, 7, 9, 11] and {r.signer for r in mine} == {me}
            assert [r.index for r in await reader.receipts(10, signer=me)] == [1, 3, 5, 7, 9]  # the size bounds it
            assert [r.index for r in await reader.receipts(12, signer=me, after=5, limit=2)] == [7, 9]
            assert [r.index for r in await reader.receipts(12, receipt_hash=leaf_hash(b"f6"))] == [6]
            assert await reader.receipts(12, signer=me, receipt_hash=leaf_hash(b"f6")) == []
            # since: logged (now) or claiming to be signed at or after it
            assert len(await reader.receipts(12, since=0.0)) == 12
            late = await reader.receipts(12, since=4_000_000_000.0)  # 2096: only the 2090 claims are before it
            assert late == []
            claimed = [r.index for r in await reader.receipts(12, since=3_000_000_000.0)]  # 2065
            assert claimed == list(range(4, 12))
        finally:
            await reader.close()


async def test_the_receipts_index_is_backfilled_for_entries_without_rows(backend):
    async with appender(backend) as app:
        await app.add_many(receipts(40))
    table, meta = backend.table("receipts"), backend.table("meta")
    rows = backend.sql(f"SELECT idx, logged_at FROM {table} ORDER BY idx")
    assert [r[0] for r in rows] == list(range(40))
    backend.sql(f"DELETE FROM {table} WHERE idx >= 10")  # entries from before the index existed
    backend.sql(f"DELETE FROM {meta} WHERE key = 'receipts_indexed'")
    async with appender(backend) as app:
        await until(lambda: app.integrating, what="the role")
        await until(lambda: len(backend.sql(f"SELECT idx FROM {table}")) == 40, what="the index backfilled")
        signed_at = backend.sql(f"SELECT MIN(signed_at) FROM {backend.table('checkpoints')} WHERE size >= 40")[0][0]
        back = dict(backend.sql(f"SELECT idx, logged_at FROM {table} WHERE idx >= 10"))
        assert set(back.values()) == {signed_at}  # logged when the first checkpoint covering them was signed
        reader = app.driver.entries()
        await reader.open()
        try:
            got = await reader.receipts(40, signer=None, limit=100)
            assert [r.index for r in got] == list(range(40))
        finally:
            await reader.close()


async def test_a_frozen_store_sequences_nothing_more_and_signs_only_what_it_held(backend):
    """`freeze` (docs/architecture.md §3.8): every `sequence` after it refuses, on every
    driver of the store, after a restart too; the entries sequenced before it are signed and
    published in the final checkpoint, and the head never moves again."""
    from tlog.errors import LogFrozen

    async with appender(backend) as app:
        await app.add_many(entries("f", 40))
        d = app.driver
        await app.call(d.sequence, entries("g", 5))  # sequenced, not yet signed: the final checkpoint covers it
        final = await app.freeze("https://next.example", 60)
        assert final.size == 45
        with pytest.raises(LogFrozen) as e:
            await app.add_many(entries("h", 1))
        assert e.value.status == 410 and e.value.data["successor"] == "https://next.example"
        with pytest.raises(LogFrozen):
            await app.call(d.sequence, entries("h", 1))  # the store itself refuses
        await app.call(d.freeze, "https://other.example")  # freezing again keeps the first successor
        assert (await app.call(d.head)).frozen == "https://next.example"
    if backend.shared:  # another frontend of the same store refuses at once
        other = backend.driver("b")
        head = other.open()
        assert head.frozen == "https://next.example" and head.sequenced == 45
        with pytest.raises(LogFrozen):
            other.sequence(entries("i", 1))
        other.close()
    async with appender(backend) as again:  # after a restart: refused, and the final checkpoint stands
        assert again.frozen is not None and again.state is not None and again.state.size == 45
        assert again.state.note == final.note
        with pytest.raises(LogFrozen):
            await again.add_many(entries("j", 1))
        head = await again.call(again.driver.head)
        assert head.signed is not None and head.signed.size == head.sequenced == 45
