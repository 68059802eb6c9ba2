"""`oap-log` commands: keygen, add (receipt, hash, commitment), prove, info, verify."""
from __future__ import annotations

import json
import os
import stat

from click.testing import CliRunner

from tlog.formats.did import did_key_from_public
from tlog.formats.encoding import b64dec
from tlog.formats.keys import Signer
from tlog.server.cli import main

from tests.support.didhosts import Key, did_key, invocation_receipt, sign_receipt


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_keygen_mode_0600_no_overwrite_no_secret_printed(tmp_path):
    key = tmp_path / "me.key"
    r = run("keygen", "--name", "me.example", "--out", str(key))
    assert r.exit_code == 0
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    signer = Signer.from_skey(key.read_text().strip())
    did = did_key_from_public(signer.public)
    # the identity the tour calls it (the did:key its receipt entries name), and the verifier key
    assert r.output.startswith(f"did:key:      {did} ") and "PRIVATE" not in r.output, r.output
    assert f"\nverifier key: {signer.vkey} " in r.output
    assert (tmp_path / "me.key.did").read_text() == did + "\n"
    assert (tmp_path / "me.key.vkey").read_text() == signer.vkey + "\n"
    again = run("keygen", "--name", "me.example", "--out", str(key))
    assert again.exit_code != 0 and "refusing to overwrite" in again.output
    os.chmod(key, 0o644)
    receipt = tmp_path / "r.json"
    receipt.write_text("{}")
    r = run("add", str(receipt), "--key", str(key), "--url", "http://127.0.0.1:9")
    assert r.exit_code != 0 and "chmod 600" in r.output


def test_add_prove_verify_roundtrip(server, tmp_path):
    srv = server()
    policy = srv.data / "log.policy"
    key = tmp_path / "me.key"
    run("keygen", "--name", "me", "--out", str(key))
    receipt = tmp_path / "receipt.json"
    agent, tool = Key(), Key()
    receipt.write_text(json.dumps(sign_receipt(invocation_receipt(did_key(agent), did_key(tool)),
                                               (did_key(agent), agent), (did_key(tool), tool))))
    r = run("add", str(receipt), "--key", str(key), "--url", srv.url)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output.strip().splitlines()[-1])
    bundle = tmp_path / "receipt.json.tlog-proof"
    assert out["index"] == 0 and bundle.exists()
    ok = run("verify", str(bundle), "--policy", str(policy), "--receipt", str(receipt))
    assert ok.exit_code == 0 and "1 verified, 0 failed" in ok.output
    # the entry is signed by the did:key keygen printed (and wrote beside the key)
    assert f"signed by {(tmp_path / 'me.key.did').read_text().strip()}" in ok.output, ok.output

    other = tmp_path / "other.json"
    other.write_text('{"receipt_id": "urn:oap:receipt:other"}')
    bad = run("verify", str(bundle), "--policy", str(policy), "--receipt", str(other))
    assert bad.exit_code == 1 and "anchors a different receipt" in bad.output

    # privileged mode: only a salted commitment leaves the machine
    r = run("add", str(receipt), "--commitment", "--url", srv.url, "--out", str(tmp_path / "c.tlog-proof"))
    assert r.exit_code == 0, r.output
    salt = tmp_path / "c.tlog-proof.salt.json"
    assert stat.S_IMODE(os.stat(salt).st_mode) == 0o600
    proof_text = (tmp_path / "c.tlog-proof").read_text()
    extra = b64dec(proof_text.splitlines()[1].split()[1])
    assert b"urn:oap" not in extra and b"did:" not in extra  # nothing identifying in the entry
    ok = run("verify", str(tmp_path / "c.tlog-proof"), "--policy", str(policy), "--receipt", str(receipt),
             "--salt", str(salt))
    assert ok.exit_code == 0, ok.output

    r = run("add", "--hash", "sha256:" + "cd" * 32, "--key", str(key), "--url", srv.url,
            "--out", str(tmp_path / "h.tlog-proof"))
    assert r.exit_code == 0 and json.loads(r.output)["index"] == 2

    r = run("prove", "0", "--url", srv.url, "--out", str(tmp_path / "fresh.tlog-proof"))
    assert r.exit_code == 0
    ok = run("verify", str(tmp_path / "fresh.tlog-proof"), "--policy", str(policy), "--receipt", str(receipt))
    assert ok.exit_code == 0 and "at size 3" in ok.output

    info = json.loads(run("info", "--url", srv.url).output)
    assert info["tree_size"] == 3 and info["verifier_key"] == srv.vkey


def test_verify_reports_each_failure(server, tmp_path):
    srv = server()
    policy = srv.data / "log.policy"
    key = tmp_path / "k.key"
    run("keygen", "--name", "k", "--out", str(key))
    paths = []
    for i in range(25):  # > 20 bundles: progress bar mode
        p = tmp_path / f"b{i}.tlog-proof"
        r = run("add", "--hash", "sha256:" + f"{i:064x}", "--key", str(key), "--url", srv.url, "--out", str(p))
        assert r.exit_code == 0, r.output
        paths.append(p)
    ok = run("verify", *map(str, paths), "--policy", str(policy))
    assert ok.exit_code == 0 and "25 verified, 0 failed" in ok.output

    text = paths[3].read_text().splitlines(keepends=True)
    h = text[3]  # first proof hash (index line is line 2)
    tampered = tmp_path / "tampered.tlog-proof"
    tampered.write_text("".join([*text[:3], ("A" if h[0] != "A" else "B") + h[1:], *text[4:]]))
    garbage = tmp_path / "garbage.tlog-proof"
    garbage.write_text("not a proof\n")
    other_key = tmp_path / "other.policy"
    other = Signer.generate("oap.localhost/log")
    other_key.write_text(f"log {other.vkey}\n")
    r = run("verify", str(paths[0]), str(tampered), str(garbage), str(tmp_path / "missing"), "--policy", str(policy))
    assert r.exit_code == 1
    assert "3 failed" in r.output
    assert "inclusion proof" in r.output and "tlog-proof" in r.output and "cannot read" in r.output
    r = run("verify", str(paths[0]), "--policy", str(other_key))
    assert r.exit_code == 1 and "not signed by a log in the policy" in r.output
    quorum = tmp_path / "quorum.policy"
    w = Signer.generate("witness.example")
    quorum.write_text(f"log {srv.vkey}\nwitness w1 {w.vkey}\nquorum w1\n")
    r = run("verify", str(paths[0]), "--policy", str(quorum))
    assert r.exit_code == 1 and "quorum not met" in r.output
