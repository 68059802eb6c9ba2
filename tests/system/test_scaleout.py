"""The scale-out backend against real servers: PostgreSQL and SeaweedFS started by the
session (tests/conftest.py `engines`), log frontends as storage objects and as real
`oap-log serve` processes on 127.0.0.1.

Checked: exact sequencing and dedup across frontends; roots against pymerkle; the fork
guard in the database; integrator failover; a database restart and an unreachable
bucket (503, then recovery, nothing acknowledged lost); kill -9 of a frontend and of
the integrator under write load; and the log verified from the bucket alone.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import threading
import time
from pathlib import Path

import aiohttp
import pytest
from pymerkle import InmemoryTree

from tlog.client.audit import audit
from tlog.client.verifier import TrustPolicy
from tlog.errors import ForkError, Unavailable
from tlog.formats.hashing import leaf_hash
from tlog.merkle.tree import TreeView, memory_view
from tlog.storage.bucket import Bucket, TilePublisher, changed_tiles
from tlog.storage.postgres import PostgresStorage

from tests.support.services import Service
from tests.support.signers import checkpoint_signer, make_signer

pytestmark = pytest.mark.slow

SIGNER = make_signer("scale.test/log")
SIGN = checkpoint_signer(SIGNER)


def frontend(tmp_path: Path, dsn: str, name: str, **kw) -> PostgresStorage:
    s = PostgresStorage(dsn, tmp_path / name, wait_timeout=kw.pop("wait_timeout", 20), name=name, **kw)
    s.open(SIGN)
    return s


def entries(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}:{i}".encode() for i in range(n)]


def test_changed_tiles_are_the_tiles_of_the_new_size_minus_those_of_the_old():
    from tlog.formats.tiles import entries_for_size, tiles_for_size

    def all_tiles(n: int) -> set:
        return {(-1, t.index, t.width) for t in entries_for_size(n)} | \
               {(t.level, t.index, t.width) for t in tiles_for_size(n)}

    rng = random.Random(3)
    for old, new in [(0, 1), (0, 256), (255, 257), (256, 512), (65535, 65537)] + \
            [tuple(sorted(rng.sample(range(70_000), 2))) for _ in range(30)]:
        assert set(changed_tiles(old, new)) == all_tiles(new) - all_tiles(old), (old, new)


def test_two_frontends_sequence_exactly_once_and_agree_with_pymerkle(engines, tmp_path):
    dsn = engines.database()
    a, b = frontend(tmp_path, dsn, "a"), frontend(tmp_path, dsn, "b")
    try:
        results: dict[str, list] = {"a": [], "b": []}

        def writer(store: PostgresStorage, key: str) -> None:
            rng = random.Random(key)
            for k in range(12):  # overlapping batches: both frontends submit many of the same entries
                batch = entries("e", 400)[rng.randrange(0, 300):][:rng.randrange(1, 150)] + entries(key, 20)[k:k + 1]
                results[key].append((batch, store.append(batch, SIGN)))

        threads = [threading.Thread(target=writer, args=(s, k)) for s, k in ((a, "a"), (b, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        index: dict[bytes, int] = {}
        for batch, r in results["a"] + results["b"]:
            assert r.state.size > max(r.indices)  # answered only once a published checkpoint covers it
            for data, i in zip(batch, r.indices):
                assert index.setdefault(data, i) == i  # one index per entry, whichever frontend asked
        assert sorted(index.values()) == list(range(len(index)))  # contiguous, no gaps, no repeats
        ordered = sorted(index, key=index.get)
        ref = InmemoryTree(algorithm="sha256")
        for d in ordered:
            ref.append_entry(d)
        deadline = time.monotonic() + 10
        while (a.state.size, b.state.size) != (len(ordered),) * 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert a.state.root == b.state.root == ref.get_root(len(ordered)) == memory_view([leaf_hash(d) for d in ordered]).root
        # proofs from either frontend's local hash files
        for store in (a, b):
            view = store.state.view
            assert view.inclusion_proof(3) == memory_view([leaf_hash(d) for d in ordered]).inclusion_proof(3)
    finally:
        a.close()
        b.close()


def test_the_database_refuses_a_second_root_for_a_size(engines, tmp_path):
    """Two integrators race on purpose (the advisory lock bypassed), one of them with a
    wrong tree (as a damaged cache would give): the database records one root for the
    size, and the other integrator gets a ForkError and signs nothing more."""
    import psycopg

    dsn = engines.database()
    a = frontend(tmp_path, dsn, "a", integrate=False)
    b = frontend(tmp_path, dsn, "b", integrate=False)
    try:
        a._sequence([leaf_hash(d) for d in entries("x", 15)], entries("x", 15))
        b._extend = lambda conn, size: b"\x07" * 32  # its tree is wrong
        with psycopg.connect(dsn, autocommit=True) as ca, psycopg.connect(dsn, autocommit=True) as cb:
            a._sign_and_cas(ca, 0, 15)
            with pytest.raises(ForkError):
                b._sign_and_cas(cb, 0, 15)
            roots = ca.execute("SELECT root FROM oap_checkpoints WHERE size = 15").fetchall()
            assert [bytes(r[0]) for r in roots] == [memory_view([leaf_hash(d) for d in entries("x", 15)]).root]
            # and in the other order: the wrong tree first cannot move the head past what a signed
        c = frontend(tmp_path, dsn, "c", integrate=False)
        c._sequence([leaf_hash(d) for d in entries("y", 5)], entries("y", 5))
        c._extend = lambda conn, size: b"\x09" * 32
        with psycopg.connect(dsn, autocommit=True) as cc:
            with pytest.raises(RuntimeError, match="head moved"):
                c._sign_and_cas(cc, 10, 20)  # a CAS from a size that is not the head
            assert cc.execute("SELECT size FROM oap_head").fetchone()[0] == 15
        c.close()
    finally:
        a.close()
        b.close()


def test_the_integrator_role_moves_when_its_holder_goes(engines, tmp_path):
    dsn = engines.database()
    a = frontend(tmp_path, dsn, "a")
    time.sleep(0.3)
    b = frontend(tmp_path, dsn, "b")
    try:
        a.append(entries("1", 5), SIGN)
        assert a.integrating and not b.integrating
        a.close()  # its connections end: PostgreSQL releases the role
        r = b.append(entries("2", 5), SIGN)  # b takes over within its retry interval
        assert b.integrating and r.state.size == 10
    finally:
        b.close()


def test_a_database_restart_is_503_then_recovers_with_nothing_lost(engines, tmp_path):
    # Its own server: restarting the shared one would disturb the other tests.
    from tlog.cli.engines import Postgres

    root = Path(tmp_path.parent / f"pg-{os.getpid()}-restart")
    root = Path("/tmp") / root.name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(mode=0o755)
    pg = Postgres(root / "pg").start()
    try:
        a = frontend(tmp_path, pg.dsn, "a", wait_timeout=5)
        acked = []
        acked += a.append(entries("before", 50), SIGN).indices
        pg.kill()
        with pytest.raises(Unavailable):
            a.append(entries("during", 10), SIGN)
        pg.start()
        deadline = time.monotonic() + 30
        while True:  # writes recover once the database is back (the writer reconnects)
            try:
                r = a.append(entries("after", 50), SIGN)
                break
            except Unavailable:
                assert time.monotonic() < deadline, "writes did not recover after the restart"
                time.sleep(0.2)
        acked += r.indices
        assert r.state.size >= 100 and set(acked) <= set(range(r.state.size))
        a.close()
    finally:
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_tiles_bundles_and_checkpoint_in_the_bucket_verify_with_no_log_running(engines, tmp_path, go_tlogverify):
    dsn, url = engines.database(), engines.bucket()
    pub = TilePublisher(engines.bucket_of(url), checkpoint_interval=0.05)
    a = frontend(tmp_path, dsn, "a", bucket=pub)
    try:
        for k in range(5):
            a.append(entries(f"b{k}", 130), SIGN)  # crosses full tiles and leaves partial ones
        state = a.state
    finally:
        a.close()
    policy = TrustPolicy.for_log(SIGNER.vkey)

    async def fetch_all() -> object:
        async with aiohttp.ClientSession() as s:  # anonymous reads, as any static reader
            async def fetch(path: str) -> bytes:
                async with s.get(f"{url}/{path}") as r:
                    assert r.status == 200, path
                    return await r.read()

            return await audit(fetch, policy, entries=True, previous=(130, TreeView(130, a.hashes.read).root))

    result = asyncio.run(fetch_all())
    assert result.checkpoint.checkpoint.size == state.size == 650 and result.entries == 650
    # and with Go's sumdb/tlog, an independent client, reading the bucket anonymously
    import subprocess

    out = subprocess.run([str(go_tlogverify), url, SIGNER.vkey, "100"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "OK size=650 checked=100", out.stdout + out.stderr
    # partial tiles superseded by full ones are gone; the current partials stay
    bucket = engines.bucket_of(url)
    names = bucket.list("tile/0/")
    assert "tile/0/001" in names and "tile/0/002.p/138" in names
    assert not [n for n in names if n.startswith("tile/0/000.p/") or n.startswith("tile/0/001.p/")]


def test_a_tile_that_differs_in_the_bucket_is_a_fork(engines):
    url = engines.bucket()
    bucket = engines.bucket_of(url)
    assert bucket.put_create_only("tile/0/000.p/1", b"a" * 32) is True
    assert bucket.put_create_only("tile/0/000.p/1", b"a" * 32) is False  # identical: success
    with pytest.raises(ForkError):
        bucket.put_create_only("tile/0/000.p/1", b"b" * 32)


# --- real frontends: oap-log serve, twice, on one database and one bucket ---------------------


class Frontends:
    def __init__(self, engines, tmp_path: Path) -> None:
        from tlog.service.keyfiles import write_private_key

        self.dsn, self.bucket = engines.database(), engines.bucket()
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.key = tmp_path / "log.key"
        write_private_key(self.key, SIGNER.to_skey())
        self.config = tmp_path / "log.toml"
        self.config.write_text(
            f'[log]\nstorage = "postgres"\npostgres_dsn = "{self.dsn}"\nbucket_url = "{self.bucket}"\n'
            f'bucket_credentials_file = "{engines.creds}"\nkey_file = "{self.key}"\norigin = "{SIGNER.name}"\n'
            'batch_interval_ms = 5\nrate_limit_write = 0\nrate_limit_read = 0\ncheckpoint_publish_interval = 0.1\n')
        self.tmp = tmp_path
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, Service] = {}

    def start(self, name: str) -> Service:
        from tests.support.services import BIN

        svc = Service(name, [str(BIN / "oap-log"), "serve", "--config", str(self.config), "--data",
                             str(self.tmp / name), "--port", "0"]).start()
        self.procs[name] = svc
        return svc

    def stop_all(self) -> None:
        for p in self.procs.values():
            p.kill()


async def _write_load(urls: list[str], stop: asyncio.Event, acked: dict[bytes, int], tag: str) -> int:
    """Single appends to whichever frontend is up; records what was acknowledged."""
    errors = 0
    n = 0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:
        while not stop.is_set() and n < 5000:
            n += 1
            entry = {"type": "commitment", "commitment": "sha256:" + os.urandom(32).hex()}
            url = random.choice(urls)
            try:
                async with s.post(url + "/v1/entries", json=entry) as r:
                    if r.status == 200:
                        doc = await r.json()
                        from tlog.formats.entries import canonical_entry

                        acked[canonical_entry(entry)] = doc["index"]
                    else:
                        errors += 1
            except (TimeoutError, aiohttp.ClientError):
                errors += 1
                await asyncio.sleep(0.05)
    return errors


def test_kill_9_of_a_frontend_and_of_the_integrator_under_load_loses_nothing(engines, tmp_path):
    f = Frontends(engines, tmp_path)
    try:
        one, two = f.start("one"), f.start("two")
        acked: dict[bytes, int] = {}

        async def scenario() -> None:
            stop = asyncio.Event()
            load = [asyncio.create_task(_write_load([one.url, two.url], stop, acked, str(k))) for k in range(4)]
            await asyncio.sleep(1.5)
            integrator = one  # the first frontend started holds the role
            os.kill(integrator.pid, signal.SIGKILL)  # kill -9 of the integrator mid-batch
            await asyncio.sleep(1.5)
            three = f.start("three")  # a replacement frontend
            await asyncio.sleep(1.0)
            os.kill(two.pid, signal.SIGKILL)  # and of the other frontend
            await asyncio.sleep(1.5)
            stop.set()
            await asyncio.gather(*load)
            f.procs["three"] = three

        asyncio.run(scenario())
        assert len(acked) > 50
        three = f.procs["three"]

        import psycopg

        with psycopg.connect(f.dsn) as conn:
            sequenced = conn.execute("SELECT next FROM oap_sequence").fetchone()[0]

        async def check() -> dict:
            async with aiohttp.ClientSession() as s:
                # the new integrator integrates what the killed one had sequenced: wait for it (bounded)
                for _ in range(300):
                    async with s.get(three.url + "/v1/info") as r:
                        info = await r.json()
                    if info.get("tree_size") == sequenced:
                        break
                    await asyncio.sleep(0.1)
                size = info["tree_size"]
                assert size == sequenced, f"the published tree stayed at {size} of {sequenced} sequenced entries"
                async with s.post(three.url + "/v1/proof/inclusion:batch",
                                  json={"indices": sorted(set(acked.values()))}) as r:
                    assert r.status == 200
                got = {}
                for start in range(0, size, 256):
                    width = min(256, size - start)
                    path = f"tile/entries/{start // 256:03d}" + (f".p/{width}" if width < 256 else "")
                    async with s.get(f"{three.url}/{path}") as r:
                        raw = await r.read()
                    pos, i = 0, start
                    while pos < len(raw):
                        k = int.from_bytes(raw[pos:pos + 2], "big")
                        got[raw[pos + 2:pos + 2 + k]] = i
                        pos, i = pos + 2 + k, i + 1
                return got

        stored = asyncio.run(check())
        lost = [e for e, i in acked.items() if stored.get(e) != i]
        assert lost == [], f"{len(lost)} acknowledged entries lost or moved"
        with psycopg.connect(f.dsn) as conn:  # one root per size, and the head covers everything
            assert conn.execute("SELECT count(*) FROM oap_checkpoints").fetchone()[0] == \
                conn.execute("SELECT count(DISTINCT size) FROM oap_checkpoints").fetchone()[0]
            assert conn.execute("SELECT next FROM oap_sequence").fetchone()[0] == len(stored)
    finally:
        f.stop_all()


def test_an_unreachable_bucket_is_503_and_recovers(engines, tmp_path):
    """The bucket refuses writes (here: credentials it does not know): writes answer 503
    while the entries stay sequenced; with the bucket back, the head is published."""
    dsn, url = engines.database(), engines.bucket()
    pub = TilePublisher(Bucket.from_config(url, key_id="nobody", secret="wrong"), checkpoint_interval=0.05)
    a = frontend(tmp_path, dsn, "a", bucket=pub, wait_timeout=3)
    try:
        with pytest.raises(Unavailable):
            a.append(entries("x", 10), SIGN)
        assert pub.errors > 0
        pub.bucket = engines.bucket_of(url)  # the bucket is back
        a.wait_timeout = 30
        r = a.append(entries("x", 10), SIGN)  # the same entries: their existing indices
        assert r.state.size == 10 and not any(r.fresh)
    finally:
        a.close()
    assert json.loads(json.dumps(r.indices)) == list(range(10))


def test_migrate_an_embedded_log_to_postgres_and_a_bucket(engines, tmp_path, server):
    """oap-log migrate: the same entries at the same indices, the same root and key; the
    bucket then verifies from anonymous reads alone, and the log goes on appending."""
    import subprocess

    from tlog.client.client import SyncLogClient
    from tlog.formats.entries import commitment_entry

    from tests.support.services import BIN

    src = tmp_path / "embedded"
    srv = server("--origin", SIGNER.name, data=src)
    with SyncLogClient(srv.url) as c:
        anchored = c.anchor_many([commitment_entry(leaf_hash(b"m%d" % i)) for i in range(700)])
        before = c.checkpoint()
    srv.stop()
    f = Frontends(engines, tmp_path)
    f.key.unlink()  # the key comes with the log
    r = subprocess.run([str(BIN / "oap-log"), "migrate", "--from-data", str(src), "--to-config", str(f.config),
                        "--to-data", str(tmp_path / "one")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"migrated": 700, "tree_size": 700, "storage": "postgres"}
    one = f.start("one")
    try:
        assert one.vkey == srv.vkey  # same key, same origin: clients and witnesses see the same log
        policy = TrustPolicy.for_log(srv.vkey)
        old = policy.verify_checkpoint(before).checkpoint
        with SyncLogClient(one.url, policy=policy) as c:
            now = policy.verify_checkpoint(c.checkpoint()).checkpoint
            assert (now.size, now.root) == (old.size, old.root)
            for a in anchored[::97]:
                policy.verify_bundle(c.bundle_for(a.index))
            assert c.anchor(commitment_entry(leaf_hash(b"after"))).index == 700
        assert one.stop() == 0  # a clean stop writes the last checkpoint to the bucket
    finally:
        f.stop_all()

    async def audit_bucket() -> object:
        async with aiohttp.ClientSession() as s:
            async def fetch(path: str) -> bytes:
                async with s.get(f"{f.bucket}/{path}") as resp:
                    assert resp.status == 200, path
                    return await resp.read()

            return await audit(fetch, policy, entries=True, previous=(old.size, old.root))

    assert asyncio.run(audit_bucket()).entries == 701
