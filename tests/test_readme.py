"""The README's five-minute tour runs as written (against a server on a free port)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
README = Path(__file__).resolve().parent.parent / "README.md"


def tour_script() -> str:
    text = README.read_text()
    section = text.split("## Five-minute tour", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert blocks, "the tour has no shell block"
    return "\n".join(blocks)


def test_readme_tour(server, tmp_path):
    srv = server(data=tmp_path / "data")
    port = srv.url.rsplit(":", 1)[1]
    script = tour_script().replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    env = {**os.environ, "OAP_LOG_URL": srv.url, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("1 verified, 0 failed") == 2
    assert "c2sp.org/tlog-proof@v1" in r.stdout
    assert (tmp_path / "privileged.tlog-proof.salt.json").exists()
