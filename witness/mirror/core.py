"""The mirror's protocol logic, to the letter of C2SP tlog-mirror (docs/architecture.md §4.1).

    POST add-checkpoint   the witness's request and checks (C2SP tlog-witness), but it moves
                          the *pending* checkpoint and answers 200 with an empty body: the
                          mirror signs nothing here
    POST add-entries      a streamed body of entry packages, each authenticated by a subtree
                          consistency proof against the pending checkpoint of size upload_end,
                          stored as it arrives; then the mirror checkpoint moves to upload_end
                          and the mirror cosigns it

add-entries answers (each a typed error or result mapped to HTTP in `witness.mirror.api`):

    unknown origin                                              NotFound        404
    no pending checkpoint yet                                   NoPending       422
    malformed header, or the body ended before any package      InvalidInput    400
    upload_end is no pending checkpoint we know (nor the        MirrorConflict  409 mirror-info
    mirror checkpoint), or below the mirror checkpoint,
    upload_start past the next entry, too many resent entries
    a package whose proof does not verify (processing ends)     VerificationError 422
    some packages stored, the body ended before the rest        Uploaded(202)   mirror-info
    every package stored, checkpoint moved                      Uploaded(200)   cosignature lines

What it guarantees, whatever the concurrency and wherever a crash lands:

- every stored entry was authenticated against a pending checkpoint, and all pending
  checkpoints are consistent (each was proven consistent with the one before), so the
  copy is the log's whatever mix of concurrent uploads wrote it;
- the mirror cosigns a checkpoint only after every entry it covers is durable (a sync
  of the store) and the stored tree's root equals the checkpoint's, and persists the
  cosigned checkpoint before the cosignature leaves this module;
- it never cosigns two roots for one size, and never moves its checkpoint back.

Every write (pending checkpoint, entries, mirror checkpoint) runs in one writer thread,
in order, so the checks and the writes that depend on them are atomic per log without
locks; the event loop only reads and parses the request bodies. No aiohttp here.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from tlog.errors import (
    Conflict,
    ConsistencyProofError,
    ForkError,
    FormatError,
    InvalidInput,
    NotFound,
    OAPError,
    VerificationError,
)
from tlog.formats.checkpoint import parse_checkpoint
from tlog.formats.hashing import EMPTY_ROOT, leaf_hashes
from tlog.formats.keys import MLDSACosigner, Verifier
from tlog.formats.mirror import MAX_HEADER, Header, MirrorInfo, Package, package_ranges, parse_header, scan_package
from tlog.formats.note import Note, NoteSignature, parse_note
from tlog.merkle.subtrees import verify_subtree_consistency
from tlog.merkle.tree import root_of_leaves
from tlog.merkle.verify import verify_consistency

from ..core import (
    MAX_BODY,
    SizeConflict,
    checked_add_checkpoint,
    log_signatures,
    parse_add_checkpoint,
    sign_subtree,
)
from .config import MirroredLog
from .store import Checkpointed, MirrorStore
from .tickets import TicketKey

log = logging.getLogger("oap.mirror")


class Cosigner(Protocol):
    """A mirror key: `tlog.formats.keys.CosignatureSigner` (Ed25519, cosignature/v1) or
    `MLDSACosigner` (ML-DSA-44, subtree/v1; it also signs subtrees)."""

    name: str
    key_id: bytes

    @property
    def vkey(self) -> str: ...

    @property
    def verifier(self) -> Verifier: ...

    def cosign(self, checkpoint_text: str, timestamp: int) -> bytes: ...


class MirrorConflict(Conflict):
    """409 with a `text/x.tlog.mirror-info` body: a pending size to use, the next entry, a ticket."""

    def __init__(self, message: str, info: MirrorInfo) -> None:
        super().__init__(message)
        self.info = info


class NoPending(VerificationError):
    """422: the mirror never received a pending checkpoint signed by this log."""


class BodyEnded(Exception):
    """Raised by a body reader when the body stops early (timeout, reset, bad compression)."""


@dataclass(frozen=True)
class Uploaded:
    """A successful add-entries: 200 with cosignature lines, or 202 with mirror-info."""

    status: int
    body: bytes
    stored: int  # entries stored by this request
    received: int  # entries in the packages it authenticated


@dataclass
class Counters:
    """What add-entries did, for the metrics (`witness.mirror.metrics`)."""

    received: int = 0  # entries in authenticated packages
    stored: int = 0  # of those, entries that were new
    refused_packages: int = 0  # packages whose proof failed


class _Body:
    """A request body read a chunk at a time into one buffer that holds at most the header or
    one package (and one chunk): memory stays bounded whatever the body's size."""

    def __init__(self, read: Callable[[], Awaitable[bytes]], deadline: float) -> None:
        self._read, self.deadline = read, deadline
        self.buf = bytearray()
        self.pos = 0
        self.eof = False
        self.why = ""  # why the body ended early, if a reader said

    async def more(self) -> bool:
        if self.eof:
            return False
        try:
            if time.monotonic() > self.deadline:
                raise BodyEnded("the upload took longer than the mirror allows")
            chunk = await self._read()
        except BodyEnded as e:
            self.why = str(e)
            chunk = b""
        if not chunk:
            self.eof = True
            return False
        if self.pos:
            del self.buf[:self.pos]
            self.pos = 0
        self.buf += chunk
        return True

    async def header(self) -> Header | None:
        while (got := parse_header(self.buf)) is None:
            if len(self.buf) > MAX_HEADER or not await self.more():
                return None
        h, self.pos = got
        return h

    async def package(self, count: int) -> Package | None:
        while (got := scan_package(self.buf, self.pos, count)) is None:
            if not await self.more():
                return None
        pkg, self.pos = got
        return pkg


