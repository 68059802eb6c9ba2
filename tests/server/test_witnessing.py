"""The log side of witnessing (docs/architecture.md §3.4) against real witnesses on 127.0.0.1:
quorum, a dead witness, a hanging one, one that answers garbage, 409 resync,
and offline verification that enforces the policy's quorum."""
from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer
from click.testing import CliRunner

from tlog.client.client import LogClient
from tlog.client.verifier import TrustPolicy
from tlog.formats.ed25519 import generate_seed
from tlog.formats.entries import receipt_entry
from tlog.formats.hashing import leaf_hash
from tlog.formats.keys import CosignatureSigner
from tlog.formats.note import parse_note
from tlog.runtime.keyfiles import write_private_key
from tlog.server.api import build_app
from tlog.server.cli import main as log_cli
from tlog.server.config import LogConfig
from tlog.server.service import LogService, load_or_create_key
from witness.api import build_app as witness_app
from witness.config import WitnessConfig, WitnessedLog
from witness.service import WitnessService

ORIGIN = "witnessed.test/log"
SEED = generate_seed()


def entry(i: int) -> dict:
    return receipt_entry(leaf_hash(b"w" + i.to_bytes(8, "big")), SEED)


class Witness:
    def __init__(self, tmp: Path, name: str, log_vkey: str) -> None:
        data = tmp / name
        data.mkdir(parents=True)
        write_private_key(data / "witness.key", CosignatureSigner(name, generate_seed()).to_skey())
        self.cfg = WitnessConfig(data_dir=data, logs=(WitnessedLog(ORIGIN, log_vkey),), require_own_level="none",
                                 rate_limit=0)
        self.name = name
        self.server: TestServer | None = None
        self.port = 0
        self._hold: socket.socket | None = None

    async def start(self) -> Witness:
        self.svc = WitnessService.open(self.cfg)
        self.vkey = self.svc.signer.vkey
        self.server = TestServer(witness_app(self.svc), host="127.0.0.1", port=self.port)
        await self.server.start_server()
        self.port = self.server.port
        if self._hold is not None:
            self._hold.close()
            self._hold = None
        return self

    async def stop(self, *, keep_port: bool = False) -> None:
        """Down: connections to its port are refused. `keep_port` (it will `start` again on
        the same URL): the port stays bound, not listening, until then, so that nothing else
        on the machine (another test run beside this one) takes it and the restart finds it
        taken."""
        await self.server.close()
        self.svc.close()
        if keep_port:
            self._hold = socket.socket()
            self._hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp's own bind
            self._hold.bind(("127.0.0.1", self.port))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def hanging_server():
    """Accepts connections and never answers."""
    conns = []

    async def handle(r, w):
        conns.append(w)
        await asyncio.sleep(3600)

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    return srv, srv.sockets[0].getsockname()[1]


async def garbage_server():
    async def handle(request):
        await request.read()
        return web.Response(text="— nobody AAAA\nnot a cosignature at all\n")

    app = web.Application()
    app.router.add_post("/add-checkpoint", handle)
    ts = TestServer(app, host="127.0.0.1", port=0)
    await ts.start_server()
    return ts


async def open_log(tmp: Path, witnesses: list[tuple[str, str, str]], quorum: int, **kw):
    cfg = LogConfig(data_dir=tmp / "log", port=0, origin=ORIGIN, batch_interval_ms=5, witnesses=tuple(witnesses),
                    witness_quorum=quorum, **kw)
    svc = await LogService.open(cfg)
    server = TestServer(build_app(svc), host="127.0.0.1", port=0)
    await server.start_server()
    return svc, server, str(server.make_url("")).rstrip("/")


def cosigners(note: str) -> set[str]:
    return {s.name for s in parse_note(note).signatures[1:]}


