"""Faults, with real processes on 127.0.0.1: a follower killed mid-upload, a mirror killed -9
again and again while it stores and cosigns, and logs that lie (C2SP tlog-mirror). Every wait
is a bounded wait for a condition; nothing here depends on how fast the machine is."""
from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

import pytest

from tlog.client.audit import audit
from tlog.client.verifier import TrustPolicy
from tlog.formats.tiles import entries_for_size, tiles_for_size
from tlog.http.mirrorclient import FetchError, MirrorClient
from tlog.runtime import children

from tests.support.mirror import (
    BIN,
    EntryLog,
    check_cosigned,
    cosigner,
    http,
    info_row,
    metric,
    mirror_service,
    origin_hash,
    served_root,
    wait_for,
)
from tests.support.staticlog import StaticLog, entries_for, serve_directory
from tests.support.waiting import until

pytestmark = pytest.mark.slow

OCTETS = {"Content-Type": "application/octet-stream"}


def metrics(url: str) -> str:
    return http(url + "/metrics")[2].decode()


def follower(log_url: str, mirror_url: str, *extra: str) -> subprocess.Popen:
    return children.popen([str(BIN / "oap-mirror"), "follow", log_url, "--mirror", mirror_url, "--once", *extra],
                          death_signal=signal.SIGKILL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_follower_killed_mid_upload_resumes_without_resending(tmp_path, started):
    n = 40_000
    slog = StaticLog(tmp_path / "log", entries_for(n), origin="static.example/killed-follower")
    slog.publish(n)
    with serve_directory(tmp_path / "log", delay=0.05) as url:
        m = started(mirror_service(tmp_path / "m", [(slog.origin, slog.vkey, url)]))
        f = follower(url, m.url)
        try:
            stored = wait_for("a first request stored", lambda: metric(metrics(m.url), "oap_mirror_next_entry",
                                                                       slog.origin) >= 8192)
            assert stored < n and f.poll() is None, "the follower finished before it could be interrupted"
            f.send_signal(signal.SIGKILL)
            f.wait(30)
        finally:
            if f.poll() is None:
                f.kill()
        # the mirror keeps the packages it authenticated, and finishes with the cut request
        wait_for("the cut request to end", lambda: metric(metrics(m.url), "oap_mirror_uploads_in_progress") == 0)
        at_kill = metric(metrics(m.url), "oap_mirror_next_entry", slog.origin)
        assert 8192 <= at_kill < n
        out = subprocess.run([str(BIN / "oap-mirror"), "follow", url, "--mirror", m.url, "--once"],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0 and f"cosigned size {n}, {n - int(at_kill)} entries sent" in out.stdout, \
            out.stdout + out.stderr[-2000:]
        text = metrics(m.url)
        assert metric(text, "oap_mirror_entries_stored_total", slog.origin) == n
        assert metric(text, "oap_mirror_entries_received_total", slog.origin) == n  # nothing sent twice
        prefix = f"{m.url}/{origin_hash(slog.origin)}"
        assert served_root(prefix, n) == slog.root(n)


class KilledSource:
    """One checkpoint of `lg` as a `PushSource` (tlog.http.mirrorclient) whose package stream
    SIGKILLs the mirror: `kill` is the package of the push (counted over all its requests)
    before which it dies, "end" for once the whole body is stored (around the commit), or None."""

    def __init__(self, lg: EntryLog, size: int, mirror, kill: int | str | None) -> None:
        self.lg, self.origin, self.size, self.note = lg, lg.origin, size, lg.checkpoint(size)
        self.mirror, self.kill, self.handed, self.killed = mirror, kill, 0, False
        self.killer: asyncio.Future | None = None

    async def consistency_proof(self, old: int):
        return self.lg.view(self.size).consistency_proof(old)

    async def _kill_once_stored(self, n: int, every: float = 0.05) -> None:
        url = self.mirror.url
        await until(lambda: asyncio.to_thread(lambda: info_row(url)["next_entry"] >= n), 60,
                    f"the mirror to store {n} entries", every=every)
        self.mirror.kill()
        self.killed = True

    async def packages(self, ranges):
        before = None  # where the package handed over before this one, in this request, starts
        for sub, first, stop in ranges:
            if self.handed == self.kill:
                # mid-body, once the mirror stored what came before (but the package just
                # handed over, which the gzip stream may still hold)
                await self._kill_once_stored(first if before is None else before)
            self.handed += 1
            before = first
            yield self.lg.package(sub, first, stop, self.size)
        if self.kill == "end" and ranges and ranges[-1][2] == self.size:
            self.killer = asyncio.ensure_future(self._kill_once_stored(self.size, every=0.002))


def reader(prefix: str):
    """An `audit` fetch of the paths under `prefix`."""
    async def fetch(path: str) -> bytes:
        return await asyncio.to_thread(lambda: http(f"{prefix}/{path}")[2])

    return fetch


# Per life of the mirror, the checkpoints pushed in turn, each with when the mirror dies
# (see KilledSource; "after": once it cosigned that size, before anything else is sent).
KILLS: list[list[tuple[int, int | str | None]]] = [
    [(2000, None), (7000, 10)],  # mid-body of the only request, after a cosignature for 2000
    [(7000, None), (7000, "after")],  # cosigned, then killed before anything else
    [(12_000, 0)],  # pending checkpoint moved, request header sent, no package yet
    [(12_000, None), (21_000, 34)],  # mid-body of the second request, after a 202
    [(21_000, None), (30_000, "end")],  # every entry stored: killed around the commit
]


def test_every_cosignature_a_mirror_returned_survives_its_kill_9(tmp_path, started):
    """The project's mirror client pushes checkpoints in turn; the mirror is killed -9 mid-body,
    between a cosignature and the next push, and around a commit. After each restart on the
    same data, every size it cosigned for the client is in its checkpoint and audits entry by
    entry from its monitoring prefix."""
    lg = EntryLog(origin="log.test.example/killed-mirror", entries=entries_for(30_000, 512))
    svc = mirror_service(tmp_path / "m", [(lg.origin, lg.vkey, "")])
    policy = TrustPolicy.from_text(f"log {lg.vkey}\nwitness m {cosigner().vkey}\nquorum m\n")
    cosigned: dict[int, bytes] = {}  # size -> root, for every cosignature the mirror returned

    async def push(m, plan) -> None:
        client = MirrorClient(m.url)
        try:
            for size, kill in plan:
                if kill == "after":
                    m.kill()
                    return
                src = KilledSource(lg, size, m, kill)
                try:
                    pushed = await client.push(src)
                except FetchError:
                    pushed = None
                if src.killer is not None:
                    await src.killer
                if pushed is None:
                    assert src.killed, "the push failed with no kill"
                    return
                assert not src.killed or kill == "end", "the mirror answered a body it never got whole"
                assert pushed.action == "cosigned" and pushed.size == size, pushed
                check_cosigned(src.note, pushed.lines)  # a real cosignature
                cosigned[size] = lg.root(size)
                if src.killed:
                    return
            raise AssertionError("the plan ended with no kill")
        finally:
            await client.close()

    m = started(svc)
    for plan in KILLS:
        asyncio.run(push(m, plan))
        assert not m.alive()
        m = started(svc)  # the same data directory, a new port
        prefix = f"{m.url}/{origin_hash(lg.origin)}"
        row = info_row(m.url)
        # every size it ever cosigned is still there: its checkpoint, its tiles, every entry
        top = max(cosigned)
        assert row["size"] is not None and row["size"] >= top and row["next_entry"] >= row["size"], (row, cosigned)
        checked = asyncio.run(audit(reader(prefix), policy, previous=(top, cosigned[top])))
        assert checked.checkpoint.checkpoint.size == row["size"] and checked.entries == row["size"]
        for size, root in cosigned.items():
            assert served_root(prefix, size) == root
    assert set(cosigned) == {2000, 7000, 12_000, 21_000} or set(cosigned) == {2000, 7000, 12_000, 21_000, 30_000}
    asyncio.run(push(m, [(30_000, None), (30_000, "after")]))
    m = started(svc)
    assert info_row(m.url)["size"] == 30_000
    assert served_root(f"{m.url}/{origin_hash(lg.origin)}", 30_000) == lg.root(30_000)


def snapshot(prefix: str, size: int) -> dict[str, bytes]:
    out = {"checkpoint": http(prefix + "/checkpoint")[2]}
    for t in tiles_for_size(size) + entries_for_size(size):
        out[t.path] = http(f"{prefix}/{t.path}")[2]
    return out


def test_a_lying_log_gets_409_or_422_and_the_copy_stays_intact(tmp_path, started):
    lg = EntryLog().grow(900)
    m = started(mirror_service(tmp_path / "m", [(lg.origin, lg.vkey, "")]))
    prefix = f"{m.url}/{origin_hash(lg.origin)}"
    assert http(m.url + "/add-checkpoint", lg.add_checkpoint(0, 600))[0] == 200
    assert http(m.url + "/add-entries", lg.body(0, 600), OCTETS)[0] == 200
    before = snapshot(prefix, 600)
    fork = lg.fork(500, b"fork").grow(400)
    # an inconsistent checkpoint: a fork that grew from 500, with its own consistency proof from 600
    assert http(m.url + "/add-checkpoint", fork.add_checkpoint(600, 900))[0] == 422
    assert http(m.url + "/add-checkpoint", fork.add_checkpoint(0, 600))[0] == 409  # not the pending size
    assert http(m.url + "/add-checkpoint", lg.add_checkpoint(600, 900))[0] == 200  # the honest one
    good = lg.body(600, 900)
    tampered = bytearray(good)
    tampered[good.index(lg.entries[700])] ^= 0x20  # one entry changed on the way
    wrong_proof = bytearray(good)
    wrong_proof[len(lg.body(600, 900, packages=1)) - 5] ^= 1  # a byte of the first package's proof
    forked_entries = fork.body(600, 900)  # the fork's entries against the honest checkpoint of 900
    for body in (bytes(tampered), bytes(wrong_proof), forked_entries):
        status, _, text = http(m.url + "/add-entries", body, OCTETS)
        assert status == 422, (status, text)
    assert http(m.url + "/add-entries", lg.body(600, 899), OCTETS)[0] == 409  # 899 is no pending size
    assert snapshot(prefix, 600) == before  # nothing of the lies was stored or served
    row = info_row(m.url)
    assert (row["size"], row["next_entry"]) == (600, 600)
    assert http(m.url + "/add-entries", good, OCTETS)[0] == 200
    assert served_root(prefix, 900) == lg.root(900)
    assert {k: v for k, v in snapshot(prefix, 600).items() if k != "checkpoint"} == \
        {k: v for k, v in before.items() if k != "checkpoint"}


def test_the_follower_refuses_a_log_whose_bundles_or_checkpoints_lie(tmp_path, started):
    n = 1000
    slog = StaticLog(tmp_path / "log", entries_for(n), origin="static.example/liar")
    slog.publish(600)
    with serve_directory(tmp_path / "log") as url:
        m = started(mirror_service(tmp_path / "m", [(slog.origin, slog.vkey, url)]))
        prefix = f"{m.url}/{origin_hash(slog.origin)}"
        out = subprocess.run([str(BIN / "oap-mirror"), "follow", url, "--mirror", m.url, "--once"],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        before = snapshot(prefix, 600)
        slog.publish(n)
        bundle: Path = tmp_path / "log/tile/entries/003.p/232"
        raw = bytearray(bundle.read_bytes())
        raw[40] ^= 1  # an entry of bundle 3 changed: its tile (and the checkpoint) are honest
        bundle.write_bytes(bytes(raw))
        out = subprocess.run([str(BIN / "oap-mirror"), "follow", url, "--mirror", m.url, "--once"],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 1 and "refused" in out.stdout and "do not match its checkpoint" in out.stdout, \
            out.stdout + out.stderr
        row = info_row(m.url)
        assert row["next_entry"] == 768 and row["size"] == 600  # what came before the lie, verified
        assert snapshot(prefix, 600) == before
        # a forked log: same key, another history from 500 on
        fork = StaticLog(tmp_path / "fork", entries_for(500) + entries_for(1200, 72)[500:], origin=slog.origin)
        fork.publish(1200)
        with serve_directory(tmp_path / "fork") as fork_url:
            out = subprocess.run([str(BIN / "oap-mirror"), "follow", fork_url, "--mirror", m.url, "--once"],
                                 capture_output=True, text=True, timeout=300)
        assert out.returncode == 1 and "refused" in out.stdout and "HTTP 422" in out.stdout, out.stdout + out.stderr
        assert snapshot(prefix, 600) == before
