"""The two places the project relies on a library's private attributes, because no
public API does the job, each pinned in pyproject.toml to the range tested here.
These tests fail loudly when an upgrade changes what they rely on:

- aiohttp's TCPSite (`tlog.http.fastpath.FastSite`): the fast path needs to own the
  protocol of each accepted connection, which no public API of aiohttp allows;
- prometheus_client's Histogram children (`tlog.http.metrics.RequestMetrics.record_many`):
  there is no bulk observe, and one observe per value would cost the loop ~2 us each.
"""
from __future__ import annotations

import asyncio
import socket

import numpy as np
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram

from tlog.http.fastpath import FastSite
from tlog.http.metrics import RequestMetrics


async def test_aiohttp_tcpsite_still_has_what_fastsite_reads_and_sets():
    runner = web.AppRunner(web.Application(), handle_signals=False)
    await runner.setup()
    try:
        site = FastSite(runner, "127.0.0.1", 0, routes=None, timeout=5.0)
        for name in ("_runner", "_host", "_port", "_ssl_context", "_backlog", "_reuse_address", "_reuse_port"):
            assert hasattr(site, name), f"aiohttp.web.TCPSite no longer has {name}: update tlog.http.fastpath"
        from tlog.http.fastpath import FastRoutes

        fast = FastSite(runner, "127.0.0.1", 0, routes=FastRoutes({}), timeout=5.0)
        await fast.start()
        port = fast._bound_port
        assert port and runner.addresses and runner.addresses[0][1] == port  # aiohttp sees our server
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        await fast.stop()
        await asyncio.sleep(0)
        probe = socket.socket()
        probe.bind(("127.0.0.1", port))  # the listener is gone
        probe.close()
    finally:
        await runner.cleanup()


def test_prometheus_histogram_children_still_have_what_record_many_adds_to():
    reg = CollectorRegistry()
    hist = Histogram("h_seconds", "h", ["route"], registry=reg)
    child = hist.labels("/x")
    for name in ("_upper_bounds", "_buckets", "_sum"):
        assert hasattr(child, name), f"prometheus_client Histogram no longer has {name}: update RequestMetrics"
    assert len(child._upper_bounds) == len(child._buckets)
    # and the bulk path gives exactly what one observe per value gives
    one = Histogram("one_seconds", "h", ["route"], registry=reg)
    counter = Counter("c", "c", ["route", "status"], registry=reg)
    m = RequestMetrics(counter, hist)
    secs = np.random.default_rng(1).exponential(0.01, 500)
    m.record_many("/x", 200, secs)
    for s in secs.tolist():
        one.labels("/x").observe(s)
    def samples(prefix: str) -> dict:
        return {(x.name.removeprefix(prefix), x.labels.get("le")): x.value for metric in reg.collect()
                for x in metric.samples if x.name.startswith(prefix) and not x.name.endswith("_created")}

    got, want = samples("h_seconds"), samples("one_seconds")
    assert len(got) > 10 and got.keys() == want.keys()
    assert all(abs(got[k] - want[k]) < 1e-9 for k in got)
