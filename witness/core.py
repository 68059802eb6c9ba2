"""The witness's add-checkpoint logic (SPEC: https://c2sp.org/tlog-witness@v1.0.0).

A request body is

    old <N>\\n
    <base64 hash>\\n          0..63 consistency-proof lines
    \\n
    <signed checkpoint note>

and the answer, each case a typed error mapped to its status in one place
(`witness.server`):

    unknown origin                                         NotFound      404
    no signature from the log's key, or one that fails     Forbidden     403
    malformed body, old > size                             InvalidInput  400 (TooLarge 413)
    old != the size this witness last cosigned (0: never)  SizeConflict  409 "<size>\\n"
    size 0 with a root other than SHA-256(""), a proof
    with old = 0, a failing consistency proof, or
    old = size with another root                           VerificationError 422
    success                                                one cosignature/v1 line

A cosignature says "as of its timestamp, this is the largest tree consistent
with everything I cosigned for this origin" (tlog-cosignature), so the new
(size, root) is persisted by compare-and-swap on exactly the (size, root) it was
verified against *before* the cosignature leaves this module: whatever the
concurrency or crash timing, the witness never cosigns two roots for one size
and never goes backwards. Timestamps never decrease per origin either, so two
of our cosignatures can never contradict each other even if the clock steps back.

No aiohttp here: the server parses HTTP, calls `Witness.submit`, maps errors.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from tlog.errors import (
    Conflict,
    Forbidden,
    FormatError,
    InvalidInput,
    NotFound,
    SignatureError,
    TooLarge,
    UnknownKeyError,
    VerificationError,
)
from tlog.formats.checkpoint import Checkpoint, parse_checkpoint
from tlog.formats.encoding import b64dec_hash, b64enc
from tlog.formats.hashing import EMPTY_ROOT, sha256
from tlog.formats.keys import CosignatureSigner, Verifier
from tlog.formats.note import Note, NoteSignature, open_note, parse_note
from tlog.merkle.verify import verify_consistency

from .config import WitnessedLog
from .state import MAX_SIZE, Record, WitnessState

MAX_BODY = 64 * 1024
"""Default body cap: a checkpoint note with many cosignatures is a few KiB."""

MAX_PROOF_LINES = 63
"""tlog-witness: a consistency proof in a tree of < 2^63 leaves has at most 63 hashes."""

CAS_ATTEMPTS = 3

_OLD_RE = re.compile(r"old (0|[1-9][0-9]{0,19})", re.ASCII)


class SizeConflict(Conflict):
    """409: the request's `old` is not the size this witness last cosigned.

    `known_size` goes back as the body "<size>\\n" (Content-Type
    text/x.tlog.size) so the log can retry with a proof from that size.
    """

    def __init__(self, known_size: int) -> None:
        super().__init__(f"old size does not match this witness's latest size {known_size}", known_size=known_size)
        self.known_size = known_size


@dataclass(frozen=True)
class AddCheckpoint:
    """A parsed add-checkpoint body (nothing verified yet)."""

    old: int
    proof: tuple[bytes, ...]
    note: Note
    checkpoint: Checkpoint


@dataclass(frozen=True)
class Cosigned:
    """A successful add-checkpoint: the cosignature and the cosigned checkpoint note."""

    origin: str
    size: int
    root: bytes
    timestamp: int
    signature: NoteSignature
    note: str

    @property
    def body(self) -> str:
        """The 200 body: cosignature/v1 line(s), each ending in "\\n"."""
        return self.signature.line()


def parse_add_checkpoint(body: bytes, *, max_body: int = MAX_BODY) -> AddCheckpoint:
    """Parse a request body strictly; raise FormatError (400) or TooLarge (413).

    Exactly one spelling is accepted: "\\n" line endings, "old" in canonical
    decimal, proof lines in canonical padded base64 of 32 bytes, at most 63 of
    them, then an empty line and a well-formed signed checkpoint note.
    """
    if not isinstance(body, (bytes, bytearray)):
        raise FormatError("body must be bytes")
    if len(body) > max_body:
        raise TooLarge(f"add-checkpoint body over {max_body} bytes")
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError("body is not valid UTF-8") from None
    end = text.find("\n")
    m = _OLD_RE.fullmatch(text[:end]) if end >= 0 else None
    if m is None:
        raise FormatError("body must start with 'old <size>\\n'")
    old = int(m.group(1))
    pos = end + 1
    proof: list[bytes] = []
    while True:
        end = text.find("\n", pos)
        if end < 0:
            raise FormatError("body ends before the empty line that precedes the checkpoint")
        line = text[pos:end]
        pos = end + 1
        if line == "":
            break
        if len(proof) == MAX_PROOF_LINES:
            raise FormatError(f"more than {MAX_PROOF_LINES} consistency proof lines")
        proof.append(b64dec_hash(line, what="consistency proof line"))
    note = parse_note(text[pos:])
    return AddCheckpoint(old, tuple(proof), note, parse_checkpoint(note.text))


def origin_path(origin: str) -> str:
    """A log's monitoring path segment: lowercase hex SHA-256 of its origin (tlog-witness HEAD)."""
    return sha256(origin.encode("utf-8")).hex()


