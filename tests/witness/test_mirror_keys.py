"""The mirror's cosigning keys: Ed25519 and/or ML-DSA-44 (`cosigners`), loaded and made on
first start by the witness's code (one name, 0600), and `oap-mirror keygen --mldsa44`."""
from __future__ import annotations

import subprocess

import pytest

from tlog.errors import ConfigError
from tlog.formats.keys import COSIGNATURE_MLDSA44, COSIGNATURE_V1, CosignatureSigner, MLDSACosigner, parse_vkey
from tlog.runtime.keyfiles import write_cosigner
from witness.mirror.config import MirrorConfig
from witness.mirror.keys import load_or_create_keys

from tests.support.localnet import BIN


@pytest.mark.parametrize("kinds", [(), ("ed25519", "ed25519"), ("rsa",)])
def test_bad_cosigners_are_refused(tmp_path, kinds):
    with pytest.raises(ConfigError, match="cosigners"):
        MirrorConfig(data_dir=tmp_path, name="m.example", cosigners=kinds).validate()


def test_an_mldsa44_key_joins_an_existing_ed25519_key_under_its_name(tmp_path):
    ed = CosignatureSigner.generate("m.example")
    write_cosigner(tmp_path / "mirror.key", ed)
    cfg = MirrorConfig(data_dir=tmp_path, cosigners=("ed25519", "mldsa44"))  # no name: the key file names it
    cfg.validate()
    a, b = load_or_create_keys(cfg)
    assert a.vkey == ed.vkey and isinstance(b, MLDSACosigner) and b.name == "m.example"
    assert (tmp_path / "mirror-mldsa44.key").stat().st_mode & 0o777 == 0o600
    assert parse_vkey((tmp_path / "mirror-mldsa44.vkey").read_text().strip()).public == b.public
    again = load_or_create_keys(cfg)  # read back, not made again
    assert [s.vkey for s in again] == [a.vkey, b.vkey]
    (only,) = load_or_create_keys(MirrorConfig(data_dir=tmp_path, cosigners=("mldsa44",)))
    assert only.vkey == b.vkey
    with pytest.raises(ConfigError, match=r"but name 'other\.example' is configured"):
        load_or_create_keys(MirrorConfig(data_dir=tmp_path, name="other.example", cosigners=("ed25519", "mldsa44")))


def test_keygen_mldsa44_makes_the_second_key(tmp_path):
    def keygen(*extra: str) -> str:
        r = subprocess.run([str(BIN / "oap-mirror"), "keygen", "--name", "m.example", "--data", str(tmp_path), *extra],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    ed, pq = parse_vkey(keygen()), parse_vkey(keygen("--mldsa44"))
    assert (ed.name, pq.name, pq.key_type) == ("m.example", "m.example", COSIGNATURE_MLDSA44)
    assert ed.key_type in (0x01, COSIGNATURE_V1)
    assert (tmp_path / "mirror-mldsa44.key").stat().st_mode & 0o777 == 0o600
    r = subprocess.run([str(BIN / "oap-mirror"), "keygen", "--name", "m.example", "--data", str(tmp_path), "--mldsa44"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "refusing to overwrite" in r.stderr + r.stdout
