"""The sequencer: one task owns appends (docs/architecture.md §3.3).

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
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

from tlog.errors import LogHalted, NotPublished, Unavailable
from tlog.service.batching import BatchQueue
from tlog.storage.interface import LogState, LogStorage, Signer

log = logging.getLogger("oap.tlog.sequencer")

Publisher = Callable[[LogState], Awaitable[LogState]]


class Added(NamedTuple):  # a tuple: one is made per appended entry, on the event loop
    index: int  # type: ignore[assignment]  # shadows tuple.index, which nothing here calls
    leaf_hash: bytes
    fresh: bool
    state: LogState  # the published checkpoint that covers this entry


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs ~2 µs, paid per single append
class AddedBatch:
    """The outcome of `add_many`: per entry, its index, leaf hash and whether it is new;
    `state` is the published checkpoint that covers all of them (the latest of the
    batches they were committed in). Lists, not one object per entry: a batch request
    has thousands of entries and the event loop handles every one."""

    indices: list[int]
    leaf_hashes: list[bytes]
    fresh: list[bool]
    state: LogState

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Added:
        return Added(self.indices[i], self.leaf_hashes[i], self.fresh[i], self.state)


class _Group:
    """One submission (one entry or a whole batch request): one future for all of it.

    The queue holds only entry bytes; a group is the span of `n` consecutive queued
    entries, and a committed batch hands each group its slice of the batch's result
    lists: no per-entry object or callback on the event loop.
    """

    __slots__ = ("future", "n", "indices", "leaves", "fresh", "filled", "left")

    def __init__(self, future: asyncio.Future, n: int) -> None:
        self.future, self.n = future, n
        self.indices: list[int] | None = None  # filled in when the group spans batches
        self.leaves: list[bytes] | None = None
        self.fresh: list[bool] | None = None
        self.filled = 0  # entries of this group already committed
        self.left = n  # entries of this group not yet taken into a batch


class Sequencer:
    def __init__(
        self,
        store: LogStorage,
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
        self._queue: BatchQueue[bytes] = BatchQueue(max_batch, batch_interval)
        self._spans: deque[_Group] = deque()  # the groups of the queued entries, in queue order
        self._task: asyncio.Task | None = None
        self._closing = False
        self._retry: asyncio.Task | None = None
        self._publish_lock = asyncio.Lock()
        self.state: LogState | None = None
        self.published = False  # False until a checkpoint reached the publisher (witness quorum)
        self.halted: LogHalted | None = None  # set for good when signing on would fork the log
        self.on_publish: list[Callable[[LogState], None]] = []  # called with each newly served state

    @property
    def running(self) -> bool:
        """The sequencing task is alive (it stops only at close, or on a bug)."""
        return self._task is not None and not self._task.done()

    async def _in_writer(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.writer, fn, *args)

    async def start(self) -> LogState:
        state = await self._in_writer(self.store.open, self.sign)
        self.state = state
        if self.publisher is None:
            self._serve(state)
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
        publisher = self.publisher
        assert publisher is not None, "_publish runs only with a publisher"
        async with self._publish_lock:
            current = self.state
            if self.published and current is not None and state.size <= current.size:
                return current
            try:
                out = await publisher(state)
            except LogHalted as e:
                if self.halted is None:
                    log.critical("HALTED: %s", e.message)
                self.halted = e
                raise
            self._serve(out)
            return out

    def observe(self, state: LogState) -> None:
        """A newer published state that another frontend produced (shared storage): serve it."""
        if self.publisher is None and (self.state is None or state.size > self.state.size
                                       or (state.size == self.state.size and state.note != self.state.note)):
            self._serve(state)

    def _serve(self, state: LogState) -> None:
        """`state` is the one readers get from now on; tell the `on_publish` listeners."""
        self.state = state
        self.published = True
        for fn in self.on_publish:
            fn(state)

    def _schedule_republish(self) -> None:
        if self._retry is None or self._retry.done():
            self._retry = asyncio.create_task(self._republish(), name="tlog-republish")

    async def _republish(self) -> None:
        """Retry publishing the latest durable checkpoint, with backoff, until it works."""
        delay = 0.5
        while not self._closing and self.halted is None:
            await asyncio.sleep(delay)
            durable = self.store.state
            if durable is None or (self.published and self.state is not None and durable.size == self.state.size):
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
        self._queue.put(datas)
        self._spans.append(group)
        return group.future

    async def add(self, data: bytes) -> Added:
        return (await asyncio.shield(self.submit(data)))[0]

    def submit(self, data: bytes) -> asyncio.Future:
        """`add` without a coroutine: the future of a one-entry AddedBatch.

        Single appends are answered a committed batch at a time (`tlog.server.appends`), from
        a callback on this future; a task per entry would cost more than the entry.
        Nothing else may cancel it: the sequencer resolves it once the batch is done.
        """
        return self._enqueue([data])

    async def add_many(self, datas: Sequence[bytes]) -> AddedBatch:
        """All or nothing for the caller: resolves when every entry is durable (and published)."""
        if not datas:
            if self.state is None:
                raise Unavailable("the log is not open yet")
            return AddedBatch([], [], [], self.state)
        return await asyncio.shield(self._enqueue(datas))

    # --- the loop ------------------------------------------------------------------

    async def _run(self) -> None:
        while (batch := await self._queue.next_batch()) is not None:
            await self._commit(batch)

    def _take_spans(self, n: int) -> list[tuple[_Group, int, int]]:
        """The groups the next `n` queued entries belong to: (group, first position, count)."""
        spans = []
        while n:
            g = self._spans[0]
            k = min(n, g.left)
            spans.append((g, g.n - g.left, k))
            g.left -= k
            n -= k
            if g.left == 0:
                self._spans.popleft()
        return spans

    async def _commit(self, batch: list[bytes]) -> None:
        t0 = time.perf_counter()
        spans = self._take_spans(len(batch))
        try:
            result = await self._in_writer(self.store.append, batch, self.sign)
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
            err = e if isinstance(e, Unavailable) else \
                Unavailable(f"the log could not persist the entry: {type(e).__name__}")
            for g, _, _ in spans:
                if not g.future.done():
                    g.future.set_exception(err)
                    g.future.exception()  # mark retrieved: waiters may be gone
            return
        if self.publisher is None:
            self._serve(state)
        at = 0
        for g, pos, k in spans:
            done: AddedBatch | None
            if k == g.n:  # the whole group in this batch (always, for a single entry)
                done = AddedBatch(result.indices[at : at + k], result.leaves[at : at + k],
                                  result.fresh[at : at + k], state)
            else:
                if g.indices is None or g.leaves is None or g.fresh is None:
                    g.indices, g.leaves, g.fresh = [0] * g.n, [b""] * g.n, [False] * g.n
                indices, leaves, fresh = g.indices, g.leaves, g.fresh
                indices[pos : pos + k] = result.indices[at : at + k]
                leaves[pos : pos + k] = result.leaves[at : at + k]
                fresh[pos : pos + k] = result.fresh[at : at + k]
                done = AddedBatch(indices, leaves, fresh, state) if g.filled + k == g.n else None
            g.filled += k
            at += k
            if done is not None and not g.future.done():
                g.future.set_result(done)
        if self.on_batch is not None:
            self.on_batch(len(batch), time.perf_counter() - t0)
