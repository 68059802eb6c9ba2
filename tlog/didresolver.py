"""Resolving DIDs to their documents: did:web over HTTPS and did:plc from a PLC
directory (OAP-CORE-1.0 §5.1), cached, bounded and safe to run on a public server.

A service resolves only the DIDs a submission names as signers
(`tlog.formats.diddoc.dids_to_resolve`, at most 16 per request), then checks the
signatures with the pure code in `tlog.formats.diddoc`. Because a submission makes
the service fetch a URL chosen by its sender, fetching is fenced in:

- did:web goes over HTTPS (`tlog.transport`: TLS 1.3, the system's trust store plus
  the service's `outbound_ca_file` and `did_ca_file`) to public addresses only: names
  that resolve to loopback, private, link-local or other non-global addresses are
  refused unless `allow_private_networks` is set (tests, or an intranet). Redirects
  are not followed; documents over 64 KiB, answers slower than `timeout`, and more
  than 16 fetches at once are refused.
- `localhost` and every name under it (`witness-1.localhost`) are loopback names
  (RFC 6761 §6.3): they are never sent to DNS. They are refused like any loopback
  address, and with `allow_private_networks` connect to 127.0.0.1, so that several
  did:web principals on one machine have hosts of their own (`make run` serves its
  participants' documents so).
- Answers are cached for `cache_seconds`, failures for 30 s, at most 10,000 DIDs:
  a sender cannot make the service fetch one document over and over.
- Pinned documents (a directory of DID documents, or a mapping) answer first and
  never expire: offline verification, and DIDs an operator vouches for.

did:plc documents are taken as the PLC directory serves them (as atproto clients
do); the directory's audit log of signed operations is not replayed here.
"""
from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from tlog.errors import InvalidInput, OAPError, TooLarge, UpstreamError
from tlog.formats.diddoc import DocumentLookup, VerificationKey, did_web_url, keys_from_document, plc_url
from tlog.formats.strict import loads_json
from tlog.transport import Outbound, read_capped

__all__ = ["DEFAULT_PLC_DIRECTORY", "DidResolver", "is_localhost_name"]

DEFAULT_PLC_DIRECTORY = "https://plc.directory"
MAX_DOCUMENT = 64 * 1024
FAILURE_SECONDS = 30.0
MAX_CACHED = 10_000
MAX_FETCHES = 16


class _Entry:
    __slots__ = ("document", "error", "expires", "keys")

    def __init__(self, expires: float, document: Any = None, keys: tuple[VerificationKey, ...] = (),
                 error: OAPError | None = None) -> None:
        self.expires, self.document, self.keys, self.error = expires, document, keys, error


def _public(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_global
    except ValueError:
        return False


class _NotPublic(OSError):
    """A name that resolves to no public address (the refusal, told apart from DNS failures)."""


def is_localhost_name(host: str) -> bool:
    """`localhost` or a name under it (RFC 6761 §6.3: always the loopback address)."""
    name = host.lower().rstrip(".")
    return name == "localhost" or name.endswith(".localhost")


class _Resolver(AbstractResolver):
    """Name resolution for did:web hosts. `public_only`: every non-global address is
    dropped (no SSRF into the host's own network: the address connected to is the
    address checked). Localhost names never go to DNS (RFC 6761 §6.3): loopback, so
    refused when `public_only`, else 127.0.0.1."""

    def __init__(self, *, public_only: bool) -> None:
        self._inner = aiohttp.ThreadedResolver()
        self.public_only = public_only

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_UNSPEC) -> list[ResolveResult]:
        if is_localhost_name(host):
            if self.public_only:
                raise _NotPublic(f"{host} is a loopback name")
            return [ResolveResult(hostname=host, host="127.0.0.1", port=port, family=socket.AF_INET,
                                  proto=0, flags=socket.AI_NUMERICHOST)]
        found = await self._inner.resolve(host, port, family)
        if self.public_only:
            found = [r for r in found if _public(r["host"])]
            if not found:
                raise _NotPublic(f"{host} resolves to no public address")
        return found

    async def close(self) -> None:
        await self._inner.close()


