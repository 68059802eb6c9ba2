"""Every HTTP connection the project opens, and every TLS context it builds: one policy.

OAP-CORE-1.0 §8.1 ("HTTPS with TLS 1.3 or later ... Plain HTTP MUST NOT be used") and
§28.1 ("TLS 1.3 or later is mandatory") bind what a service calls as much as what it
serves. So every outbound connection (the log pushing to witnesses and mirrors, the
registry anchoring in logs and following its upstream, the witness feeder and its log
lists, the mirror follower, the clients and command lines, the DID resolver) is made
here, by an `Outbound`:

- HTTPS with TLS 1.3 or later, the certificate checked against the system's trust store
  plus the PEM bundles in `ca_files` (a private deployment's CA; the services'
  `outbound_ca_file` setting, the command lines' `--ca-file`);
- every request, and every hop of a redirect, to an https:// URL, or to http:// on this
  machine only (`tlog.formats.urls.plain_beyond_loopback`), unless `insecure_http`; a
  refused request raises `InsecureTransport` before anything is sent;
- no cookies kept from peers; the caller's timeout on every session; answers read with
  `read_capped`, within a cap, headers within aiohttp's line and count limits.

The servers' context (`server_ssl_context`) is built here too: TLS 1.3 only.
`tests/system/test_layout.py` checks that no other module builds a client session, a
connector, an SSL context or a urllib opener.
"""
from __future__ import annotations

import ssl
import threading
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp.abc import AbstractResolver

from tlog.errors import TooLarge
from tlog.formats.urls import INSECURE_HINT, plain_beyond_loopback

if TYPE_CHECKING:
    import urllib3

__all__ = ["MAX_ANSWER", "MIN_TLS", "InsecureTransport", "Outbound", "read_capped", "read_capped_sync",
           "server_ssl_context"]

MIN_TLS = ssl.TLSVersion.TLSv1_3
"""The least TLS version of every connection, both ways (OAP-CORE-1.0 §8.1, §28.1, App. C)."""

MAX_ANSWER = 256 << 20
"""The largest answer a client reads unless its caller sets a smaller cap (a batch of 100,000
inclusion proofs in a tree of 2^30 entries is about 140 MiB)."""


class InsecureTransport(aiohttp.ClientOSError):
    """A request (or a redirect) to plain http:// beyond loopback, refused before it is sent.
    An aiohttp.ClientError and an OSError, so that every caller, asynchronous or blocking,
    treats it as a peer it cannot reach."""


def server_ssl_context(cert: Path | str | None, key: Path | str | None) -> ssl.SSLContext | None:
    """TLS for a service (None without a certificate): TLS 1.3 only."""
    if cert is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = MIN_TLS
    ctx.load_cert_chain(cert, key)
    return ctx


_contexts: dict[tuple, ssl.SSLContext] = {}
_contexts_lock = threading.Lock()


def _client_ssl_context(ca_files: tuple[Path, ...]) -> ssl.SSLContext:
    """A verifying client context, TLS 1.3 at least; one per set of CA files (and their
    versions on disk), since loading the system's trust store takes tens of milliseconds."""
    stamp = []
    for f in ca_files:
        st = f.stat()  # a missing CA file fails here, with its name
        stamp.append((str(f), st.st_mtime_ns, st.st_size))
    key = tuple(stamp)
    with _contexts_lock:
        ctx = _contexts.get(key)
        if ctx is None:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
            for f in ca_files:
                ctx.load_verify_locations(cafile=str(f))
            ctx.minimum_version = MIN_TLS
            _contexts[key] = ctx
        return ctx


def _refusal(url: str) -> str:
    return f"{url} is plain http:// beyond loopback. {INSECURE_HINT}"


