"""`oap-registry` as a user runs it: real processes, real log, offline status check."""
from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from registry.config import RegistryConfig
from tlog.errors import ConfigError
from tlog.runtime import children
from tlog.runtime.config import load

from tests.support.registry import BIN

pytestmark = pytest.mark.slow
CLI = str(BIN / "oap-registry")


def cli(*args: str, timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env} if env else None)


class RegistryProcess:
    def __init__(self, *args: str) -> None:
        # No idle anchor commit (5 s after start by default) to move the commit numbers on a slow machine
        env = {**os.environ, "OAP_REGISTRY_ANCHOR_IDLE_SECONDS": "3600"}
        self.proc = children.popen([CLI, "serve", *args], death_signal=signal.SIGKILL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, env=env)
        self.url = self.key = ""
        lines = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if m := re.match(r"registry key: (\S+)", line):
                self.key = m.group(1)
            if m := re.match(r"url:\s+(\S+)", line):
                self.url = m.group(1)
            if line.startswith("data:"):
                return
        self.proc.kill()
        raise RuntimeError("registry did not start:\n" + "".join(lines))

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGINT)
        out, _ = self.proc.communicate(timeout=30)
        return self.proc.returncode, out


def test_keygen_writes_a_private_key_only_its_owner_can_read(tmp_path):
    r = cli("keygen", "--out", str(tmp_path / "k.key"))
    assert r.returncode == 0 and r.stdout.startswith("did:key:z6Mk")
    assert stat.S_IMODE(os.stat(tmp_path / "k.key").st_mode) == 0o600
    assert (tmp_path / "k.key.did").read_text().strip() == r.stdout.strip()
    again = cli("keygen", "--out", str(tmp_path / "k.key"))
    assert again.returncode == 2 and "refusing to overwrite" in again.stderr


