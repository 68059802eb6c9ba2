"""The client side of C2SP tlog-mirror: push a log's checkpoint and entries to a mirror.

Two clients use it, each with its own `PushSource`: the log itself (`tlog.server.mirroring`,
from its own hash files and entries, as Tessera's `WithMirrors` does) and `oap-mirror
follow` (`witness.mirror.follower`, from any log's tiles over HTTP). One push is

1. `add-checkpoint` with a consistency proof from the size of the mirror's pending
   checkpoint, as last seen (a 409 `text/x.tlog.size` names it: retried at once);
2. `add-entries` from the mirror's next entry, as last seen (the first push of a client
   sends the empty range at the end, whose 409 names it), gzip-compressed and streamed, at
   most `packages_per_request` packages a request (32: tlog-mirror asks clients to stay
   under 8,192 entries a request); a 202 resumes at the advertised next entry, a 409
   follows the mirror-info, and a 200 ends the push with the mirror's cosignature lines.

So an interrupted push resumes where the mirror stands: nothing it stored is sent again.
Every loop is bounded (requests per push, HTTP timeouts). The cosignature lines are
returned as the mirror sent them: the caller verifies them with the keys it trusts.
"""
from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import aiohttp

from tlog.errors import OAPError, TooLarge, Unavailable, VerificationError
from tlog.formats.mirror import (
    MIRROR_INFO,
    PACKAGE_SIZE,
    add_checkpoint_body,
    encode_header,
    package_ranges,
    parse_mirror_info,
)
from tlog.transport import Outbound
from tlog.transport import read_capped as read_body_capped

PACKAGES_PER_REQUEST = 32
MAX_ANSWER = 1 << 20  # bytes read of any answer of the mirror

T = TypeVar("T")


class FetchError(Unavailable):
    """The log or the mirror did not answer as it should (network, status): retried later."""


class Refused(VerificationError):
    """The log served something that does not match its checkpoint, or the mirror refused it."""


@dataclass(frozen=True)
class Pushed:
    """The end of a push: "cosigned" (the 200's cosignature `lines`) or "behind" (the mirror
    is ahead of this checkpoint, or now takes uploads to another size: `detail` says)."""

    action: str
    size: int
    sent: int = 0  # entries the mirror stored from this push
    lines: str = ""
    detail: str = ""


class PushSource(Protocol):
    """One signed checkpoint of a log and what a mirror needs to store it."""

    origin: str
    size: int
    note: str  # the signed checkpoint (cosignatures may be on it: the mirror keeps the log's)

    async def consistency_proof(self, old: int) -> Sequence[bytes]:
        """RFC 9162 consistency proof from `old` (0 < old < size) to `size`."""
        ...

    def packages(self, ranges: list[tuple[int, int, int]]) -> AsyncGenerator[bytes, None]:
        """The encoded entry packages (`tlog.formats.mirror.encode_package`) of `ranges`
        ((subtree start, start, end), as `package_ranges` gives them), in order, each with
        its subtree consistency proof to `size`. An OAPError ends them: the packages given
        before it are sent, and the push raises it once the mirror has answered."""
        ...


async def read_capped(r: aiohttp.ClientResponse, cap: int, url: str) -> bytes:
    """The whole answer, at most `cap` bytes (`tlog.transport.read_capped`); a larger
    one is the peer's fault, retried next round."""
    try:
        return await read_body_capped(r, cap)
    except TooLarge:
        raise FetchError(f"{url}: answer larger than {cap} bytes") from None


async def prefetched(count: int, fetch: Callable[[int], Awaitable[T]], window: int = 8) -> AsyncGenerator[T, None]:
    """fetch(0), ..., fetch(count - 1) in order, up to `window` of them running ahead; the
    ones still running are cancelled when the iteration stops early."""
    tasks: dict[int, asyncio.Future[T]] = {}
    try:
        for i in range(count):
            for j in range(i, min(count, i + window)):
                if j not in tasks:
                    tasks[j] = asyncio.ensure_future(fetch(j))
            yield await tasks.pop(i)
    finally:
        for t in tasks.values():
            t.cancel()


