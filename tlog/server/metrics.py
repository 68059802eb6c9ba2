"""Prometheus metrics of the log, on a per-service registry (several services
can live in one test process without colliding)."""
from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tlog.server.appender import Appender
from tlog.server.mirroring import MirrorSet
from tlog.server.publication import BucketTarget


def _bucket_lag(appender: Appender, bucket: BucketTarget) -> int:
    state = appender.state
    if not appender.integrating or not appender.published or state is None or bucket.size < 0:
        return 0
    return max(0, state.size - bucket.size)


class LogMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.tree_size = Gauge("oap_log_tree_size", "Entries in the latest published checkpoint", registry=r)
        self.entries = Counter("oap_log_entries_appended_total", "New entries made durable", registry=r)
        self.duplicates = Counter("oap_log_entries_duplicate_total", "Submissions already in the log", registry=r)
        self.batch_size = Histogram(
            "oap_log_batch_size", "Submissions per sequenced batch", registry=r,
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000),
        )
        self.batch_seconds = Histogram(
            "oap_log_batch_commit_seconds", "Time from sequencing a batch to publishing a checkpoint covering it",
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )
        self.append_seconds = Histogram(
            "oap_log_append_latency_seconds", "Submission to durable acknowledgement", registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.proofs = Counter("oap_log_proofs_served_total", "Inclusion and consistency proofs served", ["kind"],
                              registry=r)
        self.requests = Counter(
            "oap_log_http_requests_total", "HTTP requests by route and status", ["route", "status"], registry=r
        )
        self.cosign_seconds = Histogram(
            "oap_log_witness_cosign_seconds", "Time to collect witness cosignatures for one checkpoint", registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.witness_results = Counter(
            "oap_log_witness_cosignatures_total", "Checkpoint pushes by witness and result", ["witness", "result"],
            registry=r,
        )
        self.request_seconds = Histogram("oap_log_http_request_seconds", "HTTP request latency", ["route"], registry=r)

    def watch(self, appender: Appender) -> None:
        """Gauges read from the appender at scrape time: whether this frontend holds the
        integrator role, how far publication lags the sequence, how often the role was lost,
        and the bucket's writes when the log is published to one."""
        r = self.registry
        Gauge("oap_log_integrator", "1 on the frontend that holds the integrator role", registry=r) \
            .set_function(lambda: float(appender.integrating))
        Gauge("oap_log_integration_lag_entries", "Entries sequenced but not yet in a published checkpoint "
              "(as this frontend last saw it)", registry=r).set_function(lambda: float(appender.lag))
        Gauge("oap_log_integrator_role_lost_total", "Times this frontend lost the integrator role", registry=r) \
            .set_function(lambda: float(appender.lost_role))
        bucket = next((t for t in appender.targets if isinstance(t, BucketTarget)), None)
        if bucket is not None:
            Gauge("oap_log_bucket_write_errors_total", "Failed bucket operations (tiles, bundles, checkpoint, "
                  "listings and deletes of partial tiles)", registry=r).set_function(lambda: float(bucket.errors))
            Gauge("oap_log_bucket_objects_written_total", "Tiles and bundles created in the bucket", registry=r) \
                .set_function(lambda: float(bucket.written))
            Gauge("oap_log_bucket_lag_entries", "Entries of the published checkpoint the bucket's checkpoint does not "
                  "cover yet (on the integrator; 0 on other frontends)", registry=r) \
                .set_function(lambda: float(_bucket_lag(appender, bucket)))

    def watch_mirrors(self, mirrors: MirrorSet | None, appender: Appender) -> None:
        """Per mirror, read at scrape time: what it last cosigned, how far that is behind the
        published checkpoint (on the frontend that pushes: the integrator; 0 elsewhere), and
        its pushes, failures and entries sent. Declared with no mirror too, so alert rules and
        dashboards name metrics that always exist."""
        self.registry.register(_MirrorCollector(mirrors, appender))


class _MirrorCollector(Collector):
    def __init__(self, mirrors: MirrorSet | None, appender: Appender) -> None:
        self.mirrors, self.appender = mirrors, appender

    def collect(self) -> Iterator[Metric]:
        size = GaugeMetricFamily("oap_log_mirror_cosigned_size", "Tree size of the mirror's last cosignature "
                                 "(it stored every entry below it)", labels=["mirror"])
        lag = GaugeMetricFamily("oap_log_mirror_lag_entries", "Entries of the published checkpoint the mirror has "
                                "not cosigned yet (on the integrator; 0 on other frontends)", labels=["mirror"])
        pushes = CounterMetricFamily("oap_log_mirror_pushes", "Pushes that ended in a verified cosignature",
                                     labels=["mirror"])
        failures = CounterMetricFamily("oap_log_mirror_push_failures", "Pushes that failed (unreachable, refused, "
                                       "no valid cosignature); each is retried with backoff", labels=["mirror"])
        sent = CounterMetricFamily("oap_log_mirror_entries_sent", "Entries the mirror stored from this log's pushes",
                                   labels=["mirror"])
        app = self.appender
        published = app.state.size if app.published and app.state is not None and app.integrating else 0
        for t in self.mirrors.targets if self.mirrors is not None else ():
            size.add_metric([t.name], max(0, t.cosigned_size))
            lag.add_metric([t.name], max(0, published - max(0, t.cosigned_size)) if published else 0)
            pushes.add_metric([t.name], t.pushes)
            failures.add_metric([t.name], t.failures)
            sent.add_metric([t.name], t.sent)
        yield from (size, lag, pushes, failures, sent)
