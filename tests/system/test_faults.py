"""Faults beyond crashes, on a real filesystem: a full disk and a read-only data
directory make writes fail with 503 (never 500) while reads keep working,
nothing acknowledged is lost, and writes recover when the fault clears."""
from __future__ import annotations

import asyncio
import os
import subprocess
import time

import aiohttp
import pytest

from tlog.client.client import LogClient
from tlog.client.verifier import TrustPolicy
from tlog.formats.ed25519 import generate_seed
from tlog.formats.entries import canonical_entry, receipt_entry
from tlog.formats.hashing import leaf_hash

from tests.support.services import fetch_entries

pytestmark = pytest.mark.slow
SEED = generate_seed()


@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def entry(i: int) -> dict:
    return receipt_entry(leaf_hash(b"fault" + i.to_bytes(8, "big")), SEED)


async def post(session, url, i):
    async with session.post(url + "/v1/entries", json=entry(i)) as r:
        return r.status, await r.json()


async def reads_work(session, url):
    for path in ("/checkpoint", "/v1/info", "/tile/0/000.p/1", "/v1/proof/inclusion?index=0", "/v1/entries/0"):
        async with session.get(url + path) as r:
            assert r.status == 200, path


def fill(mnt) -> None:
    with open(mnt / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
        try:
            os.fsync(f.fileno())
        except OSError:
            pass


async def test_full_disk_and_read_only_then_recovery(server, small_fs):
    srv = server("--batch-interval-ms", "2", data=small_fs / "data")
    acked: dict[int, int] = {}
    async with aiohttp.ClientSession() as s:
        for i in range(50):
            st, body = await post(s, srv.url, i)
            assert st == 200
            acked[i] = body["index"]

        # --- disk full ---
        fill(small_fs)
        statuses = []
        for i in range(50, 3050):
            st, body = await post(s, srv.url, i)
            statuses.append(st)
            assert st in (200, 503), body
            if st == 200:
                acked[i] = body["index"]
            else:
                assert body["error"] == "maintenance"
                if statuses.count(503) >= 5:
                    break
        assert statuses.count(503) >= 5, "the disk never filled up"
        await reads_work(s, srv.url)
        (small_fs / "filler").unlink()
        for i in range(5000, 5020):  # space is back: writes work again
            st, body = await post(s, srv.url, i)
            assert st == 200, body
            acked[i] = body["index"]

    srv.kill()
    log_text = srv.log_text
    assert "could not persist a batch" in log_text and "Traceback" not in log_text

    # --- a read-only data directory (e.g. remounted ro after disk errors), after a
    # crash (WAL files present) and after a clean stop (no WAL files) ---
    for how in ("after kill -9", "after a clean stop"):
        subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
        try:
            ro = server(data=small_fs / "data")
            async with aiohttp.ClientSession() as s:
                st, body = await post(s, ro.url, 6000)
                assert st == 503 and body["error"] == "maintenance" and "read-only" in body["message"], how
                await reads_work(s, ro.url)
            ro.kill()
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], check=True)
        if how == "after kill -9":
            clean = server(data=small_fs / "data")
            assert clean.stop() == 0

    srv2 = server(data=small_fs / "data")
    async with aiohttp.ClientSession() as s:
        for i in range(6001, 6011):  # writable again: writes work
            st, body = await post(s, srv2.url, i)
            assert st == 200, body
            acked[i] = body["index"]
    stored = await fetch_entries(srv2.url, max(acked.values()) + 1)
    for i, idx in acked.items():
        assert stored[idx] == canonical_entry(entry(i))
    async with LogClient(srv2.url) as c:
        cp = TrustPolicy.for_log(srv2.vkey).verify_checkpoint(await c.checkpoint()).checkpoint
        assert await c.root_from_tiles(cp.size) == cp.root


