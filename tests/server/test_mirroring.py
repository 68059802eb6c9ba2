"""The log pushes to its mirrors (docs/architecture.md §3.4, C2SP tlog-mirror), against a real
`oap-mirror serve` process on 127.0.0.1: the mirror's copy verifies from its tiles alone, a
mirror down and back up catches up, a mirror the quorum counts gates publication, and a lying
or broken mirror never changes what the log answers."""
from __future__ import annotations

import asyncio
import logging
import os
import subprocess
from functools import partial
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tlog.client.client import LogClient, ServerError
from tlog.client.verifier import TrustPolicy
from tlog.formats.checkpoint import parse_checkpoint, subtree_message
from tlog.formats.encoding import b64enc
from tlog.formats.entries import commitment_entry
from tlog.formats.keys import CosignatureSigner, parse_vkey
from tlog.formats.note import Note, NoteSignature, open_note, parse_note, parse_signature_lines
from tlog.formats.tiles import entries_for_size
from tlog.merkle.subtrees import subtree_consistency_proof, subtree_root
from tlog.server.service import load_or_create_key

from tests.support.logs import grow, open_test_log
from tests.support.mirror import cosigner, cosigner_key, http, mirror_service, origin_hash, served_root
from tests.support.waiting import until

pytestmark = pytest.mark.slow

ORIGIN = "mirrored.test/log"


open_log = partial(open_test_log, origin=ORIGIN)


async def get(url: str) -> tuple[int, dict, bytes]:
    """A GET off the event loop (the log under test runs on it)."""
    return await asyncio.to_thread(http, url)


def sample(text: str, name: str, **labels: str) -> float:
    """A Prometheus sample of `text` (0 when absent)."""
    want = "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""
    for line in text.splitlines():
        if line.startswith(name + want + " "):
            return float(line.split()[-1])
    return 0.0


async def mirror_size(prefix: str) -> int:
    status, _, note = await get(prefix + "/checkpoint")
    return parse_checkpoint(parse_note(note).text).size if status == 200 else -1


async def mirror_equal(prefix: str, size: int) -> bool:
    return await mirror_size(prefix) == size


def has_mirror_cosignature(note: str) -> bool:
    m = cosigner()
    return any(s.name == m.name and s.key_id == m.key_id for s in parse_note(note).signatures)


def log_vkey(tmp: Path) -> str:
    return load_or_create_key(tmp / "log", ORIGIN).vkey


