"""Calibration server: the cheapest aiohttp handlers for the loads the log gets.

`POST /v1/entries` parses the JSON body and hashes it; `GET /tile/...` answers
8 KiB. Their rates on the same machine are the scale for the log's HTTP
targets; the benchmarks measure them in the same run as the baseline.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys

from aiohttp import web

BODY = os.urandom(8192)


async def entry(request: web.Request) -> web.Response:
    doc = json.loads(await request.read())
    return web.json_response({"leaf_hash": hashlib.sha256(json.dumps(doc).encode()).hexdigest()})


async def tile(request: web.Request) -> web.Response:
    return web.Response(body=BODY, content_type="application/octet-stream")


async def main() -> None:
    import asyncio

    app = web.Application()
    app.router.add_post("/v1/entries", entry)
    app.router.add_get("/tile/{path:.+}", tile)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(f"url:          http://127.0.0.1:{runner.addresses[0][1]}")
    print("data:         none", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    import asyncio

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
