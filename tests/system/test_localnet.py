"""`make run`'s local network: witnesses, a 2-of-3 witnessed log and the registry,
as separate processes on 127.0.0.1 (free ports), then a clean Ctrl-C."""
from __future__ import annotations

import hashlib
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from tlog.client.client import SyncLogClient
from tlog.client.verifier import TrustPolicy
from tlog.formats.ed25519 import generate_seed
from tlog.formats.entries import receipt_entry
from tlog.formats.hashing import leaf_hash
from tlog.formats.note import parse_note

from tests.support.localnet import BIN, localnet
from tests.support.mirror import wait_for

pytestmark = pytest.mark.slow


def _mirrored(prefix: str, policy: TrustPolicy) -> int:
    """The size of the mirror's copy, checked against `policy` (its cosignature); 0 before it has one."""
    try:
        with urllib.request.urlopen(prefix + "/checkpoint", timeout=10) as r:
            return policy.verify_checkpoint(r.read().decode()).checkpoint.size
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return 0
        raise


def test_local_network_end_to_end(tmp_path):
    with localnet(tmp_path / "data") as net:
        time.sleep(0.5)
        policy_text = (tmp_path / "data" / "log" / "log.policy").read_text()
        assert policy_text.count("\nwitness ") == 3 and "group local-witnesses 2 w1 w2 w3" in policy_text
        policy = TrustPolicy.from_text(policy_text)
        with SyncLogClient(net.log, policy=policy) as log:
            a = log.anchor(receipt_entry(leaf_hash(b"localnet"), generate_seed()))
        assert len(parse_note(a.checkpoint).signatures) >= 3  # log + at least 2 witnesses
        assert len(policy.verify_bundle(a.bundle).checkpoint.witnesses) >= 2
        clone = tmp_path / "clone"
        r = subprocess.run(["git", "clone", "-q", f"{net.registry}/registry.git", str(clone)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert subprocess.run(["git", "-C", str(clone), "log", "--oneline"], capture_output=True,
                              text=True).stdout.strip()
        # the mirror follows the log: its copy carries its cosignature, verified from its tiles alone
        prefix = f"{net.mirror}/{hashlib.sha256(b'oap.localhost/log').hexdigest()}"
        assert f"  mirror    {net.mirror}   mirror.localhost+" in "".join(net.lines)
        mirror_policy = TrustPolicy.from_text((tmp_path / "data" / "mirror.policy").read_text())
        wait_for("the mirror to copy the entry", lambda: _mirrored(prefix, mirror_policy) > a.index)
        audit = subprocess.run([str(BIN / "oap-log"), "audit", prefix, "--policy", str(tmp_path / "data/mirror.policy")],
                               capture_output=True, text=True, timeout=120)
        assert audit.returncode == 0 and "mirrors among them: m1" in audit.stdout, audit.stdout + audit.stderr
    time.sleep(0.2)
    assert "stopped cleanly" in "".join(net.lines[-5:])
