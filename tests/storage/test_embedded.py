"""The embedded driver: hash files, SQLite store, recovery, fork guard; and the appender on it."""
from __future__ import annotations

import asyncio
import os
import random
import time

import numpy as np
import pytest

from tlog.errors import ForkError, NotFound
from tlog.formats.hashing import leaf_hash
from tlog.merkle.proofs import inclusion_levels
from tlog.merkle.tree import memory_view
from tlog.server.appender import Appender
from tlog.storage.embedded import EmbeddedStorage
from tlog.storage.interface import CorruptionError

from tests.support.drivers import Writer
from tests.support.signers import checkpoint_signer, make_signer

SIGN = checkpoint_signer(make_signer())


def entries(n: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    return [seed.to_bytes(4, "big") + i.to_bytes(4, "big") + rng.randbytes(rng.randrange(0, 64)) for i in range(n)]


def opened(path, **kw) -> tuple[EmbeddedStorage, Writer]:
    store = EmbeddedStorage(path, **kw)
    w = Writer(store, SIGN)
    w.open()
    return store, w


def commit_all(w: Writer, data: list[bytes], rng: random.Random) -> None:
    i = 0
    while i < len(data):
        k = rng.choice([1, 2, 3, 7, 255, 256, 257, 1000])
        w.append(data[i : i + k])
        i += k


def test_batches_match_reference_and_batched_proofs(tmp_path):
    rng = random.Random(1)
    store, w_store = opened(tmp_path)
    state = w_store.state
    assert state.size == 0 and state.root == memory_view([]).root
    data = entries(5000)
    commit_all(w_store, data, rng)
    ref = memory_view([leaf_hash(d) for d in data])
    st = w_store.state
    assert st.size == 5000 and st.root == ref.root
    idx = np.array([rng.randrange(5000) for _ in range(500)] + [0, 4999])
    assert inclusion_levels(st.view, store.hashes, idx).split(text=False) == [ref.inclusion_proof(int(i)) for i in idx]
    for size in (1, 2, 255, 256, 257, 4097):  # older sizes from the same files
        from tlog.merkle.tree import TreeView

        old = TreeView(size, store.hashes.read)
        assert old.root == memory_view([leaf_hash(d) for d in data[:size]]).root
    store.close()


def test_dedup_within_and_across_batches(tmp_path):
    store, w_store = opened(tmp_path)
    a, b = b"alpha", b"beta"
    r1 = w_store.append([a, a, b])
    assert r1.indices == [0, 0, 1] and r1.fresh == [True, False, True]
    r2 = w_store.append([b])
    assert r2.indices == [1] and r2.fresh == [False] and r2.state.size == 2
    store.close()


def test_reopen_is_identical_and_checkpoint_reused(tmp_path):
    store, w_store = opened(tmp_path)
    commit_all(w_store, entries(1000), random.Random(2))
    before = w_store.state
    store.close()
    again, w_again = opened(tmp_path)
    st = w_again.state
    assert (st.size, st.root, st.note) == (before.size, before.root, before.note)
    again.close()


@pytest.mark.parametrize("damage", ["truncate", "garbage_tail", "zeros_middle", "delete"])
def test_hash_files_repaired_from_database(tmp_path, damage):
    # zeros_middle: damage after the last hash fsync (a torn page after power loss)
    store, w_store = opened(tmp_path, hash_sync_interval=1e9 if damage == "zeros_middle" else 0)
    data = entries(3000)
    commit_all(w_store, data, random.Random(3))
    root = w_store.state.root
    store.hashes.close()
    store.conn.close()
    os.close(store._lock_fd)  # a crash: the process's flock goes with it
    level0 = tmp_path / "hashes" / "level-00"
    raw = level0.read_bytes()
    if damage == "truncate":
        level0.write_bytes(raw[: len(raw) - 32 * 100 - 5])
    elif damage == "garbage_tail":
        level0.write_bytes(raw + os.urandom(77))
    elif damage == "zeros_middle":
        level0.write_bytes(raw[:3200] + b"\x00" * 320 + raw[3520:])
    else:
        level0.unlink()
    again, w_again = opened(tmp_path)
    st = w_again.state
    assert st.size == 3000 and st.root == root
    ref = memory_view([leaf_hash(d) for d in data])
    for i in (0, 100, 101, 2999):
        assert st.view.inclusion_proof(i) == ref.inclusion_proof(i)
    again.close()


def test_fork_guard_refuses_second_root_and_records_nothing(tmp_path):
    store, w_store = opened(tmp_path)
    w_store.append([b"a"])
    # Pretend a checkpoint for size 2 with another root was signed before.
    store.conn.execute("INSERT INTO checkpoints VALUES (2, ?, 'x', 0)", (b"\x07" * 32,))
    with pytest.raises(ForkError):
        w_store.append([b"b"])
    assert store.head().signed.size == 1 and w_store.state.size == 1
    assert store.conn.execute("SELECT root FROM checkpoints WHERE size = 2").fetchall() == [(b"\x07" * 32,)]
    # the entry stays sequenced (as in every driver); the appender halts on the ForkError
    assert store.head().sequenced == 2
    store.close()


def test_refuses_inconsistent_database(tmp_path):
    store, w_store = opened(tmp_path)
    w_store.append([b"a", b"b"])
    store.conn.execute("UPDATE runs SET data = ? WHERE first = 0", (b"\x00\x01a\x00\x04evil",))
    store.close()
    for f in (tmp_path / "hashes").iterdir():  # force a rebuild from the tampered database
        f.unlink()
    with pytest.raises(CorruptionError):
        EmbeddedStorage(tmp_path).open()


async def test_appender_concurrent_adds_and_batching(tmp_path):
    store = EmbeddedStorage(tmp_path)
    seen_batches: list[int] = []
    seq = Appender(store, SIGN, max_batch=64, batch_interval=0.02, on_batch=lambda n, s: seen_batches.append(n))
    await seq.start()
    data = entries(500, seed=9)
    results = await asyncio.gather(*(seq.add(d) for d in data + data[:50]))
    idx = [r.index for r in results]
    assert sorted(set(idx)) == list(range(500))
    assert idx[500:] == idx[:50]  # duplicates get the existing index
    assert max(seen_batches) <= 64 and sum(seen_batches) >= 500
    for r in results:
        assert r.state.size > r.index
        ref = memory_view([leaf_hash(x) for x in sorted(data, key=lambda x: idx[data.index(x)])][: r.state.size])
        assert r.state.root == ref.root
        break
    many = await seq.add_many(entries(10, seed=10))
    assert [m.index for m in many] == list(range(500, 510))
    await seq.close()
    # everything acknowledged survives a reopen
    store2 = EmbeddedStorage(tmp_path)
    assert store2.open().signed.size == 510
    store2.close()


def test_leaf_index_is_derived_and_rebuilt(tmp_path):
    """The dedup index lives outside the fsync path; losing it loses nothing."""
    store, w_store = opened(tmp_path)
    data = entries(700, seed=4)
    commit_all(w_store, data, random.Random(4))
    store.close()
    # A crash between the main commit and the index update leaves the index behind;
    # a reboot (power loss) may leave it corrupt. Both are repaired on open.
    from tlog.storage import leafindex

    def rewrite(indexed: int | None = None, boot: bytes | None = None, wipe_from: int = 0) -> None:
        path = tmp_path / "leafindex.bin"
        raw = bytearray(path.read_bytes())
        f = list(leafindex._HDR.unpack_from(raw, 0))
        if indexed is not None:
            f[2] = indexed
        if boot is not None:
            f[6] = boot
        f[5] = 0  # not closed cleanly
        leafindex._HDR.pack_into(raw, 0, *f)
        slots = np.frombuffer(raw, dtype=leafindex.SLOT, offset=leafindex.HEADER)
        slots[slots["idx"] > wipe_from] = 0  # idx is stored + 1
        path.write_bytes(bytes(raw))

    rewrite(indexed=500, wipe_from=500)
    again, w_again = opened(tmp_path)
    r = w_again.append(data[600:610])
    assert r.indices == list(range(600, 610)) and r.fresh == [False] * 10
    again.close()
    rewrite(boot=b"another-boot", wipe_from=0)
    third, _w_third = opened(tmp_path)
    assert third.leaves.lookup([leaf_hash(data[0]), leaf_hash(data[699])]) == {
        leaf_hash(data[0]): 0, leaf_hash(data[699]): 699}
    third.close()


def test_lost_leaf_index_update_is_filled_not_papered_over(tmp_path):
    """Review finding: a failed index update followed by a successful one must not
    leave a permanent gap (resubmitting would then get a second index)."""
    failing = [False]

    def fault(name: str) -> None:  # EIO between the hash files' growth and the leaf index update
        if failing[0] and name == "after_hash_append":
            raise OSError(5, "Input/output error")

    store, w_store = opened(tmp_path, faults=fault)
    w_store.append([b"a"])
    failing[0] = True
    assert w_store.append([b"b"]).indices == [1]  # durable; index update lost
    failing[0] = False
    w_store.append([b"c"])
    r = w_store.append([b"b"])
    assert r.indices == [1] and r.fresh == [False]  # same entry, same index
    assert store.leaves.lookup([leaf_hash(b"b")]) == {leaf_hash(b"b"): 1}
    store.close()
    again, _w_again = opened(tmp_path)
    assert again.leaves.lookup([leaf_hash(b"b"), leaf_hash(b"c")]) == {leaf_hash(b"b"): 1, leaf_hash(b"c"): 2}
    again.close()


def test_entries_table_of_an_older_log_moves_into_runs(tmp_path):
    """A data directory written with one row per entry opens as the same log."""
    import sqlite3

    store, w_store = opened(tmp_path)
    data = entries(700, seed=11)
    commit_all(w_store, data, random.Random(11))
    root = w_store.state.root
    store.close()
    db = sqlite3.connect(tmp_path / "log.db", isolation_level=None)
    rows = []
    for first, count, blob in db.execute("SELECT first, count, data FROM runs ORDER BY first"):
        pos = 0
        for i in range(count):
            k = int.from_bytes(blob[pos:pos + 2], "big")
            rows.append((first + i, leaf_hash(blob[pos + 2:pos + 2 + k]), blob[pos + 2:pos + 2 + k]))
            pos += 2 + k
    assert [r[2] for r in rows] == data
    db.execute("DROP TABLE runs")
    db.execute("CREATE TABLE entries (idx INTEGER PRIMARY KEY, leaf_hash BLOB NOT NULL, data BLOB NOT NULL)")
    db.executemany("INSERT INTO entries VALUES (?, ?, ?)", rows)
    db.close()
    again, w_again = opened(tmp_path)
    st = w_again.state
    assert st.size == 700 and st.root == root
    from tlog.storage.embedded import read_entries

    assert read_entries(again.conn, 0, 700) == data
    assert read_entries(again.conn, 255, 3) == data[255:258]
    assert again.conn.execute("SELECT name FROM sqlite_master WHERE name = 'entries'").fetchone() is None
    r = w_again.append(data[10:12])
    assert r.indices == [10, 11] and r.fresh == [False, False]
    again.close()


def test_runs_with_a_gap_refuse_to_open(tmp_path):
    import sqlite3

    store, w_store = opened(tmp_path)
    commit_all(w_store, entries(600, seed=12), random.Random(12))
    store.close()
    db = sqlite3.connect(tmp_path / "log.db", isolation_level=None)
    db.execute("DELETE FROM runs WHERE first = (SELECT first FROM runs ORDER BY first LIMIT 1 OFFSET 1)")
    db.close()
    with pytest.raises(CorruptionError):
        EmbeddedStorage(tmp_path).open()


async def test_entry_reader_bundles_from_runs(tmp_path):
    """Entry bundles straight from stored runs (exact cover) or re-encoded (partial)."""
    from tlog.formats.tiles import encode_entry_bundle

    store, w_store = opened(tmp_path)
    data = entries(600, seed=13)
    w_store.append(data[:300])  # runs [0,256) [256,300)
    for i in range(300, 600, 7):  # then small runs
        w_store.append(data[i : i + 7])
    reader = store.entries()
    await reader.open()
    try:
        for start, count in ((0, 256), (256, 256), (256, 44), (256, 10), (300, 7), (301, 5), (512, 88), (590, 10)):
            assert await reader.bundle(start, count) == encode_entry_bundle(data[start : start + count])
        with pytest.raises(NotFound):
            await reader.bundle(512, 89)
        assert await reader.entry(299, 600) == (leaf_hash(data[299]), data[299])
    finally:
        await reader.close()
        store.close()


def test_landed_batch_with_a_failing_index_update_keeps_hashes_and_state_together(tmp_path):
    """Review finding: a batch whose COMMIT landed but reported an error; if the leaf index
    then failed too (ENOSPC growing it), the derived data must be caught up from the
    database, never cut back under it, or the next batch signs a wrong root."""
    import errno

    store, w_store = opened(tmp_path)
    data = [i.to_bytes(4, "big") for i in range(100_000)]
    w_store.append(data[:30_000])  # the index grows past 32k entries next
    real_commit, real_create = store._commit_entries, store.leaves._create_file

    def landed_then_failed(*a, **kw):
        real_commit(*a, **kw)
        raise OSError(errno.EIO, "disk I/O error reported by COMMIT")

    def full_disk(*a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    store._commit_entries, store.leaves._create_file = landed_then_failed, full_disk
    with pytest.raises(OSError):
        w_store.append(data[30_000:39_000])
    assert store.head().sequenced == 39_000  # it landed: the disk is believed, not the error
    with pytest.raises(OSError):  # the leaf index cannot grow yet: derived data stays behind, nothing is cut
        w_store.append(data[39_000:39_010])
    store._commit_entries, store.leaves._create_file = real_commit, real_create
    w_store.append(data[39_000:])
    assert (tmp_path / "hashes" / "level-00").stat().st_size == 100_000 * 32
    assert w_store.state.root == memory_view([leaf_hash(x) for x in data]).root
    r = w_store.append(data[30_000:30_010])  # the index caught up: same indices
    assert r.indices == list(range(30_000, 30_010)) and r.fresh == [False] * 10
    store.close()


def test_a_damaged_run_is_corruption_not_a_hang(tmp_path):
    import shutil
    import sqlite3

    from tlog.formats.tiles import encode_entry_bundle

    store, w_store = opened(tmp_path)
    w_store.append([b"e%d" % i for i in range(10)])
    store.close()
    db = sqlite3.connect(tmp_path / "log.db", isolation_level=None)
    db.execute("UPDATE runs SET data = ? WHERE first = 0", (encode_entry_bundle([b"e%d" % i for i in range(9)]),))
    db.execute("DELETE FROM meta WHERE key = 'hashes_synced'")
    db.close()
    shutil.rmtree(tmp_path / "hashes")
    with pytest.raises(CorruptionError, match="damaged"):
        EmbeddedStorage(tmp_path).open()


def test_one_writer_per_data_directory(tmp_path):
    from tlog.errors import ConfigError

    store, _w_store = opened(tmp_path)
    with pytest.raises(ConfigError, match="in use by another log process"):
        EmbeddedStorage(tmp_path)
    store.close()
    again, _w_again = opened(tmp_path)  # released by close()
    again.close()


async def test_a_batch_closes_interval_after_its_first_item_even_if_it_queued_during_a_commit(monkeypatch):
    """Items that queued while the writer was busy have waited already: the next batch is
    cut at once, not a whole interval after the writer comes back (the loop clock is faked)."""
    import asyncio

    from tlog.runtime.batching import BatchQueue

    loop = asyncio.get_running_loop()
    now = [1000.0]
    monkeypatch.setattr(loop, "time", lambda: now[0])
    q: BatchQueue[int] = BatchQueue(max_batch=100, interval=0.010)
    q.put([1, 2])
    now[0] += 0.050  # a commit that took 50 ms; meanwhile more arrived
    q.put([3])
    task = asyncio.ensure_future(q.next_batch())
    for _ in range(3):
        await asyncio.sleep(0)  # no timer can fire: the clock stands still
    assert task.done() and task.result() == [1, 2, 3]
    q.put([4])  # a fresh batch waits its interval from its own first item
    task = asyncio.ensure_future(q.next_batch())
    for _ in range(3):
        await asyncio.sleep(0)
    assert not task.done()
    now[0] += 0.011
    q.close()
    assert await asyncio.wait_for(task, 5) == [4]


async def test_a_submission_larger_than_a_batch_spans_batches_in_order(tmp_path):
    """add_many of 150 entries with max_batch 64, singles queued before and after it: the
    big group is filled across three batches, the singles each land in one."""
    store = EmbeddedStorage(tmp_path)
    seen: list[int] = []
    seq = Appender(store, SIGN, max_batch=64, batch_interval=0.01, on_batch=lambda n, s: seen.append(n))
    await seq.start()
    before, big, after = entries(10, seed=21), entries(150, seed=22), entries(10, seed=23)
    got = await asyncio.gather(*(seq.add(d) for d in before), seq.add_many(big), *(seq.add(d) for d in after))
    singles_before, many, singles_after = got[:10], got[10], got[11:]
    assert [a.index for a in singles_before] == list(range(10))
    assert many.indices == list(range(10, 160)) and all(many.fresh)
    assert many.leaf_hashes == [leaf_hash(d) for d in big]
    assert [a.index for a in singles_after] == list(range(160, 170))
    assert len(seen) >= 3 and max(seen) <= 64
    # the first batch (10 singles + 54 of the group) is answered together, by a checkpoint covering it
    assert len({a.state.size for a in singles_before}) == 1 and singles_before[0].state.size >= 64
    assert many.state.size >= 160  # covered by (at least) the batch that took its last entries
    await seq.close()


def _wal_db(path):
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE t (x BLOB)")
    for _ in range(64):
        conn.execute("INSERT INTO t VALUES (?)", (os.urandom(16384),))  # 1 MiB, all in the WAL
    return conn


def _wait_for(cond, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def test_checkpointer_runs_when_the_log_goes_quiet(tmp_path):
    from tlog.storage.embedded import Checkpointer

    db = tmp_path / "q.db"
    conn = _wal_db(db)
    commits = [0]
    cp = Checkpointer(db, lambda: commits[0], interval=0.05, max_age=1000)
    try:
        # quiet: copied back, though no batch commit was counted (a migration's writes, say)
        assert _wait_for(lambda: db.stat().st_size > 1 << 20, 30)
    finally:
        cp.stop()
        conn.close()


def test_checkpointer_under_steady_writes_waits_for_max_age(tmp_path):
    from tlog.storage.embedded import Checkpointer

    db = tmp_path / "b.db"
    conn = _wal_db(db)
    ticks = iter(range(1, 1 << 30))
    busy = lambda: next(ticks)  # noqa: E731 - a commit between every two looks: never quiet
    cp = Checkpointer(db, busy, interval=0.02, max_age=1000)
    time.sleep(0.5)
    cp.stop()
    assert db.stat().st_size < 1 << 20  # 25 looks, never quiet, max_age far: nothing copied yet
    cp = Checkpointer(db, busy, interval=0.02, max_age=0.2)
    try:
        assert _wait_for(lambda: db.stat().st_size > 1 << 20, 30)
    finally:
        cp.stop()
        conn.close()


def _wal_frames(db_path):
    """(frames in the WAL, frames copied back) from the WAL index (the -shm file)."""
    import struct

    shm = (db_path.parent / (db_path.name + "-shm")).read_bytes()
    return struct.unpack_from("=I", shm, 16)[0], struct.unpack_from("=I", shm, 96)[0]


def test_migrated_log_wal_is_checkpointed_when_quiet(tmp_path):
    """Found in review: the move of an old `entries` table into runs is one large
    transaction that no batch commit follows; the quiet log must still copy it back."""
    import sqlite3

    store, w_store = opened(tmp_path)
    data = entries(20000, seed=3)
    commit_all(w_store, data, random.Random(3))
    store.close()
    db = sqlite3.connect(tmp_path / "log.db", isolation_level=None)
    db.execute("DROP TABLE runs")
    db.execute("CREATE TABLE entries (idx INTEGER PRIMARY KEY, leaf_hash BLOB NOT NULL, data BLOB NOT NULL)")
    db.executemany("INSERT INTO entries VALUES (?, ?, ?)", [(i, leaf_hash(d), d) for i, d in enumerate(data)])
    db.close()  # the last connection: checkpointed, WAL removed
    again, _w_again = opened(tmp_path)  # moves the entries into runs
    try:
        assert _wait_for(lambda: _wal_frames(tmp_path / "log.db")[0] > 0
                         and _wal_frames(tmp_path / "log.db")[1] == _wal_frames(tmp_path / "log.db")[0], 30)
    finally:
        again.close()


def test_the_start_up_check_reads_the_runs_extents_not_their_data(tmp_path):
    """Opening a log checks that its runs of entries are contiguous. That check reads the
    covering index of (first, count), ~20 bytes a run, not the table, whose every row starts
    a page of entry data (a cold start at 2^26 entries read 1 GB for it). A data directory
    written before the index gets it when it is opened, and opens to the same tree."""
    import sqlite3

    store, w = opened(tmp_path)
    w.append(entries(3000))
    plan = " ".join(str(r) for r in store.conn.execute(
        "EXPLAIN QUERY PLAN SELECT first, count FROM runs ORDER BY first").fetchall())
    assert "COVERING INDEX runs_extent" in plan
    root = w.state.root
    w.close()
    conn = sqlite3.connect(tmp_path / "log.db")
    conn.execute("DROP INDEX runs_extent")  # as an older version left it
    conn.commit()
    conn.close()
    again, w = opened(tmp_path)
    assert w.state.root == root
    assert again.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs_extent'").fetchone() is not None
    w.close()


def test_the_hash_files_are_synced_off_the_append_path_and_recorded_with_a_checkpoint(tmp_path):
    """With hash_sync_interval > 0 a thread syncs the hash files; a later checkpoint commit
    records the size it synced, from which the next start recomputes (none here: it is all)."""
    store, w = opened(tmp_path, hash_sync_interval=0.05)
    data = entries(1400)  # enough for one append per 0.05 s until the deadline
    w.append(data[:100])
    synced = 0
    deadline, i = time.monotonic() + 60, 100
    while synced < 100:  # each append commits a checkpoint, which records what was synced
        assert time.monotonic() < deadline, "the synced size was never recorded"
        time.sleep(0.05)
        w.append(data[i : i + 1])
        i += 1
        synced = int(store._meta("hashes_synced") or 0)
    assert synced <= store.head().sequenced
    store.close()
    again, w2 = opened(tmp_path, hash_sync_interval=0.05)
    assert w2.state.size == i and w2.state.root == w.state.root
    again.close()


def test_hash_files_rebuilt_on_a_root_mismatch_leave_a_reader_its_maps(tmp_path):
    """A hash node on the signed root's path is wrong (the hashes were synced, so only the
    root check finds it): the driver rebuilds every hash file from the database. A reader in
    another process that mapped the files before keeps reading its maps whole, and its next
    reads, like a new reader's, are the rebuilt files."""
    from tests.support.mapped import MappedReader, digest

    store, w = opened(tmp_path)
    data = entries(3000)
    commit_all(w, data, random.Random(4))
    root = w.state.root
    store.close()
    top = tmp_path / "hashes" / "level-11"  # node (11, 0): the left half of every root from 2048 on
    with open(top, "r+b") as f:
        f.write(bytes(32))
    reader = MappedReader(tmp_path / "hashes", [0, 11])
    try:
        again, w_again = opened(tmp_path)
        assert w_again.state.size == 3000 and w_again.state.root == root
        ref = [leaf_hash(d) for d in data]
        died, old, seen = reader.check({0: 3000, 11: 1})
        assert died is None, f"the reader died with {died}"  # -7: SIGBUS
        assert old == reader.mapped and old[11] == digest(bytes(32))  # the old files, as mapped
        assert seen == {0: digest(b"".join(ref)), 11: digest(memory_view(ref[:2048]).root)}
        assert reader.close() == 0
        again.close()
    finally:
        reader.kill()
