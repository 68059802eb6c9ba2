"""The hash tiles a log serves (C2SP tlog-tiles), for the log process and its read workers.

A hash tile of the served tree is read from the hash files whoever answers the request:
the log process, on the fast path or in aiohttp (`tlog.server.api`), or a read worker
(`tlog.server.readworkers`), which does not load the log's HTTP application. So the logic
lives here, over a `HashReader` and the served size, with no request or response: the
callers put the bytes in their answers, with the headers below, so every process sends
the same bytes.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from tlog.errors import NotFound
from tlog.formats.tiles import TILE_HEIGHT, TILE_WIDTH, tile_coords
from tlog.http.ui import CORS
from tlog.merkle.tree import HashReader

IMMUTABLE = "public, max-age=31536000, immutable"
CHECKPOINT_CACHE = "public, max-age=1, must-revalidate"
CHECKPOINT_HEADERS = (("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control", CHECKPOINT_CACHE), CORS)
TILE_HEADERS = (("Content-Type", "application/octet-stream"), ("Cache-Control", IMMUTABLE), CORS)

# Clients walk the same tiles: parsing a path costs more than serving it from the cache.
tile_at = lru_cache(maxsize=16384)(tile_coords)


def pruned(level: int | None, index: int, width: int, minimum_index: int) -> bool:
    """Whether the tile or entry bundle (level None) at (level, index, width) is refused under
    the log's minimum index (C2SP tlog-tiles "Pruning": a full tile or bundle whose end index
    is at or below it; pruning by denying requests, the data is kept). A partial bundle below
    it is refused too: its entries are below the minimum index."""
    if not minimum_index or (level is not None and width != TILE_WIDTH):
        return False
    return (index + 1) * TILE_WIDTH << (TILE_HEIGHT * (level or 0)) <= minimum_index


def pruned_error(minimum_index: int) -> NotFound:
    return NotFound(f"pruned: this log starts at index {minimum_index} (its minimum index, C2SP tlog-tiles)")


def hash_tile(hashes: HashReader, size: Callable[[], int], path: str, minimum_index: int = 0) -> bytes | None:
    """The hash tile at `path` (after "tile/") of the served tree of `size()` leaves.

    None for an entry bundle: it is read from the entries, off the loop. NotFound for a
    tile the served tree does not hold (yet) or one pruned below `minimum_index`;
    FormatError (400) for a path that is not a canonical tile path.
    """
    level, index, width = tile_at("tile/" + path)
    if level is None:
        return None
    if pruned(level, index, width, minimum_index):
        raise pruned_error(minimum_index)
    level *= TILE_HEIGHT
    if level >= 64 or index * TILE_WIDTH + width > size() >> level:
        raise NotFound("tile not available for the current tree size")
    return hashes.read_range(level, index * TILE_WIDTH, width)
