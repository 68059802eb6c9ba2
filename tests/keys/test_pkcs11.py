"""Signing keys in a real SoftHSM2 token (OAP-CORE-1.0 §5.3: hardware-backed keys at L3 and
above): the log, a witness, the mirror and the registry start and sign with PKCS#11 keys and
their outputs verify with the public keys; `oap-log add --key pkcs11:...` anchors a receipt whose
bundle verifies offline; a wrong PIN, a missing token, object or library fail at start in one line."""
from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from tlog.errors import ConfigError, SignatureError, Unavailable
from tlog.formats import ed25519
from tlog.formats.checkpoint import Checkpoint, parse_checkpoint
from tlog.formats.did import did_key_from_public
from tlog.formats.hashing import format_sha256, sha256
from tlog.formats.keys import CosignatureSigner, Signer, parse_vkey
from tlog.formats.note import open_note, parse_note, sign_note
from tlog.runtime import keyfiles, pkcs11
from tlog.server.cli import main as log_cli
from tlog.server.service import load_or_create_key

from tests.support.services import BIN, ORIGIN, log_service


def run(*args: str):
    return CliRunner().invoke(log_cli, list(args))


def printed(output: str, label: str) -> str:
    """The value `oap-log keygen` prints on its "<label>:" line."""
    for line in output.splitlines():
        if line.startswith(label + ":"):
            return line[len(label) + 1:].split()[0]
    raise AssertionError(f"no {label!r} line in {output!r}")


# --- the URI and its PIN -------------------------------------------------------------------


@pytest.mark.parametrize("uri, says", [
    ("pkcs11:token=a;object=b?pin-value=1234", "pin-value puts the PIN where"),
    ("pkcs11:token=a;object=b;token=c", "token given twice"),
    ("pkcs11:token=a;object=b;library-version=1", "attribute 'library-version' is not supported"),
    ("pkcs11:token=a", "name the key with object="),
    ("pkcs11:token=a;object=b;type=public", "a signing key is type=private"),
    ("pkcs11:token=a;object=b?module-name=softhsm2", "module-name is not resolved here"),
    ("pkcs11:token", "is not attribute=value"),
])
def test_uri_refusals_say_why(uri, says):
    with pytest.raises(ConfigError, match=says):
        pkcs11.parse_uri(uri)


def test_uri_values_are_percent_decoded():
    u = pkcs11.parse_uri("pkcs11:token=my%20log;object=k%3B1;id=%01%ff?module-path=/x/lib.so&pin-source=file:/p")
    assert u.path == {"token": b"my log", "object": b"k;1", "id": b"\x01\xff"}
    assert u.query == {"module-path": b"/x/lib.so", "pin-source": b"file:/p"}
    assert "01ff" in u.describe() and "my log" in u.describe()


def test_a_pin_on_the_command_line_is_refused_before_anything_runs(tmp_path):
    r = run("add", "--hash", format_sha256(bytes(32)), "--key", "pkcs11:token=a;object=b?pin-value=1",
            "--url", "http://127.0.0.1:9")
    assert r.exit_code == 2 and "pin-value puts the PIN where" in r.output


# --- start-up errors -----------------------------------------------------------------------


def test_missing_token_object_library_and_wrong_pin_fail_at_start_in_one_line(hsm, tmp_path):
    uri = hsm.uri("other", "present")
    pkcs11.generate_ed25519(uri)
    bad_pin = tmp_path / "bad.pin"
    bad_pin.write_text("0000\n")
    bad_pin.chmod(0o600)
    open_pin = tmp_path / "open.pin"
    open_pin.write_text(hsm.pin_file.read_text())
    open_pin.chmod(0o644)
    cases = [
        (hsm.uri("no-such-token", "present"), "no such token in", "tokens there: "),
        (hsm.uri("other", "absent"), "no private key with that label/id in the token", "'other'"),
        (hsm.uri("other", "present", pin_file=open_pin), "must not be readable by group or others", "pin-source"),
        (uri.replace(str(hsm.lib).replace("/", "%2F") if "%2F" in uri else str(hsm.lib), "/nonexistent/lib.so"),
         "no such file", "/nonexistent/lib.so"),
    ]
    for ref, says, names in cases:
        with pytest.raises(ConfigError) as e:
            load_or_create_key(tmp_path / "data", "a.example/log", Path(ref))
        message = str(e.value)
        assert says in message and names in message and "\n" not in message, message
        assert hsm.pin_file.read_text().strip() not in message
    # a wrong PIN, in a process of its own (a process logs in to a token once, for all its keys):
    # `oap-log serve` stops at start with one line
    for extra in ([], ["--origin", "c.example/log"]):
        done = subprocess.run([str(BIN / "oap-log"), "serve", "--data", str(tmp_path / "c"), "--port", "0", *extra],
                              env={**hsm.env, "OAP_LOG_KEY_FILE": hsm.uri("other", "present", pin_file=bad_pin)},
                              capture_output=True, text=True, timeout=120)
        lines = [x for x in done.stderr.splitlines() if x.startswith("error:")]
        assert done.returncode != 0 and len(lines) == 1 and "the PIN is incorrect" in lines[0], done.stderr
        assert "Traceback" not in done.stderr and "0000" not in done.stderr + done.stdout


