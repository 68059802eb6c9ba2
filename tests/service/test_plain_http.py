"""OAP-CORE-1.0 §8.1: plain HTTP must not be used. Every service refuses to listen beyond
loopback without TLS, and refuses http:// URLs of other hosts, unless the operator says
`--insecure-http` (`insecure_http = true`, OAP_<SERVICE>_INSECURE_HTTP), which is logged
as a warning at start. Loopback stays plain: `make run` is unchanged.

Tests bind only loopback addresses, except one (skipped where the machine has no other
address) that serves on this machine's own interface address and talks to itself."""
from __future__ import annotations

import os
import socket
import ssl
import subprocess
from pathlib import Path

import aiohttp
import pytest

from registry.config import RegistryConfig
from tlog.errors import ConfigError
from tlog.formats.keys import CosignatureSigner, Signer
from tlog.formats.urls import plain_beyond_loopback
from tlog.server.config import LogConfig
from witness.config import WitnessConfig, WitnessedLog
from witness.mirror.config import MirrorConfig

from tests.support.services import BIN, Service, log_service
from tests.support.tls import self_signed

LOG_VKEY = Signer.generate("log.example").vkey
WITNESS_VKEY = CosignatureSigner.generate("w1.example").vkey
LOOPBACK = ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "LOCALHOST"]
BEYOND = ["0.0.0.0", "", "::", "192.0.2.10", "2001:db8::1", "registry.example.org", "127.0.0.1.nip.io"]


def log_cfg(tmp: Path, **kw) -> LogConfig:
    return LogConfig(data_dir=tmp / "log", **kw)


def witness_cfg(tmp: Path, **kw) -> WitnessConfig:
    return WitnessConfig(data_dir=tmp / "w", **kw)


def registry_cfg(tmp: Path, **kw) -> RegistryConfig:
    kw.setdefault("log_url", "http://127.0.0.1:8080")
    kw.setdefault("public_url", "https://registry.example.org")
    return RegistryConfig(data_dir=tmp / "r", **kw)


SERVICES = {"log": log_cfg, "witness": witness_cfg, "registry": registry_cfg}


def refused(make, **kw) -> str:
    with pytest.raises(ConfigError) as e:
        make(**kw).validate()
    message = str(e.value)
    assert "§8.1" in message and "--insecure-http" in message, message
    return message


@pytest.mark.parametrize("service", SERVICES)
@pytest.mark.parametrize("host", BEYOND)
def test_listening_beyond_loopback_needs_tls_or_insecure_http(tmp_path, service, host):
    make = SERVICES[service]
    assert "without TLS" in refused(lambda **kw: make(tmp_path, **kw), host=host)
    make(tmp_path, host=host, insecure_http=True).validate()
    cert, key = self_signed(tmp_path)
    make(tmp_path, host=host, tls_cert=cert, tls_key=key).validate()


@pytest.mark.parametrize("service", SERVICES)
@pytest.mark.parametrize("host", LOOPBACK)
def test_loopback_stays_plain(tmp_path, service, host):
    SERVICES[service](tmp_path, host=host).validate()


def _witness_policy(tmp: Path, url: str) -> Path:
    path = tmp / "witnesses.policy"
    path.write_text(f"log {LOG_VKEY}\nwitness w1 {WITNESS_VKEY} {url}\nquorum w1\n")
    return path


def _mirror_policy(tmp: Path, url: str) -> Path:
    path = tmp / "mirrors.policy"
    path.write_text(f"log {LOG_VKEY}\nmirror m1 {WITNESS_VKEY} {url}\nquorum none\n")
    return path


