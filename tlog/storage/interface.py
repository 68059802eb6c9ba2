"""The storage interface of the log: what every backend implements.

Everything above storage (the proof builders, the sequencer, the server, the CLI,
the benchmarks) talks to a log's data through these protocols only. They are
modelled on Go's `tlog.HashReader` (hashes read in batches by node position), on
Tessera's split between durably sequencing entries and integrating them into the
tree, and on Sunlight's `LockBackend` (the signed checkpoint moves by
compare-and-swap). Two backends implement them:

- `tlog.storage.embedded`: SQLite + per-level hash files in one data directory, one
  process (the default, `make run`);
- `tlog.storage.postgres`: PostgreSQL for entries, dedup, sequence and checkpoints,
  with tiles, entry bundles and the checkpoint published to an S3-compatible bucket,
  for any number of frontends.

Contracts every backend keeps (C2SP tlog-checkpoint, RFC 9162):
- "durable" means on stable storage: `append` returns only once its entries and the
  checkpoint covering them are;
- dedup is exact: an entry already in the log gets its existing index;
- the fork guard: a signed checkpoint is recorded only by compare-and-swap from the
  one before it, so two different roots are never recorded for one size;
- readers see only committed sizes.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tlog.formats.entries import ReceiptRow
from tlog.merkle.tree import HashReader, TreeView

__all__ = ["BatchResult", "CorruptionError", "EntryReader", "HashReader", "LogState", "LogStorage", "ReceiptRow",
           "Signer"]

Signer = Callable[[int, bytes], str]
"""(tree size, root hash) -> the signed checkpoint note for them."""


@dataclass(frozen=True)
class LogState:
    """A committed tree: what readers may serve. `note` is the signed checkpoint."""

    size: int
    root: bytes
    note: str
    view: TreeView


@dataclass(frozen=True)
class BatchResult:
    """The outcome of one `append`: per submitted entry, in order."""

    indices: list[int]
    fresh: list[bool]  # False where the entry was already in the log
    state: LogState  # the committed checkpoint that covers all of them
    leaves: list[bytes]  # leaf hashes


class CorruptionError(RuntimeError):
    """The stored data contradicts itself; the log refuses to start."""


class EntryReader(Protocol):
    """The read side of the entries: async, and never ahead of the committed size."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def entry(self, index: int, size: int) -> tuple[bytes, bytes]:
        """(leaf hash, entry bytes) of entry `index` of a tree of `size`; NotFound outside it."""
        ...

    async def bundle(self, start: int, count: int) -> bytes:
        """Entries start..start+count-1 as a tlog-tiles entry bundle."""
        ...

    async def index_of(self, leaf_hash: bytes, size: int) -> int:
        """The index of the entry with this leaf hash in a tree of `size`; NotFound if none."""
        ...

    async def receipts(self, size: int, *, signer: str | None = None, receipt_hash: bytes | None = None,
                       since: float | None = None, after: int = -1, limit: int = 1000) -> list[ReceiptRow]:
        """Receipt entries of a tree of `size` by signer and/or receipt hash, in index order
        from above `after`, at most `limit`. With `since` (Unix time), only those logged or
        claiming to be signed at or after it: a thief backdates the claim, not the log."""
        ...


class LogStorage(Protocol):
    """A log's durable data. `open`, `append` and `close` run on one writer thread
    (the sequencer's); readers use `hashes` and an `EntryReader`."""

    read_only: bool  # writes are refused with 503 (a read-only data directory)
    state: LogState | None  # the latest committed tree, after `open`

    @property
    def hashes(self) -> HashReader:
        """Nodes of every committed tree (read-only: a backend may give a richer reader)."""
        ...

    def open(self, sign: Signer) -> LogState:
        """Recover to the committed size (repairing derived data), sign size 0 if new."""
        ...

    def append(self, datas: Sequence[bytes], sign: Signer) -> BatchResult:
        """Durably append the entries not already in the log, extend the tree and record
        the checkpoint `sign` makes for the new size through the fork guard."""
        ...

    def refresh(self) -> LogState:
        """The latest committed tree, including what other writers committed since."""
        ...

    def entries(self) -> EntryReader:
        """A reader of the entries (opened by the caller)."""
        ...

    def close(self) -> None: ...
