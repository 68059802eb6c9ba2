"""The monitor service: its state directory, watchers, deliveries and metrics, opened from a
`MonitorConfig` and closed on shutdown. The HTTP API over it (metrics, health, status) is
`monitor.api`; what a pass does is `monitor.logwatch` and `monitor.registrywatch`."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from tlog.client.verifier import TrustPolicy
from tlog.errors import ConfigError, OAPError
from tlog.formats.journal import parse_journal
from tlog.formats.times import format_utc
from tlog.transport import Outbound

from .config import MonitorConfig, RegistryWatch
from .context import Context
from .fetch import client_session
from .logwatch import LogWatcher, PassResult
from .metrics import MonitorMetrics
from .registrywatch import RegistryWatcher
from .sinks import Deliverer, targets
from .state import State

log = logging.getLogger("oap.monitor")

JOURNAL_READ = 16 << 20
"""Bytes of a journal read at a time (a line is at most 4 KiB)."""


@dataclass
class PassSummary:
    results: list[PassResult] = field(default_factory=list)

    @property
    def alerts(self) -> list[str]:
        return [a for r in self.results for a in r.alerts]

    @property
    def checked(self) -> bool:
        return all(r.ok for r in self.results)

    @property
    def exit_code(self) -> int:
        """`--once`: 2 when something could not be checked (the alerts raised meanwhile are
        delivered all the same), else 1 when alerts were raised, else 0."""
        return 2 if not self.checked else 1 if self.alerts else 0


class MonitorService:
    def __init__(self, config: MonitorConfig, state: State, metrics: MonitorMetrics, ctx: Context,
                 logs: list[LogWatcher], registry: RegistryWatcher | None, deliverer: Deliverer) -> None:
        self.config, self.state, self.metrics, self.ctx = config, state, metrics, ctx
        self.logs, self.registry, self.deliverer = logs, registry, deliverer
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    @classmethod
    async def open(cls, config: MonitorConfig) -> MonitorService:
        state = State(config.state_dir)
        session = None
        try:
            metrics = MonitorMetrics()
            outbound = Outbound.from_config(config)
            session = client_session(outbound, config.timeout, limit=max(16, 2 * config.fetch_window))
            sinks = tuple(config.alerts)
            deliverer = Deliverer(state, sinks, metrics, session, outbound, timeout=config.timeout,
                                  retry_max=config.retry_max_seconds)
            holder: list[MonitorService] = []

            def raised(ids: Sequence[str]) -> None:
                for doc_id in ids:
                    row = state.db.execute("SELECT kind FROM alerts WHERE id=?", (doc_id,)).fetchone()
                    if row:
                        metrics.alerts.labels(row[0]).inc()
                if ids:
                    deliverer.wake()

            ctx = Context(state, metrics, session, outbound, lambda: targets(sinks), config.timeout,
                          config.fetch_window, config.unreachable_after, config.behind_after,
                          lambda: holder[0].refresh_journals(), raised)
            try:
                logs = [LogWatcher(lg, ctx) for lg in config.logs]
                registry = None
                if config.registry is not None:
                    policy_path = config.registry_policy
                    assert policy_path is not None
                    policy = TrustPolicy.from_text(policy_path.read_text())
                    registry = RegistryWatcher(_pinned(config.registry, policy, policy_path), ctx, policy,
                                               {lw.origin: lw for lw in logs})
            except (OSError, OAPError) as e:
                raise ConfigError(f"{getattr(e, 'message', None) or e}") from None
            names = [lw.name for lw in logs]
            if len(set(names)) != len(names):
                raise ConfigError("two [[logs]] have the same name (origin): give them names")
            svc = cls(config, state, metrics, ctx, logs, registry, deliverer)
            holder.append(svc)
            deliverer.refresh_gauges()
            return svc
        except BaseException:
            if session is not None:
                await session.close()
            state.close()
            raise

    # --- watch list and journals ----------------------------------------------------------

    def watched(self) -> frozenset[str]:
        """The identities watched now; those new since the last pass get a rescan of every log read so far."""
        now = self.config.load_watch_files()
        before = self.state.watched()
        new = now - before
        if new:
            rescans = [(lw.name, v) for lw in self.logs if lw.cfg.entries and (v := self.state.view(lw.name))]
            self.state.watch(new, rescans)
            if before or rescans:
                log.info("now watching %d more: %s", len(new), ", ".join(sorted(new)[:5]))
        return now

    def refresh_journals(self) -> None:
        """Read what the journals gained since the last read (each a bounded read per call)."""
        for path in self.config.journals:
            try:
                with open(path, "rb") as f:
                    st = os.fstat(f.fileno())
                    ino, offset = self.state.journal_position(path)
                    if ino != st.st_ino or st.st_size < offset:  # rotated or truncated: read it again
                        offset = 0
                    while offset < st.st_size:
                        f.seek(offset)
                        data = f.read(JOURNAL_READ)
                        keys, used, bad = parse_journal(data)
                        if bad:
                            log.warning("%s: %d lines that are not journal lines, skipped", path, bad)
                        if not used:
                            break  # an unfinished last line: read again next time
                        offset += used
                        self.state.add_known(path, st.st_ino, offset, keys)
            except FileNotFoundError:
                continue
            except OSError as e:
                log.warning("journal %s: %s", path, e.strerror)

    # --- passes ---------------------------------------------------------------------------

    async def pass_once(self, *, statuses: bool = True) -> PassSummary:
        """One pass over every log and the registry (its anchors; `statuses`: also ask each
        watched DID's status, which the push streams do otherwise)."""
        watched = self.watched()
        self.refresh_journals()
        summary = PassSummary()
        summary.results += await asyncio.gather(*(lw.run_pass(watched) for lw in self.logs))
        if self.registry is not None:
            if statuses and self.config.registry is not None and self.config.registry.dids:
                summary.results.append(await self.registry.poll_statuses())
            summary.results.append(await self.registry.check_anchors())
            await self.registry.check_log_list()
        self._gauges()
        return summary

    def _gauges(self) -> None:
        counts: dict[str, int] = {}
        for kind, *_ in self.state.incidents():
            counts[kind] = counts.get(kind, 0) + 1
        for kind in ("log_unreachable", "log_invalid", "log_behind", "registry_unreachable", "registry_invalid"):
            self.metrics.incidents.labels(kind).set(counts.get(kind, 0))
        for lw in self.logs:
            v = self.state.view(lw.name)
            if v is not None:
                self.metrics.verified_size.labels(lw.name).set(v.size)
                self.metrics.entries_read.labels(lw.name).set(v.read)
        self.deliverer.refresh_gauges()

    async def once(self, *, delivery_seconds: float = 30.0) -> PassSummary:
        """`--once`: a pass, then one round of deliveries (what fails waits for the next run)."""
        summary = await self.pass_once()
        await self.deliverer.deliver_due(deadline=time.monotonic() + delivery_seconds)
        return summary

    def start(self) -> None:
        """The passes every `poll_seconds`, the push streams and the deliveries, in the background."""
        self._stop.clear()
        self._tasks = [asyncio.ensure_future(self._passes()), asyncio.ensure_future(self.deliverer.run(self._stop))]
        if self.registry is not None and self.config.registry is not None and self.config.registry.dids:
            self._tasks.append(asyncio.ensure_future(self.registry.follow(self._stop)))

    async def _passes(self) -> None:
        while not self._stop.is_set():
            try:
                await self.pass_once(statuses=False)
            except (OSError, OAPError) as e:  # the state directory itself failing: said, and tried again
                log.error("a pass failed: %s", getattr(e, "message", None) or e)
            try:
                await asyncio.wait_for(self._stop.wait(), self.config.poll_seconds)
            except TimeoutError:
                pass

    async def stop(self) -> None:
        self._stop.set()
        for t in self._tasks:
            try:
                await asyncio.wait_for(t, 10)
            except (TimeoutError, asyncio.CancelledError):
                t.cancel()
        self._tasks = []

    async def close(self) -> None:
        await self.stop()
        await self.ctx.session.close()
        self.state.close()

    def status(self) -> dict:
        """What /v1/status shows: per log the view and how far it was read, incidents, queue."""
        logs = []
        for lw in self.logs:
            v = self.state.view(lw.name)
            logs.append({"name": lw.name, "origin": lw.origin, "url": lw.cfg.url,
                         "verified_size": v.size if v else None, "entries_read": v.read if v else None,
                         "largest_seen": lw.largest, "witnesses_and_mirrors": list(lw.prefixes)})
        reg = self.config.registry
        registry = {"url": reg.url, "dids": len(reg.dids), "commits_checked": self.state.registry_seq(reg.url) + 1} \
            if reg is not None else None
        if registry is not None and self.registry is not None and self.registry.log_list is not None:
            lst = self.registry.log_list
            now = datetime.now(UTC)
            registry["log_list"] = {"issued_at": format_utc(lst.issued_at), "logs": [
                {"origin": e.origin, "url": e.url, "state": e.state, "successor": e.successor,
                 "accept_from": format_utc(e.accept_from) if e.accept_from else None,
                 "accept_until": format_utc(e.accept_until) if e.accept_until else None,
                 "takes_entries_now": e.takes_entries_at(now)} for e in lst.logs]}
        return {"logs": logs, "registry": registry,
                "watched": sorted(self.state.watched()), "alerts": self.state.alert_count(),
                "queued": self.state.queued(),
                "incidents": [{"kind": k, "source": s, "since": since, "reason": r, "alerted": a}
                              for k, s, since, r, a in self.state.incidents()]}


def _pinned(reg: RegistryWatch, policy: TrustPolicy, path: object) -> RegistryWatch:
    """The registry with its key: the one configured, else the one the policy pins for it (a
    `registry` line with its URL, or the policy's only one)."""
    if reg.key:
        return reg
    lines = policy.policy.registries
    by_url = [r for r in lines if r.url and r.url.rstrip("/") == reg.url]
    pick = by_url or (list(lines) if len(lines) == 1 else [])
    if len(pick) != 1:
        raise ConfigError(f"registry: give key (the registry's did:key): the policy {path} pins "
                          f"{len(lines)} registries and none for {reg.url}")
    return dataclasses.replace(reg, key=pick[0].did)
