"""The log's mirror settings: `[[log.mirrors]]` from TOML, what validate() refuses, and the
client policy the log writes for them (mirror lines outside the quorum)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tlog.client.verifier import TrustPolicy
from tlog.errors import ConfigError
from tlog.formats.keys import CosignatureSigner, Signer
from tlog.formats.policy import parse_policy
from tlog.runtime.config import load
from tlog.server.config import LogConfig
from tlog.server.service import client_policy

MIRROR = CosignatureSigner.generate("mirror.example").vkey
WITNESS = CosignatureSigner.generate("w.example").vkey


def cfg(tmp: Path, **kw) -> LogConfig:
    return LogConfig(data_dir=tmp / "log", **kw)


def test_mirrors_load_from_toml_tables(tmp_path):
    f = tmp_path / "log.toml"
    f.write_text(f'[log]\ndata_dir = "{tmp_path}/log"\nmirror_timeout = 30\n'
                 f'[[log.mirrors]]\nname = "m1"\nvkey = "{MIRROR}"\nurl = "https://mirror.example/sub"\n')
    c = load(LogConfig, section="log", env_prefix="OAP_LOG_", file=f)
    assert c.mirrors == (("m1", MIRROR, "https://mirror.example/sub"),) and c.mirror_timeout == 30
    assert ("mirror", "https://mirror.example/sub") in list(c.upstream_urls())


@pytest.mark.parametrize("kw, words", [
    ({"mirrors": (("m1", MIRROR, ""),)}, "url"),
    ({"mirrors": (("m1", MIRROR, "https://m.example/"),)}, "url"),
    ({"mirrors": (("m1", MIRROR, "ftp://m.example"),)}, "url"),
    ({"mirrors": (("m1", "not a vkey", "https://m.example"),)}, "mirror 'm1'"),
    ({"mirrors": (("m1", MIRROR, "https://a.example"), ("m1", MIRROR, "https://b.example"))}, "unique"),
    ({"mirrors": (("w1", MIRROR, "https://a.example"),), "witnesses": (("w1", WITNESS, "https://w.example"),)},
     "unique"),
    ({"mirrors": tuple((f"m{i}", MIRROR, f"https://m{i}.example") for i in range(33))}, "at most 32"),
    ({"mirrors": (("m1", MIRROR, "https://m.example"),), "mirror_timeout": 0.5}, "mirror_timeout"),
    ({"mirrors": (("m1", MIRROR, "https://m.example"),), "mirror_timeout": 601}, "mirror_timeout"),
])
def test_bad_mirror_settings_are_refused(tmp_path, kw, words):
    with pytest.raises(ConfigError) as e:
        cfg(tmp_path, **kw).validate()
    assert words in str(e.value)


def test_mirrors_beside_a_witness_policy_are_refused(tmp_path):
    policy = tmp_path / "p"
    policy.write_text(f"witness w1 {WITNESS} https://w.example\nquorum w1\n")
    with pytest.raises(ConfigError) as e:
        cfg(tmp_path, witness_policy=policy, mirrors=(("m1", MIRROR, "https://m.example"),)).validate()
    assert "mirror <name> <vkey> <url>" in str(e.value)


def test_the_client_policy_lists_mirrors_outside_the_quorum(tmp_path):
    signer = Signer.generate("example.org/log")
    c = cfg(tmp_path, origin="example.org/log", witnesses=(("w1", WITNESS, "https://w.example"),), witness_quorum=1,
            mirrors=(("m1", MIRROR, "https://m.example"),))
    c.validate()
    text = client_policy(c, signer)
    policy = parse_policy(text)
    assert policy.witnesses["m1"].mirror and not policy.witnesses["w1"].mirror
    assert policy.witnesses["m1"].url == "https://m.example"
    assert policy.quorum_met({"w1"}) and not policy.quorum_met({"m1"})
    assert TrustPolicy.from_text(text).mirrors({"w1", "m1"}) == ["m1"]
    alone = client_policy(cfg(tmp_path, origin="example.org/log", mirrors=(("m1", MIRROR, "https://m.example"),)),
                          signer)
    assert "quorum none" in alone and f"mirror m1 {MIRROR} https://m.example" in alone
