"""`Reply`: an answer built once, sent by the fast path or by aiohttp alike."""
from __future__ import annotations

from typing import NamedTuple

from aiohttp import web


class Reply(NamedTuple):
    """An answer's body and headers (Content-Type, Cache-Control, ...); 200 unless said otherwise."""

    body: bytes
    headers: tuple[tuple[str, str], ...]
    status: int = 200

    def response(self) -> web.Response:
        """The same answer for the aiohttp path."""
        return web.Response(body=self.body, headers=dict(self.headers), status=self.status)
