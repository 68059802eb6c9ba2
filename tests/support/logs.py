"""An in-process log on 127.0.0.1 (its real aiohttp app in a TestServer), for tests that
drive the log's own service object beside its HTTP API."""
from __future__ import annotations

import os
from pathlib import Path

from aiohttp.test_utils import TestServer

from tlog.client.client import LogClient
from tlog.formats.entries import commitment_entry
from tlog.server.api import build_app
from tlog.server.config import LogConfig
from tlog.server.service import LogService


async def open_test_log(tmp: Path, *, origin: str, **kw) -> tuple[LogService, TestServer, str]:
    """The service, its server and its URL; no rate limits, 5 ms batches."""
    cfg = LogConfig(data_dir=tmp / "log", port=0, origin=origin, batch_interval_ms=5, rate_limit_write=0,
                    rate_limit_read=0, **kw)
    svc = await LogService.open(cfg)
    server = TestServer(build_app(svc), host="127.0.0.1", port=0)
    await server.start_server()
    return svc, server, str(server.make_url("")).rstrip("/")


async def grow(url: str, n: int) -> int:
    """Anchor `n` fresh commitments through the HTTP API; the tree size after."""
    async with LogClient(url) as c:
        for i in range(0, n, 250):
            await c.anchor_many([commitment_entry(os.urandom(32)) for _ in range(min(250, n - i))])
        return (await c.info())["tree_size"]
