"""A registry anchored in two real logs (OAP-CORE-1.0 §19.3: at least two logs).

Two `oap-log serve` processes with their own keys and origins; registries on 127.0.0.1
configured with both (`log_urls`, `anchor_quorum` k). Checked: every commit, status
epoch and kill switch is anchored in both, as an oap-anchors/v1 file holding each log's
tlog-proof, and each proof verifies against its own log's key; mirrors, `oap-registry
verify` and `oap-registry status --offline` require k of the logs; with one log down, k=2
stops commits (503) until it returns, and k=1 goes on and catches the log up afterwards.
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from registry.anchorer import proofs_of
from registry.anchoring import GENESIS_FORMAT_LOGS, AnchorError, parse_genesis, verify_commit_anchor
from registry.client import make_kill_switch, make_revocation
from registry.layout import classify
from registry.status import sign_object
from registry.statusverify import verify_status
from registry.store import MAIN
from tlog.client.verifier import TrustPolicy
from tlog.errors import ConfigError
from tlog.formats.anchors import anchors_text, parse_anchors
from tlog.formats.ed25519 import generate_seed

from tests.support.registry import BIN, Running, conformance_doc, did, receipt, run, start_registry, wait_epoch_after
from tests.support.services import ServerProcess
from tests.support.waiting import until

pytestmark = pytest.mark.slow
ORIGINS = ("log-a.test", "log-b.test")


def start_log(data: Path, origin: str, port: int = 0) -> ServerProcess:
    return ServerProcess(data, "--batch-interval-ms", "5", "--origin", origin,
                         *(["--port", str(port)] if port else [])).start()


@pytest.fixture
def logs(tmp_path):
    """Two real logs; the test may kill and restart them (same data, same port)."""
    running = [start_log(tmp_path / f"log-{i}", origin) for i, origin in enumerate(ORIGINS)]
    yield running
    for p in running:
        p.kill()


def restart(logs: list[ServerProcess], i: int) -> None:
    old = logs[i]
    port = int(old.url.rsplit(":", 1)[1])
    logs[i] = start_log(old.data, ORIGINS[i], port)
    assert logs[i].vkey == old.vkey and logs[i].url == old.url


async def two_log_registry(tmp: Path, logs: list[ServerProcess], k: int, **kw) -> Running:
    return await start_registry(tmp, logs[0], log_url="", log_urls=tuple(p.url for p in logs), anchor_quorum=k,
                                catch_up_seconds=0.2, log_timeout=5, **kw)


def both(logs: list[ServerProcess], k: int = 2) -> TrustPolicy:
    return TrustPolicy.for_logs([p.vkey for p in logs], k)


def check_in_each_log(anchor: str, logs: list[ServerProcess], origins=ORIGINS) -> None:
    """The anchor holds one proof per log named, each verifying against that log's own key."""
    proofs = proofs_of(anchor)
    assert sorted(proofs) == sorted(origins), sorted(proofs)
    for p, origin in zip(logs, ORIGINS):
        if origin in origins:
            TrustPolicy.for_log(p.vkey).verify_bundle(proofs[origin])


