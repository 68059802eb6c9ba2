"""Rotation, kill switch and recovery, suspension, end to end (OAP-CORE-1.0 §5.3, §22.3, §28.5;
docs/architecture.md §6.1): a real log process and registry on 127.0.0.1, records submitted over
HTTP as a client would, and for each step the signed status answer (verified offline), the W3C
status list bits, `oap-registry status` (online and --offline) and a verifying mirror's own answer.
The registry's epochs are an hour long here: every change must show without waiting for one.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest

from registry import api as registry_api
from registry.client import RegistryClient, make_key_event, make_kill_switch, make_revocation
from registry.statusverify import verify_status
from tlog.formats.ed25519 import generate_seed

from tests.support.registry import (
    ALL,
    CLI,
    Running,
    answer,
    cli_status,
    conformance_doc,
    did,
    list_bits,
    mirror_verdicts,
    now_utc,
    post,
    raw,
    receipt,
    run,
    start_registry,
    utc,
    wait_epoch_after,
)
from tests.support.waiting import until

pytestmark = pytest.mark.slow


# --- a rotated-away key ---------------------------------------------------------------------


async def test_a_rotated_away_key_answers_revoked_superseded_from_the_rotation(reg, tmp_path):
    p, a, b = generate_seed(), generate_seed(), generate_seed()
    await post(reg, make_revocation(p, kind="vc", subject="urn:uuid:cred-3", status_list_index=3))
    assert (await answer(reg, did(p)))[1][0] == "good"
    at = utc(now_utc())
    await post(reg, make_key_event(p, subject=did(p), key=did(a), event="rotate", effective_at=at))
    resp, verdict = await answer(reg, did(p))
    assert verdict == ("revoked", at, "superseded", None)
    assert resp["revocation"]["record"]["key"] == did(a) and "linked_by" not in resp["revocation"]
    code, js = await cli_status(reg, did(p), tmp_path)
    assert code == 3 and js["reason"] == "superseded" and js["revoked_at"] == at
    # a retired key keeps the credentials it issued before (its list is not filled) and may revoke them
    await post(reg, make_revocation(p, kind="vc", subject="urn:uuid:cred-4", status_list_index=4))
    assert await list_bits(reg, did(p)) == {3, 4}
    st, body = await reg.post(make_kill_switch(p))  # but speaks for no one
    assert st == 403 and "retired by a rotation" in body["message"]
    # the key of the previous rotation is retired by the next one; the answer links the two rotations
    at2 = utc(now_utc())
    await post(reg, make_key_event(a, subject=did(p), key=did(b), event="rotate", effective_at=at2))
    resp, verdict = await answer(reg, did(a))
    assert verdict == ("revoked", at2, "superseded", None)
    assert resp["revocation"]["linked_by"]["record"]["key"] == did(a)
    assert (await answer(reg, did(b)))[1][0] == "good"
    keys = [did(p), did(a), did(b)]
    assert await mirror_verdicts(reg, keys, tmp_path) == {k: (await answer(reg, k))[1] for k in keys}


# --- kill switch, recovery, times, fresh answers -----------------------------------------------------


async def test_kill_recover_kill_and_a_push_stream_sees_each_within_seconds(reg, tmp_path):
    p, c = generate_seed(), generate_seed()
    grants = f"{did(p)}#oauth_grants"
    await post(reg, make_key_event(p, subject=did(p), key=did(c)))
    st, resp, _ = await reg.get("/v1/status/" + quote(grants, safe=":"))
    statement = resp["epoch"]
    assert statement["push"] == "/v1/status-events" and "next_update" in statement["caveat"]
    t0 = now_utc()
    pushed: asyncio.Queue = asyncio.Queue()

    async def follow() -> None:
        async with RegistryClient(reg.url) as client:
            async for ans in client.status_events([grants]):
                await pushed.put(ans)

    async def next_push(want: str, reinstated: bool) -> dict:
        while True:  # bounded: the epochs are an hour long, so only a push within 30 s can satisfy this
            ans = await asyncio.wait_for(pushed.get(), 30)
            v = verify_status(ans, registry=reg.svc.registry, status_id=grants, policy=reg.policy)
            if v.status == want and (v.reinstated_at is not None) == reinstated:
                return ans

    watcher = asyncio.create_task(follow())
    try:
        # a principal the registry knows, with no kill switch: its tokens are good (none is revoked)
        assert (await asyncio.wait_for(pushed.get(), 30))["status"] == "good"
        assert (await answer(reg, grants))[1] == ("good", None, None, None)
        kill1 = utc(t0 - timedelta(minutes=3))
        st, _body = await reg.post(make_kill_switch(p, effective_at=kill1))
        assert st == 200
        await next_push("revoked", False)
        assert (await answer(reg, grants))[1] == ("revoked", kill1, "kill_switch", None)
        code, js = await cli_status(reg, grants, tmp_path)
        assert code == 3 and js["revoked_at"] == kill1 and "reinstated_at" not in js

        recovered = utc(t0 - timedelta(minutes=2))
        resume = make_key_event(c, subject=did(p), event="resume", effective_at=recovered)
        await reg.post(resume)
        pushed_answer = await next_push("revoked", True)
        assert pushed_answer["revocation"]["reinstated"]["reinstated_at"] == recovered
        assert (await answer(reg, grants))[1] == ("revoked", kill1, "kill_switch", recovered)  # revoked for good
        code, js = await cli_status(reg, grants, tmp_path)
        epoch = f"{grants}@{resume['id']}"  # the tokens issued since the recovery carry this status id
        assert code == 3 and js["reinstated_at"] == recovered and js["reinstated_id"] == epoch
        assert (await answer(reg, epoch))[1] == ("good", None, None, None)
        code, js = await cli_status(reg, epoch, tmp_path)
        assert code == 0 and js["status"] == "good" and js["id"] == epoch  # "act only on good" accepts them
        async with RegistryClient(reg.url) as client:  # the principal learns which id its new tokens carry
            current = await client.token_epoch(did(p), "oauth_grants", registry=reg.svc.registry, policy=reg.policy)
        assert (current.id, current.status) == (epoch, "good")

        kill2 = utc(t0 - timedelta(minutes=1))
        await reg.post(make_kill_switch(c, principal=did(p), effective_at=kill2))
        await next_push("revoked", False)
        assert (await answer(reg, grants))[1] == ("revoked", kill2, "kill_switch", None)  # the second one shows
        code, js = await cli_status(reg, grants, tmp_path)
        assert code == 3 and js["revoked_at"] == kill2 and "reinstated_at" not in js
        assert (await answer(reg, epoch))[1] == ("revoked", kill2, "kill_switch", None)  # and revokes that epoch
        async with RegistryClient(reg.url) as client:  # no epoch is open while the kill switch is in force
            current = await client.token_epoch(did(p), "oauth_grants", registry=reg.svc.registry, policy=reg.policy)
        assert (current.id, current.status, current.reason) == (grants, "revoked", "kill_switch")
        code, js = await cli_status(reg, epoch, tmp_path)
        assert code == 3 and js["reason"] == "kill_switch"
    finally:
        watcher.cancel()
    assert await list_bits(reg, did(p)) == set()  # a kill switch revokes tokens, not credentials
    keys = [f"{did(p)}#{c}" for c in ("oauth_grants", "trust_tokens")] + [did(p)]
    assert await mirror_verdicts(reg, keys, tmp_path) == {k: (await answer(reg, k))[1] for k in keys}


async def after_commit_of(reg: Running, seq: int) -> str:
    """A time later than commit `seq` (commit times are whole seconds), once the clock has passed it."""
    later = datetime.fromtimestamp(reg.svc.index.commits[seq].time + 1, UTC)
    deadline = asyncio.get_running_loop().time() + 10
    while now_utc() < later:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)
    return utc(later)


async def test_revoke_key_a_then_rotate_to_b_then_revoke_b(reg, tmp_path):
    a, b, c = generate_seed(), generate_seed(), generate_seed()
    added = await post(reg, make_key_event(a, subject=did(a), key=did(c)))
    await post(reg, make_revocation(a, kind="vc", subject="urn:uuid:cred-7", status_list_index=7))
    assert await list_bits(reg, did(a)) == {7}
    compromised = await after_commit_of(reg, added["seq"])  # C was added before the suspected compromise
    await post(reg, make_revocation(a, kind="key", subject=did(a), reason="key_compromise", effective_at=compromised))
    assert await list_bits(reg, did(a)) == ALL  # nothing the compromised key issued can be told apart
    rotated = utc(now_utc())
    await post(reg, make_key_event(c, subject=did(a), key=did(b), event="rotate", effective_at=rotated))
    assert (await answer(reg, did(a)))[1] == ("revoked", compromised, "key_compromise", None)
    assert (await answer(reg, did(b)))[1][0] == "good" and await list_bits(reg, did(b)) == set()
    revoked_b = utc(now_utc())
    await post(reg, make_revocation(b, kind="key", subject=did(b), reason="key_compromise", effective_at=revoked_b))
    assert (await answer(reg, did(b)))[1] == ("revoked", revoked_b, "key_compromise", None)
    assert await list_bits(reg, did(b)) == ALL
    code, js = await cli_status(reg, did(a), tmp_path)
    assert code == 3 and js["revoked_at"] == compromised and js["reason"] == "key_compromise"
    code, js = await cli_status(reg, did(b), tmp_path)
    assert code == 3 and js["revoked_at"] == revoked_b
    assert (await answer(reg, f"{did(a)}#trust_tokens"))[1][0] == "good"  # the principal's tokens stand
    keys = [did(a), did(b)]
    assert await mirror_verdicts(reg, keys, tmp_path) == {k: (await answer(reg, k))[1] for k in keys}


async def test_push_stream_input_is_checked(reg):
    for params in ([], [("id", f"did:key:z{i}") for i in range(17)], [("id", "bad id")]):
        st, body, _ = await reg.get("/v1/status-events", params=params)
        assert st == 400 and body["error"] == "invalid_input", body


async def test_head_of_the_push_stream_is_its_head_only_and_streams_are_bounded_per_client(tmp_path, log_server):
    """HEAD /v1/status-events answers the head and ends (aiohttp runs the GET handler for
    HEAD: it sent the stream after the head and held a watcher for an hour); one client
    (behind a trusted proxy, by X-Forwarded-For) holds at most MAX_WATCHERS_PER_CLIENT
    streams, so it cannot take every slot; another client still gets one."""
    reg = await start_registry(tmp_path / "reg", log_server, epoch_seconds=3600, trusted_proxies=1)
    try:
        await wait_epoch_after(reg, 0)
        host, port = reg.url.removeprefix("http://").split(":")
        r, w = await asyncio.open_connection(host, int(port))
        try:
            w.write(b"HEAD /v1/status-events?id=urn:oap:conformance:x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            raw = await asyncio.wait_for(r.read(), 30)  # to the end: the server closes after the head
        finally:
            w.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head.lower() and body == b"", raw
        await until(lambda: reg.svc.watchers == 0, 30, "the push streams to close")

        limit = registry_api.MAX_WATCHERS_PER_CLIENT
        async with contextlib.AsyncExitStack() as held, aiohttp.ClientSession() as s:
            url = reg.url + "/v1/status-events?id=urn:oap:conformance:x"
            for _ in range(limit):
                resp = await held.enter_async_context(s.get(url, headers={"X-Forwarded-For": "203.0.113.7"}))
                assert resp.status == 200 and resp.content_type == "text/event-stream"
            assert reg.svc.watchers == limit
            async with s.get(url, headers={"X-Forwarded-For": "203.0.113.7"}) as r2:
                assert r2.status == 429 and (await r2.json())["error"] == "rate_limited" and r2.headers["Retry-After"]
            async with s.get(url, headers={"X-Forwarded-For": "203.0.113.8"}) as r3:
                assert r3.status == 200 and (await r3.content.readuntil(b"\n\n")) == b"retry: 2000\n\n"
            async with s.head(url, headers={"X-Forwarded-For": "203.0.113.7"}) as r4:
                assert r4.status == 200  # a HEAD holds no stream, so the limit does not apply to it
    finally:
        await reg.stop()


# --- suspension ------------------------------------------------------------------------------------


async def test_suspension_by_a_controller_until_a_resume(reg, tmp_path):
    p, c, d = generate_seed(), generate_seed(), generate_seed()
    tokens = f"{did(p)}#subscription_tokens"
    await post(reg, make_key_event(p, subject=did(p), key=did(c)))
    await post(reg, make_revocation(p, kind="vc", subject="urn:uuid:cred-1", status_list_index=1))
    code, out, err = await run(CLI, "key-event", "--key", str(_keyfile(tmp_path, c)), "--subject", did(p),
                               "--event", "suspend", "--reason", "loss_of_key", "--url", reg.url)
    assert code == 0, out + err
    await wait_epoch_after(reg, json.loads(out)["seq"])
    resp, verdict = await answer(reg, did(p))
    assert verdict[0] == "suspended" and verdict[2] == "loss_of_key"
    assert resp["suspension"]["record"]["event"] == "suspend" and resp["suspension"]["record"]["issued_by"] == did(c)
    assert (await answer(reg, tokens))[1] == verdict
    code, js = await cli_status(reg, did(p), tmp_path)
    assert code == 5 and js["status"] == "suspended" and js["suspended_at"] == verdict[1]
    assert await list_bits(reg, did(p), "/suspension") == ALL and await list_bits(reg, did(p)) == {1}
    st, body = await reg.post(make_key_event(c, subject=did(p), key=did(d)))
    assert st == 403 and "suspended" in body["message"]
    keys = [did(p), tokens]
    assert await mirror_verdicts(reg, keys, tmp_path / "1") == {k: (await answer(reg, k))[1] for k in keys}

    await post(reg, make_key_event(c, subject=did(p), event="resume"))
    assert (await answer(reg, did(p)))[1][0] == "good" and (await answer(reg, tokens))[1][0] == "good"
    assert await list_bits(reg, did(p), "/suspension") == set()
    code, js = await cli_status(reg, did(p), tmp_path)
    assert code == 0 and js["status"] == "good"
    assert await mirror_verdicts(reg, keys, tmp_path / "2") == {k: (await answer(reg, k))[1] for k in keys}


async def test_a_lost_key_without_a_recovery_path_suspends_its_principal(reg, tmp_path):
    q = generate_seed()
    lost = utc(now_utc() - timedelta(minutes=10))
    await post(reg, make_revocation(q, kind="key", subject=did(q), reason="loss_of_key", effective_at=lost))
    assert (await answer(reg, did(q)))[1] == ("revoked", lost, "loss_of_key", None)
    resp, verdict = await answer(reg, f"{did(q)}#trust_tokens")
    assert verdict == ("suspended", lost, "loss_of_key", None)
    assert resp["suspension"]["record"]["reason"] == "loss_of_key"
    code, js = await cli_status(reg, f"{did(q)}#trust_tokens", tmp_path)
    assert code == 5 and js["reason"] == "loss_of_key"
    assert await list_bits(reg, did(q)) == ALL  # the key itself is revoked...
    assert await list_bits(reg, did(q), "/suspension") == ALL  # ...and its principal is suspended too
    keys = [did(q), f"{did(q)}#trust_tokens"]
    assert await mirror_verdicts(reg, keys, tmp_path) == {k: (await answer(reg, k))[1] for k in keys}


# --- what a key signed after its revocation; receipts and status lists follow their principal ------


async def test_a_backdated_compromise_voids_the_thiefs_rotation_and_receipts_fall_with_their_subject(reg, tmp_path):
    p, c, t = (generate_seed() for _ in range(3))
    await post(reg, make_key_event(p, subject=did(p), key=did(c)))
    rc = receipt(p)
    await post(reg, conformance_doc(rc))
    before = utc(now_utc() - timedelta(minutes=1))  # before the thief's rotation is committed
    await post(reg, make_key_event(c, subject=did(p), key=did(t), event="rotate"))  # signed with C, stolen
    assert (await answer(reg, did(p)))[1][0] == "revoked"  # superseded, for now
    await post(reg, make_revocation(c, kind="key", subject=did(c), reason="key_compromise", effective_at=before))
    assert (await answer(reg, did(p)))[1] == ("good", None, None, None)  # the rotation is void: P is P's key
    st, body = await reg.post(make_kill_switch(t, principal=did(p)))
    assert st == 403 and "neither" in body["message"]  # T speaks for nobody
    assert (await raw(reg, rc["id"]))["status"] == "good"
    keys = [did(p), did(c)]
    assert await mirror_verdicts(reg, keys, tmp_path) == {k: (await answer(reg, k))[1] for k in keys}

    suspended = await post(reg, make_key_event(p, subject=did(p), event="suspend"))
    resp = await raw(reg, rc["id"])  # the receipt is suspended with its subject
    assert resp["status"] == "suspended" and resp["suspension"]["reason"] == "unspecified"
    assert resp["suspension"]["record"]["event"] == "suspend" and resp["suspension"]["via"]["record"] == rc
    await after_commit_of(reg, suspended["seq"])  # a recovery takes effect after the suspension
    await post(reg, make_key_event(p, subject=did(p), event="resume"))
    assert (await raw(reg, rc["id"]))["status"] == "good"
    compromised = utc(now_utc() - timedelta(minutes=30))  # before the receipt was issued
    await post(reg, make_revocation(p, kind="key", subject=did(p), reason="key_compromise", effective_at=compromised))
    resp = await raw(reg, rc["id"])
    assert resp["status"] == "revoked" and resp["revocation"]["revoked_at"] == compromised
    assert resp["revocation"]["reason"] == "key_compromise" and resp["revocation"]["record"]["subject"] == did(p)
    assert resp["revocation"]["via"]["record"]["id"] == rc["id"]
    assert (await answer(reg, did(p)))[1] == ("revoked", compromised, "key_compromise", None)


async def test_status_lists_follow_a_suspension_behind_a_rotation_and_a_compromise_behind_one(reg):
    e, c, a, b = (generate_seed() for _ in range(4))
    await post(reg, make_key_event(e, subject=did(e), key=did(c)))
    await post(reg, make_revocation(e, kind="vc", subject="urn:uuid:cred-5", status_list_index=5))
    await post(reg, make_key_event(c, subject=did(e), key=did(a), event="rotate"))
    await post(reg, make_key_event(c, subject=did(e), event="suspend"))
    assert (await answer(reg, did(e)))[1][0] == "revoked"  # superseded, the earliest standing
    assert (await answer(reg, f"{did(e)}#trust_tokens"))[1][0] == "suspended"
    assert await list_bits(reg, did(e)) == {5}  # a rotation keeps what the key issued...
    assert await list_bits(reg, did(e), "/suspension") == ALL  # ...but its principal is suspended
    await post(reg, make_revocation(a, kind="vc", subject="urn:uuid:cred-6", status_list_index=6))
    rotated = await post(reg, make_key_event(a, subject=did(e), key=did(b), event="rotate"))
    assert (await answer(reg, did(a)))[1][0] == "revoked" and await list_bits(reg, did(a)) == {6}
    later = await after_commit_of(reg, rotated["seq"])
    await post(reg, make_revocation(a, kind="key", subject=did(a), reason="key_compromise", effective_at=later))
    assert (await answer(reg, did(a)))[1][2] == "superseded"  # still the earliest standing...
    assert await list_bits(reg, did(a)) == ALL  # ...yet every credential A issued is revoked


def _keyfile(tmp_path: Path, seed: bytes) -> Path:
    """The seed as a key file `oap-registry` reads (tlog signer-key format, 0600)."""
    from tlog.formats import keys
    from tlog.runtime import keyfiles

    path = tmp_path / f"{uuid.uuid4()}.key"
    keyfiles.write_private_key(path, keys.Signer("oap-registry", seed).to_skey())
    return path


async def test_a_time_the_registry_writes_is_one_it_reads_back(reg, tmp_path):
    """A revocation dated in year 1 (an accepted RFC 3339 time): the answer's revoked_at is
    written `0001-01-01T00:00:00Z`, which the verifier, the CLI and a mirror read back (it was
    written `1-01-01T00:00:00Z`, which no reader accepts, so the answer did not verify)."""
    k = generate_seed()
    await post(reg, make_revocation(k, kind="key", subject=did(k), reason="key_compromise",
                                    effective_at="0001-01-01T00:00:00Z"))
    resp, verdict = await answer(reg, did(k))
    assert resp["revocation"]["revoked_at"] == "0001-01-01T00:00:00Z"
    assert verdict == ("revoked", "0001-01-01T00:00:00Z", "key_compromise", None)
    code, js = await cli_status(reg, did(k), tmp_path)
    assert code == 3 and js["revoked_at"] == "0001-01-01T00:00:00Z"
