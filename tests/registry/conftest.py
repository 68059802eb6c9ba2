"""Fixtures of the registry tests (helpers: tests/support/registry.py)."""
from __future__ import annotations

import pytest

from tests.support.registry import start_registry
from tests.support.services import ServerProcess


@pytest.fixture(scope="module")
def log_server(tmp_path_factory):
    """A real `oap-log serve` process per test module: registries anchor in it."""
    p = ServerProcess(tmp_path_factory.mktemp("log") / "data", "--batch-interval-ms", "5").start()
    yield p
    p.kill()


@pytest.fixture
async def reg(tmp_path, log_server):
    """A registry anchoring in the module's log, with hour-long epochs: the status tests
    see each change by the epoch a commit triggers, never by the timer."""
    r = await start_registry(tmp_path / "reg", log_server, epoch_seconds=3600)
    yield r
    await r.stop()
