"""The witness's add-checkpoint logic (SPEC: https://c2sp.org/tlog-witness@v1.0.0).

A request body is

    old <N>\\n
    <base64 hash>\\n          0..63 consistency-proof lines
    \\n
    <signed checkpoint note>

and the answer, each case a typed error mapped to its status in one place
(`witness.api`):

    unknown origin                                         NotFound      404
    no signature from the log's key, or one that fails     Forbidden     403
    malformed body, old > size                             InvalidInput  400 (TooLarge 413)
    old != the size this witness last cosigned (0: never)  SizeConflict  409 "<size>\\n"
    size 0 with a root other than SHA-256(""), a proof
    with old = 0, a failing consistency proof, or
    old = size with another root                           VerificationError 422
    more new checkpoints of the log today than its qpd     RateLimited   429 (Retry-After)
    success                                                one cosignature line per witness key

A cosignature says "as of its timestamp, this is the largest tree consistent
with everything I cosigned for this origin" (tlog-cosignature), so the new
(size, root) is persisted by compare-and-swap on exactly the (size, root) it was
verified against *before* the cosignature leaves this module: whatever the
concurrency or crash timing, the witness never cosigns two roots for one size
and never goes backwards. Timestamps never decrease per origin either, so two
of our cosignatures can never contradict each other even if the clock steps back.

A witness may hold an Ed25519 key (cosignature/v1, 0x04), an ML-DSA-44 key (subtree/v1,
0x06), or both under one name; every success carries one line per key, Ed25519 first.
ML-DSA-44 signing (~0.6 ms) runs on worker threads (pyca/cryptography releases the GIL),
so a witness signs on every core. The same checkpoint again is cosigned again (a fresh
timestamp, as logs that re-push an unchanged tree expect) without spending the log's qpd,
so replaying a log's public checkpoints cannot use up its budget (the per-client rate
limit bounds the signatures that costs).

`sign-subtree` (tlog-witness, optional): a checkpoint this witness cosigned plus a subtree
consistency proof (draft-ietf-plants-merkle-tree-certs §4.4) earns an ML-DSA-44 subtree
cosignature with timestamp 0: 400 malformed or not a valid subtree of the checkpoint,
404 unknown origin, 403 no valid cosignature of ours on the checkpoint, 422 bad proof.

No aiohttp here: the server parses HTTP, calls `Witness.submit`, maps errors.
"""
from __future__ import annotations

import asyncio
import os
import re
import time
import weakref
from collections.abc import Callable, Container, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from tlog.errors import (
    Conflict,
    Forbidden,
    FormatError,
    InvalidInput,
    NotFound,
    RateLimited,
    SignatureError,
    TooLarge,
    UnknownKeyError,
    VerificationError,
)
from tlog.formats.checkpoint import Checkpoint, parse_checkpoint
from tlog.formats.encoding import b64dec_hash
from tlog.formats.hashing import EMPTY_ROOT, sha256
from tlog.formats.keys import COSIGNATURE_MLDSA44, Cosigner, MLDSACosigner, Verifier
from tlog.formats.note import Note, NoteSignature, open_note, parse_note
from tlog.merkle.subtrees import valid_subtree, verify_subtree_consistency
from tlog.merkle.verify import verify_consistency
from tlog.runtime.batching import ThreadBatches

from .config import WitnessedLog
from .state import MAX_SIZE, Record, WitnessState

MAX_BODY = 128 * 1024
"""Default body cap. C2SP signed-note: verifiers "MUST accept at least up to 16 signatures",
and post-quantum ones are up to ~5 kB each (~6.5 kB a line in base64): 16 such lines, 63
proof lines and the checkpoint fit in 128 KiB."""

MAX_PROOF_LINES = 63
"""tlog-witness: a consistency proof in a tree of < 2^63 leaves has at most 63 hashes."""

CAS_ATTEMPTS = 3

_OLD_RE = re.compile(r"old (0|[1-9][0-9]{0,19})", re.ASCII)
_SUBTREE_RE = re.compile(r"subtree (0|[1-9][0-9]{0,19}) (0|[1-9][0-9]{0,19})", re.ASCII)
DAY = 86400.0


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
    """A successful add-checkpoint: the cosignatures (one per witness key) and the cosigned note."""

    origin: str
    size: int
    root: bytes
    timestamp: int
    signatures: tuple[NoteSignature, ...]
    note: str

    @property
    def signature(self) -> NoteSignature:
        """The first cosignature (the Ed25519 one when the witness holds both kinds)."""
        return self.signatures[0]

    @property
    def body(self) -> str:
        """The 200 body: one cosignature line per witness key, each ending in "\\n"."""
        return "".join(s.line() for s in self.signatures)


