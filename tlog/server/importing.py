"""Imports into a log (`oap-log restore`, `oap-log migrate`), through the log's one write path
(docs/architecture.md §3.2).

An import is the log's own start with one difference: its appender is told the tree it must
reach (`Appender(importing=(size, root))`), and signs nothing before all of it is
sequenced, then only if the entries make that root. Everything else is the log's: the
integrator role is taken, and waited for, as any frontend takes it (a frontend still running
on the target is refused, never raced); the checkpoint is signed and recorded by the fork
guard, cosigned by the witnesses the target's configuration names, and published to its
bucket, which the appender brings up to it before it gives the role up.

First the source is read once and checked, writing nothing (`tlog.storage.transfer.SourceCheck`):
its checkpoint is signed by the key the target signs with, and its entries make that
checkpoint's tree. Between that and the signature the target's data directory is marked
(`tlog.storage.transfer.mark_import`): until the import has signed, neither the log nor
another import starts there.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from tlog.errors import Unavailable, VerificationError
from tlog.server.appender import Appender
from tlog.server.config import LogConfig
from tlog.server.publication import BucketTarget
from tlog.server.service import LogService, load_or_create_key
from tlog.storage.transfer import (
    BATCH,
    LoggedTimes,
    SourceCheck,
    checkpoint_of,
    clear_import,
    mark_import,
    refuse_unfinished_import,
)

log = logging.getLogger("oap.tlog.importing")

Entries = Callable[[], AsyncIterator[bytes]]
"""The source's entries in index order; called twice (check, then import)."""

PUBLISH_WAIT = 60.0  # seconds an import waits for its checkpoint to be published, or the bucket to move


@dataclass(frozen=True)
class Imported:
    size: int
    published: str = ""  # why the checkpoint is signed but not published yet ("": it is)


async def _batches(entries: AsyncIterator[bytes], limit: int) -> AsyncIterator[list[bytes]]:
    """The first `limit` entries, in lists of BATCH."""
    batch: list[bytes] = []
    n = 0
    async for data in entries:
        if n == limit:
            break
        batch.append(data)
        n += 1
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


async def import_log(config: LogConfig, note: str, entries: Entries, *, logged: LoggedTimes | None = None,
                     progress: Callable[[int], None] | None = None,
                     check_progress: Callable[[int], None] | None = None) -> Imported:
    """Append the entries `entries()` yields into the empty log `config` names, checked against
    the signed checkpoint `note` first, keeping the times their receipts were logged
    (`logged`). VerificationError for a source that does not make `note`'s tree, a target
    that is not empty, or entries that do not land at their indices."""
    size, root = checkpoint_of(note)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    refuse_unfinished_import(config.data_dir)
    signer = load_or_create_key(config.data_dir, config.origin, config.key_file)
    check = SourceCheck(note, signer.verifier)
    async for batch in _batches(entries(), size + 1):  # one more than the checkpoint's: refused
        check.add(batch)
        if check_progress is not None:
            check_progress(len(batch))
    check.finish()
    mark_import(config.data_dir, note)
    svc = await LogService.open(config, importing=(size, root))
    try:
        app = svc.appender
        await _hold_role(app)
        if app.sequenced != 0:
            raise VerificationError(f"the target log is not empty (it has {app.sequenced} entries)")
        now = time.time()
        done = 0
        async for batch in _batches(entries(), size):  # cut at the checkpoint's size
            times = logged.between(done, len(batch), now) if logged is not None and len(logged) else None
            seq = await app.sequence_import(batch, times)
            if seq.indices != list(range(done, done + len(batch))):
                raise VerificationError(f"entries {done}..{done + len(batch) - 1} did not land in order "
                                        "(a repeated entry, or a target that is not empty)")
            done += len(batch)
            if progress is not None:
                progress(len(batch))
        if done != size:
            raise VerificationError(f"the source gave {done} entries the second time, not {size}")
        await _signed(app, size)
        clear_import(config.data_dir)  # signed: the log may start on it (and halts if a witness saw more)
        return await _published(app, size)
    finally:
        await svc.close()  # the bucket is brought up to the published head first


async def _hold_role(app: Appender) -> None:
    """Wait for the integrator role, as long as a lease of a frontend that is gone may last."""
    deadline = time.monotonic() + 2 * app.driver.lease_ttl + 5 if app.driver.shared else time.monotonic() + 30
    while not app.integrating:
        if app.halted is not None:
            raise app.halted
        if time.monotonic() > deadline:
            raise Unavailable("another process holds the target's integrator role: stop its frontends first")
        await asyncio.sleep(0.05)


async def _signed(app: Appender, size: int) -> None:
    """Wait for the appender to sign the import's checkpoint (checking its root first)."""
    while True:
        if app.halted is not None:
            raise VerificationError(app.halted.message)
        head = await app.call(app.driver.head)
        if head.signed is not None and head.signed.size == size:
            break
        if app.lost_role:
            raise Unavailable("the import lost the target's integrator role before it signed (is another frontend "
                              "running?)")
        await asyncio.sleep(0.05)


async def _published(app: Appender, size: int) -> Imported:
    """Wait, for a bounded time, for the appender to publish the import's checkpoint
    (witnesses), and while the bucket moves, for the bucket to have it."""
    deadline = time.monotonic() + PUBLISH_WAIT
    failures = app.failures
    while not (app.published and app.state is not None and app.state.size == size):
        if app.halted is not None:
            raise VerificationError(app.halted.message)
        if time.monotonic() > deadline:
            why = f"{app.failures - failures} attempts failed" if app.failures > failures else "it took too long"
            log.warning("the import's checkpoint is signed but not published yet (%s): the log publishes it "
                        "when it starts", why)
            return Imported(size, why)
        await asyncio.sleep(0.05)
    for bucket in (t for t in app.targets if isinstance(t, BucketTarget)):  # it follows: wait while it moves
        seen, moved = bucket.size, time.monotonic()
        while bucket.size < size and time.monotonic() - moved < PUBLISH_WAIT:
            if bucket.size != seen:
                seen, moved = bucket.size, time.monotonic()
            await asyncio.sleep(0.1)
    return Imported(size)
