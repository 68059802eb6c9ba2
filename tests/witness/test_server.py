"""witness.api over real HTTP on 127.0.0.1: monitoring, health, metrics, limits, concurrency."""
from __future__ import annotations

import asyncio
import gzip
import random
import re

from tlog.formats.keys import cosigner_verifier, parse_vkey
from tlog.formats.mirror import add_checkpoint_body
from tlog.formats.note import NoteSignature, open_note, parse_signature_lines
from witness.config import WitnessedLog
from witness.core import origin_path

from tests.support.witness import MemLog, post, running_witness, witness_config


async def test_monitoring_health_info_and_metrics(tmp_path):
    log = MemLog().grow(10)
    cfg = witness_config(tmp_path, [WitnessedLog(log.origin, log.vkey)])
    async with running_witness(cfg) as (svc, url, session):
        path = f"{url}/{origin_path(log.origin)}/checkpoint"
        async with session.get(path) as r:
            assert r.status == 404 and (await r.json())["error"] == "not_found"
        assert (await post(session, url, log.body(0, 4)))[0] == 200
        assert (await post(session, url, log.body(4, 10)))[0] == 200
        assert (await post(session, url, log.body(0, 10)))[:3:2] == (409, "10\n")
        async with session.get(path) as r:
            assert r.status == 200 and r.content_type == "text/plain"
            note = await r.text()
        assert note.startswith(f"{log.origin}\n10\n")
        open_note(note, [parse_vkey(log.vkey)])
        open_note(note, [cosigner_verifier(svc.signer.verifier)])
        async with session.get(f"{url}/{'0' * 64}/checkpoint") as r:
            assert r.status == 404
        async with session.get(url + "/healthz") as r:
            assert r.status == 200 and (await r.json())["status"] == "ok"
        async with session.get(url + "/v1/info") as r:
            info = await r.json()
        assert info["verifier_key"] == svc.signer.vkey and info["identity"].startswith("did:key:z6Mk")
        assert info["logs"][0]["size"] == 10
        assert info["logs"][0]["checkpoint_path"] == f"/{origin_path(log.origin)}/checkpoint"
        async with session.get(url + "/metrics") as r:
            text = await r.text()
    assert 'oap_witness_add_checkpoint_total{status="200"} 2.0' in text
    assert 'oap_witness_add_checkpoint_total{status="409"} 1.0' in text
    assert f'oap_witness_log_size{{origin="{log.origin}"}} 10.0' in text
    assert f'oap_witness_cosignatures_total{{origin="{log.origin}"}} 2.0' in text
    assert "oap_witness_cosign_latency_seconds_count 2.0" in text
    assert re.search(r'oap_witness_http_requests_total\{route="/add-checkpoint",status="409"\} 1\.0', text)


async def test_sizes_survive_a_restart_in_metrics(tmp_path):
    log = MemLog().grow(3)
    cfg = witness_config(tmp_path, [WitnessedLog(log.origin, log.vkey)])
    async with running_witness(cfg) as (_svc, url, session):
        assert (await post(session, url, log.body(0, 3)))[0] == 200
    async with running_witness(cfg) as (_svc, url, session):
        async with session.get(url + "/metrics") as r:
            assert f'oap_witness_log_size{{origin="{log.origin}"}} 3.0' in await r.text()
        assert (await post(session, url, log.body(0, 3)))[:3:2] == (409, "3\n")


async def test_http_limits_and_methods(tmp_path):
    log = MemLog().grow(3)
    cfg = witness_config(tmp_path, [WitnessedLog(log.origin, log.vkey)], max_body=4096)
    async with running_witness(cfg) as (svc, url, session):
        status, ctype, text = await post(session, url, log.body(0, 3) + b"x" * 5000)
        assert status == 413 and ctype.startswith("text/plain") and "4096" in text
        async with session.get(url + "/add-checkpoint") as r:
            assert r.status == 405
        status, _, text = await post(session, url, b"")
        assert status == 400 and text.endswith("\n")
        # tlog-witness's text form for bodies in a coding not decoded here (415) or that do
        # not decode (400, naming it), never the JSON 500 a broken gzip stream got
        for enc, body, want, says in (("xyz", log.body(0, 3), 415, "Content-Encoding"),
                                      ("gzip", b"garbage, not gzip", 400, "not valid gzip")):
            async with session.post(url + "/add-checkpoint", data=body, headers={"Content-Encoding": enc}) as r:
                text = await r.text()
                assert (r.status, r.headers["Content-Type"]) == (want, "text/plain; charset=utf-8"), text
                assert says in text and text.endswith("\n")
        assert svc.state.get_sync(log.origin) is None
        async with session.post(url + "/add-checkpoint", data=gzip.compress(log.body(0, 3)),
                                headers={"Content-Encoding": "gzip"}) as r:
            assert r.status == 200  # a good gzip body is taken



