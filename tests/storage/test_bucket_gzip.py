"""Entry bundles in the bucket (a real SeaweedFS S3 server on 127.0.0.1): stored gzip-compressed
with `Content-Encoding: gzip` where that saves at least 1/8 of the bytes (C2SP tlog-tiles:
bundles SHOULD be compressed, gzip with no negotiation is allowed), as they are otherwise;
create-only whatever form another writer used, and a fork is still a fork."""
from __future__ import annotations

import asyncio
import gzip
import json
import os
import urllib.request

import aiohttp
import pytest

from tlog.errors import ForkError
from tlog.formats.tiles import encode_entry_bundle, parse_entry_bundle

pytestmark = pytest.mark.slow


def raw_get(url: str) -> tuple[dict, bytes]:
    """The object as the server sends it to a client that asks for no encoding."""
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept-Encoding": "identity"}),
                                timeout=30) as r:
        return dict(r.headers), r.read()


async def client_get(url: str) -> bytes:
    """The object as an HTTP client that decodes Content-Encoding (aiohttp, browsers, Go) reads it."""
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        assert r.status == 200
        return await r.read()


def test_bundles_are_stored_gzipped_where_it_pays_and_read_back_whole(engines):
    url = engines.bucket()
    bucket = engines.bucket_of(url)
    texts = encode_entry_bundle([json.dumps({"type": "receipt", "n": i, "signer": "did:key:z6Mk" + "a" * 40}).encode()
                                 for i in range(256)])
    noise = encode_entry_bundle([os.urandom(32) for _ in range(256)])
    assert bucket.put_bundle("tile/entries/000", texts) is True
    assert bucket.put_bundle("tile/entries/001", noise) is True
    headers, body = raw_get(f"{url}/tile/entries/000")
    assert headers.get("Content-Encoding") == "gzip" and len(body) < len(texts) // 2
    assert gzip.decompress(body) == texts
    headers, body = raw_get(f"{url}/tile/entries/001")
    assert "Content-Encoding" not in headers and body == noise  # gzip would not pay: stored as it is
    for key, raw in (("000", texts), ("001", noise)):
        got = asyncio.run(client_get(f"{url}/tile/entries/{key}"))
        assert got == raw and len(parse_entry_bundle(got, 256)) == 256
    # create-only: the same entries again, in either form, are no change; other entries are a fork
    assert bucket.put_bundle("tile/entries/000", texts) is False
    assert bucket.put_create_only("tile/entries/002", texts) is True  # a writer that did not compress
    assert bucket.put_bundle("tile/entries/002", texts) is False
    other = encode_entry_bundle([b"x%d" % i for i in range(256)])
    for key in ("000", "001", "002"):
        with pytest.raises(ForkError):
            bucket.put_bundle(f"tile/entries/{key}", other)
