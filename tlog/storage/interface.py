"""The storage interface of the log: what a backend implements (docs/architecture.md §3.2, §3.3).

The loop that batches, sequences, integrates, signs, witnesses and publishes lives once,
above this interface (`tlog.server.appender`), and runs the same for every backend; a
backend is a `Driver`, plus, where the log is also published as static tiles, a
`Publisher`. The split follows Tessera (an appender above storage drivers) and
Sunlight (a `Backend` for objects beside a `LockBackend` whose compare-and-swap moves
the signed checkpoint); hashes are read as Go's `tlog.HashReader` reads them.

Drivers:

- `tlog.storage.embedded`: SQLite + per-level hash files in one data directory, one
  process (the default, `make run`);
- `tlog.storage.postgres`: PostgreSQL for entries, dedup, sequence, checkpoints and the
  integrator role, for any number of frontends.

Publisher: `tlog.storage.bucket.TilePublisher`, tiles, entry bundles and the checkpoint in
an S3-compatible bucket (C2SP tlog-tiles).

The contract (every driver passes `tests/storage/test_drivers.py`):

- `sequence` durably gives each new entry the next index, exactly once; an entry already
  sequenced (in this batch, an earlier one, or by another process) gets its index again.
  "Durably" may mean "made durable by the next `record_checkpoint`", and nothing is
  acknowledged before that returns (the embedded driver's one fsync per batch).
- The integrator role is a `Lease` with a fencing epoch. `record_checkpoint`,
  `record_published` and `record_failure` take the lease and are refused (`LeaseLost`)
  once another holder has taken the role: the check is made by the store itself, in the
  same transaction as the write, so a holder that lost the role writes nothing more.
- The fork guard: `record_checkpoint` moves the signed head by compare-and-swap from the
  size the caller read, and refuses (`ForkError`) a root other than the one already
  recorded for a size. The published head never moves backwards.
- `extend` brings the local hash cache to a size and returns that tree's root, checked
  against the root recorded for that size if there is one (`CorruptionError` if not).
- Readers see only published sizes: the appender hands them a `LogState`.
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tlog.formats.entries import ReceiptRow
from tlog.merkle.tree import HashReader, TreeView

__all__ = ["CorruptionError", "Driver", "EntryReader", "Fault", "HashReader", "Head", "Lease", "LeaseLost",
           "LogState", "Publisher", "ReceiptRow", "Sequenced", "SignedHead", "Signer", "TileSource"]

Signer = Callable[[int, bytes], str]
"""(tree size, root hash) -> the signed checkpoint note for them."""

Fault = Callable[[str], None]
"""A test hook called at named points of the write path (see `tests/crashserve.py`, which
passes one that kills the process there). Drivers and the appender take it as a
constructor argument; it is None in production."""


@dataclass(frozen=True)
class LogState:
    """A tree readers may be served: `note` is its signed (and cosigned) checkpoint."""

    size: int
    root: bytes
    note: str
    view: TreeView


@dataclass(frozen=True)
class SignedHead:
    """A checkpoint recorded by the fork guard: the log key signed `note` for (size, root)."""

    size: int
    root: bytes
    note: str


@dataclass(frozen=True)
class Head:
    """What the store says about a log now.

    `sequenced`: entries with an index; `signed`: the latest checkpoint recorded by
    compare-and-swap (None: nothing signed yet); `published`: (size, note) of the latest
    checkpoint published, with its cosignatures, kept across restarts (None: nothing known
    to be published, e.g. a data directory from before the embedded driver kept it);
    `failure`: why publication is failing, as the integrator last recorded ("" if not), and
    `failed_at` when it last failed (each failed attempt is a new time: writes waiting on
    any frontend are answered 503 by it).
    """

    sequenced: int
    signed: SignedHead | None
    published: tuple[int, str] | None
    failure: str = ""
    failed_at: float = 0.0


@dataclass(frozen=True)
class Sequenced:
    """The outcome of `sequence`: per submitted entry, in order, its index, whether it is
    new, and its leaf hash; `size` is the number of entries sequenced after this batch."""

    indices: list[int]
    fresh: list[bool]
    leaves: list[bytes]
    size: int


@dataclass(frozen=True)
class Lease:
    """The integrator role, held; `epoch` fences every write made under it."""

    epoch: int


class CorruptionError(RuntimeError):
    """The stored data contradicts itself; the log refuses to go on."""


class LeaseLost(RuntimeError):
    """Another holder has the integrator role (or the store cannot say we still do):
    stop integrating and publishing at once."""


class EntryReader(Protocol):
    """The read side of the entries: async, and never ahead of the size asked for."""

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

    def logged_times(self, size: int) -> AsyncIterator[tuple[int, float]]:
        """(index, time the log logged it) of every receipt entry of a tree of `size`, in no
        particular order: what a backup keeps so that a restore keeps `logged_at`."""
        ...


class TileSource(Protocol):
    """What a publisher reads tiles and entry bundles from: the driver's hash cache and entries."""

    @property
    def hashes(self) -> HashReader: ...

    def read_entries(self, start: int, count: int) -> list[bytes]:
        """Entries start..start+count-1 (CorruptionError if any is missing)."""
        ...


