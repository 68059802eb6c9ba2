"""Watching one C2SP tlog-tiles log: its tree, every entry once, and every view of it others serve.

A pass over a log (docs/architecture.md §8):

1. **The checkpoint.** The log's checkpoint must carry the log's signature (else it is
   refused: `log_invalid`). Before anything else it is compared with the verified view
   kept in the state: the same size with another root, or a larger tree whose tiles do not
   prove the view's root at the view's size, is a **split view**, kept as evidence. It
   moves the view only if it also meets the policy's witness quorum and its tiles hash to
   its root.
2. **The entries.** Every entry from where reading stopped is read once from the entry
   bundles, its leaf hash recomputed, the full hash tiles the log serves compared with the
   hashes computed from the entries (level 0, and each higher level as it completes), and
   the entry parsed for who signed it and whom it names (`tlog.formats.parties`). Reading
   is committed a chunk at a time, each chunk proven to be a prefix of the checkpoint's
   tree (an RFC 9162 consistency proof from the log's tiles, checked against the root the
   entries make), together with the alerts of the entries it covers: an entry signed by,
   or naming, a watched identity, that no journal lists, with a `.tlog-proof` against the
   checkpoint that `oap-log verify` accepts.
3. **Other views.** The checkpoint each witness serves on its read API
   (`<prefix>/<hex sha256(origin)>/checkpoint`, C2SP tlog-witness), each mirror on its
   monitoring prefix, and every checkpoint the registry's anchors carry, signed by the log:
   one of a size the view holds must have the root the tiles give for that size, else it is a
   split view; a larger one is kept and compared when the view reaches it.
4. **Rescans** of the entries already read, for identities added to the watch list since.

The log is untrusted throughout: every answer is bounded (`monitor.fetch`), tile data counts
only once it hashes to a signed root, and whatever it serves ends in a reason, never a crash.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from tlog.client.splitview import SplitView, log_signed
from tlog.client.tilereader import TileTree, with_tiles
from tlog.client.verifier import TrustPolicy
from tlog.errors import ConsistencyProofError, OAPError, VerificationError
from tlog.formats.checkpoint import Checkpoint
from tlog.formats.hashing import HASH_SIZE
from tlog.formats.journal import anchored_key
from tlog.formats.note import MAX_NOTE_SIZE
from tlog.formats.parties import Parties
from tlog.formats.proofbundle import ProofBundle
from tlog.formats.tiles import TILE_WIDTH
from tlog.merkle.tree import TreeView
from tlog.merkle.verify import verify_consistency

from . import alerts
from .config import LogWatch
from .context import Context
from .fetch import Invalid, NotServed, PeerError, TileReader, Unreachable, get
from .state import Ahead, NewAlert, Rescan, View
from .tree import TreeCursor

log = logging.getLogger("oap.monitor")

CHUNK = 1 << 16
"""Entries read between two commits of the state (each proven a prefix of the checkpoint's tree)."""
CHUNK_SECONDS = 5.0
"""... or this long, whichever comes first: a restart rereads little."""


@dataclass
class PassResult:
    source: str
    ok: bool  # False: could not check (unreachable, invalid data)
    alerts: list[str] = field(default_factory=list)
    detail: str = ""


@dataclass
class Target:
    """A signed checkpoint whose tree the entries are read into, and its tiles from the log."""

    size: int
    root: bytes
    note: str
    tree: TileTree


@dataclass
class Found:
    index: int
    entry: bytes
    leaf: bytes
    parties: Parties
    matched: list[str]


class LogWatcher:
    def __init__(self, cfg: LogWatch, ctx: Context) -> None:
        self.cfg, self.ctx = cfg, ctx
        self.policy = TrustPolicy.from_text(cfg.policy.read_text())
        one = self.policy.policy.log_count == 1  # one log (several keys of it during a key rotation)
        if not one and not cfg.name:
            raise OAPError(f"{cfg.policy}: the policy names {self.policy.policy.log_count} logs: give the log a name")
        self.origin = self.policy.logs[0].name if one else ""
        self.name = cfg.name or self.origin
        self.reader = TileReader(ctx.session, cfg.url, ctx.timeout)
        witnesses = cfg.witnesses if cfg.witnesses is not None else tuple(
            w.url for w in self.policy.policy.witnesses.values() if w.url and not w.mirror)
        mirrors = cfg.mirrors if cfg.mirrors is not None else tuple(
            w.url for w in self.policy.policy.witnesses.values() if w.url and w.mirror)
        self.prefixes = tuple(dict.fromkeys(u.rstrip("/") for u in (*witnesses, *mirrors)))
        self.largest = 0  # the largest size of a signed checkpoint seen (from anyone)
        self.target: Target | None = None  # the view's tree, as of the last pass

    @property
    def source(self) -> dict[str, str]:
        return {"log": self.name, "origin": self.origin, "url": self.cfg.url}

    # --- a pass ---------------------------------------------------------------------------

    async def run_pass(self, watched: frozenset[str]) -> PassResult:
        """One pass; never raises for what a peer did (the result and the incidents say)."""
        m, ctx = self.ctx.metrics, self.ctx
        started = time.monotonic()
        raised: list[str] = []
        try:
            raised = await self._pass(watched)
        except Unreachable as e:
            m.passes.labels(self.name, "unreachable").inc()
            ctx.cleared("log_invalid", self.name)
            ids = ctx.problem("log_unreachable", self.name, self.source, f"the log {self.name} is unreachable",
                              e.message, ctx.unreachable_after)
            log.warning("%s: %s", self.name, e.message)
            return PassResult(self.name, False, ids, e.message)
        except (Invalid, OAPError) as e:
            m.passes.labels(self.name, "invalid").inc()
            ctx.cleared("log_unreachable", self.name)
            ids = ctx.problem("log_invalid", self.name, self.source, f"the log {self.name} serves invalid data",
                              e.message, ctx.unreachable_after)
            log.error("%s: %s", self.name, e.message)
            return PassResult(self.name, False, ids, e.message)
        finally:
            m.pass_seconds.labels(self.name).observe(time.monotonic() - started)
        m.passes.labels(self.name, "ok").inc()
        m.last_ok.labels(self.name).set(time.time())
        ctx.cleared("log_unreachable", self.name)
        ctx.cleared("log_invalid", self.name)
        raised += self._behind()
        v = self.ctx.state.view(self.name)
        detail = f"verified size {v.size}, {v.read} entries read" if v is not None else ""
        return PassResult(self.name, True, raised, detail)

    async def _pass(self, watched: frozenset[str]) -> list[str]:
        raised: list[str] = []
        note = _text(await self.reader.checkpoint(), f"{self.cfg.url}/checkpoint")
        cp = self._log_signed(note, f"{self.cfg.url}/checkpoint")
        if not self.origin:
            self.origin = cp.origin
        self._seen(cp.size)
        view = self.ctx.state.view(self.name)
        target: Target | None = None
        if view is None or cp.size > view.size:
            target = Target(cp.size, cp.root, note, TileTree(cp.size))
            await self._check_tiles(target)
            if view is not None:
                raised += await self._check_extends(view, target)
                if raised:
                    return raised  # a split view: the view does not move
            try:
                self.policy.verify_checkpoint(note)
            except OAPError as e:
                raise Invalid(f"{self.cfg.url}/checkpoint: refused by the policy: {e.message}") from None
            view = self._moved(view, target)
        elif cp.size == view.size:
            if cp.root != view.root:
                raised += self._split(SplitView(note, view.note, sources=(f"{self.cfg.url}/checkpoint", "state")),
                                      "the log now serves another root for the size of the verified view")
                return raised
        else:
            raised += await self._check_older(view, note, cp)
        if target is None:
            target = Target(view.size, view.root, view.note, TileTree(view.size))
        self.target = target
        if self.cfg.entries and view.read < view.size:
            raised += await self._read_view(view, target, watched)
        raised += await self._other_views(target)
        raised += await self._rescans()
        return raised

    def _log_signed(self, note: str, where: str) -> Checkpoint:
        """The checkpoint of a note the log signed (its witness quorum is checked apart)."""
        try:
            cp = log_signed(note, self.policy)
        except VerificationError as e:
            raise Invalid(f"{where}: {e.message}") from None
        if self.origin and cp.origin != self.origin:
            raise Invalid(f"{where}: the checkpoint's origin {cp.origin!r} is not the log's")
        return cp

    def _seen(self, size: int) -> None:
        if size > self.largest:
            self.largest = size
            self.ctx.metrics.checkpoint_size.labels(self.name).set(size)

    async def _check_tiles(self, target: Target) -> None:
        """The log's tiles for the checkpoint must hash to its root (they are read for proofs)."""
        if target.size and await self._compute(target, lambda t: TreeView(target.size, t.complete).root) != target.root:
            raise Invalid(f"the log's tiles do not hash to the root of its checkpoint of size {target.size}")

    async def _compute(self, target: Target, fn):
        try:
            return await with_tiles(target.tree, self.reader.tile_at, fn)
        except ValueError as e:  # TileTree: a tile of the wrong length (the reader checks it first)
            raise Invalid(f"{self.cfg.url}: {e}") from None

    async def _check_extends(self, view: View, target: Target) -> list[str]:
        """The new checkpoint's tree must hold the view's root at the view's size."""
        if view.size == 0:
            return []
        proof = await self._compute(target, lambda t: TreeView(target.size, t.complete).consistency_proof(view.size))
        try:
            verify_consistency(view.size, target.size, view.root, target.root, proof)
            return []
        except ConsistencyProofError:
            pass
        root_then = await self._compute(target, lambda t: TreeView(view.size, t.complete).root)
        return self._split(SplitView(target.note, view.note, tuple(proof), root_then,
                                     (f"{self.cfg.url}/checkpoint", "state")),
                           "the log's new checkpoint does not extend the verified view")

    async def _check_older(self, view: View, note: str, cp: Checkpoint) -> list[str]:
        """The log serves a smaller checkpoint than the view: stale (a cache), or a fork."""
        old = Target(view.size, view.root, view.note, TileTree(view.size))
        try:
            await self._check_tiles(old)
        except (Invalid, NotServed):
            raise Invalid(f"the log serves a checkpoint of size {cp.size}, older than the {view.size} it served "
                          "before, and no longer the tiles of that tree") from None
        raised = await self._compare(old, note, cp, f"{self.cfg.url}/checkpoint")
        if not raised:
            log.info("%s: the log serves an older checkpoint (size %d, the view is at %d)", self.name, cp.size,
                     view.size)
        return raised

    def _moved(self, view: View | None, target: Target) -> View:
        """The view moves to the target (its entries may still be read)."""
        read, partial = (view.read, view.partial) if view is not None else (0, b"")
        new = View(self.name, self.origin, target.size, target.root, target.note, read, partial, time.time())
        self.ctx.state.advance(new)
        self.ctx.metrics.verified_size.labels(self.name).set(target.size)
        return new

    # --- entries --------------------------------------------------------------------------

    async def _read_view(self, view: View, target: Target, watched: frozenset[str]) -> list[str]:
        cursor = TreeCursor(view.read, view.partial)
        raised: list[str] = []

        async def commit(found: list[Found], done: bool) -> None:
            new = await self._entry_alerts(found, target)
            v = View(self.name, self.origin, target.size, target.root, target.note, cursor.size,
                     cursor.partial_bytes(), time.time())
            ids = self.ctx.state.advance(v, new, self.ctx.targets())
            self.ctx.raised(ids)
            raised.extend(ids)
            self.ctx.metrics.entries_read.labels(self.name).set(cursor.size)

        await self._scan(cursor, target, watched, commit, verify_tiles=True)
        return raised

    async def _scan(self, cursor: TreeCursor, target: Target, watched: frozenset[str],
                    commit: Callable[[list[Found], bool], Awaitable[None]], *, verify_tiles: bool) -> None:
        """Read entries [cursor.size, target.size) into `cursor`, committing a chunk at a time."""
        end = target.size
        first, last = cursor.size // TILE_WIDTH, (end - 1) // TILE_WIDTH
        counts: Counter[str] = Counter()
        found: list[Found] = []
        checks: list[asyncio.Task] = []
        window = self.ctx.window
        tasks: dict[int, tuple[asyncio.Task, asyncio.Task | None]] = {}
        last_commit, last_time = cursor.size, time.monotonic()

        def fetch(n: int) -> tuple[asyncio.Task, asyncio.Task | None]:
            width = min(TILE_WIDTH, end - n * TILE_WIDTH)
            tile = asyncio.ensure_future(self.reader.tile(0, n)) if verify_tiles and width == TILE_WIDTH else None
            return asyncio.ensure_future(self.reader.entries(n, width)), tile

        try:
            for n in range(first, last + 1):
                for j in range(n, min(last + 1, n + window)):
                    if j not in tasks:
                        tasks[j] = fetch(j)
                bundle_task, tile_task = tasks.pop(n)
                bundle = await bundle_task
                tile = await tile_task if tile_task is not None else None
                leaves = bundle.leaves
                skip = cursor.size - n * TILE_WIDTH
                if skip and leaves[:skip * HASH_SIZE] != cursor.leaves_in_tile():
                    raise Invalid(f"entries {n * TILE_WIDTH}..{cursor.size - 1} are not the ones the log served "
                                  "before (their leaf hashes changed)")
                if tile is not None and tile != leaves:
                    raise Invalid(f"{self.cfg.url}: hash tile 0/{n} does not match the leaf hashes of entry bundle "
                                  f"{n}")
                for level, index, data in cursor.add(leaves[skip * HASH_SIZE:]):
                    if verify_tiles and level:
                        checks.append(asyncio.ensure_future(self._check_tile(level, index, data)))
                if tile is not None:
                    self.ctx.metrics.tiles_checked.labels(self.name).inc()
                named = [(k, p) for k, p in bundle.named if k >= skip] if skip else bundle.named
                counts["commitment"] += bundle.width - skip - len(named)
                for k, p in named:
                    counts[p.kind] += 1
                    if watched and (p.signer in watched or (p.names and not watched.isdisjoint(p.names))):
                        matched = [d for d in p.everyone if d in watched]
                        found.append(Found(n * TILE_WIDTH + k, bundle.entry(k),
                                           leaves[k * HASH_SIZE:(k + 1) * HASH_SIZE], p, matched))
                done = cursor.size == end
                if done or cursor.size - last_commit >= CHUNK or time.monotonic() - last_time >= CHUNK_SECONDS:
                    for t in checks:
                        await t
                    checks.clear()
                    await self._prove_prefix(cursor, target)
                    for kind, c in counts.items():
                        self.ctx.metrics.entries.labels(self.name, kind).inc(c)
                    counts.clear()
                    await commit(found, done)
                    found = []
                    last_commit, last_time = cursor.size, time.monotonic()
        finally:
            _discard([*(x for pair in tasks.values() for x in pair if x is not None), *checks])

    async def _check_tile(self, level: int, index: int, data: bytes) -> None:
        if await self.reader.tile(level, index) != data:
            raise Invalid(f"{self.cfg.url}: hash tile {level}/{index} does not match the hashes of the entries "
                          "below it")
        self.ctx.metrics.tiles_checked.labels(self.name).inc()

    async def _prove_prefix(self, cursor: TreeCursor, target: Target) -> None:
        """The entries read so far make a prefix of the target's tree (or the whole of it)."""
        root = cursor.root()
        if cursor.size == target.size:
            if root != target.root:
                raise Invalid(f"the entries of {self.cfg.url} do not hash to the root of its checkpoint of size "
                              f"{target.size}")
            return
        proof = await self._compute(target, lambda t: TreeView(target.size, t.complete).consistency_proof(cursor.size))
        try:
            verify_consistency(cursor.size, target.size, root, target.root, proof)
        except ConsistencyProofError:
            raise Invalid(f"entries 0..{cursor.size - 1} of {self.cfg.url} are not a prefix of its checkpoint of "
                          f"size {target.size}") from None

    async def _entry_alerts(self, found: list[Found], target: Target) -> list[NewAlert]:
        """The alerts of the watched entries found: those the journals do not list, each with a
        .tlog-proof against the target checkpoint, checked as `oap-log verify` checks it."""
        if not found:
            return []
        self.ctx.refresh_journals()  # after the entries were read: a journal line precedes its entry
        keys = {f.index: anchored_key(f.entry) for f in found}
        known = self.ctx.state.known(keys.values())
        out = []
        evidence = self.ctx.state.evidence
        for f in found:
            if keys[f.index] in known:
                log.info("%s: entry %d is watched and in a journal: not an alert", self.name, f.index)
                continue
            proof = await self._compute(target, lambda t, i=f.index: TreeView(target.size, t.complete)
                                        .inclusion_proof(i))
            bundle = ProofBundle(index=f.index, proof=tuple(proof), checkpoint=target.note, extra=f.entry).to_text()
            try:
                self.policy.verify_bundle(bundle)
            except OAPError as e:
                raise Invalid(f"the inclusion proof of entry {f.index} from the log's tiles does not verify: "
                              f"{e.message}") from None
            out.append(alerts.watched_entry(evidence, self.source, f.index, f.entry, f.leaf, f.parties, f.matched,
                                            bundle, target.size))
        return out

    # --- other views: witnesses, mirrors, anchors -------------------------------------------

    async def _other_views(self, target: Target) -> list[str]:
        raised: list[str] = []
        hexo = hashlib.sha256(self.origin.encode()).hexdigest()
        for prefix in self.prefixes:
            url = f"{prefix}/{hexo}/checkpoint"
            try:
                note = _text(await get(self.ctx.session, url, MAX_NOTE_SIZE, self.ctx.timeout), url)
            except NotServed:
                continue  # this witness has not cosigned the log (yet)
            except PeerError as e:
                self.ctx.metrics.views.labels(self.name, "unreachable").inc()
                log.warning("%s: %s", self.name, e.message)
                continue
            raised += await self.compare(target, note, url)
        for a in self.ctx.state.ahead(self.name):
            if a.size <= target.size:
                raised += await self.compare(target, a.note, a.source)
                self.ctx.state.settle_ahead(self.name, a.size, a.root)
        return raised

    async def compare_found(self, note: str, where: str) -> list[str]:
        """Compare a checkpoint of this log found elsewhere (a registry anchor's) with the view,
        or keep it until the view reaches it (or until the log's tiles can be read)."""
        nothing = Target(0, b"", "", TileTree(0))
        try:
            return await self.compare(self.target or nothing, note, where)
        except PeerError as e:  # the log's tiles cannot be read now: compared on a later pass
            log.warning("%s: %s (the checkpoint from %s is compared later)", self.name, e.message, where)
            return await self.compare(nothing, note, where)

    async def compare(self, target: Target, note: str, where: str) -> list[str]:
        """Compare a checkpoint found elsewhere with the view's tree (`target`); one the log did
        not sign is no evidence of anything (counted, not alerted)."""
        try:
            cp = self._log_signed(note, where)
        except Invalid as e:
            self.ctx.metrics.views.labels(self.name, "unsigned").inc()
            log.warning("%s: %s", self.name, e.message)
            return []
        self._seen(cp.size)
        if cp.size > target.size:
            self.ctx.state.remember_ahead(Ahead(self.name, cp.size, cp.root, note, where, time.time()))
            self.ctx.metrics.views.labels(self.name, "ahead").inc()
            return []
        return await self._compare(target, note, cp, where)

    async def _compare(self, target: Target, note: str, cp: Checkpoint, where: str) -> list[str]:
        if cp.size == target.size:
            if cp.root == target.root:
                self.ctx.metrics.views.labels(self.name, "consistent").inc()
                return []
            return self._split(SplitView(target.note, note, sources=(self.cfg.url, where)),
                               f"{where} serves another root for the size of the log's checkpoint")
        root_then = await self._compute(target, lambda t: TreeView(cp.size, t.complete).root) if cp.size else cp.root
        if root_then == cp.root:
            self.ctx.metrics.views.labels(self.name, "consistent").inc()
            return []
        proof = await self._compute(target, lambda t: TreeView(target.size, t.complete).consistency_proof(cp.size))
        return self._split(SplitView(target.note, note, tuple(proof), root_then, (self.cfg.url, where)),
                           f"{where} serves a checkpoint that is not a prefix of the log's tree")

    def _split(self, split: SplitView, detail: str) -> list[str]:
        self.ctx.metrics.views.labels(self.name, "split").inc()
        log.error("%s: SPLIT VIEW: %s", self.name, detail)
        return self.ctx.raise_alerts([alerts.split_view(self.ctx.state.evidence, self.source, split, detail)])

    # --- rescans ----------------------------------------------------------------------------

    async def _rescans(self) -> list[str]:
        if not self.cfg.entries:
            return []
        raised: list[str] = []
        for r in self.ctx.state.rescans(self.name):
            raised += await self._rescan(r)
        return raised

    async def _rescan(self, r: Rescan) -> list[str]:
        raised: list[str] = []
        if r.size == 0:
            self.ctx.state.rescan_progress(r, 0, b"", [], ())
            return raised
        target = Target(r.size, r.root, r.note, TileTree(r.size))
        cursor = TreeCursor(r.next, r.partial)

        async def commit(found: list[Found], done: bool) -> None:
            new = await self._entry_alerts(found, target)
            ids = self.ctx.state.rescan_progress(r, cursor.size, cursor.partial_bytes(), new, self.ctx.targets())
            self.ctx.raised(ids)
            raised.extend(ids)

        log.info("%s: reading entries %d..%d again for %d newly watched identities", self.name, r.next, r.size - 1,
                 len(r.dids))
        await self._scan(cursor, target, r.dids, commit, verify_tiles=False)
        return raised

    # --- behind -----------------------------------------------------------------------------

    def _behind(self) -> list[str]:
        view = self.ctx.state.view(self.name)
        done = (view.read if self.cfg.entries else view.size) if view is not None else 0
        if done >= self.largest:
            self.ctx.cleared("log_behind", self.name)
            return []
        what = f"the monitor's view of {self.name} is behind"
        reason = f"{done} entries verified; a checkpoint of size {self.largest} was seen"
        return self.ctx.problem("log_behind", self.name, self.source, what, reason, self.ctx.behind_after)


def _discard(tasks: list[asyncio.Task]) -> None:
    """Cancel what was read ahead and is no longer needed; the failures of those that ended
    are the log's (already reported by the one awaited), not news."""
    for t in tasks:
        if t.done():
            if not t.cancelled():
                t.exception()
        else:
            t.cancel()


def _text(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Invalid(f"{where}: not UTF-8 text") from None