@dataclass(frozen=True)
class SignSubtree:
    """A parsed sign-subtree body (nothing verified yet)."""

    start: int
    end: int
    subtree_hash: bytes
    proof: tuple[bytes, ...]
    note: Note
    checkpoint: Checkpoint


class QueryBudget:
    """A log's `qpd`: new checkpoints this witness cosigns for it per day (a token bucket).

    It refills at qpd/86400 per second and holds at most min(qpd, max(10, qpd/24)): a log
    may catch up with an hour's worth at once (at least 10), never more than a day's. Only
    requests that move the log forward spend from it; a 409 or the last cosigned checkpoint
    again costs nothing (anyone can replay a log's public checkpoints). In memory: a
    restart refills it.
    """

    def __init__(self, qpd: int, clock: Callable[[], float]) -> None:
        self.qpd = qpd
        self.capacity = float(min(qpd, max(10, qpd // 24)))
        self.rate = qpd / DAY
        self.clock = clock
        self.tokens = self.capacity
        self.at = clock()

    def take(self) -> None:
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + max(0.0, now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            wait = int((1 - self.tokens) / self.rate) + 1
            raise RateLimited(f"this log may have {self.qpd} checkpoints cosigned per day (qpd); retry later",
                              retry_after=wait)
        self.tokens -= 1


_POOL: ThreadPoolExecutor | None = None
_WORKERS = max(2, os.cpu_count() or 2)
_BATCHES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ThreadBatches] = weakref.WeakKeyDictionary()


def _signing() -> ThreadBatches:
    """ML-DSA-44 signing off the event loop on worker threads, one per core, shared by every
    witness in the process; handed over in batches under load (one queue per event loop)."""
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="witness-sign")
    loop = asyncio.get_running_loop()
    batches = _BATCHES.get(loop)
    if batches is None:
        batches = _BATCHES[loop] = ThreadBatches(_POOL, _WORKERS)
    return batches


def _body_text(body: bytes, max_body: int, what: str) -> str:
    if not isinstance(body, (bytes, bytearray)):
        raise FormatError("body must be bytes")
    if len(body) > max_body:
        raise TooLarge(f"{what} body over {max_body} bytes")
    try:
        return bytes(body).decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError("body is not valid UTF-8") from None


def parse_add_checkpoint(body: bytes, *, max_body: int = MAX_BODY) -> AddCheckpoint:
    """Parse a request body strictly; raise FormatError (400) or TooLarge (413).

    Exactly one spelling is accepted: "\\n" line endings, "old" in canonical
    decimal, proof lines in canonical padded base64 of 32 bytes, at most 63 of
    them, then an empty line and a well-formed signed checkpoint note.
    """
    text = _body_text(body, max_body, "add-checkpoint")
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


def parse_sign_subtree(body: bytes, *, max_body: int = MAX_BODY) -> SignSubtree:
    """Parse a sign-subtree body strictly (tlog-witness); FormatError (400) or TooLarge (413).

        subtree <start> <end>\\n  <base64 subtree hash>\\n  0..63 proof lines  \\n  <checkpoint note>

    [start, end) must be a valid subtree (draft-ietf-plants-merkle-tree-certs §4.1) ending
    within the checkpoint.
    """
    text = _body_text(body, max_body, "sign-subtree")
    lines_end = text.find("\n\n")
    if lines_end < 0:
        raise FormatError("body needs an empty line before the checkpoint")
    head = text[:lines_end].split("\n")
    m = _SUBTREE_RE.fullmatch(head[0])
    if m is None or len(head) < 2:
        raise FormatError("body must start with 'subtree <start> <end>\\n' and the subtree hash line")
    start, end = int(m.group(1)), int(m.group(2))
    if not valid_subtree(start, end) or end >= 2**63:
        raise FormatError(f"[{start}, {end}) is not a valid subtree")
    subtree_hash = b64dec_hash(head[1], what="subtree hash")
    if len(head) - 2 > MAX_PROOF_LINES:
        raise FormatError(f"more than {MAX_PROOF_LINES} consistency proof lines")
    proof = tuple(b64dec_hash(line, what="consistency proof line") for line in head[2:])
    note = parse_note(text[lines_end + 2:])
    cp = parse_checkpoint(note.text)
    if end > cp.size:
        raise FormatError(f"subtree end {end} is beyond the checkpoint size {cp.size}")
    return SignSubtree(start, end, subtree_hash, proof, note, cp)


def checked_add_checkpoint(req: AddCheckpoint, verifiers: Sequence[Verifier]) -> tuple[NoteSignature, ...]:
    """The checks of an add-checkpoint request that need no state, shared by the witness and
    the mirror (tlog-mirror: "handled identically"): the log's signature (403) and the sizes
    (400, 422). The log's verified signatures, to keep beside ours."""
    cp = req.checkpoint
    log_sigs = log_signatures(req.note, verifiers, cp.origin)
    if req.old > cp.size:
        raise InvalidInput(f"old size {req.old} is larger than the checkpoint size {cp.size}")
    if cp.size > MAX_SIZE:
        raise InvalidInput(f"tree sizes above {MAX_SIZE} are not supported")
    if cp.size == 0 and cp.root != EMPTY_ROOT:
        raise VerificationError("a size-0 checkpoint must have the root SHA-256(\"\")")
    return log_sigs


def log_signatures(note: Note, verifiers: Sequence[Verifier], origin: str) -> tuple[NoteSignature, ...]:
    """The log's signatures on a checkpoint note, verified; Forbidden (403) if there is none."""
    try:
        _, verified = open_note(note, verifiers)
    except UnknownKeyError:
        raise Forbidden(f"checkpoint carries no signature by the key of log {origin!r}") from None
    except SignatureError:
        raise Forbidden(f"the signature of log {origin!r} on the checkpoint does not verify") from None
    return tuple(v.signature for v in verified)


def checked_sign_subtree(body: bytes, logs: Container[str], signers: Sequence[MLDSACosigner], *,
                         max_body: int = MAX_BODY) -> tuple[SignSubtree, tuple[MLDSACosigner, ...]]:
    """A sign-subtree request (tlog-witness; a mirror's is "handled identically") checked
    against this cosigner's ML-DSA-44 keys: a log it follows (404), a checkpoint carrying a
    valid cosignature of at least one of `signers` (403: it signs subtrees only of what it
    cosigned itself, with a key that can sign subtrees), and a subtree consistency proof to
    that checkpoint (422). Returns the request and the keys whose cosignature it carries:
    tlog-witness says the subtree signatures SHOULD come from the keys that signed the
    checkpoint, so only those sign (as Sunlight's witness does)."""
    req = parse_sign_subtree(body, max_body=max_body)
    cp = req.checkpoint
    if cp.origin not in logs:
        raise NotFound(f"unknown log origin {cp.origin!r}")
    try:
        _, verified = open_note(req.note, [s.verifier for s in signers])
    except (UnknownKeyError, SignatureError):
        raise Forbidden("the checkpoint carries no valid ML-DSA-44 cosignature of this cosigner") from None
    signed = {(v.signature.name, v.signature.key_id) for v in verified}
    verify_subtree_consistency(req.start, req.end, cp.size, req.proof, req.subtree_hash, cp.root)  # 422
    return req, tuple(s for s in signers if (s.name, s.key_id) in signed)


async def sign_subtree(body: bytes, logs: Container[str], cosigners: Sequence[Cosigner], who: str, *,
                       max_body: int = MAX_BODY) -> str:
    """POST /sign-subtree for a witness or a mirror (tlog-mirror: "handled identically"):
    404 without an ML-DSA-44 key, the request checked (`checked_sign_subtree`), then the
    subtree cosignature lines (timestamp 0), one per ML-DSA-44 key that cosigned the
    checkpoint, signed off the event loop."""
    signers = [c for c in cosigners if isinstance(c, MLDSACosigner)]
    if not signers:
        raise NotFound(f"this {who} has no ML-DSA-44 key: it does not sign subtrees")
    req, signed = checked_sign_subtree(body, logs, signers, max_body=max_body)
    return await _signing().run(partial(subtree_lines, req, signed))


def subtree_lines(req: SignSubtree, signers: Sequence[MLDSACosigner]) -> str:
    """The subtree/v1 cosignature lines (timestamp 0) of a checked request, one per key."""
    cp = req.checkpoint
    return "".join(NoteSignature(s.name, s.key_id, s.cosign_subtree(cp.origin, req.start, req.end,
                                                                    req.subtree_hash)).line() for s in signers)


def origin_path(origin: str) -> str:
    """A log's monitoring path segment: lowercase hex SHA-256 of its origin (tlog-witness HEAD)."""
    return sha256(origin.encode("utf-8")).hex()


class Witness:
    """Verifies checkpoints of configured logs and cosigns them (one per process or more:
    the state's compare-and-swap keeps several processes sharing a database safe)."""

    def __init__(
        self,
        signers: Cosigner | Sequence[Cosigner],
        logs: Iterable[WitnessedLog],
        state: WitnessState,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.signers: tuple[Cosigner, ...] = (signers,) if not isinstance(signers, Sequence) else tuple(signers)
        if not self.signers or len({s.name for s in self.signers}) != 1:
            raise ValueError("a witness needs one or more cosigning keys, all with one name")
        self.signer = self.signers[0]
        self.state = state
        self.clock = clock
        self.logs: dict[str, tuple[WitnessedLog, tuple[Verifier, ...]]] = {}
        self.budgets: dict[str, QueryBudget] = {}
        # ML-DSA-44 (~0.6 ms) and token keys (a round trip to the token) sign on worker threads,
        # GIL released, while the event loop goes on; an Ed25519 key file signs inline (~50 us)
        self._threaded = any(s.key_type == COSIGNATURE_MLDSA44 or not s.in_process for s in self.signers)
        self.set_logs(logs)

    @property
    def subtree_signers(self) -> tuple[MLDSACosigner, ...]:
        """The keys that can sign subtrees (ML-DSA-44): sign-subtree is offered iff there is one."""
        return tuple(s for s in self.signers if isinstance(s, MLDSACosigner))

    def set_logs(self, logs: Iterable[WitnessedLog]) -> None:
        """Replace the table of logs this witness cosigns (configuration and log lists).

        One assignment, so a request sees the old table or the new one. A log's
        qpd budget carries over while its qpd is unchanged.
        """
        table: dict[str, tuple[WitnessedLog, tuple[Verifier, ...]]] = {}
        budgets: dict[str, QueryBudget] = {}
        for log in logs:
            if log.origin in table:
                raise ValueError(f"origin {log.origin!r} configured twice")
            table[log.origin] = (log, log.verifiers)
            if log.qpd is not None:
                old = self.budgets.get(log.origin)
                budgets[log.origin] = old if old is not None and old.qpd == log.qpd else QueryBudget(log.qpd,
                                                                                                      self.clock)
        self.logs, self.budgets = table, budgets

    async def submit(self, body: bytes, *, max_body: int = MAX_BODY) -> Cosigned:
        """POST /add-checkpoint: parse, verify, persist by CAS, cosign."""
        return await self.add_checkpoint(parse_add_checkpoint(body, max_body=max_body))

    def _sign_sync(self, cp: Checkpoint, ts: int) -> tuple[NoteSignature, ...]:
        return tuple(NoteSignature(s.name, s.key_id, s.cosign_checkpoint(cp, ts)) for s in self.signers)

    async def _sign(self, cp: Checkpoint, ts: int) -> tuple[NoteSignature, ...]:
        if not self._threaded:  # Ed25519 key files only: ~50 us, cheaper than a hand-off
            return self._sign_sync(cp, ts)
        return await _signing().run(partial(self._sign_sync, cp, ts))

    async def add_checkpoint(self, req: AddCheckpoint) -> Cosigned:
        cp = req.checkpoint
        entry = self.logs.get(cp.origin)
        if entry is None:
            raise NotFound(f"unknown log origin {cp.origin!r}")
        _, verifiers = entry
        log_sigs = checked_add_checkpoint(req, verifiers)
        charged = False
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
            budget = self.budgets.get(cp.origin)
            repeat = rec is not None and rec.size == cp.size  # same root: verified just above
            if budget is not None and not charged and not repeat:
                budget.take()  # 429 once this log's qpd is spent
                charged = True
            ts = max(int(self.clock()), 1)  # tlog-witness: the timestamp MUST NOT be zero
            if rec is not None:
                ts = max(ts, rec.cosigned_at)
            sigs = await self._sign(cp, ts)
            cosigned = str(Note(req.note.text, log_sigs + sigs))
            new = Record(cp.origin, cp.size, cp.root, cosigned, ts)
            # Persist before the cosignature can leave this process; if the row
            # moved since we read it, the signature is dropped and we re-decide.
            if await self.state.compare_and_swap(rec, new):
                return Cosigned(cp.origin, cp.size, cp.root, ts, sigs, cosigned)
        rec = await self.state.get(cp.origin)
        raise SizeConflict(rec.size if rec is not None else 0)

    async def sign_subtree(self, body: bytes, *, max_body: int = MAX_BODY) -> str:
        """POST /sign-subtree: the subtree cosignature lines (timestamp 0), one per ML-DSA-44 key."""
        return await sign_subtree(body, self.logs, self.signers, "witness", max_body=max_body)

    async def latest(self, origin: str) -> Record | None:
        return await self.state.get(origin)
