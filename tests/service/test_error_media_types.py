"""Error answers come in the media type the request asked for (OAP-CORE-1.0 App. D registers
application/oap+json and application/oap+cbor), from every service, whether aiohttp or the
fast path (tlog.http.fastpath) answers: one encoder, `tlog.http.responses.error_answer`.

Each case is sent over a real connection to a service on 127.0.0.1 and the Content-Type,
the Vary header and the decoded body ({"error": <App. B code>, "message"}) are checked."""
from __future__ import annotations

import json

import aiohttp
import cbor2
import pytest

from tlog.errors import LogHalted
from tlog.http.fastpath import FAST_ROUTES_KEY
from tlog.http.responses import CONTENT_TYPES, json_type, reply_format
from tlog.http.serve import start_app
from tlog.server.api import build_app
from tlog.server.config import LogConfig
from tlog.server.service import LogService
from witness.config import WitnessedLog

from tests.support.registry import start_registry
from tests.support.services import ServerProcess
from tests.support.witness import MemLog, running_witness, witness_config

ACCEPTS = [  # Accept sent -> Content-Type expected
    (None, "application/json"),
    ("*/*", "application/json"),
    ("application/json", "application/json"),
    ("application/oap+json", "application/oap+json"),
    ("application/oap+json, application/json;q=0.5", "application/oap+json"),
    ("application/oap+cbor", "application/oap+cbor"),
    ("application/cbor", "application/oap+cbor"),
    # RFC 9110 §12.5.1: q=0 is "not acceptable", the highest q wins, types match exactly
    ("application/cbor;q=0, application/json", "application/json"),
    ("application/oap+json;q=0, application/json", "application/json"),
    ("application/json;q=0.9, application/oap+cbor;q=0.5", "application/json"),
    ("application/cbor-seq", "application/json"),
    ("application/x-notapplication/oap+json", "application/json"),
]

NEGOTIATED = [  # more Accept headers -> the Content-Type of the answer (tlog.http.responses.reply_format)
    *ACCEPTS[1:],
    ("", "application/json"),
    ("APPLICATION/OAP+CBOR", "application/oap+cbor"),
    ("application/*", "application/json"),
    ("application/json, */*", "application/json"),
    ("text/html, */*;q=0.1", "application/json"),
    ("application/oap+json; charset=utf-8", "application/oap+json"),
    ("application/oap+json;q=0.5, application/*;q=0.8", "application/json"),
    ("application/oap+cbor;q=0, */*", "application/json"),
    ("application/json, application/oap+cbor", "application/oap+cbor"),
    ("application/json;q=0.2, application/oap+json;q=0.3", "application/oap+json"),
    ("application/oap+cbor;q=1.5", "application/json"),  # not a qvalue: the element is ignored
    ("application/oap+cbor;q=0.001", "application/oap+cbor"),
    ("*/cbor, application/jsonx, xapplication/json", "application/json"),
    ("application/json;q=0, application/oap+json;q=0, application/cbor;q=0", "application/json"),
]


@pytest.mark.parametrize("accept,want", NEGOTIATED)
def test_accept_is_negotiated_by_media_range_and_q_value(accept, want):
    assert CONTENT_TYPES[reply_format(accept)] == want
    assert json_type(accept) == (want if want != "application/oap+cbor" else "application/json")


@pytest.mark.parametrize("accept,want", [
    ("application/cbor, application/oap+json", "application/oap+json"),
    ("application/oap+cbor, application/json;q=0.5, application/oap+json;q=0.4", "application/json"),
    ("application/oap+cbor, */*", "application/json"),
])
def test_a_json_answer_to_a_cbor_client_is_negotiated_among_the_json_types(accept, want):
    """Answers that exist only as JSON (errors, documents) take the JSON type the client
    ranks first, even when it ranks CBOR above both."""
    assert CONTENT_TYPES[reply_format(accept)] == "application/oap+cbor"
    assert json_type(accept) == want


async def check_error(session: aiohttp.ClientSession, method: str, url: str, accept: str | None, want: str,
                      status: int, code: str, **kw) -> dict:
    headers = dict(kw.pop("headers", {}))
    if accept is not None:
        headers["Accept"] = accept
    else:
        headers["Accept"] = ""  # aiohttp would send */*; an empty Accept is "no preference"
    async with session.request(method, url, headers=headers, **kw) as r:
        body = await r.read()
        assert r.status == status, (r.status, body)
        assert r.headers["Content-Type"] == want, (accept, r.headers["Content-Type"])
        assert "Accept" in r.headers.get("Vary", "")
    doc = cbor2.loads(body) if want == "application/oap+cbor" else json.loads(body)
    assert doc["error"] == code and isinstance(doc["message"], str) and doc["message"], doc
    return doc