def test_a_token_without_ml_dsa_is_refused_for_the_ml_dsa_key_and_the_file_key_named(hsm, tmp_path):
    with pytest.raises(ConfigError, match=r"does not support ML-DSA \(CKM_ML_DSA\); keep the ML-DSA-44 key in a file"):
        keyfiles.open_key(hsm.uri("other", "present-mldsa"), what="witness mldsa44 key", kind="mldsa44")


def test_an_ed25519_key_of_another_log_is_refused_when_the_log_has_a_key(hsm, tmp_path):
    data = tmp_path / "data"
    file_signer = load_or_create_key(data, "b.example/log")  # a log with a file key
    other = hsm.uri("other", "not-the-log-key")
    pkcs11.generate_ed25519(other)
    with pytest.raises(ConfigError, match="is not this log's key"):
        load_or_create_key(data, "b.example/log", Path(other))
    # its own key moved into the token is accepted: same verifier key, same signatures
    moved = hsm.uri("other", "b-log-key")
    r = run("keygen", "--name", "b.example/log", "--out", moved, "--import", str(data / "log.key"))
    assert r.exit_code == 0 and printed(r.output, "verifier key") == file_signer.vkey, r.output
    assert printed(r.output, "did:key") == did_key_from_public(file_signer.public)
    token_signer = load_or_create_key(data, "b.example/log", Path(moved))
    assert token_signer.vkey == file_signer.vkey and not token_signer.in_process
    text = Checkpoint("b.example/log", 1, bytes(32)).to_text()
    assert sign_note(text, [token_signer]) == sign_note(text, [file_signer])  # Ed25519 is deterministic
    r = run("keygen", "--name", "b.example/log", "--out", moved)
    assert r.exit_code == 1 and "already holds an object with that label" in r.output


# --- the services --------------------------------------------------------------------------


def test_log_signs_in_the_token_and_add_with_a_token_key_verifies_offline(hsm, tmp_path, started):
    log_key = hsm.uri("log", "checkpoints")
    r = run("keygen", "--name", ORIGIN, "--out", log_key)
    assert r.exit_code == 0, r.output
    vkey = printed(r.output, "verifier key")
    data = tmp_path / "data"
    svc = started(log_service(data, "--batch-interval-ms", "5", env={**hsm.env, "OAP_LOG_KEY_FILE": log_key}))
    assert svc.vkey == vkey
    out = svc.log_text
    assert "log key for origin oap.localhost/log: PKCS#11 token 'log', object 'checkpoints' (ed25519, signs inside " \
           "the token)" in out
    assert hsm.pin_file.read_text().strip() not in out
    assert not (data / "log.key").exists() and (data / "log.vkey").read_text().strip() == vkey

    me = hsm.uri("signer", "me")
    r = run("keygen", "--name", "me", "--out", me)
    assert r.exit_code == 0, r.output
    me_public = parse_vkey(printed(r.output, "verifier key")).public
    bundle = tmp_path / "r.tlog-proof"
    digest = sha256(b"a receipt")
    r = run("add", "--hash", format_sha256(digest), "--key", me, "--url", svc.url, "--policy", str(data / "log.policy"),
            "--out", str(bundle))
    assert r.exit_code == 0, r.output
    r = run("verify", str(bundle), "--policy", str(data / "log.policy"), "--json")
    assert r.exit_code == 0, r.output
    verdict = json.loads(r.output.splitlines()[0])
    assert verdict["ok"] and verdict["signature_checked"] is True
    # the entry's signature is the token key's, and the checkpoint's is the log's token key
    text = bundle.read_text()
    note = parse_note(text[text.index(ORIGIN + "\n"):])
    _, verified = open_note(str(note), [parse_vkey(vkey)])
    assert [v.verifier.name for v in verified] == [ORIGIN]
    assert parse_checkpoint(note.text).size >= 1
    ed25519.verify(me_public, digest, pkcs11.open_signer(me).sign(digest))