async def test_quorum_dead_witness_recovery_and_offline_quorum(tmp_path):
    log_vkey = load_or_create_key(tmp_path / "log", ORIGIN).vkey
    ws = [await Witness(tmp_path, f"w{i}.test", log_vkey).start() for i in (1, 2, 3)]
    rows = [(w.name, w.vkey, w.url) for w in ws]
    svc, server, url = await open_log(tmp_path, rows, 2, witness_timeout=5.0, registry_url="https://registry.test",
                                      mirror_urls=("https://mirror.test/log",))
    policy_text = (tmp_path / "log" / "log.policy").read_text()
    assert "quorum local-witnesses" in policy_text and all(w.vkey in policy_text for w in ws)
    policy = TrustPolicy.from_text(policy_text)
    try:
        async with LogClient(url, policy=policy) as c:
            a = await c.anchor(entry(1))  # verified against the 2-of-3 quorum inside anchor()
            # The log returns once the quorum is in plus a short grace period, so under load
            # the third cosignature may land only on a later checkpoint.
            assert len(cosigners(a.checkpoint)) >= 2 and cosigners(a.checkpoint) <= {"w1.test", "w2.test", "w3.test"}
            cp = await c.checkpoint()
            assert len(cosigners(cp)) >= 2
            # its info names its neighbours: what the explorer's pages find each other with
            info = await c.info()
            assert info["witnesses"] == [{"name": w.name, "url": w.url} for w in ws]
            assert (info["registry_url"], info["mirrors"], info["public_url"]) == (
                "https://registry.test", ["https://mirror.test/log"], None)

            # offline: the CLI enforces the quorum of the policy file
            bundle = tmp_path / "a.tlog-proof"
            bundle.write_text(a.bundle)
            r = CliRunner().invoke(log_cli, ["verify", str(bundle), "--policy", str(tmp_path / "log" / "log.policy")])
            assert r.exit_code == 0 and "witnesses: w" in r.output
            lines = a.bundle.splitlines(keepends=True)
            stripped = tmp_path / "stripped.tlog-proof"
            drop = sorted(cosigners(a.checkpoint))[1:]  # leave a single cosignature: below the quorum of 2
            stripped.write_text("".join(l for l in lines if not any(l.startswith(f"— {n} ") for n in drop)))
            r = CliRunner().invoke(log_cli, ["verify", str(stripped), "--policy", str(tmp_path / "log" / "log.policy")])
            assert r.exit_code == 1 and "quorum not met" in r.output

            # one witness down: 2 of 3 still cosign
            await ws[2].stop()
            b = await c.anchor(entry(2))
            assert cosigners(b.checkpoint) == {"w1.test", "w2.test"}

            # two down: the entry is durable but not acknowledged; /checkpoint keeps the last quorum one
            await ws[1].stop(keep_port=True)
            before = policy.verify_checkpoint(await c.checkpoint()).checkpoint.size
            async with aiohttp.ClientSession() as s:
                async with s.post(url + "/v1/entries", json=entry(3)) as r:
                    assert r.status == 503 and (await r.json())["error"] == "maintenance"
                    assert int(r.headers["Retry-After"]) >= 1
            assert svc.storage.head().signed.size == before + 1  # durable (signed, not published)
            assert policy.verify_checkpoint(await c.checkpoint()).checkpoint.size == before

            # a witness comes back: the log republishes by itself, the retry gets the same entry cosigned
            await ws[1].start()
            deadline = asyncio.get_running_loop().time() + 60
            while policy.verify_checkpoint(await c.checkpoint()).checkpoint.size != before + 1:
                assert asyncio.get_running_loop().time() < deadline, "the log never republished"
                await asyncio.sleep(0.05)
            again = await c.anchor(entry(3))
            assert again.duplicate and again.index == before
            assert cosigners(again.checkpoint) >= {"w1.test", "w2.test"}
    finally:
        await server.close()
        await svc.close()

    # restart the log: it does not know the witnesses' sizes; 409 answers resync it
    svc, server, url = await open_log(tmp_path, rows, 2)
    try:
        async with LogClient(url, policy=policy) as c:
            d = await c.anchor(entry(4))
            assert cosigners(d.checkpoint) >= {"w1.test", "w2.test"}
    finally:
        await server.close()
        await svc.close()
        for w in ws[:2]:
            await w.stop()


