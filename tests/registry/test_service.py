"""The registry service end to end: real log process, real aiohttp servers, real git.

Covers: JSON/CBOR submission of every record type with validation before
commit, sharded add-only paths, many records per commit under load (stall
hook), compare-and-swap refs, crash recovery without equivocation, anchoring
of every commit (and the whole history checked by `oap-registry verify` on a
real `git clone`), push refused, signed OCSP-style status with caching, kill
switch, conformance levels and expiry, W3C status lists, 4xx errors.
"""
from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import timedelta
from urllib.parse import quote

import aiohttp
import cbor2
import pytest
import yarl

from registry.anchoring import verify_commit_anchor, verify_receipt_anchor
from registry.client import make_key_event, make_kill_switch, make_revocation
from registry.records import KILL_SWITCH_CLASSES
from registry.statuslist import bit, decode_list, verify_proof
from registry.statusverify import StatusVerificationError, verify_status
from registry.store import MAIN
from tlog.client.client import LogClient
from tlog.formats.did import public_from_did_key
from tlog.formats.ed25519 import generate_seed
from tlog.formats.proofbundle import parse_proof_bundle
from tlog.formats.times import parse_utc

from tests.support.registry import (
    ALL,
    BIN,
    CLI,
    answer,
    cli_status,
    conformance_doc,
    did,
    git,
    list_bits,
    now_utc,
    post,
    receipt,
    run,
    start_registry,
    utc,
    wait_epoch_after,
)

pytestmark = pytest.mark.slow


@pytest.fixture
async def reg(tmp_path, log_server):
    r = await start_registry(tmp_path / "reg", log_server)
    yield r
    await r.stop()


async def test_records_of_every_type_are_validated_committed_and_anchored(reg):
    a, b = generate_seed(), generate_seed()
    docs = [
        conformance_doc(receipt(a, "L2")),
        make_key_event(a, subject=did(a), key=did(b)),
        make_revocation(b, kind="did", subject=did(a), reason="affiliation_changed"),
    ]
    results = []
    for doc in docs:
        status, body = await reg.post(doc)
        assert status == 200, body
        assert not body["duplicate"]
        results.append(body)
    cbor_doc = make_kill_switch(b)
    status, body = await reg.post(None, raw=cbor2.dumps(cbor_doc), headers={"Content-Type": "application/oap+cbor"})
    assert status == 200 and body["type"] == "kill_switch", body
    results.append(body)
    for res in results:
        commit = reg.svc.index.commits[res["seq"]]
        assert commit.commit == res["commit"]
        verify_commit_anchor(res["anchor"], commit=res["commit"], tree=commit.tree, seq=res["seq"],
                             registry=reg.svc.registry, policy=reg.policy)
        st, got, _ = await reg.get("/v1/records/" + quote(res["id"], safe=":"))
        assert st == 200 and got["path"] == res["path"] and got["seq"] == res["seq"]
        st, raw, _ = await reg.get("/v1/files/" + res["path"])
        assert st == 200 and raw == got["record"]
    assert results[0]["path"].startswith("conformance/") and results[2]["path"].startswith("revocations/did/")
    # the kill switch was anchored as a receipt and its proof committed beside it
    verify_receipt_anchor(body["receipt_anchor"], receipt_hash=reg.svc.index.records[body["path"]].hash,
                          receipt_id=cbor_doc["id"], registry=reg.svc.registry, policy=reg.policy)
    st, raw, _ = await reg.get("/v1/files/" + body["path"][:-5] + ".tlog-proof")
    assert st == 200 and raw.decode() == body["receipt_anchor"]
    # re-submitting is idempotent
    status, again = await reg.post(docs[2])
    assert status == 200 and again["duplicate"] and again["seq"] == results[2]["seq"]
    st, listing, _ = await reg.get("/v1/records", params={"subject": did(a)})
    assert {r["type"] for r in listing["records"]} == {"conformance", "key_event", "revocation"}


async def test_a_commit_is_never_dated_before_its_records_arrived(reg):
    """A record's commit time is the latest time it can have been signed (docs/architecture.md
    §6.1: a compromise dated at or before it voids the signature), so it is never earlier than
    the moment the record was sent: Git's whole seconds are rounded up, not down."""
    for _ in range(3):
        sent = time.time()
        st, body = await reg.post(make_revocation(generate_seed(), kind="vc", subject=f"urn:uuid:{uuid.uuid4()}",
                                                  status_list_index=1))
        assert st == 200, body
        committed = reg.svc.index.commits[body["seq"]].time
        assert committed >= sent, (committed, sent)


@pytest.mark.parametrize("case", ["bad_json", "media_type", "bad_signature", "not_controller", "conflict",
                                  "unknown_receipt", "too_large", "wrong_type"])
