"""Abuse limits of the log: rate limits, bearer-token auth per entry type, body and
header timeouts, TLS. Real servers on 127.0.0.1."""
from __future__ import annotations

import asyncio
import ssl

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from tlog.errors import AuthRequired, ConfigError, Forbidden, RateLimited
from tlog.formats.ed25519 import generate_seed
from tlog.formats.entries import commitment_entry, receipt_entry
from tlog.formats.hashing import leaf_hash
from tlog.http.limits import RateLimiter, TokenAuth, new_token
from tlog.runtime.config import load
from tlog.server.api import build_app
from tlog.server.config import LogConfig
from tlog.server.service import LogService

from tests.support.tls import self_signed

SEED = generate_seed()


async def start(tmp_path, **kw):
    cfg = LogConfig(data_dir=tmp_path / "data", port=0, batch_interval_ms=5, **kw)
    svc = await LogService.open(cfg)
    server = TestServer(build_app(svc), host="127.0.0.1", port=0)
    await server.start_server()
    return svc, server, str(server.make_url("")).rstrip("/")


def test_token_bucket_and_bounded_memory():
    rl = RateLimiter(rate=10, burst=3, max_clients=100)
    for _ in range(3):
        rl.check("a", "write")
    with pytest.raises(RateLimited) as e:
        rl.check("a", "write")
    assert e.value.data["retry_after"] >= 1
    rl.check("b", "write")  # other clients have their own bucket
    for i in range(1000):
        rl.check(f"c{i}", "read")
    assert len(rl._buckets) <= 100


def test_token_auth_rules(tmp_path):
    tok, digest = new_token()
    tok2, digest2 = new_token()
    f = tmp_path / "tokens"
    f.write_text(f"# comment\n{digest} commitment alice\n{digest2} * ops\n")
    auth = TokenAuth.from_file(["commitment", "registry"], f)
    assert auth.check(None, "receipt") is None  # receipts need no token here
    with pytest.raises(AuthRequired):
        auth.check(None, "commitment")
    with pytest.raises(AuthRequired):
        auth.check("Bearer wrong", "commitment")
    assert auth.check(f"Bearer {tok}", "commitment") == "alice"
    with pytest.raises(Forbidden):
        auth.check(f"Bearer {tok}", "registry")
    assert auth.check(f"Bearer {tok2}", "registry") == "ops"
    assert tok not in f.read_text()  # only digests are stored


def test_config_refuses_conflicts(tmp_path):
    with pytest.raises(ConfigError):
        load(LogConfig, section="log", env_prefix="T_", auth_required_for="commitment")
    with pytest.raises(ConfigError):
        load(LogConfig, section="log", env_prefix="T_", tls_cert=str(tmp_path / "c"))
    with pytest.raises(ConfigError):
        load(LogConfig, section="log", env_prefix="T_", auth_required_for="bogus", tokens_file="x")
    toml = tmp_path / "log.toml"
    toml.write_text('[log]\nport = 9999\nunknown_setting = 1\n')
    with pytest.raises(ConfigError):
        load(LogConfig, section="log", env_prefix="T_", file=toml)


async def test_write_rate_limit_429_with_retry_after(tmp_path):
    # one token per 100 s: however slow the machine, the bucket cannot refill during the test
    svc, server, url = await start(tmp_path, rate_limit_write=0.01, rate_limit_write_burst=10, max_batch_entries=10,
                                   max_pending=100)
    try:
        async with aiohttp.ClientSession() as s:
            statuses = []
            for i in range(14):
                async with s.post(url + "/v1/entries", json=receipt_entry(leaf_hash(bytes([i])), SEED)) as r:
                    statuses.append(r.status)
                    if r.status == 429:
                        assert int(r.headers["Retry-After"]) >= 1
                        assert (await r.json())["error"] == "rate_limited"
            assert statuses == [200] * 10 + [429] * 4
            async with s.get(url + "/checkpoint") as r:  # reads have their own budget
                assert r.status == 200
    finally:
        await server.close()
        await svc.close()


