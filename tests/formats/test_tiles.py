"""tlog-tiles path maths: spec vectors V10, a naive reference, and properties."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlog.errors import FormatError
from tlog.formats.tiles import (
    MAX_INDEX,
    TILE_HEIGHT,
    TILE_WIDTH,
    TileRef,
    entries_for_size,
    entries_path,
    parse_tile_path,
    partial_width,
    tile_coords,
    tile_for_hash,
    tile_path,
    tiles_for_size,
)

# --- V10 --------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, want",
    [
        ((0, 0), "tile/0/000"),
        ((0, 0, 255), "tile/0/000.p/255"),
        ((1, 0), "tile/1/000"),
        ((15, 455667), "tile/15/x455/667"),
        ((15, 123456789, 41), "tile/15/x123/x456/789.p/41"),
        ((0, 1234067), "tile/0/x001/x234/067"),
        ((63, 999999999999999999, 255), "tile/63/x999/x999/x999/x999/x999/999.p/255"),
        ((0, 1000), "tile/0/x001/000"),
        ((0, 999), "tile/0/999"),
        ((0, MAX_INDEX), "tile/0/x009/x223/x372/x036/x854/x775/807"),
    ],
)
def test_v10_tile_path(args: tuple[int, ...], want: str) -> None:
    assert tile_path(*args) == want
    level, index, *width = args
    assert parse_tile_path(want) == TileRef(level, index, *width)


@pytest.mark.parametrize(
    "args, want",
    [((0,), "tile/entries/000"), ((0, 8), "tile/entries/000.p/8"), ((255, 253), "tile/entries/255.p/253")],
)
def test_v10_entries_path(args: tuple[int, ...], want: str) -> None:
    assert entries_path(*args) == want
    ref = parse_tile_path(want)
    assert ref.is_entries and ref.level is None
    assert (ref.index, ref.width) == (args[0], args[1] if len(args) == 2 else 256)


def test_v10_parse_ok() -> None:
    assert parse_tile_path("tile/0/x001/x234/067") == TileRef(0, 1234067, 256)
    ref = parse_tile_path("tile/63/x999/x999/x999/x999/x999/999.p/255")
    assert (ref.level, ref.index, ref.width) == (63, 999999999999999999, 255)
    assert ref.is_partial and not ref.is_entries


V10_BAD_N = ["x001/x234/067.p/", "x001/x234/067.p", "x001/x234/", "x001/x234", "x001/",
             "x001", "x001/.p/abc", "001/002", "x001/0002", "x001/-002", "x001/002.p/256"]

MORE_BAD = [
    "tile/64/000", "tile/-1/000", "tile/abc/000",                        # V10 L64 L-1 Labc
    "tile/00/000", "tile/01/000", "tile/+1/000", "tile/100/000", "tile//000",
    "tile/0/000.p/0", "tile/0/000.p/007", "tile/0/000.p/-1", "tile/0/000.p/+8",
    "tile/0/000.p/8/", "tile/0/000.P/8", "tile/0/000.p//8", "tile/0/000.p/8.p/8",
    "tile/entries/000.p/256", "tile/entries/x000/000", "tile/entries/",
    "tile/0/x000/001", "tile/0/x000/x001/000",                           # leading zero groups
    "tile/0/00", "tile/0/0000", "tile/0/1", "tile/0/x1/000", "tile/0/0x01",
    "tile/0//000", "tile/0/000/", "/tile/0/000", "tile/0/./000", "tile/0/../000",
    "tile/0/x001/../002", "tile/../0/000", "tile/0/x001//002", "tile/0/000\n",
    " tile/0/000", "tile/0/000 ", "tile/0/\u0660\u0660\u0660", "tile/0/x\uff10\uff10\uff11/000",
    "tile/0/x009/x223/x372/x036/x854/x775/808",                          # 2^63
    "tile/0/x999/x999/x999/x999/x999/x999/999",
    "tile/data/000", "tile/8/0/000", "tile/8/data/000", "tiles/0/000", "TILE/0/000",
    "tile/0", "tile", "", "tile/0/000.p/8\x00",
    "tile/0/" + "x000/" * 60 + "001",                                    # > 256 chars
]


@pytest.mark.parametrize("path", ["tile/0/" + n for n in V10_BAD_N] + ["tile/entries/" + n for n in V10_BAD_N] + MORE_BAD)
def test_parse_rejects(path: str) -> None:
    with pytest.raises(FormatError):
        parse_tile_path(path)
    with pytest.raises(FormatError):  # the server's parser (a tuple, no TileRef)
        tile_coords(path)


def test_parse_rejects_non_str() -> None:
    with pytest.raises(FormatError):
        parse_tile_path(b"tile/0/000")  # type: ignore[arg-type]


def test_path_length_cap() -> None:
    long = "tile/0/" + "x000/" * 50 + "001"
    assert len(long) > 256
    with pytest.raises(FormatError, match="too long"):
        parse_tile_path(long)


@pytest.mark.parametrize("args", [(-1, 0), (64, 0), (0, -1), (0, MAX_INDEX + 1), (0, 0, 0), (0, 0, 257)])
def test_builders_reject_out_of_range(args: tuple[int, ...]) -> None:
    with pytest.raises(ValueError):
        tile_path(*args)
    with pytest.raises(ValueError):
        TileRef(*args)


def test_v10_size_70000() -> None:
    tiles = tiles_for_size(70000)
    paths = [t.path for t in tiles]
    want = [f"tile/0/{n:03d}" for n in range(273)] + [
        "tile/0/273.p/112", "tile/1/000", "tile/1/001.p/17", "tile/2/000.p/1"]
    assert paths == want
    assert partial_width(70000, 0) == 112
    assert partial_width(70000, 1) == 17
    assert partial_width(70000, 2) == 1
    assert partial_width(70000, 3) == 0
    entries = entries_for_size(70000)
    assert len(entries) == 274
    assert entries[-1].path == "tile/entries/273.p/112" and entries[0].path == "tile/entries/000"


def test_small_sizes() -> None:
    assert tiles_for_size(0) == []
    assert [t.path for t in tiles_for_size(1)] == ["tile/0/000.p/1"]
    assert [t.path for t in tiles_for_size(256)] == ["tile/0/000", "tile/1/000.p/1"]
    assert [t.path for t in tiles_for_size(257)] == ["tile/0/000", "tile/0/001.p/1", "tile/1/000.p/1"]
    with pytest.raises(ValueError):
        tiles_for_size(-1)


def test_tile_for_hash() -> None:
    assert tile_for_hash(0, 0) == (0, 0, 0)
    assert tile_for_hash(0, 255) == (0, 0, 255)
    assert tile_for_hash(0, 256) == (0, 1, 0)
    assert tile_for_hash(8, 513) == (1, 2, 1)
    assert tile_for_hash(16, 70000 >> 16) == (2, 0, 1)
    for bad in [(3, 0), (-8, 0), (0, -1)]:
        with pytest.raises(ValueError):
            tile_for_hash(*bad)


# --- naive reference ----------------------------------------------------------


def naive_tiles(size: int) -> list[tuple[int, int, int]]:
    """Count the hashes at binary level 8L and chop them into rows of 256."""
    out = []
    level = 0
    while True:
        hashes = size // (256**level)
        if hashes == 0:
            return out
        for n in range((hashes + 255) // 256):
            out.append((level, n, min(256, hashes - 256 * n)))
        level += 1


def as_tuples(tiles: list[TileRef]) -> list[tuple[int, int, int]]:
    return [(t.level, t.index, t.width) for t in tiles]  # type: ignore[misc]


def test_tiles_for_size_matches_naive_small() -> None:
    for size in range(0, 1100):
        assert as_tuples(tiles_for_size(size)) == naive_tiles(size), size


@pytest.mark.parametrize("size", [65535, 65536, 65537, 65536 * 256 - 1, 65536 * 256, 65536 * 256 + 1])
def test_tiles_for_size_matches_naive_boundaries(size: int) -> None:
    assert as_tuples(tiles_for_size(size)) == naive_tiles(size)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=1 << 20))
def test_tiles_for_size_matches_naive_random(size: int) -> None:
    tiles = tiles_for_size(size)
    assert as_tuples(tiles) == naive_tiles(size)
    # level-0 widths cover exactly the leaves; each path parses back
    assert sum(t.width for t in tiles if t.level == 0) == size
    assert all(parse_tile_path(t.path) == t for t in tiles)


@given(st.integers(min_value=0, max_value=MAX_INDEX), st.integers(min_value=0, max_value=8))
def test_partial_width_formula(size: int, level: int) -> None:
    assert partial_width(size, level) == (size // 256**level) % 256


# --- properties -------------------------------------------------------------


@given(
    st.integers(min_value=0, max_value=63),
    st.integers(min_value=0, max_value=MAX_INDEX),
    st.integers(min_value=1, max_value=TILE_WIDTH),
)
def test_tile_path_round_trip(level: int, index: int, width: int) -> None:
    path = tile_path(level, index, width)
    assert parse_tile_path(path) == TileRef(level, index, width)
    assert tile_coords(path) == (level, index, width)
    assert path.endswith(f".p/{width}") == (width < 256)
    assert parse_tile_path(entries_path(index, width)) == TileRef(None, index, width)


@given(st.integers(min_value=0, max_value=MAX_INDEX))
def test_index_groups(index: int) -> None:
    groups = tile_path(0, index).split("/")[2:]
    assert all(len(g) == 4 and g[0] == "x" for g in groups[:-1])
    assert len(groups[-1]) == 3
    assert int("".join(g.lstrip("x") for g in groups)) == index


@given(st.integers(min_value=0, max_value=1 << 40), st.integers(min_value=0, max_value=5))
def test_tile_for_hash_consistent(index: int, tile_level: int) -> None:
    level, n, off = tile_for_hash(tile_level * TILE_HEIGHT, index)
    assert level == tile_level and n * TILE_WIDTH + off == index and 0 <= off < 256


_ALPHABET = "tile/entrsx0123456789.p-+ \n"


@settings(max_examples=500)
@given(st.one_of(st.text(), st.text(alphabet=_ALPHABET), st.from_regex(r"tile/[0-9a-z]{0,3}/(x?[0-9]{1,4}/){0,3}[0-9]{0,4}(\.p/[0-9]{0,4})?")))
def test_parse_only_format_error_and_canonical(path: str) -> None:
    try:
        ref = parse_tile_path(path)
    except FormatError:
        return
    assert ref.path == path  # anything accepted is the one canonical spelling


def test_entry_bundles_round_trip_and_refuse_truncation():
    from tlog.errors import FormatError
    from tlog.formats.tiles import encode_entry_bundle, parse_entry_bundle

    entries = [b"", b"a", bytes(range(256)) * 3, b"\x00" * 65535]
    raw = encode_entry_bundle(entries)
    assert raw[:5] == b"\x00\x00\x00\x01a"
    assert parse_entry_bundle(raw) == entries
    assert parse_entry_bundle(raw, 2) == entries[:2]
    for cut in (1, 4, len(raw) - 1):
        with pytest.raises(FormatError):
            parse_entry_bundle(raw[:cut])


@settings(max_examples=300)
@given(st.integers(0, 63), st.integers(0, 2**63 - 1), st.integers(1, 256), st.integers(1, 3))
def test_leading_zero_groups_are_refused_by_the_pattern(level: int, index: int, width: int, extra: int) -> None:
    """The canonical check is in the pattern (no round trip per parse): a path with extra
    all-zero groups in front names the same tile and must be refused."""
    path = tile_path(level, index, width)
    assert parse_tile_path(path).path == path
    head, _, rest = path.partition(f"/{level}/")
    padded = f"{head}/{level}/" + "x000/" * extra + rest
    with pytest.raises(FormatError):
        parse_tile_path(padded)
