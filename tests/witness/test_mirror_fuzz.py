"""Hostile HTTP against a real `oap-mirror serve`: mutated add-checkpoint and add-entries bodies
(gzip and not), junk paths, slow clients. Never a 5xx, never a crash, memory bounded, and
the copy it serves stays the log's."""
from __future__ import annotations

import asyncio
import gzip

import pytest

from tlog.formats.tiles import entries_for_size, tiles_for_size

from tests.httpfuzz import Endpoint, fuzz, getter
from tests.support.mirror import EntryLog, http, mirror_service, origin_hash, served_root

pytestmark = pytest.mark.slow

OCTETS = {"Content-Type": "application/octet-stream"}


async def test_the_mirror_survives_hostile_http(tmp_path, started):
    lg = EntryLog().grow(800)
    m = started(mirror_service(tmp_path / "m", [(lg.origin, lg.vkey, "")],
                               env=None, settings="read_timeout = 3\nheader_timeout = 3\n"))
    prefix = f"/{origin_hash(lg.origin)}"
    assert http(m.url + "/add-checkpoint", lg.add_checkpoint(0, 600))[0] == 200
    assert http(m.url + "/add-entries", lg.body(0, 600), OCTETS)[0] == 200
    before = {t.path: http(f"{m.url}{prefix}/{t.path}")[2] for t in tiles_for_size(600) + entries_for_size(600)}
    octets = ["application/octet-stream"]
    endpoints = [
        Endpoint("POST", "/add-checkpoint", [lg.add_checkpoint(600, 800), lg.add_checkpoint(0, 600)], ["text/plain"]),
        Endpoint("POST", "/add-entries", [lg.body(600, 800), lg.body(256, 600), lg.body(0, 0)], octets),
        Endpoint("POST", "/add-entries", [gzip.compress(lg.body(600, 800))], octets),
        Endpoint("GET", f"{prefix}/checkpoint"), Endpoint("GET", f"{prefix}/tile/0/001"),
        Endpoint("GET", f"{prefix}/tile/entries/002.p/88"), Endpoint("GET", f"{prefix}/tile/1/000.p/2"),
        Endpoint("GET", "/v1/info"), Endpoint("GET", "/metrics"),
    ]
    rep = await fuzz(m.url, endpoints, requests=600, pid=m.pid, valid=getter(m.url, f"{prefix}/checkpoint"),
                     seed=3, slow_fraction=0.01)
    assert rep.sent == 600
    assert rep.server_errors == [], rep.server_errors[:5]
    assert m.alive(), "the mirror died"
    assert rep.valid_ok > 0 and rep.valid_failed == []
    assert sum(n for s, n in rep.statuses.items() if 400 <= s < 500) > 100, rep.statuses
    assert rep.rss_peak_kb - rep.rss_start_kb < 300_000, "memory grew without bound"
    # whatever it accepted is the log's: the copy below 600 is unchanged, and the tree verifies
    for path, data in before.items():
        assert http(f"{m.url}{prefix}/{path}")[2] == data, path
    status, _, note = http(f"{m.url}{prefix}/checkpoint")
    size = int(note.decode().split("\n")[1])
    assert status == 200 and size >= 600
    assert await asyncio.to_thread(served_root, m.url + prefix, size) == lg.root(size)
