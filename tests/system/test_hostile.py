"""Hostile clients against real services on 127.0.0.1: each attack is a regression test.

Every test starts the real process, attacks it as a hostile client would, and checks
the outcome: the status code, memory measured from /proc, and that an honest
`GET /checkpoint` (or write) sent at the same time is still answered.
"""
from __future__ import annotations

import asyncio
import json
import os
import time

import aiohttp
import cbor2
import pytest
from yarl import URL

from tlog.http.limits import new_token

from tests.httpfuzz import rss_kb
from tests.support.services import Service, log_service, registry_service, witness_service
from tests.support.tcp import open_on_server

pytestmark = pytest.mark.slow

HONEST_TIMEOUT = aiohttp.ClientTimeout(total=60)  # liveness, not speed: benchmarks/hostile.py measures that


def commitment(i: int) -> dict:
    return {"type": "commitment", "commitment": "sha256:" + i.to_bytes(32, "big").hex()}


def cbor_bomb(size: int = 256 * 1024) -> bytes:
    """An array of empty arrays: one item per byte."""
    n = size - 5
    return b"\x9a" + n.to_bytes(4, "big") + b"\x80" * n


async def raw(url: str, request: bytes, *, read: bool = True, timeout: float = 20) -> tuple[int, dict, bytes]:
    """Send `request` bytes; read the whole answer (Connection: close expected)."""
    u = URL(url)
    r, w = await asyncio.open_connection(u.host, u.port)
    try:
        w.write(request)
        await w.drain()
        data = await asyncio.wait_for(r.read(), timeout)
    finally:
        w.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = {k.decode().lower(): v.decode().strip() for k, _, v in (ln.partition(b":") for ln in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def post(path: str, body: bytes, ctype: str = "application/json", *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: t", f"Content-Type: {ctype}", f"Content-Length: {len(body)}",
            "Connection: close", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def checkpoint_ok(url: str) -> bool:
    async with aiohttp.ClientSession(timeout=HONEST_TIMEOUT) as s:
        async with s.get(url + "/checkpoint") as r:
            await r.read()
            return r.status == 200


async def add_entries(url: str, n: int, start: int = 0) -> None:
    async with aiohttp.ClientSession(timeout=HONEST_TIMEOUT) as s:
        for a in range(start, start + n, 5000):
            body = {"entries": [commitment(i) for i in range(a, min(a + 5000, start + n))]}
            async with s.post(url + "/v1/entries:batch", json=body) as r:
                assert r.status == 200, await r.text()


@pytest.fixture
def services():
    started: list[Service] = []

    def start(svc: Service) -> Service:
        started.append(svc.start())
        return svc

    yield start
    for svc in started:
        svc.kill()


def env(**kw: object) -> dict:
    return dict(os.environ) | {f"OAP_LOG_{k.upper()}": str(v) for k, v in kw.items()}


async def test_cbor_bombs_are_refused_within_the_item_budget_while_checkpoints_are_served(tmp_path, services):
    log = services(log_service(tmp_path / "log"))
    bombs = [raw(log.url, post("/v1/entries", cbor_bomb(), "application/oap+cbor")) for _ in range(4)]
    # The same bomb inside a batch: the batch route's budget is larger, and still refuses it.
    big = cbor2.dumps({"entries": [[]] * 400_000})
    bombs += [raw(log.url, post("/v1/entries:batch", big, "application/oap+cbor"))]
    got = await asyncio.gather(*bombs, checkpoint_ok(log.url), checkpoint_ok(log.url))
    assert [g[0] for g in got[:5]] == [413] * 5
    assert all(json.loads(g[2])["error"] == "invalid_input" and "items" in json.loads(g[2])["message"]
               for g in got[:5])
    assert got[5:] == [True, True]
    assert log.alive()


async def test_unauthenticated_batches_get_401_before_their_body_is_parsed(tmp_path, services):
    token, line = new_token()
    (tmp_path / "tokens").write_text(line + " *\n")
    log = services(log_service(tmp_path / "log", env=env(auth_required_for="*", tokens_file=tmp_path / "tokens")))
    bomb = b'{"entries":[' + b"[]," * (14 * 1024 * 1024 // 3) + b"[]]"
    got = await asyncio.gather(raw(log.url, post("/v1/entries:batch", bomb)),
                               raw(log.url, post("/v1/entries:batch", bomb, "application/json",
                                                 "Authorization: bearer wrong")),
                               checkpoint_ok(log.url))
    assert [g[0] for g in got[:2]] == [401, 401]
    assert json.loads(got[0][2])["error"] == "auth_required"
    assert got[2] is True
    # The scheme is matched case-insensitively (RFC 7235 §2.1).
    ok = await raw(log.url, post("/v1/entries", json.dumps(commitment(1)).encode(), "application/json",
                                 f"Authorization: bEaReR {token}"))
    assert ok[0] == 200


async def test_malformed_writes_count_against_the_write_bucket(tmp_path, services):
    log = services(log_service(tmp_path / "log", env=env(rate_limit_write=0.01, rate_limit_write_burst=10_000,
                                                          max_batch_entries=10_000)))
    statuses = [(await raw(log.url, post("/v1/entries:batch", b'{"entries": 7}')))[0] for _ in range(3)]
    assert statuses == [400] * 3
    # 10,000 tokens: malformed requests took one each, so a full batch no longer fits
    async with aiohttp.ClientSession() as s:
        async with s.post(log.url + "/v1/entries:batch",
                          json={"entries": [commitment(i) for i in range(9_999)]}) as r:
            assert r.status == 429 and int(r.headers["Retry-After"]) >= 1


async def test_unread_proof_batches_hold_bounded_memory_and_are_dropped(tmp_path, services):
    log = services(log_service(tmp_path / "log", env=env(rate_limit_read=0, rate_limit_write=0, send_timeout=3)))
    await add_entries(log.url, 4096)
    body = json.dumps({"indices": [i % 4096 for i in range(100_000)]}).encode()
    before = rss_kb(log.pid)
    u = URL(log.url)
    conns = []
    for _ in range(4):  # each answer is ~57 MB of JSON; none is read
        r, w = await asyncio.open_connection(u.host, u.port)
        w.transport.set_write_buffer_limits(high=0)
        sock = w.get_extra_info("socket")
        sock.setsockopt(__import__("socket").SOL_SOCKET, __import__("socket").SO_RCVBUF, 4096)
        w.write(post("/v1/proof/inclusion:batch", body))
        await w.drain()
        conns.append((r, w))
    peak = before
    for _ in range(10):
        await asyncio.sleep(0.2)
        peak = max(peak, rss_kb(log.pid))
    assert await checkpoint_ok(log.url)
    assert peak - before < 100_000, f"grew {peak - before} kB for four unread answers"
    # After the send timeout the log drops them: reading now ends before the whole answer.
    clients = {w.get_extra_info("sockname")[1] for _, w in conns}
    deadline = time.monotonic() + 60
    while open_on_server(u.port, clients):
        assert time.monotonic() < deadline, "the log never dropped the clients that do not read"
        await asyncio.sleep(0.1)
    for r, w in conns:
        got = 0
        try:
            while chunk := await asyncio.wait_for(r.read(1 << 20), 10):
                got += len(chunk)
        except ConnectionError:
            pass
        assert got < 40_000_000
        w.close()
    # An honest client still gets the whole answer, streamed, equal to one made whole.
    async with aiohttp.ClientSession() as s:
        async with s.post(log.url + "/v1/proof/inclusion:batch", data=body,
                          headers={"Content-Type": "application/json"}) as r:
            assert r.status == 200 and r.headers.get("Transfer-Encoding") == "chunked"
            doc = json.loads(await r.read())
        async with s.post(log.url + "/v1/proof/inclusion:batch", json={"indices": [5, 4095]}) as r:
            small = json.loads(await r.read())
    assert len(doc["proofs"]) == 100_000 and doc["proofs"][5] == small["proofs"][0]
    assert doc["proofs"][4095] == small["proofs"][1] and doc["checkpoint"] == small["checkpoint"]


async def test_large_answers_over_the_bytes_in_flight_cap_get_503(tmp_path, services):
    log = services(log_service(tmp_path / "log", env=env(rate_limit_read=0, send_timeout=120, bytes_in_flight_mb=1)))
    await add_entries(log.url, 4096)
    body = post("/v1/proof/inclusion:batch", json.dumps({"indices": list(range(4096)) * 10}).encode())
    u = URL(log.url)
    r, w = await asyncio.open_connection(u.host, u.port)  # holds the whole cap, unread
    w.write(body)
    await w.drain()
    assert await asyncio.wait_for(r.readexactly(9), 60) == b"HTTP/1.1 "  # its answer has started
    status, headers, _ = await raw(log.url, body)
    assert status == 503 and headers["retry-after"] == "1"
    assert await checkpoint_ok(log.url)
    w.close()


async def test_a_forged_left_most_forwarded_hop_does_not_escape_the_limit(tmp_path, services):
    log = services(log_service(tmp_path / "log", env=env(trusted_proxies=1, rate_limit_read=0.01,
                                                          rate_limit_read_burst=5)))
    statuses = []
    async with aiohttp.ClientSession() as s:
        for i in range(12):  # the client writes any left-most hop; the proxy appends the real one
            hops = f"10.9.{i}.1, 203.0.113.7" if i % 2 else f"garbage-{i}, 203.0.113.7"
            async with s.get(log.url + "/v1/info", headers={"X-Forwarded-For": hops}) as r:
                statuses.append(r.status)
        async with s.get(log.url + "/v1/info", headers={"X-Forwarded-For": "203.0.113.8"}) as r:
            other = r.status  # another client behind the proxy has its own bucket
        async with s.get(log.url + "/v1/info", headers={"X-Forwarded-For": "not-an-ip"}) as r:
            peer = r.status  # not an address: the peer's bucket (the proxy's), still fresh
    assert statuses[:5] == [200] * 5 and set(statuses[5:]) == {429}
    assert other == 200 and peer == 200


async def test_a_half_closed_connection_gets_its_pipelined_get_after_a_post(tmp_path, services):
    log = services(log_service(tmp_path / "log"))
    u = URL(log.url)
    r, w = await asyncio.open_connection(u.host, u.port)
    body = json.dumps(commitment(3)).encode()
    w.write(f"POST /v1/entries HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode() + body + b"GET /checkpoint HTTP/1.1\r\nHost: t\r\n\r\n")
    await w.drain()
    w.write_eof()
    data = await asyncio.wait_for(r.read(), 20)
    assert data.count(b"HTTP/1.1 200 OK") == 2
    assert data.split(b"HTTP/1.1 200 OK")[2].split(b"\r\n\r\n", 1)[1].startswith(b"oap.localhost/log\n")
    w.close()


async def test_malformed_requests_log_one_traceback_per_client(tmp_path, services):
    log = services(log_service(tmp_path / "log"))
    for _ in range(30):
        status, _, _ = await raw(log.url, b"GET /checkpoint HTTP/1.1\r\nHost: t\r\nContent-Length: x\r\n\r\n")
        assert status == 400
    assert await checkpoint_ok(log.url)
    assert log.stop() == 0  # and every line it wrote has been read
    assert log.log_text.count("Traceback") == 1, log.log_text[-2000:]


async def test_the_witness_under_attack_keeps_cosigning_the_log(tmp_path, services):
    first = services(log_service(tmp_path / "log"))  # makes the log key
    vkey = first.vkey
    first.stop()
    w = services(witness_service(tmp_path / "w", vkey, "--rate-limit", "0"))
    policy = tmp_path / "policy"
    policy.write_text(f"witness w1 {w.vkey} {w.url}\ngroup g 1 w1\nquorum g\n")
    log = services(log_service(tmp_path / "log", "--witness-policy", str(policy)))
    bomb = cbor_bomb(1024 * 1024)
    deep = b"[" * 100_000 + b"]" * 100_000

    async def attack() -> list[int]:
        got = await asyncio.gather(*[raw(w.url, post("/v1/conformance/witness", b, t))
                                     for b, t in ((bomb, "application/oap+cbor"), (deep, "application/json"))
                                     for _ in range(2)])
        return [g[0] for g in got]

    async def writes() -> list[int]:
        out = []
        async with aiohttp.ClientSession(timeout=HONEST_TIMEOUT) as s:
            for i in range(10):
                async with s.post(log.url + "/v1/entries", json=commitment(100 + i)) as r:
                    out.append(r.status)
        return out

    refused, written = await asyncio.gather(attack(), writes())
    assert all(400 <= s < 500 for s in refused), refused
    assert written == [200] * 10
    async with aiohttp.ClientSession() as s:
        async with s.get(log.url + "/checkpoint") as r:
            note = await r.text()
    assert note.split("\n\n", 1)[1].count("\u2014 ") == 2  # the log's signature and the witness's


async def test_status_answers_vary_by_accept_and_lists_name_the_configured_url(tmp_path, services):
    log = services(log_service(tmp_path / "log"))
    reg = services(registry_service(tmp_path / "reg", log.url))
    did = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
    async with aiohttp.ClientSession() as s:
        deadline = time.monotonic() + 60
        while True:  # the first status epoch is made just after start
            async with s.get(f"{reg.url}/v1/status/{did}") as r:
                if r.status == 200:
                    jtag, vary = r.headers["ETag"], r.headers.get("Vary")
                    break
            assert time.monotonic() < deadline, f"no status answer: HTTP {r.status}"
            await asyncio.sleep(0.1)
        assert vary == "Accept"
        cbor_h = {"Accept": "application/oap+cbor"}
        async with s.get(f"{reg.url}/v1/status/{did}", headers={**cbor_h, "If-None-Match": jtag}) as r:
            assert r.status == 200 and r.headers["Content-Type"] == "application/oap+cbor"
            ctag = r.headers["ETag"]
        assert ctag != jtag
        async with s.get(f"{reg.url}/v1/status/{did}", headers={**cbor_h, "If-None-Match": ctag}) as r:
            assert r.status == 304 and r.headers["ETag"] == ctag and r.headers["Vary"] == "Accept"
        async with s.get(f"{reg.url}/v1/status/{did}", headers={"If-None-Match": jtag}) as r:
            assert r.status == 304
        async with s.get(f"{reg.url}/v1/status-lists/{did}/0", headers={"Host": "evil.example"}) as r:
            doc = await r.json()
    assert doc["id"].startswith(reg.url + "/v1/status-lists/") and "evil" not in json.dumps(doc)


def test_the_registry_refuses_to_listen_beyond_loopback_without_public_url(tmp_path):
    from registry.config import RegistryConfig
    from tlog.errors import ConfigError

    with pytest.raises(ConfigError, match="public_url"):  # (plain HTTP allowed here: that is another test)
        RegistryConfig(host="0.0.0.0", log_url="http://127.0.0.1:1", insecure_http=True).validate()
    RegistryConfig(host="0.0.0.0", log_url="http://127.0.0.1:1", public_url="https://r.example",
                   insecure_http=True).validate()
    RegistryConfig(host="::1", log_url="http://127.0.0.1:1").validate()
