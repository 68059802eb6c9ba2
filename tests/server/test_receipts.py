"""The log's index of receipt entries by signer and receipt hash (OAP-CORE-1.0 §28.5):
after a key is compromised, its owner lists what it signed since, on either backend."""
from __future__ import annotations

import asyncio
import base64
import json
import sqlite3
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from click.testing import CliRunner

from tlog.formats.did import did_key_from_public
from tlog.formats.ed25519 import generate_seed
from tlog.formats.ed25519 import public_from_seed as public_key
from tlog.formats.entries import canonical_entry, commitment_entry, receipt_entry
from tlog.formats.hashing import format_sha256, sha256
from tlog.server.api import build_app
from tlog.server.cli import main as log_cli
from tlog.server.config import LogConfig
from tlog.server.service import LogService
from tlog.storage.embedded import EmbeddedStorage

from tests.support.drivers import Writer
from tests.support.signers import checkpoint_signer, make_signer

ALICE, BOB = generate_seed(), generate_seed()
ALICE_DID = did_key_from_public(public_key(ALICE))
SIGN = checkpoint_signer(make_signer("receipts.test/log"))


def rh(i: int) -> bytes:
    return sha256(b"receipt %d" % i)


def mixed_entries() -> list[bytes]:
    """Alice signs 0, 2, 4 (4 claims a time far ahead), Bob 1, a commitment is 3, Alice
    again 5 with her key spelled as ed25519:<base64> (the same key: the same signer)."""
    raw = "ed25519:" + base64.b64encode(public_key(ALICE)).decode()
    e5 = receipt_entry(rh(5), ALICE)
    e5["signer"] = raw
    return [canonical_entry(e) for e in (
        receipt_entry(rh(0), ALICE, timestamp="2026-01-02T03:04:05Z"),
        receipt_entry(rh(1), BOB),
        receipt_entry(rh(2), ALICE),
        commitment_entry(rh(3)),
        receipt_entry(rh(4), ALICE, timestamp="2099-01-01T00:00:00.5Z"),
        e5)]


async def _check_reader(reader, size: int) -> None:
    rows = await reader.receipts(size, signer=ALICE_DID)
    assert [r.index for r in rows] == [0, 2, 4, 5]
    assert [r.receipt_hash for r in rows] == [rh(0), rh(2), rh(4), rh(5)]
    assert rows[0].timestamp == "2026-01-02T03:04:05Z" and rows[1].timestamp is None
    assert rows[2].signed_at == pytest.approx(4070908800.5)
    # since: a receipt counts when logged after it, or claiming to be signed after it
    future = await reader.receipts(size, signer=ALICE_DID, since=4_000_000_000.0)
    assert [r.index for r in future] == [4]
    assert [r.index for r in await reader.receipts(size, signer=ALICE_DID, after=2, limit=1)] == [4]
    assert [r.index for r in await reader.receipts(size, receipt_hash=rh(1))] == [1]
    assert [r.signer for r in await reader.receipts(size, receipt_hash=rh(1))] == [
        did_key_from_public(public_key(BOB))]
    assert await reader.receipts(size, receipt_hash=rh(3)) == []  # a commitment names no signer
    assert [r.index for r in await reader.receipts(3, signer=ALICE_DID)] == [0, 2]  # an older tree


def test_embedded_index_and_its_backfill(tmp_path: Path):
    w = Writer(EmbeddedStorage(tmp_path / "log"), SIGN)
    w.open()
    w.append(mixed_entries())
    w.close()

    async def query() -> None:
        reader = EmbeddedStorage(tmp_path / "log")
        state = Writer(reader, SIGN).open()
        entries = reader.entries()
        await entries.open()
        try:
            await _check_reader(entries, state.size)
        finally:
            await entries.close()
            reader.close()

    asyncio.run(query())
    # A log written before the index existed: the index is built once, at start.
    with sqlite3.connect(tmp_path / "log" / "log.db") as db:
        db.execute("DELETE FROM receipts")
        db.execute("DELETE FROM meta WHERE key = 'receipts_indexed'")
    asyncio.run(query())