async def test_witness_and_registry_on_a_full_disk(small_fs, tmp_path):
    """The witness's state and the registry's repository on a full disk: 503 with
    a reason (never 500), reads keep working, writes recover when space returns."""
    from registry.client import did_of, make_revocation

    from tests.support.services import log_service, registry_service, witness_service

    log = log_service(tmp_path / "log", "--batch-interval-ms", "5").start()
    w = witness_service(small_fs / "w", log.vkey).start()
    reg = registry_service(small_fs / "reg", log.url).start()

    def revocation() -> dict:
        k = generate_seed()
        return make_revocation(k, kind="key", subject=did_of(k))

    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(log.url + "/checkpoint") as r:
                body = ("old 0\n\n" + await r.text()).encode()
            fill(small_fs)
            async with s.post(w.url + "/add-checkpoint", data=body) as r:
                assert r.status == 503 and "could not persist" in await r.text()
            statuses = []
            for _ in range(5):
                async with s.post(reg.url + "/v1/records", json=revocation()) as r:
                    statuses.append(r.status)
                    if r.status != 200:
                        assert (await r.json())["error"] == "maintenance"
            assert 503 in statuses and all(st in (200, 503) for st in statuses)
            async with s.get(reg.url + "/v1/info") as r:
                assert r.status == 200
            async with s.get(w.url + "/healthz") as r:
                assert r.status == 200
            (small_fs / "filler").unlink()
            async with s.post(w.url + "/add-checkpoint", data=body) as r:
                assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
            deadline = time.monotonic() + 60
            while True:  # the registry's writer retries on its own schedule
                async with s.post(reg.url + "/v1/records", json=revocation()) as r:
                    if r.status == 200:
                        break
                assert time.monotonic() < deadline, f"the registry never recovered: HTTP {r.status}"
                await asyncio.sleep(0.2)
        assert w.alive() and reg.alive()
    finally:
        for svc in (reg, w, log):
            svc.kill()


async def test_witness_and_registry_on_a_read_only_directory(small_fs, tmp_path):
    """Started on a read-only directory, the witness serves its monitoring reads and
    answers add-checkpoint with 503, never 500; the registry serves its history
    (records, files, git clone) and answers submissions with 503."""
    import hashlib

    from tlog.client.client import LogClient

    from tests.support.services import log_service, registry_service, witness_service

    log = log_service(tmp_path / "log", "--batch-interval-ms", "5").start()
    w = witness_service(small_fs / "w", log.vkey).start()
    reg = registry_service(small_fs / "reg", log.url).start()
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(log.url + "/checkpoint") as r:
                first = await r.text()
            async with s.post(w.url + "/add-checkpoint", data=("old 0\n\n" + first).encode()) as r:
                assert r.status == 200
        from tlog.formats.checkpoint import parse_checkpoint
        from tlog.formats.encoding import b64enc
        from tlog.formats.note import parse_note

        old = parse_checkpoint(parse_note(first).text).size
        async with LogClient(log.url) as c:
            await c.anchor(entry(1))
            await c.anchor(entry(2))
            second = await c.checkpoint()
            new = parse_checkpoint(parse_note(second).text).size
            proof = await c.consistency(old, new)
        body = f"old {old}\n" + "".join(b64enc(p) + "\n" for p in proof) + "\n" + second
        assert w.stop() == 0 and reg.stop() == 0
        subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
        try:
            w.start()
            mon = f"/{hashlib.sha256(b'oap.localhost/log').hexdigest()}/checkpoint"
            async with aiohttp.ClientSession() as s:
                async with s.get(w.url + mon) as r:
                    assert r.status == 200 and (await r.text()).startswith(f"oap.localhost/log\n{old}\n")
                async with s.post(w.url + "/add-checkpoint", data=body.encode()) as r:
                    assert r.status == 503 and "could not persist" in await r.text()
            reg.start(timeout=30)
            from registry.client import did_of, make_revocation

            k = generate_seed()
            async with aiohttp.ClientSession() as s:
                async with s.get(reg.url + "/v1/records", params={"limit": "5"}) as r:
                    assert r.status == 200
                async with s.get(reg.url + "/v1/files/registry.json") as r:
                    assert r.status == 200
                async with s.post(reg.url + "/v1/records", json=make_revocation(k, kind="key", subject=did_of(k))) as r:
                    assert r.status == 503 and "read-only" in (await r.json())["message"]
                async with s.get(reg.url + "/v1/status/" + did_of(k)) as r:
                    assert r.status == 503 and "read-only" in (await r.json())["message"]
            clone = subprocess.run(["git", "clone", "-q", reg.url + "/registry.git", str(tmp_path / "clone")],
                                   capture_output=True, text=True, timeout=60)
            assert clone.returncode == 0, clone.stderr
        finally:
            w.kill()
            reg.kill()
            subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], check=True)
    finally:
        for svc in (reg, w, log):
            svc.kill()
