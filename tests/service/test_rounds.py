"""tlog.runtime.rounds.run_rounds: the polling loop of the witness feeder and the mirror follower."""
from __future__ import annotations

import asyncio

from tlog.runtime.rounds import run_rounds


async def test_rounds_counts_and_a_failed_round_stays_failed():
    results = iter([True, False, True])
    seen: list[bool] = []

    async def one() -> bool:
        return next(results)

    ok = await run_rounds(one, lambda r: r, interval=0, rounds=3, on_round=seen.append)
    assert seen == [True, False, True] and ok is False
    assert await run_rounds(one, lambda r: r, interval=0, rounds=0) is True  # no round: nothing failed


async def test_a_stop_during_the_pause_ends_the_loop_at_once():
    stop = asyncio.Event()
    rounds = 0

    async def one() -> int:
        nonlocal rounds
        rounds += 1
        stop.set()  # as a signal handler would, while the loop is about to pause for an hour
        return rounds

    ok = await asyncio.wait_for(run_rounds(one, lambda r: True, interval=3600, stop=stop), timeout=60)
    assert ok is True and rounds == 1
