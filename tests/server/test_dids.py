"""The log accepts receipts signed by did:web and did:plc principals (OAP-CORE-1.0
§5.1), resolved from a real HTTPS did:web host (TLS 1.3, a test CA) and a PLC
directory stub on 127.0.0.1; and it refuses what it should, with 4xx/502, never 500."""
from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tlog.didresolver import DidResolver
from tlog.formats.diddoc import P256, SECP256K1
from tlog.formats.encoding import b64enc
from tlog.formats.hashing import format_sha256, sha256
from tlog.server.app import build_app
from tlog.server.config import LogConfig
from tlog.server.service import LogService

from tests.support.didhosts import DidHosts, Key, document

PLC_DID = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"


def signed_receipt(signer: str, key: Key, n: int, *, url_safe: bool = False) -> dict:
    h = sha256(b"receipt %d" % n)
    sig = key.sign(h)
    value = b64enc(sig)
    if url_safe:
        value = value.replace("+", "-").replace("/", "_").rstrip("=")
    return {"type": "receipt", "receipt_hash": format_sha256(h), "signer": signer, "signature": value}


@pytest.fixture
async def hosts(tmp_path):
    h = await DidHosts().start(tmp_path / "tls")
    yield h
    await h.close()


@contextlib.asynccontextmanager
async def running_log(tmp_path: Path, hosts: DidHosts, **did_settings):
    """A log on 127.0.0.1 that resolves DIDs from `hosts`; yields its URL."""
    settings = dict(did_ca_file=hosts.ca_file, did_allow_private_networks=True, did_plc_directory=hosts.plc_url)
    settings.update(did_settings)
    svc = await LogService.open(LogConfig(data_dir=tmp_path / "data", port=0, batch_interval_ms=5, **settings))
    server = TestServer(build_app(svc), host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()
        await svc.close()


async def post(url: str, doc: dict) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/entries", data=json.dumps(doc).encode(),
                          headers={"Content-Type": "application/json"}) as r:
            return r.status, await r.json(content_type=None)


async def test_did_web_and_did_plc_signers_are_resolved_and_indexed(tmp_path, hosts):
    alice, rotated = Key(), Key(P256)
    web_did = hosts.web_did("users", "alice")
    hosts.publish_web(web_did, document(web_did, {"key-1": alice, "key-2": rotated}, style="jwk"))
    plc_key = Key(SECP256K1)
    hosts.publish_plc(PLC_DID, document(PLC_DID, {"atproto": plc_key}))
    async with running_log(tmp_path, hosts) as url:
        st, a = await post(url, signed_receipt(web_did, alice, 0))
        assert st == 200, a
        st, b = await post(url, signed_receipt(f"{web_did}#key-2", rotated, 1, url_safe=True))
        assert st == 200, b
        st, c = await post(url, signed_receipt(PLC_DID, plc_key, 2))
        assert st == 200, c
        # one fetch per DID: the second did:web receipt came from the cache
        assert hosts.hits == {"/users/alice/did.json": 1, f"/{PLC_DID}": 1}
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{url}/v1/receipts", params={"signer": web_did}) as r:
                listed = await r.json()
        assert [x["index"] for x in listed["receipts"]] == [a["index"], b["index"]]


async def test_wrong_keys_unknown_dids_and_down_hosts_are_4xx_or_502(tmp_path, hosts):
    alice, mallory = Key(), Key()
    web_did = hosts.web_did("alice")
    hosts.publish_web(web_did, document(web_did, {"k": alice}))
    async with running_log(tmp_path, hosts) as url:
        st, body = await post(url, signed_receipt(web_did, mallory, 0))
        assert (st, body["error"]) == (400, "invalid_input") and "does not verify" in body["message"]
        st, body = await post(url, signed_receipt(f"{web_did}#other", alice, 0))
        assert st == 400 and "no signing key #other" in body["message"]
        st, body = await post(url, signed_receipt(hosts.web_did("nobody"), alice, 0))
        assert st == 400 and body["error"] == "invalid_input" and "404" in body["message"]
        hosts.publish_web(hosts.web_did("broken"), web.Response(status=500))
        st, body = await post(url, signed_receipt(hosts.web_did("broken"), alice, 0))
        assert (st, body["error"]) == (502, "upstream_error")
        hosts.publish_web(hosts.web_did("huge"), b"{" + b" " * 70_000 + b"}")
        st, body = await post(url, signed_receipt(hosts.web_did("huge"), alice, 0))
        assert st == 400 and "larger than" in body["message"]
        down = "did:web:localhost%3A1:x"  # nothing listens on port 1
        st, body = await post(url, signed_receipt(down, alice, 0))
        assert (st, body["error"]) == (502, "upstream_error")
        st, body = await post(url, signed_receipt("did:example:123", alice, 0))
        assert st == 400 and "not supported" in body["message"]
        st, _ = await post(url, signed_receipt(web_did, alice, 1))  # and the log still serves
        assert st == 200


