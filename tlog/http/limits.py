"""Abuse limits shared by the services: rate limits, write auth, client identity, slow clients.

- `Limits`: every rate limit of one service, declared once (which buckets, which requests
  take a token of each), and the only code that takes their tokens.
- `RateLimiter`: a token bucket per client and request class, answered with 429
  and Retry-After. At most `max_clients` buckets are kept (least recently seen
  dropped first), so memory stays bounded whatever the number of clients.
- `client_address`: whom a bucket belongs to, from the peer address or, behind
  trusted proxies, the X-Forwarded-For hop the farthest of them appended.
- `TokenAuth`: bearer tokens stored only as SHA-256 digests and compared with
  `hmac.compare_digest`; each token lists the entry types it may write.
- `WriteGate`: a write's token and rate limits, cheap checks before the body is parsed.
Slow clients: aiohttp closes a connection whose request head is not complete
within `keepalive_timeout` (checked: a slowloris trickle is cut at that time),
so services pass `header_timeout` there; bodies are bounded by `read_timeout`
in `tlog.http.bodies.read_body`.
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from tlog.errors import AuthRequired, Forbidden, RateLimited


class RateLimiter:
    def __init__(self, rate: float, burst: float, *, max_clients: int = 100_000) -> None:
        self.rate, self.burst = rate, burst
        self.max_clients = max_clients
        self._buckets: OrderedDict[tuple[str, str], tuple[float, float]] = OrderedDict()

    def allows(self, client: str, kind: str, cost: float = 1.0) -> bool:
        """Whether `check` would pass now, taking nothing (the fast path asks first, and
        takes the token only for a request it answers)."""
        if self.rate <= 0:
            return True
        return self._level((client, kind), time.monotonic()) >= cost

    def _level(self, key: tuple[str, str], now: float) -> float:
        """The tokens in a bucket now (full for a client not seen yet)."""
        tokens, last = self._buckets.get(key, (self.burst, now))
        return min(self.burst, tokens + (now - last) * self.rate)

    def check(self, client: str, kind: str, cost: float = 1.0) -> None:
        """Take `cost` tokens or raise RateLimited with the seconds to wait."""
        if self.rate <= 0:
            return
        now = time.monotonic()
        key = (client, kind)
        tokens = self._level(key, now)
        self._buckets.pop(key, None)  # re-inserted below: the most recently seen clients are kept
        if tokens < cost:
            self._buckets[key] = (tokens, now)
            wait = math.ceil((cost - tokens) / self.rate)
            unit = "entries written" if kind == "write" else "requests"
            raise RateLimited(f"rate limit: {self.rate:g} {unit} per second per client", retry_after=max(1, wait))
        self._buckets[key] = (tokens - cost, now)
        while len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)

    def __len__(self) -> int:
        """Buckets held: at most `max_clients`, the least recently seen dropped first."""
        return len(self._buckets)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> tuple[str, str]:
    """A fresh bearer token and the line to put in a tokens file."""
    token = "oap_" + secrets.token_urlsafe(32)
    return token, token_digest(token)


class TokenAuth:
    """Tokens file lines: `<sha256 hex of token> <type,type|*> [label]`; '#' comments."""

    def __init__(self, required_for: Iterable[str], entries: list[tuple[bytes, frozenset[str], str]]) -> None:
        self.required_for = frozenset(required_for)
        self.entries = entries

    @classmethod
    def from_file(cls, required_for: Iterable[str], path: Path | None) -> TokenAuth:
        entries = []
        if path is not None:
            for n, line in enumerate(Path(path).read_text().splitlines(), 1):
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                parts = line.split()
                if len(parts) < 2 or len(parts[0]) != 64:
                    raise ValueError(f"{path}:{n}: expected '<sha256 hex> <types|*> [label]'")
                entries.append((bytes.fromhex(parts[0]), frozenset(parts[1].split(",")), " ".join(parts[2:])))
        return cls(required_for, entries)

    def needs(self, entry_type: str) -> bool:
        return "*" in self.required_for or entry_type in self.required_for

    @property
    def configured(self) -> bool:
        return bool(self.required_for)

    def lookup(self, authorization: str | None) -> tuple[frozenset[str], str] | None:
        """The (types, label) of a valid bearer token in an Authorization header, else None.

        The scheme is matched case-insensitively (RFC 7235 §2.1); every stored digest
        is compared, with no early exit.
        """
        if not authorization:
            return None
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        digest = hashlib.sha256(token.strip().encode()).digest()
        match = None
        for stored, types, label in self.entries:
            if hmac.compare_digest(stored, digest):
                match = (types, label)
        return match

    def check(self, authorization: str | None, entry_type: str) -> str | None:
        """Return the token's label, or raise 401/403. No token needed: None."""
        if not self.needs(entry_type):
            return None
        return self.allow(self.lookup(authorization), authorization, entry_type)

    def allow(self, grant: tuple[frozenset[str], str] | None, authorization: str | None, entry_type: str) -> str:
        """401/403 unless `grant` (from `lookup`) may write `entry_type` entries."""
        if grant is None:
            if authorization:
                raise AuthRequired("unknown bearer token")
            raise AuthRequired(f"writing {entry_type} entries needs a bearer token")
        types, label = grant
        if "*" not in types and entry_type not in types:
            raise Forbidden(f"this token may not write {entry_type} entries")
        return label