async def test_bad_submissions_get_a_clear_4xx(reg, case):
    a, b = generate_seed(), generate_seed()
    good = make_revocation(a, kind="key", subject=did(a))
    expect = {"bad_json": (400, "invalid_input"), "media_type": (415, "invalid_input"),
              "bad_signature": (400, "invalid_input"), "not_controller": (403, "policy_block"),
              "conflict": (409, "conflict"), "unknown_receipt": (400, "invalid_input"),
              "too_large": (413, "invalid_input"), "wrong_type": (400, "invalid_input")}[case]
    kw: dict = {}
    doc: object = good
    if case == "bad_json":
        kw = {"raw": b'{"type": "revocation",'}
    elif case == "media_type":
        kw = {"headers": {"Content-Type": "text/plain"}}
    elif case == "bad_signature":
        doc = {**good, "reason": "superseded"}
    elif case == "not_controller":
        doc = make_revocation(b, kind="did", subject=did(a))
    elif case == "conflict":
        assert (await reg.post(good))[0] == 200
        doc = make_revocation(a, kind="key", subject=did(a), reason="superseded", record_id=good["id"])
    elif case == "unknown_receipt":
        doc = make_revocation(a, kind="conformance", subject="urn:oap:conformance:nope")
    elif case == "too_large":
        kw = {"raw": b'{"a":"' + b"x" * (2 * 1024 * 1024) + b'"}'}
    elif case == "wrong_type":
        doc = {"type": "payment"}
    status, body = await reg.post(doc, **kw)
    assert (status, body["error"]) == expect, body
    assert body["message"]
    if case != "conflict":
        assert reg.svc.index.head.seq == 0  # nothing was committed


async def test_more_404_and_400_are_json(reg):
    for path, code in [("/v1/nope", 404), ("/v1/anchors/abc", 400), ("/v1/anchors/99", 404),
                       ("/v1/records/urn:oap:revocation:none", 404), ("/v1/files/README.md", 404),
                       ("/v1/status-lists/not-a-did/0", 400)]:
        st, body, _ = await reg.get(path)
        assert st == code and body["error"] in ("not_found", "invalid_input"), (path, body)
    st, body, _ = await reg.get("/registry.git/info/refs")  # the dumb protocol is not served
    assert st == 403 and body["error"] == "policy_block"
    async with aiohttp.ClientSession() as s:
        for garbage in (b"garbage", b"00ffxx", b"0032want " + b"0" * 40 + b"\n0000"):
            async with s.post(reg.url + "/registry.git/git-upload-pack", data=garbage) as r:
                assert r.status == 400 and (await r.json())["error"] == "invalid_input"


async def test_numbers_in_paths_and_queries_are_canonical_ascii_decimals(reg):
    """'²' passes str.isdigit() and int() refuses it; int() reads Arabic-Indic digits as a
    number: neither is a number here, nor a second spelling (a leading zero), nor one larger
    than storage holds. Each is a 400 with an OAP code, never a 500 or another resource."""
    issuer = did(generate_seed())
    st, _, _ = await reg.get("/v1/anchors/0")
    assert st == 200  # the genesis commit's anchor: the refusals below are about spelling
    for path in ("/v1/anchors/%C2%B2", "/v1/anchors/%D9%A0", "/v1/anchors/00", "/v1/anchors/9223372036854775808",
                 f"/v1/status-lists/{issuer}/%C2%B2", f"/v1/status-lists/{issuer}/%D9%A1",
                 f"/v1/status-lists/{issuer}/00", f"/v1/status-lists/{issuer}/01/suspension",
                 f"/v1/status-lists/{issuer}/65536",
                 "/v1/records?offset=%C2%B2", "/v1/records?offset=%D9%A1", "/v1/records?limit=01",
                 "/v1/commits?limit=%C2%B2", "/v1/commits?before=%C2%B2", "/v1/commits?before=%D9%A1",
                 "/v1/commits?before=99999999999999999999"):
        async with aiohttp.ClientSession() as s:
            async with s.get(yarl.URL(reg.url + path, encoded=True)) as r:
                body = await r.json()
                assert r.status == 400 and body["error"] == "invalid_input" and body["message"], (path, body)


async def test_under_load_many_records_share_one_commit(tmp_path, log_server):
    """Deterministic: the first batch is stalled before publishing while 30 more queue up."""
    stalled, release = asyncio.Event(), asyncio.Event()

    async def hold():  # only the first batch waits
        if not stalled.is_set():
            stalled.set()
            await release.wait()

    reg = await start_registry(tmp_path / "reg", log_server, before_publish=hold)
    try:
        await _many_records_share_one_commit(reg, stalled, release)
    finally:
        await reg.stop()