async def test_private_addresses_are_refused_unless_allowed_and_nothing_is_fetched(tmp_path, hosts):
    alice = Key()
    web_did = hosts.web_did("alice")
    hosts.publish_web(web_did, document(web_did, {"k": alice}))
    async with running_log(tmp_path, hosts, did_allow_private_networks=False) as url:
        st, body = await post(url, signed_receipt(web_did, alice, 0))
        assert (st, body["error"]) == (400, "invalid_input") and "public address" in body["message"]
        literal = "did:web:127.0.0.1%3A" + str(hosts.web_port)
        st, body = await post(url, signed_receipt(literal, alice, 0))
        assert st == 400 and "public address" in body["message"]
        assert hosts.hits == {}


async def test_pinned_documents_answer_with_resolution_off(tmp_path, hosts):
    alice = Key(P256)
    pinned_did = "did:web:pinned.example"
    pins = tmp_path / "pins"
    pins.mkdir()
    (pins / "alice.json").write_text(json.dumps(document(pinned_did, {"k": alice})))
    async with running_log(tmp_path, hosts, did_resolution=False, did_documents_dir=pins) as url:
        st, body = await post(url, signed_receipt(pinned_did, alice, 0))
        assert st == 200, body
        st, body = await post(url, signed_receipt(hosts.web_did("alice"), alice, 1))
        assert st == 400 and "turned off" in body["message"]
        assert hosts.hits == {}


async def test_the_resolver_fetches_each_did_once_under_concurrency_and_caches_failures(tmp_path, hosts):
    alice = Key()
    web_did = hosts.web_did("alice")
    hosts.publish_web(web_did, document(web_did, {"k": alice}))
    resolver = DidResolver(plc_directory=hosts.plc_url, allow_private_networks=True, ca_file=hosts.ca_file)
    try:
        got = await asyncio.gather(*(resolver.resolve(web_did) for _ in range(20)))
        assert {g[1][0].public for g in got} == {alice.raw_public}
        assert resolver.fetched == 1
        missing = hosts.web_did("missing")
        for _ in range(3):
            with pytest.raises(Exception, match="404"):
                await resolver.resolve(missing)
        assert hosts.hits["/missing/did.json"] == 1
    finally:
        await resolver.close()


async def test_a_tls_1_2_only_host_is_refused(tmp_path):
    """did:web documents come over TLS 1.3 only (OAP-CORE-1.0 §28.1)."""
    import ssl

    from tests.support.didhosts import make_ca

    ca_file, _ = make_ca(tmp_path / "tls12")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(tmp_path / "tls12" / "cert.pem", tmp_path / "tls12" / "key.pem")
    key = Key()

    async def serve(request: web.Request) -> web.Response:
        return web.json_response(document(did, {"k": key}))

    app = web.Application()
    app.router.add_get("/{tail:.*}", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx).start()
    did = f"did:web:localhost%3A{runner.addresses[0][1]}"
    resolver = DidResolver(allow_private_networks=True, ca_file=ca_file)
    try:
        with pytest.raises(Exception) as e:
            await resolver.resolve(did)
        assert getattr(e.value, "status", None) == 502
    finally:
        await resolver.close()
        await runner.cleanup()


async def test_offline_verify_checks_a_did_web_signature_with_a_pinned_document(tmp_path, hosts):
    """`oap-log verify --did-document`: the bundle's entry signature is checked with no
    network; a document with another key fails it; without one the output says so."""
    from tests.support.registry import BIN, run

    alice = Key(P256)
    web_did = hosts.web_did("alice")
    doc = document(web_did, {"k": alice})
    hosts.publish_web(web_did, doc)
    async with running_log(tmp_path, hosts) as url:
        st, body = await post(url, signed_receipt(web_did, alice, 7))
        assert st == 200, body
        bundle = tmp_path / "r.tlog-proof"
        code, out, err = await run(str(BIN / "oap-log"), "prove", str(body["index"]), "--url", url,
                                   "--out", str(bundle))
        assert code == 0, out + err
    await hosts.close()  # offline from here on
    policy = tmp_path / "data" / "log.policy"
    pinned, wrong = tmp_path / "alice.json", tmp_path / "wrong.json"
    pinned.write_text(json.dumps(doc))
    wrong.write_text(json.dumps(document(web_did, {"k": Key(P256)})))
    verify = (str(BIN / "oap-log"), "verify", str(bundle), "--policy", str(policy))
    code, out, _ = await run(*verify, "--did-document", str(pinned))
    assert code == 0 and f"signed by {web_did}" in out and "not checked" not in out, out
    code, out, _ = await run(*verify, "--did-document", str(wrong))
    assert code == 1 and "does not verify" in out, out
    code, out, _ = await run(*verify)
    assert code == 0 and "not checked, pass its --did-document" in out, out
