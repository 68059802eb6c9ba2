"""Targets that follow the published head: the bucket here, the mirrors in `tlog.server.mirroring`
(docs/architecture.md §3.3, §3.4).

The store's published head is the log's single source of truth: the appender records it
(a fenced write of the store, `Driver.record_published`), serves it, and offers it to each
`Target`, which brings its copy of the log up to it in a task of its own, outside any
transaction of the store. A target never holds up a write, unless the witness quorum
counts it (a mirror in the policy's quorum), and then the appender waits for it before it
records the publication, as it waits for witnesses (`tlog.server.witnessing`).

Only the holder of the integrator role offers anything, and a target acts for the log only
while that holder still holds it (`Followed.holding`, checked before each write): a frontend
that was paused, then resumes, finds it lost the role before it writes anything more.

The bucket (`BucketTarget`): at most once per `interval`, the tiles and entry bundles the
published head has and the bucket's checkpoint has not (create-only), then the checkpoint
(conditional on the one it replaces: never a smaller tree), then the sweep of the partial
tiles no checkpoint of the bucket needs any more. A partial tile is deleted only once its
tile is full in the tree of the bucket's checkpoint: the full tile was written before that
checkpoint, and the latest checkpoint a reader of the bucket can hold needs it, not the
partial one (C2SP tlog-tiles: a log "MAY delete any partial tile once the corresponding full
tile is either available, or has been removed by the pruning criteria"). Such a delete is
right whenever it lands, even late, by a holder that lost the role meanwhile: the bucket's
checkpoint only grows.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from tlog.errors import ForkError, LogHalted, OAPError, Unavailable
from tlog.formats.note import NoteSignature
from tlog.formats.tiles import TILE_WIDTH
from tlog.storage.bucket import changed_tiles, full_at, partial_tiles, wanted_tiles
from tlog.storage.interface import Driver, EntryReader, Head, Lease, LeaseLost, LogState, Publisher, Tile

log = logging.getLogger("oap.tlog.publication")

T = TypeVar("T")

CHUNK = 1 << 16  # entries whose tiles are read and written per step when a bucket catches up
RETRY_MIN, RETRY_MAX = 0.5, 10.0  # seconds between rounds after a failed one


class Followed(Protocol):
    """What a target sees of the log it follows (the appender)."""

    driver: Driver

    @property
    def sequenced(self) -> int:
        """Entries sequenced as last seen: no checkpoint of this log, by any frontend, is larger."""
        ...

    def halt(self, reason: LogHalted) -> None:
        """Refuse writes for good (a copy holds a larger tree of this log, or another one)."""
        ...

    def add_cosignatures(self, size: int, root: bytes, signatures: tuple[NoteSignature, ...]) -> None:
        """Cosignatures (verified) of the checkpoint of (size, root), merged into the published
        head if it still is that tree."""
        ...

    async def call(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """Run a call that reads the store on the appender's driver thread."""
        ...

    async def holding(self, lease: Lease) -> None:
        """LeaseLost unless this frontend still holds the role under `lease`, renewed within
        `Driver.lease_ttl` (renewing it now if that ran out): checked before each write."""
        ...


class Target(Protocol):
    """A copy of the log that follows its published head."""

    async def start(self, log: Followed) -> None:
        """Start its tasks; called by the appender once the store is open, before anything is
        published, so that the checks it makes for the log run from the first publication."""
        ...

    async def take_over(self, lease: Lease, head: Head) -> None:
        """This frontend took the role (`head` is the store's): learn where the copy stands,
        before anything new is signed. LogHalted if it holds more of the log than the store
        signed; Unavailable if that cannot be known now (the appender retries)."""
        ...

    def offer(self, state: LogState) -> None:
        """A newly published head: the copy catches up with it, at its own pace."""
        ...

    def stand_down(self) -> None:
        """The role is lost: nothing more is written for the log."""
        ...

    async def flush(self, seconds: float) -> None:
        """At a clean stop, while the role is still held: bring the copy to the latest head
        offered now, trying for at most `seconds`."""
        ...

    async def close(self) -> None: ...