async def _many_records_share_one_commit(reg, stalled: asyncio.Event, release: asyncio.Event) -> None:
    s0 = generate_seed()
    first = asyncio.create_task(reg.post(make_revocation(s0, kind="key", subject=did(s0))))
    await stalled.wait()
    seeds = [generate_seed() for _ in range(30)]
    rest = [asyncio.create_task(reg.post(make_revocation(s, kind="key", subject=did(s)))) for s in seeds]
    loop = asyncio.get_running_loop()
    end = loop.time() + 60
    while reg.svc.batcher.queued < len(seeds):  # all queued behind the stalled batch
        assert loop.time() < end, f"only {reg.svc.batcher.queued} of {len(seeds)} submissions arrived"
        await asyncio.sleep(0.02)
    release.set()
    out = [await t for t in [first, *rest]]
    assert all(st == 200 for st, _ in out)
    seqs = {body["seq"] for _, body in out[1:]}
    assert len(seqs) == 1, seqs  # 30 records, one commit
    seq = seqs.pop()
    assert reg.svc.index.per_commit[seq] == 30
    _st, listing, _ = await reg.get("/v1/records", params={"type": "revocation", "limit": "10", "offset": "25"})
    assert listing["total"] == 31 and len(listing["records"]) == 6 and listing["next_offset"] is None


async def test_a_foreign_ref_move_is_refused_by_compare_and_swap(tmp_path, log_server):
    """Someone moves refs/heads/main while a batch is being anchored: the CAS fails,
    the foreign value is kept, and the writer stops instead of guessing."""
    moved: list[str] = []

    async def move():
        repo = reg.svc.repo
        head = repo.ref(MAIN)
        foreign, _, _ = repo.build_commit(head, [("anchors/0/0.tlog-proof", b"x")], "foreign", 1)
        repo.cas(MAIN, head, foreign)
        moved.append(foreign)

    reg = await start_registry(tmp_path / "reg", log_server, before_publish=move)
    try:
        await _foreign_ref_move_is_refused(reg, moved)
    finally:
        await reg.stop()


async def _foreign_ref_move_is_refused(reg, moved: list[str]) -> None:
    repo = reg.svc.repo
    status, body = await reg.post(make_revocation(a := generate_seed(), kind="key", subject=did(a)))
    assert status == 409 and body["error"] == "conflict"
    assert moved and repo.ref(MAIN) == moved[0]  # not overwritten
    status, body = await reg.post(make_revocation(a, kind="key", subject=did(a)))
    assert status == 503 and body["error"] == "maintenance"
    st, ready, _ = await reg.get("/readyz")
    assert st == 503 and ready["problems"]


async def test_a_commit_anchored_before_a_crash_is_published_on_restart_with_the_same_log_entry(tmp_path, log_server):
    async def crash():
        raise RuntimeError("simulated crash after anchoring, before the ref moves")

    reg = await start_registry(tmp_path / "reg", log_server, before_publish=crash)
    doc = make_revocation(a := generate_seed(), kind="key", subject=did(a))
    status, body = await reg.post(doc)
    assert status == 503
    pending = json.loads((tmp_path / "reg" / "pending.json").read_text())
    first_index = parse_proof_bundle((tmp_path / "reg" / "anchors" / f"{pending['seq']}.tlog-proof").read_text()).index
    assert reg.svc.repo.ref(MAIN) == pending["parent"]
    await reg.stop()
    reg = await start_registry(tmp_path / "reg", log_server)
    try:
        assert reg.svc.repo.ref(MAIN) == pending["commit"]
        assert not (tmp_path / "reg" / "pending.json").exists()
        again = parse_proof_bundle((tmp_path / "reg" / "anchors" / f"{pending['seq']}.tlog-proof").read_text())
        assert again.index == first_index  # the identical entry: the log deduplicated it, no second seq
        status, body = await reg.post(doc)
        assert status == 200 and body["duplicate"] and body["seq"] == pending["seq"]
    finally:
        await reg.stop()


async def test_a_ref_lock_left_by_a_killed_writer_does_not_stop_the_next_start(tmp_path, log_server):
    """A kill -9 while dulwich moves a ref leaves `refs/heads/main.lock`; every later ref
    update used to fail (FileLocked) until someone removed it. The next start, holding the
    data directory's lock, removes it: the registry takes writes again."""
    reg = await start_registry(tmp_path / "reg", log_server)
    a = generate_seed()
    assert (await reg.post(make_revocation(a, kind="key", subject=did(a))))[0] == 200
    head = reg.svc.repo.ref(MAIN)
    await reg.stop()
    lock = tmp_path / "reg" / "registry.git" / "refs" / "heads" / "main.lock"
    lock.write_text("0" * 40 + "\n")  # as the killed writer left it, half way through a move
    reg = await start_registry(tmp_path / "reg", log_server)
    try:
        assert not lock.exists() and reg.svc.repo.ref(MAIN) == head
        b = generate_seed()
        status, body = await reg.post(make_revocation(b, kind="key", subject=did(b)))
        assert status == 200, body
        assert reg.svc.repo.ref(MAIN) != head
    finally:
        await reg.stop()


