"""The add-entries wire format of C2SP tlog-mirror, and its `text/x.tlog.mirror-info` answers.

Pure functions over bytes and ints (no I/O): the mirror's streaming reader and the mirror
clients' writer (`tlog.http.mirrorclient`: the log's push and `oap-mirror follow`) both
use them, so the two ends cannot disagree on a byte.

A request body is

    u16 log_origin_size || log_origin || u64 upload_start || u64 upload_end
    || u16 ticket_size || ticket || entry package*

and entry package i of the canonical sequence of [upload_start, upload_end) covers

    start = max(upload_start, rounded_start + 256 i),  end = min(upload_end, rounded_start + 256 (i + 1))

as `(u16 length || entry)` for each entry of [start, end), then `u8 num_hashes` (at
most 63) and that many 32-byte hashes: a subtree consistency proof of the subtree
[rounded_start + 256 i, end) to the checkpoint of size upload_end.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tlog.errors import FormatError
from tlog.formats.encoding import MAX_INT63, b64dec, b64enc

PACKAGE_SIZE = 256
"""Entries per package: one tlog-tiles entry bundle."""

MAX_PROOF_HASHES = 63

MAX_U64 = (1 << 64) - 1

MIRROR_INFO = "text/x.tlog.mirror-info"

MAX_HEADER = 2 + 0xFFFF + 8 + 8 + 2 + 0xFFFF
"""The largest header the format allows (two u16-sized strings)."""

MAX_PACKAGE_BYTES = PACKAGE_SIZE * (2 + 0xFFFF) + 1 + MAX_PROOF_HASHES * 32
"""The largest package the format allows: 256 entries of 65,535 bytes and a full proof."""


@dataclass(frozen=True)
class Header:
    origin: str
    start: int  # upload_start
    end: int  # upload_end
    ticket: bytes


def encode_header(origin: str, start: int, end: int, ticket: bytes = b"") -> bytes:
    raw = origin.encode("utf-8")
    if not 0 < len(raw) <= 0xFFFF or len(ticket) > 0xFFFF:
        raise ValueError("origin must be 1..65535 bytes and the ticket at most 65535")
    if not 0 <= start <= end <= MAX_U64:
        raise ValueError("need 0 <= upload_start <= upload_end < 2^64")
    return (len(raw).to_bytes(2, "big") + raw + start.to_bytes(8, "big") + end.to_bytes(8, "big")
            + len(ticket).to_bytes(2, "big") + ticket)


def parse_header(buf: bytes | bytearray | memoryview) -> tuple[Header, int] | None:
    """The header at the start of `buf` and its length, or None if `buf` holds only part of it.

    FormatError (400) for an origin that is not UTF-8 or empty, upload_start > upload_end, or
    either over 2^63 - 1: the u64 fields allow more, but no log this side of the wire can hold
    that many entries (storage indexes are signed 64-bit, as Go's tlog indexes are), so no
    pending checkpoint can have that size.
    """
    n = len(buf)
    if n < 2:
        return None
    olen = int.from_bytes(buf[0:2], "big")
    pos = 2 + olen
    if n < pos + 18:
        return None
    tlen = int.from_bytes(buf[pos + 16:pos + 18], "big")
    if n < pos + 18 + tlen:
        return None
    try:
        origin = bytes(buf[2:pos]).decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError("log_origin is not UTF-8") from None
    if not origin:
        raise FormatError("log_origin is empty")
    start = int.from_bytes(buf[pos:pos + 8], "big")
    end = int.from_bytes(buf[pos + 8:pos + 16], "big")
    if start > end:
        raise FormatError(f"upload_start {start} is greater than upload_end {end}")
    if end > MAX_INT63:
        raise FormatError(f"upload_end {end} is over 2^63 - 1, the largest tree size a mirror stores")
    ticket = bytes(buf[pos + 18:pos + 18 + tlen])
    return Header(origin, start, end, ticket), pos + 18 + tlen


def package_ranges(start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(subtree start, start, end) of each package of the canonical sequence of [start, end):
    the subtree [subtree start, end) is what the package's proof is about."""
    pos = start
    while pos < end:
        first = pos - pos % PACKAGE_SIZE
        stop = min(end, first + PACKAGE_SIZE)
        yield first, pos, stop
        pos = stop


def count_packages(start: int, end: int) -> int:
    if start == end:
        return 0
    return (-(-end // PACKAGE_SIZE) * PACKAGE_SIZE - (start - start % PACKAGE_SIZE)) // PACKAGE_SIZE


@dataclass(frozen=True)
class Package:
    """One parsed entry package. `blob` is the entries' bytes as sent, length prefixes
    included: exactly the tlog-tiles entry bundle encoding of [start, end)."""

    entries: list[bytes]
    blob: bytes
    proof: tuple[bytes, ...]


def scan_package(buf: bytes | bytearray, pos: int, count: int) -> tuple[Package, int] | None:
    """The package of `count` entries at `buf[pos:]` and the offset after it, or None when
    `buf` ends inside it. FormatError (400) for more than 63 proof hashes."""
    n = len(buf)
    entries: list[bytes] = []
    p = pos
    for _ in range(count):
        if p + 2 > n:
            return None
        k = (buf[p] << 8) | buf[p + 1]
        if p + 2 + k > n:
            return None
        entries.append(bytes(buf[p + 2:p + 2 + k]))
        p += 2 + k
    if p >= n:
        return None
    blob_end = p
    h = buf[p]
    if h > MAX_PROOF_HASHES:
        raise FormatError(f"an entry package carries {h} proof hashes; at most {MAX_PROOF_HASHES} are allowed")
    p += 1
    if p + 32 * h > n:
        return None
    proof = tuple(bytes(buf[p + 32 * i:p + 32 * i + 32]) for i in range(h))
    return Package(entries, bytes(buf[pos:blob_end]), proof), p + 32 * h


def encode_package(entries: Sequence[bytes], proof: Sequence[bytes]) -> bytes:
    if len(entries) > PACKAGE_SIZE or len(proof) > MAX_PROOF_HASHES:
        raise ValueError("a package holds at most 256 entries and 63 proof hashes")
    parts = []
    for e in entries:
        if len(e) > 0xFFFF:
            raise ValueError("an entry is at most 65,535 bytes")
        parts.append(len(e).to_bytes(2, "big"))
        parts.append(e)
    parts.append(bytes([len(proof)]))
    for h in proof:
        if len(h) != 32:
            raise ValueError("proof hashes are 32 bytes")
        parts.append(h)
    return b"".join(parts)


def add_checkpoint_body(old: int, proof: Sequence[bytes], note: str) -> bytes:
    """An add-checkpoint request body: tlog-witness's, which tlog-mirror's add-checkpoint takes
    as it is (`old <N>`, the consistency proof lines, an empty line, the signed checkpoint)."""
    lines = [f"old {old}", *(b64enc(h) for h in proof), ""]
    return ("\n".join(lines) + "\n" + note).encode("utf-8")


# --- text/x.tlog.mirror-info ------------------------------------------------------

_DECIMAL = re.compile(r"0|[1-9][0-9]{0,19}", re.ASCII)


@dataclass(frozen=True)
class MirrorInfo:
    """A 409 or 202 answer: a valid pending size, the mirror's next entry, and a ticket."""

    size: int
    next_entry: int
    ticket: bytes = b""

    def encode(self) -> bytes:
        return f"{self.size}\n{self.next_entry}\n{b64enc(self.ticket)}\n".encode()


def parse_mirror_info(body: bytes) -> MirrorInfo:
    """Exactly three lines, each ending in "\\n": decimal size, decimal next entry, base64 ticket."""
    try:
        text = body.decode("ascii")
    except UnicodeDecodeError:
        raise FormatError("mirror-info is not ASCII") from None
    lines = text.split("\n")
    if len(lines) != 4 or lines[3] != "":
        raise FormatError("mirror-info must be three lines, each ending in a newline")
    size_s, next_s, ticket_s = lines[:3]
    if not _DECIMAL.fullmatch(size_s) or not _DECIMAL.fullmatch(next_s):
        raise FormatError("mirror-info sizes must be decimal")
    size, nxt = int(size_s), int(next_s)
    if size > MAX_U64 or nxt > MAX_U64:
        raise FormatError("mirror-info size out of range")
    return MirrorInfo(size, nxt, b64dec(ticket_s, what="mirror-info ticket") if ticket_s else b"")
