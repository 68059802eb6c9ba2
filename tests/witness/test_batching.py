"""witness.state group commit: the compare-and-swaps of concurrent add-checkpoint requests
share one transaction and one fsync, with the exact semantics of one CAS per request.

Most tests go through a real witness server on 127.0.0.1. A `Gate` (the state's
stall hook) holds requests right before their swap until N of them are there and
then releases them together, so they form one group deterministically (no timing
involved); `Groups` shows which swaps each transaction held.
"""
from __future__ import annotations

import asyncio
import sqlite3
import time

import pytest

from tlog.errors import ForkError
from tlog.formats.keys import cosigner_verifier
from tlog.formats.mirror import add_checkpoint_body
from tlog.formats.note import open_note
from witness.config import WitnessedLog
from witness.core import origin_path
from witness.state import Record, WitnessState

from tests.support.witness import MemLog, post, running_witness, witness_config

HANG_GUARD = 60  # seconds; only so that a bug cannot hang the suite (no test depends on time)


class Gate:
    """Stall hook: every `n` swaps wait for each other, then all go at once."""

    def __init__(self, n: int) -> None:
        self.n, self.waiting, self.event = n, 0, asyncio.Event()
        self.calls = 0

    async def __call__(self, origin: str) -> None:
        self.calls += 1
        ev = self.event
        self.waiting += 1
        if self.waiting == self.n:
            self.waiting, self.event = 0, asyncio.Event()
            ev.set()
        else:
            await ev.wait()


class Groups(list[list[str]]):
    """A `WitnessState` trace hook: the origins of the swaps of each transaction, in order."""

    def __call__(self, where: str, swaps) -> None:
        if where == "statements":
            self.append([new.origin for _, new in swaps])


def logs(n: int, size: int) -> list[MemLog]:
    return [MemLog(origin=f"log{i}.example/log", seed=bytes([i + 1]) * 32).grow(size) for i in range(n)]


def cosignature_verifies(svc, log: MemLog, size: int, line: str) -> None:
    text = log.checkpoint(size).split("\n\n")[0] + "\n"
    open_note(text + "\n" + line, [cosigner_verifier(svc.signer.verifier)])


async def guarded(*aws):
    async with asyncio.timeout(HANG_GUARD):
        return await asyncio.gather(*aws)


# --- many logs at once -----------------------------------------------------------------


async def test_many_logs_through_http_share_transactions(tmp_path):
    """24 logs push 8 checkpoints each, in order, all at once: each round is ONE transaction
    of 24 swaps, every answer is a 200 whose cosignature verifies, all of it durable."""
    n, rounds = 24, 8
    ls = logs(n, rounds)
    gate = Gate(n)
    cfg = witness_config(tmp_path, [WitnessedLog(l.origin, l.vkey) for l in ls])
    groups = Groups()
    async with running_witness(cfg, stall=gate, trace=groups) as (svc, url, session):

        async def client(log: MemLog) -> list[tuple[int, str]]:
            out = []
            for size in range(1, rounds + 1):
                status, ctype, text = await post(session, url, log.body(size - 1, size))
                assert status == 200, (log.origin, size, status, text)
                assert ctype.startswith("text/plain")
                out.append((size, text))
            return out

        answers = await guarded(*(client(l) for l in ls))
        for log, got in zip(ls, answers):
            for size, line in got:
                cosignature_verifies(svc, log, size, line)
            async with session.get(f"{url}/{origin_path(log.origin)}/checkpoint") as r:
                assert r.status == 200 and (await r.text()).startswith(f"{log.origin}\n{rounds}\n")
    assert [sorted(g) for g in groups] == [sorted(l.origin for l in ls)] * rounds
    st = WitnessState(cfg.state_path)  # a fresh connection: what is on disk
    try:
        for log in ls:
            rec = st.get_sync(log.origin)
            assert (rec.size, rec.root) == (rounds, log.root(rounds))
            assert st.history_sync(log.origin) == [(s, log.root(s)) for s in range(1, rounds + 1)]
    finally:
        st.close()


