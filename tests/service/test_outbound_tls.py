"""OAP-CORE-1.0 §8.1 and §28.1 for what the services call: every outbound client of the
project connects with TLS 1.3 or later (`tlog.transport`), trusting the system's CAs and the
operator's extra CA file, and never follows a redirect into plain HTTP beyond loopback.

Each client is pointed at two real servers on 127.0.0.1 with certificates of one test CA
(`tests.support.tls.TLSPeers`): one that speaks at most TLS 1.2, which must see every
handshake fail for the protocol version and serve nothing, and one that speaks TLS 1.3,
which must receive the client's request. The TLS 1.2 server is first shown to work for a
client that allows TLS 1.2, so the refusal is the client's."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
import urllib.error
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from tlog.errors import OAPError, Unavailable, UpstreamError
from tlog.formats.hashing import leaf_hash
from tlog.formats.keys import CosignatureSigner, Signer
from tlog.merkle.tree import TreeView
from tlog.runtime.config import HTTPConfig
from tlog.storage.interface import LogState
from tlog.transport import InsecureTransport, Outbound

from tests.support.services import BIN
from tests.support.tls import TLSPeers
from tests.support.waiting import until

LOG = Signer.generate("log.example")
WITNESS = CosignatureSigner.generate("w1.example")
UNSUPPORTED = "UNSUPPORTED_PROTOCOL"  # OpenSSL's reason when the client offers only TLS 1.3


@pytest.fixture
async def peers(tmp_path) -> AsyncGenerator[TLSPeers, None]:
    p = await TLSPeers(tmp_path / "peers").start()
    p.answers["/v1/info"] = (200, {"name": "reg", "origin": "log.example"}, {})
    try:
        yield p
    finally:
        await p.close()


# --- the clients, each making one real call through its own code ---------------------------

Probe = Callable[[str, Outbound, Path], Awaitable[object]]


async def _witnessing(url: str, outbound: Outbound, tmp: Path) -> object:
    from tlog.server.witnessing import WitnessSet

    ws = WitnessSet.from_policy(f"log {LOG.vkey}\nwitness w1 {WITNESS.vkey} {url}\nquorum w1\n", timeout=120,
                                outbound=outbound)
    leaf = leaf_hash(b"an entry")
    view = TreeView(1, lambda level, index: leaf)
    try:
        return await ws.cosign(LogState(1, view.root, "log.example\n1\nroot\n\n", view))
    except OAPError as e:  # no quorum: the witness did not cosign
        return e
    finally:
        await ws.close()


class _OneCheckpoint:
    origin, size, note = "log.example", 1, "log.example\n1\nroot\n\n"

    async def consistency_proof(self, old: int) -> list[bytes]:
        return []

    async def packages(self, ranges):  # pragma: no cover - add-checkpoint is refused first
        yield b""


async def _mirror_push(url: str, outbound: Outbound, tmp: Path) -> object:
    from tlog.http.mirrorclient import MirrorClient

    client = MirrorClient(url, timeout=120, outbound=outbound)
    try:
        return await client.push(_OneCheckpoint())
    except OAPError as e:
        return e
    finally:
        await client.close()


async def _mirror_follower(url: str, outbound: Outbound, tmp: Path) -> object:
    from witness.mirror.follower import Follower

    async with Follower(url, url, timeout=120, outbound=outbound) as f:
        return await f.sync()


def _info_of(client: str) -> Probe:
    """`info()` of the log client or of the registry client."""
    async def probe(url: str, outbound: Outbound, tmp: Path) -> object:
        from registry.client import RegistryClient
        from tlog.client.client import LogClient

        async with {"log": LogClient, "registry": RegistryClient}[client](url, timeout=120, outbound=outbound) as c:
            try:
                return await c.info()
            except OAPError as e:
                return e
    return probe


def _witness_service(tmp: Path, url: str, ca: Path):
    from witness.config import WitnessedLog
    from witness.service import WitnessService

    from tests.support.witness import witness_config

    cfg = witness_config(tmp / "w", [WitnessedLog("log.example", LOG.vkey, url)], log_lists=(url + "/list",),
                         outbound_ca_file=ca, log_list_timeout=120)
    cfg.validate()
    return WitnessService.open(cfg)


async def _witness_feeder(url: str, outbound: Outbound, tmp: Path) -> object:
    from witness.feeder import Feeder

    svc = _witness_service(tmp, url, outbound.ca_files[0])
    try:
        async with Feeder(svc.witness, svc.config.logs, timeout=120, outbound=outbound) as f:
            return await f.poll(svc.config.logs[0])
    finally:
        svc.close()


async def _witness_log_lists(url: str, outbound: Outbound, tmp: Path) -> object:
    """The log lists take the CA from the witness's own `outbound_ca_file`."""
    svc = _witness_service(tmp, url, outbound.ca_files[0])
    assert svc.lists is not None
    try:
        await svc.lists.refresh()
        return svc.lists.lists[0].error
    finally:
        await svc.lists.close()
        svc.close()