UPSTREAMS = {  # a config naming `url` as a service it sends requests to
    "log witnesses": lambda tmp, url, **kw: log_cfg(tmp, witnesses=(("w1", WITNESS_VKEY, url),), witness_quorum=1,
                                                   **kw),
    "log witness_policy": lambda tmp, url, **kw: log_cfg(tmp, witness_policy=_witness_policy(tmp, url), **kw),
    "log mirrors": lambda tmp, url, **kw: log_cfg(tmp, mirrors=(("m1", WITNESS_VKEY, url),), **kw),
    "log witness_policy mirror": lambda tmp, url, **kw: log_cfg(tmp, witness_policy=_mirror_policy(tmp, url), **kw),
    "witness logs url": lambda tmp, url, **kw: witness_cfg(tmp, logs=(WitnessedLog("log.example", LOG_VKEY, url),),
                                                           **kw),
    "registry log_url": lambda tmp, url, **kw: registry_cfg(tmp, log_url=url, **kw),
    "registry log_urls": lambda tmp, url, **kw: registry_cfg(tmp, log_url="", log_urls=("https://a.example", url),
                                                             **kw),
    "registry upstream": lambda tmp, url, **kw: registry_cfg(tmp, log_url="", upstream=url, **kw),
    "registry public_url": lambda tmp, url, **kw: registry_cfg(tmp, public_url=url, **kw),
}


def refuses_plain_http_urls(tmp: Path, make) -> None:
    """`make(tmp, url, **kw)` is refused for plain http:// URLs of other hosts unless
    insecure_http, and accepted for https:// and loopback."""
    for url in ("http://log.example.org", "http://192.0.2.7:8080", "http://[2001:db8::7]:80",
                "http://127.0.0.1.nip.io:8080"):
        assert url in refused(lambda url=url, **kw: make(tmp, url, **kw))
        make(tmp, url, insecure_http=True).validate()
    for url in ("https://log.example.org", "http://127.0.0.1:8080", "http://[::1]:8080", "http://localhost:1"):
        make(tmp, url).validate()


@pytest.mark.parametrize("what", UPSTREAMS)
def test_plain_http_upstreams_beyond_loopback_are_refused_at_validation(tmp_path, what):
    refuses_plain_http_urls(tmp_path, UPSTREAMS[what])


def mirror_cfg(tmp: Path, **kw) -> MirrorConfig:
    return MirrorConfig(data_dir=tmp / "m", **kw)


ADVERTISED = {  # a config naming `url` as a URL it hands its clients
    "log public_url": lambda tmp, url, **kw: log_cfg(tmp, public_url=url, **kw),
    "log registry_url": lambda tmp, url, **kw: log_cfg(tmp, registry_url=url, **kw),
    "log mirror_urls": lambda tmp, url, **kw: log_cfg(tmp, mirror_urls=("https://m.example", url), **kw),
    "mirror monitoring_prefix": lambda tmp, url, **kw: mirror_cfg(tmp, monitoring_prefix=url, **kw),
    "mirror logs url": lambda tmp, url, **kw: mirror_cfg(tmp, logs=({"origin": "log.example", "vkey": LOG_VKEY,
                                                                     "url": url},), **kw),
    "mirror bucket_url": lambda tmp, url, **kw: mirror_cfg(tmp, bucket_url=url + "/bucket", **kw),
}


@pytest.mark.parametrize("what", ADVERTISED)
def test_plain_http_urls_a_service_advertises_beyond_loopback_are_refused_at_validation(tmp_path, what):
    """What a service tells its clients to use (its public URL, its registry's, its mirrors',
    a mirror's read API) goes through the same check as what it calls: a client sent to
    plain HTTP elsewhere would use it (OAP-CORE-1.0 §8.1)."""
    refuses_plain_http_urls(tmp_path, ADVERTISED[what])


@pytest.mark.parametrize("service", [*SERVICES, "mirror"])
def test_an_outbound_ca_file_that_holds_no_certificate_is_refused(tmp_path, service):
    make = {**SERVICES, "mirror": mirror_cfg}[service]
    with pytest.raises(ConfigError, match="outbound_ca_file"):
        make(tmp_path, outbound_ca_file=tmp_path / "missing.pem").validate()
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="outbound_ca_file"):
        make(tmp_path, outbound_ca_file=tmp_path / "junk.pem").validate()
    cert, _ = self_signed(tmp_path)
    make(tmp_path, outbound_ca_file=cert).validate()


