"""Prometheus metrics of the mirror, on a per-service registry. Labels are bounded: routes,
statuses, and origins only from the configuration, never from requests."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class MirrorMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "oap_mirror_http_requests_total", "HTTP requests by route and status", ["route", "status"], registry=r)
        self.add_checkpoint = Counter(
            "oap_mirror_add_checkpoint_total", "add-checkpoint answers by status", ["status"], registry=r)
        self.add_entries = Counter(
            "oap_mirror_add_entries_total", "add-entries answers by status", ["status"], registry=r)
        self.sign_subtree = Counter(
            "oap_mirror_sign_subtree_total", "sign-subtree answers by status", ["status"], registry=r)
        self.entries_received = Counter(
            "oap_mirror_entries_received_total", "Entries in authenticated packages, per log", ["origin"],
            registry=r)
        self.entries_stored = Counter(
            "oap_mirror_entries_stored_total", "Entries stored (received and new), per log", ["origin"], registry=r)
        self.upload_seconds = Histogram(
            "oap_mirror_add_entries_seconds", "add-entries: request received to answer", registry=r,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
        self.pending_size = Gauge(
            "oap_mirror_pending_size", "Tree size of the pending checkpoint, per log", ["origin"], registry=r)
        self.next_entry = Gauge(
            "oap_mirror_next_entry", "Entries stored (the next entry), per log", ["origin"], registry=r)
        self.mirror_size = Gauge(
            "oap_mirror_size", "Tree size of the mirror checkpoint (cosigned), per log", ["origin"], registry=r)
        self.uploads = Gauge("oap_mirror_uploads_in_progress", "add-entries streams being processed", registry=r)
