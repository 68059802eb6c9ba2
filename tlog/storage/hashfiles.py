"""Per-level append-only files of complete subtree hashes (docs/architecture.md §3.2).

File `level-KK` holds node (K, j) = MTH of leaves [j*2^K, (j+1)*2^K) at byte
offset 32*j, for every complete node. A tlog-tiles tile at tile level L is a
contiguous slice of file 8L, and an inclusion proof is one gather per level.

These files are *derived* data: the SQLite database holds every leaf hash and
is the durable truth. The writer appends without fsync; `sync()` is called
periodically and the synced size recorded in the database, and on start
`repair()` recomputes everything above that size from the database. So a
kill -9 or a torn tail never leaves a wrong hash behind.

Readers gather with `np.take` from read-only memory maps that are remapped
only when a read goes past the mapped length.

A file never shrinks in place: a reader's map past the new end would fault with
SIGBUS. `cut()` writes the part it keeps to a new file beside the old one and
renames it over the old, so a reader keeps the old, consistent file until it
reopens. Readers reopen at their next read: the writer counts swaps in the
8-byte file `generation` of the directory, which every reader has mapped and
compares with the count it opened at (a memory load per read, no system call).
Readers of nodes that both files hold read the same bytes from either, so the
moment a reader reopens changes no answer.

Memory: every page of a map that a read touches counts in the process's RSS
as RssFile (clean page cache: shared, and reclaimed by the kernel under
pressure, unlike RssAnon), and random proofs touch nearly every page of the
low levels. So by default a level larger than the window (16 MiB; the log's
`map_window_mb` setting) is read through its map one window at a time:
a gather takes the nodes of each window it touches, then unmaps that window
again (MADV_DONTNEED: the pages stay in the page cache), so at most one window
per level and gatherer is mapped on top of the small levels. Single reads and
tile ranges of such a level use pread. With a window of 0 nothing is
unmapped, and RSS grows towards the size of the hash files (~64 bytes per leaf).

The price of the window is one minor fault per touched page (or per 2 MiB
huge page) each time a window is mapped again. Maps ask for huge pages
(MADV_HUGEPAGE): a page the kernel reads in for a fault is then read as a
2 MiB folio, which it maps with one entry, and a batch of random proofs on a
2^24 tree costs a few hundred faults instead of ~200,000. Pages that came into
the page cache otherwise (our own appends, pread) are small; a window found in
small pages is dropped from the page cache once, so that the next fault reads it
back as huge pages (`_regrow`; benchmarks/README.md has the numbers).
"""
from __future__ import annotations

import errno
import mmap
import os
import resource
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from tlog.formats.hashing import hash_rows, node_hashes_of_pairs
from tlog.storage.durable import fsync_dir

if TYPE_CHECKING:
    from typing_extensions import Buffer  # numpy's stubs give arrays __buffer__ on Python 3.12+ only

MAX_LEVELS = 64
GENERATION = "generation"
"""The file of the directory whose 8 bytes count the swaps `cut()` made (see the module docstring)."""
DEFAULT_MAP_WINDOW_MB = 16
"""MiB of one level that may stay mapped; 0: no limit (see the module docstring)."""


_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", None)
_FAULT_AROUND = 64 << 10  # Linux's default fault_around_bytes
_MASK_WINDOWS = 64  # up to this many windows a gather makes one pass per window (faster), beyond it sorts
_FAULT_SLACK = 16  # faults a window may take beyond two per 2 MiB page before it counts as small pages
_HUGE = 2 << 20
_REGROW_SECONDS = 60.0  # the first wait before a window is dropped again; it doubles each time
_REGROW_MAX_SECONDS = 3600.0
# This thread's faults (Linux): another thread's would be noise. Without them, or without
# posix_fadvise, windows are never dropped.
_CAN_REGROW = hasattr(resource, "RUSAGE_THREAD") and hasattr(os, "posix_fadvise")


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt if _CAN_REGROW else 0


