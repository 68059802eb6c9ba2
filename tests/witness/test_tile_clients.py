"""What our tlog-tiles clients ask a log for, seen by a real aiohttp server on 127.0.0.1:
C2SP tlog-tiles says "Clients SHOULD include `gzip` and `identity` in their `Accept-Encoding`
headers" (a log may serve entry bundles compressed, or not)."""
from __future__ import annotations

from aiohttp import web

from tlog.client.client import LogClient
from tlog.errors import OAPError
from tlog.formats.tiles import entries_path
from witness.mirror.follower import Follower


async def test_the_follower_and_the_log_client_accept_gzip_and_identity():
    seen: list[tuple[str, str | None]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append((request.path, request.headers.get("Accept-Encoding")))
        raise web.HTTPNotFound()

    app = web.Application()
    app.router.add_get("/{tail:.*}", record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with Follower(url + "/log", url + "/mirror", timeout=10) as f:
            rnd = await f.sync()  # the log has no checkpoint: an error round, after one request
            assert rnd.action == "error"
        async with LogClient(url, timeout=10) as client:
            try:
                await client.fetch(entries_path(0))
            except OAPError:
                pass
    finally:
        await runner.cleanup()
    assert ("/log/checkpoint", "gzip, identity") in seen
    assert (f"/{entries_path(0)}", "gzip, identity") in seen
