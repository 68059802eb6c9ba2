"""Signed notes (SPEC: https://c2sp.org/signed-note@v1.0.0).

A note is text ending in "\\n", a blank line, then one or more lines
"— <key name> base64(key ID || signature)\\n". The text MUST be ignored until
a trusted key's signature verifies, so `parse_note` only checks the shape and
`open_note` is the one way to get at verified text. Pure: no I/O.
"""
from __future__ import annotations

import binascii
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from tlog.errors import FormatError, SignatureError, UnknownKeyError
from tlog.formats.encoding import b64decode_noncanonical, b64enc
from tlog.formats.keys import Verifier, check_key_name

MAX_NOTE_SIZE = 1 << 20
"""Cap on a whole note, in bytes: bounds the work an untrusted note can cause."""

MAX_SIGNATURES = 100
"""The Go reference rejects more than 100; the spec requires accepting at least 16."""

_SIG_PREFIX = "\u2014 "  # em dash, space
_CONTROL_RE = re.compile(r"[\x00-\x09\x0b-\x1f]")


def _check_text(text: object) -> str:
    """Note text: str, ends in "\\n", valid UTF-8, no control characters but "\\n"."""
    if not isinstance(text, str) or not text.endswith("\n"):
        raise FormatError("note text must be a string ending in a newline")
    if _CONTROL_RE.search(text):
        raise FormatError("note text contains a control character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise FormatError("note text is not valid UTF-8") from None
    return text


@dataclass(frozen=True)
class NoteSignature:
    """One signature line; `blob` is the signature after the 4-byte key ID."""

    name: str
    key_id: bytes
    blob: bytes

    def __post_init__(self) -> None:
        check_key_name(self.name)
        if not isinstance(self.key_id, bytes) or len(self.key_id) != 4:
            raise FormatError("note signature key ID must be 4 bytes")
        if not isinstance(self.blob, bytes) or not self.blob:
            raise FormatError("note signature must not be empty")

    def line(self) -> str:
        return f"{_SIG_PREFIX}{self.name} {b64enc(self.key_id + self.blob)}\n"


@dataclass(frozen=True)
class Note:
    """A note's text (with its final "\\n") and its signatures, in order."""

    text: str
    signatures: tuple[NoteSignature, ...]

    def __post_init__(self) -> None:
        _check_text(self.text)
        if not isinstance(self.signatures, tuple) or not all(
            isinstance(s, NoteSignature) for s in self.signatures
        ):
            raise FormatError("note signatures must be a tuple of NoteSignature")
        if not 1 <= len(self.signatures) <= MAX_SIGNATURES:
            raise FormatError(f"a note needs 1..{MAX_SIGNATURES} signatures")

    def __str__(self) -> str:
        return self.text + "\n" + "".join(s.line() for s in self.signatures)

    def to_bytes(self) -> bytes:
        return str(self).encode("utf-8")


class VerifiedSignature(NamedTuple):
    verifier: Verifier
    signature: NoteSignature
    timestamp: int | None  # set for cosignatures (type 0x04)


class NoteSigner(Protocol):
    """What `sign_note` needs: `tlog.formats.keys.Signer` satisfies it."""

    name: str
    key_id: bytes

    def sign(self, message: bytes) -> bytes: ...


def _b64dec_signature(b64: str) -> bytes:
    """Standard padded base64, tolerating non-zero trailing bits as Go does.

    Deliberately not `encoding.b64dec` (which also demands canonical form):
    Go's note.Open decodes with base64.StdEncoding, so a tampered final
    character (the litewitness test suite's "...6gx=") is a signature that fails to
    verify (witness: 403), not a malformed note (400). Nothing is lost: the
    signature line is not itself signed, and `line()` re-encodes canonically.
    """
    try:
        raw = b64.encode("ascii")
    except UnicodeEncodeError:
        raise FormatError("note signature is not base64") from None
    if len(raw) % 4:
        raise FormatError("note signature: bad base64 length")
    try:
        return b64decode_noncanonical(raw)
    except (binascii.Error, ValueError):
        raise FormatError("note signature is not base64") from None


def parse_signature_line(line: str) -> NoteSignature:
    """Parse one "— name base64(keyid||sig)" line, with or without its final "\\n"."""
    if line.endswith("\n"):
        line = line[:-1]
    if not line.startswith(_SIG_PREFIX) or "\n" in line:
        raise FormatError("signature line must start with an em dash and a space")
    name, sep, b64 = line[len(_SIG_PREFIX):].partition(" ")
    if not sep or not b64:
        raise FormatError("signature line must be '— <name> <base64>'")
    check_key_name(name)
    raw = _b64dec_signature(b64)
    if len(raw) < 5:
        raise FormatError("note signature must be at least 5 bytes (key ID and signature)")
    return NoteSignature(name, raw[:4], raw[4:])


def parse_signature_lines(text: str) -> tuple[NoteSignature, ...]:
    """Parse a block of signature lines, each ending in "\\n" (e.g. a witness reply)."""
    if not isinstance(text, str) or not text.endswith("\n"):
        raise FormatError("signature lines must end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise FormatError(f"more than {MAX_SIGNATURES} signatures")
    return tuple(parse_signature_line(line) for line in lines)


def parse_note(data: bytes | str) -> Note:
    """Check a note's shape (C2SP signed-note) without verifying anything; raise FormatError.

    The split between text and signatures is at the LAST "\\n\\n" (the text
    may contain blank lines; signature lines cannot be empty).
    """
    if isinstance(data, str):
        try:
            data = data.encode("utf-8")
        except UnicodeEncodeError:
            raise FormatError("note is not valid UTF-8") from None
    if not isinstance(data, bytes):
        raise FormatError("note must be bytes or str")
    if len(data) > MAX_NOTE_SIZE:
        raise FormatError(f"note larger than {MAX_NOTE_SIZE} bytes")
    try:
        msg = data.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError("note is not valid UTF-8") from None
    if _CONTROL_RE.search(msg):
        raise FormatError("note contains a control character")
    split = msg.rfind("\n\n")
    if split < 0:
        raise FormatError("note has no blank line before its signatures")
    text, sigs = msg[: split + 1], msg[split + 2 :]
    if not sigs:
        raise FormatError("note has no signatures")
    return Note(text, parse_signature_lines(sigs))


def sign_note(text: str, signers: Iterable[NoteSigner]) -> str:
    """Sign `text` (which must end in "\\n") with each signer, in order."""
    _check_text(text)
    message = text.encode("utf-8")
    sigs = tuple(NoteSignature(s.name, s.key_id, s.sign(message)) for s in signers)
    note = Note(text, sigs)
    if len(note.to_bytes()) > MAX_NOTE_SIZE:
        raise FormatError(f"signed note would be larger than {MAX_NOTE_SIZE} bytes")
    return str(note)


def _verifier_table(verifiers: Sequence[Verifier]) -> dict[tuple[str, bytes], Verifier]:
    table: dict[tuple[str, bytes], Verifier] = {}
    for v in verifiers:
        other = table.setdefault((v.name, v.key_id), v)
        if other != v:  # a configuration bug, not a property of the note
            raise ValueError(f"two different keys share name {v.name!r} and key ID {v.key_id.hex()}")
    return table


def open_note(
    data: bytes | str | Note, verifiers: Sequence[Verifier]
) -> tuple[Note, list[VerifiedSignature]]:
    """Parse and verify a note against trusted keys (C2SP signed-note, "Verifying").

    Signatures whose (name, key ID) is not a trusted key are ignored, even if
    one of the two matches. A trusted key whose signature fails rejects the
    whole note (SignatureError), as does a trusted key that signed twice
    (FormatError, as in Go). If no trusted key signed: UnknownKeyError.
    Returns the note and the verified signatures, in note order.
    """
    note = data if isinstance(data, Note) else parse_note(data)
    known = _verifier_table(verifiers)
    message = note.text.encode("utf-8")
    verified: list[VerifiedSignature] = []
    seen: set[tuple[str, bytes]] = set()
    for sig in note.signatures:
        v = known.get((sig.name, sig.key_id))
        if v is None:
            continue
        if (sig.name, sig.key_id) in seen:
            raise FormatError(f"note has two signatures from {sig.name!r}")
        seen.add((sig.name, sig.key_id))
        verified.append(VerifiedSignature(v, sig, v.verify(message, sig.blob)))
    if not verified:
        names = sorted({s.name for s in note.signatures})
        raise UnknownKeyError(
            f"note has no signature from a trusted key (signed by: {', '.join(names)})",
            names=names,
        )
    return note, verified


def add_signatures(
    note: Note | str | bytes, lines: str | NoteSignature | Iterable[str | NoteSignature]
) -> Note:
    """Merge extra signature lines (e.g. witness cosignatures) into a note.

    Existing signatures keep their order, so the log's signature stays first;
    a new signature whose (name, key ID) is already present is dropped (the
    first one wins). Nothing is verified here: use `open_note` on the result.
    """
    base = note if isinstance(note, Note) else parse_note(note)
    if isinstance(lines, (str, NoteSignature)):
        lines = [lines]
    extra: list[NoteSignature] = []
    for item in lines:
        if isinstance(item, NoteSignature):
            extra.append(item)
        elif isinstance(item, str):
            extra.extend(parse_signature_lines(item if item.endswith("\n") else item + "\n"))
        else:
            raise FormatError("signature lines must be str or NoteSignature")
    sigs = list(base.signatures)
    present = {(s.name, s.key_id) for s in sigs}
    for s in extra:
        if (s.name, s.key_id) not in present:
            present.add((s.name, s.key_id))
            sigs.append(s)
    merged = Note(base.text, tuple(sigs))
    if len(merged.to_bytes()) > MAX_NOTE_SIZE:
        raise FormatError(f"note larger than {MAX_NOTE_SIZE} bytes")
    return merged


@dataclass(frozen=True)
class CosignatureCheck:
    """What `check_cosignature_lines` made of a cosigner's answer, so that each caller
    (witness pusher, mirror pusher) can log it under its own name."""

    found: tuple[tuple[str, NoteSignature], ...]
    """(policy name, signature) of every key whose line verified, in key order."""
    malformed: bool = False
    """The answer was not a block of signature lines: nothing was checked."""
    failed: tuple[str, ...] = ()
    """Policy names of the keys whose line did not verify."""


def check_cosignature_lines(
    lines: str, checkpoint_text: str, keys: Iterable[tuple[str, Verifier]]
) -> CosignatureCheck:
    """The cosignatures in a cosigner's 200 answer (tlog-witness add-checkpoint, tlog-mirror)
    that verify over `checkpoint_text` with one of its `keys` ((policy name, key) pairs).

    The first line whose name and key ID match a key is the one checked; lines for keys
    we do not hold are ignored (clients ignore unknown keys), as is a missing final "\n"
    (some cosigners omit it).
    """
    try:
        sigs = parse_signature_lines(lines if lines.endswith("\n") else lines + "\n")
    except FormatError:
        return CosignatureCheck((), malformed=True)
    message = checkpoint_text.encode("utf-8")
    found: list[tuple[str, NoteSignature]] = []
    failed: list[str] = []
    for name, v in keys:
        for s in sigs:
            if s.name == v.name and s.key_id == v.key_id:
                try:
                    v.verify(message, s.blob)
                except SignatureError:
                    failed.append(name)
                else:
                    found.append((name, s))
                break
    return CosignatureCheck(tuple(found), failed=tuple(failed))
