"""The registry's key rotated in place, end to end with real processes on 127.0.0.1
(docs/architecture.md §3.9, ops/runbooks/key-rotation.md "Registry key"): a registry
anchoring in a real log moves from key A to key B with `oap-registry rotate-key`; status
answers made before, during and after are verified by `oap-registry status` pinned to A; a
verifying mirror follows the rotation without a restart; the whole history replays from
genesis across it (`oap-registry rebuild`, `oap-registry verify`); a rotation not signed by A
is refused by the registry, by clients and by replay.
"""
from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from registry.keyrotation import parse_rotation
from tlog.formats.canonical import jcs
from tlog.formats.encoding import b64enc
from tlog.formats.keys import ed25519_signer
from tlog.runtime import keyfiles

from tests.support.alertsinks import free_port
from tests.support.services import BIN, Service, log_service, registry_service
from tests.system.test_rotation import cli

pytestmark = pytest.mark.slow


def keygen(path: Path) -> str:
    return cli("oap-registry", "keygen", "--out", str(path)).stdout.strip().split()[-1]


def until(cond, what: str, seconds: float = 120.0):
    """Poll `cond` until it is true (the bound only keeps a broken build from hanging)."""
    deadline = time.monotonic() + seconds
    while not (got := cond()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return got


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def status(did: str, pin: str, log_vkey: str, *args: str) -> tuple[int, dict]:
    p = cli("oap-registry", "status", did, "--registry-key", pin, "--log-vkey", log_vkey, "--json", *args, ok=False)
    assert p.returncode in (0, 1, 3, 4, 5), p.stdout + p.stderr
    return p.returncode, json.loads(p.stdout.strip().splitlines()[-1])


def forged_rotations(good: dict, thief: Path) -> dict:
    """The registry's rotations document with the first statement re-signed by a key that is
    not the one it hands over from (a thief's, or a new key's holder alone)."""
    doc = json.loads(json.dumps(good))
    st = doc["rotations"][0]
    seed = keyfiles.open_ed25519(thief, what="key")
    st["signature"] = b64enc(ed25519_signer(seed).sign(jcs({k: v for k, v in st.items()
                                                            if k not in ("signature", "countersignature")})))
    return doc


def test_registry_key_rotation(tmp_path):
    log = log_service(tmp_path / "log").start()
    key_a, key_b, thief = tmp_path / "a.key", tmp_path / "b.key", tmp_path / "x.key"
    a, b, x = keygen(key_a), keygen(key_b), keygen(thief)
    alice, bob = tmp_path / "alice.key", tmp_path / "bob.key"
    alice_did, bob_did = keygen(alice), keygen(bob)
    data = tmp_path / "reg"
    fast = ("--epoch-seconds", "300", "--anchor-idle-seconds", "1", "--port", str(free_port()))  # one URL throughout
    reg = registry_service(data, log.url, "--key", str(key_a), *fast).start()
    mirror = None
    try:
        url = reg.url
        cli("oap-registry", "revoke", "--key", str(alice), "--kind", "did", "--reason", "superseded", "--url", url)
        until(lambda: status(alice_did, a, log.vkey, "--url", url)[0] == 3, what="alice's revocation answered")

        # Before: answers signed by A, verified pinned to A; saved for later.
        before = tmp_path / "before.json"
        code, v = status(alice_did, a, log.vkey, "--url", url, "--out", str(before))
        assert (code, v["valid"], v["status"]) == (3, True, "revoked")
        assert json.loads(before.read_text())["epoch"]["registry"] == a

        mirror = Service("mirror", [str(BIN / "oap-registry"), "serve", "--data", str(tmp_path / "mirror"),
                                    "--port", "0", "--upstream", url, "--registry-key", a,
                                    "--mirror-interval", "0.2"]).start()
        until(lambda: (get(mirror.url + "/v1/info")["head"] or {}).get("seq") == get(url + "/v1/info")["head"]["seq"],
              what="the mirror caught up")
        mirror_pid = mirror.pid

        # Rotate: the registry stopped, the statement signed by A and countersigned by B.
        assert reg.stop() == 0, reg.log_text
        refused = cli("oap-registry", "rotate-key", "--data", str(data), "--key", str(thief), "--new-key", str(key_b),
                      ok=False)
        assert refused.returncode == 2 and "not the key in force" in refused.stderr + refused.stdout
        out = cli("oap-registry", "rotate-key", "--data", str(data), "--key", str(key_a), "--new-key",
                  str(key_b)).stdout
        assert f"{a} -> {b}" in out
        prepared = (data / "key-rotation.json").read_bytes()
        assert parse_rotation(prepared).previous == a
        # A forged hand-over in the data directory (signed by the thief, not A): refused at start.
        (data / "key-rotation.json").write_text(json.dumps(forged_rotations({"rotations": [json.loads(prepared)]},
                                                                            thief)["rotations"][0]))
        bad = registry_service(data, log.url, "--key", str(key_b), *fast)
        with pytest.raises(RuntimeError, match="signature is not by"):
            bad.start()
        (data / "key-rotation.json").write_bytes(prepared)
        reg = registry_service(data, log.url, "--key", str(key_b), *fast).start()
        url = reg.url
        info = get(url + "/v1/info")
        assert (info["registry"], info["key"], info["key_rotations"], info["status_service"]) == (a, b, 1, b)
        assert not (data / "key-rotation.json").exists()
        rotations = get(url + "/v1/key-rotations")
        assert [r["key"] for r in rotations["rotations"]] == [b] and rotations["registry"] == a

        # During: the answer A signed before the rotation still verifies until its next_update, the
        # new answers signed by B verify for a client pinned to A (it follows the rotation) ...
        (tmp_path / "rotations.json").write_text(json.dumps(rotations))
        saved = ("--offline", "--key-rotations", str(tmp_path / "rotations.json"), "--id", alice_did)
        code, v = status(str(before), a, log.vkey, *saved)
        assert (code, v["status"]) == (3, "revoked")
        until(lambda: get(url + f"/v1/status/{alice_did}")["epoch"]["registry"] == b, what="an epoch signed by B")
        code, v = status(alice_did, a, log.vkey, "--url", url)
        assert (code, v["valid"], v["status"]) == (3, True, "revoked")
        # ... a record committed after the rotation (anchored by B) proves a revocation too ...
        cli("oap-registry", "revoke", "--key", str(bob), "--kind", "did", "--reason", "superseded", "--url", url)
        until(lambda: status(bob_did, a, log.vkey, "--url", url)[0] == 3, what="bob's revocation, pinned to A")
        code, v = status(bob_did, b, log.vkey, "--url", url)  # and for a client that pins B
        assert (code, v["status"]) == (3, "revoked")
        # ... and nothing is accepted from B without A's hand-over: no rotations, or forged ones.
        after = tmp_path / "after.json"
        status(bob_did, b, log.vkey, "--url", url, "--out", str(after))
        code, v = status(str(after), a, log.vkey, "--offline", "--id", bob_did)
        assert code == 1 and not v["valid"]
        (tmp_path / "forged.json").write_text(json.dumps(forged_rotations(rotations, key_b)))
        code, v = status(str(after), a, log.vkey, "--offline", "--id", bob_did, "--key-rotations",
                         str(tmp_path / "forged.json"))
        assert code == 1 and "signature is not by" in v["error"]

        # The mirror follows without a restart, verifying every commit across the rotation.
        head = get(url + "/v1/info")["head"]["seq"]
        until(lambda: (get(mirror.url + "/v1/info")["head"] or {}).get("seq", -1) >= head,
              what=f"the mirror followed the rotation:\n{mirror.log_text[-3000:]}")
        assert mirror.pid == mirror_pid and mirror.alive()
        assert get(mirror.url + "/v1/key-rotations") == rotations
        assert get(mirror.url + "/v1/info")["key"] == b

        # History replays from genesis across the rotation, against the log.
        rebuilt = tmp_path / "rebuilt"
        cli("oap-registry", "rebuild", "--from", url, "--data", str(rebuilt), "--registry-key", a,
            "--log-vkey", log.vkey, "--quiet")
        p = cli("oap-registry", "verify", str(rebuilt / "registry.git"), "--registry-key", a, "--log-vkey", log.vkey,
                "--url", url)
        assert "commit" in p.stdout + p.stderr

        # The old key no longer runs the registry.
        reg.stop()
        old = registry_service(data, log.url, "--key", str(key_a), *fast)
        with pytest.raises(RuntimeError, match="signing with"):
            old.start()
        assert x not in (a, b)
    finally:
        for svc in (mirror, reg, log):
            if svc is not None:
                svc.kill()
