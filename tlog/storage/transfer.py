"""Moving a log between storages: backups, restores and migrations, through the storage
interface only, so that they work between any two backends.

A log is its entries in index order and its signing key: hashes, indexes and tiles
are derived, and checkpoints are signed again by the same key for the same roots
(which is not a fork). A backup is a directory:

    entries      every entry in index order, each as a 16-bit big-endian length and its
                 bytes (the tlog-tiles entry bundle encoding, one bundle after another)
    logged_at    "<index> <time>" lines, in no particular order: when the log first logged
                 each receipt entry (Unix time; what `GET /v1/receipts?since=` compares),
                 which a restore keeps. Backups made before it existed lack it; their
                 receipts are logged again at the time of the restore.
    checkpoint   the signed checkpoint the backup reaches: a restore must reproduce its root;
                 written last, so a directory without it is an unfinished backup

plus the key files, which the CLI copies (mode 0600).

An import (`tlog.server.importing`) first reads every entry once and checks that they
make the checkpoint's size and root, and that the checkpoint is signed by the key the
target signs with (`SourceCheck`): a damaged or altered backup is refused before the target
holds anything (entries left in a target would be signed by its next start, under the
log's own key: a fork). Then it appends every entry through the log's own appender, which
checks the root again before it signs one checkpoint for them and publishes it like any
other (witnesses, bucket).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tlog.errors import ConfigError, OAPError, VerificationError
from tlog.formats.checkpoint import parse_checkpoint
from tlog.formats.hashing import leaf_hashes
from tlog.formats.keys import Verifier
from tlog.formats.note import open_note, parse_note
from tlog.formats.tiles import TILE_WIDTH
from tlog.merkle.tree import StreamingRoot
from tlog.storage.durable import fsync_dir, write_atomic
from tlog.storage.interface import EntryReader

BATCH = 4096  # entries checked, and sequenced, per batch on import


@dataclass(frozen=True)
class Snapshot:
    """A log as a reader sees it: a committed size, its signed checkpoint, and its entries."""

    size: int
    note: str
    entries: EntryReader


def checkpoint_of(note: str) -> tuple[int, bytes]:
    """(size, root) of a signed checkpoint note (signatures are checked by whoever trusts it)."""
    cp = parse_checkpoint(parse_note(note).text)
    return cp.size, cp.root


class LoggedTimes:
    """When each receipt entry of a log was first logged, by index (two sorted arrays: a log
    may hold many millions of receipts)."""

    def __init__(self, pairs: list[tuple[int, float]] | None = None) -> None:
        pairs = sorted(pairs or [])
        self.index = np.array([p[0] for p in pairs], dtype=np.int64)
        self.at = np.array([p[1] for p in pairs], dtype=np.float64)

    @classmethod
    async def read(cls, entries: EntryReader, size: int) -> LoggedTimes:
        return cls([pair async for pair in entries.logged_times(size)])

    def __len__(self) -> int:
        return len(self.index)

    def between(self, start: int, count: int, default: float) -> list[float]:
        """Per entry start..start+count-1: its logged time, or `default` where none is known."""
        out = np.full(count, default, dtype=np.float64)
        lo, hi = np.searchsorted(self.index, [start, start + count])
        out[self.index[lo:hi] - start] = self.at[lo:hi]
        return out.tolist()


async def export(snapshot: Snapshot, out: Path, progress: Callable[[int], None] | None = None) -> int:
    """Write `snapshot` as a backup directory `out` (which must not exist); returns the size.

    The checkpoint is written last, atomically: a directory without one is an
    unfinished backup.
    """
    out.mkdir(parents=True, exist_ok=False)
    with open(out / "entries", "wb") as f:
        for start in range(0, snapshot.size, TILE_WIDTH):
            count = min(TILE_WIDTH, snapshot.size - start)
            f.write(await snapshot.entries.bundle(start, count))
            if progress is not None:
                progress(count)
        f.flush()
        os.fsync(f.fileno())
    with open(out / "logged_at", "w") as t:
        async for index, at in snapshot.entries.logged_times(snapshot.size):
            t.write(f"{index} {at!r}\n")
        t.flush()
        os.fsync(t.fileno())
    write_atomic(out / "checkpoint", snapshot.note)
    fsync_dir(out)
    return snapshot.size


def read_backup(src: Path) -> tuple[str, Callable[[], Iterator[bytes]], LoggedTimes]:
    """(the backup's signed checkpoint, a function that reads its entries in order, when its
    receipts were logged)."""
    note_path = src / "checkpoint"
    if not note_path.exists():
        raise VerificationError(f"{src} has no checkpoint: not a backup, or an unfinished one")
    note = note_path.read_text()
    if not (src / "entries").is_file():
        raise VerificationError(f"{src} has no entries file: not a backup, or a damaged one")

    def entries() -> Iterator[bytes]:
        with open(src / "entries", "rb") as f:
            while head := f.read(2):
                n = int.from_bytes(head, "big")
                data = f.read(n)
                if len(head) != 2 or len(data) != n:
                    raise VerificationError(f"{src / 'entries'} is truncated")
                yield data

    pairs: list[tuple[int, float]] = []
    if (src / "logged_at").exists():
        with open(src / "logged_at") as t:
            for k, line in enumerate(t, 1):
                try:
                    index, at = line.split()
                    pairs.append((int(index), float(at)))
                except ValueError:
                    raise VerificationError(f"{src / 'logged_at'} line {k} is not '<index> <time>'") from None
    return note, entries, LoggedTimes(pairs)


# In a target's data directory while an import writes to it: until the import has signed
# its checkpoint, the entries there may be a part of the source, and the log must not start
# on them (its first integration would sign them: a smaller or different tree under the
# log's key). Holds the checkpoint the import is for.
UNFINISHED_IMPORT = "import-unfinished"


def mark_import(data_dir: Path, note: str) -> None:
    write_atomic(data_dir / UNFINISHED_IMPORT, note)
    fsync_dir(data_dir)


def clear_import(data_dir: Path) -> None:
    (data_dir / UNFINISHED_IMPORT).unlink(missing_ok=True)
    fsync_dir(data_dir)


def refuse_unfinished_import(data_dir: Path) -> None:
    """ConfigError if an import into `data_dir` started writing and did not finish."""
    if (data_dir / UNFINISHED_IMPORT).exists():
        raise ConfigError(f"an oap-log restore or migrate into {data_dir} did not finish (see "
                          f"{data_dir / UNFINISHED_IMPORT}): the log holds part of it at most. Empty the "
                          "target (the data directory, and the database and bucket if configured) and run it again")


class SourceCheck:
    """The check of an import's source, fed its entries in order, a batch at a time (from a
    file or a database, sync or async): that `note` is a checkpoint of `key`'s log (its
    origin, signed by `key`) and that the entries make its size and root. VerificationError
    otherwise. (This proves the source consistent with itself and with the key the target
    signs with; whether it is the latest state of the log is for the operator to know: see
    ops/runbooks/backup-restore.md.)"""

    def __init__(self, note: str, key: Verifier) -> None:
        try:
            open_note(note, [key])
        except OAPError as e:
            raise VerificationError(f"the checkpoint is not signed by this log's key {key.name!r} "
                                    f"(key ID {key.key_id.hex()}): {e.message}") from None
        cp = parse_checkpoint(parse_note(note).text)
        if cp.origin != key.name:
            raise VerificationError(f"the checkpoint is of origin {cp.origin!r}, not this log's {key.name!r}")
        self.size, self.root = cp.size, cp.root
        self._acc = StreamingRoot()

    def add(self, datas: list[bytes]) -> None:
        if self._acc.size + len(datas) > self.size:
            raise VerificationError(f"the source holds more than the checkpoint's {self.size} entries; "
                                    "nothing was imported")
        if datas:
            self._acc.add(leaf_hashes(datas))

    def finish(self) -> int:
        """The size, once every entry was added."""
        acc = self._acc
        if (acc.size, acc.root()) != (self.size, self.root):
            got = f"{acc.size} entries" if acc.size != self.size else f"root {acc.root().hex()[:16]}..."
            raise VerificationError(f"the entries do not make the checkpoint's tree (size {self.size}, root "
                                    f"{self.root.hex()[:16]}...): {got}; nothing was imported")
        return self.size