def test_a_scale_out_bucket_over_plain_http_beyond_loopback_is_refused(tmp_path):
    kw = dict(storage="postgres", postgres_dsn="host=127.0.0.1 dbname=oap", bucket_url="http://s3.example.org/b")
    refused(lambda **k: log_cfg(tmp_path, **kw, **k))
    log_cfg(tmp_path, **kw, insecure_http=True).validate()
    log_cfg(tmp_path, **{**kw, "bucket_url": "http://127.0.0.1:8333/b"}).validate()


def test_which_urls_are_plain_beyond_loopback():
    assert plain_beyond_loopback("http://example.org") and plain_beyond_loopback("http://10.0.0.1:80")
    assert plain_beyond_loopback("http://[2001:db8::1]/x") and plain_beyond_loopback("http://localhost.example/")
    for url in ("https://example.org", "http://127.0.0.1", "http://127.8.9.10:1", "http://[::1]:2",
                "http://localhost:3/x", "https://10.0.0.1"):
        assert not plain_beyond_loopback(url), url


# --- the programs ---------------------------------------------------------------------------


def run(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("program,extra", [
    ("oap-log", []), ("oap-witness", []), ("oap-registry", ["--log-url", "http://127.0.0.1:1"]),
])
def test_each_program_refuses_to_serve_beyond_loopback_without_tls(tmp_path, program, extra):
    # refused while reading the configuration: nothing is bound, nothing is started
    r = run([str(BIN / program), "serve", "--data", str(tmp_path / "d"), "--host", "0.0.0.0", "--port", "0", *extra])
    assert r.returncode == 2 and "listening on 0.0.0.0 without TLS" in r.stderr and "§8.1" in r.stderr, r.stderr
    assert not (tmp_path / "d").exists()


def test_the_flag_the_config_key_and_the_variable_each_allow_it_with_a_warning_at_start(tmp_path):
    """A witness following a log over plain HTTP beyond loopback (only `oap-witness feed`
    would contact it: serving stays on 127.0.0.1)."""
    cfg = tmp_path / "witness.toml"
    body = ('[witness]\nname = "w.test"\nport = 0\n\n[[witness.logs]]\norigin = "log.example"\n'
            f'vkey = "{LOG_VKEY}"\nurl = "http://log.example.org:8080"\n')
    cfg.write_text(body)
    args = [str(BIN / "oap-witness"), "serve", "--config", str(cfg), "--data", str(tmp_path / "w")]
    r = run(args)
    assert r.returncode == 2 and "http://log.example.org:8080 is plain http://" in r.stderr, r.stderr
    for how in ("flag", "config", "env"):
        env = None
        if how == "flag":
            svc = Service("witness", [*args, "--insecure-http"])
        elif how == "config":
            cfg.write_text(body.replace("port = 0\n", "port = 0\ninsecure_http = true\n"))
            svc = Service("witness", args)
        else:
            cfg.write_text(body)
            env = {**os.environ, "OAP_WITNESS_INSECURE_HTTP": "1"}
            svc = Service("witness", args, env)
        svc.start()
        try:
            warning = [line for line in svc.lines if "insecure_http is set" in line]
            assert warning and "log.example.org:8080" in warning[0] and "WARNING" in warning[0].upper(), svc.lines
        finally:
            svc.kill()


def test_the_witness_feeder_refuses_a_plain_http_log_beyond_loopback(tmp_path):
    cfg = tmp_path / "witness.toml"
    cfg.write_text('[witness]\nname = "w.test"\n\n[[witness.logs]]\norigin = "log.example"\n'
                   f'vkey = "{LOG_VKEY}"\nurl = "http://log.example.org"\n')
    r = run([str(BIN / "oap-witness"), "feed", "--config", str(cfg), "--data", str(tmp_path / "w"), "--once"])
    assert r.returncode == 2 and "http://log.example.org is plain http://" in r.stderr, r.stderr


def _own_address() -> str | None:
    """This machine's address on its default route, if it has one (a UDP connect sends nothing)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))
            addr = s.getsockname()[0]
    except OSError:
        return None
    return None if addr.startswith("127.") or addr == "0.0.0.0" else addr


async def test_a_log_on_an_interface_address_needs_the_flag_or_tls(tmp_path):
    addr = _own_address()
    if addr is None:
        pytest.skip("this machine has no address beyond loopback")
    r = run([str(BIN / "oap-log"), "serve", "--data", str(tmp_path / "a"), "--host", addr, "--port", "0"])
    assert r.returncode == 2 and f"listening on {addr} without TLS" in r.stderr, r.stderr
    plain = log_service(tmp_path / "b", "--host", addr, "--insecure-http").start()
    try:
        assert any("insecure_http is set" in line and addr in line for line in plain.lines), plain.lines
        async with aiohttp.ClientSession() as s, s.get(plain.url + "/healthz") as resp:
            assert resp.status == 200
    finally:
        plain.kill()
    cert, key = self_signed(tmp_path, addr)
    tls = log_service(tmp_path / "c", "--host", addr, "--tls-cert", str(cert), "--tls-key", str(key)).start()
    try:
        assert tls.url.startswith("https://") and not any("insecure_http" in line for line in tls.lines)
        ctx = ssl.create_default_context(cafile=str(cert))
        async with aiohttp.ClientSession() as s, s.get(tls.url + "/healthz", ssl=ctx) as resp:
            assert resp.status == 200
    finally:
        tls.kill()


def test_registry_mirror_commands_refuse_a_plain_http_upstream_beyond_loopback(tmp_path):
    for args in (["mirror", "--upstream", "http://registry.example.org", "--data", str(tmp_path / "m")],
                 ["rebuild", "--from", "http://registry.example.org", "--data", str(tmp_path / "r")]):
        r = run([str(BIN / "oap-registry"), *args])
        assert r.returncode == 2 and "plain http:// beyond loopback" in r.stderr and "§8.1" in r.stderr, r.stderr



CLIENT_COMMANDS = [
    ["oap-log", "info", "--url", "{u}"],
    ["oap-log", "prove", "0", "--url", "{u}"],
    ["oap-log", "receipts", "--signer", "did:key:z6Mk", "--url", "{u}"],
    ["oap-log", "add", "--hash", "sha256:" + "00" * 32, "--url", "{u}"],
    ["oap-log", "audit", "{u}", "--policy", "{policy}"],
    ["oap-registry", "submit", "{record}", "--url", "{u}"],
    ["oap-registry", "status", "did:key:z6Mk", "--url", "{u}"],
    ["oap-registry", "verify", "{repo}", "--url", "{u}"],
    ["oap-registry", "mirror", "--upstream", "{u}", "--data", "{repo}-m"],
    ["oap-mirror", "follow", "{u}", "--mirror", "https://mirror.example.invalid", "--once"],
    ["oap-mirror", "follow", "https://log.example.invalid", "--mirror", "{u}", "--once"],
]


@pytest.mark.parametrize("cmd", CLIENT_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_client_commands_refuse_plain_http_beyond_loopback_before_any_traffic(tmp_path, cmd):
    """A relying party's command must not send a receipt or read a trust answer in the clear
    without saying so: plain http:// to another host exits 2 before connecting (no DNS either:
    the name below would not resolve), and --insecure-http is the only way past it."""
    policy = tmp_path / "p.policy"
    policy.write_text(f"log {LOG_VKEY}\nquorum none\n")
    record = tmp_path / "r.json"
    record.write_text("{}")
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    fill = {"u": "http://registry.example.invalid", "policy": str(policy), "record": str(record), "repo": str(repo)}
    argv = [str(BIN / cmd[0]), *(a.format(**fill) for a in cmd[1:])]
    r = run(argv)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "plain http:// beyond loopback" in r.stderr and "§8.1" in r.stderr and "--insecure-http" in r.stderr


def test_client_commands_keep_loopback_plain_and_accept_the_flag(tmp_path):
    """Loopback stays plain for `make run`, and the flag is accepted (a refused connection on
    a closed loopback port is the expected failure here: exit 1 or 2 with a reach error)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for extra in ([], ["--insecure-http"]):
        r = run([str(BIN / "oap-log"), "info", "--url", f"http://127.0.0.1:{port}", *extra])
        assert r.returncode != 0 and "plain http://" not in r.stderr and "warning" not in r.stderr, r.stderr
