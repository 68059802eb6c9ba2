"""Checkpoints (SPEC: https://c2sp.org/tlog-checkpoint@v1.0.0) and what cosigners sign (C2SP tlog-cosignature).

A checkpoint is the text of a signed note: origin, tree size, root hash, then
optional extension lines. Parsing is strict because a checkpoint is what a log
commits to and what witnesses cosign: two different texts must never be read
as the same (size, root), so there is exactly one accepted spelling of each
field. Pure: no I/O, no signatures (see `tlog.formats.note` and `tlog.formats.keys`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tlog.errors import FormatError
from tlog.formats.encoding import b64dec_hash, b64enc
from tlog.formats.hashing import HASH_SIZE

MAX_ORIGIN_BYTES = 255
"""C2SP tlog-checkpoint: keep the origin 1..255 bytes (it must fit a u8-length field, cf. §3 ML-DSA)."""

MAX_TREE_SIZE = 2**64 - 1
"""Tree sizes are uint64 in every C2SP implementation (transparency-dev/formats)."""

MAX_COSIGNATURE_TIMESTAMP = 2**63 - 1
"""tlog-cosignature: the timestamp "MUST NOT exceed 2^63 - 1"."""

SUBTREE_LABEL = b"subtree/v1\n\x00"
"""tlog-cosignature: the 12-byte label that starts every ML-DSA-44 `cosigned_message`."""

_SIZE_RE = re.compile(r"0|[1-9][0-9]*")  # ASCII decimal, no sign, no leading zeros
_CONTROL_RE = re.compile(r"[\x00-\x09\x0b-\x1f]")  # signed-note: none below U+0020 but "\n"


@dataclass(frozen=True)
class Checkpoint:
    """A parsed checkpoint body; construction validates, so `to_text()` always re-parses."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_line(self.origin, "origin")
        if len(self.origin.encode("utf-8")) > MAX_ORIGIN_BYTES:
            raise FormatError(f"checkpoint origin longer than {MAX_ORIGIN_BYTES} bytes")
        if isinstance(self.size, bool) or not isinstance(self.size, int):
            raise FormatError("checkpoint size must be an int")
        if not 0 <= self.size <= MAX_TREE_SIZE:
            raise FormatError("checkpoint size out of range")
        if not isinstance(self.root, bytes) or len(self.root) != HASH_SIZE:
            raise FormatError(f"checkpoint root must be {HASH_SIZE} bytes")
        if not isinstance(self.extensions, tuple):
            raise FormatError("checkpoint extensions must be a tuple of lines")
        for ext in self.extensions:
            _check_line(ext, "extension line")

    def to_text(self) -> str:
        """The note text: every line, including the last, ends in "\\n"."""
        lines = [self.origin, str(self.size), b64enc(self.root), *self.extensions]
        return "".join(line + "\n" for line in lines)


def _check_line(line: object, what: str) -> None:
    # Spec §2: lines are non-empty; a line can hold neither "\n" nor any
    # control character, since the text must be a valid signed-note text.
    if not isinstance(line, str) or not line:
        raise FormatError(f"checkpoint {what} must be a non-empty string")
    if "\n" in line or _CONTROL_RE.search(line):
        raise FormatError(f"checkpoint {what} contains a control character")
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        raise FormatError(f"checkpoint {what} is not valid UTF-8") from None


def _as_text(data: str | bytes, what: str) -> str:
    if isinstance(data, bytes):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError(f"{what} is not valid UTF-8") from None
    if not isinstance(data, str):
        raise FormatError(f"{what} must be str or bytes")
    return data


