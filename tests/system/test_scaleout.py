"""The scale-out backend against real servers: PostgreSQL and SeaweedFS started by the
session (tests/conftest.py `engines`), log frontends as storage objects and as real
`oap-log serve` processes on 127.0.0.1.

Checked: exact sequencing and dedup across frontends; roots against pymerkle; integrator
failover; a database restart (503, then recovery, nothing acknowledged lost); kill -9 of
a frontend and of the integrator under write load; an integrator killed between the
compare-and-swap and publication; an integrator frozen (SIGSTOP) under load, replaced
within FREEZE_DEADLINE, then resumed and stopped (the bucket's checkpoint never goes back
or forks); every partial tile each checkpoint of the bucket needs kept until its full tile
exists; one role gauge at 1; and the log verified from the bucket alone. The contract
every driver keeps is tested in tests/storage/test_drivers.py.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from pymerkle import InmemoryTree

from tlog.client.audit import audit
from tlog.client.client import SyncLogClient
from tlog.client.verifier import TrustPolicy
from tlog.errors import ForkError, Unavailable
from tlog.formats.entries import commitment_entry
from tlog.formats.hashing import leaf_hash
from tlog.merkle.tree import memory_view
from tlog.server.appender import Appender
from tlog.server.publication import BucketTarget
from tlog.storage.bucket import TilePublisher, changed_tiles
from tlog.storage.interface import LogState
from tlog.storage.postgres import PostgresStorage

from tests.support.services import Service, fetch_entries
from tests.support.signers import checkpoint_signer, make_signer
from tests.support.waiting import until

pytestmark = pytest.mark.slow

SIGNER = make_signer("scale.test/log")
SIGN = checkpoint_signer(SIGNER)


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


@asynccontextmanager
async def frontend(tmp_path: Path, dsn: str, name: str, **kw) -> AsyncIterator[Appender]:
    """A frontend in this process: the appender on a PostgreSQL driver (its own hash cache)."""
    app = Appender(PostgresStorage(dsn, tmp_path / name, name=name), SIGN, batch_interval=0.005, **kw)
    await app.start()
    try:
        yield app
    finally:
        await app.close()


async def test_two_frontends_sequence_exactly_once_and_agree_with_pymerkle(engines, tmp_path):
    dsn = engines.database()
    async with frontend(tmp_path, dsn, "a") as a, frontend(tmp_path, dsn, "b") as b:
        results: list[tuple[list[bytes], object]] = []

        async def writer(app: Appender, key: str) -> None:
            rng = random.Random(key)
            for k in range(12):  # overlapping batches: both frontends submit many of the same entries
                batch = entries("e", 400)[rng.randrange(0, 300):][:rng.randrange(1, 150)] + entries(key, 20)[k:k + 1]
                results.append((batch, await app.add_many(batch)))

        await asyncio.gather(writer(a, "a"), writer(b, "b"))
        index: dict[bytes, int] = {}
        for batch, r in results:
            assert r.state.size > max(r.indices)  # answered only once a published checkpoint covers it
            for data, i in zip(batch, r.indices):
                assert index.setdefault(data, i) == i  # one index per entry, whichever frontend asked
        assert sorted(index.values()) == list(range(len(index)))  # contiguous, no gaps, no repeats
        ordered = sorted(index, key=index.get)
        ref = InmemoryTree(algorithm="sha256")
        for d in ordered:
            ref.append_entry(d)
        await until(lambda: a.state.size == b.state.size == len(ordered), what="both frontends at the head")
        expected = memory_view([leaf_hash(d) for d in ordered])
        assert a.state.root == b.state.root == ref.get_root(len(ordered)) == expected.root
        for app in (a, b):  # proofs from either frontend's local hash files
            assert app.state.view.inclusion_proof(3) == expected.inclusion_proof(3)
        assert a.integrating != b.integrating  # one role


async def test_the_integrator_role_moves_when_its_holder_goes(engines, tmp_path):
    dsn = engines.database()
    async with frontend(tmp_path, dsn, "a") as a:
        await until(lambda: a.integrating, what="a takes the role")
        async with frontend(tmp_path, dsn, "b") as b:
            await a.add_many(entries("1", 5))
            assert a.integrating and not b.integrating
            await a.close()  # gives the role up: another frontend takes it
            r = await b.add_many(entries("2", 5))
            assert b.integrating and r.state.size == 10 and b.lost_role == 0


async def test_with_the_bucket_down_every_frontend_answers_503_then_recovers(engines, tmp_path):
    """The integrator's bucket cannot be read when it takes the role (it must check that the
    bucket holds no more of the log than the store before it signs anything): a write on
    another frontend is answered 503 by the failed attempt (recorded in the database for every
    frontend), not held until a timeout; with the bucket back, the same entries are published
    at their indices."""
    from tlog.storage.bucket import Bucket

    dsn, url = engines.database(), engines.bucket()
    down = TilePublisher(Bucket.from_config(url, key_id="nobody", secret="wrong"))
    async with frontend(tmp_path, dsn, "a", targets=[BucketTarget(down, interval=0.05)]) as a:
        await until(lambda: a.integrating, what="a takes the role")
        async with frontend(tmp_path, dsn, "b", targets=[BucketTarget(TilePublisher(engines.bucket_of(url)))]) as b:
            with pytest.raises(Unavailable) as refused:
                await b.add_many(entries("x", 300))
            assert "bucket" in refused.value.message and "in time" not in refused.value.message
            down.bucket = engines.bucket_of(url)  # the bucket is back
            got = await b.add_many(entries("x", 300))
            assert got.indices == list(range(300)) and not any(got.fresh) and got.state.size == 300


async def test_a_new_frontend_serves_from_the_buckets_right_edge_and_fills_the_rest_as_it_reads(engines, tmp_path):
    """A frontend joining a log published to a bucket holds only the right edge of its tree at
    first (the bucket's partial tiles, checked against the root the database recorded), not a
    hash cache built from every entry: proofs of old entries are right (pymerkle) and fill the
    tiles they needed into its cache; its appends, once it holds the role, extend the tree."""
    dsn, url = engines.database(), engines.bucket()
    n = 256 * 256 + 3 * 256 + 77  # full tiles at tile levels 0 and 1, partial ones at 0, 1 and 2
    data = entries("old", n)
    async with frontend(tmp_path, dsn, "a", targets=[BucketTarget(TilePublisher(engines.bucket_of(url)),
                                                                  interval=0.05)]) as a:
        for k in range(0, n, 8192):
            await a.add_many(data[k:k + 8192])
    assert TilePublisher(engines.bucket_of(url)).checkpoint_size() == n  # closed: all of it is in the bucket
    ref = InmemoryTree(algorithm="sha256")
    for d in data:
        ref.append_entry(d)

    def path(index: int, size: int) -> list[bytes]:
        return [bytes.fromhex(h) for h in ref.prove_inclusion(index + 1, size).serialize()["path"]][1:]

    storage = PostgresStorage(dsn, tmp_path / "b", name="b", tiles=engines.bucket_of(url).get)
    b = Appender(storage, SIGN, batch_interval=0.005,
                 targets=[BucketTarget(TilePublisher(engines.bucket_of(url)), interval=0.05)])
    await b.start()
    try:
        assert b.state is not None and b.state.size == n and b.state.root == ref.get_root(n)
        lazy = storage.hashes
        assert lazy.missing == n // 256 + 1 and lazy.fetched == 0  # no full tile of either level
        assert lazy.files.read(0, 5) == bytes(32)  # a hole: no old leaf hash was read
        leaves = [leaf_hash(d) for d in data]
        for index in (5, 1000, 65_535, 65_600, n - 1):
            assert b.state.view.inclusion_proof(index) == path(index, n), index
        assert lazy.files.read(0, 5) == leaves[5]  # now cached
        assert 0 < lazy.fetched < n // 256 and lazy.missing == n // 256 + 1 - lazy.fetched
        more = entries("new", 300)
        r = await b.add_many(more)  # b integrates (a is gone): from the edge it loaded
        assert r.indices == list(range(n, n + 300)) and b.integrating
        for d in more:
            ref.append_entry(d)
        assert r.state.size == n + 300 and r.state.root == ref.get_root(n + 300)
        for index in (7, n + 299):
            assert r.state.view.inclusion_proof(index) == path(index, n + 300), index
    finally:
        await b.close()
    # Restarted, its cache (with holes) is dropped and the edge loaded again; with no bucket
    # configured any more, the cache is built whole from the entries.
    again = PostgresStorage(dsn, tmp_path / "b", name="b", tiles=engines.bucket_of(url).get)
    again.open()
    try:
        assert again.extend(n + 300) == ref.get_root(n + 300)
        assert again.hashes.missing > 0 and again.hashes.files.read(0, 5) == bytes(32)
    finally:
        again.close()
    whole = PostgresStorage(dsn, tmp_path / "b", name="b")
    whole.open()
    try:
        assert whole.extend(n + 300) == ref.get_root(n + 300)
        assert whole.hashes.missing == 0 and whole.hashes.files.read(0, 5) == leaves[5]
        assert not (tmp_path / "b" / "hashes" / "sparse").exists()
    finally:
        whole.close()


async def test_a_database_restart_is_503_then_recovers_with_nothing_lost(engines, tmp_path):
    # Its own server: restarting the shared one would disturb the other tests.
    from tlog.cli.engines import Postgres

    root = Path("/tmp") / f"pg-{os.getpid()}-restart"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(mode=0o755)
    pg = Postgres(root / "pg").start()
    try:
        async with frontend(tmp_path, pg.dsn, "a", wait_timeout=5) as a:
            acked = list((await a.add_many(entries("before", 50))).indices)
            pg.kill()
            with pytest.raises(Unavailable):
                await a.add_many(entries("during", 10))
            pg.start()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while True:  # writes recover once the database is back (the driver reconnects)
                try:
                    r = await a.add_many(entries("after", 50))
                    break
                except Unavailable:
                    assert loop.time() < deadline, "writes did not recover after the restart"
                    await asyncio.sleep(0.2)
            acked += r.indices
            assert r.state.size >= 100 and set(acked) <= set(range(r.state.size))
    finally:
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_tiles_bundles_and_checkpoint_in_the_bucket_verify_with_no_log_running(engines, tmp_path, go_tlogverify):
    dsn, url = engines.database(), engines.bucket()

    async def write() -> LogState:
        pub = BucketTarget(TilePublisher(engines.bucket_of(url)), interval=0.05)
        async with frontend(tmp_path, dsn, "a", targets=[pub]) as a:
            for k in range(5):
                await a.add_many(entries(f"b{k}", 130))  # crosses full tiles and leaves partial ones
            assert a.state is not None
            return a.state

    state = asyncio.run(write())  # closed: the last checkpoint is in the bucket
    policy = TrustPolicy.for_log(SIGNER.vkey)
    first = memory_view([leaf_hash(e) for e in entries("b0", 130)])

    async def fetch_all() -> object:
        async with aiohttp.ClientSession() as s:  # anonymous reads, as any static reader
            async def fetch(path: str) -> bytes:
                async with s.get(f"{url}/{path}") as r:
                    assert r.status == 200, path
                    return await r.read()

            return await audit(fetch, policy, entries=True, previous=(130, first.root))

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
        from tlog.runtime.keyfiles import write_private_key

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

    def start(self, name: str, crash: str | None = None) -> Service:
        """A frontend; with `crash`, its crash points armed (tests/crashserve.py)."""
        import sys

        from tests.support.services import BIN

        cmd = [str(BIN / "oap-log")] if crash is None else [sys.executable, "-m", "tests.crashserve", crash]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        svc = Service(name, [*cmd, "serve", "--config", str(self.config), "--data", str(self.tmp / name),
                             "--port", "0"], env).start()
        self.procs[name] = svc
        return svc

    def stop_all(self) -> None:
        for p in self.procs.values():
            p.kill()


async def _write_load(urls: list[str], stop: asyncio.Event, acked: dict[bytes, int], tag: str,
                      timeout: float = 20) -> int:
    """Single appends to whichever frontend is up; records what was acknowledged."""
    errors = 0
    n = 0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s:
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
            integrator = await wait_for_one_integrator([one, two])
            other = two if integrator is one else one
            stop = asyncio.Event()
            load = [asyncio.create_task(_write_load([one.url, two.url], stop, acked, str(k))) for k in range(4)]
            await until(lambda: len(acked) >= 30, 60, "writes acknowledged before the kill")
            os.kill(integrator.pid, signal.SIGKILL)  # kill -9 of the integrator mid-batch
            killed = len(acked)
            await until(lambda: len(acked) >= killed + 20, 60, "writes acknowledged by the other frontend")
            three = f.start("three")  # a replacement frontend
            f.procs["three"] = three
            load.append(asyncio.create_task(_write_load([three.url], stop, acked, "three")))
            started = len(acked)
            await until(lambda: len(acked) >= started + 10, 60, "writes acknowledged with three frontends")
            os.kill(other.pid, signal.SIGKILL)  # and of the other frontend, the integrator now
            killed = len(acked)
            await until(lambda: len(acked) >= killed + 10, 60, "writes acknowledged by the replacement alone")
            stop.set()
            await asyncio.gather(*load)

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


def test_migrate_an_embedded_log_to_postgres_and_a_bucket(engines, tmp_path, server):
    """oap-log migrate: the same entries at the same indices, the same root and key; the
    bucket then verifies from anonymous reads alone, and the log goes on appending."""
    import sqlite3
    import subprocess

    import psycopg

    from tlog.formats.ed25519 import generate_seed
    from tlog.formats.entries import receipt_entry

    from tests.support.services import BIN

    src = tmp_path / "embedded"
    srv = server("--origin", SIGNER.name, data=src)
    seed = generate_seed()
    with SyncLogClient(srv.url) as c:
        anchored = c.anchor_many([commitment_entry(leaf_hash(b"m%d" % i)) for i in range(690)] +
                                 [receipt_entry(leaf_hash(b"r%d" % i), seed) for i in range(10)])
        before = c.checkpoint()
    srv.stop()
    with sqlite3.connect(src / "log.db") as db:
        logged = dict(db.execute("SELECT idx, logged_at FROM receipts"))
    assert sorted(logged) == list(range(690, 700))
    f = Frontends(engines, tmp_path)
    f.key.unlink()  # the key comes with the log
    r = subprocess.run([str(BIN / "oap-log"), "migrate", "--from-data", str(src), "--to-config", str(f.config),
                        "--to-data", str(tmp_path / "one")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"migrated": 700, "tree_size": 700, "storage": "postgres"}
    import urllib.request

    with urllib.request.urlopen(f.bucket + "/checkpoint", timeout=10) as got:  # published through the appender
        assert TrustPolicy.for_log(srv.vkey).verify_checkpoint(got.read().decode()).checkpoint.size == 700
    with psycopg.connect(f.dsn) as conn:  # the receipts keep the time the log first logged them
        assert dict(conn.execute("SELECT idx, logged_at FROM oap_receipts").fetchall()) == logged
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


# --- takeover: the role, the signed head, the bucket's checkpoint ------------------------------


async def role_gauges(svcs: list[Service]) -> list[float]:
    """oap_log_integrator of each frontend (0 for one that does not answer)."""
    out = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s:
        for svc in svcs:
            try:
                async with s.get(svc.url + "/metrics") as r:
                    text = await r.text()
                out.append(next(float(line.split()[1]) for line in text.splitlines()
                                if line.startswith("oap_log_integrator ")))
            except (TimeoutError, aiohttp.ClientError, StopIteration):
                out.append(0.0)
    return out


async def wait_for_one_integrator(svcs: list[Service], seconds: float = 60) -> Service:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        gauges = await role_gauges(svcs)
        if gauges.count(1.0) == 1:
            return svcs[gauges.index(1.0)]
        assert loop.time() < deadline, f"no single integrator: {gauges}"
        await asyncio.sleep(0.05)


def bucket_size(url: str) -> int:
    """The size of the checkpoint object in the bucket (anonymous read; 0 if none), signature checked."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url + "/checkpoint", timeout=5) as r:
            note = r.read().decode()
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return 0
        raise
    return TrustPolicy.for_log(SIGNER.vkey).verify_checkpoint(note).checkpoint.size


def test_an_integrator_killed_between_the_compare_and_swap_and_publication_is_taken_over(engines, tmp_path):
    """The integrator records a checkpoint by compare-and-swap and dies before publishing it:
    the next holder brings its hash cache to that size and publishes that very checkpoint,
    with no new entry, and the write waiting on another frontend is answered."""
    f = Frontends(engines, tmp_path)
    try:
        one = f.start("one")
        with SyncLogClient(one.url) as c:
            for i in range(3):
                c.anchor(commitment_entry(leaf_hash(b"first %d" % i)))
        assert one.stop() == 0  # a clean stop gives the role up
        armed = f.start("armed", crash="after_record:1")  # dies right after its next compare-and-swap

        async def scenario() -> tuple[int, dict]:
            assert await wait_for_one_integrator([armed]) is armed
            three = f.start("three")
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
                async with s.post(three.url + "/v1/entries", json=commitment_entry(leaf_hash(b"the one"))) as r:
                    status, doc = r.status, await r.json()  # armed integrates it, then dies
            return status, doc

        status, doc = asyncio.run(scenario())
        assert armed.proc.wait(60) == 137  # it died at the crash point, not otherwise
        assert status == 200, doc
        assert doc["index"] == 3 and doc["tree_size"] == 4
        import psycopg

        with psycopg.connect(f.dsn) as conn:
            signed, published, sequenced = conn.execute(
                "SELECT h.size, h.published_size, s.next FROM oap_head h, oap_sequence s").fetchone()
            assert (signed, published, sequenced) == (4, 4, 4)  # nothing new was needed to publish it
            assert "after_record" not in conn.execute("SELECT failure FROM oap_head").fetchone()[0]
        deadline = time.monotonic() + 60
        while bucket_size(f.bucket) != 4:
            assert time.monotonic() < deadline, "the bucket's checkpoint never reached 4"
            time.sleep(0.05)
    finally:
        f.stop_all()


def test_two_would_be_integrators_the_role_gauge_is_1_on_exactly_one(engines, tmp_path):
    """Two frontends contend for the role: at every sample exactly one reports it, also while
    the other restarts; when the holder stops, never two, and then the other one."""
    f = Frontends(engines, tmp_path)
    try:
        one, two = f.start("one"), f.start("two")

        async def scenario() -> list[list[float]]:
            holder = await wait_for_one_integrator([one, two])
            other_name = "two" if holder is one else "one"
            samples = []
            for k in range(120):
                if k == 40:  # the other one restarts, contending again as it comes up
                    assert f.procs[other_name].stop() == 0
                    f.start(other_name)
                samples.append(await role_gauges([holder, f.procs[other_name]]))
                await asyncio.sleep(0.02)
            assert all(g == [1.0, 0.0] for g in samples), [g for g in samples if g != [1.0, 0.0]][:5]
            assert holder.stop() == 0  # the holder goes: never two, then the other one
            other = f.procs[other_name]
            after = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while True:
                g = await role_gauges([other])
                after.append(g)
                if g == [1.0]:
                    break
                assert loop.time() < deadline, "the other frontend never took the role"
                await asyncio.sleep(0.02)
            return samples + after

        samples = asyncio.run(scenario())
        assert all(sum(g) <= 1 for g in samples)
    finally:
        f.stop_all()


# --- a frozen integrator; the partial tiles of every checkpoint the bucket published --------


class BucketWatch:
    """Every checkpoint the bucket serves, recorded as it changes (anonymous reads, signature
    checked): whether it ever went backwards or showed two roots for one size, and, for each
    one, whether every partial tile it needs could be read until its full tile existed."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.seen: list[tuple[int, bytes]] = []  # (size, root), in the order they were served
        self.roots: dict[int, bytes] = {}
        self.went_back: list[tuple[int, int]] = []
        self.forks: list[int] = []
        self.missing: list[str] = []  # partial tiles gone while their full tile did not exist
        self._open: dict[str, str] = {}  # partial tile path -> its full tile's path, not known to exist yet

    async def poll(self, s: aiohttp.ClientSession) -> None:
        from tlog.formats.tiles import entries_path, tile_path
        from tlog.storage.bucket import partial_tiles

        async with s.get(self.url + "/checkpoint") as r:
            note = (await r.read()).decode() if r.status == 200 else None
        if note is not None:
            cp = TrustPolicy.for_log(SIGNER.vkey).verify_checkpoint(note).checkpoint
            if not self.seen or self.seen[-1] != (cp.size, cp.root):
                if self.seen and cp.size < self.seen[-1][0]:
                    self.went_back.append((self.seen[-1][0], cp.size))
                if self.roots.setdefault(cp.size, cp.root) != cp.root:
                    self.forks.append(cp.size)
                self.seen.append((cp.size, cp.root))
                for level, index, width in partial_tiles(cp.size):
                    path = entries_path(index, width) if level < 0 else tile_path(level, index, width)
                    full = entries_path(index, 256) if level < 0 else tile_path(level, index, 256)
                    self._open[path] = full
        for path, full in list(self._open.items()):  # still needed: there, or its full tile is
            async with s.get(f"{self.url}/{path}") as r:
                if r.status == 200:
                    continue
            async with s.get(f"{self.url}/{full}") as r:
                if r.status == 200:
                    del self._open[path]
                    continue
            self.missing.append(path)
            del self._open[path]

    async def run(self, stop: asyncio.Event) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s:
            while not stop.is_set():
                await self.poll(s)
                await asyncio.sleep(0.01)
            await self.poll(s)


async def _append_batches(url: str, stop: asyncio.Event, acked: dict[bytes, int], tag: str, *,
                          sizes: tuple[int, int] = (1, 20), pause: float = 0.05, timeout: float = 5) -> None:
    """Batches of a few entries to one frontend, `pause` seconds apart, until `stop` (bounded:
    1,000 requests); records what was acknowledged."""
    from tlog.formats.entries import canonical_entry

    rng = random.Random(tag)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s:
        for _ in range(1000):
            if stop.is_set():
                return
            await asyncio.sleep(pause)
            batch = [commitment_entry(leaf_hash(os.urandom(16))) for _ in range(rng.randint(*sizes))]
            try:
                async with s.post(url + "/v1/entries:batch", json={"entries": batch}) as r:
                    if r.status == 200:
                        for e, res in zip(batch, (await r.json())["results"]):
                            acked[canonical_entry(e)] = res["index"]
            except (TimeoutError, aiohttp.ClientError):
                await asyncio.sleep(0.05)


def test_every_partial_tile_a_bucket_checkpoint_needs_stays_until_its_full_tile_exists(engines, tmp_path):
    """Two frontends, small batches (many checkpoints inside each tile), the role handed over
    in the middle: every checkpoint the bucket served is recorded as it changes, and every
    partial tile each one needs is read until its full tile exists (C2SP tlog-tiles: a log
    MUST serve the partial tiles of every tree size it produced a checkpoint for, and MAY
    delete one only once the full tile is available). None is missing; the bucket never went
    backwards; the bucket alone holds every acknowledged entry at its index."""
    f = Frontends(engines, tmp_path)
    watch = BucketWatch(f.bucket)
    acked: dict[bytes, int] = {}
    try:
        one, two = f.start("one"), f.start("two")

        async def scenario() -> None:
            holder = await wait_for_one_integrator([one, two])
            other = two if holder is one else one
            stop_watch, stop_load = asyncio.Event(), asyncio.Event()
            watcher = asyncio.create_task(watch.run(stop_watch))
            load = [asyncio.create_task(_append_batches(u, stop_load, acked, u))
                    for u in (one.url, two.url)]
            await until(lambda: len(acked) >= 700, 120, "700 entries acknowledged")
            assert holder.stop() == 0  # the role moves: the next holder takes the bucket over
            await until(lambda: len(acked) >= 1500, 120, "1500 entries acknowledged")
            stop_load.set()
            await asyncio.gather(*load)
            top = max(acked.values())
            await until(lambda: watch.seen and watch.seen[-1][0] > top, 60, "the bucket covering every write")
            stop_watch.set()
            await watcher
            assert (await role_gauges([other]))[0] == 1.0

        asyncio.run(scenario())
        assert watch.missing == [], f"partial tiles deleted before their full tile existed: {watch.missing[:10]}"
        assert len(watch.seen) > 20, watch.seen  # many checkpoints inside each tile
        assert watch.went_back == [] and watch.forks == [], (watch.went_back, watch.forks)
        stored = asyncio.run(fetch_entries(f.bucket, watch.seen[-1][0]))
        lost = [e for e, i in acked.items() if stored[i] != e]
        assert lost == [], f"{len(lost)} acknowledged entries are not in the bucket at their index"
    finally:
        f.stop_all()


FREEZE_DEADLINE = 10.0  # seconds: writes resume this soon after the integrator freezes


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_a_frozen_integrator_is_replaced_and_never_moves_the_bucket_back(engines, tmp_path, go_tlogverify, stop):
    """The integrator is stopped (SIGSTOP: a paused VM, a hung process, its TCP sessions kept
    up by the kernel) under write load on both frontends. Within FREEZE_DEADLINE the other
    frontend holds the role and acknowledges writes, with no operator action. The old one
    resumes (SIGCONT), finds it lost the role, and is then stopped (SIGTERM: a clean stop,
    which writes the bucket's last checkpoint only while holding the role; or kill -9).
    Throughout, the bucket's checkpoint never went backwards or forked, and at the end every
    acknowledged entry verifies from the bucket alone (Go's sumdb/tlog, and the entries read
    from its bundles)."""
    import subprocess

    f = Frontends(engines, tmp_path)
    watch = BucketWatch(f.bucket)
    acked: dict[bytes, int] = {}
    try:
        one, two = f.start("one"), f.start("two")

        async def scenario() -> None:
            old = await wait_for_one_integrator([one, two])
            new = two if old is one else one
            stop_watch, stop_load = asyncio.Event(), asyncio.Event()
            watcher = asyncio.create_task(watch.run(stop_watch))
            load = [asyncio.create_task(_write_load([u], stop_load, acked, f"{u}{k}", timeout=5))
                    for k in range(2) for u in (one.url, two.url)]  # those on the frozen one stall, time out
            await until(lambda: len(acked) >= 100, 60, "writes acknowledged before the freeze")
            loop = asyncio.get_running_loop()
            os.kill(old.pid, signal.SIGSTOP)
            frozen_at = loop.time()
            try:
                async with aiohttp.ClientSession() as s:
                    async def acknowledged() -> bool:  # a write sent after the freeze, to the other frontend
                        left = frozen_at + FREEZE_DEADLINE - loop.time()
                        entry = commitment_entry(leaf_hash(os.urandom(16)))
                        try:
                            async with s.post(new.url + "/v1/entries", json=entry,
                                              timeout=aiohttp.ClientTimeout(total=max(0.1, left))) as r:
                                return r.status == 200
                        except (TimeoutError, aiohttp.ClientError):
                            return False

                    await until(acknowledged, FREEZE_DEADLINE, "a write acknowledged after the integrator froze",
                                every=0.1)
                assert (await role_gauges([new]))[0] == 1.0
                frozen = len(acked)
                await until(lambda: len(acked) >= frozen + 100, 60, "more writes under the frozen integrator")
            finally:
                os.kill(old.pid, signal.SIGCONT)
            await until(lambda: "integrator role lost" in old.log_text, 60, "the old integrator noticing")
            resumed = len(acked)
            await until(lambda: len(acked) >= resumed + 200, 60, "writes after it resumed")
            assert await role_gauges([one, two]) in ([1.0, 0.0], [0.0, 1.0])
            if stop == "SIGTERM":
                assert old.stop() == 0
            else:
                old.kill()
            stopped = len(acked)
            await until(lambda: len(acked) >= stopped + 100, 60, "writes after it stopped")
            stop_load.set()
            await asyncio.gather(*load)
            top = max(acked.values())
            await until(lambda: watch.seen and watch.seen[-1][0] > top, 60, "the bucket covering every write")
            stop_watch.set()
            await watcher

        asyncio.run(scenario())
        assert watch.went_back == [], f"the bucket's checkpoint went backwards: {watch.went_back[:5]}"
        assert watch.forks == [], f"the bucket showed two roots for sizes {watch.forks}"
        size = watch.seen[-1][0]
        out = subprocess.run([str(go_tlogverify), f.bucket, SIGNER.vkey, "200"], capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0 and out.stdout.startswith(f"OK size={size} "), out.stdout + out.stderr
        stored = asyncio.run(fetch_entries(f.bucket, size))
        lost = [e for e, i in acked.items() if stored[i] != e]
        assert lost == [], f"{len(lost)} acknowledged entries are not in the bucket at their index"
    finally:
        f.stop_all()