def test_witness_cosigns_and_identity_signs_with_token_keys(hsm, tmp_path):
    import asyncio

    from witness.config import WitnessConfig, WitnessedLog
    from witness.service import WitnessService

    from tests.support.witness import MemLog

    cosigning, identity = hsm.uri("witness", "cosigning"), hsm.uri("witness", "identity")
    pkcs11.generate_ed25519(cosigning)
    identity_public = pkcs11.generate_ed25519(identity)
    log = MemLog().grow(10)
    cfg = WitnessConfig(data_dir=tmp_path / "w", name="witness.example", key_file=Path(cosigning),
                        identity_key_file=Path(identity), logs=(WitnessedLog(log.origin, log.vkey),), rate_limit=0)
    cfg.validate()
    svc = WitnessService.open(cfg)
    try:
        signer = svc.signers[0]
        assert isinstance(signer, CosignatureSigner) and not signer.in_process

        async def submit():
            return [await svc.witness.submit(log.body(0, 4)), await svc.witness.submit(log.body(4, 10))]

        done = asyncio.run(submit())
        for cosigned in done:
            _, verified = open_note(cosigned.note, [parse_vkey(log.vkey), signer.verifier])
            assert {v.verifier.name for v in verified} == {log.origin, "witness.example"}
        assert not (tmp_path / "w" / "witness.key").exists()  # nothing written in place of the token key
    finally:
        svc.close()
    # the identity key signs conformance receipts: its did:key is the token key's
    assert svc.peer.did == did_key_from_public(identity_public)


def test_mirror_cosigns_with_a_token_key_and_refuses_a_token_ml_dsa_key(hsm, tmp_path):
    from witness.mirror.config import MirrorConfig
    from witness.mirror.service import MirrorService

    key = hsm.uri("mirror", "cosigning")
    pkcs11.generate_ed25519(key)
    cfg = MirrorConfig(data_dir=tmp_path / "m", name="mirror.example", key_file=Path(key), rate_limit=0)
    cfg.validate()
    svc = MirrorService.open(cfg)
    try:
        signer = svc.signers[0]
        assert not signer.in_process
        text = Checkpoint("some.log/origin", 5, sha256(b"root")).to_text()
        line = CosignatureSigner.cosign(signer, text, 1_700_000_000)
        assert signer.verifier.verify(text.encode(), line) == 1_700_000_000
    finally:
        svc.close()
    bad = MirrorConfig(data_dir=tmp_path / "m2", name="mirror.example", key_file=Path(key),
                       mldsa_key_file=Path(hsm.uri("mirror", "pq")), cosigners=("ed25519", "mldsa44"), rate_limit=0)
    with pytest.raises(ConfigError, match="does not support ML-DSA"):
        MirrorService.open(bad)


async def test_registry_anchors_and_signs_statuses_with_a_token_key(hsm, tmp_path, server):
    from registry.client import did_of, make_revocation

    from tests.support.registry import cli_status, post, start_registry

    log = server("--batch-interval-ms", "5", data=tmp_path / "log")
    key = hsm.uri("registry", "registry-key")
    public = pkcs11.generate_ed25519(key)
    reg = await start_registry(tmp_path / "reg", log, key_file=Path(key), epoch_seconds=3600)
    try:
        assert reg.svc.registry == did_key_from_public(public)
        assert not (tmp_path / "reg" / "registry.key").exists()
        # a participant revokes its own key, signing the record in the token
        participant = hsm.uri("signer", "participant")
        pkcs11.generate_ed25519(participant)
        token_key = keyfiles.open_ed25519(participant, what="record signing key")
        body = await post(reg, make_revocation(token_key, kind="key", subject=did_of(token_key)))
        assert body["seq"] >= 1
        code, verdict = await cli_status(reg, did_of(token_key), tmp_path)  # verified with the registry's key
        assert code == 3 and verdict["status"] == "revoked", verdict
    finally:
        await reg.stop()


# --- sessions and threads ------------------------------------------------------------------


def test_many_threads_sign_through_one_token_key_and_every_signature_verifies(hsm):
    uri = hsm.uri("other", "threads")
    public = pkcs11.generate_ed25519(uri)
    signer = pkcs11.open_signer(uri)
    assert pkcs11.open_signer(uri).public == public  # a second open shares the logged-in session
    bad: list[int] = []

    def work(k: int) -> None:
        for i in range(40):
            msg = f"{k}:{i}".encode()
            try:
                ed25519.verify(public, msg, signer.sign(msg))
            except (SignatureError, Unavailable):
                bad.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not bad and not any(t.is_alive() for t in threads)
    assert "PIN" not in repr(signer) and repr(signer).startswith("TokenSigner(PKCS#11 token 'other'")
    with pytest.raises(TypeError):
        __import__("pickle").dumps(signer)
    assert Signer("x", signer).in_process is False