def parse_checkpoint(text: str | bytes) -> Checkpoint:
    """Parse a checkpoint note text (no signature lines); raise FormatError on any deviation.

    Rules (C2SP tlog-checkpoint): at least three non-empty lines, each ending "\\n";
    origin 1..255 bytes; size ASCII decimal without sign or leading zeros;
    root the canonical base64 of exactly 32 bytes; extension lines non-empty.
    """
    text = _as_text(text, "checkpoint")
    if not text.endswith("\n"):
        raise FormatError("checkpoint text must end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise FormatError("checkpoint needs origin, size and root lines")
    origin, size_s, root_s, *extensions = lines
    if not origin:
        raise FormatError("checkpoint origin is empty")
    # Bound the digits before int(): no uint64 has more than 20, and huge
    # strings would otherwise hit Python's int-conversion limit (ValueError).
    if len(size_s) > 20 or not _SIZE_RE.fullmatch(size_s):
        raise FormatError("checkpoint size must be decimal with no sign or leading zeros")
    root = b64dec_hash(root_s, what="checkpoint root")
    return Checkpoint(origin, int(size_s), root, tuple(extensions))


def cosignature_message(checkpoint_text: str | bytes, timestamp: int) -> bytes:
    """The message an Ed25519 cosigner (type 0x04) signs (C2SP tlog-cosignature).

    "cosignature/v1\\n" "time <ts>\\n" then the whole checkpoint text, extension
    lines included, with its final newline and without signature lines. The
    fixed header gives domain separation from plain 0x01 note signatures.
    """
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise FormatError("cosignature timestamp must be an int")
    if not 0 <= timestamp <= MAX_COSIGNATURE_TIMESTAMP:
        raise FormatError("cosignature timestamp out of range 0..2^63-1")
    if isinstance(checkpoint_text, str):
        try:
            body = checkpoint_text.encode("utf-8")
        except UnicodeEncodeError:
            raise FormatError("checkpoint text is not valid UTF-8") from None
    else:
        body = checkpoint_text
    if not body.endswith(b"\n"):
        raise FormatError("checkpoint text must end with a newline")
    return b"cosignature/v1\ntime %d\n" % timestamp + body


def subtree_message(cosigner_name: str, timestamp: int, origin: str, start: int, end: int, root: bytes) -> bytes:
    """The `cosigned_message` an ML-DSA-44 cosigner (type 0x06) signs (C2SP tlog-cosignature).

        uint8 label[12] = "subtree/v1\\n\\0"; opaque cosigner_name<1..2^8-1>; uint64 timestamp;
        opaque log_origin<1..2^8-1>; uint64 start; uint64 end; uint8 hash[32];

    A checkpoint is the subtree [0, size). Unlike the Ed25519 message it names the
    cosigner and leaves out extension lines. A subtree that does not start at 0
    has no timestamp (it must be 0), which is refused here rather than signed.
    """
    name = _u8_string(cosigner_name, "cosigner name")
    log = _u8_string(origin, "log origin")
    for value, what in ((timestamp, "timestamp"), (start, "start"), (end, "end")):
        if isinstance(value, bool) or not isinstance(value, int):
            raise FormatError(f"subtree {what} must be an int")
    if not 0 <= timestamp <= MAX_COSIGNATURE_TIMESTAMP:
        raise FormatError("cosignature timestamp out of range 0..2^63-1")
    if not 0 <= start <= end <= MAX_TREE_SIZE:
        raise FormatError("subtree needs 0 <= start <= end < 2^64")
    if start != 0 and timestamp != 0:
        raise FormatError("a subtree that does not start at 0 must have timestamp 0")
    if not isinstance(root, bytes) or len(root) != HASH_SIZE:
        raise FormatError(f"subtree hash must be {HASH_SIZE} bytes")
    return b"".join((SUBTREE_LABEL, bytes([len(name)]), name, timestamp.to_bytes(8, "big"),
                     bytes([len(log)]), log, start.to_bytes(8, "big"), end.to_bytes(8, "big"), root))


def _u8_string(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise FormatError(f"{what} must be a string")
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError:
        raise FormatError(f"{what} is not valid UTF-8") from None
    if not 1 <= len(raw) <= 255:
        raise FormatError(f"{what} must be 1..255 bytes")
    return raw
