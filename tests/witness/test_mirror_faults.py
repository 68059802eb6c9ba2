"""Faults, with real processes on 127.0.0.1: a follower killed mid-upload, a mirror killed -9
during add-entries, and logs that lie (C2SP tlog-mirror). Every wait is a bounded wait for a
condition; nothing here depends on how fast the machine is."""
from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from tlog.formats.keys import parse_vkey
from tlog.formats.note import open_note
from tlog.formats.tiles import encode_entry_bundle, entries_for_size, tiles_for_size
from tlog.runtime import children

from tests.support.mirror import (
    BIN,
    EntryLog,
    cosigner_key,
    http,
    metric,
    mirror_service,
    origin_hash,
    served_root,
    wait_for,
)
from tests.support.staticlog import StaticLog, entries_for, serve_directory

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


def test_a_mirror_killed_during_add_entries_never_cosigns_what_it_lost(tmp_path, started):
    n1, n2 = 3000, 40_000
    slog = StaticLog(tmp_path / "log", entries_for(n2), origin="static.example/killed-mirror")
    slog.publish(n1)
    lk = parse_vkey(slog.vkey)
    with serve_directory(tmp_path / "log", delay=0.05) as url:
        svc = mirror_service(tmp_path / "m", [(slog.origin, slog.vkey, url)])
        m = started(svc)
        prefix = f"{m.url}/{origin_hash(slog.origin)}"
        out = subprocess.run([str(BIN / "oap-mirror"), "follow", url, "--mirror", m.url, "--once"],
                             capture_output=True, text=True, timeout=300)
        assert f"cosigned size {n1}" in out.stdout, out.stdout + out.stderr
        slog.publish(n2)
        cosigned = n1
        before = n1
        interrupted = 0
        for _ in range(3):
            f = follower(url, m.url)
            try:
                wait_for("entries to arrive", lambda b=before, u=m.url: metric(metrics(u), "oap_mirror_next_entry",
                                                                                slog.origin) > b + 300)
                m.kill()  # SIGKILL, in the middle of add-entries
            finally:
                f.wait(120)
            m = started(svc)  # same data directory, new port
            prefix = f"{m.url}/{origin_hash(slog.origin)}"
            (row,) = json.loads(http(m.url + "/v1/info")[2])["logs"]
            # whatever it lost, it still has every entry it cosigned, and serves them
            assert row["size"] is not None and row["size"] >= cosigned and row["next_entry"] >= row["size"]
            status, _, note = http(prefix + "/checkpoint")
            assert status == 200
            open_note(note, [lk])
            open_note(note, [cosigner_key()])
            size = int(note.decode().split("\n")[1])
            assert served_root(prefix, size) == slog.root(size)
            last = (row["next_entry"] - 1) // 256
            width = min(256, row["next_entry"] - last * 256)
            bundle = http(f"{prefix}/tile/entries/{last:03d}" + (f".p/{width}" if width < 256 else ""))[2] \
                if last < 1000 else None
            if bundle is not None:
                assert bundle == encode_entry_bundle(slog.entries[last * 256:last * 256 + width])
            cosigned, before = size, row["next_entry"]
            interrupted += before < n2
            if before >= n2 - 500:
                break
        assert interrupted, "no kill landed before the upload was complete"
        out = subprocess.run([str(BIN / "oap-mirror"), "follow", url, "--mirror", m.url, "--once"],
                             capture_output=True, text=True, timeout=600)
        assert f"cosigned size {n2}" in out.stdout, out.stdout + out.stderr[-2000:]
        assert served_root(prefix, n2) == slog.root(n2)
        for t in entries_for_size(n2)[::17]:
            assert http(f"{prefix}/{t.path}")[2] == (tmp_path / "log" / t.path).read_bytes()


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
    (row,) = json.loads(http(m.url + "/v1/info")[2])["logs"]
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
        (row,) = json.loads(http(m.url + "/v1/info")[2])["logs"]
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
