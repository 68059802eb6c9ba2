"""`oap-log verify` serves any C2SP log: a c2sp.org/tlog-proof made by Go's sumdb/tlog for a log
Go wrote (tests/interop/tlogwrite.go, tlogproof.go), checked with the log's key (a vkey or a
policy) and the entry or its leaf hash, as C2SP tlog-proof verifiers do. The bundle's extra
line is Go's opaque data, not the entry: it is not read."""
from __future__ import annotations

import base64
import hashlib
import json
import subprocess

import pytest

from tlog.formats.keys import Signer

from tests.support.registry import BIN

pytestmark = pytest.mark.slow
CLI = str(BIN / "oap-log")


def verify(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "verify", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def foreign(go_tlogwrite, go_tlogproof, tmp_path_factory):
    """A 300-entry log written by Go, and Go's proof for its entry 257 (extra: opaque data)."""
    tmp = tmp_path_factory.mktemp("foreign")
    signer = Signer("go.example/foreign-log", bytes(range(3, 35)))
    out = subprocess.run([str(go_tlogwrite), str(tmp / "log"), signer.to_skey(), "300"], capture_output=True,
                         text=True, timeout=120)
    assert out.stdout == "OK size=300\n", out.stderr
    out = subprocess.run([str(go_tlogproof), str(tmp / "log"), signer.vkey, "257", "opaque application data"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("c2sp.org/tlog-proof@v1\nextra "), out.stderr
    (tmp / "e.tlog-proof").write_text(out.stdout)
    (tmp / "entry").write_bytes(b"go entry 257\n")  # what tlogwrite logged at 257
    (tmp / "go.policy").write_text(f"log {signer.vkey}\nquorum none\n")
    return {"dir": tmp, "vkey": signer.vkey, "bundle": str(tmp / "e.tlog-proof"), "entry": str(tmp / "entry"),
            "leaf": hashlib.sha256(b"\0go entry 257\n").digest()}


def test_a_go_proof_verifies_with_the_logs_key_and_the_entry(foreign):
    r = verify(foreign["bundle"], "--vkey", foreign["vkey"], "--entry", foreign["entry"])
    assert r.returncode == 0, r.stdout + r.stderr
    leaf = base64.b64encode(foreign["leaf"]).decode()
    assert f"OK   {foreign['bundle']}: index 257 in go.example/foreign-log at size 300 (witnesses: none required); " \
           f"leaf hash {leaf}" in r.stdout, r.stdout
    assert "1 verified, 0 failed (against the log key alone: no witness cosignature was required)" in r.stdout
    for spelling in (foreign["leaf"].hex(), leaf, base64.urlsafe_b64encode(foreign["leaf"]).decode()):
        r = verify(foreign["bundle"], "--policy", str(foreign["dir"] / "go.policy"), "--leaf-hash", spelling)
        assert r.returncode == 0 and "1 verified, 0 failed\n" in r.stdout, (spelling, r.stdout + r.stderr)
    r = verify(foreign["bundle"], "--vkey", foreign["vkey"], "--leaf-hash", leaf, "--json")
    got = json.loads(r.stdout.splitlines()[0])
    assert r.returncode == 0 and got["verdict"] == "ok" and got["logs"][0]["leaf_hash"] == leaf, r.stdout


def test_a_go_proof_fails_for_another_entry_key_or_proof_and_says_what_to_give(foreign, tmp_path):
    other = tmp_path / "other"
    other.write_bytes(b"go entry 258\n")
    r = verify(foreign["bundle"], "--vkey", foreign["vkey"], "--entry", str(other))
    assert r.returncode == 1 and "inclusion proof does not lead to the checkpoint root" in r.stdout, r.stdout
    r = verify(foreign["bundle"], "--vkey", Signer("go.example/foreign-log", bytes(32)).vkey, "--entry", foreign["entry"])
    assert r.returncode == 1 and "not signed by a log in the policy" in r.stdout, r.stdout
    lines = (foreign["dir"] / "e.tlog-proof").read_text().split("\n")
    lines[3] = ("A" if lines[3][0] != "A" else "B") + lines[3][1:]  # one of Go's proof hashes changed
    (tmp_path / "bad.tlog-proof").write_text("\n".join(lines))
    r = verify(str(tmp_path / "bad.tlog-proof"), "--vkey", foreign["vkey"], "--entry", foreign["entry"])
    assert r.returncode == 1 and "inclusion proof does not lead to the checkpoint root" in r.stdout, r.stdout
    # without the entry, the opaque extra line is no OAP entry: the failure says what to give
    r = verify(foreign["bundle"], "--vkey", foreign["vkey"])
    assert r.returncode == 1 and "a proof made by another C2SP log: name its entry with --entry" in r.stdout, r.stdout
    r = verify(foreign["bundle"], "--entry", foreign["entry"])
    assert r.returncode == 2 and "--policy" in r.stderr and "--vkey" in r.stderr
    r = verify(foreign["bundle"], "--vkey", foreign["vkey"], "--entry", foreign["entry"], "--leaf-hash", "00" * 32)
    assert r.returncode == 2 and "give one" in r.stderr
    r = verify(foreign["bundle"], "--vkey", foreign["vkey"], "--leaf-hash", "not a hash")
    assert r.returncode == 2 and "--leaf-hash must be 64 hex digits or base64 of 32 bytes" in r.stderr
