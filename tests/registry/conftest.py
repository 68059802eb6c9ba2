"""Fixtures of the registry tests (helpers: tests/support/registry.py)."""
from __future__ import annotations

import pytest

from tests.support.services import ServerProcess


@pytest.fixture(scope="module")
def log_server(tmp_path_factory):
    """A real `oap-log serve` process per test module: registries anchor in it."""
    p = ServerProcess(tmp_path_factory.mktemp("log") / "data", "--batch-interval-ms", "5").start()
    yield p
    p.kill()
