"""End to end against real `oap-log serve` processes on 127.0.0.1.

10,000 entries from concurrent clients; the root recomputed from served tiles
alone; every bundle verified offline; then kill -9 while clients submit,
restart, and check every acknowledged entry is at its index with its bytes and
every checkpoint seen is consistent with the new one.
"""
from __future__ import annotations

import asyncio
import random
import time

import aiohttp
import pytest

from tlog.client.client import LogClient
from tlog.client.verifier import TrustPolicy
from tlog.errors import UpstreamError
from tlog.formats.checkpoint import parse_checkpoint
from tlog.formats.ed25519 import generate_seed
from tlog.formats.entries import canonical_entry, commitment_entry, receipt_entry
from tlog.formats.hashing import leaf_hash
from tlog.formats.note import parse_note
from tlog.merkle.verify import verify_consistency

from tests.support.services import fetch_entries

pytestmark = pytest.mark.slow
SEED = generate_seed()


def entry(i: int) -> dict:
    if i % 5 == 0:
        return commitment_entry(leaf_hash(b"c" + i.to_bytes(8, "big")))
    return receipt_entry(leaf_hash(i.to_bytes(8, "big")), SEED)


async def anchor_all(url: str, items: list[int], workers: int, acked: dict, stop_on_error: bool = False):
    queue = list(items)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        client = LogClient(url, session=session)

        async def worker():
            while queue:
                i = queue.pop()
                try:
                    acked[i] = await client.anchor(entry(i))
                except UpstreamError:  # the client's one error for a log it cannot reach
                    if stop_on_error:
                        return
                    raise

        await asyncio.gather(*(worker() for _ in range(workers)))


all_entries = fetch_entries  # every entry, read through the entry bundles alone


def checkpoints_of(acked: dict) -> dict[int, bytes]:
    seen: dict[int, bytes] = {}
    for a in acked.values():
        cp = parse_checkpoint(parse_note(a.checkpoint).text)
        assert seen.setdefault(cp.size, cp.root) == cp.root, "two roots for one size"
    return seen


async def test_ten_thousand_entries_tiles_offline_verify_and_kill9(server, tmp_path):
    srv = server("--batch-interval-ms", "10")
    policy = TrustPolicy.for_log(srv.vkey)
    acked: dict[int, object] = {}
    await anchor_all(srv.url, list(range(10_000)), workers=48, acked=acked)
    assert len(acked) == 10_000
    assert sorted(a.index for a in acked.values()) == list(range(10_000))

    async with LogClient(srv.url) as client:
        note = await client.checkpoint()
        cp = policy.verify_checkpoint(note).checkpoint
        assert cp.size == 10_000
        assert await client.root_from_tiles(cp.size) == cp.root

    for i, a in acked.items():  # offline: bundle + policy only
        v = policy.verify_bundle(a.bundle)
        assert v.index == a.index and v.entry == canonical_entry(entry(i))

    # --- kill -9 while 24 clients submit, then restart -------------------------------
    old_checkpoints = checkpoints_of(acked)
    crash_acked: dict[int, object] = {}
    submit = asyncio.create_task(anchor_all(srv.url, list(range(10_000, 30_000)), 24, crash_acked, True))
    deadline = time.monotonic() + 300
    while len(crash_acked) < 1500:
        assert time.monotonic() < deadline and not submit.done(), f"only {len(crash_acked)} acknowledged"
        await asyncio.sleep(0.01)
    await asyncio.sleep(random.random() * 0.05)
    srv.kill()
    await asyncio.wait_for(submit, 60)
    assert 1500 <= len(crash_acked) < 20_000

    srv2 = server("--batch-interval-ms", "10", data=srv.data)
    assert srv2.vkey == srv.vkey
    async with LogClient(srv2.url) as client:
        new_note = await client.checkpoint()
        new = policy.verify_checkpoint(new_note).checkpoint
        everything = {**acked, **crash_acked}
        assert new.size >= len(everything)
        stored = await all_entries(srv2.url, new.size)
        for i, a in everything.items():
            assert stored[a.index] == canonical_entry(entry(i)), f"acknowledged entry {i} lost or moved"
        assert await client.root_from_tiles(new.size) == new.root
        seen = checkpoints_of(crash_acked) | old_checkpoints
        for size, root in sorted(seen.items()):
            proof = await client.consistency(size, new.size)
            verify_consistency(size, new.size, root, new.root, proof)
        # the restarted log keeps appending after the recovered tree
        a = await client.anchor(entry(99_999_999))
        assert a.index == new.size
    assert srv2.stop() == 0 and "stopped cleanly" in srv2.output