async def test_bearer_token_required_per_entry_type(tmp_path):
    tok, digest = new_token()
    (tmp_path / "tokens").write_text(f"{digest} commitment\n")
    svc, server, url = await start(tmp_path, auth_required_for=("commitment",), tokens_file=tmp_path / "tokens")
    try:
        async with aiohttp.ClientSession() as s:
            c = commitment_entry(leaf_hash(b"x"))
            async with s.post(url + "/v1/entries", json=c) as r:
                assert r.status == 401 and (await r.json())["error"] == "auth_required"
            async with s.post(url + "/v1/entries", json=c, headers={"Authorization": "Bearer nope"}) as r:
                assert r.status == 401
            async with s.post(url + "/v1/entries:batch", json={"entries": [c]},
                              headers={"Authorization": f"Bearer {tok}"}) as r:
                assert r.status == 200
            async with s.post(url + "/v1/entries", json=receipt_entry(leaf_hash(b"r"), SEED)) as r:
                assert r.status == 200  # receipts are open
    finally:
        await server.close()
        await svc.close()


async def test_slow_body_gets_408_and_slow_head_is_closed(tmp_path):
    svc, server, _url = await start(tmp_path, read_timeout=0.5)
    try:
        host, port = "127.0.0.1", server.port
        r, w = await asyncio.open_connection(host, port)
        w.write(b"POST /v1/entries HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100\r\n\r\n{")
        await w.drain()
        head = await asyncio.wait_for(r.read(4096), 60)
        assert head.startswith(b"HTTP/1.1 408") and b'"invalid_input"' in head
        w.close()
    finally:
        await server.close()
        await svc.close()


async def test_slow_request_head_is_cut_by_keepalive_timeout(tmp_path):
    from aiohttp import web

    cfg = LogConfig(data_dir=tmp_path / "data", port=0)
    svc = await LogService.open(cfg)
    runner = web.AppRunner(build_app(svc), keepalive_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"GET /checkpoint HTTP/1.1\r\n")
        closed = False
        deadline = asyncio.get_running_loop().time() + 60
        while asyncio.get_running_loop().time() < deadline:  # one header line every 0.25 s, for ever
            try:
                w.write(b"X-Slow: 1\r\n")
                await w.drain()
            except ConnectionError:
                closed = True
                break
            await asyncio.sleep(0.25)
            if r.at_eof():
                closed = True
                break
        assert closed, "a slowloris request head was never cut off"
    finally:
        await runner.cleanup()
        await svc.close()


async def test_tls_serving(server, tmp_path):
    cert, key = self_signed(tmp_path)
    srv = server("--tls-cert", str(cert), "--tls-key", str(key))
    assert srv.url.startswith("https://")
    ctx = ssl.create_default_context(cafile=str(cert))
    async with aiohttp.ClientSession() as s:
        async with s.get(srv.url + "/v1/info", ssl=ctx) as r:
            assert r.status == 200 and (await r.json())["verifier_key"] == srv.vkey
        with pytest.raises(aiohttp.ClientError):
            async with s.get(srv.url.replace("https", "http") + "/v1/info") as r:
                await r.read()


async def test_witness_and_registry_rate_limit_429(tmp_path):
    """The witness and the registry share the log's per-client limiter middleware."""
    from witness.api import build_app as witness_app
    from witness.config import WitnessConfig
    from witness.service import WitnessService

    svc = WitnessService.open(WitnessConfig(data_dir=tmp_path / "w", name="w.test", rate_limit=2,
                                            rate_limit_burst=3))
    server = TestServer(witness_app(svc), host="127.0.0.1", port=0)
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as s:
            statuses = []
            for _ in range(6):
                async with s.get(str(server.make_url("/healthz"))) as r:
                    statuses.append(r.status)
                    if r.status == 429:
                        assert r.headers["Retry-After"] and (await r.json())["error"] == "rate_limited"
        assert statuses[:3] == [200, 200, 200] and 429 in statuses[3:]
    finally:
        await server.close()
        svc.close()
    from registry.config import RegistryConfig

    with pytest.raises(ConfigError):
        RegistryConfig(data_dir=tmp_path / "r", log_url="http://127.0.0.1:9", rate_limit=-1).validate()