async def test_hanging_and_garbage_witnesses_do_not_stall_appends(tmp_path):
    log_vkey = load_or_create_key(tmp_path / "log", ORIGIN).vkey
    good = [await Witness(tmp_path, f"g{i}.test", log_vkey).start() for i in (1, 2)]
    hang, hang_port = await hanging_server()
    garbage = await garbage_server()
    fake = CosignatureSigner("fake.test", generate_seed())
    rows = [(w.name, w.vkey, w.url) for w in good] + [
        ("hang.test", CosignatureSigner("hang.test", generate_seed()).vkey, f"http://127.0.0.1:{hang_port}"),
        ("fake.test", fake.vkey, str(garbage.make_url("")).rstrip("/")),
    ]
    # The witness timeout is long; appends must not wait for it once the quorum is in.
    svc, server, url = await open_log(tmp_path, rows, 2, witness_timeout=120.0)
    try:
        async with LogClient(url, policy=TrustPolicy.from_text((tmp_path / "log" / "log.policy").read_text())) as c:
            for i in range(5):
                a = await asyncio.wait_for(c.anchor(entry(100 + i)), 60)  # half the 120 s
                assert cosigners(a.checkpoint) == {"g1.test", "g2.test"}
        from prometheus_client import generate_latest

        metrics = generate_latest(svc.metrics.registry).decode()
        assert 'oap_log_witness_cosignatures_total{result="failed",witness="fake.test"}' in metrics
        assert 'oap_log_witness_cosignatures_total{result="ok",witness="g1.test"}' in metrics
    finally:
        await server.close()
        await svc.close()
        hang.close()
        await garbage.close()
        for w in good:
            await w.stop()


async def test_restored_log_halts_instead_of_forking(tmp_path):
    """Review finding: a witness that has cosigned a larger tree of this log than the
    log holds (an old backup restored) must stop the log signing, not just be skipped.
    The restored log serves what it had published at backup time, cosigned, and never a
    tree the witness quorum has not cosigned."""
    import sqlite3
    from contextlib import closing

    def copy(src: Path, dst: Path) -> None:
        """A copy of a SQLite database with what its write-ahead log holds (SQLite's backup API)."""
        with closing(sqlite3.connect(src)) as a, closing(sqlite3.connect(dst)) as b:
            a.backup(b)

    log_vkey = load_or_create_key(tmp_path / "log", ORIGIN).vkey
    w = await Witness(tmp_path, "h1.test", log_vkey).start()
    rows = [(w.name, w.vkey, w.url)]
    svc, server, url = await open_log(tmp_path, rows, 1)
    policy = TrustPolicy.from_text((tmp_path / "log" / "log.policy").read_text())
    try:
        async with LogClient(url) as c:
            await c.anchor(entry(1))
            cosigned = await c.checkpoint()
        copy(tmp_path / "log" / "log.db", tmp_path / "old.db")  # an old backup at size 1
        async with LogClient(url) as c:
            for i in range(2, 6):
                await c.anchor(entry(i))
    finally:
        await server.close()
        await svc.close()
    assert policy.verify_checkpoint(cosigned).checkpoint.size == 1

    async def restored(served: int, checkpoint: str | None) -> None:
        """Restore the backup, start the log: halted, serving `checkpoint` (None: nothing)."""
        for f in (tmp_path / "log").glob("log.db*"):
            f.unlink()
        copy(tmp_path / "old.db", tmp_path / "log" / "log.db")
        svc, server, url = await open_log(tmp_path, rows, 1)  # the restored log: size 1, the witness saw 5
        try:
            assert svc.appender.halted is not None  # before any write could sign a second root
            async with aiohttp.ClientSession() as s:
                async with s.post(url + "/v1/entries", json=entry(100)) as r:
                    body = await r.json()
                    assert r.status == 503 and "restored from an old backup" in body["message"]
                async with s.get(url + "/v1/info") as r:
                    info = await r.json()
                assert info["halted"] and info["published"] is (checkpoint is not None)
                assert info.get("checkpoint") == checkpoint and "has cosigned size 5" in info["halted_reason"]
                async with s.get(url + "/checkpoint") as r:
                    assert r.status == served and (checkpoint is None or await r.text() == checkpoint)
                async with s.get(url + "/v1/proof/inclusion", params={"index": "0"}) as r:
                    assert r.status == served
            assert svc.storage.head().signed.size == 1  # nothing new signed
        finally:
            await server.close()
            await svc.close()

    try:
        await restored(200, cosigned)  # what was published at backup time: witnessed, served
        # a published head without the quorum (as a restore made by an earlier version left it)
        with closing(sqlite3.connect(tmp_path / "old.db", isolation_level=None)) as db:
            db.execute("UPDATE meta SET value = (SELECT note FROM checkpoints WHERE size = 1) "
                       "WHERE key = 'published_note'")
        await restored(503, None)  # the unwitnessed restored tree is not served
    finally:
        await w.stop()


