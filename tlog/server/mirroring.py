"""The log pushes its checkpoints and entries to its mirrors (C2SP tlog-mirror; docs/architecture.md §3.4).

Mirrors are `mirror` lines of the log's policy (`witness_policy`, with their URLs) or
`[[log.mirrors]]`. Each has one worker here that chases a *goal*, the latest checkpoint
offered to it, with `tlog.http.mirrorclient.MirrorClient` (add-checkpoint, then
streamed gzip add-entries from the mirror's next entry, resuming on 202 and 409), reading
the entries and the subtree consistency proofs from the log's own store (`LocalSource`).
A newer goal replaces an older one not yet started, as Tessera's mirror gateway does. A
push that fails is retried with backoff, from wherever the mirror stands.

How a mirror's cosignature reaches the served checkpoint depends on the policy:

- a mirror the quorum counts (it is a member, directly or through groups) is waited for
  like a witness (`tlog.server.witnessing.WitnessSet.cosign`): the checkpoint is offered
  to it when it is signed, and served once the quorum, which may need the mirror's
  cosignature, is met or the push fails or times out;
- any other mirror is offered each checkpoint once it is published, and never holds up a
  write: its cosignature, when it comes, is merged into the served checkpoint if that is
  still the tree it cosigned (`Appender.add_cosignatures`), else dropped.

Every cosignature is verified with the mirror's keys from the policy before it is used; a
mirror that answers anything else, or nothing, changes nothing the log serves.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field

from tlog.errors import FormatError, OAPError
from tlog.formats.keys import Verifier, cosigner_verifier, parse_vkey
from tlog.formats.mirror import encode_package
from tlog.formats.note import NoteSignature, check_cosignature_lines, parse_note
from tlog.formats.policy import Policy
from tlog.formats.tiles import parse_entry_bundle
from tlog.http.mirrorclient import FetchError, MirrorClient, Refused, prefetched
from tlog.merkle.subtrees import subtree_consistency_proof, subtree_root
from tlog.storage.interface import EntryReader, HashReader, LogState
from tlog.transport import Outbound

log = logging.getLogger("oap.tlog.mirroring")

RETRY_MIN, RETRY_MAX = 0.5, 10.0  # seconds between pushes to a mirror after a failure


class LocalSource:
    """One published (or signed) checkpoint of this log as a `PushSource`: the entries from the
    store's entry reader, the proofs from its hash files. Nothing here is fetched from anyone."""

    def __init__(self, origin: str, state: LogState, reader: EntryReader, hashes: HashReader) -> None:
        self.origin, self.state, self.reader, self.hashes = origin, state, reader, hashes
        self.size, self.note = state.size, state.note

    async def consistency_proof(self, old: int) -> Sequence[bytes]:
        return self.state.view.consistency_proof(old)

    def _mth(self, lo: int, hi: int) -> bytes:
        return subtree_root(lo, hi, self.hashes.read)

    async def packages(self, ranges: list[tuple[int, int, int]]) -> AsyncGenerator[bytes, None]:
        bundles = prefetched(len(ranges), lambda i: self.reader.bundle(ranges[i][0], ranges[i][2] - ranges[i][0]),
                             window=4)
        try:
            i = 0
            async for bundle in bundles:
                sub, first, stop = ranges[i]
                i += 1
                entries = parse_entry_bundle(bundle, stop - sub)
                proof = subtree_consistency_proof(sub, stop, self.size, self._mth)
                yield encode_package(entries[first - sub:], proof)
        finally:
            await bundles.aclose()


@dataclass
class MirrorOutcome:
    """A mirror's answer for one checkpoint, in the shape `WitnessSet.cosign` counts."""

    name: str
    signatures: tuple[NoteSignature, ...] = ()
    names: tuple[str, ...] = ()  # the policy names whose key cosigned
    error: str | None = None
    seconds: float = 0.0
    beyond: int | None = None  # the mirror holds a pending checkpoint of this larger size of our log

    @property
    def signature(self) -> NoteSignature | None:
        return self.signatures[0] if self.signatures else None


@dataclass
class MirrorTarget:
    """One mirror (one URL): its keys by policy name, its client, what it last cosigned."""

    name: str  # the policy name of its first key
    url: str
    keys: list[tuple[str, Verifier]]
    client: MirrorClient
    gating: bool = False  # the policy's quorum counts its cosignature
    goal: LogState | None = None
    cosigned: tuple[int, bytes, tuple[NoteSignature, ...], tuple[str, ...]] | None = None
    failures: int = 0  # pushes that failed (a metric)
    pushes: int = 0  # pushes that ended in a cosignature (a metric)
    sent: int = 0  # entries the mirror stored from our pushes (a metric)
    last_error: str = ""
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # a goal to chase
    urgent: asyncio.Event = field(default_factory=asyncio.Event)  # a checkpoint waits for it: retry now
    waiters: list[tuple[int, bytes, asyncio.Future]] = field(default_factory=list)

    @property
    def cosigned_size(self) -> int:
        """The size of its last cosignature, -1 before any."""
        return self.cosigned[0] if self.cosigned is not None else -1


