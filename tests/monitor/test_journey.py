"""`oap-monitor` against `make run`'s network (a log with three witnesses and a mirror, the
registry), every part a real process on 127.0.0.1, alerts delivered to real sinks: a webhook
receiver, an SMTP server, a JSON-lines file and a hooks directory.

What an owner and an operator rely on: an entry signed by a watched key arrives once at every
sink, with a .tlog-proof that `oap-log verify` accepts, and not again after a restart; what
the owner anchored itself (`oap-log add --journal`) is no alert; a checkpoint forged for a
published size with the log's key and two witnesses' keys is a split view whose evidence
`oap-monitor check-evidence` proves offline; a revocation of a watched DID arrives as a
verified answer; an alert waits out a sink that is down, a monitor restart included."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest
from aiohttp import web

from tlog.formats.checkpoint import Checkpoint, parse_checkpoint
from tlog.formats.keys import CosignatureSigner, Signer
from tlog.formats.note import NoteSignature, add_signatures, parse_note, sign_note
from tlog.runtime import children
from tlog.runtime.keyfiles import read_private_key

from tests.support.alertsinks import SMTPReceiver, ThreadedApp, WebhookReceiver
from tests.support.localnet import BIN, localnet
from tests.support.mirror import wait_for
from tests.support.services import Service

pytestmark = pytest.mark.slow
ORIGIN = "oap.localhost/log"


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    data = tmp_path_factory.mktemp("net") / "data"
    with localnet(data) as n:
        n.data = data
        yield n


@pytest.fixture(scope="module")
def hook(tmp_path_factory):
    with WebhookReceiver() as w:
        yield w


@pytest.fixture(scope="module")
def smtp():
    with SMTPReceiver() as s:
        yield s


def run(*args: str, ok: tuple[int, ...] = (0,), cwd: Path | None = None) -> subprocess.CompletedProcess:
    r = children.run([str(a) for a in args], timeout=120, capture_output=True, cwd=cwd)
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode in ok, f"{args}: exit {r.returncode}\n{out}"
    r.out = out
    return r


def keygen(path: Path) -> str:
    return run(BIN / "oap-registry", "keygen", "--out", path).stdout.decode().strip()


def anchor(net, key: Path, n: int, *extra: str) -> int:
    out = key.parent / f"{key.stem}-{n}.tlog-proof"
    r = run(BIN / "oap-log", "add", "--hash", f"sha256:{hashlib.sha256(b'%d' % n).hexdigest()}", "--key", key,
            "--url", net.log, "--out", out, *extra)
    return json.loads(r.stdout)["index"]


def config(tmp: Path, net, *, watch: list[str] = (), sinks: str = "", extra: str = "", logs_extra: str = "",
           registry_dids: list[str] | None = None) -> Path:
    policy = net.data / "log" / "log.policy"
    text = (f'state_dir = "state"\npoll_seconds = 0.2\nmetrics = "127.0.0.1:0"\nretry_max_seconds = 1\n'
            f'journals = ["journal.jsonl"]\n{extra}\n'
            f'[[logs]]\nurl = "{net.log}"\npolicy = "{policy}"\n{logs_extra}\n')
    for w in watch:
        text += f'[[watch]]\nsigner = "{w}"\n'
    if registry_dids is not None:
        key = (net.data / "registry" / "registry.did").read_text().strip()
        text += f'[registry]\nurl = "{net.registry}"\nkey = "{key}"\ndids = {json.dumps(registry_dids)}\n'
    text += sinks
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "monitor.toml").write_text(text)
    return tmp / "monitor.toml"


def monitor(cfg: Path) -> Service:
    return Service("monitor", [str(BIN / "oap-monitor"), "run", "--config", str(cfg)]).start()


def status(m: Service) -> dict:
    with urllib.request.urlopen(f"{m.url}/v1/status", timeout=10) as r:
        return json.loads(r.read())


def log_size(net) -> int:
    with urllib.request.urlopen(f"{net.log}/checkpoint", timeout=10) as r:
        return parse_checkpoint(parse_note(r.read()).text).size


def read_up_to(m: Service, size: int) -> None:
    wait_for(f"the monitor to read {size} entries", lambda: (status(m)["logs"][0]["entries_read"] or 0) >= size)


def file_alerts(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_watched_key_is_alerted_once_at_every_sink_and_never_again(net, hook, smtp, tmp_path):
    watched = keygen(tmp_path / "watched.key")
    keygen(tmp_path / "other.key")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    script = hooks / "record"
    script.write_text(f'#!/bin/sh\ncat > /dev/null\necho "$OAP_ALERT_ID $OAP_ALERT_KIND $OAP_ALERT_FILE" >> '
                      f'{tmp_path / "hooked.txt"}\n')
    script.chmod(0o755)
    sinks = (f'[[alerts]]\nwebhook = "{hook.url}"\n[[alerts]]\nemail = "ops@example.org"\nsmtp = "{smtp.address}"\n'
             f'smtp_tls = "none"\n[[alerts]]\nfile = "alerts.jsonl"\n[[alerts]]\nhooks_dir = "hooks"\n')
    cfg = config(tmp_path, net, watch=[watched], sinks=sinks)
    before = len(hook.ids())
    m = monitor(cfg)
    try:
        mine = anchor(net, tmp_path / "watched.key", 1, "--journal", str(tmp_path / "journal.jsonl"))
        theirs = anchor(net, tmp_path / "watched.key", 2)  # as a thief holding the key would
        anchor(net, tmp_path / "other.key", 3)
        read_up_to(m, log_size(net))
        new = wait_for("the alert at the webhook", lambda: hook.ids()[before:])
        wait_for("the e-mail", lambda: smtp.alerts())
        wait_for("the hook", lambda: (tmp_path / "hooked.txt").exists())
        wait_for("the deliveries to be done", lambda: not status(m)["queued"])
    finally:
        assert m.stop() == 0, m.log_text[-3000:]
    docs = [d for d in hook.received if d["id"] in new]
    assert [d["kind"] for d in docs] == ["watched_entry"], docs
    alert = docs[0]
    ev = alert["evidence"]
    assert ev["index"] == theirs != mine and ev["signer"] == watched and ev["watched"] == [watched]
    assert alert["source"]["origin"] == ORIGIN and len(alert["id"]) == 64
    # the same alert, once, at every sink
    assert [a["id"] for a in smtp.alerts()] == [alert["id"]]
    assert [a["id"] for a in file_alerts(tmp_path / "alerts.jsonl")] == [alert["id"]]
    assert (tmp_path / "hooked.txt").read_text().split() == [alert["id"], "watched_entry", ev["file"]]
    assert smtp.messages[0]["Message-ID"] == f"<{alert['id']}@oap-monitor>"
    assert hook.headers[-1]["Idempotency-Key"] == alert["id"]
    # the bundle: `oap-log verify` accepts it, and it is the entry the thief anchored
    verified = run(BIN / "oap-log", "verify", ev["file"], "--policy", net.data / "log" / "log.policy")
    assert f"index {theirs} in {ORIGIN}" in verified.out and f"signed by {watched}" in verified.out
    assert Path(ev["file"]).read_text() == ev["bundle"]

    # restarted (the entries read, the alerts raised and delivered are kept): nothing again,
    # and the next entry by the key is the next alert
    anchor(net, tmp_path / "other.key", 4)
    m = monitor(cfg)
    try:
        read_up_to(m, log_size(net))
        again = anchor(net, tmp_path / "watched.key", 5)
        read_up_to(m, log_size(net))
        wait_for("the second alert", lambda: len(hook.ids()[before:]) >= 2)
        wait_for("the deliveries to be done", lambda: not status(m)["queued"])
    finally:
        assert m.stop() == 0
    ids = hook.ids()[before:]
    assert len(ids) == len(set(ids)) == 2 and ids[0] == alert["id"]
    assert hook.received[-1]["evidence"]["index"] == again
    assert [a["id"] for a in file_alerts(tmp_path / "alerts.jsonl")] == ids
    assert sorted(a["id"] for a in smtp.alerts()) == sorted(ids)

    # killed (-9) and started again: still nothing twice
    m = monitor(cfg)
    read_up_to(m, log_size(net))
    m.kill()
    r = run(BIN / "oap-monitor", "run", "--config", cfg, "--once")
    assert "0 alert(s) raised" in r.out
    assert [a["id"] for a in file_alerts(tmp_path / "alerts.jsonl")] == ids


def _cosigner(path: Path) -> CosignatureSigner:
    return CosignatureSigner.from_skey(read_private_key(path))


class FakeWitness(ThreadedApp):
    """A witness read API (`/<hex sha256(origin)>/checkpoint`) serving whatever note it is given."""

    def __init__(self, note: str) -> None:
        super().__init__()
        self.note = note

    def routes(self, app: web.Application) -> None:
        async def checkpoint(request: web.Request) -> web.Response:
            return web.Response(text=self.note)

        app.router.add_get(f"/{hashlib.sha256(ORIGIN.encode()).hexdigest()}/checkpoint", checkpoint)


def test_a_forged_checkpoint_for_a_published_size_is_a_split_view_proven_offline(net, tmp_path):
    data = net.data
    keygen(tmp_path / "k.key")
    anchor(net, tmp_path / "k.key", 10)
    size = log_size(net)
    log_key = Signer.from_skey(read_private_key(data / "log" / "log.key"))
    text = Checkpoint(ORIGIN, size, hashlib.sha256(b"another tree").digest()).to_text()
    forged = sign_note(text, [log_key])
    for w in ("witness-1", "witness-2"):
        c = _cosigner(data / w / "witness.key")
        forged = str(add_signatures(forged, NoteSignature(c.name, c.key_id, c.cosign(text, 1_700_000_000))))
    with FakeWitness(forged) as fake:
        cfg = config(tmp_path, net, sinks='[[alerts]]\nfile = "alerts.jsonl"\n', logs_extra=f'mirrors = ["{fake.base}"]')
        r = run(BIN / "oap-monitor", "run", "--config", cfg, "--once", ok=(1,))
        assert "1 alert(s) raised" in r.out, r.out
        # seen again: the same split view is the same alert, raised once
        r = run(BIN / "oap-monitor", "run", "--config", cfg, "--once", ok=(0,))
    [alert] = file_alerts(tmp_path / "alerts.jsonl")
    assert alert["kind"] == "split_view" and alert["source"]["origin"] == ORIGIN
    ev = alert["evidence"]
    assert forged in ev["checkpoints"] and ev["sources"][1].startswith(fake.base)
    real = next(n for n in ev["checkpoints"] if n != forged)
    assert parse_checkpoint(parse_note(real).text).size >= size
    checked = run(BIN / "oap-monitor", "check-evidence", ev["file"], "--policy", data / "log" / "log.policy",
                  "--json")
    verdict = json.loads(checked.stdout)
    assert verdict["split_view"] is True and size in verdict["sizes"]
    assert {"w1", "w2"} <= set(verdict["cosigners"][1])  # the forged note's cosigners, named
    # evidence that was tampered with proves nothing
    doc = json.loads(Path(ev["file"]).read_text())
    doc["checkpoints"] = [real, real]
    bad = tmp_path / "bad.split.json"
    bad.write_text(json.dumps(doc))
    assert "NOT PROVEN" in run(BIN / "oap-monitor", "check-evidence", bad, "--policy", data / "log" / "log.policy",
                               ok=(1,)).out


def test_a_revocation_of_a_watched_did_arrives_verified(net, hook, tmp_path):
    agent = keygen(tmp_path / "agent.key")
    cfg = config(tmp_path, net, registry_dids=[agent], sinks=f'[[alerts]]\nwebhook = "{hook.url}"\n')
    before = len(hook.ids())
    m = monitor(cfg)
    try:
        wait_for("the first answer", lambda: _status_seen(tmp_path, agent))
        run(BIN / "oap-registry", "revoke", "--key", tmp_path / "agent.key", "--kind", "key", "--reason",
            "key_compromise", "--url", net.registry, "--out", tmp_path / "rev.tlog-proof")
        got = wait_for("the revocation alert", lambda: [d for d in hook.received[before:]
                                                        if d["kind"] == "registry_status"])
    finally:
        assert m.stop() == 0, m.log_text[-3000:]
    [alert] = got
    ev = alert["evidence"]
    assert ev["id"] == agent and ev["status"] == "revoked" and ev["previous"] == "unknown"
    assert ev["answer"]["revocation"]["reason"] == "key_compromise"
    # the answer in the alert verifies offline, as the relying party's own tool checks it
    (tmp_path / "answer.json").write_text(json.dumps(ev["answer"]))
    key = (net.data / "registry" / "registry.did").read_text().strip()
    run(BIN / "oap-registry", "status", tmp_path / "answer.json", "--offline", "--id", agent, "--registry-key", key,
        "--log-policy", net.data / "log" / "log.policy", "--allow-stale", ok=(3,))


def _status_seen(tmp: Path, did: str) -> bool:
    import sqlite3

    db = sqlite3.connect(f"file:{tmp / 'state' / 'monitor.db'}?mode=ro", uri=True)
    try:
        return bool(db.execute("SELECT 1 FROM statuses WHERE id=?", (did,)).fetchone())
    except sqlite3.OperationalError:
        return False
    finally:
        db.close()


def test_an_alert_waits_out_a_sink_that_is_down_and_a_restart(net, hook, tmp_path):
    watched = keygen(tmp_path / "w.key")
    cfg = config(tmp_path, net, watch=[watched], sinks=f'[[alerts]]\nwebhook = "{hook.url}"\n'
                                                        '[[alerts]]\nfile = "alerts.jsonl"\n')
    before = len(hook.ids())
    hook.down = True
    try:
        m = monitor(cfg)
        try:
            first = anchor(net, tmp_path / "w.key", 20)
            refused = hook.refused
            wait_for("two refused tries", lambda: hook.refused >= refused + 2)
        finally:
            assert m.stop() == 0
        second = anchor(net, tmp_path / "w.key", 21)  # while the monitor is stopped and the sink down
        m = monitor(cfg)
        refused = hook.refused
        wait_for("a try after the restart", lambda: hook.refused > refused)
        read_up_to(m, log_size(net))
    finally:
        hook.down = False
    try:
        got = wait_for("both alerts", lambda: len(hook.ids()[before:]) >= 2 and hook.received[before:])
        wait_for("the deliveries to be done", lambda: not status(m)["queued"])
    finally:
        assert m.stop() == 0
    assert [d["evidence"]["index"] for d in got] == [first, second]
    assert len(set(hook.ids()[before:])) == 2 == len(hook.ids()[before:])
    assert [a["id"] for a in file_alerts(tmp_path / "alerts.jsonl")] == hook.ids()[before:]


def test_the_local_network_monitor_watches_what_watch_txt_lists(net, tmp_path):
    """`make run`'s own monitor: a key added to its watch list is alerted to its alerts file,
    for the entries it signs from then on and for those it signed before (read again)."""
    mdir = net.data / "monitor"
    key = keygen(tmp_path / "tour.key")
    earlier = anchor(net, tmp_path / "tour.key", 29)  # before anyone watched the key
    size = log_size(net)
    wait_for("the monitor to read it", lambda: _local_status(net)["logs"][0]["entries_read"] >= size)
    with open(mdir / "watch.txt", "a") as f:
        f.write(key + "  the tour's key\n")
    anchor(net, tmp_path / "tour.key", 30, "--journal", str(mdir / "anchored.jsonl"))  # mine: no alert
    theirs = anchor(net, tmp_path / "tour.key", 31)
    got = wait_for("both alerts in the local network's file", lambda: len(
        [a for a in file_alerts(mdir / "alerts.jsonl") if a["evidence"].get("signer") == key]) >= 2 and [
        a for a in file_alerts(mdir / "alerts.jsonl") if a["evidence"].get("signer") == key])
    assert sorted(a["evidence"]["index"] for a in got) == [earlier, theirs]
    assert all(os.path.exists(a["evidence"]["file"]) for a in got)
    # and it checks the registry's commits: each one's anchor verified, in the log it watches
    wait_for("the registry's commits checked", lambda: _local_status(net)["registry"]["commits_checked"] >= 1)
    assert not [a for a in file_alerts(mdir / "alerts.jsonl") if a["kind"] != "watched_entry"]


def _local_status(net) -> dict:
    with urllib.request.urlopen(f"{net.monitor}/v1/status", timeout=10) as r:
        return json.loads(r.read())
