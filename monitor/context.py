"""What the log and registry watchers share with the service: the state, the metrics, the HTTP
session, where alerts go, and the health incidents (unreachable, invalid, behind)."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tlog.transport import Outbound

from . import alerts
from .metrics import MonitorMetrics
from .state import NewAlert, State

log = logging.getLogger("oap.monitor")

Targets = Callable[[], Sequence[tuple[str, str, str]]]


@dataclass
class Context:
    state: State
    metrics: MonitorMetrics
    session: aiohttp.ClientSession
    outbound: Outbound  # how peers are reached (tlog.transport): the registry client's, the mail server's
    targets: Targets  # (sink, target, kinds) of every delivery an alert raised now gets
    timeout: float
    window: int
    unreachable_after: float
    behind_after: float
    refresh_journals: Callable[[], None]
    raised: Callable[[Sequence[str]], None]  # wakes the deliveries; counts the alerts
    clock: Callable[[], float] = field(default=time.time)

    def raise_alerts(self, new: Sequence[NewAlert]) -> list[str]:
        ids = self.state.raise_alerts(new, self.targets()) if new else []
        self.raised(ids)
        return ids

    def problem(self, kind: str, key: str, source: dict[str, Any], what: str, reason: str, after: float) -> list[str]:
        """A health problem seen now: an incident opens (or goes on); once it has lasted
        `after` seconds it is one alert, the only one until it ends."""
        now = self.clock()
        since = self.state.open_incident(kind, key, reason, now)
        inc = self.state.incident(kind, key)
        if inc is None or inc[2] or now - since < after:
            return []
        ids = self.state.raise_incident_alert(kind, key, alerts.health(kind, source, what, since, reason),
                                              self.targets())
        self.raised(ids)
        return ids

    def cleared(self, kind: str, key: str) -> None:
        if self.state.close_incident(kind, key):
            log.info("%s: %s is over", key, kind)
