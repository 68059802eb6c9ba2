"""A witness with an ML-DSA-44 key (C2SP tlog-cosignature type 0x06) on 127.0.0.1: add-checkpoint
answers, sign-subtree per C2SP tlog-witness, qpd budgets, and its key files."""
from __future__ import annotations

import asyncio
import os
import stat

import mldsa as mldsa_py
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from tlog.errors import FormatError
from tlog.formats.checkpoint import subtree_message
from tlog.formats.encoding import b64enc
from tlog.formats.keys import COSIGNATURE_MLDSA44, COSIGNATURE_V1, parse_vkey
from tlog.formats.note import open_note, parse_note, parse_signature_lines
from tlog.merkle.subtrees import subtree_consistency_proof
from tlog.merkle.tree import memory_view
from witness.cli import main as witness_cli
from witness.config import WitnessedLog
from witness.core import origin_path, parse_sign_subtree

from tests.support.witness import MemLog, post, running_witness, witness_config


def _log(origin: str = "test.example/log", seed: bytes = bytes(range(32))) -> MemLog:
    return MemLog(origin, seed).grow(14)


def _config(tmp_path, log: MemLog, **kw):
    return witness_config(tmp_path, [WitnessedLog(log.origin, log.vkey, qpd=kw.pop("qpd", None))],
                          cosigners=kw.pop("cosigners", ("ed25519", "mldsa44")), **kw)


def _pure_python_verify(public: bytes, msg: bytes, sig: bytes) -> bool:
    try:
        mldsa_py.VerificationKey(public, parameters=mldsa_py.ParameterSet.ML_DSA_44).verify(sig, msg)
    except mldsa_py.VerificationError:
        return False
    return True


async def test_add_checkpoint_answers_one_line_per_key_and_both_verify(tmp_path):
    log = _log()
    async with running_witness(_config(tmp_path, log)) as (svc, url, s):
        ed, pq = svc.signers
        assert (ed.key_type, pq.key_type, ed.name) == (COSIGNATURE_V1, COSIGNATURE_MLDSA44, pq.name)
        status, ctype, body = await post(s, url, log.body(0, 14))
        assert status == 200 and ctype.startswith("text/plain"), body
        sigs = parse_signature_lines(body)
        assert [len(x.blob) for x in sigs] == [72, 2428] and {x.name for x in sigs} == {ed.name}
        cosigned = log.checkpoint(14) + body
        _, verified = open_note(cosigned, [log.signer.verifier, ed.verifier, pq.verifier])
        ts = [v.timestamp for v in verified]
        assert ts[0] is None and ts[1] == ts[2] > 1_600_000_000
        # the ML-DSA-44 line checked by an independent implementation against the spec's message
        msg = subtree_message(pq.name, ts[2], log.origin, 0, 14, log.root(14))
        assert _pure_python_verify(pq.public, msg, sigs[1].blob[8:])
        # the monitoring read API serves it with every cosignature and the log's signature
        async with s.get(f"{url}/{origin_path(log.origin)}/checkpoint") as r:
            assert r.status == 200
            served = await r.text()
        assert {x.line() for x in sigs} <= {x.line() for x in parse_note(served).signatures}
        # the same checkpoint again: cosigned again, with a timestamp that never goes back
        again = await post(s, url, log.body(14, 14))
        assert again[0] == 200
        _, re_verified = open_note(log.checkpoint(14) + again[2], [ed.verifier, pq.verifier])
        assert all(v.timestamp >= ts[1] for v in re_verified)
        async with s.get(f"{url}/v1/info") as r:
            info = await r.json()
        assert info["verifier_keys"] == [ed.vkey, pq.vkey] and info["sign_subtree"] is True


async def test_an_mldsa_only_witness(tmp_path):
    log = _log()
    async with running_witness(_config(tmp_path, log, cosigners=("mldsa44",))) as (svc, url, s):
        (pq,) = svc.signers
        status, _, body = await post(s, url, log.body(0, 5))
        assert status == 200
        (sig,) = parse_signature_lines(body)
        assert sig.key_id == pq.key_id
        open_note(log.checkpoint(5) + body, [pq.verifier])
        assert (tmp_path / "witness-mldsa44.key").stat().st_mode & 0o777 == 0o600
        assert parse_vkey((tmp_path / "witness-mldsa44.vkey").read_text().strip()).public == pq.public