class BucketTarget:
    """The bucket (a `Publisher`) as a `Target` (see the module docstring)."""

    def __init__(self, publisher: Publisher, *, interval: float = 1.0) -> None:
        self.publisher, self.interval = publisher, interval
        self.size = -1  # the size of the bucket's checkpoint, as this holder knows it (-1: not known)
        self._log: Followed | None = None
        self._lease: Lease | None = None
        self._goal: LogState | None = None
        self._note: str | None = None  # the checkpoint this holder wrote last
        self._written: dict[tuple[int, int], set[str]] = {}  # partial tiles written since taking over, by tile
        self._inherited: set[tuple[int, int]] = set()  # tiles an earlier holder may have left partials of
        self._last = -float("inf")  # monotonic time of the last round
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._rounds = asyncio.Lock()  # one round at a time (the task's, a flush, a take-over)
        self._task: asyncio.Task | None = None
        self._entries: EntryReader | None = None  # the store's entry reader, opened at the first round

    @property
    def errors(self) -> int:
        return self.publisher.errors

    @property
    def written(self) -> int:
        return self.publisher.written

    async def start(self, log: Followed) -> None:
        self._log = log
        self._task = asyncio.create_task(self._run(), name="tlog-bucket")

    async def take_over(self, lease: Lease, head: Head) -> None:
        """Where the bucket stands (its checkpoint, which must not be of a tree larger than
        the store signed) and which tiles an earlier holder may have left partials of: those
        of the trees between the store's last sweep and its signed head."""
        signed = head.signed.size if head.signed is not None else 0
        async with self._rounds:  # a round of an earlier tenure ends first
            size = await asyncio.to_thread(self.publisher.checkpoint_size)  # Unavailable while the bucket is down
            if size > signed:
                raise LogHalted(f"the bucket holds a checkpoint of size {size}, beyond the {signed} entries signed "
                                "in the store (a database restored from an old backup?); writes are refused until "
                                "an operator intervenes (see ops/runbooks/backup-restore.md)")
            swept = min(head.swept, signed)
            self._inherited = {(lv, ix) for lv, ix, _ in changed_tiles(swept, signed) + partial_tiles(swept)}
            self._written = {}
            self._lease, self.size, self._note, self._goal = lease, size, None, None
            self._last = -float("inf")

    def offer(self, state: LogState) -> None:
        if self._lease is not None and (self._goal is None or state.size >= self._goal.size):
            self._goal = state
            self._wake.set()

    def stand_down(self) -> None:
        self._lease = self._goal = None

    def _done(self, goal: LogState) -> bool:
        return goal.size < self.size or (goal.size == self.size and goal.note == self._note)

    async def flush(self, seconds: float) -> None:
        try:
            async with asyncio.timeout(seconds):
                async with self._rounds:
                    lease, goal = self._lease, self._goal
                    if lease is not None and goal is not None and not self._done(goal):
                        await self._round(lease, goal)
        except (TimeoutError, LeaseLost, OAPError) as e:  # the next holder writes it
            log.warning("the bucket's last checkpoint was not written: %s",
                        e.message if isinstance(e, OAPError) else type(e).__name__)

    async def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._task is not None:
            await self._task
        if self._entries is not None:
            await self._entries.close()
        await asyncio.to_thread(self.publisher.close)

    async def _reader(self) -> EntryReader:
        if self._entries is None:
            assert self._log is not None
            reader = self._log.driver.entries()
            await reader.open()
            self._entries = reader
        return self._entries

    async def _pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except TimeoutError:
            pass

    # --- the publication task -------------------------------------------------------------

    async def _run(self) -> None:
        """Chase the goal, at most one round per interval; a failed round is retried with
        backoff (the bucket lags meanwhile; writes go on)."""
        backoff = RETRY_MIN
        while not self._stop.is_set():
            await self._wake.wait()
            self._wake.clear()
            wait = self._last + self.interval - time.monotonic()
            if wait > 0:
                await self._pause(wait)
            async with self._rounds:
                lease, goal = self._lease, self._goal
                if self._stop.is_set() or lease is None or goal is None or self._done(goal):
                    continue
                self._last = time.monotonic()
                try:
                    await self._round(lease, goal)
                    backoff = RETRY_MIN
                    continue
                except LeaseLost:
                    if self._lease is lease:
                        self.stand_down()
                    continue
                except ForkError as e:
                    assert self._log is not None
                    self._log.halt(LogHalted(f"the bucket holds other bytes than this log's: {e.message}"))
                    continue
                except Exception as e:  # the bucket down, or a bug: logged, retried
                    if isinstance(e, Unavailable):
                        log.warning("publishing size %d to the bucket failed (retrying): %s", goal.size, e.message)
                    else:
                        log.exception("publishing size %d to the bucket failed (retrying)", goal.size)
            await self._pause(backoff)
            backoff = min(backoff * 2, RETRY_MAX)
            self._wake.set()

    async def _round(self, lease: Lease, goal: LogState) -> None:
        """Tiles and bundles, then the checkpoint, then the sweep; the role checked before each."""
        log_ = self._log
        assert log_ is not None
        pub = self.publisher
        at = max(self.size, 0)
        while at < goal.size:
            step = min(goal.size, at - at % CHUNK + CHUNK)
            wanted = wanted_tiles(at, step, partial=step == goal.size)
            # hash tiles from the cache where the store is read (a moment of the driver thread),
            # entry bundles from the store's own entry reader (not the driver thread at all)
            tiles = await log_.call(pub.hash_tiles, log_.driver.hashes, wanted)
            reader = await self._reader()
            tiles += [Tile(-1, ix, w, await reader.bundle(ix * TILE_WIDTH, w)) for lv, ix, w in wanted if lv < 0]
            await log_.holding(lease)
            await asyncio.to_thread(pub.put, tiles)
            for t in tiles:
                if not t.full:
                    self._written.setdefault((t.level, t.index), set()).add(t.path)
            at = step
        await log_.holding(lease)
        self.size = max(self.size, await asyncio.to_thread(pub.write_checkpoint, goal.note, goal.size))
        self._note = goal.note
        await self._sweep(lease)

    async def _sweep(self, lease: Lease) -> None:
        """Delete the partial tiles of every tile full in the tree of the bucket's checkpoint:
        those this holder wrote (known), and those an earlier one may have left (listed)."""
        log_ = self._log
        assert log_ is not None
        size = self.size
        mine = [tile for tile in self._written if full_at(*tile, size)]
        theirs = [tile for tile in self._inherited if full_at(*tile, size)]
        if not mine and not theirs:
            return
        await log_.holding(lease)
        gone = [path for tile in mine for path in self._written[tile]]
        if theirs:
            gone += await asyncio.to_thread(self.publisher.partials_of, theirs)
        if gone:
            await asyncio.to_thread(self.publisher.delete, sorted(set(gone)))
        for tile in mine:
            del self._written[tile]
        self._inherited.difference_update(theirs)
        await log_.call(log_.driver.record_swept, lease, size)