async def test_git_clone_works_push_is_refused_and_the_whole_history_verifies(reg, tmp_path):
    seeds = [generate_seed() for _ in range(3)]
    for s in seeds:
        assert (await reg.post(make_revocation(s, kind="key", subject=did(s))))[0] == 200
    ks = make_kill_switch(generate_seed())
    assert (await reg.post(ks))[0] == 200
    clone = tmp_path / "clone"
    await git("clone", "-q", f"{reg.url}/registry.git", str(clone))
    log = (await git("log", "--format=%H %s", cwd=clone)).splitlines()
    assert len(log) == reg.svc.index.head.seq + 1
    assert log[0].split()[0] == reg.svc.index.head.commit
    files = set((await git("ls-files", cwd=clone)).split())
    assert {"registry.json", "anchors/0/0.tlog-proof"} <= files
    assert all(r.path in files for r in reg.svc.index.all_records())
    (clone / "x.json").write_text("{}")
    await git("add", "x.json", cwd=clone)
    await git("commit", "-q", "-m", "sneak", cwd=clone)
    code, _, err = await run("git", "push", "origin", "main", cwd=clone)
    assert code != 0 and "403" in err
    assert reg.svc.repo.ref(MAIN) == reg.svc.index.head.commit
    # every commit checked against the log from the clone alone (plus the head's served anchor)
    await git("reset", "-q", "--hard", "origin/main", cwd=clone)
    head = reg.svc.index.head.seq
    code, out, err = await run(str(BIN / "oap-registry"), "verify", str(clone), "--registry-key", reg.svc.registry,
                               "--log-vkey", reg.log.vkey, "--url", reg.url)
    assert code == 0, out + err
    assert f"OK: {head + 1} commit(s)" in out and "head" in out
    code, out, _ = await run(str(BIN / "oap-registry"), "verify", str(clone), "--registry-key", did(seeds[1]),
                             "--log-vkey", reg.log.vkey)
    assert code == 1 and "registry key" in out


async def test_status_good_unknown_revoked_signed_cacheable_and_verifiable(reg):
    a, b = generate_seed(), generate_seed()
    assert (await reg.post(conformance_doc(receipt(a))))[0] == 200
    status, body = await reg.post(make_revocation(b, kind="key", subject=did(b), reason="key_compromise",
                                                  effective_at=utc(now_utc() - timedelta(hours=1))))
    assert status == 200
    await wait_epoch_after(reg, body["seq"])
    expect = {did(a): "good", did(b): "revoked", did(generate_seed()): "unknown"}
    for key, want in expect.items():
        st, resp, headers = await reg.get("/v1/status/" + key)
        assert st == 200 and resp["status"] == want
        v = verify_status(resp, registry=reg.svc.registry, status_id=key, policy=reg.policy)
        assert v.status == want and v.log_checked
        max_age = int(headers["Cache-Control"].split("max-age=")[1].split(",")[0])
        assert 0 <= max_age <= (v.next_update - v.this_update).total_seconds()
        st, _, h304 = await reg.get("/v1/status/" + key, headers={"If-None-Match": headers["ETag"]})
        assert st == 304 and h304["ETag"] == headers["ETag"]
        for tags in ("*", f'"other", W/{headers["ETag"]}'):  # RFC 9110 §13.1.2: any, and weak comparison
            st, _, h304 = await reg.get("/v1/status/" + key, headers={"If-None-Match": tags})
            assert st == 304 and h304["ETag"] == headers["ETag"], tags
        # the answer follows Accept as every route's does, each type with its own ETag
        st, oap, h_oap = await reg.get("/v1/status/" + key, headers={"Accept": "application/oap+json"})
        assert st == 200 and h_oap["Content-Type"] == "application/oap+json" and oap == resp
        assert h_oap["ETag"] != headers["ETag"] and "Accept" in h_oap["Vary"]
        st, _, _ = await reg.get("/v1/status/" + key, headers={"Accept": "application/oap+json",
                                                               "If-None-Match": headers["ETag"]})
        assert st == 200
        st, _, _ = await reg.get("/v1/status/" + key, headers={"Accept": "application/oap+json",
                                                               "If-None-Match": h_oap["ETag"]})
        assert st == 304
    epoch = reg.svc.epoch
    assert did(b) in epoch.responses  # pre-produced ...
    epoch.responses.clear()  # ... and, past the pre-production limit, produced on first request
    st, resp, _ = await reg.get("/v1/status/" + did(b))
    assert verify_status(resp, registry=reg.svc.registry, status_id=did(b), policy=reg.policy).status == "revoked"
    assert did(b) in epoch.on_demand
    assert resp["revocation"]["record"]["reason"] == "key_compromise"
    assert resp["revocation"]["anchor"].startswith("c2sp.org/tlog-proof@v1")
    # CBOR on request
    st, raw, headers = await reg.get("/v1/status/" + did(a), headers={"Accept": "application/oap+cbor"})
    assert headers["Content-Type"].startswith("application/oap+cbor") and cbor2.loads(raw)["status"] == "good"
    # every tampering is caught
    st, good, _ = await reg.get("/v1/status/" + did(a))
    for forged in ({**good, "status": "unknown"}, {**resp, "id": did(a)},
                   {**resp, "revocation": {**resp["revocation"], "reason": "superseded"}}):
        with pytest.raises(StatusVerificationError):
            verify_status(forged, registry=reg.svc.registry, status_id=forged["id"], policy=reg.policy)
    with pytest.raises(StatusVerificationError, match="not signed"):
        verify_status(good, registry=did(a), status_id=did(a), policy=reg.policy)
    with pytest.raises(StatusVerificationError, match="stale"):
        verify_status(good, registry=reg.svc.registry, status_id=did(a), now=now_utc() + timedelta(days=1))
    with pytest.raises(StatusVerificationError, match=f"the answer is about {did(a)}, not {did(b)}"):
        verify_status(good, registry=reg.svc.registry, status_id=did(b), policy=reg.policy)
    st, body, _ = await reg.get("/v1/status/" + quote("bad id", safe=""))
    assert st == 400 and body["error"] == "invalid_input"