async def _registry_mirror(url: str, outbound: Outbound, tmp: Path) -> object:
    """`Mirror.fetch`: the upstream's /v1/info (urllib), then its Git repository (dulwich)."""
    from registry.index import Index
    from registry.mirror import Mirror
    from registry.store import RegistryRepo

    def fetch() -> object:
        m = Mirror(tmp / "m", url, repo=RegistryRepo(tmp / "m" / "registry.git"), index=Index(), outbound=outbound)
        try:
            return m.fetch()
        except OAPError as e:
            return e

    return await asyncio.to_thread(fetch)


async def _registry_mirror_git(url: str, outbound: Outbound, tmp: Path) -> object:
    """dulwich's Git smart HTTP client over the transport's urllib3 pool, as `Mirror.fetch` calls it."""
    from dulwich.client import get_transport_and_path

    def refs() -> object:
        client, path = get_transport_and_path(f"{url}/reg.git", pool_manager=outbound.pool_manager(timeout=120))
        try:
            return client.get_refs(path)
        except Exception as e:  # noqa: BLE001 - dulwich's errors for a failed connection vary
            return e

    return await asyncio.to_thread(refs)


async def _did_resolver(url: str, outbound: Outbound, tmp: Path) -> object:
    """From a service's settings: `outbound_ca_file` is trusted for did:web hosts too."""
    from tlog.didresolver import DidResolver

    port = url.rsplit(":", 1)[1]
    resolver = DidResolver.from_config(HTTPConfig(did_allow_private_networks=True,
                                                  outbound_ca_file=outbound.ca_files[0]))
    try:
        return await resolver.resolve(f"did:web:localhost%3A{port}")
    except OAPError as e:
        return e
    finally:
        await resolver.close()


async def _command(args: list[str], env: dict[str, str] | None = None) -> object:
    proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                env={**os.environ, **(env or {})})
    try:
        _, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode, err.decode()


async def _oap_log_info(url: str, outbound: Outbound, tmp: Path) -> object:
    return await _command([str(BIN / "oap-log"), "info", "--url", url, "--ca-file", str(outbound.ca_files[0])])


async def _oap_log_audit(url: str, outbound: Outbound, tmp: Path) -> object:
    """The CA from the environment (OAP_CA_FILE) instead of --ca-file."""
    policy = tmp / "log.policy"
    policy.write_text(f"log {LOG.vkey}\nquorum none\n")
    return await _command([str(BIN / "oap-log"), "audit", url, "--policy", str(policy)],
                          {"OAP_CA_FILE": str(outbound.ca_files[0])})


async def _oap_registry_status(url: str, outbound: Outbound, tmp: Path) -> object:
    return await _command([str(BIN / "oap-registry"), "status", "did:key:z6MkExample", "--url", url,
                           "--ca-file", str(outbound.ca_files[0])])


CLIENTS: dict[str, tuple[Probe, str]] = {  # the client, and the path its first request asks for
    "log witnessing": (_witnessing, "/add-checkpoint"),
    "log mirror push": (_mirror_push, "/add-checkpoint"),
    "mirror follower": (_mirror_follower, "/checkpoint"),
    "log client": (_info_of("log"), "/v1/info"),
    "registry client": (_info_of("registry"), "/v1/info"),
    "witness feeder": (_witness_feeder, "/checkpoint"),
    "witness log lists": (_witness_log_lists, "/list"),
    "registry mirror": (_registry_mirror, "/reg.git/info/refs"),  # after /v1/info: both clients
    "registry mirror git": (_registry_mirror_git, "/reg.git/info/refs"),
    "did resolver": (_did_resolver, "/.well-known/did.json"),
    "oap-log info": (_oap_log_info, "/v1/info"),
    "oap-log audit": (_oap_log_audit, "/checkpoint"),
    "oap-registry status": (_oap_registry_status, "/v1/info"),
}


async def _drive(probe: Probe, url: str, outbound: Outbound, tmp: Path, done: Callable[[], bool]) -> None:
    """Run one call of the client until the servers saw what the test waits for (a client
    that retries is stopped then), or the call ended; a bounded wait, no timing assumed."""
    tmp.mkdir(parents=True, exist_ok=True)
    task = asyncio.ensure_future(probe(url, outbound, tmp))
    try:
        await until(lambda: done() or task.done(), 300, "the client's connection")
        if task.done():
            task.result()  # a client that crashed instead of failing cleanly fails the test
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_the_tls_1_2_server_serves_a_client_that_allows_tls_1_2(peers):
    """The control: the TLS 1.2 server is a working HTTPS server for a client with the
    usual minimum (Python's default, TLS 1.2) and the same CA."""
    ctx = ssl.create_default_context(cafile=str(peers.ca_file))
    async with aiohttp.ClientSession() as s, s.get(peers.legacy_url + "/v1/info", ssl=ctx) as r:
        assert r.status == 200 and await r.json() == {}
    assert peers.served == ["TLSv1.2"] and peers.refused == []