async def test_a_restore_goes_through_the_log_and_ends_with_its_checkpoint_cosigned(tmp_path):
    """`oap-log restore` into a log with witnesses: the import runs through the log's own
    appender, so its checkpoint is cosigned by the witnesses before the restore ends, and the
    restored log serves it at once (before, it recorded an uncosigned checkpoint and the log's
    next start had it cosigned)."""
    from tlog.storage.embedded import EmbeddedStorage

    log_vkey = load_or_create_key(tmp_path / "log", ORIGIN).vkey
    w = await Witness(tmp_path, "rs.test", log_vkey).start()
    try:
        svc, server, url = await open_log(tmp_path, [(w.name, w.vkey, w.url)], 1)
        try:
            async with LogClient(url) as c:
                for i in range(5):
                    await c.anchor(entry(300 + i))
                before = parse_note(await c.checkpoint()).text
        finally:
            await server.close()
            await svc.close()
        bk, target = tmp_path / "bk", tmp_path / "restored"
        r = await asyncio.to_thread(CliRunner().invoke, log_cli, ["backup", "--data", str(tmp_path / "log"),
                                                                  "--out", str(bk)])
        assert r.exit_code == 0, r.output
        config = tmp_path / "restore.toml"
        config.write_text(f'[log]\norigin = "{ORIGIN}"\nwitness_quorum = 1\n\n[[log.witnesses]]\nname = "{w.name}"\n'
                          f'vkey = "{w.vkey}"\nurl = "{w.url}"\n')
        r = await asyncio.to_thread(CliRunner().invoke, log_cli, ["restore", "--from", str(bk), "--config",
                                                                  str(config), "--data", str(target)])
        assert r.exit_code == 0, r.output
        store = EmbeddedStorage(target)
        try:
            head = store.open()
        finally:
            store.close()
        assert head.published is not None and head.published[0] == 5
        assert parse_note(head.published[1]).text == before and cosigners(head.published[1]) == {"rs.test"}
        TrustPolicy.from_text((target / "log.policy").read_text()).verify_checkpoint(head.published[1])
    finally:
        await w.stop()


async def test_a_log_restarted_with_its_witnesses_down_serves_what_they_cosigned(tmp_path):
    """The head published before a restart is served again at once, from the store, with the
    witnesses out of reach; writes wait for them (503); a quorum made stricter meanwhile is
    met again before anything is served."""
    log_vkey = load_or_create_key(tmp_path / "log", ORIGIN).vkey
    w1 = await Witness(tmp_path, "r1.test", log_vkey).start()
    w2 = await Witness(tmp_path, "r2.test", log_vkey).start()
    one, both = [(w1.name, w1.vkey, w1.url)], [(w.name, w.vkey, w.url) for w in (w1, w2)]
    svc, server, url = await open_log(tmp_path, one, 1)
    try:
        async with LogClient(url) as c:
            for i in range(3):
                await c.anchor(entry(200 + i))
            cosigned = await c.checkpoint()
    finally:
        await server.close()
        await svc.close()
    assert cosigners(cosigned) == {"r1.test"}
    await w1.stop(keep_port=True)
    try:
        svc, server, url = await open_log(tmp_path, one, 1, witness_timeout=1.0)
        try:
            async with aiohttp.ClientSession() as s:
                async with s.get(url + "/checkpoint") as r:
                    assert r.status == 200 and await r.text() == cosigned
                async with s.post(url + "/v1/entries", json=entry(203)) as r:
                    assert r.status == 503 and (await r.json())["error"] == "maintenance"
                async with s.get(url + "/checkpoint") as r:
                    assert r.status == 200 and await r.text() == cosigned
        finally:
            await server.close()
            await svc.close()
        # now both witnesses are required, and r1 is still down: the old head is not served
        svc, server, url = await open_log(tmp_path, both, 2, witness_timeout=1.0)
        policy = TrustPolicy.from_text((tmp_path / "log" / "log.policy").read_text())
        try:
            async with aiohttp.ClientSession() as s:
                async with s.get(url + "/checkpoint") as r:
                    assert r.status == 503
                await w1.start()
                deadline = asyncio.get_running_loop().time() + 60
                while True:  # cosigned again by both, with no new entry
                    async with s.get(url + "/checkpoint") as r:
                        if r.status == 200:
                            note = await r.text()
                            break
                    assert asyncio.get_running_loop().time() < deadline, "never cosigned again"
                    await asyncio.sleep(0.05)
            assert policy.verify_checkpoint(note).checkpoint.size >= 3 and cosigners(note) == {"r1.test", "r2.test"}
            async with LogClient(url, policy=policy) as c:  # the write refused during the outage, again
                again = await c.anchor(entry(203))
            assert again.duplicate and again.index == 3
        finally:
            await server.close()
            await svc.close()
    finally:
        await w1.stop()
        await w2.stop()


