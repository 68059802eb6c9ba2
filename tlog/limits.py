"""Abuse limits shared by the services (issue 6): rate limits, write auth, slow clients.

- `RateLimiter`: a token bucket per client address and request class, answered
  with 429 and Retry-After. Buckets are pruned so memory stays bounded whatever
  the number of clients.
- `TokenAuth`: bearer tokens stored only as SHA-256 digests and compared with
  `hmac.compare_digest`; each token lists the entry types it may write.
Slow clients: aiohttp closes a connection whose request head is not complete
within `keepalive_timeout` (checked: a slowloris trickle is cut at that time),
so services pass `header_timeout` there; bodies are bounded by `read_timeout`
in `tlog.http.read_body`.
"""
from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

from .errors import AuthRequired, Forbidden, RateLimited


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
    def from_file(cls, required_for: Iterable[str], path: Path | None) -> "TokenAuth":
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

    def check(self, authorization: str | None, entry_type: str) -> str | None:
        """Return the token's label, or raise 401/403. No token needed: None."""
        if not self.needs(entry_type):
            return None
        if not authorization or not authorization.startswith("Bearer "):
            raise AuthRequired(f"writing {entry_type} entries needs a bearer token")
        digest = hashlib.sha256(authorization[7:].strip().encode()).digest()
        match = None
        for stored, types, label in self.entries:  # compare with every entry: no early exit
            if hmac.compare_digest(stored, digest):
                match = (types, label)
        if match is None:
            raise AuthRequired("unknown bearer token")
        types, label = match
        if "*" not in types and entry_type not in types:
            raise Forbidden(f"this token may not write {entry_type} entries")
        return label