async def test_tls_on_witness_and_registry(tmp_path):
    """All three services take tls_cert/tls_key (the log's TLS test is above)."""
    from tests.support.services import log_service, registry_service, witness_service

    cert, key = self_signed(tmp_path)
    log = log_service(tmp_path / "log").start()
    w = witness_service(tmp_path / "w", log.vkey, "--tls-cert", str(cert), "--tls-key", str(key)).start()
    reg = registry_service(tmp_path / "reg", log.url, "--tls-cert", str(cert), "--tls-key", str(key)).start()
    try:
        assert w.url.startswith("https://") and reg.url.startswith("https://")
        ctx = ssl.create_default_context(cafile=str(cert))
        async with aiohttp.ClientSession() as s:
            for url in (w.url + "/healthz", reg.url + "/v1/info"):
                async with s.get(url, ssl=ctx) as r:
                    assert r.status == 200
    finally:
        for svc in (reg, w, log):
            svc.kill()


def test_client_address_takes_the_hop_the_farthest_trusted_proxy_appended():
    from tlog.http.limits import client_address

    peer = "192.0.2.1"
    assert client_address(peer, "10.0.0.1, 203.0.113.7", 0) == peer  # no proxies: the header means nothing
    assert client_address(peer, "10.0.0.1, 203.0.113.7", 1) == "203.0.113.7"  # the client wrote 10.0.0.1
    assert client_address(peer, "1.1.1.1, 203.0.113.7, 198.51.100.2", 2) == "203.0.113.7"
    assert client_address(peer, "203.0.113.7", 2) == peer  # fewer hops than proxies
    for bad in ("garbage", "203.0.113.7:80", "x" * 5000, "", "999.1.1.1"):
        assert client_address(peer, f"1.2.3.4, {bad}", 1) == peer
    # IPv6 clients share a bucket per /64; IPv4-mapped addresses are IPv4
    assert client_address(peer, "2001:db8:1:2:aaaa::1", 1) == client_address(peer, "2001:db8:1:2:bbbb::9", 1) \
        == "2001:db8:1:2::/64"
    assert client_address(peer, "::ffff:203.0.113.7", 1) == "203.0.113.7"
    assert client_address("2001:db8::5", None, 0) == "2001:db8::/64"


def test_the_limiter_table_is_bounded_whatever_the_clients():
    import tracemalloc

    from tlog.http.limits import client_address

    rl = RateLimiter(rate=1, burst=1, max_clients=1000)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(50_000):  # forged hops: only valid addresses become keys, and at most 1000 are kept
            rl.check(client_address("192.0.2.1", f"{'x' * 100}, 10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}", 1),
                     "request")
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert len(rl) == 1000
    assert grown < 2_000_000, grown


def test_malformed_request_logs_keep_the_first_of_each_client_then_a_count():
    import logging

    from tlog.runtime.logs import MalformedRequests

    now = [0.0]
    f = MalformedRequests(interval=60, max_clients=2, clock=lambda: now[0])

    def rec(client: str, msg: str = MalformedRequests.MESSAGE) -> logging.LogRecord:
        return logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, msg, (client,), None)

    assert f.filter(rec("a")) and f.filter(rec("b"))  # the first of each, in full
    assert not any(f.filter(rec("a")) for _ in range(100))  # then held back
    assert f.filter(rec("other", "unrelated %s"))  # other records are untouched
    now[0] = 61
    summary = rec("b")
    assert f.filter(summary) and summary.levelno == logging.WARNING and summary.exc_info is None
    assert summary.getMessage().startswith("101 more malformed requests from 2 clients")
    assert f.filter(rec("c")) and len(f.seen) == 2  # a new client; the table stays bounded
