"""tlog-tiles v0.1.0 path maths (SPEC: https://c2sp.org/tlog-tiles).

Pure functions over `int` and `str`, no I/O. A tiled log serves its Merkle
tree as static, immutable resources:

    <prefix>/tile/<L>/<N>[.p/<W>]       hash tiles, level L = binary level 8*L
    <prefix>/tile/entries/<N>[.p/<W>]   entry bundles (the leaves of tile 0/N)

Every tile is 256 hashes wide except the rightmost one at each level, whose
width for tree size s is floor(s / 256**L) mod 256 (tlog-tiles "Merkle Tree").
Paths come from clients and are used as storage keys, so the parser accepts
exactly one spelling per tile: anything that `tile_path` would not have
produced is a `FormatError`. That rules out two URLs naming the same tile
(cache poisoning, duplicate storage) and path tricks such as ".." by
construction.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tlog.errors import FormatError
from tlog.formats.encoding import MAX_INT63

TILE_HEIGHT = 8
"""Binary Merkle levels per tile level (tlog-tiles fixes the height at 8)."""

TILE_WIDTH = 1 << TILE_HEIGHT
CLIENT_ACCEPT_ENCODING = "gzip, identity"
"""What a tlog-tiles client asks for: "Clients SHOULD include `gzip` and `identity` in their
`Accept-Encoding` headers" (entry bundles are served compressed, or not)."""
"""Hashes (or entries) in a full tile: 256."""

MAX_LEVEL = 63
"""tlog-tiles: "L ... between 0 and 63"."""

MAX_INDEX = MAX_INT63
"""Tile indices are bounded by the int64 tree sizes every implementation uses."""

MAX_PATH_LEN = 256
"""The longest canonical path is ~50 characters; refuse to look at more."""

# One ASCII-only, anchored grammar. `fullmatch` (not `$`) so a trailing "\n"
# cannot sneak through; re.ASCII so "\d"-like Unicode digits never match.
_PATH_RE = re.compile(
    # canonical only: no leading zeros in the level or width, and no leading all-zero
    # index group ("x000/001" is "001"); `parse_tile_path` checks the numeric ranges
    r"tile/(entries|0|[1-9][0-9]?)/((?!x000/)(?:x[0-9]{3}/)*[0-9]{3})(?:\.p/([1-9][0-9]{0,2}))?",
    re.ASCII,
)


@dataclass(frozen=True)
class TileRef:
    """One tile: `level` None means the entry bundle at `index`.

    `width` is the number of hashes (or entries) in the tile, 1..256; a tile
    of width 256 is full and immutable, narrower ones are partial.
    """

    level: int | None
    index: int
    width: int = TILE_WIDTH

    def __post_init__(self) -> None:
        _check(self.level, self.index, self.width)

    @property
    def is_entries(self) -> bool:
        return self.level is None

    @property
    def is_partial(self) -> bool:
        return self.width < TILE_WIDTH

    @property
    def path(self) -> str:
        """The canonical path relative to the log prefix."""
        if self.level is None:
            return entries_path(self.index, self.width)
        return tile_path(self.level, self.index, self.width)


def _check(level: int | None, index: int, width: int) -> None:
    # Builders get programmer errors (ValueError); parse errors are FormatError.
    if level is not None and not 0 <= level <= MAX_LEVEL:
        raise ValueError(f"tile level {level} outside 0..{MAX_LEVEL}")
    if not 0 <= index <= MAX_INDEX:
        raise ValueError(f"tile index {index} outside 0..2^63-1")
    if not 1 <= width <= TILE_WIDTH:
        raise ValueError(f"tile width {width} outside 1..{TILE_WIDTH}")


def _index_path(index: int) -> str:
    """1234067 -> "x001/x234/067": 3-digit groups, all but the last prefixed "x".

    tlog-tiles does this so that no directory holds more than 1000 entries.
    """
    digits = str(index)
    digits = "0" * (-len(digits) % 3) + digits
    groups = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    return "/".join(["x" + g for g in groups[:-1]] + [groups[-1]])


def _suffix(width: int) -> str:
    return "" if width == TILE_WIDTH else f".p/{width}"


def tile_path(level: int, index: int, width: int = TILE_WIDTH) -> str:
    """"tile/<L>/<N>[.p/<W>]" for hash tile `index` at tile level `level`."""
    _check(level, index, width)
    return f"tile/{level}/{_index_path(index)}{_suffix(width)}"


def entries_path(index: int, width: int = TILE_WIDTH) -> str:
    """"tile/entries/<N>[.p/<W>]" for the entry bundle holding leaves 256*N..."""
    _check(None, index, width)
    return f"tile/entries/{_index_path(index)}{_suffix(width)}"


