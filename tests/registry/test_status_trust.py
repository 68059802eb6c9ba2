"""What a relying party may trust in a status answer: that it is about the id asked about,
and that its epoch is anchored in k of the registry's logs (docs/architecture.md §6, §6.1).

Answers are genuine (signed by the registry key, anchored in real tlog-proofs of in-memory
logs); a real aiohttp server on 127.0.0.1 plays a cache or a man in the middle that hands
out a genuine answer about another id.
"""
from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web

from registry.anchoring import AnchorLog, Genesis
from registry.client import RegistryClient
from registry.status import CAVEAT, sign_object
from registry.statusverify import StatusVerificationError, anchor_policy, status_id_of, verify_status
from tlog.client.verifier import TrustPolicy
from tlog.formats import ed25519
from tlog.formats.anchors import anchors_text
from tlog.formats.canonical import jcs
from tlog.formats.did import did_key_from_public
from tlog.formats.entries import canonical_entry, receipt_entry
from tlog.formats.hashing import format_sha256, sha256
from tlog.formats.times import format_utc

from tests.support.conformance import memlog_bundle
from tests.support.registry import BIN, run
from tests.support.witness import MemLog

SEED = ed25519.generate_seed()
REG = did_key_from_public(ed25519.public_from_seed(SEED))
A = MemLog(origin="a.example/log", seed=bytes([1]) * 32)
B = MemLog(origin="b.example/log", seed=bytes([2]) * 32)
VICTIM = "did:key:z6MkvictimREVOKEDkey"
ASKED = did_key_from_public(ed25519.public_from_seed(ed25519.generate_seed()))


def answer(status_id: str, logs: tuple[MemLog, ...] = (A, B)) -> dict[str, Any]:
    """A genuine `good` answer about `status_id`, its epoch anchored in `logs`."""
    now = datetime.now(UTC).replace(microsecond=0)
    st = sign_object({"type": "oap-status-epoch", "registry": REG, "epoch": 7, "this_update": format_utc(now),
                      "next_update": format_utc(now + timedelta(minutes=5)), "registry_seq": 3,
                      "registry_commit": "0" * 40, "revoked_size": 0, "revoked_root": format_sha256(sha256(b"")),
                      "history": REG, "push": "/v1/status-events", "caveat": CAVEAT}, SEED)
    entry = canonical_entry(receipt_entry(sha256(jcs(st)), SEED, "urn:oap:status-epoch:7"))
    anchor = anchors_text([memlog_bundle(entry, log) for log in logs])
    return sign_object({"type": "oap-status-response", "id": status_id, "status": "good",
                        "this_update": st["this_update"], "next_update": st["next_update"], "epoch": st,
                        "epoch_anchor": anchor, "proof": {"type": "sorted-merkle-absence", "left": None,
                                                          "right": None}}, SEED)


def genesis(k: int) -> Genesis:
    return Genesis(REG, "r", (AnchorLog(A.origin, A.vkey), AnchorLog(B.origin, B.vkey)), k, (),
                   "2026-01-01T00:00:00Z")


@pytest.fixture
async def swapping_registry() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """A server that answers every status id, and every push stream, with one genuine answer
    about VICTIM; `state["k"]` is the anchor_quorum its /v1/info declares."""
    state: dict[str, Any] = {"resp": answer(VICTIM), "k": 2}

    async def status(_request: web.Request) -> web.Response:
        return web.json_response(state["resp"])

    async def info(_request: web.Request) -> web.Response:
        logs = [{"origin": x.origin, "vkey": x.vkey, "url": None} for x in (A, B)]
        return web.json_response({"status_service": REG, "registry": REG, "log": logs[0], "logs": logs,
                                  "anchor_quorum": state["k"]})

    async def events(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"event: status\nid: 7\ndata: " + json.dumps(state["resp"]).encode() + b"\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/v1/info", info)
    app.router.add_get("/v1/status/{id}", status)
    app.router.add_get("/v1/status-events", events)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}", state
    finally:
        await runner.cleanup()


# --- the answer is about the id asked about ---------------------------------------------------


def test_a_genuine_answer_about_another_id_is_refused():
    resp = answer(VICTIM)
    both = TrustPolicy.for_logs([A.vkey, B.vkey], 2)
    assert verify_status(resp, registry=REG, status_id=VICTIM, policy=both).status == "good"
    with pytest.raises(StatusVerificationError, match=f"the answer is about {VICTIM}, not {ASKED}"):
        verify_status(resp, registry=REG, status_id=ASKED, policy=both)
    # a credential's status id is scoped by its issuer, as the registry computes it
    vc = status_id_of("urn:uuid:cred-1", ASKED)
    assert vc == f"vc {ASKED} urn:uuid:cred-1"
    with pytest.raises(StatusVerificationError, match="not vc "):
        verify_status(answer(status_id_of("urn:uuid:cred-2", ASKED)), registry=REG, status_id=vc, policy=both)
    assert verify_status(answer(vc), registry=REG, status_id=vc, policy=both).id == vc


