"""Watching a registry: the status of watched DIDs, and that every commit is anchored in a watched log.

**Statuses** arrive through the registry's push stream (`GET /v1/status-events`, Server-Sent
Events: each id's signed answer at once, then again whenever it changes), at most 16 ids a
stream, reconnecting with backoff when a stream ends (the registry ends each after an hour)
or fails; `--once` asks `GET /v1/status/<id>` instead. Every answer is verified before it
counts (`registry.statusverify.verify_status`: signed by the pinned registry key, about the
id asked, its epoch anchored in the logs of the policy, the deciding records proven, fresh);
one that does not verify is refused and counted, and a registry that keeps answering so is
an incident. An alert is raised when a DID's verified answer changes what it says (status,
or for `revoked`/`suspended` the deciding leaf: a new reason, a reinstatement) and when a
DID is first seen in any status but `good` or `unknown`.

**Anchors**: the registry's commits, oldest first from where the last pass stopped
(`GET /v1/commits`), each with its anchor: the anchor must verify against the policy
(`registry.anchoring.verify_commit_anchor`: a `registry` entry of exactly that commit,
signed by the registry key, included in k logs), and every checkpoint it carries of a log
this monitor watches is compared with the monitor's view of that log like a witness's
(`LogWatcher.compare_found`): a registry anchored in a fork is a split view. A commit
without an anchor, with one that does not verify, or anchored only in logs this monitor
does not watch, is an alert.
"""
from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Mapping
from typing import Any

from registry.anchoring import verify_commit_anchor
from registry.client import RegistryClient
from registry.statusverify import anchor_policy, verify_status
from tlog.client.verifier import TrustPolicy
from tlog.errors import OAPError, UpstreamError
from tlog.formats.anchors import parse_anchors
from tlog.formats.checkpoint import parse_checkpoint
from tlog.formats.note import parse_note
from tlog.formats.shardlist import LogList, verify_log_list
from tlog.formats.times import parse_utc

from . import alerts
from .config import RegistryWatch
from .context import Context
from .fetch import MAX_JSON, Invalid, NotServed, PeerError, Unreachable, get
from .logwatch import LogWatcher, PassResult

log = logging.getLogger("oap.monitor")

STREAM_IDS = 16
"""Ids per push stream: the registry's limit (registry.api.MAX_WATCHED_IDS)."""
PAGE = 100
"""Commits read per request (the registry answers at most this many)."""


