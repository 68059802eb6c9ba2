"""Fixtures of the witness and mirror tests."""
from __future__ import annotations

import pytest


@pytest.fixture
def started():
    """Start a `tests.support.services.Service` (killed at the end of the test): start(svc) -> svc."""
    services = []

    def start(svc):
        services.append(svc.start())
        return svc

    yield start
    for s in services:
        s.kill()
