"""The add-entries body, mirror-info answers and tickets (C2SP tlog-mirror), byte for byte."""
from __future__ import annotations

import random

import pytest

from tlog.errors import FormatError
from tlog.formats.mirror import (
    MirrorInfo,
    count_packages,
    encode_header,
    encode_package,
    package_ranges,
    parse_header,
    parse_mirror_info,
    scan_package,
)
from witness.mirror.tickets import TicketKey


def spec_packages(upload_start: int, upload_end: int) -> list[tuple[int, int]]:
    """The canonical sequence, transcribed from the spec's formulas."""
    if upload_start == upload_end:
        return []
    rounded_start = upload_start - upload_start % 256
    rounded_end = -(-upload_end // 256) * 256
    num = (rounded_end - rounded_start) // 256
    return [(max(upload_start, rounded_start + i * 256), min(upload_end, rounded_start + (i + 1) * 256))
            for i in range(num)]


@pytest.mark.parametrize("start,end", [(0, 0), (0, 1), (0, 256), (0, 257), (255, 256), (256, 256), (300, 700),
                                       (1, 1000), (512, 768), (767, 769), (2**40 + 3, 2**40 + 600)])
def test_package_ranges_are_the_spec_canonical_sequence(start, end):
    got = list(package_ranges(start, end))
    assert [(a, b) for _, a, b in got] == spec_packages(start, end)
    assert count_packages(start, end) == len(got)
    for sub, a, b in got:  # the proof's subtree starts at the bundle boundary: [rounded_start + 256 i, end)
        assert sub == a - a % 256 and b - sub <= 256


def test_package_ranges_random():
    rng = random.Random(5)
    for _ in range(500):
        a = rng.randrange(5000)
        b = a + rng.randrange(3000)
        assert [(x, y) for _, x, y in package_ranges(a, b)] == spec_packages(a, b)


def test_header_bytes_and_incremental_parse():
    raw = encode_header("example.com/log", 300, 700, b"\x01\x02")
    assert raw == (b"\x00\x0fexample.com/log" + (300).to_bytes(8, "big") + (700).to_bytes(8, "big")
                   + b"\x00\x02\x01\x02")
    for cut in range(len(raw)):
        assert parse_header(raw[:cut]) is None
    h, n = parse_header(raw + b"rest")
    assert (h.origin, h.start, h.end, h.ticket, n) == ("example.com/log", 300, 700, b"\x01\x02", len(raw))


@pytest.mark.parametrize("raw", [
    b"\x00\x00" + bytes(18),  # empty origin
    b"\x00\x01\xff" + bytes(18),  # not UTF-8
    b"\x00\x01a" + (5).to_bytes(8, "big") + (4).to_bytes(8, "big") + b"\x00\x00",  # start > end
    b"\x00\x01a" + (0).to_bytes(8, "big") + (2**63).to_bytes(8, "big") + b"\x00\x00",  # more than storage holds
    b"\x00\x01a" + (2**64 - 1).to_bytes(8, "big") * 2 + b"\x00\x00",
])
def test_bad_headers_are_format_errors(raw):
    with pytest.raises(FormatError):
        parse_header(raw)


def test_package_scan_and_encoding():
    entries = [b"", b"a", bytes(300)]
    proof = [bytes([i]) * 32 for i in range(3)]
    raw = encode_package(entries, proof)
    assert raw == b"\x00\x00" + b"\x00\x01a" + b"\x01\x2c" + bytes(300) + b"\x03" + b"".join(proof)
    for cut in range(len(raw)):
        assert scan_package(raw[:cut], 0, 3) is None
    pkg, end = scan_package(b"xx" + raw + b"tail", 2, 3)
    assert (pkg.entries, list(pkg.proof), end) == (entries, proof, 2 + len(raw))
    assert pkg.blob == b"\x00\x00\x00\x01a\x01\x2c" + bytes(300)  # the entry bundle encoding


def test_more_than_63_proof_hashes_is_malformed():
    raw = encode_package([b"x"], []) [:-1] + bytes([64]) + bytes(64 * 32)
    with pytest.raises(FormatError):
        scan_package(raw, 0, 1)


def test_mirror_info_round_trip_and_strictness():
    info = MirrorInfo(700, 512, b"ticket")
    assert info.encode() == b"700\n512\ndGlja2V0\n"
    assert parse_mirror_info(info.encode()) == info
    assert parse_mirror_info(b"5\n0\n\n") == MirrorInfo(5, 0, b"")
    for bad in (b"700\n512\n", b"700\n512\ndGlja2V0", b"0700\n1\n\n", b"7\n1\n\nextra\n", b"-1\n1\n\n",
                b"7\n1\nnot base64!\n", b"1 \n1\n\n"):
        with pytest.raises(FormatError):
            parse_mirror_info(bad)


def test_tickets_authenticate_the_checkpoint_they_carry():
    key, other = TicketKey(bytes(32)), TicketKey(bytes([1]) * 32)
    note = b"example.com/log\n5\nroot=\n\n\xe2\x80\x94 example.com/log sig\n"
    t = key.seal("example.com/log", note)
    assert key.open("example.com/log", t) == note
    assert other.open("example.com/log", t) is None  # another mirror's key
    assert key.open("example.com/other", t) is None  # another log
    for i in range(len(t)):  # any flipped bit
        bad = bytearray(t)
        bad[i] ^= 1
        assert key.open("example.com/log", bytes(bad)) is None
    assert key.open("example.com/log", b"") is None
    assert key.seal("example.com/log", bytes(70_000)) == b""  # would not fit behind a u16
    assert "00" not in repr(key)