async def test_every_commit_epoch_and_kill_switch_is_anchored_in_both_and_mirrors_check_both(tmp_path, logs):
    reg = await two_log_registry(tmp_path / "r", logs, 2)
    try:
        g = parse_genesis(reg.svc.repo.read(reg.svc.index.commits[0].tree, "registry.json"))
        assert g.anchor_quorum == 2 and [x.vkey for x in g.logs] == [p.vkey for p in logs]
        assert json.loads(reg.svc.repo.read(reg.svc.index.commits[0].tree, "registry.json"))["format"] \
            == GENESIS_FORMAT_LOGS
        a, b = generate_seed(), generate_seed()
        answers = []
        for doc in (conformance_doc(receipt(a, "L2")), make_revocation(a, kind="did", subject=did(a)),
                    make_kill_switch(b)):
            st, body = await reg.post(doc)
            assert st == 200, body
            answers.append(body)
            check_in_each_log(body["anchor"], logs)
            commit = reg.svc.index.commits[body["seq"]]
            both(logs).verify_anchored(body["anchor"])
            verify_commit_anchor(body["anchor"], commit=commit.commit, tree=commit.tree, seq=body["seq"],
                                 registry=reg.svc.registry, policy=both(logs))
        check_in_each_log(answers[-1]["receipt_anchor"], logs)  # the kill switch's receipt
        st, info, _ = await reg.get("/v1/info")
        assert info["anchor_quorum"] == 2 and [x["url"] for x in info["logs"]] == [p.url for p in logs]
        st, page, _ = await reg.get("/v1/commits")
        assert all(sorted(x["origin"] for x in c["anchored_in"]) == list(ORIGINS) for c in page["commits"])
        head = reg.svc.index.head
        st, _served, headers = await reg.get(f"/v1/anchors/{head.seq}")
        assert st == 200 and "immutable" in headers["Cache-Control"]  # every log's proof is in
        # in the tree: an anchors file per commit, at .anchors.json paths
        st, _ = await reg.post(conformance_doc(receipt(generate_seed(), "L2")))  # puts the head's anchor in the tree
        tree = reg.svc.index.commits[-1].tree
        data = reg.svc.repo.read(tree, f"anchors/0/{head.seq}.anchors.json")
        assert data is not None and classify(f"anchors/0/{head.seq}.anchors.json").several
        check_in_each_log(data.decode(), logs)

        # the status service: epochs anchored in both; verified offline against k of the logs
        await wait_epoch_after(reg, reg.svc.index.head.seq)
        st, resp, _ = await reg.get(f"/v1/status/{did(a)}")
        assert st == 200 and resp["status"] == "revoked"
        check_in_each_log(resp["epoch_anchor"], logs)
        st, killed, _ = await reg.get(f"/v1/status/{did(b)}%23trust_tokens")  # revoked by the kill switch
        assert st == 200 and killed["status"] == "revoked"
        check_in_each_log(killed["revocation"]["receipt_anchor"], logs)
        v = verify_status(killed, registry=reg.svc.registry, status_id=f"{did(b)}#trust_tokens", policy=both(logs))
        assert v.status == "revoked" and v.reason == "kill_switch" and v.log_checked
        saved = tmp_path / "status.json"
        saved.write_text(json.dumps(resp))
        status = [str(BIN / "oap-registry"), "status", str(saved), "--offline", "--registry-key", reg.svc.registry,
                  "--log-vkey", logs[0].vkey, "--log-vkey", logs[1].vkey, "--json"]
        code, out, err = await run(*status, "--min-logs", "2")
        assert code == 3 and json.loads(out)["log_checked"], out + err
        # the answer a registry would sign had only log A anchored the epoch: not enough where k is 2
        one = sign_object(dict(resp, epoch_anchor=proofs_of(resp["epoch_anchor"])[ORIGINS[0]]), reg.svc.seed)
        saved.write_text(json.dumps(one))
        code, out, err = await run(*status, "--min-logs", "2")
        assert code == 1 and "anchored in 1 log(s) of the policy, and it requires 2" in out, out + err

        # a mirror checks both logs (k from the genesis, even when the pinned policy says less)
        mirror = await start_registry(tmp_path / "m", logs[0], upstream=reg.url, log_url="",
                                      registry_key=reg.svc.registry, mirror_interval=3600)
        try:
            result = await mirror.svc.sync_once()  # (its first sync ran as it started)
            assert not result.refused and mirror.svc.index.head == reg.svc.index.head, result
        finally:
            await mirror.stop()
        mirror_cli = [str(BIN / "oap-registry"), "mirror", "--upstream", reg.url, "--registry-key", reg.svc.registry]
        code, out, err = await run(*mirror_cli, "--data", str(tmp_path / "m2"), "--log-vkey", logs[0].vkey,
                                   "--log-vkey", logs[1].vkey)
        assert code == 0 and f"verified {reg.svc.index.head.seq + 1} commit(s)" in out, out + err
        code, out, err = await run(*mirror_cli, "--data", str(tmp_path / "m3"), "--log-vkey", logs[0].vkey)
        assert code == 1 and "REFUSED" in err and "anchors in 2 log(s) at least" in err, out + err
        clone = tmp_path / "clone"
        code, _, err = await run("git", "clone", "-q", f"{reg.url}/{reg.svc.config.name}.git", str(clone))
        assert code == 0, err
        verify = [str(BIN / "oap-registry"), "verify", str(clone), "--registry-key", reg.svc.registry,
                  "--url", reg.url]
        code, out, err = await run(*verify, "--log-vkey", logs[0].vkey, "--log-vkey", logs[1].vkey)
        assert code == 0 and "at least 2 of its 2 logs each" in out and "head" in out, out + err
        code, out, err = await run(*verify, "--log-vkey", logs[0].vkey)  # one log pinned cannot make k = 2
        assert code == 1 and "anchors in 2 log(s) at least" in out, out + err
    finally:
        await reg.stop()


async def test_an_anchor_missing_a_log_fails_verification_where_k_is_2(tmp_path, logs):
    reg = await two_log_registry(tmp_path / "r", logs, 2)
    try:
        st, body = await reg.post(conformance_doc(receipt(generate_seed(), "L2")))
        assert st == 200
        commit = reg.svc.index.commits[body["seq"]]
        args = dict(commit=commit.commit, tree=commit.tree, seq=body["seq"], registry=reg.svc.registry)
        bundles = [b.to_text() for b in parse_anchors(body["anchor"])]
        for partial in (anchors_text(bundles[:1]), bundles[1]):
            with pytest.raises(AnchorError, match="requires 2"):
                verify_commit_anchor(partial, policy=both(logs), **args)
            verify_commit_anchor(partial, policy=both(logs, 1), **args)  # enough where k is 1
        with pytest.raises(AnchorError, match="requires 2"):  # two copies of one log's proof count once
            verify_commit_anchor(anchors_text([bundles[0], bundles[0]]), policy=both(logs), **args)
    finally:
        await reg.stop()