async def test_a_witness_with_an_mldsa_key_round_trip_and_counts_once(tmp_path):
    """witness (Ed25519 + ML-DSA-44) -> log -> bundle -> `oap-log verify` with the log's policy:
    the ML-DSA-44 cosignature verifies and is shown as such; the witness's two keys count as
    one witness toward the 2-of-2 quorum, so its two cosignatures alone never meet it."""
    log_vkey = load_or_create_key(tmp_path / "log", ORIGIN).vkey
    pq = Witness(tmp_path, "pq.test", log_vkey)
    pq.cfg = pq.cfg.replace(cosigners=("ed25519", "mldsa44"))
    await pq.start()
    classic = await Witness(tmp_path, "ed.test", log_vkey).start()
    pq_vkey = pq.svc.signers[1].vkey
    rows = [(pq.name, pq.vkey, pq.url), ("pq.test-mldsa44", pq_vkey, pq.url), (classic.name, classic.vkey, classic.url)]
    svc, server, url = await open_log(tmp_path, rows, 2, witness_timeout=10.0)
    policy_file = tmp_path / "log" / "log.policy"
    text = policy_file.read_text()
    assert "group pq.test-any any pq.test pq.test-mldsa44" in text and "local-witnesses 2 pq.test-any ed.test" in text
    policy = TrustPolicy.from_text(text)
    try:
        async with LogClient(url, policy=policy) as c:
            a = await c.anchor(entry(1))
            got = cosigners(a.checkpoint)
            assert {"pq.test", "ed.test"} <= got  # both keys of pq.test carry its name
            assert sum(1 for s in parse_note(a.checkpoint).signatures if s.name == "pq.test") == 2
            v = policy.verify_checkpoint(a.checkpoint)
            assert v.witnesses == {"pq.test", "pq.test-mldsa44", "ed.test"} and v.post_quantum == {"pq.test-mldsa44"}
        bundle = tmp_path / "a.tlog-proof"
        bundle.write_text(a.bundle)
        r = CliRunner().invoke(log_cli, ["verify", str(bundle), "--policy", str(policy_file)])
        assert r.exit_code == 0 and "pq.test-mldsa44 (ML-DSA-44)" in r.output, r.output
        r = CliRunner().invoke(log_cli, ["verify", "--json", str(bundle), "--policy", str(policy_file)])
        assert '"post_quantum":["pq.test-mldsa44"]' in r.output

        lines = a.bundle.splitlines(keepends=True)
        only_pq = tmp_path / "only-pq.tlog-proof"  # both of pq.test's cosignatures, none of ed.test's
        only_pq.write_text("".join(ln for ln in lines if not ln.startswith("— ed.test ")))
        r = CliRunner().invoke(log_cli, ["verify", str(only_pq), "--policy", str(policy_file)])
        assert r.exit_code == 1 and "quorum not met" in r.output

        pq_sig = next(s for s in parse_note(a.checkpoint).signatures if s.name == "pq.test" and len(s.blob) > 100)
        mixed = tmp_path / "mixed.tlog-proof"  # ML-DSA-44 from pq.test and Ed25519 from ed.test: quorum met
        mixed.write_text("".join(ln for ln in lines if not (ln.startswith("— pq.test ") and ln != pq_sig.line())))
        r = CliRunner().invoke(log_cli, ["verify", str(mixed), "--policy", str(policy_file)])
        assert r.exit_code == 0 and "(ML-DSA-44)" in r.output, r.output

        tampered = tmp_path / "tampered.tlog-proof"  # a flipped bit in the ML-DSA-44 signature
        blob = bytearray(pq_sig.blob)
        blob[500] ^= 1
        bad_line = type(pq_sig)(pq_sig.name, pq_sig.key_id, bytes(blob)).line()
        tampered.write_text(a.bundle.replace(pq_sig.line(), bad_line))
        r = CliRunner().invoke(log_cli, ["verify", str(tampered), "--policy", str(policy_file)])
        assert r.exit_code == 1 and "does not verify" in r.output
    finally:
        await server.close()
        await svc.close()
        await pq.stop()
        await classic.stop()
