"""C2SP tlog-tiles, current text, on the log's HTTP API (a real aiohttp server on 127.0.0.1):
entry bundles gzip-compressed when the client accepts it, and pruning under a minimum index
with a retention policy (refused reads below it, the data kept, readers told where the log
starts)."""
from __future__ import annotations

import asyncio
import gzip
import json
from functools import partial

import pytest

from tlog.errors import ConfigError
from tlog.formats.tiles import parse_entry_bundle
from tlog.http.sending import accepts_gzip
from tlog.server.config import LogConfig
from tlog.server.service import LogService

from tests.support.logs import grow, open_test_log
from tests.support.mirror import http

ORIGIN = "tiles.test/log"
POLICY = "https://tiles.test/retention (entries are kept 90 days after they expire)"


open_log = partial(open_test_log, origin=ORIGIN)


async def get(url: str, **headers: str) -> tuple[int, dict, bytes]:
    return await asyncio.to_thread(http, url, None, headers)


@pytest.mark.parametrize("header, takes", [
    ("gzip", True), ("gzip, deflate, br", True), ("identity, gzip;q=0.5", True), ("*", True), ("x-gzip", True),
    ("", False), ("identity", False), ("deflate", False), ("gzip;q=0", False), ("*, gzip;q=0", False),
    ("gzip;q=0.0", False), ("*;q=0", False), ("GZIP", True), ("gzip;q=bad", False),
])
def test_accept_encoding_is_read_with_its_q_values(header, takes):
    assert accepts_gzip(header) is takes


async def test_entry_bundles_are_gzipped_when_the_client_accepts_it(tmp_path):
    svc, server, url = await open_log(tmp_path)
    try:
        size = await grow(url, 300)
        for path in ("tile/entries/000", f"tile/entries/001.p/{size - 256}"):
            status, h, plain = await get(f"{url}/{path}", **{"Accept-Encoding": "identity"})
            assert status == 200 and "Content-Encoding" not in h and h["Vary"] == "Accept-Encoding"
            status, h, packed = await get(f"{url}/{path}", **{"Accept-Encoding": "gzip"})
            assert status == 200 and h["Content-Encoding"] == "gzip" and h["Vary"] == "Accept-Encoding"
            assert gzip.decompress(packed) == plain and len(packed) < len(plain)
            assert len(parse_entry_bundle(plain, 256 if path.endswith("000") else size - 256)) > 0
            status, h, again = await get(f"{url}/{path}", **{"Accept-Encoding": "gzip;q=0"})
            assert again == plain and "Content-Encoding" not in h
        # hash tiles are not entry bundles: always identity
        status, h, _ = await get(f"{url}/tile/0/000", **{"Accept-Encoding": "gzip"})
        assert status == 200 and "Content-Encoding" not in h
    finally:
        await server.close()
        await svc.close()


@pytest.mark.parametrize("kw, words", [
    ({"minimum_index": 256}, "retention_policy"),
    ({"minimum_index": 100, "retention_policy": POLICY}, "multiple of 256"),
    ({"minimum_index": -256, "retention_policy": POLICY}, "multiple of 256"),
    ({"retention_policy": "a\nb"}, "printable"),
])
def test_bad_retention_settings_are_refused(tmp_path, kw, words):
    with pytest.raises(ConfigError, match=words):
        LogConfig(data_dir=tmp_path, **kw).validate()


async def test_a_log_pruned_below_its_minimum_index_refuses_those_reads_and_says_where_it_starts(tmp_path):
    svc, server, url = await open_log(tmp_path)
    try:
        size = await grow(url, 600)
        _, _, before = await get(f"{url}/tile/entries/002.p/{size - 512}")
    finally:
        await server.close()
        await svc.close()
    with pytest.raises(ConfigError, match="beyond the log's checkpoint"):
        await LogService.open(LogConfig(data_dir=tmp_path / "log", origin=ORIGIN, minimum_index=1024,
                                        retention_policy=POLICY))
    svc, server, url = await open_log(tmp_path, minimum_index=512, retention_policy=POLICY)
    try:
        info = json.loads((await get(f"{url}/v1/info"))[2])
        assert info["minimum_index"] == 512 and info["retention_policy"] == POLICY and info["tree_size"] == size
        for path in ("tile/entries/000", "tile/entries/001", "tile/0/000", "tile/0/001", "v1/entries/0",
                     "v1/entries/511"):
            status, _, body = await get(f"{url}/{path}")
            assert status == 404 and b"starts at index 512" in body, (path, body)
        # what is at or above the minimum index, and the tiles above level 0, are served
        status, _, after = await get(f"{url}/tile/entries/002.p/{size - 512}")
        assert status == 200 and after == before
        for path in (f"tile/0/002.p/{size - 512}", "tile/1/000.p/2", "v1/entries/512"):
            assert (await get(f"{url}/{path}"))[0] == 200, path
        # nothing was deleted (pruning by denying requests): proofs still come from the hashes kept
        status, _, body = await get(f"{url}/v1/proof/inclusion?index=3&size={size}")
        assert status == 200 and json.loads(body)["inclusion_proof"], body
    finally:
        await server.close()
        await svc.close()
    svc, server, url = await open_log(tmp_path)  # minimum index back to 0: everything again
    try:
        assert (await get(f"{url}/tile/entries/000"))[0] == 200
    finally:
        await server.close()
        await svc.close()
