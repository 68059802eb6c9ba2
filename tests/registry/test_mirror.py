"""Mirrors and rebuilds, with the real `git` binary rewriting and extending the upstream.

The upstream registry refuses pushes over HTTP, so the tests play a compromised
upstream by pushing with real git straight into its bare repository on disk;
its Git smart HTTP then serves whatever is there, as a hostile server would.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from registry.client import make_key_event, make_kill_switch, make_revocation
from registry.store import MAIN
from tlog.formats.ed25519 import generate_seed

from tests.support.registry import (
    BIN,
    Running,
    conformance_doc,
    did,
    git,
    receipt,
    run,
    start_registry,
)

pytestmark = pytest.mark.slow


async def populate(reg: Running) -> list[dict]:
    a, b = generate_seed(), generate_seed()
    docs = [conformance_doc(receipt(a, "L2")), make_key_event(a, subject=did(a), key=did(b)),
            make_revocation(b, kind="did", subject=did(a)), make_kill_switch(b),
            make_revocation(b, kind="vc", subject="urn:uuid:42", status_list_index=42)]
    out = []
    for doc in docs:
        st, body = await reg.post(doc)
        assert st == 200, body
        out.append(body)
    return out


async def mirror_cli(reg: Running, data: Path, *extra: str) -> tuple[int, str, str]:
    return await run(str(BIN / "oap-registry"), "mirror", "--upstream", reg.url, "--data", str(data),
                     "--registry-key", reg.svc.registry, "--log-vkey", reg.log.vkey, *extra)


@pytest.fixture
async def primary(tmp_path, log_server):
    r = await start_registry(tmp_path / "primary", log_server)
    yield r
    await r.stop()


async def test_mirror_verifies_everything_and_serves_the_same_history(primary, tmp_path, log_server):
    results = await populate(primary)
    code, out, err = await mirror_cli(primary, tmp_path / "m", "--metrics-file", str(tmp_path / "m.prom"))
    assert code == 0, out + err
    head = primary.svc.index.head
    assert f"verified {head.seq + 1} commit(s)" in out and "verifying commits" in err
    assert f"oap_registry_mirror_commits_verified_total {head.seq + 1}.0" in (tmp_path / "m.prom").read_text()
    code, out, _ = await mirror_cli(primary, tmp_path / "m")
    assert code == 0 and "up to date" in out

    mirror = await start_registry(tmp_path / "m", log_server, upstream=primary.url, log_url="",
                                  registry_key=primary.svc.registry, mirror_interval=3600)
    try:
        await mirror.svc.sync_once()
        for res in results:
            _st_p, rec_p, _ = await primary.get(f"/v1/records/{res['id']}")
            st_m, rec_m, _ = await mirror.get(f"/v1/records/{res['id']}")
            assert st_m == 200 and rec_m == rec_p
        st, anchor, _ = await mirror.get(f"/v1/anchors/{head.seq}")
        assert st == 200 and anchor.decode() == (await primary.get(f"/v1/anchors/{head.seq}"))[1].decode()
        st, body = await mirror.post(make_revocation(s := generate_seed(), kind="key", subject=did(s)))
        assert st == 403 and body["error"] == "policy_block"
        c1, c2 = tmp_path / "c1", tmp_path / "c2"
        await git("clone", "-q", f"{primary.url}/registry.git", str(c1))
        await git("clone", "-q", f"{mirror.url}/registry.git", str(c2))
        assert await git("log", "--format=%H", cwd=c1) == await git("log", "--format=%H", cwd=c2)
        # the upstream moves on; the mirror follows after verifying
        st, new = await primary.post(make_revocation(s, kind="key", subject=did(s)))
        assert st == 200
        result = await mirror.svc.sync_once()
        assert not result.refused and result.verified >= 1
        st, rec, _ = await mirror.get(f"/v1/records/{new['id']}")
        assert st == 200 and rec["seq"] == new["seq"]
    finally:
        await mirror.stop()


async def test_force_push_rewrite_is_refused_and_the_evidence_kept(primary, tmp_path):
    await populate(primary)
    m = tmp_path / "m"
    assert (await mirror_cli(primary, m))[0] == 0
    good_head = primary.svc.index.head.commit
    work = tmp_path / "work"
    await git("clone", "-q", str(primary.svc.repo.path), str(work))
    await git("reset", "-q", "--hard", "HEAD~2", cwd=work)  # drop two commits and write a different history
    (work / "anchors" / "0" / "0.tlog-proof").write_text("rewritten\n")
    await git("commit", "-q", "-am", "rewrite history", cwd=work)
    await git("push", "-q", "--force", str(primary.svc.repo.path), "HEAD:main", cwd=work)
    rewritten = (await git("rev-parse", "HEAD", cwd=work)).strip()

    code, out, err = await mirror_cli(primary, m, "--metrics-file", str(tmp_path / "m.prom"))
    assert code == 1, out + err
    assert "REFUSED (rewrite)" in err
    refs = await git("for-each-ref", "--format=%(refname) %(objectname)", "refs/quarantine", cwd=m / "registry.git")
    assert refs.strip().endswith(rewritten)
    assert (await git("rev-parse", "refs/heads/main", cwd=m / "registry.git")).strip() == good_head
    report = json.loads(next((m / "quarantine").glob("*.json")).read_text())
    assert report["reason"] == "rewrite" and report["upstream_head"] == rewritten and report["local_head"] == good_head
    assert 'oap_registry_mirror_refusals_total{reason="rewrite"} 1.0' in (tmp_path / "m.prom").read_text()
    code, _, _ = await mirror_cli(primary, m)  # still refused, no second piece of evidence
    assert code == 1 and len(list((m / "quarantine").glob("*.json"))) == 1


@pytest.mark.parametrize("attack", ["bad_record", "not_add_only", "missing_anchor", "bad_rotation"])
async def test_a_fast_forward_with_a_bad_commit_is_refused(primary, tmp_path, log_server, attack):
    await populate(primary)
    mirror = await start_registry(tmp_path / "m", log_server, upstream=primary.url, log_url="",
                                  registry_key=primary.svc.registry, mirror_interval=3600)
    try:
        assert not (await mirror.svc.sync_once()).refused
        good_head = primary.svc.index.head
        work = tmp_path / "work"
        await git("clone", "-q", str(primary.svc.repo.path), str(work))
        paths = []
        if attack != "missing_anchor":  # the honest part: the previous head's anchor
            anchor = f"anchors/0/{good_head.seq}.tlog-proof"
            (work / anchor).parent.mkdir(parents=True, exist_ok=True)
            (work / anchor).write_bytes((await primary.get(f"/v1/anchors/{good_head.seq}"))[1])
            paths.append(anchor)
        s = generate_seed()
        if attack == "bad_rotation":  # a key rotation not signed by the registry's key (a thief's hand-over)
            from datetime import UTC, datetime

            from registry.keyrotation import make_rotation

            (work / "key-rotations").mkdir()
            (work / "key-rotations" / "1.json").write_bytes(make_rotation(
                registry=primary.svc.registry, number=1, old=s, new=generate_seed(), seq=good_head.seq + 1, epoch=1,
                issued_at=datetime.now(UTC)))
            paths.append("key-rotations/1.json")
        elif attack == "not_add_only":
            victim = next(r.path for r in primary.svc.index.all_records() if r.type == "revocation")
            (work / victim).write_text((work / victim).read_text().replace("unspecified", "superseded"))
        else:
            forged = make_revocation(s, kind="key", subject=did(s))
            forged["reason"] = "superseded"  # no longer matches its signature
            rec_path = f"revocations/key/{_shard(forged['id'])}.json"
            (work / rec_path).parent.mkdir(parents=True, exist_ok=True)
            from tlog.formats.canonical import jcs

            (work / rec_path).write_bytes(jcs(forged))
            paths.append(rec_path)
        await git("add", "-A", cwd=work)
        await git("commit", "-q", "-m", "registry: seq x\n\n" + "\n".join(paths), cwd=work, date=good_head.time + 1)
        await git("push", "-q", str(primary.svc.repo.path), "HEAD:main", cwd=work)
        bad = (await git("rev-parse", "HEAD", cwd=work)).strip()

        result = await mirror.svc.sync_once()
        assert result.refused and result.reason == attack, result
        assert result.details["offending_commit"] == bad
        assert mirror.svc.repo.ref(MAIN) == good_head.commit
        assert mirror.svc.repo.refs_under(b"refs/quarantine/")  # evidence kept
        _st, metrics, _ = await mirror.get("/metrics")
        assert f'oap_registry_mirror_refusals_total{{reason="{attack}"}} 1.0' in metrics.decode()
        _st, info, _ = await mirror.get("/v1/info")
        assert info["head"]["commit"] == good_head.commit  # readers never saw the bad commit
    finally:
        await mirror.stop()


def _shard(record_id: str) -> str:
    from registry.layout import id_hash

    h = id_hash(record_id)
    return f"{h[:2]}/{h[2:4]}/{h}"


async def test_a_registry_rebuilt_from_a_mirror_serves_the_same_history_and_continues(primary, tmp_path, log_server):
    await populate(primary)
    mirror = await start_registry(tmp_path / "m", log_server, upstream=primary.url, log_url="",
                                  registry_key=primary.svc.registry, mirror_interval=3600)
    try:
        await mirror.svc.sync_once()
        rebuilt = tmp_path / "rebuilt"
        code, out, err = await run(str(BIN / "oap-registry"), "rebuild", "--from", mirror.url, "--data", str(rebuilt),
                                   "--registry-key", primary.svc.registry, "--log-vkey", log_server.vkey)
        assert code == 0, out + err
    finally:
        await mirror.stop()
    old_head = primary.svc.index.head
    key = tmp_path / "registry.key"
    shutil.copy(primary.svc.data_dir / "registry.key", key)
    await primary.stop()  # the primary's disk is gone; only its key was backed up
    (tmp_path / "primary").rename(tmp_path / "lost")
    new = await start_registry(rebuilt, log_server, key_file=key)
    try:
        st, info, _ = await new.get("/v1/info")
        assert info["registry"] == primary.svc.registry and info["head"]["commit"] == old_head.commit
        st, body = await new.post(make_revocation(s := generate_seed(), kind="key", subject=did(s)))
        assert st == 200 and body["seq"] == old_head.seq + 1
        clone = tmp_path / "clone"
        await git("clone", "-q", f"{new.url}/registry.git", str(clone))
        assert f"anchors/0/{old_head.seq}.tlog-proof" in await git("ls-files", cwd=clone)
        (tmp_path / "head.tlog-proof").write_bytes((await new.get(f"/v1/anchors/{body['seq']}"))[1])
        code, out, err = await run(str(BIN / "oap-registry"), "verify", str(clone), "--registry-key",
                                   new.svc.registry, "--log-vkey", log_server.vkey,
                                   "--head-anchor", str(tmp_path / "head.tlog-proof"))
        assert code == 0, out + err
    finally:
        await new.stop()
    other = tmp_path / "other.key"
    code, _, _ = await run(str(BIN / "oap-registry"), "keygen", "--out", str(other))
    assert code == 0
    with pytest.raises(Exception, match="this repository is registry"):
        await start_registry(rebuilt, log_server, key_file=other)
