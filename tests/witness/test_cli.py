"""oap-witness keygen / config loading / serve startup."""
from __future__ import annotations

import os
import stat
import subprocess

import pytest
from click.testing import CliRunner

from tlog.errors import ConfigError
from tlog.formats.keys import CosignatureSigner, parse_vkey
from tlog.runtime.config import load
from tlog.runtime.keyfiles import read_private_key
from witness.cli import main
from witness.config import WitnessConfig, WitnessedLog

from tests.support.witness import BIN, V4_ORIGIN, V4_VKEY, MemLog, WitnessProcess, write_config


def test_keygen_makes_0600_keys_and_prints_only_the_vkey(tmp_path):
    res = CliRunner().invoke(main, ["keygen", "--name", "witness.example.org", "--data", str(tmp_path)])
    assert res.exit_code == 0, res.output
    vkey = res.stdout.strip()
    v = parse_vkey(vkey)
    assert v.name == "witness.example.org" and v.key_type == 0x04
    for name in ("witness.key", "identity.key"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o600
    skey = read_private_key(tmp_path / "witness.key")
    assert CosignatureSigner.from_skey(skey).vkey == vkey
    assert "PRIVATE" not in res.output and skey.split("+", 4)[4] not in res.output
    assert (tmp_path / "witness.vkey").read_text().strip() == vkey
    assert "identity: did:key:z6Mk" in res.stderr
    again = CliRunner().invoke(main, ["keygen", "--name", "witness.example.org", "--data", str(tmp_path)])
    assert again.exit_code != 0 and "refusing to overwrite" in again.output
    assert read_private_key(tmp_path / "witness.key") == skey


def test_keygen_rejects_a_bad_name(tmp_path):
    res = CliRunner().invoke(main, ["keygen", "--name", "bad name", "--data", str(tmp_path)])
    assert res.exit_code != 0 and not (tmp_path / "witness.key").exists()


def test_config_from_toml(tmp_path):
    log = MemLog()
    path = write_config(tmp_path / "w.toml", tmp_path / "d",
                        [WitnessedLog(V4_ORIGIN, V4_VKEY), WitnessedLog(log.origin, log.vkey, "http://127.0.0.1:1")],
                        trusted_logs=[log.vkey], require_own_level="L5", port=9000)
    cfg = load(WitnessConfig, section="witness", env_prefix="OAP_WITNESS_", file=path)
    assert cfg.logs == (WitnessedLog(V4_ORIGIN, V4_VKEY), WitnessedLog(log.origin, log.vkey, "http://127.0.0.1:1"))
    assert (cfg.port, cfg.name, cfg.require_own_level, cfg.trusted_logs) == (9000, "w.test", "L5", (log.vkey,))
    assert cfg.key_path == tmp_path / "d" / "witness.key" and cfg.state_path == tmp_path / "d" / "witness.db"
    assert cfg.trust_policy_text() == f"log {log.vkey}\nquorum none\n"
    flags = load(WitnessConfig, section="witness", env_prefix="OAP_WITNESS_", file=path, port=7000)
    assert flags.port == 7000


@pytest.mark.parametrize("logs,extra,fragment", [
    ('[[witness.logs]]\norigin = "a"\nvkey = "nope"\n', "", "vkey"),
    ('[[witness.logs]]\norigin = "x"\nvkey = "VKEY"\n[[witness.logs]]\norigin = "x"\nvkey = "VKEY"\n', "", "twice"),
    ('[[witness.logs]]\norigin = "x"\nvkey = "VKEY"\nkey = "y"\n', "", "unknown"),
    ('[[witness.logs]]\norigin = "x"\nvkey = "VKEY"\nurl = "ftp://x"\n', "", "url"),
    ("", 'require_own_level = "L3"\n', "require_own_level"),
    ("", 'trusted_logs = ["VKEY"]\ntrust_policy = "p"\n', "not both"),
    ("", "max_body = 10\n", "max_body"),
    ("", "colour = 1\n", "unknown setting"),
    ("", 'name = "a b"\n', "name"),
    ("", 'logs = "x"\n', "logs"),
    ("", 'identity_did = "did:web:w.example"\n', "must name the identity key"),
    ("", 'identity_did = "not a did#k"\n', "not a DID URL"),
    ("", 'registry_url = "https://registry.example"\n', "registry_url and registry_key go together"),
    ("", 'registry_url = "ftp://r"\nregistry_key = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"\n',
     "registry_url must be"),
    ("", 'registry_url = "https://r.example"\nregistry_key = "did:web:r.example"\n', "registry_key"),
    ("", 'registry_logs = ["nope"]\n', "registry_logs"),
])
def test_bad_config_fails(tmp_path, logs, extra, fragment):
    vkey = MemLog().vkey
    (tmp_path / "p").write_text(f"log {vkey}\n")
    path = tmp_path / "w.toml"
    path.write_text(("[witness]\n" + extra + "\n" + logs).replace("VKEY", vkey))
    with pytest.raises(ConfigError) as e:
        load(WitnessConfig, section="witness", env_prefix="OAP_WITNESS_", file=path)
    assert fragment in str(e.value)


def test_the_registry_it_consults_is_an_upstream_and_its_logs_default_to_the_trusted_ones(tmp_path):
    log, other = MemLog(), MemLog(origin="other.example/log")
    key = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
    cfg = WitnessConfig(data_dir=tmp_path, trusted_logs=(log.vkey,), registry_url="https://registry.example",
                        registry_key=key, identity_did="did:web:w.example#key-1")
    cfg.validate()
    assert ("registry_url", "https://registry.example") in list(cfg.upstream_urls())
    assert cfg.registry_policy_text() == cfg.trust_policy_text() == f"log {log.vkey}\nquorum none\n"
    own = cfg.replace(registry_logs=(other.vkey,))
    assert own.registry_policy_text() == f"log {other.vkey}\nquorum none\n"
    # §8.1: plain HTTP to a registry beyond loopback is refused like any upstream
    with pytest.raises(ConfigError, match="registry_url"):
        WitnessConfig(data_dir=tmp_path, registry_url="http://registry.example", registry_key=key).validate()


def test_serve_refuses_without_key_or_name(tmp_path):
    path = tmp_path / "w.toml"
    path.write_text(f'[witness]\ndata_dir = "{tmp_path / "d"}"\n')
    out = subprocess.run([str(BIN / "oap-witness"), "serve", "--config", str(path), "--port", "0"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "oap-witness keygen" in out.stderr


def test_serve_makes_its_key_on_first_start_and_keeps_it(tmp_path):
    cfg = write_config(tmp_path / "w.toml", tmp_path / "d", [WitnessedLog(V4_ORIGIN, V4_VKEY)])
    p = WitnessProcess(cfg).start()
    first = p.vkey
    assert p.stop() == 0
    assert stat.S_IMODE(os.stat(tmp_path / "d" / "witness.key").st_mode) == 0o600
    p = WitnessProcess(cfg).start()
    assert p.vkey == first and parse_vkey(first).name == "w.test"
    assert p.stop() == 0
    # A different configured name for an existing key is refused, not silently used.
    other = write_config(tmp_path / "o.toml", tmp_path / "d", [], name="someone.else")
    out = subprocess.run([str(BIN / "oap-witness"), "serve", "--config", str(other), "--port", "0"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "someone.else" in out.stderr
