"""Fixtures shared by the test directories: `server`, a real `oap-log serve` process."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.services import ServerProcess


@pytest.fixture
def server(tmp_path):
    procs: list[ServerProcess] = []

    def start(*extra: str, data: Path | None = None) -> ServerProcess:
        p = ServerProcess(data or tmp_path / "data", *extra).start()
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()