async def test_status_answers_are_the_same_on_the_fast_path_and_through_aiohttp(reg):
    """`GET /v1/status/<id>` is answered before aiohttp (tlog.http.fastpath) unless the request has
    a query, a conditional or any other header outside the fast path's allowlist."""
    from tlog.http.fastpath import FAST_ROUTES_KEY

    routes = reg.runner.app[FAST_ROUTES_KEY]
    a, b = generate_seed(), generate_seed()
    assert (await reg.post(conformance_doc(receipt(a))))[0] == 200
    _status, body = await reg.post(make_revocation(b, kind="key", subject=did(b), reason="key_compromise",
                                                  effective_at=utc(now_utc() - timedelta(hours=1))))
    await wait_epoch_after(reg, body["seq"])
    reg.svc.epoch.responses.pop(did(b))  # revoked, not produced yet: Git is read off the loop, by aiohttp
    keep = ("Content-Type", "ETag", "Expires", "Last-Modified", "Content-Length")
    # (id, Accept, answered fast): a revoked id not produced yet goes to aiohttp once, then is cached
    for key, accept, fast_expected in [(did(a), "*/*", 1), (did(generate_seed()), "*/*", 1),
                                       (did(a), "application/oap+cbor", 1), (did(b), "*/*", 0),
                                       (did(b), "*/*", 1), ("urn:oap:x:" + "y" * 900, "*/*", 1)]:
        before = routes.answered
        fast = await reg.get("/v1/status/" + key, headers={"Accept": accept})
        fast_hit = routes.answered - before
        slow = await reg.get("/v1/status/" + key, headers={"Accept": accept, "X-Via": "aiohttp"})
        assert routes.answered - before == fast_hit
        assert fast[0] == slow[0] == 200 and fast[1] == slow[1]
        assert {h: fast[2][h] for h in keep} == {h: slow[2][h] for h in keep}
        assert fast[2]["Cache-Control"].startswith("public, max-age=")
        assert fast_hit == fast_expected, key
        if fast[2]["Content-Type"] == "application/json":
            assert verify_status(fast[1], registry=reg.svc.registry, status_id=key, policy=reg.policy).status == fast[1]["status"]


async def test_kill_switch_revokes_every_token_class_from_its_effective_time(reg):
    p = generate_seed()
    soon = utc(now_utc() + timedelta(seconds=2))
    status, body = await reg.post(make_kill_switch(p, effective_at=soon))
    assert status == 200 and body["receipt_anchor"]
    await wait_epoch_after(reg, body["seq"])
    for cls in KILL_SWITCH_CLASSES:  # good in an epoch before the effective time (the principal is known)
        _st, resp, _ = await reg.get("/v1/status/" + quote(f"{did(p)}#{cls}", safe=":"))
        # (on a slow machine the first epoch after the commit may already be past it)
        before = parse_utc(resp["this_update"], "this_update") < parse_utc(soon, "effective_at")
        assert resp["status"] == ("good" if before else "revoked"), resp
    loop = asyncio.get_running_loop()
    end = loop.time() + 60
    while loop.time() < end:  # the epoch's next_update is the kill switch's effective time
        _st, resp, _ = await reg.get("/v1/status/" + quote(f"{did(p)}#oauth_grants", safe=":"))
        if resp["status"] == "revoked":
            break
        await asyncio.sleep(0.2)
    assert resp["status"] == "revoked"
    for cls in KILL_SWITCH_CLASSES:
        _st, resp, _ = await reg.get("/v1/status/" + quote(f"{did(p)}#{cls}", safe=":"))
        v = verify_status(resp, registry=reg.svc.registry, status_id=f"{did(p)}#{cls}", policy=reg.policy)
        assert v.status == "revoked" and v.reason == "kill_switch" and utc(v.revoked_at) == soon
    _st, resp, _ = await reg.get("/v1/status/" + did(p))
    assert resp["status"] == "good"  # the principal's DID itself is not revoked