class Mirror:
    """Keeps copies of configured logs and cosigns what it stored (one per process)."""

    def __init__(self, cosigners: Sequence[Cosigner], logs: Iterable[MirroredLog], store: MirrorStore,
                 tickets: TicketKey, *, clock: Callable[[], float] = time.time, max_excess: int = 2048,
                 upload_timeout: float = 300.0, observe: Callable[[str, int, int], None] | None = None,
                 on_commit: Callable[[str, Checkpointed], None] | None = None) -> None:
        if not cosigners:
            raise ValueError("a mirror needs at least one cosigning key")
        self.cosigners = tuple(cosigners)
        self.store, self.tickets, self.clock = store, tickets, clock
        self.max_excess, self.upload_timeout = max_excess, upload_timeout
        self.logs: dict[str, MirroredLog] = {}
        self._verifiers: dict[str, tuple] = {}
        for lg in logs:
            if lg.origin in self.logs:
                raise ValueError(f"origin {lg.origin!r} configured twice")
            self.logs[lg.origin] = lg
            self._verifiers[lg.origin] = lg.verifiers
        self.counters = Counters()
        self.observe = observe  # (origin, entries received, entries stored) after each add-entries
        self.on_commit = on_commit  # (origin, the new mirror checkpoint) once it is persisted: publication
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oap-mirror-writer")
        # Entries known durable per log (a store sync covered them): what 202 and 409 report.
        self._durable = {o: store.record(o).next_entry for o in self.logs}

    def set_keys(self, logs: Iterable[MirroredLog]) -> list[str]:
        """Follow new keys of the logs this mirror keeps (SIGHUP: a log's key rotation, docs/
        architecture.md §3.9); one assignment, so a request sees the old keys or the new. A
        log not kept yet needs a restart (its copy is opened at start): the origins skipped."""
        table, verifiers, skipped = dict(self.logs), dict(self._verifiers), []
        for lg in logs:
            if lg.origin not in self.logs:
                skipped.append(lg.origin)
                continue
            table[lg.origin], verifiers[lg.origin] = lg, lg.verifiers
        self.logs, self._verifiers = table, verifiers
        return skipped

    def close(self) -> None:
        self._writer.shutdown(wait=True)
        self.store.close()

    async def _write(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._writer, fn, *args)

    # --- sign-subtree (optional in tlog-mirror: offered with an ML-DSA-44 key) -------------

    @property
    def subtree_signers(self) -> tuple[MLDSACosigner, ...]:
        return tuple(c for c in self.cosigners if isinstance(c, MLDSACosigner))

    async def sign_subtree(self, body: bytes, *, max_body: int = MAX_BODY) -> str:
        """POST sign-subtree, "handled identically to that of a witness" (C2SP tlog-mirror): a
        checkpoint carrying a cosignature of this mirror's keys (never a witness's) and a
        subtree consistency proof give subtree/v1 cosignatures (timestamp 0) by its ML-DSA-44 keys."""
        return await sign_subtree(body, self.logs, self.cosigners, "mirror", max_body=max_body)  # type: ignore[arg-type]

    # --- add-checkpoint: the pending checkpoint -------------------------------------------

    async def add_checkpoint(self, body: bytes, *, max_body: int = MAX_BODY) -> Checkpointed:
        """POST add-checkpoint: verify as a witness does, then move the pending checkpoint."""
        req = parse_add_checkpoint(body, max_body=max_body)
        cp = req.checkpoint
        verifiers = self._verifiers.get(cp.origin)
        if verifiers is None:
            raise NotFound(f"unknown log origin {cp.origin!r}")
        log_sigs = checked_add_checkpoint(req, verifiers)
        new = Checkpointed(cp.size, cp.root, str(Note(req.note.text, log_sigs)))
        return await self._write(self._set_pending, cp.origin, req.old, req.proof, new)

    def _set_pending(self, origin: str, old: int, proof: tuple[bytes, ...], new: Checkpointed) -> Checkpointed:
        """Writer thread: check `old` against the pending checkpoint, prove consistency, persist."""
        rec = self.store.record(origin)
        known = rec.pending.size if rec.pending is not None else 0
        if old != known:
            raise SizeConflict(known)
        old_root = rec.pending.root if rec.pending is not None else EMPTY_ROOT
        verify_consistency(old, new.size, old_root, new.root, proof)  # 422 on failure
        self.store.set_pending(origin, new)
        return new

    # --- add-entries ----------------------------------------------------------------------

    async def add_entries(self, read: Callable[[], Awaitable[bytes]]) -> Uploaded:
        """POST add-entries over a body `read` a chunk at a time (b"" at its end)."""
        body = _Body(read, time.monotonic() + self.upload_timeout)
        h = await body.header()
        if h is None:
            raise InvalidInput("the body ended inside the add-entries header" + (f": {body.why}" if body.why else ""))
        verifiers = self._verifiers.get(h.origin)
        if verifiers is None:
            raise NotFound(f"unknown log origin {h.origin!r}")
        rec = self.store.record(h.origin)
        if rec.pending is None:
            raise NoPending(f"the mirror has no pending checkpoint of log {h.origin!r} yet: add-checkpoint first")
        cp = await self._resolve(h, rec.pending, rec.mirror, verifiers)
        if cp is None:
            raise await self._conflict(h.origin, None, f"upload_end {h.end} is not a pending checkpoint size this "
                                                       "mirror knows")
        if rec.mirror is not None and h.end < rec.mirror.size:
            raise await self._conflict(h.origin, None, f"upload_end {h.end} is below the mirror checkpoint "
                                                       f"{rec.mirror.size}")
        nxt = self.store.record(h.origin).next_entry
        if h.start > nxt:
            raise await self._conflict(h.origin, cp, f"upload_start {h.start} is past the next entry {nxt}")
        if min(h.end, nxt) - h.start > self.max_excess:
            raise await self._conflict(h.origin, cp, f"upload_start {h.start} resends more than {self.max_excess} "
                                                     f"entries below the next entry {nxt}")
        received = stored = 0
        first = True  # no package stored yet
        complete = True
        # One package is applied by the writer while the next one is read and parsed here;
        # the next is handed over only once the one before was stored (or refused).
        loop = asyncio.get_running_loop()
        inflight: asyncio.Future | None = None
        inflight_n = 0
        try:
            for i, (sub_start, start, end) in enumerate(package_ranges(h.start, h.end)):
                try:
                    pkg = await body.package(end - start)
                except FormatError:
                    if i == 0:
                        raise
                    pkg = None
                if inflight is not None:
                    done, inflight = inflight, None
                    stored += await done
                    received += inflight_n
                    first = False
                if pkg is None:
                    complete = False
                    break
                inflight = loop.run_in_executor(self._writer, self._apply, h.origin, cp, sub_start, start, end, pkg)
                inflight_n = end - start
            if inflight is not None:
                done, inflight = inflight, None
                stored += await done
                received += inflight_n
                first = False
        finally:
            if inflight is not None:  # something else failed: the package handed over still counts
                try:
                    stored += await inflight
                    received += inflight_n
                except Exception:  # noqa: BLE001 - the first failure is the one reported
                    pass
            self.counters.received += received
            self.counters.stored += stored
            if self.observe is not None:
                self.observe(h.origin, received, stored)
        if not complete:
            if first:
                raise InvalidInput("the body ended before the first entry package was complete"
                                   + (f": {body.why}" if body.why else ""))
            nxt = await self._durable_next(h.origin)
            info = self._info(h.origin, cp if nxt <= cp.size else None, nxt)
            return Uploaded(202, info.encode(), stored, received)
        # Bytes after the last package are not read (tlog-mirror: "the mirror discards any
        # partial bytes after the last successfully authenticated entry package").
        try:
            lines = await self._write(self._commit, h.origin, cp)
        except MirrorConflict as e:
            raise await self._conflict(h.origin, None, e.message) from None
        return Uploaded(200, lines.encode(), stored, received)

    async def _resolve(self, h: Header, pending: Checkpointed, mirror: Checkpointed | None,
                       verifiers: tuple) -> Checkpointed | None:
        """The checkpoint of size upload_end: the pending one, the mirror checkpoint, a past
        pending one still kept, or the one a valid ticket carries."""
        if h.end == pending.size:
            return pending
        if mirror is not None and h.end == mirror.size:
            return Checkpointed(mirror.size, mirror.root, _log_note(mirror.note, verifiers))
        past = await asyncio.to_thread(self.store.pending_at, h.origin, h.end)
        if past is not None:
            return past
        if h.ticket:
            note = self.tickets.open(h.origin, h.ticket)
            if note is not None:
                try:
                    parsed = parse_note(note)
                    log_signatures(parsed, verifiers, h.origin)
                    cp = parse_checkpoint(parsed.text)
                except OAPError:
                    return None
                if cp.origin == h.origin and cp.size == h.end:
                    return Checkpointed(cp.size, cp.root, note.decode())
        return None

    def _apply(self, origin: str, cp: Checkpointed, sub_start: int, start: int, end: int, pkg: Package) -> int:
        """Writer thread: authenticate one package against `cp`, store its new entries;
        returns how many were new."""
        store = self.store
        nxt = store.record(origin).next_entry
        if start > nxt:  # cannot happen: uploads start at or below the next entry, which only grows
            raise RuntimeError(f"{origin}: package [{start}, {end}) leaves a gap after the next entry {nxt}")
        ents = store.entries(origin, sub_start, start - sub_start) + pkg.entries if start > sub_start else pkg.entries
        leaves = leaf_hashes(ents)
        try:
            verify_subtree_consistency(sub_start, end, cp.size, pkg.proof, root_of_leaves(leaves), cp.root)
        except ConsistencyProofError as e:
            self.counters.refused_packages += 1
            raise VerificationError(f"entry package [{start}, {end}): {e.message}") from None
        if end <= nxt:
            return 0
        skip = nxt - start  # entries of this package already stored
        blob = pkg.blob
        if skip:
            off = sum(2 + len(e) for e in pkg.entries[:skip])
            blob = blob[off:]
        store.append(origin, nxt, blob, leaves[nxt - sub_start:].tobytes())
        return end - nxt

    def _sync(self) -> None:
        """Writer thread: make every stored entry durable, and remember how far that is."""
        upto = {o: self.store.record(o).next_entry for o in self.logs}
        self.store.sync()
        self._durable.update(upto)

    async def _durable_next(self, origin: str) -> int:
        if self._durable.get(origin, 0) < self.store.record(origin).next_entry:
            await self._write(self._sync)
        return self._durable.get(origin, 0)

    def _commit(self, origin: str, cp: Checkpointed) -> str:
        """Writer thread: every entry below cp.size is stored; make them durable, check the
        stored tree, cosign, persist the cosigned checkpoint; return the cosignature lines."""
        store = self.store
        rec = store.record(origin)
        if rec.mirror is not None and cp.size < rec.mirror.size:
            raise MirrorConflict(f"the mirror checkpoint moved past {cp.size} to {rec.mirror.size}",
                                 MirrorInfo(0, 0))
        if rec.next_entry < cp.size:
            raise RuntimeError(f"{origin}: asked to commit {cp.size} with {rec.next_entry} entries stored")
        stored = {o: store.record(o).next_entry for o in self.logs}
        root = store.root(origin, cp.size)
        if root != cp.root:
            log.error("%s: the stored hashes do not give the root of size %d; recomputing them", origin, cp.size)
            store.rebuild_hashes(origin)
            if store.root(origin, cp.size) != cp.root:
                raise ForkError(f"{origin}: the stored entries do not hash to the checkpoint root of size {cp.size}")
        if rec.mirror is not None and rec.mirror.size == cp.size and rec.mirror.root != cp.root:
            raise ForkError(f"{origin}: refusing to cosign a second root for size {cp.size}")
        note = parse_note(cp.note)
        ts = int(self.clock())
        if rec.mirror is not None:
            ts = max(ts, rec.mirror.cosigned_at)  # cosignature timestamps never decrease per log
        sigs = tuple(NoteSignature(c.name, c.key_id, c.cosign(note.text, ts)) for c in self.cosigners)
        log_sigs = tuple(s for s in note.signatures if (s.name, s.key_id) not in
                         {(c.name, c.key_id) for c in self.cosigners})
        new = Checkpointed(cp.size, cp.root, str(Note(note.text, log_sigs + sigs)), ts)
        store.commit(origin, new)  # durable, and so is every entry stored before it (the contract)
        self._durable.update(stored)
        if self.on_commit is not None:
            self.on_commit(origin, new)
        return "".join(s.line() for s in sigs)

    # --- mirror-info ---------------------------------------------------------------------

    def _info(self, origin: str, cp: Checkpointed | None, nxt: int) -> MirrorInfo:
        """mirror-info naming `cp` (a valid upload_end the client gave) or, when it is None or
        the next entry is already past it, the current pending checkpoint."""
        if cp is None or nxt > cp.size:
            pending = self.store.record(origin).pending
            assert pending is not None
            cp = pending
        return MirrorInfo(cp.size, nxt, self.tickets.seal(origin, cp.note.encode()))

    async def _conflict(self, origin: str, cp: Checkpointed | None, why: str) -> MirrorConflict:
        nxt = await self._durable_next(origin)
        return MirrorConflict(why, self._info(origin, cp, nxt))

    # --- reads -----------------------------------------------------------------------------

    def checkpoint(self, origin: str) -> Checkpointed | None:
        """The mirror checkpoint (with its cosignatures), what the monitoring prefix serves."""
        return self.store.record(origin).mirror


def _log_note(note: str, verifiers: tuple) -> str:
    """A mirror checkpoint's note without the mirror's own cosignatures (the log's signatures only)."""
    parsed = parse_note(note)
    keep = tuple(s for s in parsed.signatures if any(s.name == v.name and s.key_id == v.key_id for v in verifiers))
    return str(Note(parsed.text, keep))

