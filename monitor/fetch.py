"""Reading a log, a witness or a mirror that may be hostile: bounded in bytes, in time and in number.

Every answer is read within a cap that its format sets (a hash tile is at most 8 KiB, an
entry bundle 256 entries of at most 65,535 bytes, a checkpoint note 1 MiB) and within
`timeout` seconds for the whole request, body included: a peer that sends too much is
refused, one that sends slowly is cut off. What goes wrong is one of two things, each with
a reason a person can act on: the peer cannot be reached (`Unreachable`: connection,
timeout, 5xx, 429), or it served something it must not (`Invalid`: a wrong status, a body
over its cap, garbage). Neither ever escapes as anything else.
"""
from __future__ import annotations

import asyncio
import logging

import aiohttp

from tlog.errors import FormatError, OAPError, TooLarge
from tlog.formats.note import MAX_NOTE_SIZE
from tlog.formats.parties import BundleRead, read_bundle
from tlog.formats.tiles import CLIENT_ACCEPT_ENCODING, TILE_WIDTH, entries_path, tile_path
from tlog.transport import Outbound, read_capped

log = logging.getLogger("oap.monitor")

MAX_TILE = TILE_WIDTH * 32
MAX_BUNDLE = TILE_WIDTH * (2 + 0xFFFF)
MAX_JSON = 16 << 20
"""A registry's answers (a page of commits with their anchors, a status answer)."""


class PeerError(OAPError):
    """What a peer did wrong, with the URL: the monitor's health alerts carry the reason."""


class Unreachable(PeerError):
    """The peer could not be reached, timed out, or said it is unavailable (5xx, 429)."""


class Invalid(PeerError):
    """The peer answered with something it must not serve."""


class NotServed(Invalid):
    """404: the peer does not serve the resource (a witness that never cosigned the log)."""


def client_session(outbound: Outbound, timeout: float, *, limit: int = 16) -> aiohttp.ClientSession:
    """The monitor's one HTTP client (`tlog.transport`: TLS 1.3, plain http:// to loopback only
    unless `insecure_http`, no cookies): `timeout` seconds per request, at most `limit`
    connections, tlog-tiles' Accept-Encoding."""
    return outbound.session(timeout=timeout, headers={"Accept-Encoding": CLIENT_ACCEPT_ENCODING}, limit=limit)


async def get(session: aiohttp.ClientSession, url: str, cap: int, timeout: float, *,
              headers: dict[str, str] | None = None) -> bytes:
    """The body of a GET of `url`, at most `cap` bytes, within `timeout` seconds in all."""
    try:
        async with asyncio.timeout(timeout):
            async with session.get(url, allow_redirects=False, headers=headers) as r:
                if r.status == 404:
                    raise NotServed(f"{url}: not served (HTTP 404)")
                if r.status >= 500 or r.status == 429:
                    raise Unreachable(f"{url}: HTTP {r.status}")
                if r.status != 200:
                    raise Invalid(f"{url}: HTTP {r.status}")
                if r.content_length is not None:
                    if r.content_length > cap:
                        raise Invalid(f"{url}: the answer is {r.content_length} bytes, more than the {cap} it may be")
                    if "Content-Encoding" not in r.headers:  # the length is the body's: read it at once
                        return await r.read()
                try:
                    return await read_capped(r, cap)
                except TooLarge:
                    raise Invalid(f"{url}: the answer is more than the {cap} bytes it may be") from None
    except TimeoutError:
        raise Unreachable(f"{url}: no whole answer within {timeout:g} s (cut off)") from None
    except aiohttp.ClientPayloadError as e:
        raise Invalid(f"{url}: malformed answer ({_first_line(e)})") from None
    except (aiohttp.ClientError, OSError) as e:
        raise Unreachable(f"{url}: {_first_line(e)}") from None


def _first_line(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text[:200]}" if text else type(e).__name__


class TileReader:
    """One tlog-tiles log (a log's URL, a static copy, a mirror's monitoring prefix)."""

    def __init__(self, session: aiohttp.ClientSession, url: str, timeout: float) -> None:
        self.session, self.url, self.timeout = session, url.rstrip("/"), timeout
        self.requests = 0

    async def get(self, path: str, cap: int) -> bytes:
        self.requests += 1
        return await get(self.session, f"{self.url}/{path}", cap, self.timeout)

    async def checkpoint(self) -> bytes:
        return await self.get("checkpoint", MAX_NOTE_SIZE)

    async def tile(self, level: int, index: int, width: int = TILE_WIDTH) -> bytes:
        """A hash tile of `width` hashes; a partial tile no longer served (the log grew) is cut
        from the full tile, which starts with the same hashes (tlog-tiles)."""
        try:
            data = await self.get(tile_path(level, index, width), MAX_TILE)
        except NotServed:
            if width == TILE_WIDTH:
                raise
            data = (await self.get(tile_path(level, index), MAX_TILE))[:width * 32]
        if len(data) != width * 32:
            raise Invalid(f"{self.url}/{tile_path(level, index, width)}: {len(data)} bytes, not {width * 32}")
        return data

    async def tile_at(self, path: str) -> bytes:
        """`tile` by path (what `TileTree` asks for)."""
        from tlog.formats.tiles import parse_tile_path

        ref = parse_tile_path(path)
        assert ref.level is not None
        return await self.tile(ref.level, ref.index, ref.width)

    async def bundle(self, index: int, width: int) -> tuple[bytes, bool]:
        """Entry bundle `index` as served, to read `width` entries from, and whether it is exactly
        those (a partial bundle no longer served is read from the full one, which starts with
        the same entries)."""
        try:
            return await self.get(entries_path(index, width), MAX_BUNDLE), True
        except NotServed:
            if width == TILE_WIDTH:
                raise
            return await self.get(entries_path(index), MAX_BUNDLE), False

    async def entries(self, index: int, width: int) -> BundleRead:
        data, exact = await self.bundle(index, width)
        try:
            return read_bundle(data, width, exact=exact)
        except FormatError as e:
            raise Invalid(f"{self.url}/{entries_path(index, width)}: a malformed entry bundle ({e.message})") from None
