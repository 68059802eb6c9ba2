"""Witness-network log lists, format `logs/v0` (witness-network.org "Log-list format").

    # comments and blank lines are ignored; lines are stripped of surrounding whitespace
    logs/v0
    vkey <vkey>
    [origin <origin>]          optional: defaults to the vkey's key name
    qpd <1..2^31-1>            add-checkpoint requests the log may make per day
    contact <free text>

The header comes first; each log is those lines in that order. Parsing is strict,
because a list decides which keys a witness trusts: a list with a malformed line,
lines out of order, an incomplete entry, a bad qpd, a malformed vkey or two entries
for one origin is refused whole (the caller keeps the last good one). Two leniencies,
for lists written for newer witnesses: a line with a keyword the format does not
define is ignored (as the witness network's own validator does: a keyword added
later must not make every older witness drop the list), and a well-formed vkey of a
type this witness cannot verify checkpoints with is skipped (and reported), not
fatal. Lines end at "\n" only (other Unicode line breaks are control characters or
part of a value). Pure: no I/O.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tlog.errors import FormatError
from tlog.formats.checkpoint import MAX_ORIGIN_BYTES
from tlog.formats.keys import COSIGNATURE_MLDSA44, ECDSA, ED25519, parse_vkey

HEADER = "logs/v0"
MAX_LIST_BYTES = 16 << 20
"""A cap on a fetched list: the largest witness-network.org lists plan for 40,000 logs."""
MAX_QPD = 2**31 - 1
LOG_KEY_TYPES = frozenset({ED25519, ECDSA, COSIGNATURE_MLDSA44})
"""Log key types a witness can verify checkpoints with (the format itself permits 0x01 today)."""

_QPD_RE = re.compile(r"[1-9][0-9]{0,9}", re.ASCII)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_ORDER = ("vkey", "origin", "qpd", "contact")


@dataclass(frozen=True)
class ListedLog:
    vkey: str
    origin: str
    qpd: int
    contact: str


@dataclass(frozen=True)
class LogList:
    logs: tuple[ListedLog, ...]
    skipped: tuple[tuple[str, str], ...] = ()  # (vkey, why) of entries with a key type not supported here


def parse_log_list(data: bytes | str) -> LogList:
    """Parse a logs/v0 list; FormatError (naming the line) if it is not one."""
    if isinstance(data, (bytes, bytearray)):
        if len(data) > MAX_LIST_BYTES:
            raise FormatError(f"log list larger than {MAX_LIST_BYTES} bytes")
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError("log list is not valid UTF-8") from None
    if not isinstance(data, str):
        raise FormatError("log list must be text")
    if len(data) > MAX_LIST_BYTES:
        raise FormatError(f"log list larger than {MAX_LIST_BYTES} bytes")
    logs: list[ListedLog] = []
    skipped: list[tuple[str, str]] = []
    origins: set[str] = set()
    entry: dict[str, str] = {}
    entry_line = 0
    seen_header = False

    def finish() -> None:
        if not entry:
            return
        if "qpd" not in entry or "contact" not in entry:
            missing = "qpd" if "qpd" not in entry else "contact"
            raise FormatError(f"log list line {entry_line}: the log has no {missing} line", line=entry_line)
        try:
            v = parse_vkey(entry["vkey"])
        except FormatError as e:
            raise FormatError(f"log list line {entry_line}: vkey: {e.message}", line=entry_line) from None
        origin = entry.get("origin", v.name)
        if v.key_type not in LOG_KEY_TYPES:
            skipped.append((entry["vkey"], f"key type 0x{v.key_type:02x} cannot sign checkpoints here"))
        elif origin in origins:
            raise FormatError(f"log list line {entry_line}: origin {origin!r} is listed twice", line=entry_line)
        else:
            origins.add(origin)
            logs.append(ListedLog(entry["vkey"], origin, int(entry["qpd"]), entry["contact"]))
        entry.clear()

    for lineno, raw in enumerate(data.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if _CONTROL_RE.search(line.replace("\t", " ")):
            raise FormatError(f"log list line {lineno}: control character", line=lineno)
        if not seen_header:
            if line != HEADER:
                raise FormatError(f"log list line {lineno}: expected the {HEADER!r} header", line=lineno)
            seen_header = True
            continue
        if line == HEADER:
            raise FormatError(f"log list line {lineno}: a second {HEADER!r} header", line=lineno)
        keyword, _, value = line.partition(" ")
        value = value.strip()
        if keyword not in _ORDER:
            continue  # a keyword of a later revision of the format
        if not value:
            raise FormatError(f"log list line {lineno}: {keyword} needs a value", line=lineno)
        if keyword == "vkey":
            finish()
            entry_line = lineno
        elif not entry:
            raise FormatError(f"log list line {lineno}: {keyword} before the vkey line of a log", line=lineno)
        elif _ORDER.index(keyword) <= max(_ORDER.index(k) for k in entry):
            raise FormatError(f"log list line {lineno}: {keyword} out of order (vkey, [origin], qpd, contact)",
                              line=lineno)
        elif keyword == "origin" and len(value.encode("utf-8")) > MAX_ORIGIN_BYTES:
            raise FormatError(f"log list line {lineno}: origin longer than {MAX_ORIGIN_BYTES} bytes", line=lineno)
        elif keyword == "qpd" and not (_QPD_RE.fullmatch(value) and int(value) <= MAX_QPD):
            raise FormatError(f"log list line {lineno}: qpd must be a decimal in 1..2^31-1", line=lineno)
        if keyword == "vkey" and " " in value:
            raise FormatError(f"log list line {lineno}: a vkey has no spaces", line=lineno)
        entry[keyword] = value
    if not seen_header:
        raise FormatError(f"log list has no {HEADER!r} header")
    finish()
    return LogList(tuple(logs), tuple(skipped))