def _subtree_body(log: MemLog, start: int, end: int, cosigned_note: str, proof=None, subtree_hash=None) -> bytes:
    view = memory_view(log.leaves[:14])
    def mth(lo, hi):
        return memory_view(log.leaves[lo:hi]).root
    proof = subtree_consistency_proof(start, end, 14, mth) if proof is None else proof
    h = mth(start, end) if subtree_hash is None else subtree_hash
    assert view.root == log.root(14)
    lines = [f"subtree {start} {end}", b64enc(h), *(b64enc(p) for p in proof), ""]
    return ("\n".join(lines) + "\n" + cosigned_note).encode()


async def test_sign_subtree_per_tlog_witness(tmp_path):
    log = _log()
    other = MemLog("other.example/log", bytes(32)).grow(14)
    async with running_witness(_config(tmp_path, log)) as (svc, url, s):
        _ed, pq = svc.signers
        status, _, body = await post(s, url, log.body(0, 14))
        assert status == 200
        cosigned = log.checkpoint(14) + body

        async def subtree(data: bytes) -> tuple[int, str]:
            async with s.post(url + "/sign-subtree", data=data) as r:
                return r.status, await r.text()

        # the spec's example shape: [8, 13) of a tree of 14
        status, text = await subtree(_subtree_body(log, 8, 13, cosigned))
        assert status == 200, text
        (sig,) = parse_signature_lines(text)
        assert sig.key_id == pq.key_id and sig.blob[:8] == bytes(8)  # timestamp 0
        h = memory_view(log.leaves[8:13]).root
        assert pq.verifier.verify_subtree(log.origin, 8, 13, h, sig.blob) == 0
        assert _pure_python_verify(pq.public, subtree_message(pq.name, 0, log.origin, 8, 13, h), sig.blob[8:])
        # a checkpoint that carries only our ML-DSA-44 cosignature (the spec's SHOULD) works too
        only_pq = log.checkpoint(14) + parse_signature_lines(body)[1].line()
        assert (await subtree(_subtree_body(log, 0, 14, only_pq)))[0] == 200

        # 400: not a valid subtree, beyond the checkpoint, malformed
        assert (await subtree(_subtree_body(log, 2, 5, cosigned, proof=[])))[0] == 400
        assert (await subtree(_subtree_body(log, 8, 16, cosigned, proof=[])))[0] == 400
        assert (await subtree(b"subtree 08 13\n" + _subtree_body(log, 8, 13, cosigned).split(b"\n", 1)[1]))[0] == 400
        assert (await subtree(b"hello\n\n" + cosigned.encode()))[0] == 400
        # 404: a log this witness does not follow
        o_cosigned = other.checkpoint(14) + body
        assert (await subtree(_subtree_body(other, 8, 13, o_cosigned)))[0] == 404
        # 403: no cosignature of ours (the log's signature alone), or a broken one
        assert (await subtree(_subtree_body(log, 8, 13, log.checkpoint(14))))[0] == 403
        # 403: only our Ed25519 cosignature: the subtree is signed only by a key that cosigned
        # the checkpoint (tlog-witness SHOULD), and Ed25519 cosignatures cannot sign subtrees
        only_ed = log.checkpoint(14) + parse_signature_lines(body)[0].line()
        status, text = await subtree(_subtree_body(log, 8, 13, only_ed))
        assert status == 403 and "ML-DSA-44" in text, text
        broken = parse_signature_lines(body)[1]
        bad_blob = bytearray(broken.blob)
        bad_blob[100] ^= 1
        forged = log.checkpoint(14) + type(broken)(broken.name, broken.key_id, bytes(bad_blob)).line()
        assert (await subtree(_subtree_body(log, 8, 13, forged)))[0] == 403
        # 422: a proof or subtree hash that does not verify
        good = subtree_consistency_proof(8, 13, 14, lambda lo, hi: memory_view(log.leaves[lo:hi]).root)
        assert (await subtree(_subtree_body(log, 8, 13, cosigned, proof=good[:-1])))[0] == 422
        assert (await subtree(_subtree_body(log, 8, 13, cosigned, subtree_hash=bytes(32))))[0] == 422
        async with s.get(f"{url}/metrics") as r:
            assert 'oap_witness_sign_subtree_total{status="422"} 2.0' in await r.text()


async def test_sign_subtree_is_not_offered_without_an_mldsa_key(tmp_path):
    log = _log()
    async with running_witness(_config(tmp_path, log, cosigners=("ed25519",))) as (_svc, url, s):
        status, _, body = await post(s, url, log.body(0, 14))
        assert status == 200 and len(parse_signature_lines(body)) == 1
        async with s.post(url + "/sign-subtree", data=_subtree_body(log, 8, 13, log.checkpoint(14) + body)) as r:
            assert r.status in (404, 405)


