"""The storage interface of the log: what a backend implements (docs/architecture.md §3.2, §3.3).

The loop that batches, sequences, integrates, signs, witnesses and publishes lives once,
above this interface (`tlog.server.appender`), and runs the same for every backend; a
backend is a `Driver`, plus, where the log is also published as static tiles, a
`Publisher` (the bucket's objects). The split follows Tessera (an appender above
storage drivers) and Sunlight (a `Backend` for objects beside a `LockBackend` whose
compare-and-swap moves the signed checkpoint); hashes are read as Go's `tlog.HashReader`
reads them.

Drivers:

- `tlog.storage.embedded`: SQLite + per-level hash files in one data directory, one
  process (the default, `make run`);
- `tlog.storage.postgres`: PostgreSQL for entries, dedup, sequence, checkpoints and the
  integrator's lease, for any number of frontends.

Publisher: `tlog.storage.bucket.TilePublisher`, tiles, entry bundles and the checkpoint in
an S3-compatible bucket (C2SP tlog-tiles).

The contract (every driver passes `tests/storage/test_drivers.py`):

- `sequence` durably gives each new entry the next index, exactly once; an entry already
  sequenced (in this batch, an earlier one, or by another process) gets its index again.
  "Durably" may mean "made durable by the next `record_checkpoint`", and nothing is
  acknowledged before that returns (the embedded driver's one fsync per batch).
- The integrator role is a `Lease` with a fencing epoch and an expiry in the store:
  `acquire` takes it when no one holds it or its holder's lease lapsed (a new, larger
  epoch), `renew` keeps it for `lease_ttl` more seconds. Every write of the holder
  (`record_checkpoint`, `record_published`, `record_failure`, `record_swept`) checks the
  epoch and the expiry in the same statement as the write, and is refused (`LeaseLost`)
  once the lease lapsed or another holder took the role: a holder that was paused, cut off
  or slow writes nothing more, whatever it still believes. A holder acts on the role (the
  bucket, the mirrors) only within `lease_ttl` of sending its last successful renewal,
  which is before the store lets anyone else take it.
- The fork guard: `record_checkpoint` moves the signed head by compare-and-swap from the
  size the caller read, and refuses (`ForkError`) a root other than the one already
  recorded for a size. The published head never moves backwards; recording it is a write
  of the store alone (the bucket and the mirrors follow it: `tlog.server.publication`).
- `extend` brings the local hash cache to a size and returns that tree's root, checked
  against the root recorded for that size if there is one (`CorruptionError` if not).
- Readers see only published sizes: the appender hands them a `LogState`.
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tlog.errors import LogFrozen
from tlog.formats.entries import ReceiptRow
from tlog.formats.tiles import TILE_WIDTH, entries_path, tile_path
from tlog.merkle.tree import HashReader, TreeView

__all__ = ["CorruptionError", "Driver", "EntryReader", "Fault", "HashReader", "Head", "Lease", "LeaseLost",
           "LogState", "Publisher", "ReceiptRow", "Sequenced", "SignedHead", "Signer", "Tile", "TileSource",
           "frozen_error"]

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
    any frontend are answered 503 by it); `swept`: a tree size such that the bucket holds no
    partial tile of any tile full at that size any more (`record_swept`); `frozen`: None
    while the log takes entries, else the successor named when it was frozen ("" for none):
    `sequence` refuses every entry from then on (`freeze`).
    """

    sequenced: int
    signed: SignedHead | None
    published: tuple[int, str] | None
    failure: str = ""
    failed_at: float = 0.0
    swept: int = 0
    frozen: str | None = None


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
    """The integrator role, held; `epoch` fences every write made under it. It lasts
    `Driver.lease_ttl` seconds (the store's clock) after each `acquire` or `renew`."""

    epoch: int


def frozen_error(successor: str) -> LogFrozen:
    """What a frozen log answers every write with: the successor named, where there is one."""
    where = f"; write to its successor, {successor}" if successor else ""
    return LogFrozen(f"this log is frozen: it takes no more entries{where}", successor=successor or None)


class CorruptionError(RuntimeError):
    """The stored data contradicts itself; the log refuses to go on."""


