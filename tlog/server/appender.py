"""The appender: the one write loop of the log, for every storage driver (docs/architecture.md §3.3).

Submissions queue (`tlog.runtime.batching.BatchQueue`); a batch closes after `max_batch`
entries or `batch_interval` seconds after its first entry and is sequenced by the driver
(durable indices, exactly once, dedup). The frontend that holds the integrator lease (the
embedded log always does) then, in this order, which survives a crash at any step:

1. extends its hash cache over everything sequenced, and stages the new full tiles and
   entry bundles in the publisher (the bucket), if there is one;
2. signs the checkpoint and records it in the store by compare-and-swap under the lease
   (the fork guard: one root per size, ever);
3. has it cosigned by the witnesses (`tlog.server.witnessing`), when configured;
4. publishes it: the store's published head and, at most once per interval, the bucket's
   checkpoint object, in one transaction fenced by the lease's epoch;
5. answers every waiting submission the published checkpoint covers.

A lease holder that finds a checkpoint signed but not published (its predecessor died in
between) brings its hash cache to that size and publishes it at once, with no new entry
needed. A start serves the store's published head before anything else is reached (with
witnesses: if it meets the quorum configured now), so a bucket or witnesses that are down
stop writes, not reads; with witnesses, the signed head is cosigned again before anything
new is signed. Frontends without the lease follow the heads others publish (`Driver.follow`)
and answer their own submissions from them. A publication that fails (no witness quorum,
the bucket down) answers the waiting submissions 503 at once, is recorded for the other
frontends to do the same, and is retried with backoff; a fork or a witness that has seen
more of the log than it holds halts writes for good.

Driver calls are synchronous and run on one thread (`_call`); `Driver.follow` blocks on a
second one, and a driver whose sequencing shares nothing with the rest (PostgreSQL: its own
connection) sequences on a third, so that a frontend's writes are not queued behind its
integration. The loop itself is asyncio.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple, TypeVar

from tlog.errors import ForkError, LogHalted, NotPublished, OAPError, Unavailable
from tlog.formats.note import NoteSignature, add_signatures
from tlog.merkle.tree import TreeView
from tlog.runtime.batching import BatchQueue
from tlog.storage.interface import (
    CorruptionError,
    Driver,
    Fault,
    Head,
    Lease,
    LeaseLost,
    LogState,
    Publisher,
    Sequenced,
    SignedHead,
    Signer,
)

log = logging.getLogger("oap.tlog.appender")

Cosigner = Callable[[LogState], Awaitable[LogState]]
"""Has a signed state cosigned by the witness quorum (NotPublished if it is not met)."""

QuorumCheck = Callable[[str], bool]
"""Whether a checkpoint note already carries the cosignatures the witness quorum now
configured requires (a head the store recorded as published may predate a policy change)."""

FAULT_POINTS = ("after_sign", "after_record")
"""Where the appender calls its `faults` hook: with a checkpoint signed but not recorded, and
recorded by compare-and-swap but not yet published."""

RETRY_MIN, RETRY_MAX = 0.5, 5.0  # seconds between attempts to publish after a failure
ACQUIRE_INTERVAL = 1.0  # seconds between attempts to take the integrator role
FOLLOW_TIMEOUT = 0.5  # seconds a follower waits for a notification before reading the head anyway
VERIFY_INTERVAL = 0.5  # seconds between checks of the holder's lease (well under Driver.lease_ttl)
CLOSE_WAIT = 10.0  # seconds a close waits for queued submissions to be published

T = TypeVar("T")


def _message(e: BaseException) -> str:
    """What to tell a client (or the log) about `e`."""
    return e.message if isinstance(e, OAPError) else f"{type(e).__name__}: {e}"


class Added(NamedTuple):  # a tuple: one is made per appended entry, on the event loop
    index: int  # type: ignore[assignment]  # shadows tuple.index, which nothing here calls
    leaf_hash: bytes
    fresh: bool
    state: LogState  # the published checkpoint that covers this entry


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs ~2 µs, paid per single append
class AddedBatch:
    """The outcome of `add_many`: per entry, its index, leaf hash and whether it is new;
    `state` is the published checkpoint that covers all of them. Lists, not one object per
    entry: a batch request has thousands of entries and the event loop handles every one."""

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
    entries, and a sequenced batch hands each group its slice of the batch's result
    lists: no per-entry object or callback on the event loop.
    """

    __slots__ = ("covering", "filled", "fresh", "future", "indices", "leaves", "left", "n")

    def __init__(self, future: asyncio.Future, n: int) -> None:
        self.future, self.n = future, n
        self.indices: list[int] | None = None  # filled in when the group spans batches
        self.leaves: list[bytes] | None = None
        self.fresh: list[bool] | None = None
        self.filled = 0  # entries of this group already sequenced
        self.left = n  # entries of this group not yet taken into a batch
        self.covering = 0  # the smallest tree that holds every entry of it sequenced so far


