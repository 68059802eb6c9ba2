"""What a mirror keeps, and the contract its storage keeps (docs/architecture.md §4.1).

Per log (origin) a mirror keeps, as C2SP tlog-mirror defines them:

- the *pending checkpoint*: the latest checkpoint accepted by add-checkpoint, with the
  log's signatures, at or ahead of the mirror checkpoint;
- the *mirror checkpoint*: the latest checkpoint whose entries are all stored, with the
  log's signatures and the mirror's cosignatures: what the monitoring prefix serves;
- the entries, stored from index 0 in order, and the tree's hashes; `next_entry` is the
  number stored (the first missing index): packages are committed in order per log.

`MirrorStore` is the whole interface between the mirror's core and storage. Its
methods are synchronous and called from one writer thread (every write, in order)
and from reader threads (tiles, bundles). The contract, which `embedded.EmbeddedStore`
keeps and `tests/witness/test_mirror_store.py` checks:

1. `append` stores entries [first, first + n) of a log where `first` is its
   `next_entry` (the caller skips what is stored), within one entry bundle; readers see
   them once it returns; they are durable once a later `sync` returns (a crash before
   may lose a suffix of appends, never leave a hole or a torn bundle).
2. `sync` returns only when every earlier `append` is on stable storage.
3. `set_pending` and `commit` are durable when they return, and so is every `append`
   before them (each is a `sync`). A pending or mirror checkpoint is recorded only if no
   other root was ever recorded for its size (`ForkError` otherwise); `commit` never
   moves the mirror checkpoint back.
4. `commit` is called only with `size <= next_entry`: the cosignature it persists leaves
   the mirror only after that, so the mirror never cosigns entries it could lose.
5. Reads (`tile`, `bundle`, `root`) answer only for entries already appended.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Checkpointed:
    """A checkpoint as the mirror holds it: size, root, and the note it serves or was given
    (checkpoint text, the log's verified signatures and, for the mirror checkpoint, the
    mirror's cosignatures); `cosigned_at` is the cosignature timestamp (0 for pending)."""

    size: int
    root: bytes
    note: str
    cosigned_at: int = 0


@dataclass(frozen=True)
class LogRecord:
    """What is stored for one log."""

    origin: str
    pending: Checkpointed | None
    mirror: Checkpointed | None
    next_entry: int


class MirrorStore(Protocol):
    def record(self, origin: str) -> LogRecord:
        """The log's stored state (a log never seen has no checkpoints and next_entry 0)."""
        ...

    def pending_at(self, origin: str, size: int) -> Checkpointed | None:
        """A past pending checkpoint of this size, if still kept (the last few hundred are)."""
        ...

    def set_pending(self, origin: str, new: Checkpointed) -> None:
        """Record `new` as the pending checkpoint (durable on return; ForkError on a second root)."""
        ...

    def commit(self, origin: str, new: Checkpointed) -> None:
        """Record `new` as the mirror checkpoint (durable on return; never backwards; ForkError
        on a second root for a size)."""
        ...

    def append(self, origin: str, first: int, blob: bytes, leaves: bytes) -> None:
        """Store entries [first, first + n): `blob` is their entry-bundle encoding, `leaves` their
        n leaf hashes (32 bytes each); `first` == next_entry and the range stays in one bundle."""
        ...

    def sync(self) -> None:
        """Make every earlier append durable."""
        ...

    def entries(self, origin: str, first: int, count: int) -> list[bytes]:
        """Stored entries [first, first + count), all within one bundle."""
        ...

    def bundle(self, origin: str, index: int, width: int) -> bytes | None:
        """Entry bundle `index` holding its first `width` entries, or None if not stored."""
        ...

    def tile(self, origin: str, level: int, index: int, width: int) -> bytes | None:
        """Hash tile (tile level, index) of `width` hashes, or None if not all are stored."""
        ...

    def root(self, origin: str, size: int) -> bytes:
        """The root of the stored tree of `size` <= next_entry leaves, from stored hashes."""
        ...

    def rebuild_hashes(self, origin: str) -> None:
        """Recompute the stored hashes of a log from its stored entries."""
        ...

    def close(self) -> None:
        ...
