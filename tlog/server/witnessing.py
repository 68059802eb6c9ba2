"""The log side of witnessing (docs/architecture.md §3.4, C2SP tlog-witness).

After each batch the log pushes its new checkpoint to every configured
witness at once (`POST <url>/add-checkpoint` with a consistency proof from
the size that witness last accepted), verifies each cosignature it gets back,
and merges them into the checkpoint it serves. A 409 tells us the witness's
size: we resynchronise with a fresh proof and try again at once.

A witness may hold two keys (Ed25519 and ML-DSA-44, C2SP tlog-cosignature): the policy
lists each key on its own `witness` line, both with the witness's URL. The log pushes once
per URL and keeps every cosignature in the answer that verifies with one of that URL's
keys; the policy's groups decide how they count (`tlog.formats.policy`: one cosigner's
keys can only count once).

Latency is bounded: the push returns when every witness has answered, or
once the quorum is met plus a short grace period, or at the timeout, whichever
comes first; a slow or dead witness is cancelled and catches up (via 409) on
a later checkpoint. Entries are durable before any of this starts, so a
witness can delay a checkpoint but never lose an entry.

`mirror` lines are not witnesses: the log pushes its entries to them
(`tlog.server.mirroring`). A mirror the quorum counts is waited for here like a
witness, within the same deadline; its push goes on in the background after it.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import aiohttp

from tlog.errors import FormatError, LogHalted, NotPublished, TooLarge
from tlog.formats.encoding import b64enc
from tlog.formats.keys import Verifier, cosigner_verifier, parse_vkey
from tlog.formats.note import NoteSignature, add_signatures, check_cosignature_lines, parse_note
from tlog.formats.policy import Policy, parse_policy
from tlog.server.mirroring import MirrorOutcome, MirrorSet
from tlog.storage.interface import LogState
from tlog.transport import Outbound, read_capped

log = logging.getLogger("oap.tlog.witnessing")

MAX_RESPONSE = 64 * 1024


@dataclass
class WitnessEndpoint:
    name: str  # policy name (of its first key's line)
    url: str
    verifier: Verifier  # its first key, in cosignature form (0x04 or 0x06)
    size: int | None = None  # size it last accepted from us (None: unknown)
    failures: int = 0
    keys: list[tuple[str, Verifier]] = field(default_factory=list)  # (policy name, key) of every line

    def __post_init__(self) -> None:
        if not self.keys:
            self.keys = [(self.name, self.verifier)]


@dataclass
class WitnessOutcome:
    name: str
    signature: NoteSignature | None  # the first verified cosignature
    error: str | None = None
    seconds: float = 0.0
    beyond: int | None = None  # the witness has cosigned this larger size of our log
    signatures: tuple[NoteSignature, ...] = ()  # every verified cosignature
    names: tuple[str, ...] = ()  # the policy names whose key cosigned


@dataclass
class WitnessSet:
    """The witnesses of one log and the quorum its checkpoints must reach."""

    policy: Policy
    endpoints: list[WitnessEndpoint]
    timeout: float = 5.0
    grace: float = 0.1
    mirrors: MirrorSet | None = None  # its mirrors the quorum counts are waited for too
    outbound: Outbound = field(default_factory=Outbound)  # how the witnesses are reached (tlog.transport)
    _session: aiohttp.ClientSession | None = field(default=None, repr=False)

    @classmethod
    def from_policy(cls, policy_text: str, *, timeout: float = 5.0, mirrors: MirrorSet | None = None,
                    outbound: Outbound | None = None) -> WitnessSet:
        policy = parse_policy(policy_text)
        by_url: dict[str, WitnessEndpoint] = {}
        for name, w in policy.witnesses.items():
            if w.mirror:  # pushed to by tlog.server.mirroring
                continue
            if not w.url:
                raise FormatError(f"witness {name!r} has no URL in the log's policy; the log cannot push to it")
            url, v = w.url.rstrip("/"), cosigner_verifier(parse_vkey(w.vkey))
            if url in by_url:  # another key of the same witness (e.g. its ML-DSA-44 key)
                by_url[url].keys.append((name, v))
            else:
                by_url[url] = WitnessEndpoint(name, url, v)
        return cls(policy, list(by_url.values()), timeout=timeout, mirrors=mirrors, outbound=outbound or Outbound())

    @property
    def requires_quorum(self) -> bool:
        return self.policy.quorum not in (None, "none")

    def quorum_met_by(self, note: str) -> bool:
        """Whether `note` already carries cosignatures, each verified, that meet the quorum:
        a checkpoint recorded as published before a restart is served again as it is only
        then (the policy may have changed meanwhile)."""
        if not self.requires_quorum:
            return True
        try:
            parsed = parse_note(note)
        except FormatError:
            return False
        keys = [(name, cosigner_verifier(parse_vkey(w.vkey))) for name, w in self.policy.witnesses.items()]
        check = check_cosignature_lines(note[len(parsed.text) + 1:], parsed.text, keys)
        return not check.malformed and not check.failed and self.policy.quorum_met({name for name, _ in check.found})

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = self.outbound.session(timeout=aiohttp.ClientTimeout(total=None))  # each push sets its own
        return self._session

    # --- one witness ------------------------------------------------------------------

    async def _push(self, w: WitnessEndpoint, state: LogState, deadline: float) -> WitnessOutcome:
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        backoff = 0.05
        error = "timeout"
        resynced = 0
        while loop.time() < deadline:
            old = w.size if w.size is not None and w.size <= state.size else 0
            proof = state.view.consistency_proof(old)
            body = f"old {old}\n" + "".join(b64enc(p) + "\n" for p in proof) + "\n" + state.note
            try:
                async with self.session.post(
                    w.url + "/add-checkpoint", data=body.encode(),
                    timeout=aiohttp.ClientTimeout(total=max(0.01, deadline - loop.time())),
                ) as r:
                    text = (await read_capped(r, MAX_RESPONSE)).decode("utf-8", "replace")
                    status = r.status
            except (TimeoutError, aiohttp.ClientError, OSError, TooLarge) as e:
                error = "answer too large" if isinstance(e, TooLarge) else f"unreachable: {type(e).__name__}"
                await asyncio.sleep(min(backoff, max(0.0, deadline - loop.time())))
                backoff = min(backoff * 2, 1.0)
                continue
            if status == 200:
                found = self._check_cosignatures(w, state, text)
                w.size, w.failures = state.size, 0
                return WitnessOutcome(w.name, found[0][1] if found else None, None, time.perf_counter() - t0,
                                      signatures=tuple(sig for _, sig in found), names=tuple(n for n, _ in found))
            if status == 409 and resynced < 3:
                try:
                    their = int(text.strip())
                except ValueError:
                    return self._failed(w, t0, f"409 with a malformed size {text[:40]!r}")
                if their > state.size:
                    # It has cosigned a larger tree of ours than we hold: lost data (an old
                    # backup restored?) or a fork. Never sign past this point.
                    log.error("witness %s has seen size %d of this log, larger than our %d", w.name, their,
                              state.size)
                    out = self._failed(w, t0, f"witness is at size {their}, beyond the log")
                    out.beyond = their
                    return out
                w.size = their
                resynced += 1
                continue
            return self._failed(w, t0, f"HTTP {status}: {text.strip()[:200]}")
        return self._failed(w, t0, error)

    def _failed(self, w: WitnessEndpoint, t0: float, error: str) -> WitnessOutcome:
        w.failures += 1
        w.size = None  # learn it again from the next 409
        return WitnessOutcome(w.name, None, error, time.perf_counter() - t0)

    def _check_cosignatures(self, w: WitnessEndpoint, state: LogState,
                            text: str) -> tuple[tuple[str, NoteSignature], ...]:
        """Keep only the cosignatures that verify with one of the witness's keys (by policy name)."""
        check = check_cosignature_lines(text, parse_note(state.note).text, w.keys)
        if check.malformed:
            log.warning("witness %s answered 200 with malformed cosignature lines", w.name)
            return ()
        for name in check.failed:
            log.warning("witness %s returned a cosignature that does not verify", name)
        if not check.found:
            log.warning("witness %s answered 200 without its cosignature", w.name)
        return check.found

    # --- all witnesses -------------------------------------------------------------------

    async def cosign(self, state: LogState) -> tuple[LogState, list[WitnessOutcome | MirrorOutcome]]:
        """Push `state` to every witness (and wait for the mirrors the quorum counts); return it
        with the cosignatures merged.

        Raises Unavailable when a quorum is required and not reached in time.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        tasks: dict[asyncio.Task, WitnessEndpoint | None] = {
            asyncio.create_task(self._push(w, state, deadline)): w for w in self.endpoints}
        mirrors = self.mirrors
        if mirrors is not None and mirrors.gating:
            mirrors.offer(state, gating_only=True)
            for target in mirrors.gating:
                tasks[asyncio.create_task(mirrors.wait(target, state, deadline))] = None
        outcomes: list[WitnessOutcome | MirrorOutcome] = []
        met_at: float | None = None
        pending = set(tasks)
        try:
            while pending:
                wait = deadline - loop.time()
                if met_at is not None:
                    wait = min(wait, met_at + self.grace - loop.time())
                if wait <= 0:
                    break
                done, pending = await asyncio.wait(pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                outcomes.extend(t.result() for t in done)
                if met_at is None and self.policy.quorum_met({n for o in outcomes for n in o.names}):
                    met_at = loop.time()
        finally:
            for t in pending:
                t.cancel()
                endpoint = tasks[t]
                if endpoint is not None:
                    endpoint.size = None
        for t in pending:
            endpoint = tasks[t]
            if endpoint is not None:
                outcomes.append(WitnessOutcome(endpoint.name, None, "no answer before the deadline", self.timeout))
        beyond = [o for o in outcomes if o.beyond is not None]
        if beyond:
            o = beyond[0]
            raise LogHalted(
                f"witness {o.name} has cosigned size {o.beyond} of this log but the log holds {state.size} "
                "entries (restored from an old backup?); writes are refused until an operator intervenes "
                "(see ops/runbooks/backup-restore.md)"
            )
        cosigned = [o for o in outcomes if o.signatures]
        names = {n for o in cosigned for n in o.names}
        for o in outcomes:
            if o.error:
                log.warning("%s %s did not cosign size %d: %s", "mirror" if isinstance(o, MirrorOutcome) else "witness",
                            o.name, state.size, o.error)
        if self.requires_quorum and not self.policy.quorum_met(names):
            raise NotPublished(
                f"checkpoint {state.size} has cosignatures from {sorted(names) or 'no witness'}; "
                "the witness quorum is not met yet (the entries are durable; retry shortly)",
                retry_after=1,
            )
        note = str(add_signatures(state.note, [s for o in cosigned for s in o.signatures]))
        return replace(state, note=note), outcomes


def policy_text(log_vkey: str, witnesses: Sequence[tuple[str, str, str]], quorum: int,
                mirrors: Sequence[tuple[str, str, str]] = ()) -> str:
    """A tlog-policy for clients: this log, its witnesses and a k-of-n quorum, and its mirrors
    (`mirror` lines, outside the quorum: the log pushes to them without waiting).

    Rows that share a URL are keys of one witness (e.g. its Ed25519 and ML-DSA-44 keys): they
    are wrapped in a group "<first name>-any" (either key) that takes the witness's place in
    the quorum, so a witness with two keys counts once (tlog.formats.policy refuses a policy
    where it could count twice). k counts witnesses, not keys.
    """
    lines = [f"log {log_vkey}"]
    by_url: dict[str, list[str]] = {}
    for name, vkey, url in witnesses:
        lines.append(f"witness {name} {vkey} {url}".rstrip())
        by_url.setdefault(url or name, []).append(name)
    lines += [f"mirror {name} {vkey} {url}".rstrip() for name, vkey, url in mirrors]
    members = []
    for names in by_url.values():
        if len(names) > 1:
            lines.append(f"group {names[0]}-any any {' '.join(names)}")
            members.append(f"{names[0]}-any")
        else:
            members.append(names[0])
    if members and quorum:
        lines.append(f"group local-witnesses {quorum} {' '.join(members)}")
        lines.append("quorum local-witnesses")
    else:
        lines.append("quorum none")
    return "\n".join(lines) + "\n"
