"""tlog.runtime.batching.ThreadBatches: calls made while the workers are busy travel together.

Every test runs under a 30 s bound (`asyncio.timeout`): a lost hand-off leaves a caller
waiting for ever, and must fail the test rather than hang it."""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tlog.runtime.batching import ThreadBatches

from tests.support.waiting import until

BOUND = 30.0


class CountingPool(ThreadPoolExecutor):
    """A real thread pool that counts its hand-offs and the calls in each."""

    def __init__(self, workers: int) -> None:
        super().__init__(max_workers=workers)
        self.batches: list[int] = []

    @property
    def handoffs(self) -> int:
        return len(self.batches)

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        self.batches.append(len(args[0]))  # ThreadBatches hands over (_call_each, [calls])
        return super().submit(fn, *args, **kwargs)


async def _held(batches: ThreadBatches, gate: threading.Event) -> asyncio.Task[str]:
    """A call that keeps its worker busy until `gate` opens."""
    started = threading.Event()

    def hold() -> str:
        started.set()
        gate.wait(60)
        return threading.current_thread().name

    task = asyncio.ensure_future(batches.run(hold))
    await until(started.is_set, BOUND, "the held call to start")
    return task


async def test_calls_made_while_the_worker_is_busy_go_out_as_one_batch_in_order():
    pool, gate, ran = CountingPool(1), threading.Event(), []
    batches = ThreadBatches(pool, workers=1)
    try:
        async with asyncio.timeout(BOUND):
            held = await _held(batches, gate)
            waiting = [asyncio.ensure_future(batches.run(lambda i=i: ran.append(i) or i * i)) for i in range(5)]
            await asyncio.sleep(0)  # let them queue
            assert pool.handoffs == 1 and not ran
            gate.set()
            await held
            assert await asyncio.gather(*waiting) == [0, 1, 4, 9, 16]
            assert ran == [0, 1, 2, 3, 4] and pool.handoffs == 2  # one hand-off for the five
    finally:
        gate.set()
        pool.shutdown()


async def test_a_batch_holds_at_most_max_batch_calls():
    pool, gate = CountingPool(1), threading.Event()
    batches = ThreadBatches(pool, workers=1, max_batch=2)
    try:
        async with asyncio.timeout(BOUND):
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


async def test_a_worker_that_frees_first_leaves_the_other_its_share():
    """Two workers busy, eight calls queued: the first worker to free takes half, so the
    second, freeing a moment later, has calls to run rather than an idle core."""
    pool, gate_a, gate_b, gate_calls = CountingPool(2), threading.Event(), threading.Event(), threading.Event()
    batches = ThreadBatches(pool, workers=2)
    try:
        async with asyncio.timeout(BOUND):
            held_a = await _held(batches, gate_a)
            held_b = await _held(batches, gate_b)
            waiting = [asyncio.ensure_future(batches.run(lambda i=i: gate_calls.wait(60) and i)) for i in range(8)]
            await asyncio.sleep(0)
            gate_a.set()
            await held_a
            await until(lambda: pool.handoffs == 3, BOUND, "the first worker's share")
            gate_b.set()
            await held_b
            await until(lambda: pool.handoffs == 4, BOUND, "the second worker's share")
            assert pool.batches == [1, 1, 4, 2]  # half of the eight, then a share of the four left
            gate_calls.set()
            assert await asyncio.gather(*waiting) == list(range(8))
            assert sum(pool.batches) == 2 + 8
    finally:
        for g in (gate_a, gate_b, gate_calls):
            g.set()
        pool.shutdown()


async def test_each_exception_reaches_only_its_own_caller_and_a_gone_caller_is_not_run():
    pool, gate, ran = CountingPool(1), threading.Event(), []
    batches = ThreadBatches(pool, workers=1)

    def boom() -> int:
        raise ValueError("bad input")

    def stop() -> int:
        raise StopIteration  # a future refuses it: it must not strand the rest of the batch

    try:
        async with asyncio.timeout(BOUND):
            held = await _held(batches, gate)
            good = asyncio.ensure_future(batches.run(lambda: 1))
            bad = asyncio.ensure_future(batches.run(boom))
            odd = asyncio.ensure_future(batches.run(stop))
            gone = asyncio.ensure_future(batches.run(lambda: ran.append("gone")))
            after = asyncio.ensure_future(batches.run(lambda: 4))
            await asyncio.sleep(0)
            gone.cancel()
            gate.set()
            await held
            assert await good == 1 and await after == 4
            with pytest.raises(ValueError, match="bad input"):
                await bad
            with pytest.raises(RuntimeError, match="StopIteration"):
                await odd
            assert gone.cancelled() and ran == []  # its caller left before the batch did
            assert await batches.run(lambda: 5) == 5  # the worker is back
    finally:
        gate.set()
        pool.shutdown()


async def test_idle_workers_share_the_queue_and_a_shut_down_pool_fails_every_caller():
    pool = CountingPool(2)
    batches = ThreadBatches(pool, workers=2)
    async with asyncio.timeout(BOUND):
        results = await asyncio.gather(*(batches.run(lambda i=i: i) for i in range(8)))
        assert results == list(range(8)) and pool.handoffs == 2  # 8 calls made in one turn: two halves
        pool.shutdown()
        calls = [asyncio.ensure_future(batches.run(lambda: 1)) for _ in range(3)]
        for c in calls:
            with pytest.raises(RuntimeError, match="shutdown"):
                await c


def test_workers_and_max_batch_must_be_positive():
    with pytest.raises(ValueError):
        ThreadBatches(ThreadPoolExecutor(1), workers=0)
    with pytest.raises(ValueError):
        ThreadBatches(ThreadPoolExecutor(1), workers=1, max_batch=0)
