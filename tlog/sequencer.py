"""The sequencer: one task owns appends (DESIGN §3.3).

Submissions queue; a batch closes after `max_batch` entries or
`batch_interval` seconds after its first entry; the writer thread commits it
with one transaction and one fsync and signs one checkpoint. `add()` returns
only once its entry and the checkpoint covering it are durable (and, when a
publisher is configured, once the checkpoint is published, e.g. cosigned).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from .batching import BatchQueue
from .errors import LogHalted, NotPublished, Unavailable
from .hashing import leaf_hash, leaf_hashes
from .store import LogState, LogStore, Signer

log = logging.getLogger("oap.tlog.sequencer")

Publisher = Callable[[LogState], Awaitable[LogState]]


class Added(NamedTuple):  # a tuple: one is made per appended entry, on the event loop
    index: int
    leaf_hash: bytes
    fresh: bool
    state: LogState  # the published checkpoint that covers this entry


class _Group:
    """One submission (one entry or a whole batch request): one future for all of it.

    A future per entry cost three event-loop callbacks per entry and showed in
    profiles; the store deduplicates within and across batches, so no per-entry
    bookkeeping is needed here.
    """

    __slots__ = ("future", "results", "left")

    def __init__(self, future: asyncio.Future, n: int) -> None:
        self.future, self.results, self.left = future, [None] * n, n


# A queued entry: (leaf hash, data, its group, its position in the group). A tuple, because
# the event loop makes one per entry while the writer thread competes for the GIL.
_Pending = tuple[bytes, bytes, _Group, int]


class Sequencer:
    def __init__(
        self,
        store: LogStore,
        sign: Signer,
        *,
        max_batch: int = 1024,
        batch_interval: float = 0.05,
        max_pending: int = 100_000,
        publisher: Publisher | None = None,
        on_batch: Callable[[int, float], None] | None = None,
    ) -> None:
        self.store = store
        self.sign = sign
        self.max_batch = max_batch
        self.batch_interval = batch_interval
        self.max_pending = max_pending
        self.publisher = publisher
        self.on_batch = on_batch
        self.writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tlog-writer")
        self._queue: BatchQueue[_Pending] = BatchQueue(max_batch, batch_interval)
        self._task: asyncio.Task | None = None
        self._closing = False
        self._retry: asyncio.Task | None = None
        self._publish_lock = asyncio.Lock()
        self.state: LogState | None = None
        self.published = False  # False until a checkpoint reached the publisher (witness quorum)
        self.halted: LogHalted | None = None  # set for good when signing on would fork the log

    async def _in_writer(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.writer, fn, *args)

    async def start(self) -> LogState:
        state = await self._in_writer(self.store.open, self.sign)
        self.state = state
        if self.publisher is None:
            self.published = True
        else:
            try:
                await self._publish(state)
            except LogHalted:
                pass  # logged by _publish; writes stay refused
            except Unavailable as e:
                log.warning("starting without a published checkpoint: %s", e.message)
                self._schedule_republish()
        self._task = asyncio.create_task(self._run(), name="tlog-sequencer")
        return self.state

    async def _publish(self, state: LogState) -> LogState:
        """Run the publisher one call at a time; the served state never moves backwards."""
        async with self._publish_lock:
            if self.published and state.size <= self.state.size:
                return self.state
            try:
                out = await self.publisher(state)
            except LogHalted as e:
                if self.halted is None:
                    log.critical("HALTED: %s", e.message)
                self.halted = e
                raise
            self.state = out
            self.published = True
            return out

    def _schedule_republish(self) -> None:
        if self._retry is None or self._retry.done():
            self._retry = asyncio.create_task(self._republish(), name="tlog-republish")

    async def _republish(self) -> None:
        """Retry publishing the latest durable checkpoint, with backoff, until it works."""
        delay = 0.5
        while not self._closing and self.halted is None:
            await asyncio.sleep(delay)
            durable = self.store.state
            if durable is None or (self.published and durable.size == self.state.size):
                return
            try:
                await self._publish(durable)
                return
            except Unavailable:
                delay = min(delay * 2, 30.0)

    async def close(self) -> None:
        """Stop accepting, finish what is queued, and close the store cleanly."""
        self._closing = True
        self._queue.close()
        if self._task is not None:
            await self._task
        if self._retry is not None:
            self._retry.cancel()
        await self._in_writer(self.store.close)
        self.writer.shutdown(wait=True)

    # --- submissions ---------------------------------------------------------------

    def _enqueue(self, datas: Sequence[bytes]) -> asyncio.Future:
        if self._closing:
            raise Unavailable("the log is shutting down")
        if self.halted is not None:
            raise self.halted
        if len(self._queue) + len(datas) > self.max_pending:
            raise Unavailable("the log is at capacity; retry shortly", retry_after=1)
        group = _Group(asyncio.get_running_loop().create_future(), len(datas))
        if len(datas) == 1:
            self._queue.put([(leaf_hash(datas[0]), datas[0], group, 0)])
        else:
            digests = leaf_hashes(datas).tobytes()
            self._queue.put([(digests[32 * i : 32 * i + 32], d, group, i) for i, d in enumerate(datas)])
        return group.future

    async def add(self, data: bytes) -> Added:
        return (await asyncio.shield(self._enqueue([data])))[0]

    async def add_many(self, datas: Sequence[bytes]) -> list[Added]:
        """All or nothing for the caller: resolves when every entry is durable (and published)."""
        if not datas:
            return []
        return list(await asyncio.shield(self._enqueue(datas)))

    # --- the loop ------------------------------------------------------------------

    async def _run(self) -> None:
        while (batch := await self._queue.next_batch()) is not None:
            await self._commit(batch)

    async def _commit(self, batch: list[_Pending]) -> None:
        t0 = time.perf_counter()
        try:
            result = await self._in_writer(self.store.commit_batch, [(p[0], p[1]) for p in batch], self.sign)
            state = result.state
            if self.publisher is not None:  # returns the published (cosigned) state covering the batch
                try:
                    state = await self._publish(state)
                except LogHalted:
                    raise
                except Unavailable:
                    self._schedule_republish()
                    raise
        except Exception as e:  # not durable, or durable but not yet published: a 503 for every waiter
            if isinstance(e, NotPublished):
                log.warning("batch of %d entries is durable but not published: %s", len(batch), e.message)
            elif isinstance(e, Unavailable):
                log.error("batch of %d entries refused: %s", len(batch), e.message)
            else:
                log.error("could not persist a batch of %d entries; writes answer 503 until this clears: %s: %s",
                          len(batch), type(e).__name__, e)
            err = e if isinstance(e, Unavailable) else Unavailable(f"the log could not persist the entry: {type(e).__name__}")
            for p in batch:
                fut = p[2].future
                if not fut.done():
                    fut.set_exception(err)
                    fut.exception()  # mark retrieved: waiters may be gone
            return
        if self.publisher is None:
            self.state = state
        for (leaf, _, g, pos), idx, fresh in zip(batch, result.indices, result.fresh):
            g.results[pos] = Added(idx, leaf, fresh, state)
            g.left -= 1
            if g.left == 0 and not g.future.done():
                g.future.set_result(g.results)
        if self.on_batch is not None:
            self.on_batch(len(batch), time.perf_counter() - t0)