class Admitted(NamedTuple):
    """What `WriteGate.admit` learnt before the body was read."""

    client: str
    authorization: str | None
    grant: tuple[frozenset[str], str] | None  # a valid token's (types, label)
    strict: bool  # no valid token where tokens are used: the strict parse budget


class WriteGate:
    """A write's bearer token and rate limits: steps 1 and 5 of the write pipeline
    (`tlog.server.pipeline`), the same for every route that appends entries.

    `admit` runs before any byte of the body is read: the bearer token (401 at once when
    every write needs one), then, where tokens are used, a request without a valid one
    takes a token of a small per-client bucket of requests (and is parsed with the strict
    budget), and every request takes one token of the client's write bucket, so a
    malformed or hostile body is counted too. `authorize` runs on the parsed entries:
    the token's types, then the rest of a batch's entries in the write bucket.
    """

    def __init__(self, auth: TokenAuth, rate: float, burst: float, unauthenticated: float) -> None:
        """`rate`/`burst`: entries per second per client; `unauthenticated`: write requests per
        second per client without a valid token, where tokens are used (burst twice that)."""
        self.auth = auth
        self.writes = RateLimiter(rate, burst)
        self.unauthenticated = RateLimiter(unauthenticated, max(1.0, 2 * unauthenticated))

    def admit(self, authorization: str | None, client: str) -> Admitted:
        grant = self.auth.lookup(authorization) if self.auth.configured else None
        if grant is None and "*" in self.auth.required_for:
            self.auth.allow(None, authorization, "*")  # raises 401
        strict = grant is None and self.auth.configured
        if strict:
            self.unauthenticated.check(client, "request")
        self.writes.check(client, "write")
        return Admitted(client, authorization, grant, strict)

    def authorize(self, admitted: Admitted, types: Iterable[str], count: int) -> None:
        if self.auth.configured:
            for t in sorted(set(types)):
                if self.auth.needs(t):
                    self.auth.allow(admitted.grant, admitted.authorization, t)
        if count > 1:
            self.writes.check(admitted.client, "write", cost=count - 1)


RequestFilter = Callable[[str, str], bool]
"""(method, path) -> whether such a request takes a token of a service's request bucket."""


def every_request(method: str, path: str) -> bool:
    return True


class Limits:
    """Every rate limit of one service, declared once, and the only code that takes its tokens.

    `rate`/`burst` make the per-client bucket of requests, taken by the requests `applies`
    selects by method and path (so a route is limited, or not, whichever path answers it);
    `writes` is the log's `WriteGate` for its entry writes. Each request takes its tokens
    at one point, before its handler reads a byte of the body: the middleware
    (`tlog.http.middleware`) for what aiohttp answers, `tlog.http.fastpath` for what
    the fast path answers (asking `applies` once per route, when the routes are set up),
    and step 1 of the log's write pipeline (`tlog.server.pipeline`) for entry writes, whose
    cost depends on the bearer token and the number of entries.
    """

    def __init__(self, rate: float = 0.0, burst: float = 1.0, *, applies: RequestFilter = every_request,
                 writes: WriteGate | None = None) -> None:
        self.requests = RateLimiter(rate, burst) if rate > 0 else None
        self._applies = applies
        self.writes = writes

    def applies(self, method: str, path: str) -> bool:
        """Whether such a request takes a token of the request bucket."""
        return self.requests is not None and self._applies(method, path)

    def allows(self, client: str) -> bool:
        """Whether `take` would pass now, taking nothing: the fast path asks first and takes
        the token only for a request it answers (aiohttp's middleware takes the others', once)."""
        return self.requests is None or self.requests.allows(client, "request")

    def take(self, client: str) -> None:
        """One token of the client's request bucket, or RateLimited (429 with Retry-After)."""
        if self.requests is not None:
            self.requests.check(client, "request")


def client_address(peer: str | None, forwarded: str | None, trusted_proxies: int) -> str:
    """The client a rate limit applies to.

    Behind `trusted_proxies` reverse proxies, each appends to X-Forwarded-For the
    address it got the request from, so the client is the hop the farthest trusted
    proxy appended: the `trusted_proxies`-th from the right. Hops left of it were
    written by the client and mean nothing. A hop that is not an IP address, or a
    header with fewer hops than proxies, falls back to the peer address. IPv6
    clients share a bucket per /64, the block one subscriber gets.
    """
    addr = peer or "unknown"
    if trusted_proxies and forwarded:
        hops = forwarded.split(",")
        if len(hops) >= trusted_proxies:
            hop = hops[-trusted_proxies].strip()
            got = _ip_bucket(hop) if len(hop) <= 45 else None
            if got is not None:
                return got
    return _ip_bucket(addr) or addr


def _ip_bucket(text: str) -> str | None:
    """`text` as a bucket key if it is an IP address: IPv4 as is, IPv6 by its /64."""
    hit = _buckets.get(text)
    if hit is not None:
        return hit
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if ip.version == 6:
        mapped = ip.ipv4_mapped
        key = str(mapped) if mapped is not None else str(ipaddress.ip_network((ip, 64), strict=False))
    else:
        key = str(ip)
    if len(_buckets) >= 4096:
        _buckets.popitem(last=False)
    _buckets[text] = key
    return key


_buckets: OrderedDict[str, str] = OrderedDict()
