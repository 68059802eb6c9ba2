"""An embedded log published to a bucket, with a witness, restarted while the bucket is down:
real processes on 127.0.0.1 (a SeaweedFS of its own, so that it can be stopped and started
again, an `oap-witness serve` and an `oap-log serve`).

Checked, while the bucket is down: every read of what the log published before its restart
(checkpoint, tiles, entry bundle, entry, proofs, /v1/info) is answered from the local store,
and the checkpoint served is the one the witness cosigned; a write is answered 503 with an
OAP error code by the failed attempt to publish, not by a timeout. With the bucket back (no
restart of the log): writes are acknowledged again, the bucket catches up, its checkpoint
never went backwards, and the bucket alone verifies and holds every acknowledged entry at
its index.
"""
from __future__ import annotations

import asyncio
import json
import os
import socket

import aiohttp
import pytest

from tlog.cli.engines import Seaweed
from tlog.client.audit import audit
from tlog.client.verifier import TrustPolicy
from tlog.formats.checkpoint import parse_checkpoint
from tlog.formats.entries import canonical_entry
from tlog.formats.note import parse_note
from tlog.server.service import load_or_create_key
from tlog.server.witnessing import policy_text

from tests.support.services import ORIGIN, fetch_entries, log_service, witness_service
from tests.support.waiting import until

pytestmark = pytest.mark.slow

DEADLINE = 120.0  # seconds: only keeps a broken build from hanging


def commitment() -> dict:
    return {"type": "commitment", "commitment": "sha256:" + os.urandom(32).hex()}


def size_of(note: str) -> int:
    return parse_checkpoint(parse_note(note).text).size


async def get(s: aiohttp.ClientSession, url: str) -> tuple[int, bytes]:
    async with s.get(url) as r:
        return r.status, await r.read()


