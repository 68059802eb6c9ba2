"""The appender: the one write loop of the log, for every storage driver (docs/architecture.md §3.3).

Submissions queue (`tlog.runtime.batching.BatchQueue`); a batch closes after `max_batch`
entries or `batch_interval` seconds after its first entry and is sequenced by the driver
(durable indices, exactly once, dedup), on every frontend.

The integrator role is a lease in the store (`Driver.acquire`), renewed every
RENEW_INTERVAL by `_keep_role` on a thread of its own; this frontend acts on it only within
`Driver.lease_ttl` of sending its last successful renewal, and the store refuses every
write made under a lease that lapsed or was taken over (the fence). Its holder runs one
loop, `_hold`, which a reader can follow top to bottom:

0. on taking the role (`_take_over`): every target checks that it holds no more of the log
   than the store signed (the bucket's checkpoint), and with witnesses the signed head is
   cosigned again (one that has seen a larger tree halts the log here, before it could sign
   a second root); a head signed but not published (a predecessor died in between) is
   published, with no new entry needed;
1. extend the hash cache over everything sequenced, sign, and record the checkpoint by
   compare-and-swap under the lease (the fork guard: one root per size, ever);
2. have it cosigned by the witnesses and the mirrors the quorum counts, when configured;
3. record it as published: a fenced write of the store, whose published head is the log's
   single source of truth;
4. serve it: answer every waiting submission it covers, and offer it to the targets that
   follow the published head (`tlog.server.publication`: the bucket; the mirrors), each of
   which catches up in its own task, outside any transaction of the store.

Every step survives a crash before or after it. A start serves the store's published head
before anything else is reached (with witnesses: if it meets the quorum configured now),
so a bucket or witnesses that are down stop writes, not reads. Frontends without the role
follow the heads others publish (`Driver.follow`) and answer their own submissions from
them. A publication that fails (no witness quorum, a bucket that cannot be checked when the
role is taken) answers the waiting submissions 503 at once, is recorded for the other
frontends to do the same, and is retried with backoff; a fork, or a copy (witness, mirror,
bucket) that holds more of the log than the store, halts writes for good.

Driver calls are synchronous and run on one thread (`call`); the lease's on a second,
`Driver.follow` on a third, and a driver whose sequencing shares nothing with the rest
(PostgreSQL: its own connection) sequences on a fourth, so that a frontend's writes are not
queued behind its integration, nor its renewals behind a long call. The loop itself is asyncio.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, NamedTuple, TypeVar

from tlog.errors import ForkError, LogFrozen, LogHalted, NotPublished, OAPError, Unavailable
from tlog.formats.note import NoteSignature, add_signatures
from tlog.merkle.tree import TreeView
from tlog.runtime.batching import BatchQueue
from tlog.server.publication import Target
from tlog.storage.interface import (
    CorruptionError,
    Driver,
    Fault,
    Head,
    Lease,
    LeaseLost,
    LogState,
    Sequenced,
    SignedHead,
    Signer,
    frozen_error,
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
ACQUIRE_INTERVAL = 0.5  # seconds between attempts to take the integrator role
RENEW_INTERVAL = 1.0  # seconds between renewals of the lease (a fifth of PostgreSQL's lease_ttl)
FOLLOW_TIMEOUT = 0.5  # seconds a follower waits for a notification before reading the head anyway
IDLE = 0.5  # seconds the holder waits for work before it looks at the store again
CLOSE_WAIT = 10.0  # seconds a close waits for queued submissions to be published
FLUSH_WAIT = 10.0  # seconds a close gives the targets to write the last published head

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
    `halted` and `running`; metrics read `integrating`, `lag`, `lost_role` and `targets`;
    targets use `sequenced`, `halt`, `add_cosignatures`, `call` and `holding`.
    """

    def __init__(
        self,
        driver: Driver,
        sign: Signer,
        *,
        targets: Sequence[Target] = (),
        cosign: Cosigner | None = None,
        cosigned: QuorumCheck | None = None,
        max_batch: int = 1024,
        batch_interval: float = 0.05,
        max_pending: int = 100_000,
        wait_timeout: float = 30.0,
        on_batch: Callable[[int, float], None] | None = None,
        importing: tuple[int, bytes] | None = None,
        faults: Fault | None = None,
    ) -> None:
        """`targets`: the copies that follow the published head (the bucket, the mirrors).
        `wait_timeout`: the longest a submission waits for a published checkpoint covering it
        when no publication is attempted at all (no frontend holds the role); a failed attempt
        answers it at once. `cosigned`: with `cosign`, which published heads of the store may be
        served as they are; without it, none is before it is cosigned again. `importing`:
        (size, root) of an import (`tlog.server.importing`): nothing is signed before exactly
        `size` entries are sequenced, and then only if they make `root`. `faults`: a test hook
        called at `FAULT_POINTS` (None in production)."""
        self.driver = driver
        self.sign = sign
        self.targets = tuple(targets)
        self.cosign = cosign
        self.cosigned = cosigned
        self.max_batch = max_batch
        self.batch_interval = batch_interval
        self.max_pending = max_pending
        self.wait_timeout = wait_timeout
        self.on_batch = on_batch
        self.importing = importing
        self.faults = faults
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tlog-driver")
        self._lease_io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tlog-lease")
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
        self._holder: asyncio.Task | None = None  # `_hold`, while this frontend holds the role
        self._closing = False  # no new submissions
        self._closed = False
        self._stopping = False  # the background tasks end
        self._kick = asyncio.Event()  # something for the holder to do
        self._stop = asyncio.Event()
        self._attempted = asyncio.Event()  # the holder's first take-over (and step) was tried
        self._lease: Lease | None = None  # the role, while this frontend holds it
        self._valid_until = 0.0  # monotonic time until which it may act on the role
        self._sequenced = 0  # the largest sequenced size seen
        self._failure_seen = 0.0  # when the last failure a follower answered waiters with was recorded
        self._late: list[tuple[int, bytes, tuple[NoteSignature, ...]]] = []  # cosignatures after publication
        self.state: LogState | None = None  # the published state readers get (or, before any, the signed one)
        self.published = False  # False until a checkpoint was published (with witnesses: their quorum)
        self.halted: LogHalted | None = None  # set for good when signing on would fork the log
        self.frozen: LogFrozen | None = None  # set for good once the store says the log is frozen (`freeze`)
        self.on_publish: list[Callable[[LogState], None]] = []  # called with each newly served state
        self.lag = 0  # entries sequenced beyond the published head, as last seen
        self.lost_role = 0  # times this frontend lost the integrator role
        self.failures = 0  # failed publication attempts seen (here, or recorded by the integrator)

    # --- what the HTTP layer, the metrics and the targets read ------------------------------

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
        """This frontend holds the integrator role, renewed within the lease's TTL."""
        return self._lease is not None and time.monotonic() < self._valid_until

    async def call(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """Run a driver call on the driver thread."""
        return await asyncio.get_running_loop().run_in_executor(self._io, partial(fn, *args, **kw))

    async def _lease_call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._lease_io, partial(fn, *args))

    def _fault(self, name: str) -> None:
        if self.faults is not None:
            self.faults(name)

    def add_cosignatures(self, size: int, root: bytes, signatures: Sequence[NoteSignature]) -> None:
        """Cosignatures (verified by the caller) of the checkpoint of (size, root) that came after
        it was published, such as a mirror's that never holds up a write
        (`tlog.server.mirroring`): merged into the published head and published again if it
        still is that tree, else dropped. Done by the holder's loop, so it never races a
        publication."""
        if self._lease is None or not signatures:
            return
        self._late.append((size, root, tuple(signatures)))
        self._kick.set()

    def halt(self, reason: LogHalted) -> None:
        """Refuse writes for good (a copy of the log holds a larger tree than the store, or
        other bytes): signing on could fork the log."""
        self._halt(reason)

    async def holding(self, lease: Lease) -> None:
        """LeaseLost unless this frontend still holds the role under `lease`, renewed within
        `Driver.lease_ttl` (if that ran out, as after a pause, it is renewed now): what a
        target checks before each write it makes for the log."""
        if self._lease is not lease:
            raise LeaseLost("this frontend no longer holds the integrator role")
        if time.monotonic() < self._valid_until:
            return
        await self._renew(lease)
        if self._lease is not lease or time.monotonic() >= self._valid_until:
            raise LeaseLost("this frontend could not renew its lease of the integrator role")

    # --- start and close ---------------------------------------------------------------------

    async def start(self) -> LogState | None:
        """Open the store, serve what it has published, start the targets and the loops. A
        store that nothing else writes to (embedded) is integrated and published before this
        returns (or its first attempt failed); a shared one is waited on (up to
        `wait_timeout`) until some frontend has published something."""
        head = await self.call(self.driver.open)
        self._sequenced = head.sequenced
        self._see_frozen(head)
        if head.published is not None:  # served while the bucket or the witnesses are still out of reach
            await self._serve_head(head.published[0], head.published[1])
        if not self.published and head.signed is not None:
            signed = self._state_of(head.signed.size, await self.call(self.driver.extend, head.signed.size),
                                    head.signed.note)
            if signed.root != head.signed.root:
                raise CorruptionError(f"the hash cache does not reproduce the root signed for size {signed.size}")
            if self.cosign is None:
                self._serve(signed)  # nothing to add to it: what was published before a restart, or more
            else:
                self.state = signed  # shown (not served) until the witnesses cosign it again
        for target in self.targets:  # before anything is published: their checks run from the first one
            await target.start(self)
        self._task = asyncio.create_task(self._run(), name="tlog-appender")
        if not self.driver.read_only:
            self._tasks.append(asyncio.create_task(self._keep_role(), name="tlog-role"))
        elif self.state is not None:
            self._tasks.append(asyncio.create_task(self._publish_read_only(), name="tlog-publish"))
        if self.driver.shared:
            self._tasks.append(asyncio.create_task(self._follow_loop(), name="tlog-follow"))
        if self.importing is not None or self.driver.read_only:
            return self.state
        deadline = time.monotonic() + self.wait_timeout
        while time.monotonic() < deadline and self.halted is None and not (
                self._attempted.is_set() if not self.driver.shared else (self.state is not None or self.failures)):
            await asyncio.sleep(0.02)
        return self.state

    async def close(self) -> None:
        """Stop accepting, sequence what is queued, wait (bounded) for it to be published,
        have the targets write the last published head while the role is still held, give
        the role up and close the store."""
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
        for t in [*self._tasks, *([self._holder] if self._holder is not None else [])]:
            try:
                await t
            except Exception as e:  # noqa: BLE001 - a bug in a loop: logged, the close goes on
                log.error("%s ended with %s: %s", t.get_name(), type(e).__name__, e)
        self._fail_waiting(Unavailable("the log is shutting down", retry_after=1))
        lease = self._lease
        if lease is not None and self.halted is None:
            for target in self.targets:
                await target.flush(FLUSH_WAIT)
        self._lease = None  # not integrating any more, before the role is released
        for target in self.targets:
            await target.close()
        if lease is not None:
            await self._lease_call(self.driver.release, lease)
        await self.call(self.driver.close)
        self._io.shutdown(wait=True)
        self._lease_io.shutdown(wait=True)
        self._follow_io.shutdown(wait=True)
        self._sequence_io.shutdown(wait=True)

    # --- submissions -----------------------------------------------------------------------

    def _enqueue(self, datas: Sequence[bytes]) -> asyncio.Future:
        if self._closing:
            raise Unavailable("the log is shutting down")
        if self.halted is not None:
            raise self.halted
        if self.frozen is not None:
            raise self.frozen
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
            if isinstance(e, LogFrozen):  # frozen by another process (or the CLI) meanwhile: for good
                self.frozen = self.frozen or e
                for g, _, _ in spans:
                    self._settle(g.future, error=e)
                return
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

    # --- freezing -----------------------------------------------------------------------------

    def _see_frozen(self, head: Head) -> None:
        if head.frozen is not None and self.frozen is None:
            self.frozen = frozen_error(head.frozen)
            log.warning("the log is frozen: writes are refused%s",
                        f" (successor: {head.frozen})" if head.frozen else "")

    async def freeze(self, successor: str, timeout: float) -> LogState:
        """Freeze the log (docs/architecture.md §3.8): the store refuses every entry from now
        on, on every frontend; the entries sequenced before are signed, witnessed and published
        as usual, by whichever frontend holds the role, in the final checkpoint, which is
        returned once this frontend serves it. Unavailable if that takes over `timeout`."""
        await self.call(self.driver.freeze, successor)
        head = await self.call(self.driver.head)
        self._see_frozen(head)
        self._sequenced = max(self._sequenced, head.sequenced)
        self._kick.set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.state
            if self.halted is not None:
                raise self.halted
            if self.published and state is not None and state.size >= head.sequenced:
                return state
            await asyncio.sleep(0.05)
        raise Unavailable(f"the log is frozen, but its final checkpoint (size {head.sequenced}) was not published "
                          f"within {timeout:g} s; it is published when a frontend can (witnesses, bucket)",
                          retry_after=1)

    # --- imports -----------------------------------------------------------------------------

    async def sequence_import(self, datas: Sequence[bytes], logged_at: Sequence[float] | None) -> Sequenced:
        """(An import only, `importing`, with the role held.) Sequence `datas` now, in order,
        keeping the times their receipts were first logged; nothing waits for a checkpoint:
        the import's one checkpoint is signed once all of them are sequenced."""
        if self.importing is None:
            raise RuntimeError("sequence_import is for an appender made for an import")
        seq = await asyncio.get_running_loop().run_in_executor(
            self._sequence_io, partial(self.driver.sequence, datas, logged_at=logged_at))
        if seq.size > self._sequenced:
            self._sequenced = seq.size
            self._kick.set()
        return seq

    # --- serving ---------------------------------------------------------------------------

    def _state_of(self, size: int, root: bytes, note: str) -> LogState:
        return LogState(size, root, note, TreeView(size, self.driver.hashes.read))

    def _servable(self, note: str) -> bool:
        """Whether a head the store recorded as published may be served as it is: with
        witnesses, only if it meets the quorum configured now."""
        return self.cosign is None or (self.cosigned is not None and self.cosigned(note))

    async def _serve_head(self, size: int, note: str) -> None:
        """Serve a head published by the store (at a start, or by another frontend); one that
        lacks the witness quorum now required is not served (the holder cosigns it again)."""
        if not self._servable(note):
            return
        root = await self.call(self.driver.extend, size)
        self._serve(self._state_of(size, root, note))

    def _serve(self, state: LogState) -> None:
        """`state` is what readers get from now on (never a smaller tree than before); tell the
        `on_publish` listeners, answer what it covers, and, on the holder, offer it to the
        targets that follow the published head."""
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
        if self._lease is not None:
            for target in self.targets:
                target.offer(state)

    # --- the role ------------------------------------------------------------------------------

    async def _sleep(self, seconds: float) -> None:
        """Sleep until stopped or `seconds`."""
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except TimeoutError:
            pass

    async def _keep_role(self) -> None:
        """Take the role when it is free, then renew it while this frontend runs (the holder's
        work is `_hold`, a task of its own from each acquisition until the role is lost)."""
        while not self._stopping:
            lease = self._lease
            if lease is None:
                if await self._acquire() is None:
                    await self._sleep(ACQUIRE_INTERVAL)  # not woken by new entries: someone else integrates
                continue
            if self._holder is None or self._holder.done():
                self._holder = asyncio.create_task(self._hold(lease), name="tlog-integrator")
            await self._sleep(RENEW_INTERVAL)
            if self._lease is lease and not self._stopping and not math.isinf(self.driver.lease_ttl):
                await self._renew(lease)

    async def _acquire(self) -> Lease | None:
        sent = time.monotonic()
        try:
            lease = await self._lease_call(self.driver.acquire)
        except Unavailable as e:
            log.warning("could not try for the integrator role: %s", e.message)
            return None
        if lease is None:
            return None
        self._lease, self._valid_until = lease, sent + self.driver.lease_ttl
        if self.driver.shared:
            log.info("this frontend is the integrator (epoch %d)", lease.epoch)
        return lease

    async def _renew(self, lease: Lease) -> None:
        """Renew the lease; the role is lost if another frontend took it. A renewal that fails
        otherwise changes nothing: the holder stops acting once `lease_ttl` has passed."""
        sent = time.monotonic()
        try:
            await self._lease_call(self.driver.renew, lease)
        except LeaseLost as e:
            self._lost(lease, e)
            return
        except Unavailable as e:
            log.warning("renewing the integrator's lease failed: %s", e.message)
            return
        if self._lease is lease:
            self._valid_until = max(self._valid_until, sent + self.driver.lease_ttl)

    def _lost(self, lease: Lease, e: LeaseLost) -> None:
        if self._lease is not lease:
            return
        self._lease = None
        self.lost_role += 1
        log.warning("integrator role lost: %s", e)
        for target in self.targets:
            target.stand_down()
        self._kick.set()

    # --- integration and publication (while holding the role) ---------------------------------

    async def _wait(self, timeout: float) -> None:
        """Sleep until kicked (new work), stopped, or `timeout`."""
        try:
            await asyncio.wait_for(self._kick.wait(), max(0.0, timeout))
        except TimeoutError:
            pass
        self._kick.clear()

    async def _hold(self, lease: Lease) -> None:
        """The holder's one loop (the module docstring's steps 0 to 4), until the role is lost,
        the log halts or stops. Derived data the store keeps (`Driver.backfill`) is brought
        up to date between steps, a little at a time."""
        backoff = RETRY_MIN
        taken_over = backfill = False
        while self._lease is lease and not self._stopping and self.halted is None:
            try:
                if not taken_over:
                    await self._take_over(lease)
                    taken_over = backfill = True
                self._expire_waiting()
                if await self._step(lease):
                    backoff = RETRY_MIN
                elif backfill:
                    backfill = await self.call(self.driver.backfill, lease)
                else:
                    await self._wait(IDLE)
            except LeaseLost as e:
                self._lost(lease, e)
            except (ForkError, LogHalted) as e:
                self._halt(e)
                await self._record_failure(lease, self.halted.message if self.halted is not None else _message(e))
            except Exception as e:  # Unavailable, CorruptionError, or a bug: answered 503, retried
                if not isinstance(e, Unavailable | CorruptionError):
                    log.exception("integration failed")
                self._publication_failed(e)
                await self._record_failure(lease, _message(e))
                await self._wait(backoff)  # new entries retry at once; otherwise back off
                backoff = min(backoff * 2, RETRY_MAX)
            self._attempted.set()
        self._attempted.set()

    async def _record_failure(self, lease: Lease, message: str) -> None:
        """Tell the other frontends (their waiting submissions are answered 503 too)."""
        try:
            await self.call(self.driver.record_failure, lease, message)
        except LeaseLost as e:
            self._lost(lease, e)
        except Unavailable:
            pass

    async def _take_over(self, lease: Lease) -> None:
        """Step 0: the targets learn where their copies stand (LogHalted if one holds more than
        the store signed); the signed head is published if it is not, or, with witnesses,
        cosigned again; the published head is offered to the targets."""
        await self.holding(lease)
        head = await self.call(self.driver.head)
        for target in self.targets:
            await target.take_over(lease, head)
        if head.signed is not None and self.importing is None:
            await self._publish(lease, head.signed, head.published, again=self.cosign is not None)
        if self.published and self.state is not None:
            for target in self.targets:
                target.offer(self.state)

    def _due(self, head: Head) -> bool:
        """Whether the holder signs now: entries sequenced beyond the signed head (a new log:
        its empty tree); for an import, exactly the import's entries, all sequenced."""
        signed = head.signed.size if head.signed is not None else -1
        if self.importing is not None:
            return head.sequenced == self.importing[0] > signed
        return head.sequenced > signed

    async def _step(self, lease: Lease) -> bool:
        """Steps 1 to 4, each only if the store says it is due; False when nothing was."""
        await self.holding(lease)  # after a pause: renewed (or found lost) before anything else
        head, new, published = await self.call(self._sign, lease)
        self._sequenced = max(self._sequenced, head.sequenced)
        self._see_frozen(head)
        self.lag = max(0, head.sequenced - (head.published[0] if head.published is not None else 0))
        if new is not None and published:
            self._serve(self._state_of(new.size, new.root, new.note))
            return True
        signed = new or head.signed
        if signed is None or (self.importing is not None and signed.size != self.importing[0]):
            return False  # (an import publishes its own checkpoint, nothing before it)
        return await self._publish(lease, signed, head.published)

    def _sign(self, lease: Lease) -> tuple[Head, SignedHead | None, bool]:
        """(Driver thread.) The head; if due, step 1, and without witnesses step 3 too (one
        trip to the driver thread per checkpoint): (head, the new checkpoint or None, whether
        it was recorded as published)."""
        head = self.driver.head()
        if not self._due(head):
            return head, None, False
        old = head.signed.size if head.signed is not None else None
        size = head.sequenced
        root = self.driver.extend(size)
        if self.importing is not None and root != self.importing[1]:
            raise LogHalted(f"the imported entries make the root {root.hex()[:16]}... for size {size}, not the "
                            f"checkpoint's {self.importing[1].hex()[:16]}...: nothing was signed")
        new = SignedHead(size, root, self.sign(size, root))
        self._fault("after_sign")
        self.driver.record_checkpoint(lease, old, new)
        self._fault("after_record")
        if self.cosign is not None:
            return head, new, False
        self.driver.record_published(lease, new.size, new.note)
        return head, new, True

    async def _publish(self, lease: Lease, signed: SignedHead, published: tuple[int, str] | None, *,
                       again: bool = False) -> bool:
        """Steps 2 to 4 for the signed head, as far as they are due: nothing if the store's
        published head is that very checkpoint and it is served here already; served if a
        predecessor published it; cosigned (afresh: `again`, or for want of the quorum now
        configured), or merged with cosignatures that came after, then recorded and served."""
        note: str | None = None
        if published is not None and published[0] == signed.size and self._servable(published[1]) and not again:
            note = published[1]
            late = self._late_cosignatures(signed)
            if late:
                note = str(add_signatures(note, late))
            current = self.state
            if self.published and current is not None and current.size == signed.size and current.note == note:
                return False
            if not late:  # published by a predecessor: served, with nothing to record
                self._serve(await self._checked_state(signed, note))
                return True
        state = await self._checked_state(signed, signed.note)
        if note is None:
            if self.state is None or not self.published:
                self.state = state  # shown to /v1/info before it is published
            note = (await self.cosign(state)).note if self.cosign is not None else signed.note
        await self.call(self.driver.record_published, lease, signed.size, note)
        self._serve(replace(state, note=note))
        return True

    async def _checked_state(self, signed: SignedHead, note: str) -> LogState:
        """The signed head as a state to serve, the hash cache brought to it and checked."""
        root = await self.call(self.driver.extend, signed.size)
        if root != signed.root:
            raise CorruptionError(f"the hash cache does not reproduce the root signed for size {signed.size}")
        return self._state_of(signed.size, root, note)

    def _late_cosignatures(self, signed: SignedHead) -> list[NoteSignature]:
        """The cosignatures `add_cosignatures` queued for `signed` (those of other trees are
        dropped: no longer published)."""
        late, self._late = self._late, []
        return [sig for size, root, sigs in late if (size, root) == (signed.size, signed.root) for sig in sigs]

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

    def _halt(self, e: Exception) -> None:
        if isinstance(e, LogHalted):
            halted = e
        else:
            halted = LogHalted(f"refusing to sign on: {_message(e)}")
        if self.halted is None:  # the first reason stands
            log.critical("HALTED: %s", halted.message)
            self.halted = halted
        self._fail_waiting(self.halted)
        self._kick.set()

    # --- followers -----------------------------------------------------------------------

    async def _follow_loop(self) -> None:
        """Serve the heads other frontends publish; tell the holder when they sequence."""
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
            self._see_frozen(head)
            if self._lease is not None:
                continue  # the holder serves what it publishes itself
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