@pytest.mark.slow
def test_postgres_index(engines, tmp_path: Path):
    from tlog.storage.postgres import PostgresStorage

    store = PostgresStorage(engines.database(), tmp_path / "pg", name="a")
    w = Writer(store, SIGN)
    w.open()

    async def query(size: int) -> None:
        entries = store.entries()
        await entries.open()
        try:
            await _check_reader(entries, size)
        finally:
            await entries.close()

    try:
        result = w.append(mixed_entries())
        again = w.append(mixed_entries()[:2])  # duplicates: no second index row
        assert again.indices == [0, 1] and not any(again.fresh)
        asyncio.run(query(result.state.size))
    finally:
        w.close()


@pytest.fixture
async def log(tmp_path):
    svc = await LogService.open(LogConfig(data_dir=tmp_path / "data", port=0, batch_interval_ms=5))
    server = TestServer(build_app(svc), host="127.0.0.1", port=0)
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    async with aiohttp.ClientSession() as session:
        for data in mixed_entries():
            async with session.post(url + "/v1/entries", data=json.dumps(_json_of(data)).encode(),
                                    headers={"Content-Type": "application/json"}) as r:
                assert r.status == 200, await r.text()
        yield url, session
    await server.close()
    await svc.close()


def _json_of(data: bytes) -> dict:
    import cbor2

    return cbor2.loads(data)


async def _get(session, url: str) -> tuple[int, dict]:
    async with session.get(url) as r:
        return r.status, await r.json()


async def test_http_receipts_by_signer_pages_and_lookup(log):
    url, session = log
    status, body = await _get(session, f"{url}/v1/receipts?signer={ALICE_DID}")
    assert status == 200 and body["tree_size"] == 6 and body["signer"] == ALICE_DID
    assert [r["index"] for r in body["receipts"]] == [0, 2, 4, 5] and "next_after" not in body
    assert body["receipts"][0] == {"index": 0, "signer": ALICE_DID, "receipt_hash": format_sha256(rh(0)),
                                   "timestamp": "2026-01-02T03:04:05Z",
                                   "logged_at": body["receipts"][0]["logged_at"]}
    assert body["receipts"][0]["logged_at"].endswith("Z")
    # pages of two, then the rest
    status, p1 = await _get(session, f"{url}/v1/receipts?signer={ALICE_DID}&limit=2")
    assert [r["index"] for r in p1["receipts"]] == [0, 2] and p1["next_after"] == 2
    status, p2 = await _get(session, f"{url}/v1/receipts?signer={ALICE_DID}&limit=2&after=2")
    assert [r["index"] for r in p2["receipts"]] == [4, 5]
    # since the far future: only the receipt that claims to be signed then
    status, body = await _get(session, f"{url}/v1/receipts?signer={ALICE_DID}&since=2090-01-01T00:00:00Z")
    assert [r["index"] for r in body["receipts"]] == [4]
    status, body = await _get(session, f"{url}/v1/entries:lookup?receipt_hash={format_sha256(rh(1))}")
    assert status == 200 and [r["index"] for r in body["receipts"]] == [1]


async def test_http_entries_carry_their_log_time_where_the_log_records_one(log):
    """A receipt entry's answer says when the log committed it (its receipt index row, also
    for one receipt hash anchored by two signers); other entry types carry no log time."""
    url, session = log
    for e in (receipt_entry(rh(9), ALICE), receipt_entry(rh(9), BOB)):
        async with session.post(url + "/v1/entries", data=json.dumps(e).encode(),
                                headers={"Content-Type": "application/json"}) as r:
            assert r.status == 200, await r.text()
    _, listed = await _get(session, f"{url}/v1/entries:lookup?receipt_hash={format_sha256(rh(9))}")
    assert [r["index"] for r in listed["receipts"]] == [6, 7]
    _, alice = await _get(session, f"{url}/v1/receipts?signer={ALICE_DID}")
    logged = {r["index"]: r["logged_at"] for r in alice["receipts"] + listed["receipts"]}
    for index in (0, 2, 5, 6, 7):
        status, body = await _get(session, f"{url}/v1/entries/{index}")
        assert status == 200 and body["logged_at"] == logged[index], index
    status, body = await _get(session, f"{url}/v1/entries/3")  # a commitment: no log time recorded
    assert status == 200 and body["entry"]["type"] == "commitment" and "logged_at" not in body


