"""The right edge of a tree read leaf by leaf: what a monitor keeps between two reads of a log.

A monitor reads every entry once, in order, and must prove what it read: the leaf hashes it
computes must make the root of a checkpoint the policy accepts. It needs no more than the
right edge of the tree for that, and the right edge of a tlog-tiles tree is exactly its
partial tiles, one per tile level (at most 255 hashes each): every node of the root's
decomposition lies in them (C2SP tlog-tiles; the same nodes `TreeView` asks for). So the
cursor holds them, a few KiB however large the log, and each full tile it completes is
handed back to be compared with the tile the log serves at that path.
"""
from __future__ import annotations

import numpy as np

from tlog.client.tilereader import TileTree
from tlog.formats.hashing import EMPTY_ROOT, HASH_SIZE
from tlog.formats.tiles import TILE_HEIGHT, TILE_WIDTH, partial_width, tile_path
from tlog.merkle.tree import TreeView, root_of_leaves

FULL = TILE_WIDTH * HASH_SIZE


class TreeCursor:
    """The partial tiles of the tree of `size` leaves, and how to extend it."""

    def __init__(self, size: int = 0, partial: bytes = b"") -> None:
        self.size = size
        self.levels: list[bytearray] = []
        pos = 0
        level = 0
        while size >> (TILE_HEIGHT * level):
            w = partial_width(size, level) * HASH_SIZE
            self.levels.append(bytearray(partial[pos:pos + w]))
            if len(self.levels[-1]) != w:
                raise ValueError("the saved partial tiles do not fit the tree size")
            pos += w
            level += 1
        if pos != len(partial):
            raise ValueError("the saved partial tiles do not fit the tree size")

    def partial_bytes(self) -> bytes:
        """What to save: the partial tiles, level by level (`TreeCursor(size, that)` resumes)."""
        return b"".join(bytes(level) for level in self.levels)

    def leaves_in_tile(self) -> bytes:
        """The leaf hashes of the incomplete level-0 tile (read before, kept to compare)."""
        return bytes(self.levels[0]) if self.levels else b""

    def add(self, leaves: bytes) -> list[tuple[int, int, bytes]]:
        """Append leaf hashes (concatenated) that do not cross a level-0 tile boundary; the
        full tiles this completes, as (level, index, hashes), lowest level first."""
        if (self.size % TILE_WIDTH) * HASH_SIZE + len(leaves) > FULL or len(leaves) % HASH_SIZE:
            raise ValueError("leaves must fit in the current level-0 tile")
        done: list[tuple[int, int, bytes]] = []
        if not self.levels:
            self.levels.append(bytearray())
        self.levels[0] += leaves
        self.size += len(leaves) // HASH_SIZE
        level = 0
        while len(self.levels[level]) == FULL:
            tile = bytes(self.levels[level])
            index = (self.size >> (TILE_HEIGHT * (level + 1))) - 1
            done.append((level, index, tile))
            self.levels[level] = bytearray()
            node = root_of_leaves(np.frombuffer(tile, dtype=np.uint8).reshape(TILE_WIDTH, HASH_SIZE))
            level += 1
            if level == len(self.levels):
                self.levels.append(bytearray())
            self.levels[level] += node
        return done

    def tiles(self) -> TileTree:
        """A TileTree of this size holding the partial tiles: enough for its root."""
        tree = TileTree(self.size)
        for level, data in enumerate(self.levels):
            if data:
                tree.add(tile_path(level, (self.size >> (TILE_HEIGHT * level)) // TILE_WIDTH,
                                   len(data) // HASH_SIZE), bytes(data))
        return tree

    def root(self) -> bytes:
        if not self.size:
            return EMPTY_ROOT
        return TreeView(self.size, self.tiles().complete).root
