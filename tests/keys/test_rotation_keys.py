"""A log's key rotation to and from keys of any kind (docs/architecture.md §3.9): a key file,
and a key in a real SoftHSM2 token, go through the one key-loading function (`load_signers`,
`keyfiles.open_key`), and data/log.vkey follows the key the log is configured with."""
from __future__ import annotations

from pathlib import Path

import pytest

from tlog.errors import ConfigError
from tlog.formats.checkpoint import Checkpoint
from tlog.formats.keys import Signer, parse_vkey
from tlog.formats.note import open_note, sign_note
from tlog.runtime import keyfiles, pkcs11
from tlog.server.config import LogConfig
from tlog.server.service import load_signers

ORIGIN = "rotating.example/log"


def config(data: Path, key: str | Path, *extra: str | Path) -> LogConfig:
    return LogConfig(data_dir=data, origin=ORIGIN, key_file=Path(key), extra_key_files=tuple(map(str, extra)))


def test_a_file_key_rotates_to_a_token_key_and_back_to_one_key(hsm, tmp_path):
    data, a = tmp_path / "data", tmp_path / "a.key"
    keyfiles.write_private_key(a, Signer.generate(ORIGIN).to_skey())
    (va,) = (s.vkey for s in load_signers(config(data, a)))
    b = hsm.uri("log", "rotated-to")
    pkcs11.generate_ed25519(b)
    vb = Signer(ORIGIN, pkcs11.open_signer(b)).vkey

    # the overlap: A is the log's key, B (in the token) signs too; one text, both signatures
    signers = load_signers(config(data, a, b))
    assert [s.vkey for s in signers] == [va, vb] and not signers[1].in_process
    note = sign_note(Checkpoint(ORIGIN, 1, bytes(32)).to_text(), signers)
    for v in (va, vb):
        assert len(open_note(note, [parse_vkey(v)])[1]) == 1
    assert (data / "log.vkey").read_text().strip() == va

    # B becomes the log's key: data/log.vkey named A, which is among the log's keys, so the
    # token key is accepted and data/log.vkey now names it
    assert [s.vkey for s in load_signers(config(data, b, a))] == [vb, va]
    assert (data / "log.vkey").read_text().strip() == vb
    assert [s.vkey for s in load_signers(config(data, b))] == [vb]  # the overlap is over

    # a token key the log never named is refused, as before any rotation
    stranger = hsm.uri("log", "stranger")
    pkcs11.generate_ed25519(stranger)
    with pytest.raises(ConfigError, match="is not this log's key"):
        load_signers(config(data, stranger))


def test_extra_keys_of_another_origin_or_the_logs_own_key_are_refused(tmp_path):
    data, a, other = tmp_path / "data", tmp_path / "a.key", tmp_path / "other.key"
    keyfiles.write_private_key(a, Signer.generate(ORIGIN).to_skey())
    keyfiles.write_private_key(other, Signer.generate("other.example/log").to_skey())
    with pytest.raises(ConfigError, match=r"is the key of origin 'other\.example/log'"):
        load_signers(config(data, a, other))
    with pytest.raises(ConfigError, match="each key signs once"):
        load_signers(config(data, a, a))
    with pytest.raises(ConfigError, match="no key file"):
        load_signers(config(data, a, tmp_path / "missing.key"))
    with pytest.raises(ConfigError, match="at most 4 keys, each once"):
        config(data, a, other, other).validate()