async def test_the_cli_refuses_a_genuine_answer_about_another_id(swapping_registry, tmp_path):
    url, state = swapping_registry
    keys = ["--registry-key", REG, "--log-vkey", A.vkey, "--log-vkey", B.vkey]
    code, out, err = await run(str(BIN / "oap-registry"), "status", ASKED, "--url", url, *keys)
    assert code == 1, out + err
    assert f"INVALID: the answer is about {VICTIM}, not {ASKED}" in out, out + err
    code, out, err = await run(str(BIN / "oap-registry"), "status", "urn:uuid:cred-1", "--issuer", ASKED,
                               "--url", url, *keys, "--json")
    assert code == 1 and json.loads(out) == {"valid": False,
                                             "error": f"the answer is about {VICTIM}, not vc {ASKED} urn:uuid:cred-1"}
    # the same server answering the id that was asked: GOOD (the refusals above are about the id)
    code, out, err = await run(str(BIN / "oap-registry"), "status", VICTIM, "--url", url, *keys)
    assert code == 0 and out.startswith(f"GOOD  {VICTIM}") and "log anchors verified" in out, out + err
    # offline, --id names the id the saved answer must be about
    saved = tmp_path / "answer.json"
    saved.write_text(json.dumps(state["resp"]))
    code, out, err = await run(str(BIN / "oap-registry"), "status", str(saved), "--offline", "--id", ASKED, *keys)
    assert code == 1 and f"the answer is about {VICTIM}, not {ASKED}" in out, out + err
    code, out, err = await run(str(BIN / "oap-registry"), "status", str(saved), "--offline", "--id", VICTIM, *keys)
    assert code == 0, out + err


async def test_the_python_client_refuses_answers_about_ids_it_did_not_ask_about(swapping_registry):
    url, _state = swapping_registry
    async with RegistryClient(url) as c:
        assert (await c.status(VICTIM))["id"] == VICTIM
        with pytest.raises(StatusVerificationError, match=f"the answer is about {VICTIM}, not {ASKED}"):
            await c.status(ASKED)
        with pytest.raises(StatusVerificationError, match="not one of the ids asked about"):
            async for _ in c.status_events([ASKED]):
                pass
        got = [a["id"] async for a in c.status_events([ASKED, VICTIM])]
        assert got == [VICTIM]


# --- k of the registry's logs -----------------------------------------------------------------


def test_an_epoch_anchored_in_one_of_two_logs_is_refused_unless_only_that_log_is_pinned():
    only_a, both_logs = answer(VICTIM, (A,)), answer(VICTIM, (A, B))
    two = [A.vkey, B.vkey]
    refused = {
        "default (two logs pinned)": dict(policy=anchor_policy(TrustPolicy.for_logs(two))),
        "a policy asking for 1 of 2": dict(policy=anchor_policy(TrustPolicy.for_logs(two, 1))),
        "k = 2": dict(policy=TrustPolicy.for_logs(two, 2)),
        "the genesis's k = 2 over a policy asking for 1": dict(policy=TrustPolicy.for_logs(two, 1),
                                                              genesis=genesis(2)),
        "the genesis's k = 2, no policy": dict(genesis=genesis(2)),
    }
    for name, kw in refused.items():
        with pytest.raises(StatusVerificationError, match=r"anchored in 1 log\(s\) of the policy, and it requires 2"):
            verify_status(only_a, registry=REG, status_id=VICTIM, **kw)  # type: ignore[arg-type]
        v = verify_status(both_logs, registry=REG, status_id=VICTIM, **kw)  # type: ignore[arg-type]
        assert v.status == "good" and v.log_checked, name
    # what a registry declares only raises k: a policy of one log cannot meet a k of 2
    with pytest.raises(StatusVerificationError, match="this registry anchors in 2 log"):
        verify_status(only_a, registry=REG, status_id=VICTIM, policy=TrustPolicy.for_log(A.vkey), genesis=genesis(2))
    assert anchor_policy(TrustPolicy.for_logs(two), 1).policy.log_quorum == 2
    assert anchor_policy(TrustPolicy.for_log(A.vkey)).policy.log_quorum == 1
    # the relying party that pins only log A accepts what A holds
    assert verify_status(only_a, registry=REG, status_id=VICTIM,
                         policy=anchor_policy(TrustPolicy.for_log(A.vkey))).log_checked
    # a genesis names whose history the answer is about
    other = Genesis("did:key:z6MkotherREGISTRY", "r", genesis(1).logs, 1, (), "2026-01-01T00:00:00Z")
    with pytest.raises(StatusVerificationError, match="history of"):
        verify_status(both_logs, registry=REG, status_id=VICTIM, genesis=other)


async def test_the_cli_requires_two_of_two_pinned_logs_by_default(swapping_registry, tmp_path):
    url, state = swapping_registry
    saved = tmp_path / "answer.json"
    saved.write_text(json.dumps(answer(VICTIM, (A,))))
    offline = [str(BIN / "oap-registry"), "status", str(saved), "--offline", "--registry-key", REG]
    for extra in ((), ("--min-logs", "1"), ("--min-logs", "2")):
        code, out, err = await run(*offline, "--log-vkey", A.vkey, "--log-vkey", B.vkey, *extra)
        assert code == 1 and "anchored in 1 log(s) of the policy, and it requires 2" in out, (extra, out + err)
    code, out, err = await run(*offline, "--log-vkey", A.vkey)
    assert code == 0 and "log anchors verified" in out, out + err
    saved.write_text(json.dumps(answer(VICTIM, (A, B))))
    code, out, err = await run(*offline, "--log-vkey", A.vkey, "--log-vkey", B.vkey)
    assert code == 0 and "log anchors verified" in out, out + err
    # online: the k the registry declares (/v1/info) is required too, never less than the pins' default
    state["resp"] = answer(VICTIM, (A,))
    online = [str(BIN / "oap-registry"), "status", VICTIM, "--url", url, "--registry-key", REG]
    code, out, err = await run(*online, "--log-vkey", A.vkey)
    assert code == 1 and "this registry anchors in 2 log(s)" in out, out + err
    state["k"] = 1
    code, out, err = await run(*online, "--log-vkey", A.vkey)
    assert code == 0, out + err
    code, out, err = await run(*online, "--log-vkey", A.vkey, "--log-vkey", B.vkey)
    assert code == 1 and "it requires 2" in out, out + err
