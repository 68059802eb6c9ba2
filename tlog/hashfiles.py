"""Per-level append-only files of complete subtree hashes (DESIGN §3.2).

File `level-KK` holds node (K, j) = MTH of leaves [j*2^K, (j+1)*2^K) at byte
offset 32*j, for every complete node. A tlog-tiles tile at tile level L is a
contiguous slice of file 8L, and an inclusion proof is one gather per level.

These files are *derived* data: the SQLite database holds every leaf hash and
is the durable truth. The writer appends without fsync; `sync()` is called
periodically and the synced size recorded in the database, and on start
`repair()` recomputes everything above that size from the database. So a
kill -9 or a torn tail never leaves a wrong hash behind.

Readers gather with numpy from read-only memory maps that are remapped only
when a read goes past the mapped length.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .hashing import node_hash

MAX_LEVELS = 64


class HashFiles:
    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._fds: dict[int, int] = {}
        self._maps: dict[int, np.ndarray] = {}
        self._map_lock = threading.Lock()

    # --- files ---------------------------------------------------------------

    def _path(self, level: int) -> Path:
        return self.dir / f"level-{level:02d}"

    def _fd(self, level: int) -> int:
        fd = self._fds.get(level)
        if fd is None:
            fd = os.open(self._path(level), os.O_RDWR | os.O_CREAT, 0o644)
            self._fds[level] = fd
        return fd

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._maps.clear()

    def sync(self) -> None:
        for fd in list(self._fds.values()):
            os.fdatasync(fd)

    def truncate(self, size: int) -> None:
        """Drop every node that is not complete in a tree of `size` leaves."""
        with self._map_lock:
            self._maps.clear()
        for level in range(MAX_LEVELS):
            p = self._path(level)
            if not p.exists():
                continue
            keep = (size >> level) * 32
            if p.stat().st_size > keep:
                os.truncate(p, keep)

    def intact_size(self, size: int) -> int:
        """Largest s <= size such that every level file holds every node complete at s."""
        for level in range(size.bit_length()):
            p = self._path(level)
            have = p.stat().st_size // 32 if p.exists() else 0
            if have < size >> level:
                size = min(size, have << level)
        return size

    # --- reads -----------------------------------------------------------------

    def _array(self, level: int, need: int) -> np.ndarray:
        """A (count, 32) uint8 view of level `level` holding at least `need` nodes."""
        arr = self._maps.get(level)
        if arr is not None and arr.shape[0] >= need:
            return arr
        with self._map_lock:
            arr = self._maps.get(level)
            if arr is None or arr.shape[0] < need:
                length = os.path.getsize(self._path(level)) // 32 * 32
                if length // 32 < need:
                    raise IndexError(f"level {level} has {length // 32} nodes, need {need}")
                arr = np.memmap(self._path(level), dtype=np.uint8, mode="r", shape=(length // 32, 32))
                self._maps[level] = arr
        return arr

    def read(self, level: int, index: int) -> bytes:
        return self._array(level, index + 1)[index].tobytes()

    def gather(self, level: int, indices: np.ndarray) -> np.ndarray:
        """Rows `indices` of `level` as an (m, 32) array (one vectorized gather)."""
        if indices.size == 0:
            return np.empty((0, 32), dtype=np.uint8)
        return self._array(level, int(indices.max()) + 1)[indices]

    def read_range(self, level: int, start: int, count: int) -> bytes:
        if count == 0:
            return b""
        return self._array(level, start + count)[start : start + count].tobytes()

    # --- writes (single writer thread) -----------------------------------------

    def append(self, old_size: int, leaves: Sequence[bytes]) -> None:
        """Append leaf hashes for indices old_size.. and every node they complete."""
        new_size = old_size + len(leaves)
        level_nodes = list(leaves)
        first = old_size  # index of level_nodes[0] at the current level
        level = 0
        while level_nodes:
            os.pwrite(self._fd(level), b"".join(level_nodes), first * 32)
            level += 1
            lo, hi = old_size >> level, new_size >> level
            if lo == hi:
                break
            # Children of nodes lo..hi-1 at the level below start at 2*lo; the
            # first may be an old node that is already on disk.
            below = level_nodes
            if 2 * lo < first:  # 2*lo is first or first - 1
                below = [self._pread(level - 1, 2 * lo)] + below
            level_nodes = [node_hash(below[2 * i], below[2 * i + 1]) for i in range(hi - lo)]
            first = lo

    def _pread(self, level: int, index: int) -> bytes:
        data = os.pread(self._fd(level), 32, index * 32)
        if len(data) != 32:
            raise IOError(f"hash file level {level} is short at index {index}")
        return data
