"""Batching, so that one costly step serves many requests.

`BatchQueue` is the queue of the log's appender and the registry's batcher
(docs/architecture.md §3.3): items queue up; a batch closes after `max_batch`
items or `interval` seconds after its first item, whichever comes first, so one
transaction and one fsync serve many submissions without holding a lone
submission long. `ThreadBatches` hands the witness's ML-DSA-44 signatures to
worker threads, one hand-off for all that queued while the workers were busy.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from functools import partial
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class BatchQueue(Generic[T]):
    def __init__(self, max_batch: int, interval: float) -> None:
        self.max_batch, self.interval = max_batch, interval
        self.items: list[T] = []
        self.closing = False
        self._arrived = asyncio.Event()
        self._full = asyncio.Event()
        self._first_at = 0.0  # loop time the oldest queued item arrived

    def __len__(self) -> int:
        return len(self.items)

    def put(self, items: Iterable[T]) -> None:
        if not self.items:
            self._first_at = asyncio.get_running_loop().time()
        self.items.extend(items)
        self._arrived.set()
        if len(self.items) >= self.max_batch:
            self._full.set()

    def close(self) -> None:
        """Stop waiting: queued items are still handed out, then `next_batch` returns None."""
        self.closing = True
        self._arrived.set()
        self._full.set()

    async def next_batch(self, idle: float | None = None) -> list[T] | None:
        """The next batch; [] after `idle` seconds with nothing queued; None once closed and empty."""
        loop = asyncio.get_running_loop()
        while not self.items:
            if self.closing:
                return None
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), idle)
            except TimeoutError:
                return []
        # From the first item's arrival, not from now: items that queued while the
        # last batch was being committed have waited already.
        deadline = self._first_at + self.interval
        while len(self.items) < self.max_batch and not self.closing:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            self._full.clear()
            try:
                await asyncio.wait_for(self._full.wait(), remaining)
            except TimeoutError:
                break
        batch, self.items = self.items[: self.max_batch], self.items[self.max_batch :]
        if len(self.items) < self.max_batch:
            self._full.clear()
        return batch


class ThreadBatches:
    """Blocking calls on worker threads, handed over in batches while the workers are busy.

    For CPU-bound calls that release the GIL (ML-DSA-44 signing, ~0.6 ms each).
    Handing each call to a thread on its own costs a future, a thread wake-up, a
    self-pipe write back to the event loop and two trips of the GIL: about 0.2 ms
    of CPU per call, a sixth of what a witness spends per ML-DSA-44 cosignature.
    Here a call goes to an idle worker at once (the loop's next turn, so calls
    made in one turn travel together); calls made while every worker is busy
    wait, and a worker that frees takes its share of them (the queue divided by
    the number of workers, at most `max_batch`) in one hand-off. Calls of one
    batch run in order; each call's exception reaches only its own caller; a
    call whose caller has gone before its batch left is not run.
    """

    def __init__(self, executor: Executor, workers: int, max_batch: int = 16) -> None:
        if workers < 1 or max_batch < 1:
            raise ValueError("workers and max_batch must be at least 1")
        self._executor, self._workers, self._idle, self._max = executor, workers, workers, max_batch
        self._pending: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []
        self._scheduled = False

    async def run(self, fn: Callable[[], R]) -> R:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[R] = loop.create_future()
        self._pending.append((fn, fut))
        if self._idle and not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._dispatch)
        return await fut

    def _dispatch(self) -> None:
        self._scheduled = False
        loop = asyncio.get_running_loop()
        self._pending = [(fn, f) for fn, f in self._pending if not f.done()]  # callers gone: not run
        # A share of the queue for every worker, idle or not: a worker that frees a moment
        # later finds its share rather than an empty queue and a core left idle.
        share = min(self._max, -(-len(self._pending) // self._workers))
        while self._idle and self._pending:
            batch, self._pending = self._pending[:share], self._pending[share:]
            futures = [f for _, f in batch]
            try:
                done = loop.run_in_executor(self._executor, _call_each, [fn for fn, _ in batch])
            except RuntimeError as exc:  # the executor is shut down: nothing will run
                _settle(futures, [(False, exc)] * len(futures))
                continue
            self._idle -= 1
            done.add_done_callback(partial(self._finished, futures))

    def _finished(self, futures: list[asyncio.Future[Any]], done: asyncio.Future[list[tuple[bool, Any]]]) -> None:
        self._idle += 1
        if done.cancelled():
            for fut in futures:
                fut.cancel()
        elif (exc := done.exception()) is not None:
            _settle(futures, [(False, exc)] * len(futures))
        else:
            _settle(futures, done.result())
        if self._pending and not self._scheduled:
            self._dispatch()


def _settle(futures: list[asyncio.Future[Any]], outcomes: list[tuple[bool, Any]]) -> None:
    for fut, (ok, value) in zip(futures, outcomes, strict=True):
        if not fut.done():  # its caller may have gone (cancelled)
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)


def _call_each(fns: list[Callable[[], Any]]) -> list[tuple[bool, Any]]:
    out: list[tuple[bool, Any]] = []
    for fn in fns:
        try:
            out.append((True, fn()))
        except StopIteration as exc:  # a future refuses StopIteration (it would strand the batch)
            err = RuntimeError("the call raised StopIteration")
            err.__cause__ = exc
            out.append((False, err))
        except Exception as exc:  # noqa: BLE001 (handed to that call's own caller, as run_in_executor would)
            out.append((False, exc))
    return out
