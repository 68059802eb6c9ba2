"""`make test` runs the tests on pytest-xdist workers. A worker whose pytest is killed
with -9 would end only when execnet notices, 5 to 15 s later (SIGINT, then os._exit),
and a test that ignores SIGINT would keep its servers until then. So each worker dies
with the pytest that started it, at once, whatever its test is doing."""
from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from tlog.runtime import children

_PID_KEY = "oap_pytest_pid"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """In pytest, before it starts a worker: tell the worker whose child it is."""
    node.workerinput[_PID_KEY] = os.getpid()


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)  # set on xdist workers only
    if workerinput is not None and _PID_KEY in workerinput:
        # The pid pytest had: if it died before this point, the worker ends now.
        children.die_with_parent(signal.SIGKILL, parent=int(workerinput[_PID_KEY]))