@pytest.mark.parametrize("query, code", [
    ("/v1/receipts", 400),
    ("/v1/receipts?signer=alice", 400),
    ("/v1/receipts?signer=did:key:z6Mk&since=yesterday", 400),
    ("/v1/receipts?signer=did:web:example.com&limit=0", 400),
    ("/v1/receipts?signer=did:web:example.com&limit=1001", 400),
    ("/v1/receipts?signer=did:web:example.com&after=-5", 400),
    ("/v1/receipts?signer=did:web:example.com&limit=%C2%B2", 400),  # '²': str.isdigit() but not int()
    ("/v1/receipts?signer=did:web:example.com&after=%D9%A1", 400),  # Arabic-Indic 1
    ("/v1/receipts?signer=did:web:example.com&after=02", 400),
    ("/v1/receipts?signer=did:web:example.com&after=9223372036854775808", 400),  # more than storage holds
    ("/v1/receipts?signer=did:web:example.com&after=9999999999999999999", 400),
    ("/v1/receipts?signer=did:web:example.com&after=9223372036854775807", 200),
    ("/v1/entries:lookup?receipt_hash=abc", 400),
    ("/v1/entries:lookup?receipt_hash=sha256:" + "0" * 64, 404),
])
async def test_http_receipts_refuse_bad_queries_with_4xx(log, query, code):
    url, session = log
    async with session.get(url + query) as r:
        assert r.status == code, await r.text()
        if code != 200:
            assert (await r.json())["error"] in {"invalid_input", "not_found"}


async def test_http_unknown_did_method_is_an_empty_list(log):
    url, session = log
    status, body = await _get(session, f"{url}/v1/receipts?signer=did:web:example.com")
    assert status == 200 and body["receipts"] == []


def test_cli_add_copies_the_receipt_time_and_receipts_lists_it(tmp_path: Path, server):
    proc = server()
    key = tmp_path / "k.key"
    runner = CliRunner()
    assert runner.invoke(log_cli, ["keygen", "--name", "alice", "--out", str(key)]).exit_code == 0
    receipt = tmp_path / "r.json"
    receipt.write_text(json.dumps({"receipt_id": "urn:oap:receipt:1", "timestamp": "2026-05-02T10:00:00.215Z",
                                   "action": "x"}))
    r = runner.invoke(log_cli, ["add", str(receipt), "--key", str(key), "--url", proc.url])
    assert r.exit_code == 0, r.output
    signer = _did_of(key)
    listed = runner.invoke(log_cli, ["receipts", "--signer", signer, "--url", proc.url])
    assert listed.exit_code == 0, listed.output
    rows = [json.loads(line) for line in listed.output.splitlines()]
    assert len(rows) == 1 and rows[0]["timestamp"] == "2026-05-02T10:00:00.215Z"
    later = runner.invoke(log_cli, ["receipts", "--signer", signer, "--since",
                                    "2099-01-01T00:00:00Z", "--url", proc.url])
    assert later.exit_code == 0 and later.output == ""
    bad = runner.invoke(log_cli, ["receipts", "--signer", "x", "--since", "soon", "--url", proc.url])
    assert bad.exit_code != 0 and "since" in bad.output and "Traceback" not in bad.output


def _did_of(key: Path) -> str:
    from tlog.runtime.keyfiles import read_seed

    return did_key_from_public(public_key(read_seed(key)))