async def test_with_k_2_a_log_down_stops_commits_until_it_returns(tmp_path, logs):
    reg = await two_log_registry(tmp_path / "r", logs, 2)
    try:
        seq = reg.svc.index.head.seq
        logs[1].kill()
        doc = conformance_doc(receipt(generate_seed(), "L2"))
        for _ in range(2):  # answered 503 each time: nothing is published with one log of two
            st, body = await reg.post(doc)
            assert st == 503 and body["error"] == "maintenance", body
        assert reg.svc.index.head.seq == seq
        restart(logs, 1)
        loop = asyncio.get_running_loop()
        end = loop.time() + 30
        while (answer := await reg.post(doc))[0] != 200 and loop.time() < end:  # the client retries a 503
            await asyncio.sleep(0.2)
        st, body = answer
        assert st == 200, body
        check_in_each_log(body["anchor"], logs)
        assert reg.svc.index.head.seq == seq + 1 and not reg.svc.writer.backlog.behind()
    finally:
        await reg.stop()


async def test_with_k_1_commits_go_on_while_a_log_is_down_and_it_catches_up(tmp_path, logs):
    reg = await two_log_registry(tmp_path / "r", logs, 1)
    try:
        logs[1].kill()
        seqs = []
        for level in ("L1", "L2", "L0"):
            st, body = await reg.post(conformance_doc(receipt(generate_seed(), level)))
            assert st == 200, body
            check_in_each_log(body["anchor"], logs, origins=ORIGINS[:1])  # log A's proof only
            seqs.append(body["seq"])
        assert reg.svc.writer.backlog.pending(ORIGINS[1]) == seqs
        sample = reg.svc.metrics.registry.get_sample_value
        assert sample("oap_registry_log_backlog_commits", {"log": ORIGINS[1]}) == len(seqs)
        assert sample("oap_registry_anchor_failures_total", {"log": ORIGINS[1]}) >= 1
        assert sample("oap_registry_log_backlog_commits", {"log": ORIGINS[0]}) == 0
        backlog = json.loads((tmp_path / "r" / "anchors" / "backlog.json").read_text())
        assert backlog == {ORIGINS[1]: seqs}  # durable: a restart still catches the log up
        st, _, headers = await reg.get(f"/v1/anchors/{seqs[-1]}")
        assert "immutable" not in headers["Cache-Control"]  # it will grow when log B returns

        # the registry restarts while log B is still down: it knows B from its genesis
        await reg.stop()
        reg = await two_log_registry(tmp_path / "r", logs, 1, log_wait_seconds=0.5)
        st, body = await reg.post(conformance_doc(receipt(generate_seed(), "L1")))
        assert st == 200, body
        seqs.append(body["seq"])
        assert reg.svc.writer.backlog.pending(ORIGINS[1]) == seqs

        restart(logs, 1)
        await until(lambda: not reg.svc.writer.backlog.behind(), 30, "log B caught up")
        assert reg.svc.metrics.registry.get_sample_value("oap_registry_log_backlog_commits", {"log": ORIGINS[1]}) == 0
        for seq in seqs:
            st, served, headers = await reg.get(f"/v1/anchors/{seq}")
            assert st == 200
            check_in_each_log(json.dumps(served), logs)
            commit = reg.svc.index.commits[seq]
            verify_commit_anchor(json.dumps(served), commit=commit.commit, tree=commit.tree, seq=seq,
                                 registry=reg.svc.registry, policy=both(logs))
        # commits after the catch-up include log B again
        st, body = await reg.post(conformance_doc(receipt(generate_seed(), "L1")))
        assert st == 200
        check_in_each_log(body["anchor"], logs)
        # a mirror accepts the history (k = 1: the tree holds log A's proofs of the commits B missed)
        mirror = await start_registry(tmp_path / "m", logs[0], upstream=reg.url, log_url="",
                                      registry_key=reg.svc.registry, mirror_interval=3600)
        try:
            result = await mirror.svc.sync_once()
            assert not result.refused, result
        finally:
            await mirror.stop()
    finally:
        await reg.stop()


async def test_a_one_log_registry_keeps_its_log_set_and_says_how_to_move(tmp_path, logs):
    reg = await start_registry(tmp_path / "r", logs[0])
    history = list(reg.svc.index.commits)
    assert json.loads(reg.svc.repo.read(reg.svc.index.commits[0].tree, "registry.json"))["format"] \
        == "oap-registry/1"
    await reg.stop()
    with pytest.raises(ConfigError, match="fixed at its genesis"):
        await two_log_registry(tmp_path / "r", logs, 1)
    with pytest.raises(ConfigError, match="does not name"):  # another log in place of its own
        await start_registry(tmp_path / "r", logs[1])
    again = await start_registry(tmp_path / "r", logs[0])  # nothing was changed by the refusals
    try:
        assert again.svc.index.commits[:len(history)] == history
        assert again.svc.repo.ref(MAIN) == again.svc.index.head.commit
    finally:
        await again.stop()
