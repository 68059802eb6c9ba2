"""Read a log through its tiles alone (tlog-tiles), for clients, monitors and witnesses.

Tile data from a server is untrusted until the root computed from it matches
a checkpoint the caller verified; `TileTree` is the bridge: it answers
`complete(level, index)` from fetched tiles, so `tlog.merkle.tree.TreeView` can
compute the root and any proof for that size. Missing tiles are reported as
`MissingTile` so an async caller can fetch them and retry (pure, no I/O here).
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable

from tlog.formats.hashing import node_hash
from tlog.formats.tiles import TILE_HEIGHT, TILE_WIDTH, tile_path
from tlog.merkle.tree import TreeView


class MissingTile(LookupError):
    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


class TileTree:
    def __init__(self, size: int) -> None:
        self.size = size
        self.tiles: dict[str, bytes] = {}

    def tile_ref(self, tile_level: int, index: int) -> str:
        """Path of tile (L, N) as it exists for this tree size (full or partial)."""
        count = self.size >> (TILE_HEIGHT * tile_level)
        width = min(TILE_WIDTH, count - index * TILE_WIDTH)
        if width <= 0:
            raise IndexError(f"tile {tile_level}/{index} does not exist at size {self.size}")
        return tile_path(tile_level, index, width)

    def _hashes(self, tile_level: int, index: int) -> bytes:
        path = self.tile_ref(tile_level, index)
        data = self.tiles.get(path)
        if data is None:
            raise MissingTile(path)
        return data

    def complete(self, level: int, index: int) -> bytes:
        tl, r = divmod(level, TILE_HEIGHT)
        first = index << r  # first node at binary level tl*8
        data = self._hashes(tl, first // TILE_WIDTH)
        off = first % TILE_WIDTH
        nodes = [data[(off + i) * 32 : (off + i + 1) * 32] for i in range(1 << r)]
        if any(len(n) != 32 for n in nodes):
            raise ValueError("tile is shorter than its width")
        while len(nodes) > 1:
            nodes = [node_hash(nodes[i], nodes[i + 1]) for i in range(0, len(nodes), 2)]
        return nodes[0]

    def add(self, path: str, data: bytes) -> None:
        expected = int(path.rsplit(".p/", 1)[1]) if ".p/" in path else TILE_WIDTH
        if len(data) != expected * 32:
            raise ValueError(f"tile {path} has {len(data)} bytes, expected {expected * 32}")
        self.tiles[path] = data


async def with_tiles(tree: TileTree, fetch: Callable[[str], Awaitable[bytes]], compute: Callable[[TileTree], object]):
    """Run `compute(tree)`, fetching each missing tile and retrying, until it completes."""
    for _ in range(10_000):
        try:
            return compute(tree)
        except MissingTile as m:
            tree.add(m.path, await fetch(m.path))
    raise RuntimeError("too many tiles needed")


def view(tree: TileTree) -> TreeView:
    return TreeView(tree.size, tree.complete)