async def test_conformance_levels_and_expiry_through_the_service(tmp_path, log_server):
    from tests.support.conformance import WebSubject, audit_entry, audit_for, web_receipt
    from tests.support.didhosts import DidHosts

    hosts = await DidHosts().start(tmp_path / "tls")
    boots, auditor = [generate_seed() for _ in range(3)], generate_seed()
    reg = await start_registry(tmp_path / "reg", log_server, bootstrap_witnesses=",".join(did(b) for b in boots),
                               did_ca_file=hosts.ca_file, did_allow_private_networks=True)
    try:
        # L4+ subjects are did:web publishers (§31). L5 counts independent parties, and did:web
        # DIDs on one host are one party: one witness holding L4 on the witnesses' host (the
        # subjects are on another), and two bootstrap witnesses (did:key).
        w0 = WebSubject(hosts.web_did("w0"), generate_seed())
        hosts.publish_web(w0.did, w0.document)
        st, body = await reg.post(conformance_doc(web_receipt(w0, "L4", witnesses=(boots[0],))))
        assert st == 200, body
        w = (w0, boots[1], boots[2])

        def subject() -> WebSubject:
            sub = WebSubject(f"did:web:127.0.0.1%3A{hosts.web_port}:{uuid.uuid4().hex[:8]}", generate_seed())
            hosts.publish_web(sub.did, sub.document)
            return sub
        a = subject()
        st, body = await reg.post(conformance_doc(web_receipt(a, "L5", witnesses=tuple(w),
                                                              audit=audit_for(a.did, auditor))))
        assert st == 403 and "not proven in a log this registry trusts" in body["message"]  # a MemLog anchor
        async with LogClient(log_server.url) as client:
            anchor = (await client.anchor(audit_entry(auditor))).bundle
        st, body = await reg.post(conformance_doc(web_receipt(a, "L5", witnesses=tuple(w),
                                                              audit=audit_for(a.did, auditor, anchor=anchor))))
        assert st == 200, body
        stranger = generate_seed()
        b = subject()
        st, body = await reg.post(conformance_doc(web_receipt(b, "L5", witnesses=(w0, boots[1], stranger),
                                                              audit=audit_for(b.did, auditor, anchor=anchor))))
        assert st == 403 and body["error"] == "policy_block" and did(stranger) in body["message"]
        short = receipt(generate_seed(), "L1", valid=timedelta(seconds=5))  # accepted, then expires
        st, body = await reg.post(conformance_doc(short))
        assert st == 200
        st, info, _ = await reg.get("/v1/info")
        assert info["head"]["seq"] == body["seq"]
        loop = asyncio.get_running_loop()
        end = loop.time() + 60
        resp = {}
        while loop.time() < end:
            st, resp, _ = await reg.get("/v1/status/" + short["id"])
            if st == 200 and resp["status"] == "revoked":
                break
            await asyncio.sleep(0.2)
        v = verify_status(resp, registry=reg.svc.registry, status_id=short["id"], policy=reg.policy)
        assert v.status == "revoked" and v.reason == "expired"
    finally:
        await reg.stop()
        await hosts.close()


