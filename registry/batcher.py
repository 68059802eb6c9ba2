"""The submission queue in front of the writer (like the log's, `tlog.server.appender`).

Submissions queue; a batch closes after `max_batch` records or
`batch_interval` seconds after its first record, and becomes one commit, so
under load many records share one commit (and one log anchor). `submit`
resolves only when its record is committed, anchored and published. When the
registry has been idle for `idle` seconds and its head's anchor is not yet in
the tree, the batcher makes one anchor-only commit (see `registry.anchoring`).
"""
from __future__ import annotations

import asyncio
import logging

from tlog.errors import Unavailable
from tlog.runtime.batching import BatchQueue

from .writer import Accepted, Item, RegistryWriter

log = logging.getLogger("oap.registry.batcher")


class Batcher:
    def __init__(self, writer: RegistryWriter, *, max_batch: int = 512, batch_interval: float = 0.05,
                 idle: float = 5.0, max_pending: int = 100_000) -> None:
        self.writer = writer
        self.max_batch, self.batch_interval, self.idle, self.max_pending = max_batch, batch_interval, idle, max_pending
        self._queue: BatchQueue[Item] = BatchQueue(max_batch, batch_interval)
        self._task: asyncio.Task | None = None
        self._closing = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="registry-batcher")

    async def close(self) -> None:
        self._closing = True
        self._queue.close()
        if self._task is not None:
            await self._task

    @property
    def queued(self) -> int:
        """Submissions waiting for a batch (what a test waits on to know they have arrived)."""
        return len(self._queue)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def submit(self, doc: object, documents: dict | None = None) -> Accepted:
        """Queue one submission; `documents` are the DID documents resolved for it."""
        if self._closing:
            raise Unavailable("the registry is shutting down")
        if len(self._queue) >= self.max_pending:
            raise Unavailable("the registry is at capacity; retry shortly", retry_after=1)
        fut = asyncio.get_running_loop().create_future()
        self._queue.put([Item(doc, fut, documents or {})])
        return await asyncio.shield(fut)

    async def _run(self) -> None:
        while (batch := await self._queue.next_batch(self.idle)) is not None:
            if batch:
                await self.writer.commit_batch(batch)
            elif self.writer.index.head_unproven() and not self.writer.broken:
                await self.writer.commit_batch([], anchor_only=True)  # idle: anchor the head
