"""`oap-monitor` on logs that are not ours and on logs that lie: a static C2SP tlog-tiles log
written by Go's golang.org/x/mod/sumdb/tlog (served by a plain file server on 127.0.0.1), and a
hostile log that serves garbage, huge bodies and slow answers. The monitor reads the foreign
log to the last entry, finds a split view in it, and of the hostile log says what is wrong,
exits 2 ("could not check") and never crashes; its memory stays bounded."""
from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from aiohttp import web

from tlog.formats.checkpoint import Checkpoint
from tlog.formats.keys import Signer
from tlog.formats.note import sign_note
from tlog.formats.tiles import entries_path, tile_path
from tlog.runtime import children

from tests.support.alertsinks import ThreadedApp
from tests.support.localnet import BIN
from tests.support.mirror import wait_for
from tests.support.services import Service
from tests.support.staticlog import serve_directory

pytestmark = pytest.mark.slow
GO_SIGNER = Signer("go.example/monitored-log", bytes(range(3, 35)))


def write_config(tmp: Path, url: str, vkey: str, *, extra: str = "", logs_extra: str = "") -> Path:
    (tmp / "log.policy").write_text(f"log {vkey}\nquorum none\n")
    cfg = tmp / "monitor.toml"
    cfg.write_text(f'state_dir = "state"\nmetrics = ""\ntimeout = 5\n{extra}\n[[logs]]\nurl = "{url}"\n'
                   f'policy = "log.policy"\n{logs_extra}\n[[alerts]]\nfile = "alerts.jsonl"\n')
    return cfg


def once(cfg: Path) -> tuple[int, str]:
    r = children.run([str(BIN / "oap-monitor"), "run", "--config", str(cfg), "--once"], timeout=300,
                     capture_output=True)
    out = r.stdout.decode() + r.stderr.decode()
    assert "Traceback" not in out, out
    return r.returncode, out