def _gating(policy: Policy) -> set[str]:
    """The witness and mirror names the quorum can count, through any groups."""
    if policy.quorum is None:
        return set()
    found, todo = set(), [policy.quorum]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        group = policy.groups.get(name)
        if group is not None:
            todo.extend(group.members)
    return found & set(policy.witnesses)


class MirrorSet:
    """The log's mirrors and their push workers (see the module doc)."""

    def __init__(self, targets: list[MirrorTarget], origin: str, entries: Callable[[], EntryReader],
                 hashes: Callable[[], HashReader]) -> None:
        """`entries` makes an entry reader of the store (opened here when first needed, after the
        store is open); `hashes` gives the store's hash reader."""
        self.targets, self.origin = targets, origin
        self._entries, self._hashes = entries, hashes
        self._reader: EntryReader | None = None
        self._opening = asyncio.Lock()
        self._tasks: list[asyncio.Task] = []
        self._closing = False
        self.on_cosigned: Callable[[int, bytes, tuple[NoteSignature, ...]], None] | None = None
        self.on_beyond: Callable[[str, int], None] | None = None  # (mirror, size it holds beyond ours)
        self.current_size: Callable[[], int] = lambda: 0  # the largest size this log has signed

    @classmethod
    def from_policy(cls, policy: Policy, origin: str, *, entries: Callable[[], EntryReader],
                    hashes: Callable[[], HashReader], timeout: float = 60.0,
                    outbound: Outbound | None = None) -> MirrorSet | None:
        """The mirror lines of `policy` (each with a URL), grouped by URL; None if there are none."""
        gating = _gating(policy)
        by_url: dict[str, MirrorTarget] = {}
        for name, w in policy.witnesses.items():
            if not w.mirror:
                continue
            if not w.url:
                raise FormatError(f"mirror {name!r} has no URL in the log's policy; the log cannot push to it")
            url, v = w.url.rstrip("/"), cosigner_verifier(parse_vkey(w.vkey))
            if url in by_url:  # another key of the same mirror (e.g. its ML-DSA-44 key)
                by_url[url].keys.append((name, v))
                by_url[url].gating |= name in gating
            else:
                client = MirrorClient(url, timeout=timeout, outbound=outbound)
                by_url[url] = MirrorTarget(name, url, [(name, v)], client, gating=name in gating)
        return cls(list(by_url.values()), origin, entries, hashes) if by_url else None

    @property
    def gating(self) -> list[MirrorTarget]:
        return [t for t in self.targets if t.gating]

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._work(t), name=f"tlog-mirror-{t.name}") for t in self.targets]

    async def close(self) -> None:
        self._closing = True
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass
        for target in self.targets:
            self._fail(target, "the log is shutting down", upto=None)
            await target.client.close()
        if self._reader is not None:
            await self._reader.close()
            self._reader = None

    async def _open_reader(self) -> EntryReader:
        async with self._opening:
            if self._reader is None:
                reader = self._entries()
                await reader.open()
                self._reader = reader
            return self._reader

    def offer(self, state: LogState, *, gating_only: bool = False) -> None:
        """Make `state` the goal of every mirror (or of those the quorum counts) that has not
        cosigned it or a larger tree yet."""
        for t in self.targets:
            if gating_only and not t.gating:
                continue
            if t.cosigned_size >= state.size or (t.goal is not None and t.goal.size > state.size):
                continue
            t.goal = state
            t.wake.set()
            if gating_only:
                t.urgent.set()

    async def wait(self, target: MirrorTarget, state: LogState, deadline: float) -> MirrorOutcome:
        """The mirror's cosignature of exactly `state`, or why not by `deadline` (its push
        failed, or time ran out); the push itself goes on in the background either way."""
        t0 = time.perf_counter()
        cs = target.cosigned
        if cs is not None and cs[0] == state.size and cs[1] == state.root:
            return MirrorOutcome(target.name, cs[2], cs[3])
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        item = (state.size, state.root, future)
        target.waiters.append(item)
        try:
            async with asyncio.timeout(max(0.0, deadline - loop.time())):
                return await asyncio.shield(future)
        except TimeoutError:
            return MirrorOutcome(target.name, error="no cosignature before the deadline",
                                 seconds=time.perf_counter() - t0)
        finally:
            if item in target.waiters:
                target.waiters.remove(item)

    # --- the worker of one mirror ----------------------------------------------------------

    async def _work(self, t: MirrorTarget) -> None:
        backoff = RETRY_MIN
        while not self._closing:
            await t.wake.wait()
            t.wake.clear()
            goal = t.goal
            if goal is None or t.cosigned_size >= goal.size:
                continue
            try:
                outcome = await self._push(t, goal)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a bug: logged, counted, retried
                log.exception("pushing to mirror %s failed", t.name)
                outcome = MirrorOutcome(t.name, error=f"{type(e).__name__}: {e}")
            if outcome.signatures:
                backoff = RETRY_MIN
                continue
            if outcome.beyond is not None:
                if self.on_beyond is not None:
                    self.on_beyond(t.name, outcome.beyond)
                continue
            if outcome.error is None:  # superseded (a newer goal, or the mirror took a newer one)
                if t.goal is not None and t.goal.size > goal.size:
                    t.wake.set()
                continue
            t.failures += 1
            t.last_error = outcome.error
            self._fail(t, outcome.error, upto=goal.size)
            log.warning("mirror %s did not store size %d: %s (retrying in %.1f s)", t.name, goal.size, outcome.error,
                        backoff)
            t.urgent.clear()
            try:  # a checkpoint waiting for this mirror's cosignature cuts the wait short
                await asyncio.wait_for(t.urgent.wait(), backoff)
            except TimeoutError:
                pass
            backoff = min(backoff * 2, RETRY_MAX)
            t.wake.set()  # retry the latest goal

    async def _push(self, t: MirrorTarget, goal: LogState) -> MirrorOutcome:
        t0 = time.perf_counter()
        source = LocalSource(self.origin, goal, await self._open_reader(), self._hashes())
        try:
            pushed = await t.client.push(source)
        except (FetchError, Refused) as e:
            return MirrorOutcome(t.name, error=e.message, seconds=time.perf_counter() - t0)
        except OAPError as e:  # our own store could not give an entry or a hash
            return MirrorOutcome(t.name, error=f"reading the log: {e.message}", seconds=time.perf_counter() - t0)
        t.sent += pushed.sent
        if pushed.action != "cosigned":
            seen = t.client.pending_hint
            if seen > goal.size and seen > self.current_size():
                log.critical("mirror %s holds a checkpoint of size %d of this log, larger than its %d", t.name, seen,
                             self.current_size())
                return MirrorOutcome(t.name, error=pushed.detail, beyond=seen)
            return MirrorOutcome(t.name)  # a newer checkpoint got there first
        found = self._verified(t, goal, pushed.lines)
        if not found:
            return MirrorOutcome(t.name, error="answered 200 without a valid cosignature of its keys",
                                 seconds=time.perf_counter() - t0)
        sigs, names = tuple(s for _, s in found), tuple(n for n, _ in found)
        t.pushes += 1
        t.last_error = ""
        t.cosigned = (goal.size, goal.root, sigs, names)
        outcome = MirrorOutcome(t.name, sigs, names, seconds=time.perf_counter() - t0)
        for size, root, future in list(t.waiters):
            if size == goal.size and root == goal.root and not future.done():
                future.set_result(outcome)
        if self.on_cosigned is not None:
            self.on_cosigned(goal.size, goal.root, sigs)
        log.debug("mirror %s cosigned size %d (%d entries sent)", t.name, goal.size, pushed.sent)
        return outcome

    @staticmethod
    def _verified(t: MirrorTarget, goal: LogState, lines: str) -> tuple[tuple[str, NoteSignature], ...]:
        """The cosignatures in a 200 that verify with one of the mirror's keys (by policy name);
        anything else in it is ignored (tlog-mirror: clients ignore unknown keys)."""
        check = check_cosignature_lines(lines, parse_note(goal.note).text, t.keys)
        if check.malformed:
            log.warning("mirror %s answered 200 with malformed cosignature lines", t.name)
        for name in check.failed:
            log.warning("mirror %s returned a cosignature that does not verify", name)
        return check.found

    def _fail(self, t: MirrorTarget, error: str, *, upto: int | None) -> None:
        """Answer the waiters for sizes up to `upto` (all: None) of a push that failed: the
        quorum is decided without this mirror."""
        for size, _, future in t.waiters:
            if (upto is None or size <= upto) and not future.done():
                future.set_result(MirrorOutcome(t.name, error=error))