async def test_many_logs_through_http_without_a_gate(tmp_path):
    """The same load with nothing holding requests back: groups form on their own."""
    n, rounds = 40, 6
    ls = logs(n, rounds)
    cfg = witness_config(tmp_path, [WitnessedLog(l.origin, l.vkey) for l in ls])
    groups = Groups()
    async with running_witness(cfg, trace=groups) as (svc, url, session):

        async def client(log: MemLog) -> None:
            for size in range(1, rounds + 1):
                status, _, text = await post(session, url, log.body(size - 1, size))
                assert status == 200, (log.origin, size, status, text)
                cosignature_verifies(svc, log, size, text)

        await guarded(*(client(l) for l in ls))
        for log in ls:
            assert svc.state.get_sync(log.origin).size == rounds
            assert [s for s, _ in svc.state.history_sync(log.origin)] == list(range(1, rounds + 1))
    assert sum(len(g) for g in groups) == n * rounds  # one swap per request, none lost or repeated
    # A log sends its next checkpoint only after the answer, which follows the COMMIT.
    assert all(len(set(g)) == len(g) for g in groups)


# --- one origin, many requests in one group ------------------------------------------------


async def test_same_origin_requests_in_one_group_linearize(tmp_path):
    """Six requests for one log from the same old size (three forks signed by the log's key,
    a duplicate, a larger size) land in ONE transaction, three rounds in a row: exactly one
    wins per old size, the others get 409 with the winner's size, one history is persisted."""
    log = MemLog().grow(4)
    cfg = witness_config(tmp_path, [WitnessedLog(log.origin, log.vkey)])
    gate = Gate(1)
    groups = Groups()
    async with running_witness(cfg, stall=gate, trace=groups) as (svc, url, session):
        assert (await post(session, url, log.body(0, 4)))[0] == 200
        gate.n = 6
        tree, cosigned = log, {4: log.root(4)}
        for rnd in range(3):
            old = svc.state.get_sync(log.origin).size
            a, b, c, d = (tree.fork(old, tag=4 * rnd + t).grow(4) for t in (1, 2, 3, 4))
            trees, sizes = [a, a, b, c, d, a], [old + 2] * 5 + [old + 4]
            bodies = [add_checkpoint_body(old, t.proof(old, s), t.checkpoint(s)) for t, s in zip(trees, sizes)]
            results = await guarded(*(post(session, url, body) for body in bodies))
            wins = [i for i, (status, _, _) in enumerate(results) if status == 200]
            assert len(wins) == 1, results
            (w,) = wins
            cosignature_verifies(svc, trees[w], sizes[w], results[w][2])
            for i, answer in enumerate(results):
                if i != w:
                    assert answer == (409, "text/x.tlog.size", f"{sizes[w]}\n"), (rnd, i, answer)
            tree = trees[w]
            cosigned[sizes[w]] = tree.root(sizes[w])
            rec = svc.state.get_sync(log.origin)
            assert (rec.size, rec.root) == (sizes[w], tree.root(sizes[w]))
        history = svc.state.history_sync(log.origin)
    assert [len(g) for g in groups] == [1, 6, 6, 6]
    assert history == sorted(cosigned.items())  # one root per size, on the winners' one history
    assert all(tree.root(s) == r for s, r in history)
    assert gate.calls == 19  # no loser went round the CAS again: each re-read and answered 409


# --- a failed transaction fails its whole group --------------------------------------------


POISON_SQL = {
    # A statement of the group fails (as a full disk or an I/O error can).
    "statement": ["CREATE TRIGGER poison BEFORE INSERT ON history WHEN NEW.origin = 'log3.example/log' "
                  "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"],
    # The COMMIT itself fails (a deferred constraint: SQLite refuses the COMMIT).
    "commit": ["CREATE TABLE parent (id INTEGER PRIMARY KEY)",
               "CREATE TABLE poisoned (p INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)",
               "CREATE TRIGGER poison AFTER INSERT ON history WHEN NEW.origin = 'log3.example/log' "
               "BEGIN INSERT INTO poisoned VALUES (1); END"],
}