@pytest.fixture(scope="module")
def log_server(tmp_path_factory):
    p = ServerProcess(tmp_path_factory.mktemp("log") / "data", "--batch-interval-ms", "5").start()
    yield p
    p.kill()


@pytest.mark.parametrize("accept,want", ACCEPTS)
async def test_log_errors_follow_accept_through_aiohttp_and_the_fast_path(tmp_path, accept, want):
    svc = await LogService.open(LogConfig(data_dir=tmp_path / "data", port=0, batch_interval_ms=2,
                                          rate_limit_read=0, rate_limit_write=0))
    runner = await start_app(build_app(svc), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    routes = runner.app[FAST_ROUTES_KEY]
    try:
        async with aiohttp.ClientSession() as s:
            # aiohttp answers these: no route, a bad query, a body that is not JSON
            await check_error(s, "GET", url + "/v1/nope", accept, want, 404, "not_found")
            await check_error(s, "GET", url + "/v1/proof/inclusion?index=x", accept, want, 400, "invalid_input")
            await check_error(s, "POST", url + "/v1/entries:batch", accept, want, 400, "invalid_input",
                              data=b"{", headers={"Content-Type": "application/json"})
        # the fast path answers a single append that fails once accepted (a halted log), on a
        # new connection (one that aiohttp answered on stays aiohttp's)
        svc.appender.halted = LogHalted("test: the log refuses writes")
        before = routes.answered
        async with aiohttp.ClientSession() as s:
            doc = await check_error(s, "POST", url + "/v1/entries", accept, want, 503, "maintenance",
                                    data=b'{"type":"commitment","commitment":"sha256:' + b"ab" * 32 + b'"}',
                                    headers={"Content-Type": "application/oap+json"})
        assert routes.answered == before + 1, "the append was not answered on the fast path"
        assert doc["message"] == "test: the log refuses writes"
    finally:
        await runner.cleanup()
        await svc.close()


@pytest.mark.parametrize("accept,want", ACCEPTS)
async def test_witness_errors_follow_accept_and_add_checkpoint_keeps_its_protocol_types(tmp_path, accept, want):
    log = MemLog().grow(4)
    cfg = witness_config(tmp_path, [WitnessedLog(log.origin, log.vkey)], require_own_level="none")
    async with running_witness(cfg) as (_svc, url, s):
        await check_error(s, "GET", url + "/v1/nope", accept, want, 404, "not_found")
        await check_error(s, "POST", url + "/v1/conformance/witness", accept, want, 400, "invalid_input",
                          data=b"{", headers={"Content-Type": "application/oap+json"})
        # C2SP tlog-witness answers add-checkpoint in its own text forms whatever Accept says
        headers = {"Accept": accept} if accept else {}
        async with s.post(url + "/add-checkpoint", data=b"old 0\n\nnot a note\n", headers=headers) as r:
            assert r.status == 400 and r.headers["Content-Type"].startswith("text/plain")
        assert (await s.post(url + "/add-checkpoint", data=log.body(0, 4))).status == 200
        async with s.post(url + "/add-checkpoint", data=log.body(0, 2), headers=headers) as r:
            assert r.status == 409 and r.headers["Content-Type"] == "text/x.tlog.size" and await r.text() == "4\n"


@pytest.mark.parametrize("accept,want", ACCEPTS)
async def test_registry_errors_follow_accept_on_its_fast_route_too(tmp_path, log_server, accept, want):
    reg = await start_registry(tmp_path / "r", log_server)
    try:
        async with aiohttp.ClientSession() as s:
            await check_error(s, "GET", reg.url + "/v1/records/urn:nope", accept, want, 404, "not_found")
            await check_error(s, "POST", reg.url + "/v1/records", accept, want, 400, "invalid_input",
                              data=b'{"type":"nope"}', headers={"Content-Type": "application/oap+json"})
            # /v1/status/ is a fast route: a refused id goes on to aiohttp, which answers the error
            await check_error(s, "GET", reg.url + "/v1/status/" + "x" * 1100, accept, want, 400, "invalid_input")
    finally:
        await reg.stop()