async def test_qpd_bounds_the_new_checkpoints_a_log_gets_cosigned(tmp_path):
    """qpd 3: three new checkpoints are cosigned, the fourth gets 429 with a Retry-After of
    about a third of a day; a stale request (409) and a replay of the latest cost nothing."""
    log = _log()
    async with running_witness(_config(tmp_path, log, qpd=3, cosigners=("ed25519",))) as (svc, url, s):
        assert (await post(s, url, log.body(0, 2)))[0] == 200
        assert (await post(s, url, log.body(0, 3)))[0] == 409  # stale: not charged
        assert (await post(s, url, log.body(2, 4)))[0] == 200
        assert (await post(s, url, log.body(4, 4)))[0] == 200  # replay: not charged
        assert (await post(s, url, log.body(4, 6)))[0] == 200
        async with s.post(url + "/add-checkpoint", data=log.body(6, 8)) as r:
            assert r.status == 429
            assert 20000 < int(r.headers["Retry-After"]) <= 86400 // 3 + 1
            assert "qpd" in await r.text()
        assert (await post(s, url, log.body(6, 6)))[0] == 200  # the latest, again: still answered
        # other logs have their own budget (none configured here: unlimited)
        assert svc.witness.budgets[log.origin].qpd == 3


def test_keygen_makes_both_keys_0600_and_prints_only_verifier_keys(tmp_path):
    r = CliRunner().invoke(witness_cli, ["keygen", "--name", "w.example", "--data", str(tmp_path), "--mldsa44"])
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.output.splitlines() if not ln.startswith("identity:")]
    assert len(lines) == 2
    assert parse_vkey(lines[0]).key_type == COSIGNATURE_V1 and parse_vkey(lines[1]).key_type == COSIGNATURE_MLDSA44
    for name in ("witness.key", "witness-mldsa44.key", "identity.key"):
        mode = stat.S_IMODE(os.stat(tmp_path / name).st_mode)
        assert mode == 0o600, (name, oct(mode))
    secret = (tmp_path / "witness-mldsa44.key").read_text().strip()
    assert secret.startswith("PRIVATE+KEY+w.example+") and secret not in r.output
    again = CliRunner().invoke(witness_cli, ["keygen", "--name", "w.example", "--data", str(tmp_path), "--mldsa44"])
    assert again.exit_code != 0 and "refusing to overwrite" in again.output


async def test_concurrent_callers_each_get_the_cosignature_of_their_own_checkpoint(tmp_path):
    """Signatures are signed in batches on worker threads: under concurrent load each answer
    carries the ML-DSA-44 cosignature of the checkpoint its own request sent."""
    logs = [MemLog(f"log{i}.example/log", bytes([i + 1]) * 32).grow(40) for i in range(12)]
    config = witness_config(tmp_path, [WitnessedLog(x.origin, x.vkey) for x in logs], cosigners=("mldsa44",))
    async with running_witness(config) as (svc, url, s):
        (pq,) = svc.signers

        async def chain(log: MemLog) -> int:
            checked = 0
            for old, new in zip(range(0, 40, 4), range(4, 41, 4), strict=True):
                status, _, body = await post(s, url, log.body(old, new))
                assert status == 200, body
                _, verified = open_note(log.checkpoint(new) + body, [pq.verifier])  # SignatureError if not ours
                assert [v.verifier.key_id for v in verified] == [pq.key_id]
                checked += 1
            return checked

        assert await asyncio.gather(*(chain(x) for x in logs)) == [10] * 12


async def test_concurrent_mldsa_cosignatures_never_fork(tmp_path):
    """Signing runs on worker threads: concurrent requests for one log still end in one
    history (the CAS decides), each answer verifying."""
    log = MemLog().grow(64)
    async with running_witness(_config(tmp_path, log)) as (svc, url, s):
        assert (await post(s, url, log.body(0, 1)))[0] == 200
        results = await asyncio.gather(*(post(s, url, log.body(1, n)) for n in range(2, 40)))
        ok = [r for r in results if r[0] == 200]
        assert ok and all(r[0] in (200, 409) for r in results)
        sizes = [size for size, _ in svc.state.history_sync(log.origin)]
        assert sizes == sorted(set(sizes))




@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["subtree 8 13", "subtree 0 0", "subtree 2 5", "subtree 08 13", "subtree 8",
                                 b64enc(bytes(32)), b64enc(bytes(31)), "", "x", "oap.localhost/log", "14",
                                 "\u2014 w AAAA", "subtree 8 13 1"]), max_size=10)
       | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_any_sign_subtree_body_parses_or_raises_format_error(lines):
    body = ("\n".join(lines) if isinstance(lines, list) else lines).encode("utf-8")
    try:
        req = parse_sign_subtree(body)
    except FormatError:
        return
    assert req.end <= req.checkpoint.size and req.start <= req.end