@pytest.mark.parametrize("where", sorted(POISON_SQL))
async def test_a_failed_group_answers_503_to_all_and_persists_nothing(tmp_path, where):
    ls = logs(4, 6)
    cfg = witness_config(tmp_path, [WitnessedLog(l.origin, l.vkey) for l in ls])
    gate = Gate(4)
    groups = Groups()
    async with running_witness(cfg, stall=gate, trace=groups) as (svc, url, session):
        assert all(r[0] == 200 for r in await guarded(*(post(session, url, l.body(0, 2)) for l in ls)))
        before = {l.origin: (svc.state.get_sync(l.origin), svc.state.history_sync(l.origin)) for l in ls}
        side = sqlite3.connect(cfg.state_path)  # schema changes are seen by the witness's connection
        for sql in POISON_SQL[where]:
            side.execute(sql)
        side.commit()
        svc.state._db.execute("PRAGMA foreign_keys = ON")

        bodies = [l.body(2, 4) for l in ls]
        results = await guarded(*(post(session, url, b) for b in bodies))
        assert [r[0] for r in results] == [503] * 4, results
        assert all("could not persist" in text for _, _, text in results)
        assert len(groups) == 2 and len(groups[1]) == 4  # the three healthy logs shared the bad group
        for l in ls:
            assert (svc.state.get_sync(l.origin), svc.state.history_sync(l.origin)) == before[l.origin]
            async with session.get(f"{url}/{origin_path(l.origin)}/checkpoint") as r:
                assert (await r.text()).startswith(f"{l.origin}\n2\n")

        # The fault clears: the same requests now succeed (nothing stale was remembered).
        side.execute("DROP TRIGGER poison")
        side.commit()
        side.close()
        results = await guarded(*(post(session, url, b) for b in bodies))
        assert [r[0] for r in results] == [200] * 4, results
        for l, (_, _, line) in zip(ls, results):
            cosignature_verifies(svc, l, 4, line)
            assert svc.state.history_sync(l.origin) == [(2, l.root(2)), (4, l.root(4))]


# --- the in-memory hint is only a hint -------------------------------------------------------


async def test_another_writer_of_the_database_is_never_missed(tmp_path):
    """A second process (here: a second connection, like `oap-witness feed`) moves a log on
    behind the server's back: the server answers as if it had read the database."""
    log = MemLog().grow(12)
    cfg = witness_config(tmp_path, [WitnessedLog(log.origin, log.vkey)])
    async with running_witness(cfg) as (svc, url, session):
        assert (await post(session, url, log.body(0, 4)))[0] == 200
        other = WitnessState(cfg.state_path)
        try:
            r4 = other.get_sync(log.origin)
            r8 = Record(log.origin, 8, log.root(8), "elsewhere\n", r4.cosigned_at)
            assert other.swap_sync(r4, r8)
            # The server last saw 4: the CAS on 4 fails and the 409 says what the database says.
            assert await post(session, url, log.body(4, 10)) == (409, "text/x.tlog.size", "8\n")
            assert (await post(session, url, log.body(4, 10)))[0] == 409
            assert other.swap_sync(r8, Record(log.origin, 10, log.root(10), "elsewhere\n", r4.cosigned_at))
        finally:
            other.close()
        # The server last saw 8; the log (told 10 elsewhere) sends old 10: re-read, then cosigned.
        status, _, line = await post(session, url, log.body(10, 12))
        assert status == 200
        cosignature_verifies(svc, log, 12, line)
        assert [s for s, _ in svc.state.history_sync(log.origin)] == [4, 8, 10, 12]


async def test_a_write_lock_held_elsewhere_waits_off_the_event_loop(tmp_path):
    log = MemLog().grow(4)
    cfg = witness_config(tmp_path, [WitnessedLog(log.origin, log.vkey)])
    waiting = []

    def trace(where: str, swaps) -> None:
        if where == "blocking":
            waiting.append(len(swaps))

    async with running_witness(cfg, trace=trace) as (svc, url, session):
        side = sqlite3.connect(cfg.state_path, isolation_level=None)
        side.execute("BEGIN IMMEDIATE")  # another process is writing
        pending = asyncio.create_task(post(session, url, log.body(0, 4)))
        async with asyncio.timeout(HANG_GUARD):
            while not waiting:  # the group went to a worker to wait for the lock there
                await asyncio.sleep(0.01)
        for _ in range(5):  # the event loop keeps serving meanwhile
            async with session.get(url + "/metrics") as r:
                assert r.status == 200
        assert not pending.done()
        side.execute("ROLLBACK")
        side.close()
        async with asyncio.timeout(HANG_GUARD):
            status, _, line = await pending
        assert status == 200
        cosignature_verifies(svc, log, 4, line)
        assert svc.state.get_sync(log.origin).size == 4


# --- the group transaction itself ---------------------------------------------------------