class Driver(TileSource, Protocol):
    """A log's durable store. The appender calls its methods from one thread (its driver
    thread), but `follow` from a second and, where `parallel_sequencing`, `sequence` from a
    third; none is called before `open`."""

    read_only: bool  # writes are refused with 503 (e.g. a read-only data directory)
    shared: bool  # other processes sequence and integrate into the same store: follow their heads
    lease_ttl: float  # seconds a holder may count on its last check of the lease (see `verify`)
    parallel_sequencing: bool  # `sequence` shares nothing with the other methods: it may run beside them

    def open(self) -> Head:
        """Create or recover the store (repairing derived data) and say where it stands."""
        ...

    def head(self) -> Head:
        """The store's current head, including what other processes did."""
        ...

    def sequence(self, datas: Sequence[bytes], *, logged_at: Sequence[float] | None = None) -> Sequenced:
        """Give the entries not already in the log the next indices, durably, exactly once.
        `logged_at` (a restore) keeps the times receipts were first logged."""
        ...

    def extend(self, size: int) -> bytes:
        """Bring the hash cache to `size` leaves (all sequenced) and return that tree's root."""
        ...

    def acquire(self) -> Lease | None:
        """Take the integrator role if no one holds it (a new, larger epoch); None if taken."""
        ...

    def verify(self, lease: Lease) -> None:
        """LeaseLost unless `lease` is still the role's. A holder acts on its last successful
        check for at most `lease_ttl`; a new holder waits that long before acting."""
        ...

    def release(self, lease: Lease) -> None:
        """Give the role up (at shutdown), so that another process takes it at once."""
        ...

    def backfill(self, lease: Lease) -> bool:
        """One step of bringing derived data the store keeps (the receipts index) up to date;
        True while more remains. The role's holder runs the steps between integrations."""
        ...

    def record_checkpoint(self, lease: Lease, old: int | None, signed: SignedHead) -> None:
        """Move the signed head from size `old` (None: nothing signed yet) to `signed`: the
        fork guard. ForkError for a second root of a size; LeaseLost if the head is not at
        `old` or the lease is not the role's. Makes every sequenced entry it covers durable."""
        ...

    def record_published(self, lease: Lease, size: int, note: str, *,
                         write: Callable[[], None] | None = None) -> None:
        """Record (size, note), a signed head with its cosignatures, as published, unless a
        larger one is. `write` (the bucket's checkpoint) runs inside the same fenced
        transaction, after the lease is checked and before the head moves."""
        ...

    def record_failure(self, lease: Lease, message: str) -> None:
        """Tell every frontend that publication is failing (writes are answered 503 at once)."""
        ...

    def follow(self, timeout: float) -> Head:
        """Wait up to `timeout` for another process to sequence or publish, then the head."""
        ...

    def entries(self) -> EntryReader:
        """A reader of the entries (opened by the caller)."""
        ...

    def close(self) -> None: ...


class Publisher(Protocol):
    """Publication of the log as static C2SP tlog-tiles objects (a bucket), beside the store.

    Tiles and bundles are create-only (the same path always holds the same bytes). The
    checkpoint object never moves to a smaller tree. Called on the driver thread.
    """

    errors: int  # failed writes (a metric)
    written: int  # objects created (a metric)

    def stage(self, source: TileSource, old: int, new: int) -> None:
        """Write the full tiles and bundles a tree of `new` leaves has and one of `old` has not,
        before the checkpoint for `new` is signed."""
        ...

    def due(self) -> bool:
        """Whether the checkpoint object may be written again (at most once per interval)."""
        ...

    def seconds_until_due(self) -> float: ...

    def write_checkpoint(self, source: TileSource, note: str, size: int) -> None:
        """The partial tiles of `size`, then the checkpoint object, unless the bucket holds a
        larger tree already: conditional on what was read, so a race never shrinks it."""
        ...

    def checkpoint_size(self) -> int:
        """The size of the checkpoint object now in the bucket (0: none)."""
        ...

    def take_over(self, source: TileSource, start: int, size: int) -> None:
        """On taking the role: stage what the bucket lacks from `start` (its checkpoint's size)
        to `size`, and delete partial tiles an earlier holder left behind."""
        ...

    def close(self) -> None: ...