async def test_a_note_with_sixteen_post_quantum_signatures_fits_the_default_cap(tmp_path):
    """C2SP signed-note: verifiers "MUST accept at least up to 16 signatures", and post-quantum
    signatures can be up to nearly 5 kB: the log's signature and 15 other (unknown) ML-DSA-87-sized
    lines, with a full 63-line proof's worth of room, are cosigned under the default max_body."""
    log = MemLog().grow(3)
    rng = random.Random(16)
    others = "".join(NoteSignature(f"w{i}.example/pq", rng.randbytes(4), rng.randbytes(8 + 4627)).line()
                     for i in range(15))
    body = log.body(0, 3) + others.encode()
    assert 64 * 1024 < len(body) + 63 * 45 < 128 * 1024
    async with running_witness(witness_config(tmp_path, [WitnessedLog(log.origin, log.vkey)])) as (_svc, url, s):
        status, _, text = await post(s, url, body)
        assert status == 200 and len(parse_signature_lines(text)) == 1, text[:200]


async def test_refusals_are_kept_per_log_and_bounded(tmp_path):
    """Why a log's checkpoints are not cosigned (GET /v1/refusals, for the explorer): the last
    REFUSALS_PER_LOG per followed log, newest first; a flood for other origins pushes out only
    other origins' refusals."""
    from witness.api import REFUSALS_PER_LOG

    log = MemLog().grow(5)
    cfg = witness_config(tmp_path, [WitnessedLog(log.origin, log.vkey)])
    async with running_witness(cfg) as (_svc, url, session):
        assert (await post(session, url, log.body(0, 3)))[0] == 200
        assert (await post(session, url, log.body(0, 5)))[0] == 409  # old size 0, the witness has 3
        assert (await post(session, url, log.fork(2, tag=7).grow(3).body(3, 5)))[0] == 422  # inconsistent
        for i in range(REFUSALS_PER_LOG + 5):
            assert (await post(session, url, f"old 0\n\nother.example/log{i}\n1\nAAAA\n\n".encode()))[0] >= 400
        async with session.get(url + "/v1/refusals") as r:
            assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == "*"
            body = await r.json()
    refusals = body["refusals"]
    mine = [x for x in refusals if x["origin"] == log.origin]
    assert [x["status"] for x in mine] == [422, 409]  # newest first
    assert mine[1]["reason"] and mine[0]["time"].endswith("Z")
    others = [x for x in refusals if x["origin"] != log.origin]
    assert len(others) == REFUSALS_PER_LOG == body["per_log"]
    assert others[0]["origin"] == f"other.example/log{REFUSALS_PER_LOG + 4}"  # the oldest ones went


async def test_unsigned_checkpoints_claiming_a_log_cannot_push_its_refusals_out(tmp_path):
    """Anyone can send a checkpoint that names a followed log: only refusals of checkpoints the
    log signed (409, 422, 429: given after its signature verified) are kept as the log's; a
    replay counts up instead of taking a slot; what a client wrote is shown escaped."""
    from witness.api import REFUSALS_PER_LOG

    log = MemLog().grow(5)
    cfg = witness_config(tmp_path, [WitnessedLog(log.origin, log.vkey)])
    impostor = MemLog(seed=bytes(32)).grow(5)  # same origin, another key
    async with running_witness(cfg) as (_svc, url, session):
        assert (await post(session, url, log.body(0, 3)))[0] == 200
        assert (await post(session, url, log.fork(2, tag=7).grow(3).body(3, 5)))[0] == 422  # inconsistent
        for i in range(REFUSALS_PER_LOG + 5):
            assert (await post(session, url, log.body(0, 5)))[0] == 409  # a replay, again and again
            assert (await post(session, url, impostor.body(3, 5)))[0] == 403
            assert (await post(session, url, f"old 0\n\n{log.origin}\n{i}\nAAAA\n\n".encode()))[0] == 400
        assert (await post(session, url, "old 0\n\no\x00p.localhost/\x1b[31mlog\u202e\n1\nAAAA\n\n".encode()))[0] == 400
        async with session.get(url + "/v1/refusals") as r:
            body = await r.json()
    mine = [x for x in body["refusals"] if x["origin"] == log.origin and x["status"] in (409, 422)]
    assert [x["status"] for x in mine] == [409, 422]  # the inconsistent checkpoint is still shown
    assert [x["count"] for x in mine] == [REFUSALS_PER_LOG + 5, 1]
    assert body["refusals"][0]["origin"] == "o\\u0000p.localhost/\\u001b[31mlog\\u202e"
    assert all(x["origin"].isprintable() and x["reason"].isprintable() for x in body["refusals"])
    rest = {(x["status"], x["count"]) for x in body["refusals"][1:] if x not in mine}
    assert rest == {(403, REFUSALS_PER_LOG + 5), (400, REFUSALS_PER_LOG + 5)}  # one row each, counted