class RegistryWatcher:
    def __init__(self, cfg: RegistryWatch, ctx: Context, policy: TrustPolicy, logs: Mapping[str, LogWatcher]) -> None:
        self.cfg, self.ctx, self.logs = cfg, ctx, logs
        self.policy = anchor_policy(policy)
        self.anchors_policy = policy
        self.name = cfg.url
        self.log_list: LogList | None = None  # the registry's signed log list, last verified (§6.2)

    @property
    def source(self) -> dict[str, str]:
        return {"registry": self.cfg.url, "key": self.cfg.key}

    # --- statuses ---------------------------------------------------------------------------

    def take_answer(self, status_id: str, answer: Any) -> list[str]:
        """Verify one answer about `status_id` and raise the alert a change makes."""
        try:
            v = verify_status(answer, registry=self.cfg.key, status_id=status_id, policy=self.policy)
        except OAPError as e:
            self.ctx.metrics.status_events.labels("refused").inc()
            log.error("registry %s: the answer about %s does not verify: %s", self.cfg.url, status_id, e.message)
            return self.ctx.problem("registry_invalid", self.name, self.source,
                                    f"the registry {self.cfg.url} serves answers that do not verify",
                                    f"{status_id}: {e.message}", self.ctx.unreachable_after)
        self.ctx.metrics.status_events.labels("verified").inc()
        self.ctx.cleared("registry_invalid", self.name)
        proof = answer.get("proof") if isinstance(answer.get("proof"), dict) else {}
        mark = v.status if v.status in ("good", "unknown") else f"{v.status} {proof.get('leaf', '')}"
        before = self.ctx.state.status_mark(self.cfg.url, status_id)
        new = []
        if (before is None and v.status not in ("good", "unknown")) or (before is not None and before[0] != mark):
            new.append(alerts.registry_status(self.source, status_id, answer, before[1] if before else None, mark))
        ids = self.ctx.state.record_status(self.cfg.url, status_id, mark, v.status, new, self.ctx.targets())
        self.ctx.raised(ids)
        if ids:
            log.warning("registry %s: %s is now %s", self.cfg.url, status_id, v.status)
        return ids

    async def poll_statuses(self) -> PassResult:
        """Each watched DID's answer now (`--once`, and when the stream cannot be had)."""
        raised: list[str] = []
        try:
            async with RegistryClient(self.cfg.url, timeout=self.ctx.timeout, outbound=self.ctx.outbound) as client:
                for did in self.cfg.dids:
                    raised += self.take_answer(did, await client.status(did))
        except OAPError as e:
            return self._failed(e)
        except (TimeoutError, OSError) as e:
            return self._failed(Unreachable(f"{self.cfg.url}: {e}"))
        return PassResult(self.name, True, raised)

    async def follow(self, stop: asyncio.Event) -> None:
        """The push streams, until `stop`: one task per 16 ids, each reconnecting with backoff."""
        groups = [self.cfg.dids[i:i + STREAM_IDS] for i in range(0, len(self.cfg.dids), STREAM_IDS)]
        tasks = [asyncio.ensure_future(self._stream(list(g), stop)) for g in groups]
        try:
            await stop.wait()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _stream(self, ids: list[str], stop: asyncio.Event) -> None:
        failures = 0
        while not stop.is_set():
            try:
                async with RegistryClient(self.cfg.url, timeout=self.ctx.timeout, outbound=self.ctx.outbound) as client:
                    async for answer in client.status_events(ids):
                        failures = 0
                        self.take_answer(answer["id"], answer)
                self.ctx.cleared("registry_unreachable", self.name)
            except OAPError as e:
                failures += 1
                self._failed(e)
            except (TimeoutError, OSError, ValueError) as e:  # a cut stream, a line that is not JSON
                failures += 1
                self._failed(Unreachable(f"{self.cfg.url}/v1/status-events: {type(e).__name__}: {e}"))
            wait = min(60.0, 2.0 ** min(failures, 6)) * (0.5 + random.random())
            try:
                await asyncio.wait_for(stop.wait(), wait if failures else 1.0)
            except TimeoutError:
                pass

    # --- anchors ----------------------------------------------------------------------------

    async def check_anchors(self) -> PassResult:
        if not self.cfg.anchors:
            return PassResult(self.name, True)
        raised: list[str] = []
        try:
            last = self.ctx.state.registry_seq(self.cfg.url)
            for _ in range(100):  # at most 10,000 commits a pass; the next pass goes on
                page = await self._commits(before=last + 1 + PAGE)
                commits = sorted((c for c in page if c["seq"] > last), key=lambda c: c["seq"])
                if not commits:
                    break
                new: list[alerts.NewAlert] = []
                done = last
                for c in commits:
                    if c["seq"] != done + 1:
                        raise Invalid(f"{self.cfg.url}/v1/commits: commit {done + 1} is missing from the history")
                    checked = await self._check_commit(c, new)
                    if checked is None:
                        break  # its anchor is not there yet: the next pass looks again
                    raised += checked
                    done = c["seq"]
                if done > last:  # one commit of the state per page
                    ids = self.ctx.state.set_registry_seq(self.cfg.url, done, new, self.ctx.targets())
                    self.ctx.raised(ids)
                    raised += ids
                if done < commits[-1]["seq"]:
                    break
                last = done
        except PeerError as e:
            return self._failed(e)
        self.ctx.cleared("registry_unreachable", self.name)
        self.ctx.metrics.last_ok.labels(self.name).set(time.time())
        return PassResult(self.name, True, raised)

    # --- the log list -------------------------------------------------------------------------

    async def check_log_list(self) -> None:
        """The registry's signed log list (docs/architecture.md §6.2), verified against the
        pinned key: shown in /v1/status (which logs are frozen, which shard takes entries, the
        successors); a log of it newly frozen is logged; one that does not verify is a
        `registry_invalid` problem. A registry that publishes none is not one."""
        url = f"{self.cfg.url}/v1/log-list"
        key = f"{self.name} log list"
        try:
            raw = await get(self.ctx.session, url, MAX_JSON, self.ctx.timeout, headers={"Accept": "application/json"})
        except NotServed:
            return
        except PeerError as e:
            log.warning("registry %s: no log list: %s", self.cfg.url, e)
            return
        try:
            lst = verify_log_list(json.loads(raw), self.cfg.key)
        except (OAPError, ValueError, UnicodeDecodeError) as e:
            reason = getattr(e, "message", None) or f"not JSON: {e}"
            log.error("registry %s: the log list does not verify: %s", self.cfg.url, reason)
            self.ctx.problem("registry_invalid", key, self.source,
                             f"the registry {self.cfg.url} serves a log list that does not verify", reason,
                             self.ctx.unreachable_after)
            return
        self.ctx.cleared("registry_invalid", key)
        before = {entry.origin: entry.state for entry in self.log_list.logs} if self.log_list is not None else {}
        for entry in lst.logs:
            if entry.state == "frozen" and before.get(entry.origin) != "frozen":
                log.warning("registry %s: the log %s is frozen%s", self.cfg.url, entry.origin,
                            f"; its successor is {entry.successor}" if entry.successor else "")
        self.log_list = lst

    async def _commits(self, before: int) -> list[dict[str, Any]]:
        url = f"{self.cfg.url}/v1/commits?limit={PAGE}&before={before}"
        raw = await get(self.ctx.session, url, MAX_JSON, self.ctx.timeout, headers={"Accept": "application/json"})
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise Invalid(f"{url}: not JSON") from None
        commits = doc.get("commits") if isinstance(doc, dict) else None
        if not isinstance(commits, list) or len(commits) > PAGE:
            raise Invalid(f"{url}: not a page of commits")
        for c in commits:
            if not (isinstance(c, dict) and type(c.get("seq")) is int and isinstance(c.get("commit"), str)
                    and isinstance(c.get("tree"), str) and (c.get("anchor") is None or isinstance(c["anchor"], str))):
                raise Invalid(f"{url}: a malformed commit")
        return commits

    async def _check_commit(self, c: dict[str, Any], new: list[alerts.NewAlert]) -> list[str] | None:
        """Check one commit's anchor (its alerts go to `new`); the split views found; None when
        the commit has no anchor yet and is younger than `unreachable_after` (a registry
        publishes a commit once anchored, a mirror fetches the anchor a moment later)."""
        seq, commit, anchor = c["seq"], c["commit"], c.get("anchor")
        raised: list[str] = []
        if anchor is None:
            if self.ctx.clock() - _time(c.get("time")) < self.ctx.unreachable_after:
                return None
            new.append(alerts.registry_anchor(self.source, seq, commit, "the commit has no log anchor", None))
            return raised
        try:
            verify_commit_anchor(anchor, commit=commit, tree=c["tree"], seq=seq, registry=self.cfg.key,
                                 policy=self.anchors_policy)
            bundles = parse_anchors(anchor)
        except OAPError as e:
            new.append(alerts.registry_anchor(self.source, seq, commit, f"the anchor does not verify: {e.message}",
                                              anchor))
            return raised
        origins = [parse_checkpoint(parse_note(b.checkpoint).text).origin for b in bundles]
        for b, origin in zip(bundles, origins):
            lw = self.logs.get(origin)
            if lw is not None:
                raised += await lw.compare_found(b.checkpoint, f"{self.cfg.url}/v1/anchors/{seq}")
        if not any(o in self.logs for o in origins):
            new.append(alerts.registry_anchor(self.source, seq, commit, "anchored only in logs this monitor does not "
                                              f"watch ({', '.join(sorted(origins))})", anchor))
        return raised

    # --- health -----------------------------------------------------------------------------

    def _failed(self, e: OAPError) -> PassResult:
        unreachable = isinstance(e, (Unreachable, UpstreamError)) or e.status in (429, 502, 503, 504)
        kind = "registry_unreachable" if unreachable else "registry_invalid"
        self.ctx.metrics.passes.labels(self.name, "unreachable" if unreachable else "invalid").inc()
        log.warning("registry %s: %s", self.cfg.url, e.message)
        what = f"the registry {self.cfg.url} is " + ("unreachable" if unreachable else "serving invalid data")
        ids = self.ctx.problem(kind, self.name, self.source, what, e.message, self.ctx.unreachable_after)
        return PassResult(self.name, False, ids, e.message)


def _time(value: object) -> float:
    """A commit's RFC 3339 time as Unix time (0 when it has none: old enough to alert)."""
    try:
        return parse_utc(value, "time").timestamp()
    except OAPError:
        return 0.0