async def test_bitstring_status_lists_follow_vc_revocations(reg):
    issuer = generate_seed()
    for idx in (3, 42):
        st, body = await reg.post(make_revocation(issuer, kind="vc", subject=f"https://issuer.example/vc/{idx}",
                                                  status_list_index=idx))
        assert st == 200
    await wait_epoch_after(reg, body["seq"])
    st, cred, headers = await reg.get(f"/v1/status-lists/{did(issuer)}/0")
    assert st == 200 and "BitstringStatusListCredential" in cred["type"]
    subject = cred["credentialSubject"]
    assert subject["statusPurpose"] == "revocation" and subject["ttl"] > 0
    bits = decode_list(subject["encodedList"])
    assert len(bits) * 8 >= 131072
    assert [i for i in range(64) if bit(bits, i)] == [3, 42]
    verify_proof(cred, public_from_did_key(reg.svc.registry))
    assert "max-age=" in headers["Cache-Control"] and headers["ETag"]
    st, other, _ = await reg.get(f"/v1/status-lists/{did(generate_seed())}")
    assert not any(decode_list(other["credentialSubject"]["encodedList"]))
    # the same revocation through the OCSP-style service, scoped to the issuer
    st, resp, _ = await reg.get("/v1/status/" + quote("https://issuer.example/vc/42", safe=""),
                                params={"issuer": did(issuer)})
    assert resp["status"] == "revoked"
    st, resp, _ = await reg.get("/v1/status/" + quote("https://issuer.example/vc/42", safe=""),
                                params={"issuer": did(generate_seed())})
    assert resp["status"] == "unknown"
    # asked for without its issuer, the revoked credential is refused, never `good` (fast path and all)
    for path in ("/v1/status/" + quote("https://issuer.example/vc/42", safe=":"),
                 "/v1/status/" + quote("https://issuer.example/vc/42", safe="")):
        st, resp, _ = await reg.get(path)
        assert st == 400 and resp["error"] == "invalid_input" and "?issuer=" in resp["message"], resp
    st, resp, _ = await reg.get("/v1/status-events", params={"id": "https://issuer.example/vc/42"})
    assert st == 400 and "?issuer=" in resp["message"], resp
    code, out, err = await run(CLI, "status", "https://issuer.example/vc/42", "--url", reg.url,
                               "--registry-key", reg.svc.registry, "--log-vkey", reg.log.vkey)
    assert code == 2 and "--issuer" in err and "good" not in out, out + err


async def test_a_credential_falls_with_its_issuer_as_its_status_list_does(reg, tmp_path):
    """One credential, two ways to ask (§22.1): the OCSP-style answer and the issuer's status list
    agree once the issuer is revoked for cause or suspended, with the issuer's record as evidence."""
    for event in ("revoke", "suspend"):
        issuer = generate_seed()
        cred = f"https://issuer.example/vc/{event}"
        await post(reg, make_revocation(issuer, kind="vc", subject=cred, status_list_index=7,
                                        effective_at=utc(now_utc() + timedelta(days=30))))  # its own: a month away
        assert await list_bits(reg, did(issuer)) == set()
        if event == "revoke":
            await post(reg, make_revocation(issuer, kind="key", subject=did(issuer), reason="key_compromise"))
        else:
            await post(reg, make_key_event(issuer, subject=did(issuer), event="suspend"))
        st, resp, _ = await reg.get("/v1/status/" + quote(cred, safe=":"), params={"issuer": did(issuer)})
        assert st == 200, resp
        v = verify_status(resp, registry=reg.svc.registry, status_id=f"vc {did(issuer)} {cred}", policy=reg.policy)
        if event == "revoke":
            assert (v.status, v.reason) == ("revoked", "key_compromise")
            assert resp["revocation"]["record"]["subject"] == did(issuer)
            assert await list_bits(reg, did(issuer)) == ALL
        else:
            assert v.status == "suspended" and resp["suspension"]["record"]["event"] == "suspend"
            assert await list_bits(reg, did(issuer), "/suspension") == ALL


async def test_a_token_epoch_of_a_void_recovery_answers_unknown_not_good(reg):
    """A `resume` signed by a controller whose compromise, found later, is dated before the
    resume's commit does not count (§6.1): the token epoch it named answers `unknown`."""
    p, c = generate_seed(), generate_seed()
    await post(reg, make_key_event(p, subject=did(p), key=did(c)))
    resume = await post(reg, make_key_event(c, subject=did(p), event="resume"))
    eid = f"{did(p)}#oauth_grants@{resume['id']}"

    async def status() -> str:
        st, resp, _ = await reg.get("/v1/status/" + quote(eid, safe=":"))
        assert st == 200, resp
        return verify_status(resp, registry=reg.svc.registry, status_id=eid, policy=reg.policy).status

    assert await status() == "good"
    await post(reg, make_revocation(c, kind="key", subject=did(c), reason="key_compromise",
                                    effective_at=utc(now_utc() - timedelta(hours=1))))
    assert await status() == "unknown"


async def test_the_tokens_of_a_principal_that_revoked_its_only_key_answer_revoked(reg, tmp_path):
    """A did:key principal with no controller revokes itself for compromise (§28.5): its token
    classes answer revoked from the compromise, with its revocation as the deciding record,
    verified offline by the CLI."""
    p = generate_seed()
    since = utc(now_utc() - timedelta(minutes=10))
    await post(reg, make_revocation(p, kind="did", subject=did(p), reason="key_compromise", effective_at=since))
    for cls in KILL_SWITCH_CLASSES:
        resp, verdict = await answer(reg, f"{did(p)}#{cls}")
        assert verdict == ("revoked", since, "key_compromise", None), verdict
        assert resp["revocation"]["record"]["subject"] == did(p)
    code, js = await cli_status(reg, f"{did(p)}#oauth_grants", tmp_path)
    assert code == 3 and js["reason"] == "key_compromise", js