@pytest.mark.parametrize("client", CLIENTS)
async def test_each_outbound_client_refuses_tls_1_2_and_talks_tls_1_3(tmp_path, peers, client):
    probe, path = CLIENTS[client]
    outbound = Outbound((peers.ca_file,))
    await _drive(probe, peers.legacy_url, outbound, tmp_path / "legacy",
                 lambda: any(UNSUPPORTED in r for r in peers.refused))
    assert peers.served == [], f"{client} made a TLS 1.2 connection"
    assert peers.refused and all(UNSUPPORTED in r for r in peers.refused if r), peers.refused

    await _drive(probe, peers.modern_url, outbound, tmp_path / "modern", lambda: any(p == path for _, p, _ in peers.seen))
    assert (path, "TLSv1.3") in {(p, v) for _, p, v in peers.seen}, peers.seen
    assert {v for _, _, v in peers.seen} == {"TLSv1.3"}


# --- redirects and plain URLs ---------------------------------------------------------------


async def test_a_redirect_into_plain_http_beyond_loopback_is_refused_before_it_is_followed(peers):
    """A peer (or whoever answers for it) cannot move a client to plain HTTP: the async
    clients and the blocking one refuse the hop, without a lookup of its name; a redirect
    to https:// is followed."""
    from registry.mirror import UpstreamError as MirrorUpstreamError
    from registry.mirror import fetch_url
    from tlog.client.client import LogClient

    peers.answers["/v1/info"] = (302, b"", {"Location": "http://log.example.invalid/v1/info"})
    peers.answers["/hop/v1/info"] = (302, b"", {"Location": peers.modern_url + "/good"})
    peers.answers["/good"] = (200, {"origin": "log.example"}, {})
    outbound = Outbound((peers.ca_file,))
    async with LogClient(peers.modern_url, outbound=outbound) as c:
        with pytest.raises(UpstreamError, match="plain http:// beyond loopback"):
            await c.info()
    async with LogClient(peers.modern_url + "/hop", outbound=outbound) as c:
        assert await c.info() == {"origin": "log.example"}
    with pytest.raises(MirrorUpstreamError, match="plain http:// beyond loopback"):
        await asyncio.to_thread(fetch_url, peers.modern_url + "/v1/info", outbound)
    assert json.loads(await asyncio.to_thread(fetch_url, peers.modern_url + "/hop/v1/info", outbound)) == \
        {"origin": "log.example"}
    assert [p for _, p, _ in peers.seen].count("/good") == 2


async def test_plain_http_beyond_loopback_is_refused_unless_insecure_http():
    outbound = Outbound()
    async with outbound.session(timeout=30) as s:
        with pytest.raises(InsecureTransport, match=r"§8\.1"):
            await s.get("http://log.example.invalid/checkpoint")
    with pytest.raises(InsecureTransport):
        await asyncio.to_thread(outbound.fetch, "http://log.example.invalid/checkpoint", timeout=30)
    async with Outbound(insecure_http=True).session(timeout=30) as s:
        with pytest.raises(aiohttp.ClientError) as e:  # tried: the name does not resolve
            await s.get("http://log.example.invalid/checkpoint")
        assert not isinstance(e.value, InsecureTransport)
    with pytest.raises(urllib.error.URLError):
        await asyncio.to_thread(Outbound(insecure_http=True).fetch, "http://log.example.invalid/", timeout=30)


def test_clients_refuse_a_plain_http_url_beyond_loopback_unless_told():
    from registry.client import RegistryClient
    from tlog.client.client import LogClient

    for make in (LogClient, RegistryClient):
        with pytest.raises(OAPError, match="plain http:// beyond loopback"):
            make("http://log.example.invalid")


async def test_an_answer_larger_than_the_cap_is_refused(peers):
    """The blocking client reads within its cap too (the async one: tests/witness/test_feeder.py)."""
    from tlog.errors import TooLarge

    peers.answers["/big"] = (200, b"x" * 5000, {})
    outbound = Outbound((peers.ca_file,))
    assert len(await asyncio.to_thread(outbound.fetch, peers.modern_url + "/big", timeout=60, cap=5000)) == 5000
    with pytest.raises(TooLarge):
        await asyncio.to_thread(outbound.fetch, peers.modern_url + "/big", timeout=60, cap=4999)


async def test_the_bucket_trusts_the_outbound_ca_file(peers):
    """The S3 bucket is reached by obstore's own client (no minimum TLS version can be set
    there: docs/architecture.md §7); the operator's CA file reaches it too."""
    from tlog.storage.bucket import Bucket

    def get(ca_pem: bytes | None) -> bytes | None:
        bucket = Bucket.from_config(peers.modern_url + "/b", key_id="k", secret="s", ca_pem=ca_pem)
        return bucket.get("checkpoint")

    with pytest.raises(Unavailable):  # the test CA is not among the system's
        await asyncio.to_thread(get, None)
    assert not peers.seen
    assert await asyncio.to_thread(get, peers.ca_file.read_bytes()) is None  # the 404 of the test server
    assert [(p, v) for _, p, v in peers.seen] == [("/b/checkpoint", "TLSv1.3")]