def add_checkpoint_body(old: int, proof: Sequence[bytes], note: str) -> bytes:
    """Serialise a request (for the feeder, log-side pushers and tests)."""
    lines = [f"old {old}", *(b64enc(h) for h in proof), ""]
    return ("\n".join(lines) + "\n" + note).encode("utf-8")


class Witness:
    """Verifies checkpoints of configured logs and cosigns them (one per process or more:
    the state's compare-and-swap keeps several processes sharing a database safe)."""

    def __init__(
        self,
        signer: CosignatureSigner,
        logs: Iterable[WitnessedLog],
        state: WitnessState,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.signer = signer
        self.state = state
        self.clock = clock
        self.logs: dict[str, tuple[WitnessedLog, tuple[Verifier, ...]]] = {}
        for log in logs:
            if log.origin in self.logs:
                raise ValueError(f"origin {log.origin!r} configured twice")
            self.logs[log.origin] = (log, (log.verifier,))

    async def submit(self, body: bytes, *, max_body: int = MAX_BODY) -> Cosigned:
        """POST /add-checkpoint: parse, verify, persist by CAS, cosign."""
        return await self.add_checkpoint(parse_add_checkpoint(body, max_body=max_body))

    async def add_checkpoint(self, req: AddCheckpoint) -> Cosigned:
        cp = req.checkpoint
        entry = self.logs.get(cp.origin)
        if entry is None:
            raise NotFound(f"unknown log origin {cp.origin!r}")
        _, verifiers = entry
        try:
            note, verified = open_note(req.note, verifiers)
        except UnknownKeyError:
            raise Forbidden(f"checkpoint carries no signature by the key of log {cp.origin!r}") from None
        except SignatureError:
            raise Forbidden(f"the signature of log {cp.origin!r} on the checkpoint does not verify") from None
        if req.old > cp.size:
            raise InvalidInput(f"old size {req.old} is larger than the checkpoint size {cp.size}")
        if cp.size > MAX_SIZE:
            raise InvalidInput(f"tree sizes above {MAX_SIZE} are not supported")
        if cp.size == 0 and cp.root != EMPTY_ROOT:
            raise VerificationError("a size-0 checkpoint must have the root SHA-256(\"\")")
        log_sigs = tuple(v.signature for v in verified)
        for _ in range(CAS_ATTEMPTS):
            # The state's in-memory hint; a mismatch is re-checked against the database
            # (which another process may have moved) before answering 409, and a match
            # is decided by the compare-and-swap, which refreshes the hint if it fails.
            rec = self.state.cached(cp.origin)
            if req.old != (rec.size if rec is not None else 0):
                rec = await self.state.get(cp.origin)
                known = rec.size if rec is not None else 0
                if req.old != known:
                    raise SizeConflict(known)
            old_root = rec.root if rec is not None else EMPTY_ROOT
            verify_consistency(req.old, cp.size, old_root, cp.root, req.proof)  # 422 on failure
            ts = int(self.clock())
            if rec is not None:
                ts = max(ts, rec.cosigned_at)
            sig = NoteSignature(self.signer.name, self.signer.key_id, self.signer.cosign(note.text, ts))
            cosigned = str(Note(note.text, log_sigs + (sig,)))
            new = Record(cp.origin, cp.size, cp.root, cosigned, ts)
            # Persist before the cosignature can leave this process; if the row
            # moved since we read it, the signature is dropped and we re-decide.
            if await self.state.compare_and_swap(rec, new):
                return Cosigned(cp.origin, cp.size, cp.root, ts, sig, cosigned)
        rec = await self.state.get(cp.origin)
        raise SizeConflict(rec.size if rec is not None else 0)

    async def latest(self, origin: str) -> Record | None:
        return await self.state.get(origin)