async def test_health_and_metrics(reg):
    st, body, _ = await reg.get("/healthz")
    assert st == 200 and body["status"] == "ok"
    assert (await reg.post(make_revocation(a := generate_seed(), kind="key", subject=did(a))))[0] == 200
    await reg.post({"type": "nope"})
    st, text, _ = await reg.get("/metrics")
    text = text.decode()
    assert 'oap_registry_records_total{type="revocation"} 1.0' in text
    assert 'oap_registry_records_rejected_total{code="invalid_input"} 1.0' in text
    assert "oap_registry_head_seq 1.0" in text
    st, info, _ = await reg.get("/v1/info")
    assert info["registry"] == reg.svc.registry and info["log"]["vkey"] == reg.log.vkey



async def test_latest_commits_with_their_records_and_anchors(reg):
    """GET /v1/commits: newest first, the records each commit added, its log anchor (which
    verifies), bounded pages back with `before`, and a 4xx with an OAP code for bad input."""
    seeds = [generate_seed() for _ in range(3)]
    for s in seeds:
        assert (await reg.post(make_revocation(s, kind="key", subject=did(s))))[0] == 200
    head = reg.svc.index.head.seq
    st, body, headers = await reg.get("/v1/commits?limit=2")
    assert st == 200 and headers["Access-Control-Allow-Origin"] == "*"
    assert body["head"] == head and [c["seq"] for c in body["commits"]] == [head, head - 1]
    anchored = 0
    for c in body["commits"]:
        info = reg.svc.index.commits[c["seq"]]
        assert c["commit"] == info.commit and c["tree"] == info.tree and c["time"].endswith("Z")
        if c["anchor"] is not None:
            index = verify_commit_anchor(c["anchor"], commit=c["commit"], tree=c["tree"], seq=c["seq"],
                                         registry=reg.svc.registry, policy=reg.policy)
            assert index == c["log_index"]
            anchored += 1
    assert anchored  # a POST answers once its commit is anchored
    st, everything, _ = await reg.get("/v1/commits?limit=100")
    named = {r["id"] for c in everything["commits"] for r in c["records"]}
    assert len(named) == 3 and all(c["record_count"] == len(c["records"]) for c in everything["commits"])
    st, older, _ = await reg.get(f"/v1/commits?limit=100&before={body['next_before']}")
    assert st == 200 and [c["seq"] for c in older["commits"]] == list(range(head - 2, -1, -1))
    assert older["next_before"] is None and older["commits"][-1]["records"] == []  # genesis
    for bad in ("limit=0", "limit=101", "limit=x", "before=-1", "limit=1e3"):
        st, err, _ = await reg.get(f"/v1/commits?{bad}")
        assert st == 400 and err["error"] == "invalid_input", bad

async def test_one_pack_per_batch_is_compacted_and_clones_still_work(tmp_path, log_server):
    reg = await start_registry(tmp_path / "reg", log_server, max_packs=2)
    try:
        for _ in range(5):
            assert (await reg.post(make_revocation(s := generate_seed(), kind="key", subject=did(s))))[0] == 200
        assert reg.svc.index.head.seq == 5
        assert reg.svc.repo.pack_count() <= 2  # six batches wrote six packs
        clone = tmp_path / "clone"
        await git("clone", "-q", f"{reg.url}/registry.git", str(clone))
        assert len((await git("log", "--format=%H", cwd=clone)).split()) == 6
        st, rec, _ = await reg.get(f"/v1/files/{next(reg.svc.index.all_records()).path}")
        assert st == 200 and rec["type"] == "revocation"
    finally:
        await reg.stop()


async def test_an_idle_registry_commits_the_last_anchor_once(tmp_path, log_server):
    reg = await start_registry(tmp_path / "reg", log_server, anchor_idle_seconds=0.2)
    try:
        st, body = await reg.post(make_revocation(a := generate_seed(), kind="key", subject=did(a)))
        assert st == 200
        loop = asyncio.get_running_loop()
        end = loop.time() + 60
        while reg.svc.index.head.seq == body["seq"] and loop.time() < end:
            await asyncio.sleep(0.05)
        head = reg.svc.index.head
        assert head.seq == body["seq"] + 1 and reg.svc.index.per_commit.get(head.seq, 0) == 0
        assert body["seq"] in reg.svc.index.anchors_in_tree  # the record commit is now proven in the tree
        assert not reg.svc.index.head_unproven()  # so the idle loop has nothing more to commit
        data = await reg.svc.in_thread(reg.svc.repo.read, head.tree, f"anchors/0/{body['seq']}.tlog-proof")
        assert data.decode() == body["anchor"] or parse_proof_bundle(data).index == \
            parse_proof_bundle(body["anchor"]).index
    finally:
        await reg.stop()


async def test_one_process_per_data_directory(reg, log_server):
    with pytest.raises(Exception, match="in use by another registry process"):
        await start_registry(reg.svc.data_dir, log_server)