async def test_concurrent_conflicting_requests_never_fork_or_go_backwards(tmp_path):
    """Many clients push three forks of one log at once; every 200 must fit one history."""
    main = MemLog().grow(40)
    trees = [main, main.fork(6, tag=1).grow(34), main.fork(17, tag=2).grow(23)]
    cfg = witness_config(tmp_path, [WitnessedLog(main.origin, main.vkey)])
    notes = {(t, s): trees[t].checkpoint(s) for t in range(3) for s in range(1, 41)}
    cosigned: list[tuple[int, int, str]] = []  # (tree, size, cosignature line)
    statuses: dict[int, int] = {}

    async def client(seed: int, session, url) -> None:
        rng = random.Random(seed)
        old = 0
        for _ in range(12):
            t, size = rng.randrange(3), rng.randint(1, 40)
            if size < old:
                size = old
            proof = trees[t].proof(old, size) if old <= size else []
            if rng.random() < 0.15:
                old_sent = rng.randint(0, 40)  # a stale or wild guess
            else:
                old_sent = old
            body = add_checkpoint_body(old_sent, proof, notes[(t, size)])
            status, _, text = await post(session, url, body)
            statuses[status] = statuses.get(status, 0) + 1
            assert status in (200, 400, 409, 422), (status, text)
            if status == 200:
                cosigned.append((t, size, text))
                old = size
            elif status == 409:
                old = int(text)

    async with running_witness(cfg) as (svc, url, session):
        await asyncio.gather(*(client(i, session, url) for i in range(40)))
        history = svc.state.history_sync(main.origin)
        final = svc.state.get_sync(main.origin)
        wv = cosigner_verifier(svc.signer.verifier)
    assert statuses.get(200, 0) >= 3 and statuses.get(409, 0) >= 1 and statuses.get(422, 0) >= 1
    by_size: dict[int, set[bytes]] = {}
    for t, size, line in cosigned:
        (sig,) = parse_signature_lines(line)
        assert isinstance(sig, NoteSignature)
        text = notes[(t, size)].split("\n\n")[0] + "\n"
        open_note(text + "\n" + line, [wv])  # every 200 is a valid cosignature of what was sent
        by_size.setdefault(size, set()).add(trees[t].root(size))
    assert all(len(roots) == 1 for roots in by_size.values()), "two roots cosigned for one size"
    # All cosigned (size, root) pairs lie on one tree: the one holding the final state.
    final_tree = next(t for t in trees if t.root(final.size) == final.root)
    for size, roots in by_size.items():
        assert roots == {final_tree.root(size)}
    assert max(by_size) == final.size
    assert [s for s, _ in history] == sorted(by_size)  # persisted in increasing size, one row each
    assert all(final_tree.root(s) == r for s, r in history)


async def test_add_checkpoint_on_the_fast_path_answers_as_aiohttp_does(tmp_path):
    """Two witnesses with one key and one clock, one as `oap-witness serve` runs it (the fast
    path) and one on aiohttp alone, get the same requests on one connection each: every
    answer (cosignature, 409 with the size, 400, 404, 413) is the same bytes but the Date."""
    from aiohttp import web

    from tlog.http.fastpath import FAST_ROUTES_KEY, FastSite
    from tlog.http.serve import start_app
    from witness.api import build_app
    from witness.service import WitnessService

    from tests.service.test_fastpath import exchange, responses

    log, other = MemLog().grow(12), MemLog(origin="other.example/log").grow(3)
    logs = [WitnessedLog(log.origin, log.vkey)]
    bodies = [log.body(0, 4), log.body(4, 9), log.body(0, 9), log.body(4, 12), b"garbage\n\n",
              other.body(0, 3), log.body(9, 12), b"x" * 140_000, log.body(9, 12)]
    stream = b"".join(b"POST /add-checkpoint HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n"
                      % len(b) + b for b in bodies)
    stream += b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    answers = []
    for fast in (True, False):
        cfg = witness_config(tmp_path / ("fast" if fast else "plain"), logs)
        svc = WitnessService.open(cfg, clock=lambda: 1_700_000_000.0)
        app = build_app(svc)
        if fast:
            runner = await start_app(app, "127.0.0.1", 0)
        else:
            runner = web.AppRunner(app)
            await runner.setup()
            await FastSite(runner, "127.0.0.1", 0, routes=None, timeout=15.0).start()
        try:
            answers.append(responses(await exchange(runner.addresses[0][1], stream)))
        finally:
            await runner.cleanup()
            svc.close()
        if fast:
            assert app[FAST_ROUTES_KEY].answered == 7  # then the oversized body went to aiohttp
    fast, plain = answers
    assert fast == plain
    assert [int(r[0].split()[1]) for r in fast] == [200, 200, 409, 409, 400, 404, 200, 413, 409, 200]
    assert fast[2][2] == b"9\n" and dict(fast[2][1])[b"Content-Type"] == b"text/x.tlog.size"
    assert fast[0][2].startswith("\u2014 ".encode())
