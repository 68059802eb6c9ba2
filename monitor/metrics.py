"""Prometheus metrics of the monitor, on a per-service registry. Labels are bounded: log and
registry names and sinks from the configuration, alert kinds and entry kinds from fixed lists."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class MonitorMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "oap_monitor_http_requests_total", "HTTP requests to the monitor by route and status", ["route", "status"],
            registry=r)
        self.checkpoint_size = Gauge(
            "oap_monitor_checkpoint_size", "Tree size of the largest checkpoint seen, per log", ["log"], registry=r)
        self.verified_size = Gauge(
            "oap_monitor_verified_size", "Tree size of the verified view (checkpoint proven consistent), per log",
            ["log"], registry=r)
        self.entries_read = Gauge(
            "oap_monitor_entries_read", "Entries read, hashed and parsed (the next entry to read), per log", ["log"],
            registry=r)
        self.entries = Counter(
            "oap_monitor_entries_total", "Entries read, by kind (commitment, receipt, conformance, registry, opaque)",
            ["log", "kind"], registry=r)
        self.tiles_checked = Counter(
            "oap_monitor_tiles_checked_total", "Full hash tiles compared with the hashes computed from the entries",
            ["log"], registry=r)
        self.passes = Counter(
            "oap_monitor_passes_total", "Passes over a log or registry by result (ok, unreachable, invalid)",
            ["source", "result"], registry=r)
        self.last_ok = Gauge(
            "oap_monitor_last_success_timestamp_seconds", "When a pass over a log or registry last succeeded",
            ["source"], registry=r)
        self.pass_seconds = Histogram(
            "oap_monitor_pass_seconds", "Duration of a pass over a log", ["log"], registry=r,
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800))
        self.views = Counter(
            "oap_monitor_views_total", "Checkpoints read from witnesses, mirrors and anchors, by result "
            "(consistent, ahead, split, unsigned, unreachable)", ["log", "result"], registry=r)
        self.alerts = Counter("oap_monitor_alerts_total", "Alerts raised, by kind", ["kind"], registry=r)
        self.queued = Gauge("oap_monitor_deliveries_queued", "Alert deliveries waiting, per sink", ["sink"], registry=r)
        self.deliveries = Counter(
            "oap_monitor_deliveries_total", "Delivery attempts, per sink and result (ok, failed)", ["sink", "result"],
            registry=r)
        self.status_events = Counter(
            "oap_monitor_status_answers_total", "Registry status answers received, by result (verified, refused)",
            ["result"], registry=r)
        self.incidents = Gauge(
            "oap_monitor_incidents", "Health incidents open (unreachable, invalid, behind)", ["kind"], registry=r)
