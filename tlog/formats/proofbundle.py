"""The offline proof format, C2SP tlog-proof draft (SPEC: https://c2sp.org/tlog-proof).

A ".tlog-proof" file is, line by line:

    c2sp.org/tlog-proof@v1
    extra <base64>             optional, unauthenticated opaque data
    index <decimal>            no sign, no leading zeros (except "0")
    <base64 hash>              0..63 inclusion-proof hashes, RFC 6962 §2.1.1 order
    <empty line>
    <checkpoint>               the signed checkpoint note, verbatim

This module only parses and serialises; it verifies nothing. The caller must
still check the checkpoint's signatures against a policy and the inclusion
proof against the checkpoint root, because every byte here came from whoever
handed us the file. Parsing is strict (one text per bundle, exact round trip)
so that a bundle can be stored and compared byte for byte.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tlog.errors import FormatError
from tlog.formats.encoding import MAX_INT63, b64dec, b64dec_hash, b64enc
from tlog.formats.hashing import HASH_SIZE

HEADER = "c2sp.org/tlog-proof@v1"
MAX_PROOF_HASHES = 63
"""An inclusion proof in a tree of at most 2^63-1 leaves has at most 63 hashes."""
MAX_INDEX = MAX_INT63
"""The draft gives no bound; Go's tlog (int64) and the tlog-proof implementations read an
index as a signed 64-bit integer, so a bundle describes trees of at most 2^63-1 leaves
(the verifiers themselves accept the uint64 sizes of C2SP checkpoints, docs/architecture.md §3.2)."""
MAX_BUNDLE_BYTES = 1 << 20
"""A bundle is ~3 KiB; 1 MiB leaves room for many cosignatures and large extra."""

_INDEX_RE = re.compile(r"0|[1-9][0-9]{0,18}", re.ASCII)


@dataclass(frozen=True)
class ProofBundle:
    """One parsed tlog-proof. `checkpoint` is the signed note text, verbatim.

    `extra` is None when the bundle has no extra line; it is never b"" because
    "extra " with nothing after it would be a second spelling of "no extra".
    """

    index: int
    proof: tuple[bytes, ...]
    checkpoint: str
    extra: bytes | None = None

    def __post_init__(self) -> None:
        # Refuse to build what `to_text` could not serialise or parse back (FormatError:
        # the fields often come from a server's answer, and a bad answer is bad input).
        if isinstance(self.index, bool) or not isinstance(self.index, int) or not 0 <= self.index <= MAX_INDEX:
            raise FormatError("index must be an integer in 0..2^63-1")
        if not isinstance(self.proof, tuple) or len(self.proof) > MAX_PROOF_HASHES:
            raise FormatError(f"proof must be a tuple of at most {MAX_PROOF_HASHES} hashes")
        if any(not isinstance(h, bytes) or len(h) != HASH_SIZE for h in self.proof):
            raise FormatError("proof hashes must be 32 bytes")
        if self.extra is not None and (not isinstance(self.extra, bytes) or not self.extra):
            raise FormatError("extra must be None or non-empty bytes")
        if not isinstance(self.checkpoint, str) or not self.checkpoint.endswith("\n") \
                or self.checkpoint.startswith("\n"):
            raise FormatError("checkpoint must be a non-empty note ending in a newline")

    def to_text(self) -> str:
        lines = [HEADER]
        if self.extra is not None:
            lines.append("extra " + b64enc(self.extra))
        lines.append(f"index {self.index}")
        lines.extend(b64enc(h) for h in self.proof)
        lines.append("")
        return "\n".join(lines) + "\n" + self.checkpoint


def parse_proof_bundle(text: str | bytes) -> ProofBundle:
    """Parse a tlog-proof; any deviation from the grammar is a FormatError.

    Caps the input at 1 MiB before looking at it, requires valid UTF-8, and
    requires the checkpoint (everything after the empty line) to be non-empty,
    to start with a non-empty origin line and to end with "\\n". The
    checkpoint's own syntax and signatures are checked by the note and
    checkpoint parsers, not here.
    """
    if isinstance(text, str):
        if len(text) > MAX_BUNDLE_BYTES:
            raise FormatError("proof bundle larger than 1 MiB")
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise FormatError("proof bundle is not valid UTF-8") from None
    elif isinstance(text, (bytes, bytearray)):
        size = len(text)
        if size <= MAX_BUNDLE_BYTES:
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError:
                raise FormatError("proof bundle is not valid UTF-8") from None
    else:
        raise FormatError("proof bundle must be text")
    if size > MAX_BUNDLE_BYTES:
        raise FormatError("proof bundle larger than 1 MiB")
    assert isinstance(text, str)
    src: str = text
    pos = 0

    def next_line(what: str) -> str:
        nonlocal pos
        end = src.find("\n", pos)
        if end < 0:
            raise FormatError(f"proof bundle truncated before {what}")
        line = src[pos:end]
        pos = end + 1
        return line

    if next_line("header") != HEADER:
        raise FormatError(f"proof bundle must start with {HEADER!r}")

    line = next_line("index")
    extra: bytes | None = None
    if line.startswith("extra "):
        extra = b64dec(line[len("extra ") :], what="extra")
        if not extra:
            raise FormatError("extra: empty")
        line = next_line("index")

    if not line.startswith("index "):
        raise FormatError("proof bundle: expected 'index <n>'")
    digits = line[len("index ") :]
    if not _INDEX_RE.fullmatch(digits):
        raise FormatError("index: not a canonical decimal")
    index = int(digits)
    if index > MAX_INDEX:
        raise FormatError("index overflows 2^63-1")

    proof: list[bytes] = []
    while (line := next_line("empty line")) != "":
        if len(proof) == MAX_PROOF_HASHES:
            raise FormatError(f"more than {MAX_PROOF_HASHES} proof hashes")
        proof.append(b64dec_hash(line, what="proof hash"))

    checkpoint = src[pos:]
    if not checkpoint:
        raise FormatError("proof bundle has no checkpoint")
    if checkpoint.startswith("\n"):
        raise FormatError("checkpoint: empty origin line")
    if not checkpoint.endswith("\n"):
        raise FormatError("checkpoint must end with a newline")
    return ProofBundle(index=index, proof=tuple(proof), checkpoint=checkpoint, extra=extra)
