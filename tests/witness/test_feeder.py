"""Feeder (pull) mode against a real `oap-log serve` and against lying logs (docs/architecture.md §4)."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess

from aiohttp import web
from aiohttp.test_utils import TestServer

from tlog.client.client import LogClient
from tlog.formats.encoding import b64dec
from tlog.formats.entries import commitment_entry
from tlog.formats.keys import cosigner_verifier, parse_vkey
from tlog.formats.note import open_note
from tlog.formats.tiles import parse_tile_path
from witness.config import WitnessedLog
from witness.core import Witness, origin_path
from witness.feeder import Feeder
from witness.keyfiles import load_or_create_keys
from witness.state import WitnessState

from tests.support.witness import BIN, MemLog, running_witness, witness_config, write_config


async def _grow(url: str, n: int) -> dict:
    async with LogClient(url) as c:
        for i in range(0, n, 250):
            await c.anchor_many([commitment_entry(os.urandom(32)) for _ in range(min(250, n - i))])
        return await c.info()


async def test_feeder_follows_a_real_log_as_it_grows(server, tmp_path):
    log = server()
    origin = log.vkey.split("+")[0]
    cfg = witness_config(tmp_path / "w", [WitnessedLog(origin, log.vkey, log.url)])
    (signer,), _ = load_or_create_keys(cfg)
    wv = cosigner_verifier(signer.verifier)
    lv = parse_vkey(log.vkey)
    publish = tmp_path / "pub"
    state = WitnessState(cfg.state_path)
    try:
        async with Feeder(Witness(signer, cfg.logs, state), cfg.logs, publish_dir=publish) as feeder:
            sizes = []
            for grow in (300, 500, 1):  # crosses the 256 and 512 tile boundaries
                info = await _grow(log.url, grow)
                (r,) = await feeder.round()
                assert (r.action, r.size) == ("cosigned", info["tree_size"]), r
                rec = state.get_sync(origin)
                assert rec.root == b64dec(info["root_hash"])
                open_note(rec.note, [wv])
                open_note(rec.note, [lv])
                published = (publish / origin_path(origin) / "checkpoint").read_text()
                assert published == rec.note
                sizes.append(rec.size)
            (r,) = await feeder.round()
            assert r.action == "unchanged" and r.size == sizes[-1]
            assert [s for s, _ in state.history_sync(origin)] == sizes == [300, 800, 801]
    finally:
        state.close()

    # The serving witness on the same data directory publishes what the feeder cosigned.
    async with running_witness(cfg) as (_svc, url, session):
        async with session.get(f"{url}/{origin_path(origin)}/checkpoint") as resp:
            assert resp.status == 200 and (await resp.text()) == published


def test_feed_cli_once(server, tmp_path):
    log = server()
    origin = log.vkey.split("+")[0]
    info = asyncio.run(_grow(log.url, 20))
    conf = write_config(tmp_path / "w.toml", tmp_path / "data", [WitnessedLog(origin, log.vkey, log.url)])
    out = subprocess.run([str(BIN / "oap-witness"), "feed", "--config", str(conf), "--once"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"{origin}: cosigned size {info['tree_size']}" in out.stdout
    assert "created a new witness key" in out.stderr  # said, not silent
    out = subprocess.run([str(BIN / "oap-witness"), "status", "--config", str(conf)],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith(f"{origin}  size 20  root ") and " ago)" in out.stdout, out.stdout
    out = subprocess.run([str(BIN / "oap-witness"), "status", "--config", str(conf), "--json"],
                         capture_output=True, text=True, timeout=60)
    row = json.loads(out.stdout)
    assert row["origin"] == origin and row["size"] == 20 and row["cosigned_at"].endswith("Z")

    # a config that names no data directory: feed refuses to make an identity in ./witness-data
    bare = tmp_path / "bare.toml"
    bare.write_text(conf.read_text().replace(f'data_dir = "{tmp_path / "data"}"', ""))
    assert "data_dir" not in bare.read_text()
    out = subprocess.run([str(BIN / "oap-witness"), "feed", "--config", str(bare), "--once"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 2 and "no witness key" in out.stderr and "--data" in out.stderr
    assert not (tmp_path / "witness-data").exists()


class FakeLog:
    """A tlog-tiles log of < 256 leaves served from a MemLog that a test can swap or corrupt."""

    def __init__(self, log: MemLog) -> None:
        self.log, self.size, self.bad_tiles = log, len(log.leaves), False
        app = web.Application()
        app.router.add_get("/checkpoint", self.checkpoint)
        app.router.add_get("/tile/{path:.+}", self.tile)
        self.server = TestServer(app, host="127.0.0.1")

    async def checkpoint(self, request):
        return web.Response(text=self.log.checkpoint(self.size))

    async def tile(self, request):
        ref = parse_tile_path("tile/" + request.match_info["path"])
        assert ref.level == 0 and ref.index == 0
        data = b"".join(self.log.leaves[: ref.width])
        return web.Response(body=bytes(len(data)) if self.bad_tiles else data)


async def test_feeder_refuses_a_forked_log_and_bad_tiles(tmp_path):
    honest = MemLog().grow(40)
    fake = FakeLog(honest)
    await fake.server.start_server()
    try:
        url = str(fake.server.make_url("")).rstrip("/")
        wlog = WitnessedLog(honest.origin, honest.vkey, url)
        cfg = witness_config(tmp_path, [wlog])
        (signer,), _ = load_or_create_keys(cfg)
        state = WitnessState(cfg.state_path)
        try:
            async with Feeder(Witness(signer, [wlog], state), [wlog]) as feeder:
                fake.size = 20
                assert (await feeder.poll(wlog)).action == "cosigned"
                fake.size = 33
                fake.bad_tiles = True
                r = await feeder.poll(wlog)
                assert r.action == "refused" and "root" in r.detail
                fake.bad_tiles = False
                fake.log = honest.fork(12, tag=7).grow(28)  # same key, history rewritten after leaf 12
                fake.size = 33
                r = await feeder.poll(wlog)
                assert r.action == "refused", r
                fake.size = 20  # same size as cosigned, another root
                assert (await feeder.poll(wlog)).action == "refused"
                fake.size = 10  # a log that went backwards
                assert (await feeder.poll(wlog)).action == "behind"
                fake.log, fake.size = honest, 40
                assert (await feeder.poll(wlog)).action == "cosigned"
            assert [s for s, _ in state.history_sync(honest.origin)] == [20, 40]
            assert state.get_sync(honest.origin).root == honest.root(40)
        finally:
            state.close()
    finally:
        await fake.server.close()


async def test_feeder_reports_an_unreachable_log(tmp_path):
    log = MemLog().grow(3)
    wlog = WitnessedLog(log.origin, log.vkey, "http://127.0.0.1:9")  # discard port: nothing listens
    cfg = witness_config(tmp_path, [wlog])
    (signer,), _ = load_or_create_keys(cfg)
    state = WitnessState(cfg.state_path)
    try:
        async with Feeder(Witness(signer, [wlog], state), [wlog], timeout=2) as feeder:
            assert not await feeder.run(interval=0.1, rounds=2)
        assert state.get_sync(log.origin) is None
    finally:
        state.close()


async def test_an_answer_sent_in_pieces_is_read_whole_and_capped():
    """A log (or a proxy) may send an answer in several TCP segments: the feeder must read
    to the end, not take the first piece as the whole tile, and refuse what passes its cap."""
    from tlog.errors import TooLarge
    from tlog.transport import read_capped

    pieces = [bytes([i]) * 1000 for i in range(8)]

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for p in pieces:
            await resp.write(p)
            await asyncio.sleep(0)  # let each piece go out on its own
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/t", handler)
    async with TestServer(app, host="127.0.0.1") as srv:
        import aiohttp
        async with aiohttp.ClientSession() as s:
            async with s.get(srv.make_url("/t")) as r:
                assert await read_capped(r, 8000) == b"".join(pieces)
            async with s.get(srv.make_url("/t")) as r:
                try:
                    await read_capped(r, 7999)
                except TooLarge as e:
                    assert "7999" in e.message
                else:
                    raise AssertionError("an answer over the cap was accepted")
