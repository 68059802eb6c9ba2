"""kill -9 of a real `oap-witness serve` under concurrent conflicting requests (docs/architecture.md §4).

Three forks of one log are pushed by many clients at once; the witness is
SIGKILLed at varying moments, restarted on the same data directory, and pushed
again. After each kill the database must be intact and at least as far as
every 200 the clients received (persist before answer), and over all cycles
no two roots may be cosigned for one size and every cosigned checkpoint must
lie on one history.
"""
from __future__ import annotations

import asyncio
import random
import sqlite3

import aiohttp

from tlog.formats.keys import cosigner_verifier, parse_vkey
from tlog.formats.mirror import add_checkpoint_body
from tlog.formats.note import open_note
from witness.config import WitnessedLog
from witness.state import WitnessState

from tests.support.witness import MemLog, WitnessProcess, write_config

MAX = 48


async def _drive(url: str, trees, notes, seed: int, cosigned: list, *, kill=None, min_ok: int = 6) -> None:
    """16 clients push random forks/sizes (resyncing on 409); `kill` fires once `min_ok` 200s arrived."""
    got = asyncio.Event()
    start = len(cosigned)

    async def client(i: int, session: aiohttp.ClientSession) -> None:
        rng = random.Random(seed * 1000 + i)
        old = 0
        for _ in range(60):
            t = rng.randrange(len(trees))
            size = max(old, rng.randint(1, MAX))
            body = add_checkpoint_body(old, trees[t].proof(old, size), notes[(t, size)])
            try:
                async with session.post(url + "/add-checkpoint", data=body) as r:
                    text = await r.text()
                    status = r.status
            except (TimeoutError, aiohttp.ClientError):
                return  # the witness was killed under us
            assert status in (200, 409, 422), (status, text)
            if status == 200:
                cosigned.append((t, size, text))
                old = size
                if len(cosigned) - start >= min_ok:
                    got.set()
            elif status == 409:
                old = int(text)

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        tasks = [asyncio.create_task(client(i, session)) for i in range(16)]
        if kill is not None:
            done = asyncio.create_task(asyncio.wait(tasks))
            await asyncio.wait([asyncio.create_task(got.wait()), done], return_when=asyncio.FIRST_COMPLETED)
            await asyncio.sleep(random.Random(seed).uniform(0, 0.02))  # land mid-request
            kill()
        await asyncio.gather(*tasks)


def _check_state(db_path, trees, cosigned, origin):
    """The database is intact, at least as far as every acknowledged cosignature, on one history."""
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    st = WitnessState(db_path)
    try:
        rec = st.get_sync(origin)
        history = st.history_sync(origin)
    finally:
        st.close()
    assert rec is not None
    assert rec.size >= max(size for _, size, _ in cosigned)
    tree = next(t for t in trees if t.root(rec.size) == rec.root)
    for t, size, _ in cosigned:
        assert trees[t].root(size) == tree.root(size), f"cosigned size {size} is not on the persisted history"
    assert [s for s, _ in history] == sorted({s for s, _ in history})
    assert all(tree.root(s) == r for s, r in history)
    assert history[-1] == (rec.size, rec.root)
    return rec


def test_kill_9_under_concurrent_requests(tmp_path):
    main = MemLog().grow(MAX)
    trees = [main, main.fork(9, tag=1).grow(MAX - 9), main.fork(23, tag=2).grow(MAX - 23)]
    notes = {(t, s): trees[t].checkpoint(s) for t in range(3) for s in range(1, MAX + 1)}
    cfg = write_config(tmp_path / "w.toml", tmp_path / "data", [WitnessedLog(main.origin, main.vkey)])
    db = tmp_path / "data" / "witness.db"
    cosigned: list[tuple[int, int, str]] = []
    sizes_after_kill = []
    vkeys = set()
    for cycle in range(3):
        p = WitnessProcess(cfg).start()
        vkeys.add(p.vkey)
        before = len(cosigned)
        asyncio.run(_drive(p.url, trees, notes, cycle, cosigned, kill=p.kill))
        assert p.proc.returncode == -9
        assert len(cosigned) > before  # the cycle cosigned something before its kill
        sizes_after_kill.append(_check_state(db, trees, cosigned, main.origin).size)
    # After the last crash: a clean run, then a clean stop.
    p = WitnessProcess(cfg).start()
    asyncio.run(_drive(p.url, trees, notes, 99, cosigned))
    assert p.stop() == 0
    final = _check_state(db, trees, cosigned, main.origin)

    assert len(vkeys) == 1  # the same key after every restart
    wv = cosigner_verifier(parse_vkey(vkeys.pop()))
    by_size: dict[int, set[bytes]] = {}
    for t, size, line in cosigned:
        open_note(notes[(t, size)].split("\n\n")[0] + "\n\n" + line, [wv])
        by_size.setdefault(size, set()).add(trees[t].root(size))
    assert all(len(r) == 1 for r in by_size.values()), "two roots cosigned for one size"
    assert sizes_after_kill == sorted(sizes_after_kill) and final.size >= sizes_after_kill[-1]
