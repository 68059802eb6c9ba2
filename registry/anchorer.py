"""Writing the registry's anchors to its logs: one or several at once (OAP-CORE-1.0 §19.3).

`Anchorer` sends each entry (a commit, a status epoch statement, kill switch receipts)
to every log concurrently, each request bounded by `timeout`, and returns once at
least k logs hold it (`registry.anchoring`: the genesis names the logs and k); fewer
is an `UpstreamError` and nothing is published. Every proof a log returns is checked
before it counts: the entry's leaf hash, the log's origin, its signature and witness
quorum (the operator's `log_policy`, else the log's key alone), and inclusion.

A log that did not anchor a published commit (down, slow) is *behind*: the commit
goes on its `Backlog` (durable, `<data>/anchors/backlog.json`), new entries skip it
while the others still make k, and `catch_up` re-anchors its backlog, oldest first,
once it answers again, adding its proofs to the commits' served anchors. Registry
entries are deterministic (Ed25519), so a log that held an anchor all along answers
with the index it already has. Status epochs and kill switch receipts are not
caught up: an epoch is replaced within `epoch_seconds`, and a kill switch is in the
commit tree the late log gets through the commit's anchor.
"""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tlog.client.client import LogClient
from tlog.client.verifier import TrustPolicy
from tlog.errors import OAPError, UpstreamError
from tlog.formats.anchors import anchors_text, parse_anchors
from tlog.formats.checkpoint import parse_checkpoint
from tlog.formats.did import did_key_from_public
from tlog.formats.entries import receipt_entry, registry_entry
from tlog.formats.keys import Ed25519Key, ed25519_signer
from tlog.formats.note import parse_note
from tlog.formats.proofbundle import parse_proof_bundle
from tlog.storage.durable import write_atomic

from .anchoring import is_anchors_file

log = logging.getLogger("oap.registry.anchorer")


@dataclass
class LogLink:
    """One log the registry anchors in: where it is, what it is (from its genesis or its
    /v1/info), and the client that talks to it."""

    url: str
    origin: str
    vkey: str
    client: LogClient


@dataclass(frozen=True)
class Anchors:
    """An entry's anchors: `text` is the tlog-proof (one log) or the anchors file (several)."""

    text: str
    logs: tuple[str, ...]  # origins of the logs that hold it
    missing: tuple[str, ...]  # origins of the logs that do not (yet)


def _origin(bundle: str) -> str:
    return parse_checkpoint(parse_note(parse_proof_bundle(bundle).checkpoint).text).origin


def proofs_of(text: str) -> dict[str, str]:
    """origin -> tlog-proof text, of an anchor as stored (a tlog-proof or an anchors file)."""
    if not is_anchors_file(text):
        return {_origin(text): text}
    return {_origin(b.to_text()): b.to_text() for b in parse_anchors(text)}


def merge(text: str, bundle: str) -> str:
    """The anchors file `text` with one more log's proof (an anchors file always: a late
    proof is only ever added to a registry of several logs)."""
    proofs = proofs_of(text)
    proofs.setdefault(_origin(bundle), bundle)
    return anchors_text(list(proofs.values()))


