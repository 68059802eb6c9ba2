"""A frontend's hash cache that starts from the right edge and fills in on demand
(docs/architecture.md §3.3).

A tree of N leaves needs, for appends and for its own root, only its right edge: the
partial hash tile (C2SP tlog-tiles) at each tile level, O(log N) hashes. A new PostgreSQL
frontend therefore starts from the right-edge tiles of the bucket's checkpoint, checked
against the root the store recorded for that size, and serves at once; as Tessera's and
Sunlight's integrators do. A full tile of the tree is fetched the first time a read needs
one of its nodes (a proof, a tile request, a subtree root), checked, and written into the
hash files, so it is read from there afterwards.

Which nodes the files hold is tracked per full tile: tile level L has a bit per full tile
(index < `full[L]`), set once every node of the tile's eight tree levels is in the files;
every node of the partial tile at each level (index >= `full[L]`) is always there (loaded
with the edge, then written by the appends, which also set the bit of every tile they
complete). Readers check the bits before they read (a numpy pass per gathered level; none
once every bit is set), and fill what is missing first.

Nothing fetched is trusted: a full tile (L, t) must hash to node (8L+8, t), which is in the
files already or is filled first, up the levels to the partial tiles of the edge, which
were checked against the signed root. A bucket that serves other bytes is refused (503,
logged), never written into the files. Level-0 tiles are read from the store's entries (the
truth; 256 leaf hashes), higher ones from the bucket (or, where it lacks one, recomputed
from the entries).

The hash files hold holes where nothing was filled. So that a later start never mistakes
them for nodes, the directory is marked (`SPARSE`) before the first node of an edge is
written, and a marked cache is dropped at the next start (cut to nothing, then the edge is
loaded again: a start costs the same either way).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

import numpy as np

from tlog.errors import Unavailable
from tlog.formats.hashing import hash_rows, node_hashes_of_pairs
from tlog.formats.tiles import TILE_HEIGHT, TILE_WIDTH, tile_path
from tlog.storage.hashfiles import MAX_LEVELS, HashFiles

log = logging.getLogger("oap.tlog.lazyhashes")

TILE_LEVELS = -(-MAX_LEVELS // TILE_HEIGHT)
RUN_TILES = 256  # level-0 tiles filled from one read of the entries at most (65,536 leaf hashes, 2 MiB)
SPARSE = "sparse"
"""The marker file of a hash directory whose files may hold holes (dropped at the next start)."""

TileFetch = Callable[[str], "bytes | None"]
"""A tlog-tiles path -> the bytes the bucket holds there (None: no such object)."""
LeafRows = Callable[[int, int], np.ndarray]
"""(start, count) -> the leaf hashes of those entries, from the store, as a (count, 32) array."""


def tile_rows(bottom: np.ndarray) -> list[np.ndarray]:
    """The nodes a hash tile's bottom row determines: rows[r] at tree level 8L+r (r = 0..8;
    a row of w nodes gives w >> r complete nodes at r)."""
    rows = [bottom]
    for _ in range(TILE_HEIGHT):
        below = rows[-1]
        n = below.shape[0] // 2
        rows.append(node_hashes_of_pairs(np.ascontiguousarray(below[:2 * n]).reshape(n, 64)) if n else
                    np.empty((0, 32), dtype=np.uint8))
    return rows


class LazyHashes:
    """The `HashReader` of a PostgreSQL frontend: `HashFiles` plus which full tiles they hold
    (see the module docstring). Reads come from any thread; `append`, `load_edge`,
    `mark_complete` and `reset` from the driver's thread."""

    def __init__(self, files: HashFiles, *, fetch: TileFetch | None, leaves: LeafRows) -> None:
        self.files = files
        self.fetch = fetch
        self.leaves = leaves
        self.window = files.window
        self._bits: list[np.ndarray] = [np.zeros(0, dtype=np.bool_) for _ in range(TILE_LEVELS)]
        self._full = [0] * TILE_LEVELS  # full tiles per tile level at the cache's size
        self.missing = 0  # full tiles not in the files (0: every read is served from them as they are)
        self.fetched = 0  # full tiles filled on demand since the start (tests, metrics)
        self._lock = threading.RLock()

    # --- the writer's side -------------------------------------------------------------------

    def reset(self) -> None:
        """Nothing cached: the files cut to nothing (beside-and-rename, see `HashFiles.cut`)."""
        with self._lock:
            self.files.cut(0)
            self._bits = [np.zeros(0, dtype=np.bool_) for _ in range(TILE_LEVELS)]
            self._full = [0] * TILE_LEVELS
            self.missing = 0

    def mark_complete(self, size: int) -> None:
        """The files hold every node complete at `size` (built from the entries)."""
        with self._lock:
            self._grow(size, present=True)

    def load_edge(self, size: int, partials: dict[int, bytes]) -> None:
        """Write the right edge of the tree of `size` (no full tile yet): `partials[L]`, the
        bottom row of the partial tile at tile level L, for every L where the tree has one.
        The caller checks the root of `size` afterwards."""
        with self._lock:
            self.files.reserve(size)
            for level in range(TILE_LEVELS):
                width = (size >> (TILE_HEIGHT * level)) % TILE_WIDTH
                if not width:
                    continue
                first = (size >> (TILE_HEIGHT * level)) - width
                self._write_tile(level, first, hash_rows(_rows(partials[level], width)))
            self._grow(size, present=False)

    def append(self, old_size: int, leaves: Sequence[bytes] | np.ndarray) -> None:
        """`HashFiles.append`; the tiles it completes are held whole (the edge was)."""
        rows = hash_rows(leaves)
        self.files.append(old_size, rows)
        with self._lock:  # not beside a fill: it sets a bit of the arrays _grow may replace
            self._grow(old_size + rows.shape[0], present=True)

    def _grow(self, size: int, *, present: bool) -> None:
        """Tiles that are full at `size` and were not: held (`present`) or not."""
        for level in range(TILE_LEVELS):
            n = (size >> (TILE_HEIGHT * level)) // TILE_WIDTH
            old = self._full[level]
            if n <= old:
                continue
            bits = self._bits[level]
            if n > bits.size:  # readers read full[L], then bits[L]: the larger array is there first
                grown = np.zeros(max(n, 2 * bits.size), dtype=np.bool_)
                grown[:old] = bits[:old]
                self._bits[level] = bits = grown
            bits[old:n] = present
            if not present:
                self.missing += n - old
            self._full[level] = n

    def _write_tile(self, level: int, first: int, bottom: np.ndarray) -> list[np.ndarray]:
        """Write the nodes of a tile row starting at node `first` of tree level 8L (aligned to
        its tile); the rows (`tile_rows`)."""
        rows = tile_rows(bottom)
        for r in range(TILE_HEIGHT):
            if rows[r].shape[0]:
                self.files.write_nodes(TILE_HEIGHT * level + r, first >> r, rows[r])
        return rows

    # --- reads (HashReader) ----------------------------------------------------------------

    def read(self, level: int, index: int) -> bytes:
        if self.missing:
            self._need(level, index)
        return self.files.read(level, index)

    def gather(self, level: int, indices: np.ndarray, *, need: int | None = None) -> np.ndarray:
        if self.missing and indices.size:
            tl, r = level // TILE_HEIGHT, level % TILE_HEIGHT
            n = self._full[tl]
            if n:
                bits = self._bits[tl]
                t = (indices.astype(np.int64) << r) >> TILE_HEIGHT
                t = t[t < n]
                lacking = np.unique(t[~bits[t]])
                if lacking.size:
                    self._fill_many(tl, lacking)
        return self.files.gather(level, indices, need=need)

    def read_range(self, level: int, start: int, count: int) -> bytes:
        if self.missing and count:
            tl, r = level // TILE_HEIGHT, level % TILE_HEIGHT
            first, last = (start << r) >> TILE_HEIGHT, ((start + count - 1) << r) >> TILE_HEIGHT
            for tile in range(first, min(last + 1, self._full[tl])):
                if not self._bits[tl][tile]:
                    self._fill(tl, tile)
        return self.files.read_range(level, start, count)

    def sync(self) -> None:
        self.files.sync()

    def close(self) -> None:
        self.files.close()

    def _need(self, level: int, index: int) -> None:
        tl = level // TILE_HEIGHT
        if tl >= TILE_LEVELS:
            return
        tile = (index << (level % TILE_HEIGHT)) >> TILE_HEIGHT
        if tile < self._full[tl] and not self._bits[tl][tile]:
            self._fill(tl, tile)

    def _fill_many(self, level: int, tiles: np.ndarray) -> None:
        """Fill `tiles` (sorted, unique) of a tile level: level-0 tiles that follow each other
        from one read of the entries per RUN_TILES (a batch of random proofs needs many)."""
        if level or tiles.size == 1:
            for tile in tiles.tolist():
                self._fill(level, tile)
            return
        for run in np.split(tiles, np.flatnonzero(np.diff(tiles) != 1) + 1):
            for a in range(0, run.size, RUN_TILES):
                self._fill_leaves(int(run[a]), min(RUN_TILES, run.size - a))

    def _fill_leaves(self, first: int, count: int) -> None:
        """Level-0 tiles first..first+count-1 from one read of the entries, checked against
        their nodes at tree level 8 (filled first if need be)."""
        with self._lock:
            if self._bits[0][first:first + count].any():  # some were filled meanwhile
                for tile in range(first, first + count):
                    self._fill(0, tile)
                return
            above = np.frombuffer(self.read_range(TILE_HEIGHT, first, count), dtype=np.uint8).reshape(count, 32)
            rows = tile_rows(self.leaves(first * TILE_WIDTH, count * TILE_WIDTH))
            if not np.array_equal(rows[TILE_HEIGHT], above):
                log.error("the entries of hash tiles 0/%d..%d do not hash to the log's tree", first, first + count - 1)
                raise Unavailable("the log's entries do not hash to its tree; the proof is not served", retry_after=5)
            for r in range(TILE_HEIGHT):
                self.files.write_nodes(r, (first * TILE_WIDTH) >> r, rows[r])
            self._bits[0][first:first + count] = True
            self.missing -= count
            self.fetched += count

    def _fill(self, level: int, tile: int) -> None:
        """Fetch full tile (level, tile), check it hashes to its node one tile level up
        (filled first if need be), and write it into the files."""
        with self._lock:
            if tile >= self._full[level] or self._bits[level][tile]:
                return
            above = TILE_HEIGHT * (level + 1)
            self._need(above, tile)
            expected = self.files.read(above, tile)
            bottom = self._fetch(level, tile)
            rows = tile_rows(bottom)
            if rows[TILE_HEIGHT].shape[0] != 1 or rows[TILE_HEIGHT][0].tobytes() != expected:
                log.error("hash tile %s does not hash to the log's tree: not used", tile_path(level, tile))
                raise Unavailable(f"hash tile {tile_path(level, tile)} of the bucket does not belong to this log's "
                                  "tree; it was not used", retry_after=5)
            self._write_tile(level, tile * TILE_WIDTH, bottom)
            self._bits[level][tile] = True
            self.missing -= 1
            self.fetched += 1

    def _fetch(self, level: int, tile: int) -> np.ndarray:
        """The bottom row of full tile (level, tile): level 0 from the entries, higher levels
        from the bucket, or recomputed from the entries where the bucket has none."""
        if level and self.fetch is not None:
            data = self.fetch(tile_path(level, tile))
            if data is not None:
                return _rows(data, TILE_WIDTH)
        span = TILE_WIDTH << (TILE_HEIGHT * level)
        leaves = self.leaves(tile * span, span)
        for _ in range(level):  # up to this tile level's bottom row
            for _ in range(TILE_HEIGHT):
                leaves = node_hashes_of_pairs(np.ascontiguousarray(leaves).reshape(-1, 64))
        return leaves


def _rows(data: bytes, width: int) -> np.ndarray:
    if len(data) != 32 * width:
        raise Unavailable(f"a hash tile of {width} hashes holds {len(data)} bytes", retry_after=5)
    return np.frombuffer(data, dtype=np.uint8).reshape(width, 32)