class LeaseLost(RuntimeError):
    """Another holder has the integrator role, or this holder's lease lapsed (or the store
    cannot say it has not): stop integrating and publishing at once."""


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
    thread), but `follow` from a second, `acquire`, `renew` and `release` from a third (so
    that a long `extend` never delays a renewal) and, where `parallel_sequencing`,
    `sequence` from a fourth; none is called before `open`."""

    read_only: bool  # writes are refused with 503 (e.g. a read-only data directory)
    shared: bool  # other processes sequence and integrate into the same store: follow their heads
    lease_ttl: float  # seconds a lease lasts after each acquire or renew (math.inf: held until close)
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
        """Take the integrator role if no one holds it or its holder's lease lapsed: a new,
        larger epoch, valid for `lease_ttl` from now. None if another holder's lease runs."""
        ...

    def renew(self, lease: Lease) -> None:
        """Keep the role for `lease_ttl` more seconds from now; LeaseLost if another process
        took it. A holder acts on the role only within `lease_ttl` of sending its last
        successful `acquire` or `renew` (the store's expiry is later: it is counted from when
        the store ran it), so no holder acts once another may have taken the role."""
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

    def record_published(self, lease: Lease, size: int, note: str) -> None:
        """Record (size, note), a signed head with its cosignatures, as published, unless a
        larger one is: a write of the store alone, fenced. The bucket and the mirrors follow
        the published head afterwards, outside any transaction of the store."""
        ...

    def record_failure(self, lease: Lease, message: str) -> None:
        """Tell every frontend that publication is failing (writes are answered 503 at once)."""
        ...

    def record_swept(self, lease: Lease, size: int) -> None:
        """The bucket holds no partial tile of a tile full at `size` any more (never
        backwards): where the next holder's sweep starts (`Head.swept`)."""
        ...

    def freeze(self, successor: str) -> None:
        """Freeze the log for good (docs/architecture.md §3.8): durably, and ordered with
        `sequence` (which refuses every entry with LogFrozen from then on, on every process
        sharing the store), so that no entry is sequenced after it. Not fenced: it is no
        holder's write, and it only ever stops writes. Freezing again keeps the first
        successor (the final checkpoint may already name it to the world)."""
        ...

    def follow(self, timeout: float) -> Head:
        """Wait up to `timeout` for another process to sequence or publish, then the head."""
        ...

    def entries(self) -> EntryReader:
        """A reader of the entries (opened by the caller)."""
        ...

    def close(self) -> None: ...


class Publisher(Protocol):
    """The objects of a log published as static C2SP tlog-tiles in a bucket, beside the store:
    their bytes and their writes, nothing about when (`tlog.server.publication` decides that).

    Tiles and bundles are create-only (the same path always holds the same bytes). The
    checkpoint object never moves to a smaller tree. Every method is safe to call again, and
    late: a write made by a holder that lost the role meanwhile changes nothing a reader of
    the bucket relies on.
    """

    errors: int  # failed operations (a metric)
    written: int  # objects created (a metric)

    def hash_tiles(self, hashes: HashReader, wanted: list[tuple[int, int, int]]) -> list[Tile]:
        """The hash tiles among `wanted` (tile level, index, width; level -1, the entry
        bundles, is read from the store's `EntryReader`), read from the store's hash cache."""
        ...

    def put(self, tiles: list[Tile]) -> None:
        """Create the objects (create-only; ForkError for other bytes at a path)."""
        ...

    def write_checkpoint(self, note: str, size: int) -> int:
        """The checkpoint object := `note`, unless the bucket holds a larger tree: conditional
        on what was read, so a race never shrinks it. The size it shows after."""
        ...

    def checkpoint_size(self) -> int:
        """The size of the checkpoint object now in the bucket (0: none)."""
        ...

    def partials_of(self, tiles: list[tuple[int, int]]) -> list[str]:
        """The partial tiles the bucket holds of these (tile level, index) tiles."""
        ...

    def delete(self, paths: list[str]) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Tile:
    """One object of a tlog-tiles log: a hash tile (`level` >= 0) or an entry bundle (-1)."""

    level: int
    index: int
    width: int
    data: bytes

    @property
    def full(self) -> bool:
        return self.width == TILE_WIDTH

    @property
    def path(self) -> str:
        """Its tlog-tiles path."""
        return entries_path(self.index, self.width) if self.level < 0 else tile_path(self.level, self.index, self.width)
