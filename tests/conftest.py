"""Fixtures shared by the test directories: `server`, a real `oap-log serve` process, and
`hash_impl`, which runs a batch-hashing test once per implementation."""
from __future__ import annotations

from pathlib import Path

import pytest

from tlog.formats import hashing

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


@pytest.fixture(params=["native", "hashlib"])
def hash_impl(request, monkeypatch):
    """Run a test through the C batch hashing and again through hashlib alone."""
    if request.param == "hashlib":
        monkeypatch.setattr(hashing, "native", None)
    elif hashing.native is None:
        pytest.skip("tlog._native is not built here")
    return request.param