class DidResolver:
    """DID -> document and signing keys, with a cache; one per service process."""

    def __init__(self, *, plc_directory: str = DEFAULT_PLC_DIRECTORY, cache_seconds: float = 300.0,
                 timeout: float = 5.0, allow_private_networks: bool = False, ca_file: Path | None = None,
                 pinned: Mapping[str, Any] | None = None, enabled: bool = True,
                 outbound: Outbound | None = None) -> None:
        """`outbound`: the process's outbound policy (tlog.transport), its CA files trusted
        here too, and `ca_file` for did:web hosts besides; plain HTTP is never used here,
        whatever the policy allows elsewhere (only a PLC directory on loopback, for tests)."""
        self.plc_directory = plc_directory.rstrip("/")
        self.cache_seconds, self.timeout = cache_seconds, timeout
        self.allow_private = allow_private_networks
        self.outbound = Outbound((outbound or Outbound()).ca_files).with_ca(ca_file)
        self.enabled = enabled
        self.pinned: dict[str, _Entry] = {}
        for did, doc in (pinned or {}).items():
            self.pinned[did] = _Entry(float("inf"), doc, keys_from_document(did, doc))
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._inflight: dict[str, asyncio.Future[_Entry]] = {}
        self._fetches = asyncio.Semaphore(MAX_FETCHES)
        self._session: aiohttp.ClientSession | None = None
        self.fetched = 0  # documents fetched over the network (for tests and metrics)

    @classmethod
    def from_config(cls, cfg: Any) -> DidResolver:
        """From a service config's did_* settings (`tlog.runtime.config.HTTPConfig`)."""
        pinned: dict[str, Any] = {}
        if cfg.did_documents_dir is not None:
            for path in sorted(Path(cfg.did_documents_dir).glob("*.json")):
                doc = loads_json(path.read_bytes())
                if not isinstance(doc, dict) or not isinstance(doc.get("id"), str):
                    raise InvalidInput(f"{path}: not a DID document")
                pinned[doc["id"]] = doc
        return cls(plc_directory=cfg.did_plc_directory, cache_seconds=cfg.did_cache_seconds,
                   timeout=cfg.did_timeout, allow_private_networks=cfg.did_allow_private_networks,
                   ca_file=cfg.did_ca_file, pinned=pinned, enabled=cfg.did_resolution,
                   outbound=Outbound.from_config(cfg))

    # --- the API ---------------------------------------------------------------------

    async def resolve(self, did: str) -> tuple[Any, tuple[VerificationKey, ...]]:
        """(document, signing keys) of `did`; an OAPError saying why when it cannot."""
        entry = await self._entry(did)
        if entry.error is not None:
            raise entry.error
        return entry.document, entry.keys

    async def lookup_for(self, dids: Iterable[str]) -> DocumentLookup:
        """Resolve `dids` concurrently, then a synchronous KeyLookup over the answers for
        the pure validators (each DID's failure is raised when it is looked up); it also
        gives the documents, which the log keeps in the entries they verified."""
        entries = await self.entries(dids)

        def lookup(did: str) -> tuple[Any, Sequence[VerificationKey]]:
            entry = entries.get(did) or self.pinned.get(did)
            if entry is None:
                raise InvalidInput(f"{did} was not resolved for this request")
            if entry.error is not None:
                raise entry.error
            return entry.document, entry.keys
        return DocumentLookup(lookup)

    async def documents_for(self, dids: Iterable[str]) -> dict[str, Any]:
        """The documents of `dids` (what a registry stores beside the records they signed)."""
        out = {}
        for did, entry in (await self.entries(dids)).items():
            if entry.error is not None:
                raise entry.error
            out[did] = entry.document
        return out

    async def entries(self, dids: Iterable[str]) -> dict[str, _Entry]:
        wanted = sorted(set(dids))
        got = await asyncio.gather(*(self._entry(d) for d in wanted))
        return dict(zip(wanted, got))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # --- cache and fetching ------------------------------------------------------------

    async def _entry(self, did: str) -> _Entry:
        pinned = self.pinned.get(did)
        if pinned is not None:
            return pinned
        now = time.monotonic()
        cached = self._cache.get(did)
        if cached is not None and cached.expires > now:
            self._cache.move_to_end(did)
            return cached
        running = self._inflight.get(did)
        if running is not None:
            return await asyncio.shield(running)
        fut: asyncio.Future[_Entry] = asyncio.get_running_loop().create_future()
        self._inflight[did] = fut
        try:
            entry = await self._fetch_entry(did)
            self._cache[did] = entry
            self._cache.move_to_end(did)
            while len(self._cache) > MAX_CACHED:
                self._cache.popitem(last=False)
            fut.set_result(entry)
            return entry
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()
            raise
        finally:
            del self._inflight[did]

    async def _fetch_entry(self, did: str) -> _Entry:
        try:
            if not self.enabled:
                raise InvalidInput(f"{did}: DID resolution is turned off here (did_resolution = false); only "
                                   "did:key and pinned DID documents are accepted")
            if did.startswith("did:web:"):
                url = did_web_url(did)
            elif did.startswith("did:plc:"):
                url = plc_url(self.plc_directory, did)
            else:
                raise InvalidInput(f"{did}: DID method {did.split(':')[1]!r} is not supported here "
                                   "(did:key, did:web and did:plc are; others through pinned documents)")
            doc = await self._fetch(did, url)
            keys = keys_from_document(did, doc)
        except OAPError as e:
            return _Entry(time.monotonic() + FAILURE_SECONDS, error=e)
        return _Entry(time.monotonic() + self.cache_seconds, doc, keys)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = self.outbound.session(
                timeout=self.timeout, limit=MAX_FETCHES, resolver=_Resolver(public_only=not self.allow_private),
                headers={"Accept": "application/did+json, application/json"})
        return self._session

    def _check_target(self, did: str, url: str) -> None:
        parts = urlsplit(url)
        host = parts.hostname or ""
        configured_plc = url.startswith(self.plc_directory + "/")
        if parts.scheme != "https" and not (configured_plc and host in ("127.0.0.1", "::1", "localhost")):
            raise InvalidInput(f"{did}: documents are fetched over HTTPS only")
        if self.allow_private or configured_plc:
            return
        if is_localhost_name(host):
            raise InvalidInput(f"{did}: the document's host is not a public address")
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            return  # a name: _Resolver checks what it resolves to
        if not literal.is_global:
            raise InvalidInput(f"{did}: the document's host is not a public address")

    async def _fetch(self, did: str, url: str) -> Any:
        self._check_target(did, url)
        async with self._fetches:
            self.fetched += 1
            try:
                async with self._client().get(url, allow_redirects=False) as r:
                    if r.status in (404, 410):
                        raise InvalidInput(f"{did} does not resolve: {url} answered {r.status}")
                    if r.status != 200:
                        raise UpstreamError(f"{did}: {url} answered {r.status}")
                    if (r.content_length or 0) > MAX_DOCUMENT:
                        raise InvalidInput(f"{did}: the DID document is larger than {MAX_DOCUMENT} bytes")
                    body = await read_capped(r, MAX_DOCUMENT)
            except TooLarge:
                raise InvalidInput(f"{did}: the DID document is larger than {MAX_DOCUMENT} bytes") from None
            except (TimeoutError, aiohttp.ClientError, OSError) as e:
                if isinstance(e, _NotPublic) or isinstance(getattr(e, "os_error", None), _NotPublic):
                    raise InvalidInput(f"{did}: the document's host is not a public address") from None
                raise UpstreamError(f"{did}: fetching {url} failed: {type(e).__name__}: "
                                    f"{str(e).splitlines()[0][:200] if str(e) else ''}") from None
        try:
            return loads_json(body)
        except (OAPError, ValueError, json.JSONDecodeError) as e:
            raise InvalidInput(f"{did}: the DID document is not JSON: {e}") from None