def parse_tile_path(path: str) -> TileRef:
    """Parse a path relative to the log prefix, accepting only canonical spellings.

    Rejects (FormatError): levels outside 0..63 or with leading zeros, widths
    outside 1..255 after ".p/", index groups that are not exactly three
    digits, a first group that is all zeros when more follow (non-canonical),
    empty components, "..", extra slashes, indices above 2^63-1, and anything
    longer than 256 characters.
    """
    return TileRef(*tile_coords(path))  # canonical by the pattern (tests: ref.path == path)


def tile_coords(path: str) -> tuple[int | None, int, int]:
    """`parse_tile_path` as a plain (level, index, width) tuple.

    The server parses every tile request it answers: building the frozen
    `TileRef` costs three times the parse itself, and on a large log the
    requests are too varied for a cache to hide it.
    """
    if not isinstance(path, str):
        raise FormatError("tile path must be a string")
    if len(path) > MAX_PATH_LEN:
        raise FormatError("tile path too long")
    m = _PATH_RE.fullmatch(path)
    if m is None:
        raise FormatError(f"malformed tile path {path!r}")
    level_s, index_s, width_s = m.groups()
    level = None if level_s == "entries" else int(level_s)
    if level is not None and level > MAX_LEVEL:
        raise FormatError(f"tile level {level} outside 0..{MAX_LEVEL}")
    width = TILE_WIDTH
    if width_s is not None:
        width = int(width_s)
        if width >= TILE_WIDTH:  # ".p/256" would be a second name for the full tile
            raise FormatError(f"partial tile width {width} outside 1..255")
    index = int(index_s.replace("x", "").replace("/", "")) if len(index_s) > 3 else int(index_s)
    if index > MAX_INDEX:
        raise FormatError("tile index overflows 2^63-1")
    return level, index, width


def partial_width(tree_size: int, level: int) -> int:
    """Width of the rightmost (partial) tile at `level`; 0 means there is none.

    tlog-tiles: floor(s / 256**level) mod 256.
    """
    if tree_size < 0 or level < 0:
        raise ValueError("tree size and level must be non-negative")
    return (tree_size >> (TILE_HEIGHT * level)) % TILE_WIDTH


def tiles_for_size(tree_size: int) -> list[TileRef]:
    """Every hash tile that exists for `tree_size`, level by level, left to right.

    At level L there are floor(s / 256**(L+1)) full tiles followed by one
    partial tile if `partial_width` is non-zero. Levels stop when no hash
    reaches them. Empty tiles are never served, so none is listed.
    """
    if not 0 <= tree_size <= MAX_INDEX:
        raise ValueError("tree size outside 0..2^63-1")
    out: list[TileRef] = []
    level = 0
    while tree_size >> (TILE_HEIGHT * level):
        full = tree_size >> (TILE_HEIGHT * (level + 1))
        out.extend(TileRef(level, n) for n in range(full))
        w = partial_width(tree_size, level)
        if w:
            out.append(TileRef(level, full, w))
        level += 1
    return out


def entries_for_size(tree_size: int) -> list[TileRef]:
    """Every entry bundle for `tree_size`: one per level-0 tile, same widths."""
    return [TileRef(None, t.index, t.width) for t in tiles_for_size(tree_size) if t.level == 0]


def tile_for_hash(level_binary: int, index: int) -> tuple[int, int, int]:
    """Locate the hash at binary Merkle level `level_binary`, position `index`.

    Returns (tile level, tile index, offset within the tile). Only levels that
    are multiples of 8 are stored in tiles (tlog-tiles keeps the bottom row of
    each 8-level band); other hashes are recomputed from the row below.
    """
    if level_binary < 0 or level_binary % TILE_HEIGHT:
        raise ValueError("binary level must be a non-negative multiple of 8")
    if index < 0:
        raise ValueError("hash index must be non-negative")
    return level_binary // TILE_HEIGHT, index // TILE_WIDTH, index % TILE_WIDTH


def encode_entry_bundle(entries: list[bytes]) -> bytes:
    """tlog-tiles entry bundle: each entry as a 16-bit big-endian length and its bytes."""
    return b"".join([len(e).to_bytes(2, "big") + e for e in entries])


def parse_entry_bundle(data: bytes, limit: int | None = None) -> list[bytes]:
    """The entries of an entry bundle (the first `limit` of them, if given);
    FormatError on a truncated bundle."""
    out: list[bytes] = []
    pos, end = 0, len(data)
    while pos < end and (limit is None or len(out) < limit):
        if pos + 2 > end:
            raise FormatError("entry bundle is truncated")
        k = (data[pos] << 8) | data[pos + 1]
        if pos + 2 + k > end:
            raise FormatError("entry bundle is truncated")
        out.append(data[pos + 2 : pos + 2 + k])
        pos += 2 + k
    return out