async def test_a_log_restarted_while_its_bucket_is_down_serves_reads_then_catches_up(tmp_path):
    weed = Seaweed(tmp_path / "weed").start()
    procs = []
    try:
        weed.create_bucket("log")
        bucket = weed.bucket_url("log")
        creds = tmp_path / "bucket.credentials"
        creds.write_text(f"{weed.access_key} {weed.secret_key}\n")
        creds.chmod(0o600)
        log_dir = tmp_path / "log"
        log_vkey = load_or_create_key(log_dir, ORIGIN).vkey
        witness = witness_service(tmp_path / "w", log_vkey, "--rate-limit", "0").start()
        procs.append(witness)
        policy_file = tmp_path / "witnesses.policy"
        policy_file.write_text(policy_text(log_vkey, [("w1", witness.vkey, witness.url)], 1))
        trust = TrustPolicy.from_text(policy_file.read_text())  # the log's key and the witness: quorum 1
        config = tmp_path / "log.toml"
        config.write_text(f'[log]\nbucket_url = "{bucket}"\nbucket_credentials_file = "{creds}"\n'
                          f'witness_policy = "{policy_file}"\ncheckpoint_publish_interval = 0.1\n'
                          'batch_interval_ms = 5\nrate_limit_write = 0\nrate_limit_read = 0\n')

        def start_log():
            svc = log_service(log_dir, "--config", str(config)).start()
            procs.append(svc)
            return svc

        acked: dict[bytes, int] = {}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
            async def append(url: str, entry: dict) -> tuple[int, dict]:
                async with s.post(url + "/v1/entries", json=entry) as r:
                    body = await r.json()
                    if r.status == 200:
                        acked[canonical_entry(entry)] = body["index"]
                    return r.status, body

            async def bucket_checkpoint() -> str | None:
                status, body = await get(s, f"{bucket}/checkpoint")
                return body.decode() if status == 200 else None

            # --- the bucket up: 300 entries (a full tile and a partial one), cosigned, published
            log = start_log()
            for _ in range(6):
                got = await asyncio.gather(*(append(log.url, commitment()) for _ in range(50)))
                assert [st for st, _ in got] == [200] * 50, got[:3]
            published = await until(lambda: _sized(bucket_checkpoint(), 300), DEADLINE,
                                    "the bucket's checkpoint at 300", every=0.1)
            trust.verify_checkpoint(published)  # cosigned by the witness
            status, served = await get(s, log.url + "/checkpoint")
            assert status == 200 and served.decode() == published
            before = {path: (await get(s, log.url + path)) for path in READS}
            assert all(st == 200 for st, _ in before.values()), {p: st for p, (st, _) in before.items()}
            assert log.stop() == 0

            # --- the bucket down, the log restarted: reads from the local store, writes refused
            weed.stop(hold_ports=True)  # its ports stay ours while it is down: it comes back on them
            for port in weed.ports.values():  # (another test run choosing free ports cannot take one)
                with socket.socket() as probe, pytest.raises(OSError):
                    probe.bind(("127.0.0.1", port))
            log = start_log()
            status, served = await get(s, log.url + "/checkpoint")
            assert status == 200, served
            trust.verify_checkpoint(served.decode())  # never an uncosigned checkpoint
            assert served.decode() == published
            for path in READS:
                status, body = await get(s, log.url + path)
                assert status == 200, (path, status, body[:200])
                if path != "/v1/info":
                    assert body == before[path][1], path
            status, body = await get(s, log.url + "/v1/info")
            info = json.loads(body)
            assert info["published"] is True and info["tree_size"] == 300 and info["checkpoint"] == published
            waiting = commitment()
            status, refused = await append(log.url, waiting)
            assert status == 503 and refused["error"] == "maintenance", refused
            assert "bucket" in refused["message"] and "in time" not in refused["message"], refused
            assert "127.0.0.1" not in refused["message"] and "http" not in refused["message"], refused
            status, served = await get(s, log.url + "/checkpoint")
            assert status == 200 and served.decode() == published  # nothing new served while unpublished

            # --- the bucket back, the log not restarted: publication resumes
            weed.start()
            sizes: list[int] = []

            async def watch_bucket(stop: asyncio.Event) -> None:
                while not stop.is_set():
                    note = await bucket_checkpoint()
                    if note is not None:
                        sizes.append(size_of(note))
                    await asyncio.sleep(0.05)

            stop = asyncio.Event()
            watcher = asyncio.create_task(watch_bucket(stop))
            try:
                await until(lambda: _ok(append(log.url, waiting)), DEADLINE, "a write acknowledged again", every=0.1)
                for _ in range(3):
                    got = await asyncio.gather(*(append(log.url, commitment()) for _ in range(20)))
                    assert [st for st, _ in got] == [200] * 20, got[:3]
                size = len(acked)
                status, served = await get(s, log.url + "/checkpoint")
                assert status == 200 and size_of(served.decode()) >= size
                note = await until(lambda: _sized(bucket_checkpoint(), size_of(served.decode())), DEADLINE,
                                   "the bucket's checkpoint caught up", every=0.1)
            finally:
                stop.set()
                await watcher
            assert sizes and sizes == sorted(sizes) and sizes[0] >= 300  # never backwards
            trust.verify_checkpoint(note)
            assert log.stop() == 0

            # --- the bucket alone: verifies, and holds every acknowledged entry at its index
            async def fetch(path: str) -> bytes:
                status, body = await get(s, f"{bucket}/{path}")
                assert status == 200, path
                return body

            first = parse_checkpoint(parse_note(published).text)
            result = await audit(fetch, trust, entries=True, previous=(first.size, first.root))  # extends it
            final = result.checkpoint.checkpoint.size
            assert final >= size and result.entries == final
            stored = await fetch_entries(bucket, final)
            assert sorted(acked.values()) == list(range(size))  # every acknowledged entry, one index each
            for data, index in acked.items():
                assert stored[index] == data
    finally:
        for p in procs:
            p.kill()
        weed.kill()


READS = ("/checkpoint", "/v1/info", "/tile/0/000", "/tile/0/001.p/44", "/tile/1/000.p/1", "/tile/entries/000",
         "/tile/entries/001.p/44", "/v1/entries/299", "/v1/proof/inclusion?index=0&size=300",
         "/v1/proof/consistency?old=10&new=300")


async def _sized(note, size: int) -> str | None:
    """The checkpoint `note` (awaited) if it is of at least `size` entries."""
    got = await note
    return got if got is not None and size_of(got) >= size else None


async def _ok(reply) -> bool:
    status, _ = await reply
    return status == 200
