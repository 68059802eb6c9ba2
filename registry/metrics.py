"""Prometheus metrics of a registry or mirror, on a per-service registry."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class RegistryMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.records = Counter("oap_registry_records_total", "Records committed", ["type"], registry=r)
        self.rejected = Counter("oap_registry_records_rejected_total", "Submissions refused", ["code"], registry=r)
        self.commits = Counter("oap_registry_commits_total", "Registry commits anchored and published", registry=r)
        self.batch_size = Histogram("oap_registry_batch_records", "Records per commit", registry=r,
                                    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000))
        self.commit_seconds = Histogram("oap_registry_commit_seconds", "Validate, commit, anchor, publish", registry=r,
                                        buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.anchor_failures = Counter("oap_registry_anchor_failures_total", "Log anchoring failures, by log",
                                       ["log"], registry=r)
        self.log_backlog = Gauge("oap_registry_log_backlog_commits",
                                 "Published commits a log does not hold yet (caught up when it answers)", ["log"],
                                 registry=r)
        self.head_seq = Gauge("oap_registry_head_seq", "Seq of the published head commit", registry=r)
        self.epoch = Gauge("oap_registry_status_epoch", "Current status epoch", registry=r)
        self.revoked = Gauge("oap_registry_revoked_ids", "Revoked or suspended ids in the current epoch", registry=r)
        self.status_responses = Counter("oap_registry_status_responses_total", "Status responses served",
                                        ["status"], registry=r)
        self.mirror_refusals = Counter("oap_registry_mirror_refusals_total",
                                       "Upstream updates refused (rewrite, bad record, bad anchor)", ["reason"],
                                       registry=r)
        self.mirror_commits = Counter("oap_registry_mirror_commits_verified_total", "Upstream commits verified",
                                      registry=r)
        self.mirror_lag = Gauge("oap_registry_mirror_lag_commits", "Upstream commits not yet verified here",
                                registry=r)
        self.mirror_last_sync = Gauge("oap_registry_mirror_last_success_timestamp_seconds",
                                      "Time of the last successful sync", registry=r)
        self.requests = Counter("oap_registry_http_requests_total", "HTTP requests by route and status",
                                ["route", "status"], registry=r)
        self.request_seconds = Histogram("oap_registry_http_request_seconds", "HTTP request latency", ["route"],
                                         registry=r)