@dataclass(frozen=True)
class Outbound:
    """How one process connects out: extra trusted CAs, and whether plain HTTP may leave the
    machine. Services build theirs from their configuration (`from_config`), command lines
    from their options (`tlog.runtime.cli.client_outbound`); the default is strict."""

    ca_files: tuple[Path, ...] = ()
    insecure_http: bool = False

    @classmethod
    def from_config(cls, cfg: Any) -> Outbound:
        """From a service's `outbound_ca_file` and `insecure_http` (`tlog.runtime.config.HTTPConfig`)."""
        ca = cfg.outbound_ca_file
        return cls((Path(ca),) if ca is not None else (), bool(cfg.insecure_http))

    def with_ca(self, ca_file: Path | str | None) -> Outbound:
        """This, also trusting `ca_file` (None: unchanged)."""
        return self if ca_file is None else Outbound((*self.ca_files, Path(ca_file)), self.insecure_http)

    def ssl_context(self) -> ssl.SSLContext:
        """The client TLS context: the system's trust store and `ca_files`, TLS 1.3 at least."""
        return _client_ssl_context(tuple(Path(f) for f in self.ca_files))

    def check(self, url: str) -> None:
        """Refuse (InsecureTransport) a URL this process must not call."""
        if not self.insecure_http and plain_beyond_loopback(url):
            raise InsecureTransport(_refusal(url))

    async def _middleware(self, req: aiohttp.ClientRequest,
                          handler: aiohttp.ClientHandlerType) -> aiohttp.ClientResponse:
        # aiohttp runs the session's middlewares for the first request and for every redirect.
        self.check(str(req.url))
        return await handler(req)

    def session(self, *, timeout: float | aiohttp.ClientTimeout, headers: Mapping[str, str] | None = None,
                limit: int = 100, resolver: AbstractResolver | None = None,
                auto_decompress: bool = True) -> aiohttp.ClientSession:
        """An aiohttp session under this policy. `timeout` in seconds is the total per request;
        `limit` bounds connections at once; `resolver` replaces name resolution (the DID
        resolver's public-addresses-only fence)."""
        connector = aiohttp.TCPConnector(ssl=self.ssl_context(), limit=limit, resolver=resolver)
        if not isinstance(timeout, aiohttp.ClientTimeout):
            timeout = aiohttp.ClientTimeout(total=timeout)
        return aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers,
                                     auto_decompress=auto_decompress, cookie_jar=aiohttp.DummyCookieJar(),
                                     middlewares=(self._middleware,))

    # --- blocking clients ---------------------------------------------------------------

    def open(self, request: str | urllib.request.Request, *, timeout: float) -> Any:
        """urllib's `urlopen` under this policy (for threads and blocking tools): each
        redirect is checked like the first URL. Raises urllib's errors, and InsecureTransport
        (an OSError) for a refused URL."""
        url = request.full_url if isinstance(request, urllib.request.Request) else request
        self.check(url)
        opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=self.ssl_context()),
                                             _CheckedRedirects(self))
        return opener.open(request, timeout=timeout)

    def fetch(self, url: str, *, timeout: float, cap: int = MAX_ANSWER) -> bytes:
        """The body of a GET of `url` (blocking), at most `cap` bytes (TooLarge beyond)."""
        with self.open(url, timeout=timeout) as resp:
            return read_capped_sync(resp, cap, url)

    def pool_manager(self, *, timeout: float) -> urllib3.PoolManager:
        """A urllib3 pool (dulwich's Git smart HTTP client takes one) under this policy: the
        same TLS context, `timeout` to connect and between reads, redirects refused."""
        import urllib3

        return urllib3.PoolManager(ssl_context=self.ssl_context(), timeout=urllib3.Timeout(connect=timeout,
                                   read=timeout), retries=urllib3.Retry(total=0, redirect=False), cert_reqs="REQUIRED")


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    def __init__(self, outbound: Outbound) -> None:
        self.outbound = outbound

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        self.outbound.check(newurl)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


async def read_capped(resp: aiohttp.ClientResponse, cap: int) -> bytes:
    """The whole body of an answer, read to its end (one `read(n)` may return only part of
    it, which would pass for a short tile or a truncated cosignature), refusing more than
    `cap` bytes with TooLarge before buffering them."""
    chunks, total = [], 0
    async for chunk in resp.content.iter_any():
        total += len(chunk)
        if total > cap:
            raise TooLarge(f"{resp.url}: answer larger than {cap} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def read_capped_sync(resp: Any, cap: int, url: str) -> bytes:
    """`read_capped` for a blocking (urllib) answer."""
    data = resp.read(cap + 1)
    if len(data) > cap:
        raise TooLarge(f"{url}: answer larger than {cap} bytes")
    return data
