"""Request metrics shared by the services (Prometheus)."""
from __future__ import annotations

from aiohttp import web


class RequestMetrics:
    """Per-route request counts and seconds for the error middleware (`on_request`) and the
    fast path (`record`); labelled children are looked up once, since labels() is slow."""

    def __init__(self, requests, seconds=None) -> None:
        """`requests` a Counter by (route, status); `seconds`, optional, a Histogram by route."""
        self._requests, self._seconds = requests, seconds
        self._children: dict[tuple[str, int], tuple] = {}

    def record(self, route: str, status: int, seconds: float) -> None:
        c = self._children.get((route, status)) or self._child(route, status)
        c[0].inc()
        if c[1] is not None:
            c[1].observe(seconds)

    def _child(self, route: str, status: int) -> tuple:
        c = self._children[(route, status)] = (
            self._requests.labels(route, str(status)),
            self._seconds.labels(route) if self._seconds is not None else None)
        return c

    def record_many(self, route: str, status: int, seconds) -> None:
        """`record` for many requests at once (a read worker's report, `tlog.server.readworkers`).

        prometheus_client has no bulk observe; one observe per request would cost the
        log's loop ~2 us each, in a burst per report. So the histogram's buckets are
        counted with numpy and added to its child's bucket values, as observe() would
        (tests compare the exposition with one observe per value). Without those
        internals, it falls back to observe().
        """
        import numpy as np

        secs = np.asarray(seconds, dtype=np.float64)
        if not secs.size:
            return
        counter, hist = self._children.get((route, status)) or self._child(route, status)
        counter.inc(secs.size)
        if hist is None:
            return
        bounds = getattr(hist, "_upper_bounds", None)
        buckets, total = getattr(hist, "_buckets", None), getattr(hist, "_sum", None)
        if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
            for s in secs.tolist():
                hist.observe(s)
            return
        counts = np.bincount(np.searchsorted(np.asarray(bounds, dtype=np.float64), secs, side="left"),
                             minlength=len(bounds) + 1)
        total.inc(float(secs.sum()))
        for i in np.flatnonzero(counts[: len(bounds)]).tolist():
            buckets[i].inc(int(counts[i]))

    def on_request(self, request: web.Request, status: int, seconds: float) -> None:
        resource = request.match_info.route.resource
        self.record(resource.canonical if resource else "unmatched", status, seconds)