def test_group_applies_each_swap_against_the_earlier_ones(tmp_path):
    st = WitnessState(tmp_path / "w.db")
    try:
        r = {k: Record("o", s, bytes([k]) * 32, f"n{k}\n", 10 + k) for k, s in ((1, 1), (3, 3), (33, 3), (4, 4))}
        out = st.swap_group_sync([(None, r[1]), (r[1], r[3]), (r[1], r[33]), (r[3], r[4]), (None, r[1])])
        assert [o for o, _ in out] == [True, True, False, True, False]
        assert [cur for _, cur in out] == [r[1], r[3], r[3], r[4], r[4]]  # what each swap left or found
        assert st.get_sync("o") == r[4]
        assert st.history_sync("o") == [(1, r[1].root), (3, r[3].root), (4, r[4].root)]

        # A swap that would record a second root for a size writes nothing; the rest commit.
        st._db.execute("UPDATE checkpoints SET size = 3, root = ? WHERE origin = 'o'", (r[33].root,))
        x1, y1 = Record("x", 1, b"\x05" * 32, "x\n", 1), Record("y", 2, b"\x06" * 32, "y\n", 1)
        bad = Record("o", 3, r[33].root, "", 0)  # what a caller that read the corrupted row expects
        out = st.swap_group_sync([(None, x1), (bad, Record("o", 3, r[33].root, "fork\n", 20)), (None, y1)])
        assert out[0] == (True, x1) and out[2] == (True, y1)
        assert isinstance(out[1][0], ForkError) and (out[1][1].size, out[1][1].root) == (3, r[33].root)
        assert st.history_sync("o") == [(1, r[1].root), (3, r[3].root), (4, r[4].root)]
        assert st.get_sync("o").note == "n4\n"  # the refused swap wrote nothing
        assert st.get_sync("x") == x1 and st.get_sync("y") == y1
    finally:
        st.close()


async def test_a_database_error_fails_the_group_on_the_async_path(tmp_path):
    """Without HTTP: every caller of the failed group gets 503 (Unavailable), none a result."""
    from tlog.errors import Unavailable

    gate = Gate(3)
    st = WitnessState(tmp_path / "w.db", stall=gate)
    try:
        st._db.execute("CREATE TRIGGER poison BEFORE INSERT ON history WHEN NEW.origin = 'b' "
                       "BEGIN SELECT RAISE(ABORT, 'injected'); END")
        recs = [Record(o, 1, bytes([i + 1]) * 32, "n\n", 1) for i, o in enumerate("abc")]
        async with asyncio.timeout(HANG_GUARD):
            out = await asyncio.gather(*(st.compare_and_swap(None, r) for r in recs), return_exceptions=True)
        assert all(isinstance(e, Unavailable) and e.status == 503 for e in out), out
        assert st.all_sync() == [] and all(st.cached(o) is None for o in "abc")
        st._db.execute("DROP TRIGGER poison")
        async with asyncio.timeout(HANG_GUARD):
            assert await asyncio.gather(*(st.compare_and_swap(None, r) for r in recs)) == [True] * 3
        assert st.all_sync() == recs and [st.cached(o) for o in "abc"] == recs
    finally:
        st.close()


async def test_reads_filling_the_default_pool_cannot_block_a_commit(tmp_path):
    """Review finding: the COMMIT that releases the state lock ran on the default
    thread pool, where reads (monitoring GETs) wait for that lock; with every worker
    taken by such a read, nothing could ever proceed. Deterministic interleaving: the
    default pool's workers all exist and are idle, then reads and a swap land in one
    loop iteration."""
    import os as _os

    from witness.state import Record, WitnessState

    loop = asyncio.get_running_loop()
    workers = min(32, (_os.cpu_count() or 1) + 4)
    await asyncio.gather(*[loop.run_in_executor(None, lambda: None) for _ in range(workers)])
    await asyncio.gather(*[asyncio.to_thread(time.sleep, 0.05) for _ in range(workers)])
    st = WitnessState(tmp_path / "w.db")
    rec = Record("example.com/log", 1, b"\x11" * 32, "note\n", 1)

    async def reader():
        await asyncio.sleep(0)
        return await st.get("example.com/log")

    tasks = [asyncio.create_task(reader()) for _ in range(workers)]
    tasks.append(asyncio.create_task(st.compare_and_swap(None, rec)))
    try:
        done = await asyncio.wait_for(asyncio.gather(*tasks), 20)
    finally:
        if not all(t.done() for t in tasks):
            st._lock.release()  # let the stuck threads finish so the test process can exit
    assert done[-1] is True
    assert st.get_sync("example.com/log") == rec
    st.close()
