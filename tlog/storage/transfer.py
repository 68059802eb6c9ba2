"""Moving a log between storages: backups, restores and migrations, through the storage
interface only, so that they work between any two backends.

A log is its entries in index order and its signing key: hashes, indexes and tiles
are derived, and checkpoints are signed again by the same key for the same roots
(which is not a fork). A backup is a directory:

    entries      every entry in index order, each as a 16-bit big-endian length and its
                 bytes (the tlog-tiles entry bundle encoding, one bundle after another)
    checkpoint   the signed checkpoint the backup reaches: a restore must reproduce its root

plus the key files, which the CLI copies (mode 0600).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tlog.errors import VerificationError
from tlog.formats.checkpoint import parse_checkpoint
from tlog.formats.note import parse_note
from tlog.formats.tiles import TILE_WIDTH
from tlog.storage.files import fsync_dir, write_atomic
from tlog.storage.interface import EntryReader, LogState, LogStorage, Signer

BATCH = 4096  # entries appended per durable batch on import


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
    write_atomic(out / "checkpoint", snapshot.note)
    fsync_dir(out)
    return snapshot.size


def read_backup(src: Path) -> tuple[str, Iterator[bytes]]:
    """(the backup's signed checkpoint, its entries in order)."""
    note_path = src / "checkpoint"
    if not note_path.exists():
        raise VerificationError(f"{src} has no checkpoint: not a backup, or an unfinished one")
    note = note_path.read_text()

    def entries() -> Iterator[bytes]:
        with open(src / "entries", "rb") as f:
            while head := f.read(2):
                n = int.from_bytes(head, "big")
                data = f.read(n)
                if len(head) != 2 or len(data) != n:
                    raise VerificationError(f"{src / 'entries'} is truncated")
                yield data

    return note, entries()


def import_into(storage: LogStorage, sign: Signer, note: str, entries: Iterator[bytes],
                progress: Callable[[int], None] | None = None) -> LogState:
    """Append `entries` to an empty, opened `storage`, in order, and check that the result
    has the size and root of the signed checkpoint `note`. VerificationError otherwise."""
    size, root = checkpoint_of(note)
    state = storage.refresh()
    if state.size != 0:
        raise VerificationError(f"the target log is not empty (it has {state.size} entries)")
    batch: list[bytes] = []
    done = 0

    def flush() -> None:
        nonlocal done, state
        result = storage.append(batch, sign)
        if result.indices != list(range(done, done + len(batch))):
            raise VerificationError(f"entries {done}..{done + len(batch) - 1} did not land in order "
                                    "(a repeated entry, or a target that is not empty)")
        done += len(batch)
        state = result.state
        if progress is not None:
            progress(len(batch))
        batch.clear()

    for data in entries:
        batch.append(data)
        if len(batch) == BATCH:
            flush()
    if batch:
        flush()
    if (state.size, state.root) != (size, root):
        raise VerificationError(f"the imported log has size {state.size}, root {state.root.hex()[:16]}..., but "
                                f"the checkpoint says size {size}, root {root.hex()[:16]}...")
    return state
