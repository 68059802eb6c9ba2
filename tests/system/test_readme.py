"""The README's five-minute tour runs as written, against `make run`'s local network
(on free ports: the tour's 8080-8083/8090 are rewritten)."""
from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
README = Path(__file__).resolve().parents[2] / "README.md"
BIN = Path(sys.executable).parent


def tour_script() -> str:
    section = README.read_text().split("## Five-minute tour", 1)[1].split("### Run a witness", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert blocks, "the tour has no shell block"
    return "\n".join(blocks)


def test_readme_tour(tmp_path):
    base = random.randrange(20000, 40000, 10)
    net = subprocess.Popen([str(BIN / "oap-localnet"), "--data", str(tmp_path / "data"), "--log-port", str(base),
                            "--registry-port", str(base + 9)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, start_new_session=True, cwd=tmp_path)
    up = threading.Event()
    lines: list[str] = []

    def read():
        for line in net.stdout:
            lines.append(line)
            if "network is up" in line:
                up.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert up.wait(90), "".join(lines[-30:])
        script = tour_script()
        for old, new in (("8090", base + 9), ("8080", base), ("8081", base + 1)):
            script = script.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}")
        env = {**os.environ, "OAP_LOG_URL": f"http://127.0.0.1:{base}", "OAP_REGISTRY_URL": f"http://127.0.0.1:{base + 9}",
               "PATH": f"{BIN}:{os.environ['PATH']}"}
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        out = r.stdout + r.stderr
        assert out.count("1 verified, 0 failed") == 2
        assert "(witnesses: w1, w2, w3)" in out or "(witnesses: w1, w2)" in out or "witnesses: w" in out
        assert (tmp_path / "privileged.tlog-proof.salt.json").exists()
        assert (tmp_path / "status.json").exists() and '"revoked"' in (tmp_path / "status.json").read_text()
        assert (tmp_path / "registry-clone" / ".git").exists()
    finally:
        os.killpg(net.pid, signal.SIGINT)
        net.wait(60)