class _Scratch:
    """One gather's buffer for a window's rows, written through once when (re)allocated,
    so that taking rows into it faults no anonymous pages."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = np.empty((0, 32), dtype=np.uint8)

    def rows(self, n: int) -> np.ndarray:
        if n > self.buf.shape[0]:
            self.buf = np.empty((n, 32), dtype=np.uint8)
            self.buf.fill(0)
        return self.buf[:n]


class _Map:
    """One read-only mapping of a level file and its (rows, 32) uint8 view."""

    __slots__ = ("arr", "mm", "rows", "window", "windowed")

    def __init__(self, fd: int, rows: int, window: int) -> None:
        self.mm = mmap.mmap(fd, rows * 32, access=mmap.ACCESS_READ)
        if _HUGEPAGE is not None:
            try:
                self.mm.madvise(_HUGEPAGE)  # fault-in reads as 2 MiB folios (see the module docstring)
            except OSError:  # EINVAL from a kernel without transparent huge pages: only a hint
                pass
        self.arr = np.frombuffer(self.mm, dtype=np.uint8).reshape(rows, 32)
        self.rows = rows
        self.window = window
        self.windowed = 0 < window < rows * 32


class HashFiles:
    def __init__(self, directory: Path, *, window: int = DEFAULT_MAP_WINDOW_MB << 20) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        if window < 0 or window % mmap.PAGESIZE:
            raise ValueError(f"the map window must be 0 or a multiple of {mmap.PAGESIZE} bytes")
        self.window = window  # bytes of a level kept mapped; 0: no limit
        self._fds: dict[int, int] = {}  # the writer's, read-write
        self._rfds: dict[int, int] = {}  # readers', read-only
        self._fd_lock = threading.Lock()
        self._maps: dict[int, _Map] = {}
        self._map_lock = threading.Lock()
        self._regrown: dict[tuple[int, int], tuple[float, float]] = {}  # (level, window) -> (not before, wait)
        self._regrow_lock = threading.Lock()
        self.regrown = 0  # windows dropped to be read back as huge pages (tests, metrics)
        # Descriptors of files a cut replaced: another thread may be reading through one, and a
        # closed number can be reused for another file at once, so they are closed with the object.
        self._retired: list[int] = []
        self._gen_map: mmap.mmap | None = None
        self._gen: memoryview | None = None  # the swap count, shared with every process (uint64)
        self._gen_writable = False
        self._old_gen_maps: list[tuple[mmap.mmap, memoryview | None]] = []
        self._seen = 0  # the count this object's descriptors and maps were opened at
        self._open_generation(create=False)

    # --- files ---------------------------------------------------------------

    def _path(self, level: int) -> Path:
        return self.dir / f"level-{level:02d}"

    def _open_generation(self, *, create: bool) -> None:
        """Map the swap count (writable with `create`, for the writer). The writer creates it
        before its first level file, so a reader that finds a level file finds it too; a
        reader never creates it (the directory may be read-only), and without it reads as
        a directory where nothing was ever swapped."""
        if self._gen is not None and (self._gen_writable or not create):
            return
        path = self.dir / GENERATION
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644) if create else os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            if create and os.fstat(fd).st_size < 8:
                os.posix_fallocate(fd, 0, 8)  # zeros: no swap yet (grows the file, never shrinks it)
            if os.fstat(fd).st_size < 8:  # being created by a writer: looked for again on the next open
                return
            gen_map = mmap.mmap(fd, 8, access=mmap.ACCESS_WRITE if create else mmap.ACCESS_READ)
        finally:
            os.close(fd)
        old = self._gen_map
        if old is not None:  # a read-only map that readers load without a lock: kept until close()
            self._old_gen_maps.append((old, self._gen))
        self._gen_map, self._gen, self._gen_writable = gen_map, memoryview(gen_map).cast("Q"), create
        if old is None:
            self._seen = self._gen[0]

    def _current(self) -> None:
        """Reopen the files if a writer swapped any since they were opened (in any process)."""
        gen = self._gen
        if gen is not None and gen[0] != self._seen:
            with self._map_lock, self._fd_lock:
                seen = gen[0]
                self._retired.extend(self._rfds.values())
                self._rfds.clear()
                self._maps.clear()  # a gather under way keeps its map of the old file
                self._seen = seen

    def _fd(self, level: int) -> int:
        fd = self._fds.get(level)
        if fd is None:
            with self._fd_lock:
                fd = self._fds.get(level)
                if fd is None:
                    self._open_generation(create=True)
                    fd = os.open(self._path(level), os.O_RDWR | os.O_CREAT, 0o644)
                    self._fds[level] = fd
        return fd

    def _read_fd(self, level: int) -> int:
        """A read-only descriptor (readers never create files: the directory may be read-only)."""
        fd = self._rfds.get(level)
        if fd is None:
            with self._fd_lock:
                fd = self._rfds.get(level)
                if fd is None:
                    if self._gen is None:
                        self._open_generation(create=False)
                    try:
                        fd = os.open(self._path(level), os.O_RDONLY)
                    except FileNotFoundError:
                        raise IndexError(f"level {level} has no nodes") from None
                    self._rfds[level] = fd
        return fd

    def close(self) -> None:
        for fd in [*self._fds.values(), *self._rfds.values(), *self._retired]:
            os.close(fd)
        self._fds.clear()
        self._rfds.clear()
        self._retired.clear()
        self._maps.clear()
        for gen_map, gen in [*self._old_gen_maps, (self._gen_map, self._gen)]:
            if gen is not None:
                gen.release()
            if gen_map is not None:
                gen_map.close()
        self._old_gen_maps.clear()
        self._gen_map, self._gen, self._gen_writable = None, None, False

    def sync(self) -> None:
        for fd in list(self._fds.values()):
            os.fdatasync(fd)

    def cut(self, size: int) -> None:
        """Drop every node that is not complete in a tree of `size` leaves (writer only).

        A level file longer than that is replaced, never shortened in place (see the module
        docstring): the nodes it keeps are copied to a new file beside it, made durable and
        renamed over it (a level that keeps nothing is unlinked). The copy costs the bytes
        kept, so a caller that recomputes nodes anyway rewrites them in place with append()
        and cuts only what lies past its size."""
        swapped = False
        for level in range(MAX_LEVELS):
            p = self._path(level)
            try:
                have = p.stat().st_size
            except FileNotFoundError:
                continue
            keep = (size >> level) * 32
            if have <= keep:
                continue
            if keep:
                self._write_beside(p, keep)
            else:
                p.unlink()
            swapped = True
        if not swapped:
            return
        fsync_dir(self.dir)
        with self._map_lock, self._fd_lock:
            # This object's readers (other threads) move to the new files at once; a read under
            # way finishes on the old descriptor or map, which stay valid.
            self._retired.extend([*self._fds.values(), *self._rfds.values()])
            self._fds.clear()
            self._rfds.clear()
            self._maps.clear()
            self._open_generation(create=True)
            if self._gen is not None:
                self._gen[0] += 1  # other processes' readers reopen at their next read
                self._seen = self._gen[0]

    @staticmethod
    def _write_beside(path: Path, keep: int) -> None:
        """The first `keep` bytes of `path` in a new file, durable, renamed over `path`."""
        tmp = path.with_name(path.name + ".new")
        tmp.unlink(missing_ok=True)  # left by a crash during an earlier cut
        src = os.open(path, os.O_RDONLY)
        try:
            dst = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                _copy(src, dst, keep)
                os.fdatasync(dst)
            finally:
                os.close(dst)
        finally:
            os.close(src)
        os.replace(tmp, path)

    def intact_size(self, size: int) -> int:
        """Largest s <= size such that every level file holds every node complete at s."""
        for level in range(size.bit_length()):
            p = self._path(level)
            have = p.stat().st_size // 32 if p.exists() else 0
            if have < size >> level:
                size = min(size, have << level)
        return size

    # --- reads -----------------------------------------------------------------

    def _map(self, level: int, need: int) -> _Map:
        """The mapping of `level`, holding at least `need` nodes."""
        m = self._maps.get(level)
        if m is not None and m.rows >= need:
            return m
        with self._map_lock:
            m = self._maps.get(level)
            if m is None or m.rows < need:
                fd = self._read_fd(level)
                rows = os.fstat(fd).st_size // 32
                if rows < need:
                    raise IndexError(f"level {level} has {rows} nodes, need {need}")
                m = _Map(fd, rows, self.window)
                self._maps[level] = m
        return m

    def read(self, level: int, index: int) -> bytes:
        """One node. Never remaps: a node past the mapped length is pread."""
        gen = self._gen
        if gen is not None and gen[0] != self._seen:  # _current(), inline: this is the hottest read
            self._current()
        m = self._maps.get(level)
        if m is None:
            try:
                m = self._map(level, index + 1)
            except IndexError:
                m = None
        if m is not None and index < m.rows and not m.windowed:
            return m.mm[index * 32 : index * 32 + 32]
        data = os.pread(self._read_fd(level), 32, index * 32)
        if len(data) != 32:
            raise IndexError(f"level {level} has no node {index}")
        return data

    def gather(self, level: int, indices: np.ndarray, *, need: int | None = None) -> np.ndarray:
        """Rows `indices` (all >= 0) of `level` as an (m, 32) array.

        `need`, if given, is an upper bound of max(indices) + 1 the caller
        already knows (it spares a pass over the indices).
        """
        if indices.size == 0:
            return np.empty((0, 32), dtype=np.uint8)
        self._current()
        m = self._map(level, int(indices.max()) + 1 if need is None else need)
        if not m.windowed:
            return np.take(m.arr, indices, axis=0, mode="clip")
        return self._gather_windowed(level, m, indices)

    def _gather_windowed(self, level: int, m: _Map, indices: np.ndarray) -> np.ndarray:
        """Window by window (any index order): take the window's rows, then unmap it."""
        window = np.floor_divide(indices, m.window // 32)
        first, last = int(window.min()), int(window.max())
        out = np.empty((indices.size, 32), dtype=np.uint8)
        scratch = _Scratch()
        if first == last:
            self._take_window(level, m, first, indices, out, None, scratch)
        elif last - first < _MASK_WINDOWS:  # one pass per window
            for w in range(first, last + 1):
                sel = np.flatnonzero(window == w)
                if sel.size:
                    self._take_window(level, m, w, indices, out, sel, scratch)
        else:  # many windows: group by sorting once (a radix sort below 2^16 windows)
            rel = window - first
            order = np.argsort(rel.astype(np.uint16) if last - first < 1 << 16 else rel, kind="stable")
            ws = window[order]
            cuts = np.flatnonzero(ws[1:] != ws[:-1]) + 1
            for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), ws.size]):
                self._take_window(level, m, int(ws[lo]), indices, out, order[lo:hi], scratch)
        return out

    def _take_window(self, level: int, m: _Map, w: int, indices: np.ndarray, out: np.ndarray,
                     sel: np.ndarray | None, scratch: _Scratch) -> None:
        """out[sel] = rows indices[sel] (all of them if sel is None), all in window w;
        then unmap the window, and if mapping it took more faults than 2 MiB pages would
        have (the page cache holds it in small pages), have it read back as huge pages.
        The rows are taken into a buffer touched beforehand, so the faults counted are
        the map's alone."""
        if sel is None:  # the whole gather: straight into `out`, written through first
            ix, rows = indices, out
            out.fill(0)
        else:
            ix = indices[sel]
            rows = scratch.rows(ix.size)
        faults = _minor_faults()
        np.take(m.arr, ix, axis=0, out=rows, mode="clip")
        faults = _minor_faults() - faults
        if sel is not None:
            out[sel] = rows
        self._unmap_window(m, w)
        if _CAN_REGROW and m.window >= _HUGE:
            length = min(m.window, m.rows * 32 - w * m.window)
            if faults > 2 * -(-length // _HUGE) + _FAULT_SLACK:
                self._regrow(level, m, w)

    def _regrow(self, level: int, m: _Map, w: int) -> None:
        """Drop window w of `level` from the page cache (the kernel keeps what is dirty or
        mapped elsewhere), so the next fault reads it back through a MADV_HUGEPAGE map
        as 2 MiB pages: pages our own appends wrote, or that pread brought in, are small,
        and re-mapping small pages for every gather costs ~5x the gather. A window found
        small again waits twice as long each time (1 minute up to an hour): where huge
        pages cannot be had, or tile reads by pread keep bringing small ones in, the
        re-reads die down."""
        key = (level, w)
        now = time.monotonic()
        with self._regrow_lock:
            not_before, wait = self._regrown.get(key, (0.0, _REGROW_SECONDS / 2))
            if now < not_before:
                return
            wait = min(2 * wait, _REGROW_MAX_SECONDS)
            self._regrown[key] = (now + wait, wait)
            self.regrown += 1
        start = w * m.window
        os.posix_fadvise(self._read_fd(level), start, min(m.window, m.rows * 32 - start), os.POSIX_FADV_DONTNEED)

    @staticmethod
    def _unmap_window(m: _Map, w: int) -> None:
        """Unmap window w and the kernel's fault-around reach on either side of it (a
        fault maps the neighbouring pages of its 64 KiB block, which may cross)."""
        start = max(0, w * m.window - _FAULT_AROUND)
        end = min(m.rows * 32, (w + 1) * m.window + _FAULT_AROUND)
        m.mm.madvise(mmap.MADV_DONTNEED, start, end - start)

    def read_range(self, level: int, start: int, count: int) -> bytes:
        if count == 0:
            return b""
        self._current()
        m = self._maps.get(level)
        if m is not None and start + count <= m.rows and not m.windowed:
            return m.mm[start * 32 : (start + count) * 32]
        data = os.pread(self._read_fd(level), count * 32, start * 32)
        if len(data) != count * 32:
            raise IndexError(f"level {level} has fewer than {start + count} nodes")
        return data

    # --- writes (single writer thread) -----------------------------------------

    def append(self, old_size: int, leaves: Sequence[bytes] | np.ndarray) -> None:
        """Append leaf hashes for indices old_size.. and every node they complete.

        `leaves` is a sequence of 32-byte hashes or an (m, 32) uint8 array.
        Each level is one pwrite, and each level's new nodes are hashed in one
        `node_hashes` pass.
        """
        nodes = hash_rows(leaves)
        new_size = old_size + nodes.shape[0]
        first = old_size  # index of nodes[0] at the current level
        level = 0
        while nodes.shape[0]:
            self._pwrite_all(level, nodes, first)
            level += 1
            lo, hi = old_size >> level, new_size >> level
            if lo == hi:
                break
            # Children of nodes lo..hi-1 at the level below start at 2*lo; the
            # first may be an old node that is already on disk.
            below = nodes
            if 2 * lo < first:  # 2*lo is first or first - 1
                prev = np.frombuffer(self._pread(level - 1, 2 * lo), dtype=np.uint8).reshape(1, 32)
                below = np.concatenate([prev, nodes])
            pairs = np.ascontiguousarray(below[: 2 * (hi - lo)]).reshape(hi - lo, 64)
            nodes = node_hashes_of_pairs(pairs)
            first = lo

    def reserve(self, size: int) -> None:
        """Make every level file as long as the tree of `size` leaves needs (a hole where it
        grows; never shorter): readers map a level by the number of nodes of the size they
        serve, whichever of them were written."""
        for level in range(size.bit_length()):
            fd = self._fd(level)
            if os.fstat(fd).st_size < (size >> level) * 32:
                os.ftruncate(fd, (size >> level) * 32)

    def write_nodes(self, level: int, first: int, nodes: np.ndarray) -> None:
        """Write nodes first.. of `level` as they are (a cache filled out of order: the caller
        knows them to be right, and where the files hold holes)."""
        self._pwrite_all(level, hash_rows(nodes), first)

    def _pwrite_all(self, level: int, nodes: np.ndarray, first: int) -> None:
        view = memoryview(cast("Buffer", np.ascontiguousarray(nodes))).cast("B")
        fd, off = self._fd(level), first * 32
        while view:
            n = os.pwrite(fd, view, off)
            view, off = view[n:], off + n

    def _pread(self, level: int, index: int) -> bytes:
        data = os.pread(self._fd(level), 32, index * 32)
        if len(data) != 32:
            raise OSError(f"hash file level {level} is short at index {index}")
        return data


def _copy(src: int, dst: int, count: int) -> None:
    """`count` bytes from the start of src to the start of dst (in the kernel where it can)."""
    off = 0
    try:
        while off < count:
            n = os.copy_file_range(src, dst, count - off, off, off)
            if n == 0:
                raise OSError(f"hash file ended {count - off} bytes short of the copy")
            off += n
        return
    except OSError as e:
        if off or e.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise
    while off < count:  # a filesystem without copy_file_range
        data = os.pread(src, min(count - off, 1 << 20), off)
        if not data:
            raise OSError(f"hash file ended {count - off} bytes short of the copy")
        view = memoryview(data)
        while view:
            n = os.pwrite(dst, view, off)
            view, off = view[n:], off + n