class Anchorer:
    """Anchors entries signed by the registry key in its logs, k of them at least."""

    def __init__(self, links: Sequence[LogLink], seed: Ed25519Key, *, quorum: int, several: bool,
                 timeout: float = 10.0, backlog: Backlog | None = None) -> None:
        if not 1 <= quorum <= len(links):
            raise ValueError("quorum must be 1..number of logs")
        self.links = list(links)
        self.seed, self.quorum, self.several, self.timeout = seed, quorum, several, timeout
        self.registry = did_key_from_public(ed25519_signer(seed).public)
        self.backlog = backlog  # the logs behind, skipped while the others make k
        self.on_failure: Callable[[str], None] = lambda origin: None  # a log did not anchor (metrics)

    @property
    def origins(self) -> tuple[str, ...]:
        return tuple(link.origin for link in self.links)

    async def close(self) -> None:
        for link in self.links:
            await link.client.close()

    async def _in_log(self, link: LogLink, entries: list[dict]) -> list[str]:
        """`entries` anchored in one log, within the timeout; the bundles, checked to be this log's."""
        async def go() -> list[str]:
            if len(entries) == 1:
                return [(await link.client.anchor(entries[0])).bundle]
            return [a.bundle for a in await link.client.anchor_many(entries)]
        try:
            bundles = await asyncio.wait_for(go(), self.timeout)
            for b in bundles:
                if _origin(b) != link.origin:
                    raise UpstreamError(f"the log at {link.url} answered for {_origin(b)!r}, not {link.origin!r}")
        except Exception:
            self.on_failure(link.origin)
            raise
        return bundles

    async def anchor(self, entries: list[dict]) -> list[Anchors]:
        """Anchor `entries` in every log not behind (in all, if that leaves fewer than k) at once;
        UpstreamError unless k logs anchored all of them."""
        behind = self.backlog.behind() if self.backlog is not None else frozenset()
        targets = [link for link in self.links if link.origin not in behind]
        if len(targets) < self.quorum:
            targets = self.links

        async def one(link: LogLink) -> tuple[LogLink, list[str] | None, str]:
            try:
                return link, await self._in_log(link, entries), ""
            except TimeoutError:
                return link, None, f"no answer within {self.timeout:g} s"
            except OAPError as e:
                return link, None, e.message
            except Exception as e:  # noqa: BLE001 - a reset, a malformed answer: this log failed, the others count
                return link, None, f"{type(e).__name__}: {e}"

        results = await asyncio.gather(*(one(link) for link in targets))
        done = [(link, bundles) for link, bundles, _ in results if bundles is not None]
        for link, bundles, error in results:
            if bundles is None:
                log.warning("log %s (%s) did not anchor: %s", link.origin, link.url, error)
        if len(done) < self.quorum:
            why = "; ".join(f"{link.origin}: {error}" for link, bundles, error in results if bundles is None)
            raise UpstreamError(f"anchored in {len(done)} of {len(self.links)} log(s), {self.quorum} required ({why})")
        held = tuple(link.origin for link, _ in done)
        missing = tuple(o for o in self.origins if o not in held)
        out = []
        for i in range(len(entries)):
            texts = [bundles[i] for _, bundles in done]
            out.append(Anchors(anchors_text(texts) if self.several else texts[0], held, missing))
        return out

    async def anchor_commit(self, commit: str, tree: str, seq: int) -> Anchors:
        return (await self.anchor([registry_entry(commit, tree, seq, self.seed)]))[0]

    async def anchor_receipts(self, items: Sequence[tuple[bytes, str]]) -> list[Anchors]:
        return await self.anchor([receipt_entry(h, self.seed, rid) for h, rid in items])

    async def anchor_statement(self, statement_hash: bytes, statement_id: str) -> Anchors:
        return (await self.anchor([receipt_entry(statement_hash, self.seed, statement_id)]))[0]

    async def commits_in(self, origin: str, commits: Sequence[tuple[str, str, int]]) -> list[str]:
        """Anchor these (commit, tree, seq) in one log (catching it up); its bundles."""
        link = next(link for link in self.links if link.origin == origin)
        return await self._in_log(link, [registry_entry(c, t, s, self.seed) for c, t, s in commits])


class Backlog:
    """Commits each log that was behind does not hold yet, oldest first, kept durable so that
    a restart still catches the log up."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raw = {}
        self._seqs: dict[str, list[int]] = {o: sorted(set(s)) for o, s in raw.items() if s}
        self.on_change: Callable[[str, int], None] = lambda origin, pending: None  # (metrics)

    def behind(self) -> frozenset[str]:
        return frozenset(self._seqs)

    def pending(self, origin: str) -> list[int]:
        return list(self._seqs.get(origin, ()))

    def add(self, origins: Sequence[str], seq: int) -> None:
        if not origins:
            return
        for o in origins:
            seqs = self._seqs.setdefault(o, [])
            if seq not in seqs:
                seqs.append(seq)
                seqs.sort()
            self.on_change(o, len(seqs))
        self._save()

    def done(self, origin: str, seqs: Sequence[int]) -> None:
        left = [s for s in self._seqs.get(origin, ()) if s not in set(seqs)]
        if left:
            self._seqs[origin] = left
        else:
            self._seqs.pop(origin, None)
        self.on_change(origin, len(left))
        self._save()

    def _save(self) -> None:
        write_atomic(self.path, json.dumps(self._seqs, sort_keys=True).encode())


def anchor_policy(policy: TrustPolicy | None, vkey: str) -> TrustPolicy:
    """The policy a log's proofs are checked with as they arrive: the operator's, else its key."""
    return policy if policy is not None else TrustPolicy.for_log(vkey)
