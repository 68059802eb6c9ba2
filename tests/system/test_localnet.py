"""`make run`'s local network: witnesses, a 2-of-3 witnessed log and the registry,
as separate processes on 127.0.0.1 (free ports), then a clean Ctrl-C."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tlog.client.client import SyncLogClient
from tlog.client.verifier import TrustPolicy
from tlog.formats.ed25519 import generate_seed
from tlog.formats.entries import receipt_entry
from tlog.formats.hashing import leaf_hash
from tlog.formats.note import parse_note

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def test_local_network_end_to_end(tmp_path):
    base = random.randrange(20000, 40000, 10)
    proc = subprocess.Popen([str(BIN / "oap-localnet"), "--data", str(tmp_path / "data"), "--log-port", str(base),
                             "--registry-port", str(base + 9)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    lines: list[str] = []
    up = threading.Event()

    def read():
        for line in proc.stdout:
            lines.append(line)
            if "network is up" in line:
                up.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert up.wait(90), "".join(lines[-30:])
        time.sleep(0.5)
        policy_text = (tmp_path / "data" / "log" / "log.policy").read_text()
        assert policy_text.count("\nwitness ") == 3 and "group local-witnesses 2 w1 w2 w3" in policy_text
        policy = TrustPolicy.from_text(policy_text)
        with SyncLogClient(f"http://127.0.0.1:{base}", policy=policy) as log:
            a = log.anchor(receipt_entry(leaf_hash(b"localnet"), generate_seed()))
        assert len(parse_note(a.checkpoint).signatures) >= 3  # log + at least 2 witnesses
        assert len(policy.verify_bundle(a.bundle).checkpoint.witnesses) >= 2
        clone = tmp_path / "clone"
        r = subprocess.run(["git", "clone", "-q", f"http://127.0.0.1:{base + 9}/registry.git", str(clone)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert subprocess.run(["git", "-C", str(clone), "log", "--oneline"], capture_output=True,
                              text=True).stdout.strip()
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(60)
    time.sleep(0.2)
    assert "stopped cleanly" in "".join(lines[-5:])
