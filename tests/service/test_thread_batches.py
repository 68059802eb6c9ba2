"""tlog.runtime.batching.ThreadBatches: calls made while the workers are busy travel together."""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tlog.runtime.batching import ThreadBatches

from tests.support.waiting import until


class CountingPool(ThreadPoolExecutor):
    """A real thread pool that counts its hand-offs."""

    def __init__(self, workers: int) -> None:
        super().__init__(max_workers=workers)
        self.handoffs = 0

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        self.handoffs += 1
        return super().submit(fn, *args, **kwargs)


async def _held(batches: ThreadBatches, gate: threading.Event) -> asyncio.Task[str]:
    """A call that keeps its worker busy until `gate` opens."""
    started = threading.Event()

    def hold() -> str:
        started.set()
        gate.wait(60)
        return "held"

    task = asyncio.ensure_future(batches.run(hold))
    await until(started.is_set, seconds=30, what="the held call to start")
    return task


async def test_calls_made_while_the_worker_is_busy_go_out_as_one_batch_in_order():
    pool, gate, ran = CountingPool(1), threading.Event(), []
    batches = ThreadBatches(pool, workers=1)
    try:
        held = await _held(batches, gate)
        waiting = [asyncio.ensure_future(batches.run(lambda i=i: ran.append(i) or i * i)) for i in range(5)]
        await asyncio.sleep(0)  # let them queue
        assert pool.handoffs == 1 and not ran
        gate.set()
        assert await held == "held"
        assert await asyncio.gather(*waiting) == [0, 1, 4, 9, 16]
        assert ran == [0, 1, 2, 3, 4] and pool.handoffs == 2  # one hand-off for the five
    finally:
        gate.set()
        pool.shutdown()


async def test_a_batch_holds_at_most_max_batch_calls():
    pool, gate = CountingPool(1), threading.Event()
    batches = ThreadBatches(pool, workers=1, max_batch=2)
    try:
        held = await _held(batches, gate)
        waiting = [asyncio.ensure_future(batches.run(lambda i=i: i)) for i in range(5)]
        await asyncio.sleep(0)
        gate.set()
        await held
        assert await asyncio.gather(*waiting) == [0, 1, 2, 3, 4]
        assert pool.handoffs == 1 + 3  # 2 + 2 + 1
    finally:
        gate.set()
        pool.shutdown()


async def test_each_exception_reaches_only_its_own_caller_and_a_cancelled_caller_harms_no_one():
    pool, gate = CountingPool(1), threading.Event()
    batches = ThreadBatches(pool, workers=1)

    def boom() -> int:
        raise ValueError("bad input")

    try:
        held = await _held(batches, gate)
        good = asyncio.ensure_future(batches.run(lambda: 1))
        bad = asyncio.ensure_future(batches.run(boom))
        gone = asyncio.ensure_future(batches.run(lambda: 3))
        after = asyncio.ensure_future(batches.run(lambda: 4))
        await asyncio.sleep(0)
        gone.cancel()
        gate.set()
        await held
        assert await good == 1 and await after == 4
        with pytest.raises(ValueError, match="bad input"):
            await bad
        assert gone.cancelled()
        assert await batches.run(lambda: 5) == 5  # the worker is back
    finally:
        gate.set()
        pool.shutdown()


async def test_idle_workers_share_the_queue_and_a_shut_down_pool_fails_every_caller():
    pool = CountingPool(2)
    batches = ThreadBatches(pool, workers=2)
    names = await asyncio.gather(*(batches.run(threading.current_thread) for _ in range(8)))
    assert len(names) == 8 and pool.handoffs == 2  # 8 calls made in one turn: two halves, one per worker
    pool.shutdown()
    calls = [asyncio.ensure_future(batches.run(lambda: 1)) for _ in range(3)]
    for c in calls:  # bounded: a lost hand-off would leave them waiting for ever
        with pytest.raises(RuntimeError, match="shutdown"):
            await asyncio.wait_for(c, 30)


def test_workers_and_max_batch_must_be_positive():
    with pytest.raises(ValueError):
        ThreadBatches(ThreadPoolExecutor(1), workers=0)
    with pytest.raises(ValueError):
        ThreadBatches(ThreadPoolExecutor(1), workers=1, max_batch=0)
