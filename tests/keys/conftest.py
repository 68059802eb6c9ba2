"""Fixtures of the key tests: one real SoftHSM2 token store per test process (tests/support/softhsm.py)."""
from __future__ import annotations

import pytest

from tests.support import softhsm
from tests.support.tools import need

TOKENS = ("log", "witness", "mirror", "registry", "signer", "other")


@pytest.fixture(scope="session")
def hsm(tmp_path_factory):
    """SoftHSM2 with the tokens of TOKENS (user PIN in `hsm.pin_file`, 0600); skipped where `make
    tools` could not unpack SoftHSM2 or python-pkcs11 is not installed (failed under
    OAP_REQUIRE_ALL_TOOLS: tests.support.tools)."""
    need("softhsm")
    return softhsm.SoftHSM(tmp_path_factory.mktemp("softhsm"), TOKENS)
