"""The batch queue shared by the log's sequencer and the registry's batcher (docs/architecture.md §3.3).

Items queue up; a batch closes after `max_batch` items or `interval` seconds
after its first item, whichever comes first, so one transaction and one
fsync serve many submissions without holding a lone submission long.
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Generic, TypeVar

T = TypeVar("T")


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
