"""The log side of witnessing (docs/architecture.md §3.4, C2SP tlog-witness).

After each batch the log pushes its new checkpoint to every configured
witness at once (`POST <url>/add-checkpoint` with a consistency proof from
the size that witness last accepted), verifies each cosignature it gets back,
and merges them into the checkpoint it serves. A 409 tells us the witness's
size: we resynchronise with a fresh proof and try again at once.

Latency is bounded: the push returns when every witness has answered, or
once the quorum is met plus a short grace period, or at the timeout, whichever
comes first; a slow or dead witness is cancelled and catches up (via 409) on
a later checkpoint. Entries are durable before any of this starts, so a
witness can delay a checkpoint but never lose an entry.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import aiohttp

from tlog.errors import FormatError, LogHalted, NotPublished, SignatureError
from tlog.formats.encoding import b64enc
from tlog.formats.keys import Verifier, cosigner_verifier, parse_vkey
from tlog.formats.note import NoteSignature, add_signatures, parse_note, parse_signature_lines
from tlog.formats.policy import Policy, parse_policy
from tlog.storage.interface import LogState

log = logging.getLogger("oap.tlog.witnessing")

MAX_RESPONSE = 64 * 1024


@dataclass
class WitnessEndpoint:
    name: str  # policy name
    url: str
    verifier: Verifier  # the 0x04 form of its key
    size: int | None = None  # size it last accepted from us (None: unknown)
    failures: int = 0


@dataclass
class WitnessOutcome:
    name: str
    signature: NoteSignature | None
    error: str | None = None
    seconds: float = 0.0
    beyond: int | None = None  # the witness has cosigned this larger size of our log


@dataclass
class WitnessSet:
    """The witnesses of one log and the quorum its checkpoints must reach."""

    policy: Policy
    endpoints: list[WitnessEndpoint]
    timeout: float = 5.0
    grace: float = 0.1
    _session: aiohttp.ClientSession | None = field(default=None, repr=False)

    @classmethod
    def from_policy(cls, policy_text: str, *, timeout: float = 5.0) -> WitnessSet:
        policy = parse_policy(policy_text)
        endpoints = []
        for name, w in policy.witnesses.items():
            if not w.url:
                raise FormatError(f"witness {name!r} has no URL in the log's policy; the log cannot push to it")
            endpoints.append(WitnessEndpoint(name, w.url.rstrip("/"), cosigner_verifier(parse_vkey(w.vkey))))
        return cls(policy, endpoints, timeout=timeout)

    @property
    def requires_quorum(self) -> bool:
        return self.policy.quorum not in (None, "none")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
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
                    text = (await r.content.read(MAX_RESPONSE)).decode("utf-8", "replace")
                    status = r.status
            except (TimeoutError, aiohttp.ClientError, OSError) as e:
                error = f"unreachable: {type(e).__name__}"
                await asyncio.sleep(min(backoff, max(0.0, deadline - loop.time())))
                backoff = min(backoff * 2, 1.0)
                continue
            if status == 200:
                sig = self._check_cosignature(w, state, text)
                w.size, w.failures = state.size, 0
                return WitnessOutcome(w.name, sig, None, time.perf_counter() - t0)
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

    def _check_cosignature(self, w: WitnessEndpoint, state: LogState, text: str) -> NoteSignature | None:
        """Keep only a cosignature that verifies with the witness's key."""
        cp_text = parse_note(state.note).text.encode()
        try:
            sigs = parse_signature_lines(text if text.endswith("\n") else text + "\n")
        except FormatError:
            log.warning("witness %s answered 200 with malformed cosignature lines", w.name)
            return None
        for s in sigs:
            if s.name == w.verifier.name and s.key_id == w.verifier.key_id:
                try:
                    w.verifier.verify(cp_text, s.blob)
                except SignatureError:
                    log.warning("witness %s returned a cosignature that does not verify", w.name)
                    return None
                return s
        log.warning("witness %s answered 200 without its cosignature", w.name)
        return None

    # --- all witnesses -------------------------------------------------------------------

    async def cosign(self, state: LogState) -> tuple[LogState, list[WitnessOutcome]]:
        """Push `state` to every witness; return it with the cosignatures merged.

        Raises Unavailable when a quorum is required and not reached in time.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        tasks = {asyncio.create_task(self._push(w, state, deadline)): w for w in self.endpoints}
        outcomes: list[WitnessOutcome] = []
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
                if met_at is None and self.policy.quorum_met({o.name for o in outcomes if o.signature}):
                    met_at = loop.time()
        finally:
            for t in pending:
                t.cancel()
                tasks[t].size = None
        for t in pending:
            outcomes.append(WitnessOutcome(tasks[t].name, None, "no answer before the deadline", self.timeout))
        beyond = [o for o in outcomes if o.beyond is not None]
        if beyond:
            o = beyond[0]
            raise LogHalted(
                f"witness {o.name} has cosigned size {o.beyond} of this log but the log holds {state.size} "
                "entries (restored from an old backup?); writes are refused until an operator intervenes "
                "(see ops/runbooks/backup-restore.md)"
            )
        cosigned = [o for o in outcomes if o.signature is not None]
        names = {o.name for o in cosigned}
        for o in outcomes:
            if o.error:
                log.warning("witness %s did not cosign size %d: %s", o.name, state.size, o.error)
        if self.requires_quorum and not self.policy.quorum_met(names):
            raise NotPublished(
                f"checkpoint {state.size} has cosignatures from {sorted(names) or 'no witness'}; "
                "the witness quorum is not met yet (the entries are durable; retry shortly)",
                retry_after=1,
            )
        note = str(add_signatures(state.note, [o.signature for o in cosigned if o.signature is not None]))
        return replace(state, note=note), outcomes


def policy_text(log_vkey: str, witnesses: Sequence[tuple[str, str, str]], quorum: int) -> str:
    """A tlog-policy for clients: this log, its witnesses and a k-of-n quorum."""
    lines = [f"log {log_vkey}"]
    for name, vkey, url in witnesses:
        lines.append(f"witness {name} {vkey} {url}".rstrip())
    if witnesses and quorum:
        lines.append(f"group local-witnesses {quorum} {' '.join(n for n, _, _ in witnesses)}")
        lines.append("quorum local-witnesses")
    else:
        lines.append("quorum none")
    return "\n".join(lines) + "\n"
