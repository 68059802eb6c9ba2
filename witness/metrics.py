"""Prometheus metrics of the witness, on a per-service registry (several witnesses
can live in one test process without colliding). Labels are bounded: routes
and statuses, origins only from the configuration and its log lists, lists only from the configuration;
never from requests."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class WitnessMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "oap_witness_http_requests_total", "HTTP requests by route and status", ["route", "status"], registry=r
        )
        self.add_checkpoint = Counter(
            "oap_witness_add_checkpoint_total", "add-checkpoint answers by status", ["status"], registry=r
        )
        self.cosign_seconds = Histogram(
            "oap_witness_cosign_latency_seconds", "add-checkpoint: body received to cosignature persisted",
            registry=r, buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )
        self.cosignatures = Counter(
            "oap_witness_cosignatures_total", "Checkpoints cosigned, per configured log", ["origin"], registry=r
        )
        self.log_size = Gauge(
            "oap_witness_log_size", "Tree size of the latest checkpoint cosigned, per configured log",
            ["origin"], registry=r,
        )
        self.sign_subtree = Counter(
            "oap_witness_sign_subtree_total", "sign-subtree answers by status", ["status"], registry=r
        )
        self.logs_followed = Gauge(
            "oap_witness_logs_followed", "Logs this witness cosigns: configured and from log lists", registry=r
        )
        self.list_fetched = Gauge(
            "oap_witness_log_list_fetched_timestamp_seconds", "When each log list was last read and accepted",
            ["list"], registry=r,
        )
        self.list_failures = Counter(
            "oap_witness_log_list_failures_total", "Log list refreshes that failed (the last good copy stays)",
            ["list"], registry=r,
        )
        self.conformance = Counter(
            "oap_witness_conformance_requests_total", "Conformance peer-witnessing answers by status",
            ["status"], registry=r,
        )
