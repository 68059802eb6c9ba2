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
from tlog.formats.entries import decode_entry, receipt_hash
from tlog.formats.hashing import format_sha256, sha256
from tlog.formats.proofbundle import parse_proof_bundle
from tlog.server.api import build_app
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


async def test_a_did_web_signed_entry_verifies_offline_with_no_network(tmp_path, hosts):
    """The log keeps the DID document it resolved in the entry (docs/architecture.md §3.1),
    so the bundle handed back at submission verifies with no network years later: the
    entry's signature, and the receipt's tool signature by the same did:web. The did:web
    host is stopped before verifying. A pinned copy is the only document used for its DID:
    with other keys it fails, with the right ones it verifies."""
    from tests.support.didhosts import did_key, invocation_receipt, sign_receipt
    from tests.support.registry import BIN, run

    tool, agent = Key(P256), Key()
    web_did = hosts.web_did("weatherpro")
    doc = document(web_did, {"key-1": tool})
    hosts.publish_web(web_did, doc)
    receipt = sign_receipt(invocation_receipt(did_key(agent), web_did), (did_key(agent), agent),
                           (f"{web_did}#key-1", tool))
    rh = receipt_hash(receipt)
    entry = {"type": "receipt", "receipt_hash": format_sha256(rh), "signer": f"{web_did}#key-1",
             "signature": b64enc(tool.sign(rh))}
    async with running_log(tmp_path, hosts) as url:
        st, body = await post(url, entry)
        assert st == 200, body
        assert hosts.hits == {"/weatherpro/did.json": 1}
        bundle = tmp_path / "r.tlog-proof"
        bundle.write_text(body["bundle"])  # what the submitter keeps: the bundle alone
        stored = decode_entry(parse_proof_bundle(body["bundle"]).extra)
        assert stored["did_document"] == doc and {k: v for k, v in stored.items() if k != "did_document"} == entry
        # the same entry with the document spelled out is the same leaf; another document is refused
        st, again = await post(url, {**entry, "did_document": doc})
        assert st == 200 and again["duplicate"] and again["index"] == body["index"], again
        st, other = await post(url, {**entry, "did_document": document(web_did, {"key-1": Key(P256)})})
        assert st == 400 and "not the DID document" in other["message"], other
        # the client library checks what the log stored (the entry plus the document)
        from tlog.client.client import LogClient
        async with LogClient(url) as client:
            got = await client.anchor(entry)
            many = await client.anchor_many([entry])
        assert got.index == body["index"] and got.duplicate and many[0].leaf_hash == got.leaf_hash
    await hosts.close()  # offline from here on: no did:web host, no log
    policy = tmp_path / "data" / "log.policy"
    receipt_file = tmp_path / "receipt.json"
    receipt_file.write_text(json.dumps(receipt))
    verify = (str(BIN / "oap-log"), "verify", str(bundle), "--policy", str(policy), "--receipt", str(receipt_file))
    code, out, err = await run(*verify)
    assert code == 0, out + err
    assert f"signed by {web_did}#key-1" in out and "1 verified, 0 failed" in out, out
    assert f"(tool): verified (ES256), with key {web_did}#key-1 from the DID document kept in the log entry" in out
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(document(web_did, {"key-1": Key(P256)})))
    # a pinned document is the only one used for its DID: the log's copy is then not trusted
    code, out, _ = await run(*verify, "--did-document", str(wrong), "--json")
    first = json.loads(out.splitlines()[0])
    assert code == 1 and first["entry_signature"]["source"] == "pinned", out
    assert first["entry_signature"]["status"] == "failed" and first["receipt"]["signatures"][1]["status"] == "failed"
    right = tmp_path / "right.json"
    right.write_text(json.dumps(doc))
    code, out, _ = await run(*verify, "--did-document", str(right), "--json")
    first = json.loads(out.splitlines()[0])
    assert code == 0 and first["entry_signature"]["source"] == "pinned", out
    assert first["receipt"]["signatures"][1]["source"] == "pinned"


async def test_a_did_document_too_large_for_an_entry_is_refused_with_why(tmp_path, hosts):
    """An entry is at most 65,535 bytes (tlog-tiles), the DID document it keeps included."""
    alice = Key()
    web_did = hosts.web_did("big")
    doc = document(web_did, {"k": alice})
    doc["service"] = [{"id": "#s", "type": "LinkedDomains", "serviceEndpoint": "https://x.example/"}]
    pad = 65_400 - len(json.dumps(doc))  # the document fits the resolver's 64 KiB, not an entry beside the rest
    doc["service"][0]["serviceEndpoint"] += "a" * pad
    hosts.publish_web(web_did, doc)
    async with running_log(tmp_path, hosts) as url:
        st, body = await post(url, signed_receipt(web_did, alice, 0))
        assert st == 413 and "the limit is 65535" in body["message"] and "DID document" in body["message"], body
        doc["service"][0]["serviceEndpoint"] = "https://x.example/"
        hosts.publish_web(hosts.web_did("small"), {**doc, "id": hosts.web_did("small")})
        st, body = await post(url, signed_receipt(hosts.web_did("small"), alice, 1))
        assert st == 200, body
