"""What the installed tools tell a user once: a missing C extension; and the licence
the package declares is the one the repository ships."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WITHOUT_NATIVE = "import sys; sys.modules['tlog._native'] = None\n"


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_each_cli_says_once_when_the_c_extension_is_missing():
    for module in ("tlog.server.cli", "witness.cli", "registry.cli"):
        out = _run(WITHOUT_NATIVE + f"from {module} import main\nmain(['keygen', '--help'])")
        assert out.returncode == 0, out.stderr
        assert out.stderr.count("optional C extension tlog._native is not built") == 1, (module, out.stderr)
    present = _run("from tlog.server.cli import main\nmain(['keygen', '--help'])")
    from tlog.formats import hashing

    if hashing.native is not None:  # built here: nothing to say
        assert "C extension" not in present.stderr
    quiet = subprocess.run([sys.executable, "-c", WITHOUT_NATIVE + "from tlog.server.cli import main\n"
                            "main(['keygen', '--help'])"], capture_output=True, text=True, timeout=60,
                           env={"OAP_QUIET_NATIVE": "1", "PATH": "/usr/bin:/bin"})
    assert "C extension" not in quiet.stderr


def test_the_license_file_is_the_one_pyproject_declares():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "LICENSE" in meta.get("license-files", [])


def test_make_says_when_it_uses_apt_get_and_oap_no_apt_skips_it():
    """`make test` fetches promtool and Go with apt-get download (into .venv only), and
    `make bench` may install wrk: each is announced and skipped with OAP_NO_APT=1."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    commands = [line for line in text.splitlines() if not line.startswith("#")
                and ("apt-get download" in line or "apt-get install" in line)]
    assert commands
    for cmd in commands:
        assert "OAP_NO_APT" in cmd, cmd
    assert len(commands) >= 3
    assert sum("OAP_NO_APT=1 skips" in line for line in commands) >= 3