def alerts(tmp: Path) -> list[dict]:
    path = tmp / "alerts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def go_write(tool: Path, directory: Path, *sizes: int) -> None:
    out = subprocess.run([str(tool), str(directory), GO_SIGNER.to_skey(), *map(str, sizes)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr


def test_a_log_written_by_go_is_read_to_the_end_and_its_split_view_found(go_tlogwrite, tmp_path):
    golog = tmp_path / "golog"
    go_write(go_tlogwrite, golog, 700)
    fork = tmp_path / "fork"  # what a mirror of the log would serve: here, a fork of it
    with serve_directory(golog) as url, serve_directory(fork) as fork_url:
        cfg = write_config(tmp_path, url, GO_SIGNER.vkey, logs_extra=f'mirrors = ["{fork_url}"]')
        code, out = once(cfg)
        assert code == 0 and "verified size 700, 700 entries read" in out, out
        go_write(go_tlogwrite, golog, 700, 1000, 70_000)  # it grows (level-1 tiles complete on the way)
        code, out = once(cfg)
        assert code == 0 and "verified size 70000, 70000 entries read" in out, out
        # a checkpoint of a published size with another root, signed by the log's (Go's) key
        other = sign_note(Checkpoint(GO_SIGNER.name, 1000, hashlib.sha256(b"fork").digest()).to_text(), [GO_SIGNER])
        (fork / hashlib.sha256(GO_SIGNER.name.encode()).hexdigest()).mkdir(parents=True)
        (fork / hashlib.sha256(GO_SIGNER.name.encode()).hexdigest() / "checkpoint").write_text(other)
        code, out = once(cfg)
        assert code == 1, out
    [alert] = alerts(tmp_path)
    assert alert["kind"] == "split_view" and other in alert["evidence"]["checkpoints"]
    assert len(alert["evidence"]["consistency_proof"]) > 0  # size 1000 inside the tree of 70,000
    r = children.run([str(BIN / "oap-monitor"), "check-evidence", alert["evidence"]["file"], "--policy",
                      str(tmp_path / "log.policy")], timeout=60, capture_output=True)
    assert r.returncode == 0 and b"not a prefix" in r.stdout, r.stdout + r.stderr


class HostileLog(ThreadedApp):
    """A log whose every answer can be replaced: `answers[path]` is bytes (served as is), or one
    of "drip" (a body sent a byte a second, never ending) and "flood" (an endless body)."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.dir = directory
        self.answers: dict[str, object] = {}

    def routes(self, app: web.Application) -> None:
        async def any_path(request: web.Request) -> web.StreamResponse:
            path = request.match_info["path"]
            answer = self.answers.get(path)
            if answer in ("drip", "flood"):
                resp = web.StreamResponse()
                await resp.prepare(request)
                try:
                    for _ in range(100_000):
                        await resp.write(b"x" if answer == "drip" else b"\0" * 65536)
                        await asyncio.sleep(1 if answer == "drip" else 0)
                except (ConnectionError, asyncio.CancelledError):
                    pass
                return resp
            if isinstance(answer, bytes):
                return web.Response(body=answer)
            f = self.dir / path
            return web.Response(body=f.read_bytes()) if f.is_file() else web.Response(status=404)

        app.router.add_get("/{path:.*}", any_path)


def test_a_hostile_log_is_refused_with_a_reason_and_never_crashes_the_monitor(go_tlogwrite, tmp_path):
    golog = tmp_path / "golog"
    go_write(go_tlogwrite, golog, 600)
    bundle = (golog / entries_path(1)).read_bytes()
    cases = [
        ("checkpoint", b"\xff\xfe garbage \x00", "not UTF-8"),
        ("checkpoint", b"go.example/monitored-log\n600\nnot base64\n\n\xe2\x80\x94 x AAAA\n", "malformed checkpoint"),
        ("checkpoint", sign_note(Checkpoint(GO_SIGNER.name, 600, bytes(32)).to_text(), [Signer(
            GO_SIGNER.name, bytes(32))]).encode(), "not signed by a log of the policy"),
        ("checkpoint", "flood", "more than the 1048576 bytes"),
        ("checkpoint", "drip", "cut off"),
        (tile_path(0, 1), b"\x01" * 8192, "hash tile 0/1 does not match the leaf hashes"),
        (tile_path(0, 1), b"\x01" * 100, "not 8192"),
        (tile_path(0, 1), "flood", "more than the 8192 bytes"),
        (entries_path(1), b"\x00\x05abc", "malformed entry bundle"),
        (entries_path(1), bundle[:-1] + b"?", "does not match the leaf hashes"),
        (entries_path(1), "flood", "more than the"),
    ]
    with HostileLog(golog) as log:
        cfg = write_config(tmp_path, log.base, GO_SIGNER.vkey, extra="unreachable_after = 0\npoll_seconds = 0.1")
        log.answers = dict([cases[0][:2]])
        code, out = once(cfg)  # one pass: could not check, and says why
        assert code == 2 and "not UTF-8" in out, out
        # running: each lie in turn is refused with its reason, pass after pass, and it goes on
        m = Service("monitor", [str(BIN / "oap-monitor"), "run", "--config", str(cfg)]).start()
        try:
            for path, answer, reason in cases:
                seen = m.log_text.count(reason)
                log.answers = {path: answer}
                wait_for(f"{path}: {reason}", lambda reason=reason, seen=seen: m.log_text.count(reason) > seen + 1)
                assert m.alive() and "Traceback" not in m.log_text, m.log_text[-3000:]
            log.answers = {}
        finally:
            assert m.stop() == 0, m.log_text[-3000:]
        # and the honest log, as served, reads through
        code, out = once(cfg)
        assert code == 0 and "verified size 600, 600 entries read" in out, out
    kinds = [a["kind"] for a in alerts(tmp_path)]
    assert set(kinds) == {"log_invalid", "log_unreachable"}, kinds
    assert kinds.count("log_unreachable") == 1  # one incident (the slow answers), one alert


def test_the_monitor_reads_an_endless_body_in_bounded_memory(go_tlogwrite, tmp_path):
    """A running monitor against a log that floods every entry bundle: refused each pass, in
    bounded memory (the peak resident set of the process stays far below the data offered)."""
    golog = tmp_path / "golog"
    go_write(go_tlogwrite, golog, 300)
    with HostileLog(golog) as log:
        log.answers = {entries_path(0): "flood", entries_path(1, 44): "flood"}
        cfg = write_config(tmp_path, log.base, GO_SIGNER.vkey, extra="poll_seconds = 0.1\nunreachable_after = 0")
        m = Service("monitor", [str(BIN / "oap-monitor"), "run", "--config", str(cfg)]).start()
        try:
            wait_for("five refused passes", lambda: m.log_text.count("more than the") >= 5)
            with open(f"/proc/{m.pid}/status") as f:
                peak_kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
        finally:
            assert m.stop() == 0
    assert peak_kb < 300 * 1024, peak_kb
    assert [a["kind"] for a in alerts(tmp_path)] == ["log_invalid"]  # one incident, one alert


class FakeRegistry(ThreadedApp):
    """A registry's commit list (`GET /v1/commits`), whatever anchors it is given."""

    def __init__(self, commits: list[dict]) -> None:
        super().__init__()
        self.commits = commits

    def routes(self, app: web.Application) -> None:
        async def commits(request: web.Request) -> web.Response:
            before = int(request.query.get("before", len(self.commits)))
            page = self.commits[:before][-int(request.query["limit"]):][::-1]
            return web.json_response({"head": len(self.commits) - 1, "commits": page})

        app.router.add_get("/v1/commits", commits)


def test_registry_commits_without_a_valid_anchor_are_alerts(go_tlogwrite, tmp_path):
    from tlog.formats.did import did_key_from_public
    from tlog.formats.ed25519 import public_from_seed

    golog = tmp_path / "golog"
    go_write(go_tlogwrite, golog, 10)
    key = did_key_from_public(public_from_seed(bytes(range(32))))
    old, new = "2020-01-01T00:00:00Z", "2999-01-01T00:00:00Z"
    commits = [{"seq": 0, "commit": "a" * 40, "tree": "b" * 40, "time": old, "anchor": None},
               {"seq": 1, "commit": "c" * 40, "tree": "d" * 40, "time": old, "anchor": "c2sp.org/tlog-proof@v1\n"},
               {"seq": 2, "commit": "e" * 40, "tree": "f" * 40, "time": new, "anchor": None}]
    with serve_directory(golog) as url, FakeRegistry(commits) as reg:
        cfg = write_config(tmp_path, url, GO_SIGNER.vkey, logs_extra=f'[registry]\nurl = "{reg.base}"\nkey = "{key}"\n')
        code, out = once(cfg)
        assert code == 1, out
        code, out = once(cfg)  # commit 2 waits for its anchor (it is new): nothing again
        assert code == 0, out
    got = [(a["evidence"]["seq"], a["evidence"]["reason"].split(":")[0]) for a in alerts(tmp_path)]
    assert got == [(0, "the commit has no log anchor"), (1, "the anchor does not verify")], got