async def test_the_log_pushes_and_the_copy_verifies_from_its_tiles_alone(tmp_path, started, go_tlogverify):
    vkey = log_vkey(tmp_path)
    m = started(mirror_service(tmp_path / "m", [(ORIGIN, vkey, "")]))
    prefix = f"{m.url}/{origin_hash(ORIGIN)}"
    svc, server, url = await open_log(tmp_path, mirrors=(("m1", cosigner().vkey, m.url),))
    try:
        policy_text = (tmp_path / "log" / "log.policy").read_text()
        assert f"mirror m1 {cosigner().vkey} {m.url}" in policy_text and "quorum none" in policy_text
        for n in (300, 500, 1):  # crosses the 256 and 512 bundle boundaries
            size = await grow(url, n)
            await until(lambda size=size: mirror_equal(prefix, size), 120, f"the mirror at {size}")
        # the copy is the log's, from the mirror's tiles alone, byte for byte
        assert await asyncio.to_thread(served_root, prefix, size) == svc.state.root
        for t in entries_for_size(size):
            assert (await get(f"{prefix}/{t.path}"))[2] == (await get(f"{url}/{t.path}"))[2], t.path
        _status, _, note = await get(prefix + "/checkpoint")
        open_note(note, [parse_vkey(vkey)])
        open_note(note, [cosigner_key()])
        # the mirror's cosignature is merged into the checkpoint the log serves (the log is idle)
        served = await until(lambda: has_mirror_cosignature(svc.state.note) and svc.state.note, 120,
                             "the mirror's cosignature on the log's checkpoint")
        assert parse_checkpoint(parse_note(served).text).size == size
        assert has_mirror_cosignature((await get(url + "/checkpoint"))[2].decode())
        v = TrustPolicy.from_text(policy_text).verify_checkpoint(served)
        assert v.witnesses == {"m1"} and TrustPolicy.from_text(policy_text).mirrors(v.witnesses) == ["m1"]
        text = (await get(url + "/metrics"))[2].decode()
        assert sample(text, "oap_log_mirror_cosigned_size", mirror="m1") == size
        assert sample(text, "oap_log_mirror_lag_entries", mirror="m1") == 0
        assert sample(text, "oap_log_mirror_entries_sent_total", mirror="m1") == size  # each entry once
        # Go's sumdb/tlog verifies the copy from the mirror's tiles alone, with its cosignature
        out = await asyncio.to_thread(subprocess.run, [str(go_tlogverify), prefix, vkey, "50", cosigner().vkey],
                                      capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and f"OK size={size}" in out.stdout, out.stdout + out.stderr
    finally:
        await server.close()
        await svc.close()


async def test_a_mirror_down_never_delays_writes_and_catches_up_when_back(tmp_path, started):
    vkey = log_vkey(tmp_path)
    svc_m = mirror_service(tmp_path / "m", [(ORIGIN, vkey, "")])
    m = started(svc_m)
    port = m.url.rsplit(":", 1)[1]
    prefix = f"{m.url}/{origin_hash(ORIGIN)}"
    svc, server, url = await open_log(tmp_path, mirrors=(("m1", cosigner().vkey, m.url),))
    try:
        first = await grow(url, 300)
        await until(lambda: mirror_equal(prefix, first), 120, "the mirror at 300")
        m.kill()  # SIGKILL
        # every write is acknowledged while the mirror is down (none waits for it)
        size = await grow(url, 500)
        assert size == 800 and svc.appender.published and svc.state.size == 800
        text = await until(lambda: metrics_if(url, "oap_log_mirror_push_failures_total"), 120, "a failed push")
        assert sample(text, "oap_log_mirror_cosigned_size", mirror="m1") == first
        assert sample(text, "oap_log_mirror_lag_entries", mirror="m1") == size - first
        # back on the same port, with its data: the log resumes from the mirror's next entry
        svc_m.args += ["--port", port]
        started(svc_m)
        await until(lambda: mirror_equal(prefix, size), 120, "the mirror at 800")
        assert await asyncio.to_thread(served_root, prefix, size) == svc.state.root
        text = (await get(url + "/metrics"))[2].decode()
        assert sample(text, "oap_log_mirror_entries_sent_total", mirror="m1") == size  # nothing sent twice
        await until(lambda: has_mirror_cosignature(svc.state.note), 120, "the cosignature merged")
    finally:
        await server.close()
        await svc.close()


async def metrics_if(url: str, name: str) -> str | None:
    """The log's metrics text once `name` has a non-zero sample."""
    text = (await get(url + "/metrics"))[2].decode()
    return text if any(line.startswith(name) and float(line.split()[-1]) > 0 for line in text.splitlines()) else None


async def test_a_mirror_the_quorum_counts_gates_publication(tmp_path, started):
    vkey = log_vkey(tmp_path)
    svc_m = mirror_service(tmp_path / "m", [(ORIGIN, vkey, "")])
    m = started(svc_m)
    port = m.url.rsplit(":", 1)[1]
    policy = tmp_path / "log.policy"
    policy.write_text(f"log {vkey}\nmirror m1 {cosigner().vkey} {m.url}\nquorum m1\n")
    svc, server, url = await open_log(tmp_path, witness_policy=policy, witness_timeout=2.0)
    trust = TrustPolicy.from_text(policy.read_text())
    try:
        async with LogClient(url, policy=trust) as c:
            a = await c.anchor(commitment_entry(os.urandom(32)))  # verified against the quorum inside anchor()
            assert has_mirror_cosignature(a.checkpoint)
            # every checkpoint served carries the mirror's cosignature: it stored the entries first
            assert has_mirror_cosignature((await get(url + "/checkpoint"))[2].decode())
            assert await mirror_size(f"{m.url}/{origin_hash(ORIGIN)}") == a.tree_size
            m.kill()
            entry = commitment_entry(os.urandom(32))
            with pytest.raises(ServerError) as refused:
                await c.anchor(entry)
            assert refused.value.status == 503  # durable, not published without the mirror
            served = (await get(url + "/checkpoint"))[2].decode()
            assert parse_checkpoint(parse_note(served).text).size == a.tree_size
            svc_m.args += ["--port", port]
            started(svc_m)
            again = await until(lambda: anchor_or_none(c, entry), 120, "publication with the mirror back")
            assert again.duplicate and again.index == a.tree_size and has_mirror_cosignature(again.checkpoint)
    finally:
        await server.close()
        await svc.close()


async def test_a_mirror_holding_a_larger_tree_halts_the_log_from_its_start(tmp_path, started, caplog):
    """The log is restored from an old backup (size 5) while a mirror the quorum counts holds
    size 20 of it: the log's start, which has the witnesses and mirrors cosign its signed head
    again before it signs anything, halts there (the mirror is started with the appender, its
    check on from the first push), and nothing new is ever signed or served."""
    import sqlite3
    from contextlib import closing

    vkey = log_vkey(tmp_path)
    m = started(mirror_service(tmp_path / "m", [(ORIGIN, vkey, "")]))
    policy = tmp_path / "log.policy"
    policy.write_text(f"log {vkey}\nmirror m1 {cosigner().vkey} {m.url}\nquorum m1\n")
    svc, server, url = await open_log(tmp_path, witness_policy=policy, witness_timeout=5.0)
    try:
        assert await grow(url, 5) == 5
        with closing(sqlite3.connect(tmp_path / "log" / "log.db")) as a, \
                closing(sqlite3.connect(tmp_path / "old.db")) as b:
            a.backup(b)  # the old backup, at 5
        assert await grow(url, 15) == 20
        assert await mirror_size(f"{m.url}/{origin_hash(ORIGIN)}") == 20
    finally:
        await server.close()
        await svc.close()
    for f in (tmp_path / "log").glob("log.db*"):
        f.unlink()
    with closing(sqlite3.connect(tmp_path / "old.db")) as a, closing(sqlite3.connect(tmp_path / "log" / "log.db")) as b:
        a.backup(b)
    from tlog.server.config import LogConfig
    from tlog.server.service import LogService

    caplog.set_level(logging.CRITICAL, logger="oap.tlog")
    svc = await LogService.open(LogConfig(data_dir=tmp_path / "log", port=0, origin=ORIGIN, batch_interval_ms=5,
                                          witness_policy=policy, witness_timeout=5.0))
    halted = svc.appender.halted  # as open returns: halted during the start, not after it
    await svc.close()
    assert halted is not None, "the start went on with a mirror holding more"
    assert "mirror m1 holds a checkpoint of size 20" in halted.message
    said = [r.getMessage() for r in caplog.records if "larger than its" in r.getMessage()]
    assert said and all(m.endswith("larger than its 5") for m in said), said  # the log's size, from the start
    svc, server, url = await open_log(tmp_path, witness_policy=policy, witness_timeout=5.0)
    try:
        assert svc.appender.halted is not None
        async with LogClient(url) as c:
            with pytest.raises(ServerError) as refused:
                await c.anchor(commitment_entry(os.urandom(32)))
            assert refused.value.status == 503 and "old backup" in str(refused.value)
        assert svc.storage.head().signed.size == 5
    finally:
        await server.close()
        await svc.close()


async def anchor_or_none(c: LogClient, entry: dict):
    try:
        return await c.anchor(entry)
    except ServerError as e:
        assert e.status == 503
        return None


class LyingMirror:
    """An add-checkpoint and add-entries endpoint that answers 200 with a cosignature that must
    never count: garbage, the mirror's key over another tree, another key under its name, or no
    answer at all."""

    def __init__(self, how: str) -> None:
        self.how, self.requests = how, 0

    async def add_checkpoint(self, request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text="")

    async def add_entries(self, request: web.Request) -> web.Response:
        self.requests += 1
        await request.read()
        m = cosigner()
        if self.how == "hang":
            await asyncio.sleep(3600)
        if self.how == "garbage":
            return web.Response(text=f"— {m.name} bm90IGEgc2lnbmF0dXJl\n")
        if self.how == "other tree":  # the right key, over a checkpoint of another root
            text = f"{ORIGIN}\n1\n{'A' * 43}=\n"
            blob = m.cosign(text, 1_700_000_000)
        else:  # "other key": a key of the same name the policy does not list
            other = CosignatureSigner(m.name, bytes(32))
            text = f"{ORIGIN}\n1\n{'A' * 43}=\n"
            blob = other.cosign(text, 1_700_000_000)
        return web.Response(text=NoteSignature(m.name, m.key_id, blob).line())

    async def start(self) -> TestServer:
        app = web.Application()
        app.add_routes([web.post("/add-checkpoint", self.add_checkpoint), web.post("/add-entries", self.add_entries)])
        server = TestServer(app, host="127.0.0.1", port=0)
        await server.start_server()
        return server


@pytest.mark.parametrize("how", ["garbage", "other tree", "other key", "hang"])
async def test_a_lying_or_broken_mirror_never_changes_the_log_answers(tmp_path, how):
    liar = LyingMirror(how)
    fake = await liar.start()
    murl = str(fake.make_url("")).rstrip("/")
    svc, server, url = await open_log(tmp_path, mirrors=(("m1", cosigner().vkey, murl),), mirror_timeout=1)
    trust = TrustPolicy.from_text((tmp_path / "log" / "log.policy").read_text())
    try:
        for _ in range(3):
            size = await grow(url, 20)  # acknowledged whatever the mirror does
        await until(lambda: liar.requests >= 1, 120, "pushes to the mirror")
        if how != "hang":
            await until(lambda: metrics_if(url, "oap_log_mirror_push_failures_total"), 120, "a failed push")
        served = (await get(url + "/checkpoint"))[2].decode()
        assert parse_checkpoint(parse_note(served).text).size == size
        assert not has_mirror_cosignature(served) and len(parse_note(served).signatures) == 1
        assert trust.verify_checkpoint(served).witnesses == set()
        assert not svc.appender.halted
    finally:
        await server.close()
        await svc.close()
        await fake.close()


async def test_a_lying_mirror_the_quorum_counts_never_gets_a_checkpoint_published(tmp_path):
    liar = LyingMirror("other tree")
    fake = await liar.start()
    murl = str(fake.make_url("")).rstrip("/")
    vkey = log_vkey(tmp_path)
    policy = tmp_path / "log.policy"
    policy.write_text(f"log {vkey}\nmirror m1 {cosigner().vkey} {murl}\nquorum m1\n")
    svc, server, url = await open_log(tmp_path, witness_policy=policy, witness_timeout=1.0)
    try:
        async with LogClient(url) as c:
            with pytest.raises(ServerError) as refused:
                await c.anchor(commitment_entry(os.urandom(32)))
            assert refused.value.status == 503
        status, _, _ = await get(url + "/checkpoint")
        assert status == 503 and not svc.appender.published
    finally:
        await server.close()
        await svc.close()
        await fake.close()


async def test_a_mirror_with_an_mldsa44_key_cosigns_with_both_and_signs_subtrees(tmp_path, started):
    """The mirror holds an ML-DSA-44 key beside its Ed25519 one (`cosigners`, made on first
    start with the same name): the log's checkpoint gets both cosignatures (the ML-DSA-44 one
    is subtree/v1 over [0, size), checked by a second implementation), and the mirror answers
    sign-subtree for a checkpoint it cosigned, never for one it did not."""
    import mldsa  # pure-Python ML-DSA-44 (FIPS 204), independent of the pyca/cryptography signer

    vkey = log_vkey(tmp_path)
    mdir = tmp_path / "m"
    m = started(mirror_service(mdir, [(ORIGIN, vkey, "")], settings='cosigners = ["ed25519", "mldsa44"]'))
    assert (mdir / "mirror-mldsa44.key").stat().st_mode & 0o777 == 0o600
    pq_vkey = (mdir / "mirror-mldsa44.vkey").read_text().strip()
    pq = parse_vkey(pq_vkey)
    assert pq.name == cosigner().name and pq.key_type == 0x06
    prefix = f"{m.url}/{origin_hash(ORIGIN)}"
    svc, server, url = await open_log(tmp_path, mirrors=(("m1", cosigner().vkey, m.url), ("m1-pq", pq_vkey, m.url)))
    try:
        size = await grow(url, 300)
        await until(lambda: mirror_equal(prefix, size), 120, "the mirror at 300")
        trust = TrustPolicy.from_text((tmp_path / "log" / "log.policy").read_text())

        def both() -> str | None:
            note = svc.state.note
            return note if trust.verify_checkpoint(note).witnesses == {"m1", "m1-pq"} else None

        served = await until(both, 120, "both mirror cosignatures on the log's checkpoint")
        assert trust.mirrors(trust.verify_checkpoint(served).witnesses) == ["m1", "m1-pq"]
        sig = next(s for s in parse_note(served).signatures if s.key_id == pq.key_id)
        cp = parse_checkpoint(parse_note(served).text)
        msg = subtree_message(pq.name, int.from_bytes(sig.blob[:8], "big"), ORIGIN, 0, cp.size, cp.root)
        mldsa.VerificationKey(pq.public, parameters=mldsa.ParameterSet.ML_DSA_44).verify(sig.blob[8:], msg)

        # sign-subtree: [256, 300) of the mirror's own checkpoint
        mirror_note = (await get(prefix + "/checkpoint"))[2].decode()
        hashes = svc.storage.hashes

        def mth(lo: int, hi: int) -> bytes:
            return subtree_root(lo, hi, hashes.read)

        def body(note: str, start: int = 256, end: int = 300, subtree_hash: bytes | None = None) -> bytes:
            proof = subtree_consistency_proof(start, end, size, mth)
            h = mth(start, end) if subtree_hash is None else subtree_hash
            lines = [f"subtree {start} {end}", b64enc(h), *(b64enc(p) for p in proof), ""]
            return ("\n".join(lines) + "\n" + note).encode()

        status, _, answer = await asyncio.to_thread(http, m.url + "/sign-subtree", body(mirror_note))
        assert status == 200, answer
        (line,) = parse_signature_lines(answer.decode())
        assert line.key_id == pq.key_id and line.blob[:8] == bytes(8)
        assert pq.verify_subtree(ORIGIN, 256, 300, mth(256, 300), line.blob) == 0
        # the log's checkpoint with only the log's signature: not cosigned by the mirror
        log_only = str(Note(parse_note(served).text, parse_note(served).signatures[:1]))
        status, _, _ = await asyncio.to_thread(http, m.url + "/sign-subtree", body(log_only))
        assert status == 403
        status, _, _ = await asyncio.to_thread(http, m.url + "/sign-subtree", body(mirror_note, subtree_hash=bytes(32)))
        assert status == 422  # the subtree consistency proof does not verify with that hash
        status, _, _ = await asyncio.to_thread(http, m.url + "/sign-subtree", body(mirror_note).replace(b"subtree 256 300", b"subtree 250 300", 1))
        assert status == 400  # [250, 300) is not a subtree
        metrics = (await get(m.url + "/metrics"))[2].decode()
        assert 'oap_mirror_sign_subtree_total{status="200"} 1.0' in metrics
    finally:
        await server.close()
        await svc.close()
