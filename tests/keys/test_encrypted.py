"""Key files encrypted with a passphrase (the age format, scrypt recipient): `oap-log encrypt-key`
writes them, every service and --key reads them like the key file they hold, the passphrase
comes from a 0600 file or the environment, and a wrong or missing one stops the start in one line.
Each encryption and decryption is a deliberate scrypt (2^18: about a second, more on a busy
machine), so the file does few (the format itself: tests/formats/test_age.py)."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from tlog.errors import ConfigError
from tlog.formats.checkpoint import Checkpoint
from tlog.formats.keys import Signer
from tlog.formats.note import sign_note
from tlog.runtime import keyfiles
from tlog.runtime.secretfiles import write_secret_bytes
from tlog.server.cli import main as log_cli
from tlog.server.service import load_or_create_key


@pytest.fixture
def passphrase_file(tmp_path, monkeypatch):
    path = tmp_path / "passphrase"
    path.write_text("correct horse battery staple\n")
    path.chmod(0o600)
    monkeypatch.setenv(keyfiles.PASSPHRASE_FILE_ENV, str(path))
    monkeypatch.delenv(keyfiles.PASSPHRASE_ENV, raising=False)
    return path


def test_encrypted_log_key_signs_as_the_key_file_did_and_refuses_a_wrong_or_missing_passphrase(
        tmp_path, passphrase_file, monkeypatch, caplog):
    plain_dir = tmp_path / "plain"
    plain = load_or_create_key(plain_dir, "enc.example/log")  # first start: a key file
    enc = tmp_path / "log.key.age"
    r = CliRunner().invoke(log_cli, ["encrypt-key", "--in", str(plain_dir / "log.key"), "--out", str(enc)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == {"encrypted": str(enc)}
    data = enc.read_bytes()
    assert data.startswith(b"-----BEGIN AGE ENCRYPTED FILE-----") and stat.S_IMODE(enc.stat().st_mode) == 0o600
    assert b"PRIVATE+KEY" not in data and plain.export_seed() not in data
    r = CliRunner().invoke(log_cli, ["encrypt-key", "--in", str(plain_dir / "log.key"), "--out", str(enc)])
    assert r.exit_code == 1 and "refusing to overwrite" in r.output

    caplog.set_level("INFO", logger="oap.keys")
    signer = load_or_create_key(plain_dir, "enc.example/log", enc)
    assert signer.vkey == plain.vkey and signer.in_process
    text = Checkpoint("enc.example/log", 3, bytes(32)).to_text()
    assert sign_note(text, [signer]) == sign_note(text, [plain])
    said = [r.getMessage() for r in caplog.records if r.name == "oap.keys"]
    assert any(f"encrypted key file (age, scrypt passphrase) {enc} (ed25519)" in m for m in said), said
    assert not any("PRIVATE+KEY" in m or "correct horse" in m for m in said)

    passphrase_file.write_text("wrong\n")
    with pytest.raises(ConfigError, match=r"cannot decrypt it \(wrong passphrase\)"):
        load_or_create_key(plain_dir, "enc.example/log", enc)
    monkeypatch.delenv(keyfiles.PASSPHRASE_FILE_ENV)
    with pytest.raises(ConfigError, match="give its passphrase in OAP_KEY_PASSPHRASE_FILE"):
        load_or_create_key(plain_dir, "enc.example/log", enc)
    monkeypatch.setenv(keyfiles.PASSPHRASE_ENV, "correct horse battery staple")  # or in the environment
    assert keyfiles.passphrase_for(enc) == b"correct horse battery staple"
    passphrase_file.chmod(0o644)
    monkeypatch.setenv(keyfiles.PASSPHRASE_FILE_ENV, str(passphrase_file))
    with pytest.raises(Exception, match="must not be readable by group or others"):
        keyfiles.read_key_text(enc)


def test_an_encrypted_witness_key_cosigns_and_an_encrypted_signer_key_signs_entries(tmp_path, passphrase_file):
    from tlog.formats.entries import canonical_entry, receipt_entry
    from witness.config import WitnessConfig
    from witness.keyfiles import load_or_create_keys

    seed = bytes(range(32))
    key = tmp_path / "me.key"
    keyfiles.write_private_key(key, Signer("me", seed).to_skey())
    enc = tmp_path / "me.key.age"
    write_secret_bytes(enc, keyfiles.encrypt_key_text(keyfiles.read_key_text(key)[0],
                                                              keyfiles.passphrase_for(enc)))
    os.unlink(key)
    opened = keyfiles.open_ed25519(enc, what="signer key")
    assert opened == seed  # a key file's seed, byte for byte
    entry = receipt_entry(bytes(32), opened)
    assert entry == receipt_entry(bytes(32), seed)
    canonical_entry(entry)  # its signature checks (did:key, offline)

    cfg = WitnessConfig(data_dir=tmp_path / "w", name="me", key_file=Path(enc), rate_limit=0)
    signers, identity = load_or_create_keys(cfg)
    assert signers[0].public == Signer("me", seed).public and signers[0].in_process
    assert isinstance(identity, bytes) and (tmp_path / "w" / "identity.key").exists()  # made on first start
