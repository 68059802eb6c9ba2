"""`make run`'s local network: witnesses (the first with an ML-DSA-44 key too), a 2-of-3
witnessed log and the registry, as separate processes on 127.0.0.1 (free ports), then a
clean Ctrl-C."""
from __future__ import annotations

import hashlib
import json
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
from tlog.formats.note import open_note, parse_note
from witness.core import origin_path

from tests.support.localnet import BIN, localnet
from tests.support.mirror import wait_for

pytestmark = pytest.mark.slow


def _witness_checkpoint(url: str, timeout: float = 60) -> str:
    """The witness's latest cosigned checkpoint, waiting (bounded) until it has one."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.read().decode()
        except urllib.error.HTTPError as e:
            if e.code != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


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
        assert policy_text.count("\nwitness ") == 4 and "\nwitness w1-mldsa44 witness-1.localhost+" in policy_text
        assert "group w1-any any w1 w1-mldsa44" in policy_text
        assert "group local-witnesses 2 w1-any w2 w3" in policy_text
        policy = TrustPolicy.from_text(policy_text)
        with SyncLogClient(net.log, policy=policy) as log:
            a = log.anchor(receipt_entry(leaf_hash(b"localnet"), generate_seed()))
        assert len(parse_note(a.checkpoint).signatures) >= 3  # log + at least 2 witnesses
        verified = policy.verify_bundle(a.bundle).checkpoint
        assert len({n.split("-")[0] for n in verified.witnesses}) >= 2  # two distinct witnesses
        # witness 1's copy carries its Ed25519 and its ML-DSA-44 cosignatures, both verifying
        w1 = _witness_checkpoint(f"{net.witness}/{origin_path('oap.localhost/log')}/checkpoint")
        _, sigs = open_note(w1, policy.witnesses["w1"] + policy.witnesses["w1-mldsa44"])
        assert sorted(len(s.signature.blob) for s in sigs) == [72, 2428]
        # every explorer page finds the others (the log names them) and ships the network's policy
        info = json.loads(urllib.request.urlopen(f"{net.log}/v1/info", timeout=10).read())
        copy = f"{net.mirror}/{hashlib.sha256(b'oap.localhost/log').hexdigest()}"  # the mirror's copy of the log
        assert (info["public_url"], info["registry_url"], info["mirrors"]) == (net.log, net.registry, [copy])
        # one row per witness key: witness 1's ML-DSA-44 key has the same URL as its Ed25519 key
        assert [w["url"] for w in info["witnesses"]] == [f"http://127.0.0.1:{net.base + i}" for i in (1, 1, 2, 3)]
        for service in (net.log, net.registry, net.witness):
            with urllib.request.urlopen(f"{service}/ui/trust.policy", timeout=10) as r:
                assert r.read().decode() == policy_text, service
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