class MirrorClient:
    """Pushes checkpoints of one log to one mirror; keep it across pushes (it remembers the
    mirror's pending size and next entry, so a push usually starts with no extra request)."""

    def __init__(self, url: str, *, session: Callable[[], aiohttp.ClientSession] | None = None,
                 timeout: float = 60.0, packages_per_request: int = PACKAGES_PER_REQUEST,
                 compress_level: int = 1, outbound: Outbound | None = None) -> None:
        """`session`: where to get the HTTP session (a caller's, made when first needed); by
        default the client makes its own under `outbound` (tlog.transport), closed by `close`."""
        self.url = url.rstrip("/")
        self.timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
        self.per_request = packages_per_request
        self.level = compress_level
        self._shared = session
        self.outbound = outbound or Outbound()
        self._session: aiohttp.ClientSession | None = None
        self.pending_hint = 0  # the mirror's pending size, as last seen
        self.next_hint: int | None = None  # the mirror's next entry, as last seen (None: unknown)
        self.sent_total = 0
        self._failure: OAPError | None = None  # why the body being sent was cut short

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._shared is not None:
            return self._shared()
        if self._session is None:
            self._session = self.outbound.session(timeout=self.timeout)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _post(self, path: str, data, headers: dict[str, str]) -> tuple[int, str, bytes]:
        url = f"{self.url}/{path}"
        try:
            async with self.session.post(url, data=data, headers=headers, timeout=self.timeout,
                                         allow_redirects=False) as r:
                return r.status, r.headers.get("Content-Type", ""), await read_capped(r, MAX_ANSWER, url)
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            if self._failure is not None:  # the body stopped because the source lied or failed
                raise self._failure from None
            raise FetchError(f"{url}: {type(e).__name__}: {e}") from None

    async def push(self, source: PushSource) -> Pushed:
        """Bring the mirror to `source`'s checkpoint (see the module doc). FetchError when the
        mirror cannot be reached; Refused when it refuses (or an OAPError of the source)."""
        if not await self._add_checkpoint(source):
            return Pushed("behind", source.size,
                          detail=f"the mirror's pending checkpoint ({self.pending_hint}) is ahead of this one")
        end = source.size
        hint = self.next_hint
        start = hint if hint is not None and hint <= end else end
        ticket, sent = b"", 0
        for _ in range(16 + 4 * -(-end // (PACKAGE_SIZE * self.per_request))):
            self._failure = None
            status, ctype, body = await self._post(
                "add-entries", self._body(source, start, end, ticket),
                {"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"})
            if self._failure is not None:
                raise self._failure
            if status == 200:
                sent += end - start
                self.sent_total += end - start
                self.next_hint = max(self.next_hint or 0, end)
                return Pushed("cosigned", end, sent, lines=body.decode("utf-8", "replace"))
            if status in (202, 409) and ctype.split(";")[0].strip() == MIRROR_INFO:
                try:
                    info = parse_mirror_info(body)
                except OAPError:
                    raise Refused(f"add-entries: HTTP {status} with a malformed mirror-info") from None
                if status == 202:
                    done = max(0, min(info.next_entry, end) - start)
                    sent += done
                    self.sent_total += done
                self.next_hint = info.next_entry
                if info.size != end:
                    return Pushed("behind", end, sent, detail=f"the mirror now takes uploads up to {info.size}")
                ticket = info.ticket
                if info.next_entry >= end:
                    if start == end:  # even the empty range is refused: the mirror is past this checkpoint
                        return Pushed("behind", end, sent,
                                      detail=f"the mirror is at {info.next_entry} entries, past {end}")
                    start = end
                else:
                    start = info.next_entry
                continue
            self.next_hint = None
            raise Refused(f"add-entries [{start}, {end}): HTTP {status}: {body[:300].decode('utf-8', 'replace')}")
        raise FetchError("the mirror kept asking for more; will retry")

    async def _add_checkpoint(self, source: PushSource) -> bool:
        """Move the mirror's pending checkpoint to `source`'s; False if the mirror's is larger."""
        for _ in range(4):
            old = self.pending_hint
            if old > source.size:
                return False
            proof = await source.consistency_proof(old) if 0 < old < source.size else []
            status, ctype, body = await self._post("add-checkpoint", add_checkpoint_body(old, proof, source.note),
                                                   {"Content-Type": "text/plain"})
            if status == 200:
                self.pending_hint = source.size
                return True
            if status == 409 and ctype.startswith("text/x.tlog.size"):
                try:
                    self.pending_hint = int(body.decode("ascii").strip())
                except ValueError:
                    raise FetchError("the mirror's 409 does not carry a size") from None
                continue
            self.pending_hint = 0  # learn it again from the next 409
            raise Refused(f"add-checkpoint: HTTP {status}: {body[:300].decode('utf-8', 'replace')}")
        raise FetchError("the mirror's pending checkpoint kept moving; will retry")

    async def _body(self, source: PushSource, start: int, end: int, ticket: bytes) -> AsyncIterator[bytes]:
        """The gzip-compressed body: the header and up to `per_request` packages from `start`.
        On a failure of the source the body ends after the packages given so far, which the
        mirror keeps (they verified), and the push fails once the mirror has answered."""
        z = zlib.compressobj(self.level, zlib.DEFLATED, 31)  # wbits 31: a gzip stream
        yield z.compress(encode_header(source.origin, start, end, ticket))
        ranges = list(package_ranges(start, end))[:self.per_request]
        packages = source.packages(ranges)
        try:
            async for package in packages:
                chunk = z.compress(package)
                if chunk:
                    yield chunk
        except OAPError as e:
            self._failure = e
        finally:
            await packages.aclose()
        yield z.flush()