class _Waiting:
    """The submissions a sequenced batch completed, waiting for a published checkpoint of at
    least `covering` entries: per submission, its future and its index, leaf hash and
    freshness lists."""

    __slots__ = ("covering", "done", "entries", "t0")

    def __init__(self, covering: int, done: list[tuple[asyncio.Future, list[int], list[bytes], list[bool]]],
                 entries: int, t0: float) -> None:
        self.covering, self.done, self.entries, self.t0 = covering, done, entries, t0


class Appender:
    """The log's write loop over one `Driver` (see the module docstring).

    The HTTP layer uses `add`, `submit`, `add_many`, `state`, `published`, `on_publish`,
    `halted` and `running`; metrics read `integrating`, `lag`, `lost_role` and `publisher`.
    """

    def __init__(
        self,
        driver: Driver,
        sign: Signer,
        *,
        publisher: Publisher | None = None,
        cosign: Cosigner | None = None,
        cosigned: QuorumCheck | None = None,
        max_batch: int = 1024,
        batch_interval: float = 0.05,
        max_pending: int = 100_000,
        wait_timeout: float = 30.0,
        on_batch: Callable[[int, float], None] | None = None,
        faults: Fault | None = None,
    ) -> None:
        """`wait_timeout`: the longest a submission waits for a published checkpoint covering it
        when no publication is attempted at all (no frontend holds the role); a failed attempt
        answers it at once. `cosigned`: with `cosign`, which published heads of the store may be
        served as they are; without it, none is before it is cosigned again. `faults`: a test
        hook called at `FAULT_POINTS` (None in production)."""
        self.driver = driver
        self.sign = sign
        self.publisher = publisher
        self.cosign = cosign
        self.cosigned = cosigned
        self.max_batch = max_batch
        self.batch_interval = batch_interval
        self.max_pending = max_pending
        self.wait_timeout = wait_timeout
        self.on_batch = on_batch
        self.faults = faults
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tlog-driver")
        self._follow_io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tlog-follow")
        self._sequence_io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tlog-sequence") \
            if driver.parallel_sequencing else self._io
        self._queue: BatchQueue[bytes] = BatchQueue(max_batch, batch_interval)
        self._spans: deque[_Group] = deque()  # the groups of the queued entries, in queue order
        self._waiting: list[tuple[int, int, _Waiting]] = []  # a heap by covering size
        self._order = itertools.count()
        self._unanswered = 0  # entries sequenced and not yet answered
        self._tasks: list[asyncio.Task] = []
        self._task: asyncio.Task | None = None  # the sequencing loop
        self._closing = False  # no new submissions
        self._closed = False
        self._stopping = False  # the background tasks end
        self._kick = asyncio.Event()  # something for the integrator to do
        self._stop = asyncio.Event()
        self._lease: Lease | None = None
        self._verified_at = 0.0
        self._ready = False  # the holder has made the store and the bucket whole (_take_over)
        self._backfilling = False  # the holder has derived data of the store to bring up to date
        self._sequenced = 0  # the largest sequenced size seen
        self._bucket_pending: tuple[int, str] | None = None  # published, not yet in the bucket
        self._recosign = cosign is not None  # the witnesses see the signed head again before anything new is signed
        self._refused: tuple[int, str] | None = None  # the last published head not served for want of a quorum
        self._failure_seen = 0.0  # when the last failure a follower answered waiters with was recorded
        self._late: list[tuple[int, bytes, tuple[NoteSignature, ...]]] = []  # cosignatures after publication
        self.state: LogState | None = None  # the published state readers get (or, before any, the signed one)
        self.published = False  # False until a checkpoint was published (with witnesses: their quorum)
        self.halted: LogHalted | None = None  # set for good when signing on would fork the log
        self.on_publish: list[Callable[[LogState], None]] = []  # called with each newly served state
        self.lag = 0  # entries sequenced beyond the published head, as last seen
        self.lost_role = 0  # times this frontend lost the integrator role
        self.failures = 0  # failed publication attempts seen (here, or recorded by the integrator)

    # --- what the HTTP layer and the metrics read ----------------------------------------

    @property
    def running(self) -> bool:
        """The sequencing task is alive (it stops only at close, or on a bug)."""
        return self._task is not None and not self._task.done()

    @property
    def sequenced(self) -> int:
        """The largest number of entries sequenced, as this frontend last saw it: no checkpoint
        of this log, by any frontend, is larger."""
        return self._sequenced

    @property
    def integrating(self) -> bool:
        """This frontend holds the integrator role (as of a check within the lease's TTL)."""
        return self._lease is not None and time.monotonic() - self._verified_at < self.driver.lease_ttl

    async def _call(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """Run a driver call on the driver thread."""
        return await asyncio.get_running_loop().run_in_executor(self._io, partial(fn, *args, **kw))

    def _fault(self, name: str) -> None:
        if self.faults is not None:
            self.faults(name)

    def add_cosignatures(self, size: int, root: bytes, signatures: Sequence[NoteSignature]) -> None:
        """Cosignatures (verified by the caller) of the checkpoint of (size, root) that came after
        it was published, such as a mirror's that never holds up a write
        (`tlog.server.mirroring`): merged into the served checkpoint and published again (the
        store's head, the bucket's checkpoint) if it still is that tree, else dropped. Done by
        the integrator between integrations, so it never races a publication."""
        if self._lease is None or not signatures:
            return
        self._late.append((size, root, tuple(signatures)))
        self._kick.set()

    def halt(self, reason: LogHalted) -> None:
        """Refuse writes for good (a cosigner has seen a larger tree of this log than it holds):
        signing on could fork the log."""
        self._halt(reason)

    # --- start and close ---------------------------------------------------------------------

    async def start(self) -> LogState | None:
        """Open the store, serve what it has published, start the loops. A store that nothing
        else writes to (embedded) is integrated and published before this returns; a shared
        one is waited on (up to `wait_timeout`) until some frontend has signed something."""
        head = await self._call(self.driver.open)
        self._sequenced = head.sequenced
        if head.published is not None:  # served while the bucket or the witnesses are still out of reach
            await self._serve_head(head.published[0], head.published[1])
        if not self.published and head.signed is not None:
            signed = self._state_of(head.signed.size, await self._call(self.driver.extend, head.signed.size),
                                    head.signed.note)
            if signed.root != head.signed.root:
                raise CorruptionError(f"the hash cache does not reproduce the root signed for size {signed.size}")
            if self.cosign is None:
                self._serve(signed)  # nothing to add to it: what was published before a restart, or more
            else:
                self.state = signed  # shown (not served) until the witnesses cosign it again
        if not self.driver.shared and not self.driver.read_only:
            try:
                if await self._take_role():
                    await self._take_over()
                    await self._integrate_once()
            except (ForkError, LogHalted) as e:
                self._halt(e)
            except (Unavailable, CorruptionError) as e:  # reads are served all the same (what was published)
                log.warning("publication is failing at start (writes are answered 503 until it works): %s",
                            _message(e))
                self._publication_failed(e)
        self._task = asyncio.create_task(self._run(), name="tlog-appender")
        if not self.driver.read_only:
            self._tasks.append(asyncio.create_task(self._integrate_loop(), name="tlog-integrator"))
        elif self.state is not None:
            self._tasks.append(asyncio.create_task(self._publish_read_only(), name="tlog-publish"))
        if self.driver.shared:
            self._tasks.append(asyncio.create_task(self._follow_loop(), name="tlog-follow"))
            self._tasks.append(asyncio.create_task(self._heartbeat(), name="tlog-lease"))
            deadline = time.monotonic() + self.wait_timeout
            while self.state is None and not self.failures and self.halted is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        return self.state

    async def close(self) -> None:
        """Stop accepting, sequence what is queued, wait (bounded) for it to be published,
        write the bucket's pending checkpoint while still holding the role, give the role up
        and close the store."""
        if self._closed:
            return
        self._closed = True
        self._closing = True
        self._queue.close()
        if self._task is not None:
            await self._task
        deadline = time.monotonic() + min(self.wait_timeout, CLOSE_WAIT)
        while self._waiting and self.halted is None and time.monotonic() < deadline:
            self._kick.set()
            await asyncio.sleep(0.02)
        self._stopping = True
        self._stop.set()
        self._kick.set()
        for t in self._tasks:
            try:
                await t
            except Exception as e:  # noqa: BLE001 - a bug in a loop: logged, the close goes on
                log.error("%s ended with %s: %s", t.get_name(), type(e).__name__, e)
        self._fail_waiting(Unavailable("the log is shutting down", retry_after=1))
        lease, self._lease = self._lease, None  # not integrating any more, before the role is released
        if lease is not None:
            if self._bucket_pending is not None and self.halted is None:
                try:
                    await self._flush_bucket(lease)
                except (LeaseLost, Unavailable, ForkError) as e:  # the next holder writes it
                    log.warning("the bucket's last checkpoint was not written: %s", _message(e))
            await self._call(self.driver.release, lease)
        if self.publisher is not None:
            await self._call(self.publisher.close)
        await self._call(self.driver.close)
        self._io.shutdown(wait=True)
        self._follow_io.shutdown(wait=True)
        self._sequence_io.shutdown(wait=True)

    # --- submissions -----------------------------------------------------------------------

    def _enqueue(self, datas: Sequence[bytes]) -> asyncio.Future:
        if self._closing:
            raise Unavailable("the log is shutting down")
        if self.halted is not None:
            raise self.halted
        if len(self._queue) + self._unanswered + len(datas) > self.max_pending:
            raise Unavailable("the log is at capacity; retry shortly", retry_after=1)
        group = _Group(asyncio.get_running_loop().create_future(), len(datas))
        self._queue.put(datas)
        self._spans.append(group)
        return group.future

    async def add(self, data: bytes) -> Added:
        return (await asyncio.shield(self.submit(data)))[0]

    def submit(self, data: bytes) -> asyncio.Future:
        """`add` without a coroutine: the future of a one-entry AddedBatch.

        Single appends are answered a published batch at a time (`tlog.server.appends`), from
        a callback on this future; a task per entry would cost more than the entry.
        Nothing else may cancel it: the appender resolves it once it is published (or failed).
        """
        return self._enqueue([data])

    async def add_many(self, datas: Sequence[bytes]) -> AddedBatch:
        """All or nothing for the caller: resolves when every entry is durable and published."""
        if not datas:
            if self.state is None:
                raise Unavailable("the log is not open yet", retry_after=1)
            return AddedBatch([], [], [], self.state)
        return await asyncio.shield(self._enqueue(datas))

    # --- sequencing -------------------------------------------------------------------------

    async def _run(self) -> None:
        while (batch := await self._queue.next_batch()) is not None:
            await self._sequence(batch)

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

    async def _sequence(self, batch: list[bytes]) -> None:
        t0 = time.perf_counter()
        spans = self._take_spans(len(batch))
        try:
            seq = await asyncio.get_running_loop().run_in_executor(self._sequence_io, self.driver.sequence, batch)
        except Exception as e:  # noqa: BLE001 - not sequenced: a 503 for every submission of the batch
            if isinstance(e, Unavailable):
                log.error("batch of %d entries refused: %s", len(batch), e.message)
            else:
                log.error("could not persist a batch of %d entries; writes answer 503 until this clears: %s: %s",
                          len(batch), type(e).__name__, e)
            err = e if isinstance(e, Unavailable) else \
                Unavailable(f"the log could not persist the entry: {type(e).__name__}")
            for g, _, _ in spans:
                self._settle(g.future, error=err)
            return
        if seq.size > self._sequenced:
            self._sequenced = seq.size
            self._kick.set()
        self._wait_for(spans, seq, t0)

    def _wait_for(self, spans: list[tuple[_Group, int, int]], seq: Sequenced, t0: float) -> None:
        """Hand each group its slice of the batch; those now complete wait for a published
        checkpoint that covers all their entries."""
        at = 0
        done: list[tuple[asyncio.Future, list[int], list[bytes], list[bool]]] = []
        covering = 0
        for g, pos, k in spans:
            indices = seq.indices[at : at + k]
            g.covering = max(g.covering, max(indices) + 1)
            if k == g.n:  # the whole group in this batch (always, for a single entry)
                done.append((g.future, indices, seq.leaves[at : at + k], seq.fresh[at : at + k]))
                covering = max(covering, g.covering)
            else:
                if g.indices is None or g.leaves is None or g.fresh is None:
                    g.indices, g.leaves, g.fresh = [0] * g.n, [b""] * g.n, [False] * g.n
                g.indices[pos : pos + k] = indices
                g.leaves[pos : pos + k] = seq.leaves[at : at + k]
                g.fresh[pos : pos + k] = seq.fresh[at : at + k]
                if g.filled + k == g.n:
                    done.append((g.future, g.indices, g.leaves, g.fresh))
                    covering = max(covering, g.covering)
            g.filled += k
            at += k
        if not done:  # only middle parts of large submissions: waits all the same, for the metrics
            covering = max(seq.indices) + 1
        w = _Waiting(covering, done, len(seq.indices), t0)
        if self.halted is not None:  # halted while this batch was sequenced: nothing will publish it
            for future, *_ in done:
                self._settle(future, error=self.halted)
            return
        if self.published and self.state is not None and covering <= self.state.size:
            self._resolve(w, self.state)
            return
        self._unanswered += w.entries
        heapq.heappush(self._waiting, (covering, next(self._order), w))

    def _resolve(self, w: _Waiting, state: LogState) -> None:
        for future, indices, leaves, fresh in w.done:
            self._settle(future, result=AddedBatch(indices, leaves, fresh, state))
        if self.on_batch is not None:
            self.on_batch(w.entries, time.perf_counter() - w.t0)

    @staticmethod
    def _settle(future: asyncio.Future, *, result: Any = None, error: BaseException | None = None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
            future.exception()  # mark retrieved: waiters may be gone
        else:
            future.set_result(result)

    def _answer(self, state: LogState) -> None:
        """Answer every waiting submission `state` covers."""
        while self._waiting and self._waiting[0][0] <= state.size:
            _, _, w = heapq.heappop(self._waiting)
            self._unanswered -= w.entries
            self._resolve(w, state)

    def _fail_waiting(self, error: Exception, *, older_than: float | None = None) -> None:
        """Answer every waiting submission (or those waiting since before `older_than`) with `error`."""
        keep = []
        for item in self._waiting:
            w = item[2]
            if older_than is not None and w.t0 >= older_than:
                keep.append(item)
                continue
            self._unanswered -= w.entries
            for future, *_ in w.done:
                self._settle(future, error=error)
        if len(keep) != len(self._waiting):
            heapq.heapify(keep)
            self._waiting = keep

    def _expire_waiting(self) -> None:
        if self._waiting:
            self._fail_waiting(Unavailable("the entries are sequenced but no checkpoint covering them was published "
                                           "in time (is an integrator running?)", retry_after=1),
                               older_than=time.perf_counter() - self.wait_timeout)

    # --- serving ---------------------------------------------------------------------------

    def _state_of(self, size: int, root: bytes, note: str) -> LogState:
        return LogState(size, root, note, TreeView(size, self.driver.hashes.read))

    def _servable(self, note: str) -> bool:
        """Whether a head the store recorded as published may be served (or written to the
        bucket) as it is: with witnesses, only if it meets the quorum configured now."""
        return self.cosign is None or (self.cosigned is not None and self.cosigned(note))

    async def _serve_head(self, size: int, note: str) -> None:
        """Serve a head published by the store (after a start, or by another frontend); one
        that lacks the witness quorum now required is not served, but cosigned again."""
        if not self._servable(note):
            if self._refused != (size, note):
                self._refused = (size, note)
                log.warning("the published checkpoint %d lacks the witness quorum now configured; "
                            "it is cosigned again before it is served", size)
            self._recosign = True
            return
        root = await self._call(self.driver.extend, size)
        self._serve(self._state_of(size, root, note))

    def _serve(self, state: LogState) -> None:
        """`state` is what readers get from now on (never a smaller tree than before); tell the
        `on_publish` listeners and answer what it covers."""
        current = self.state
        if self.published and current is not None and \
                (state.size < current.size or (state.size == current.size and state.note == current.note)):
            return
        self.state = state
        self.published = True
        self.lag = max(0, self._sequenced - state.size)
        for fn in self.on_publish:
            fn(state)
        self._answer(state)

    # --- integration (while holding the lease) -----------------------------------------------

    async def _wait(self, timeout: float) -> None:
        """Sleep until kicked (new work), stopped, or `timeout`."""
        try:
            await asyncio.wait_for(self._kick.wait(), max(0.0, timeout))
        except TimeoutError:
            pass
        self._kick.clear()

    async def _sleep(self, seconds: float) -> None:
        """Sleep until stopped or `seconds`."""
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except TimeoutError:
            pass

    async def _integrate_loop(self) -> None:
        backoff = RETRY_MIN
        while not self._stopping and self.halted is None:
            try:
                if self._lease is None:
                    if not await self._take_role():
                        await self._sleep(ACQUIRE_INTERVAL)  # not woken by new entries: someone else integrates
                        continue
                if not self._ready:
                    await self._take_over()
                self._expire_waiting()
                if await self._integrate_once():
                    backoff = RETRY_MIN
                    continue
                if self._backfilling:  # derived data, a step at a time between integrations
                    self._backfilling = await self._call(self.driver.backfill, self._lease)
                    continue
                idle = VERIFY_INTERVAL
                if self._bucket_pending is not None and self.publisher is not None:
                    idle = min(idle, self.publisher.seconds_until_due())
                await self._wait(idle)
            except LeaseLost as e:
                self._lost(e)
            except (ForkError, LogHalted) as e:
                self._halt(e)
                if self._lease is not None and self.halted is not None:  # the other frontends answer 503 too
                    try:
                        await self._call(self.driver.record_failure, self._lease, self.halted.message)
                    except (LeaseLost, Unavailable):
                        pass
            except (Unavailable, CorruptionError) as e:
                self._publication_failed(e)
                if self._lease is not None:
                    try:
                        await self._call(self.driver.record_failure, self._lease, _message(e))
                    except LeaseLost as lost:
                        self._lost(lost)
                    except Unavailable:
                        pass
                await self._wait(backoff)  # new entries retry at once; otherwise back off
                backoff = min(backoff * 2, RETRY_MAX)
            except Exception as e:  # a bug: logged, answered 503, retried
                log.exception("integration failed")
                self._publication_failed(e)
                await self._wait(backoff)
                backoff = min(backoff * 2, RETRY_MAX)

    async def _take_role(self) -> bool:
        """Try to take the integrator role (`_lease`); False if another process holds it."""
        try:
            lease = await self._call(self.driver.acquire)
        except Unavailable as e:
            log.warning("could not try for the integrator role: %s", e.message)
            return False
        if lease is None:
            return False
        if self.driver.shared:  # let a previous holder's last check of its lease run out first
            try:
                await asyncio.wait_for(self._stop.wait(), self.driver.lease_ttl)
                await self._call(self.driver.release, lease)
                return False
            except TimeoutError:
                pass
        await self._call(self.driver.verify, lease)
        self._lease, self._verified_at, self._ready = lease, time.monotonic(), False
        if self.driver.shared:
            log.info("this frontend is the integrator (epoch %d)", lease.epoch)
        return True

    async def _take_over(self) -> None:
        """Make the bucket whole before integrating anything (retried, with the role kept, until
        it works); derived data the store keeps is brought up to date after, between
        integrations (`Driver.backfill`)."""
        lease = self._lease
        assert lease is not None
        self._backfilling = True
        if self.publisher is not None:
            head = await self._call(self.driver.head)
            await self._call(self._bucket_take_over, lease, head)
        self._ready = True

    def _bucket_take_over(self, lease: Lease, head: Head) -> None:
        """(Driver thread.) The bucket catches up with the store: tiles and bundles it lacks
        (a bucket configured for a log that had entries already), partial tiles a crash left
        behind, and the checkpoint, if the store has published more than the bucket shows."""
        publisher = self.publisher
        assert publisher is not None
        signed = head.signed.size if head.signed is not None else 0
        start = publisher.checkpoint_size()  # Unavailable while the bucket is down: retried, reads go on
        if start > signed:
            raise LogHalted(f"the bucket holds a checkpoint of size {start}, beyond the {signed} entries signed in "
                            "the store (a database restored from an old backup?); writes are refused until an "
                            "operator intervenes (see ops/runbooks/backup-restore.md)")
        self.driver.extend(signed)
        publisher.take_over(self.driver, start, signed)
        if head.published is not None and start < head.published[0] and self._servable(head.published[1]):
            size, note = head.published
            self.driver.record_published(lease, size, note,
                                         write=partial(publisher.write_checkpoint, self.driver, note, size))

    async def _integrate_once(self) -> bool:
        """One step of the lease holder's work; False when there was nothing to do."""
        lease = self._lease
        assert lease is not None
        if self._recosign:
            # After a start (or for a published head that lacks the quorum now configured), the
            # witnesses cosign the signed head again before anything new is signed: one that has
            # seen a larger tree of this log halts it here, before it could sign a second root.
            signed = (await self._call(self.driver.head)).signed
            if signed is not None:
                await self._publish_signed(lease, signed)
                self._recosign = False
                return True
            self._recosign = False  # nothing signed yet: the first checkpoint is cosigned below
        head, new, wrote = await self._call(self._step, lease)
        self._sequenced = max(self._sequenced, head.sequenced)
        published = head.published[0] if head.published is not None else -1
        self.lag = max(0, head.sequenced - max(published, 0))
        if new is not None:
            self._verified_at = time.monotonic()
            if wrote is None:  # to be cosigned first
                await self._publish(lease, new)
            else:
                self._bucket_pending = None if wrote else (new.size, new.note)
                self._serve(self._state_of(new.size, new.root, new.note))
            return True
        signed = head.signed
        assert signed is not None  # _step integrates when nothing is signed
        if published < signed.size:  # signed but not published: a predecessor died in between, or a restart
            await self._publish_signed(lease, signed)
            return True
        if head.published is not None and (not self.published or self.state is None or self.state.size < published):
            await self._serve_head(*head.published)  # published already (by a predecessor): serve it
            return True
        if self._bucket_pending is not None and self.publisher is not None and self.publisher.due():
            await self._flush_bucket(lease)
            return True
        if self._late:
            await self._merge_late(lease)
            return True
        return False

    def _step(self, lease: Lease) -> tuple[Head, SignedHead | None, bool | None]:
        """(Driver thread.) The head; if entries wait, integrate them, and without witnesses
        publish the new checkpoint at once (one trip to the driver thread per checkpoint):
        (head, the new checkpoint or None, whether the bucket got it or None if unpublished)."""
        head = self.driver.head()
        signed = head.signed
        if signed is not None and head.sequenced <= signed.size:
            return head, None, None
        new = self._integrate(lease, head)
        self._fault("after_record")
        if self.cosign is not None:
            return head, new, None
        return head, new, self._record_published(lease, new.size, new.note)

    def _record_published(self, lease: Lease, size: int, note: str) -> bool:
        """(Driver thread.) Record (size, note) as published, with the bucket's checkpoint if it
        is due: whether the bucket got it (or there is none)."""
        publisher = self.publisher
        write = partial(publisher.write_checkpoint, self.driver, note, size) \
            if publisher is not None and publisher.due() else None
        self.driver.record_published(lease, size, note, write=write)
        return publisher is None or write is not None

    def _integrate(self, lease: Lease, head: Head) -> SignedHead:
        """(Driver thread.) Extend the hash cache over everything sequenced, stage the new full
        tiles, sign, and record the checkpoint by compare-and-swap."""
        old = head.signed.size if head.signed is not None else None
        target = head.sequenced
        root = self.driver.extend(target)
        if self.publisher is not None:
            self.publisher.stage(self.driver, old or 0, target)
        signed = SignedHead(target, root, self.sign(target, root))
        self._fault("after_sign")
        self.driver.record_checkpoint(lease, old, signed)
        return signed

    async def _publish_signed(self, lease: Lease, signed: SignedHead) -> None:
        """Bring the hash cache to the size of a checkpoint the store holds signed, then
        publish that very checkpoint (cosigned again, with witnesses)."""
        root = await self._call(self.driver.extend, signed.size)
        if root != signed.root:
            raise CorruptionError(f"the hash cache does not reproduce the root signed for size {signed.size}")
        await self._publish(lease, signed)

    async def _publish(self, lease: Lease, signed: SignedHead) -> None:
        """Cosign (with witnesses), then record as published (with the bucket's checkpoint, if
        due) under the lease, then serve."""
        state = self._state_of(signed.size, signed.root, signed.note)
        if self.state is None or not self.published:
            self.state = state  # shown to /v1/info before it is published
        if self.cosign is not None:
            state = await self.cosign(state)
        wrote = await self._call(self._record_published, lease, state.size, state.note)
        self._bucket_pending = None if wrote else (state.size, state.note)
        self._verified_at = time.monotonic()
        self._serve(state)

    async def _merge_late(self, lease: Lease) -> None:
        """Publish the served checkpoint again with the cosignatures `add_cosignatures` queued
        for it (those of an older tree are dropped: it is no longer served)."""
        late, self._late = self._late, []
        state = self.state
        if not self.published or state is None:
            return
        extra = [sig for size, root, sigs in late if size == state.size and root == state.root for sig in sigs]
        note = str(add_signatures(state.note, extra)) if extra else state.note
        if note == state.note:
            return
        wrote = await self._call(self._record_published, lease, state.size, note)
        if self.state is not state:  # something else was served meanwhile: that one stands
            return
        self._bucket_pending = None if wrote else (state.size, note)
        self._serve(self._state_of(state.size, state.root, note))

    async def _flush_bucket(self, lease: Lease) -> None:
        """Write the published checkpoint the interval held back, fenced by the lease."""
        pending, publisher = self._bucket_pending, self.publisher
        if pending is None or publisher is None:
            return
        size, note = pending
        await self._call(self.driver.record_published, lease, size, note,
                         write=partial(publisher.write_checkpoint, self.driver, note, size))
        if self._bucket_pending == pending:
            self._bucket_pending = None

    def _publication_failed(self, e: Exception) -> None:
        """A publication attempt failed: every waiting submission is answered 503 now (its
        entries stay sequenced; a retry finds them), and the attempt is retried."""
        message = _message(e)
        self.failures += 1
        if isinstance(e, NotPublished):
            log.warning("the checkpoint is durable but not published: %s", message)
        elif isinstance(e, CorruptionError):
            log.critical("the hash cache contradicts the store (rebuilt on the next attempt): %s", message)
        else:
            log.warning("publishing failed (retrying): %s", message)
        err = e if isinstance(e, Unavailable) else \
            Unavailable(f"the log could not publish the entry: {type(e).__name__}", retry_after=1)
        self._fail_waiting(err)

    def _lost(self, e: LeaseLost) -> None:
        if self._lease is not None:
            self.lost_role += 1
            log.warning("integrator role lost: %s", e)
        self._lease, self._ready = None, False
        self._bucket_pending = None  # the next holder writes the bucket's checkpoint

    def _halt(self, e: Exception) -> None:
        if isinstance(e, LogHalted):
            halted = e
        else:
            halted = LogHalted(f"refusing to sign on: {_message(e)}")
        if self.halted is None:
            log.critical("HALTED: %s", halted.message)
        self.halted = halted
        self._fail_waiting(halted)

    async def _heartbeat(self) -> None:
        """Check the lease every VERIFY_INTERVAL while holding it, whatever the integrator is
        waiting for (witnesses, say): `integrating` is true only within `lease_ttl` of a check."""
        while not self._stopping:
            await self._sleep(VERIFY_INTERVAL)
            lease = self._lease
            if lease is None or self._stopping or time.monotonic() - self._verified_at < VERIFY_INTERVAL:
                continue
            try:
                await self._call(self.driver.verify, lease)
                if self._lease is lease:
                    self._verified_at = time.monotonic()
            except LeaseLost as e:
                if self._lease is lease:
                    self._lost(e)

    # --- followers -----------------------------------------------------------------------

    async def _follow_loop(self) -> None:
        """Serve the heads other frontends publish; tell the integrator when they sequence."""
        loop = asyncio.get_running_loop()
        while not self._stopping:
            try:
                head = await loop.run_in_executor(self._follow_io, self.driver.follow, FOLLOW_TIMEOUT)
            except Unavailable as e:
                log.warning("following the store failed (retrying): %s", e.message)
                await self._sleep(1.0)
                continue
            if head.sequenced > self._sequenced:
                self._sequenced = head.sequenced
                self._kick.set()
            if self._lease is not None:
                continue  # the integrator serves what it publishes itself
            self._expire_waiting()
            published = head.published
            current = self.state
            if published is not None and (current is None or not self.published or published[0] > current.size
                                          or (published[0] == current.size and published[1] != current.note)):
                try:
                    await self._serve_head(*published)
                except (Unavailable, CorruptionError) as e:
                    log.warning("could not serve the published head %d: %s", published[0], e)
            else:
                self.lag = max(0, head.sequenced - (published[0] if published is not None else 0))
            if head.failure and head.failed_at != self._failure_seen:  # a new failed attempt
                self.failures += 1
                self._fail_waiting(Unavailable(f"the log could not publish: {head.failure}", retry_after=1))
            self._failure_seen = head.failed_at

    async def _publish_read_only(self) -> None:
        """A read-only store: nothing is signed here; its signed head is served (cosigned first,
        with witnesses), retried until that works."""
        backoff = RETRY_MIN
        while not self._stopping and self.halted is None and not self.published and self.state is not None:
            try:
                state = self.state
                if self.cosign is not None:
                    state = await self.cosign(state)
                self._serve(state)
            except LogHalted as e:
                self._halt(e)
            except Unavailable as e:
                log.warning("publishing failed (retrying): %s", e.message)
                await self._wait(backoff)
                backoff = min(backoff * 2, RETRY_MAX)
