"""Fixtures of the key tests: one real SoftHSM2 token store per test process (tests/support/softhsm.py)."""
from __future__ import annotations

import pytest

from tests.support import softhsm

TOKENS = ("log", "witness", "mirror", "registry", "signer", "other")


@pytest.fixture(scope="session")
def hsm(tmp_path_factory):
    """SoftHSM2 with the tokens of TOKENS (user PIN in `hsm.pin_file`, 0600); skipped where `make
    tools` could not unpack SoftHSM2 or python-pkcs11 is not installed."""
    pytest.importorskip("pkcs11")
    if softhsm.library() is None or softhsm.util() is None:
        pytest.skip("SoftHSM2 is not in .venv/softhsm (make tools; apt-get was not available)")
    return softhsm.SoftHSM(tmp_path_factory.mktemp("softhsm"), TOKENS)
