"""`make test` runs the tests on two pytest-xdist workers. A worker is a process that
pytest starts and nothing else watches: killed with -9, the pytest it belongs to would
leave it running, and with it every server its tests started (those die with their own
parent, the worker). So each worker dies with the pytest that started it."""
from __future__ import annotations

import os
import signal

import pytest

from tlog.runtime import children


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        children.die_with_parent(signal.SIGKILL)