def test_serve_revoke_and_check_status_offline(tmp_path, log_server):
    reg = RegistryProcess("--data", str(tmp_path / "data"), "--port", "0", "--log-url", log_server.url,
                          "--epoch-seconds", "60")
    try:
        assert reg.key.startswith("did:key:") and reg.url.startswith("http://127.0.0.1:")
        did = cli("keygen", "--out", str(tmp_path / "alice.key")).stdout.strip()
        r = cli("revoke", "--key", str(tmp_path / "alice.key"), "--kind", "key", "--reason", "key_compromise",
                "--url", reg.url, "--out", str(tmp_path / "commit.tlog-proof"))
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["seq"] == 1  # the commit after the first (no idle anchor commit meanwhile)
        assert (tmp_path / "commit.tlog-proof").read_text().startswith("c2sp.org/tlog-proof@v1")
        saved = tmp_path / "status.json"
        trust = ("--registry-key", reg.key, "--log-vkey", log_server.vkey)
        for _ in range(100):  # the next epoch follows the commit (epochs are at most one a second)
            r = cli("status", did, "--url", reg.url, "--out", str(saved), *trust)
            if r.returncode not in (0, 4):  # good or unknown: the epoch before the commit
                break
            time.sleep(0.1)
        assert r.returncode == 3 and r.stdout.startswith("REVOKED"), r.stdout + r.stderr
        r = cli("status", "--offline", str(saved), *trust)
        assert r.returncode == 3 and "key_compromise" in r.stdout and "log anchors verified" in r.stdout
        assert f"the answer is about {did}; nothing said which id" in r.stderr  # no --id: said plainly
        r = cli("status", "--offline", str(saved), "--id", did, *trust)
        assert r.returncode == 3 and "warning" not in r.stderr
        assert " ago)" in r.stdout and "(in " in r.stdout  # the answer's age and freshness, for people
        # offline, a registry URL (here one that plain HTTP rules out) is never used or refused
        r = cli("status", "--offline", str(saved), "--url", "http://registry.example.invalid", *trust)
        assert r.returncode == 3 and "REVOKED" in r.stdout, r.stdout + r.stderr
        r = cli("status", "--offline", str(saved), *trust, env={"OAP_REGISTRY_URL": "http://registry.example.invalid"})
        assert r.returncode == 3 and "REVOKED" in r.stdout, r.stdout + r.stderr
        r = cli("status", "--offline", str(saved), "--json", *trust)
        js = json.loads(r.stdout)
        assert r.returncode == 3 and js["status"] == "revoked" and js["reason"] == "key_compromise"
        assert js["valid"] and js["log_checked"] and js["by"] == did
        r = cli("revoke", "--key", str(tmp_path / "alice.key"), "--kind", "key", "--reason", "stolen")
        assert r.returncode == 2 and "key_compromise" in r.stderr  # the allowed values are listed
        resp = json.loads(saved.read_text())
        resp["revocation"]["record"]["reason"] = "superseded"
        (tmp_path / "forged.json").write_text(json.dumps(resp))
        r = cli("status", "--offline", str(tmp_path / "forged.json"), *trust)
        assert r.returncode == 1 and r.stdout.startswith("INVALID")
        r = cli("status", "--offline", str(saved))
        assert r.returncode == 2 and "--registry-key" in r.stderr
        bob = cli("keygen", "--out", str(tmp_path / "bob.key")).stdout.strip()
        r = cli("status", bob, "--url", reg.url, *trust)
        assert r.returncode == 4 and r.stdout.startswith("UNKNOWN")
        assert f"signed by the status key {reg.key}: pinned (--registry-key)" in r.stdout, r.stdout
        # pinned and unpinned said the same way as the explorer says it: a `registry` line of the
        # policy pins the key; the key the registry names itself pins nothing
        policy = tmp_path / "net.policy"
        policy.write_text(f"log {log_server.vkey}\nregistry {reg.key} {reg.url}\nquorum none\n")
        r = cli("status", did, "--url", reg.url, "--log-policy", str(policy), "--json")
        js = json.loads(r.stdout)
        assert r.returncode == 3 and js["key_pinned"] is True and js["status_key"] == reg.key and "warning" not in r.stderr
        # (the saved answer may be past its next_update on a slow machine: its key is what this checks)
        r = cli("status", "--offline", str(saved), "--id", did, "--log-policy", str(policy), "--allow-stale")
        assert r.returncode == 3 and f"pinned (the registry line of {policy})" in r.stdout, r.stdout + r.stderr
        r = cli("status", did, "--url", reg.url, "--log-vkey", log_server.vkey)
        assert r.returncode == 3 and "NOT PINNED (the key the registry names itself)" in r.stdout, r.stdout
        assert f"trusting the key the server names ({reg.key})" in r.stderr
        r = cli("status", did, "--url", reg.url, "--log-vkey", log_server.vkey, "--json")
        assert r.returncode == 3 and json.loads(r.stdout)["key_pinned"] is False
        other = cli("keygen", "--out", str(tmp_path / "other.key")).stdout.strip()
        policy.write_text(f"log {log_server.vkey}\nregistry {other}\nquorum none\n")
        r = cli("status", did, "--url", reg.url, "--log-policy", str(policy))
        assert r.returncode == 1 and f"the registry signs with {reg.key}, which" in r.stdout and other in r.stdout
        r = cli("status", "--offline", str(saved), "--id", did, "--log-policy", str(policy), "--allow-stale")
        assert r.returncode == 1 and "not signed by the registry key" in r.stdout, r.stdout  # not the key the policy pins
        r = cli("kill-switch", "--key", str(tmp_path / "bob.key"), "--url", reg.url)
        assert r.returncode == 0 and json.loads(r.stdout)["type"] == "kill_switch"
        r = cli("key-event", "--key", str(tmp_path / "alice.key"), "--subject", did, "--controller", bob,
                "--url", reg.url)
        assert r.returncode == 1 and "revoked" in r.stderr  # a revoked key signs nothing new
        bad = tmp_path / "bad.json"
        bad.write_text('{"type": "revocation"}')
        r = cli("submit", str(bad), "--url", reg.url)
        assert r.returncode == 1 and "missing field" in r.stderr
    finally:
        code, out = reg.stop()
    assert code == 0 and "stopped cleanly" in out


def test_serve_refuses_a_bad_configuration(tmp_path):
    r = cli("serve", "--data", str(tmp_path / "d"), "--port", "0")
    assert r.returncode == 2 and "log_url is required" in r.stderr
    r = cli("serve", "--data", str(tmp_path / "d"), "--log-url", "ftp://x", "--port", "0")
    assert r.returncode == 2 and "http(s)" in r.stderr


def test_toml_configuration_and_validation(tmp_path):
    toml = tmp_path / "registry.toml"
    toml.write_text('[registry]\ndata_dir = "reg"\nport = 8090\nlog_url = "http://127.0.0.1:8080"\n'
                    'epoch_seconds = 120\nbootstrap_witnesses = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"\n')
    cfg = load(RegistryConfig, section="registry", env_prefix="OAP_REGISTRY_TEST_", file=toml)
    assert cfg.port == 8090 and cfg.epoch_seconds == 120 and cfg.data_dir == Path("reg")
    assert cfg.bootstrap == ("did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",)
    for bad in ({"epoch_seconds": 0}, {"min_epoch_interval": 999.0}, {"bootstrap_witnesses": "alice"},
                {"name": "../x"}, {"upstream": "ftp://x"}):
        with pytest.raises(ConfigError):
            cfg.replace(**bad)
