"""Typed configuration: one frozen dataclass per service, from TOML, env, flags.

Precedence: defaults < TOML file (a `[log]` table, or top level) < environment
(`OAP_LOG_<FIELD>`) < command-line flags. `validate()` fails on bad or
conflicting settings instead of silently adjusting them.
"""
from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    pass


def _coerce(value: Any, typ: Any, name: str) -> Any:
    t = typ if isinstance(typ, type) else {"int": int, "float": float, "str": str, "bool": bool, "Path": Path}.get(
        str(typ).split(" |")[0], None
    )
    try:
        if t is bool and isinstance(value, str):
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if t is Path:
            return Path(value)
        if t in (int, float, str) and not isinstance(value, t):
            if t is int and isinstance(value, float):
                raise ValueError(value)
            return t(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: cannot use {value!r} as {getattr(t, '__name__', t)}") from None
    return value


def _coerce_list(value: Any, name: str) -> tuple:
    """A TOML array of tables -> tuple of (name, vkey, url) rows (witness lists)."""
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{name}: expected a list")
    rows = []
    for item in value:
        if isinstance(item, dict):
            extra = set(item) - {"name", "vkey", "url"}
            if extra or not {"name", "vkey"} <= set(item):
                raise ConfigError(f"{name}: each entry needs name and vkey (and url); unknown: {sorted(extra)}")
            rows.append((str(item["name"]), str(item["vkey"]), str(item.get("url", ""))))
        elif isinstance(item, (list, tuple)) and len(item) == 3:
            rows.append(tuple(str(x) for x in item))
        else:
            raise ConfigError(f"{name}: entries must be tables with name, vkey, url")
    return tuple(rows)


def load(cls: type[T], *, section: str, env_prefix: str, file: Path | None = None, **flags: Any) -> T:
    """Build `cls` from defaults, an optional TOML file, env vars and flags (None = unset)."""
    values: dict[str, Any] = {}
    known = {f.name: f for f in fields(cls)}
    if file is not None:
        try:
            doc = tomllib.loads(Path(file).read_text())
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"{file}: {e}") from None
        table = doc.get(section, doc)
        for k, v in table.items():
            if isinstance(v, dict) and k not in known:
                continue  # another service's table
            if k in _REPLACED:
                raise ConfigError(f"{file}: {_REPLACED[k]}")
            if k not in known:
                raise ConfigError(f"{file}: unknown setting {k!r} in [{section}]")
            values[k] = v
    for name in known:
        env = os.environ.get(f"{env_prefix}{name.upper()}")
        if env is not None:
            values[name] = env
    for k, v in flags.items():
        if v is not None:
            values[k] = v
    for k, v in list(values.items()):
        typ = str(known[k].type)
        if typ.startswith("tuple[tuple"):
            values[k] = _coerce_list(v, k)
        elif typ.startswith("tuple"):
            items = v.split(",") if isinstance(v, str) else v
            if not isinstance(items, (list, tuple)) or not all(isinstance(x, str) for x in items):
                raise ConfigError(f"{k}: expected a list of strings")
            values[k] = tuple(x.strip() for x in items if x.strip())
        else:
            values[k] = _coerce(v, known[k].type, k)
    cfg = cls(**values)
    cfg.validate()  # type: ignore[attr-defined]
    return cfg


def is_loopback(host: str) -> bool:
    """Whether a listen address reaches only this machine ("localhost", 127.0.0.0/8, ::1)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


_REPLACED = {
    "trust_forwarded_for": "trust_forwarded_for was replaced by trusted_proxies, the number of reverse "
                           "proxies in front of the service (1 for one; 0 ignores X-Forwarded-For)",
}


@dataclass(frozen=True)
class HTTPConfig:
    """The HTTP settings every service has (each service's config extends this)."""

    host: str = "127.0.0.1"
    port: int = 0
    tls_cert: Path | None = None
    tls_key: Path | None = None
    header_timeout: float = 15.0  # request head (and keep-alive idle) limit, seconds
    read_timeout: float = 30.0  # request body limit, seconds
    send_timeout: float = 30.0  # a client that takes longer to read an answer is dropped
    bytes_in_flight_mb: int = 64  # large answers being built or sent, across all connections (503 above)
    trusted_proxies: int = 0  # reverse proxies in front that append to X-Forwarded-For (0: ignore it)
    log_format: str = "text"

    def validate(self) -> None:
        check_http_limits(self)


def check_http_limits(cfg: HTTPConfig) -> None:
    """The HTTP settings every service has: TLS pair, slow-client timeouts, rate limit."""
    if not 0 <= cfg.port <= 65535:
        raise ConfigError("port must be 0..65535")
    if (cfg.tls_cert is None) != (cfg.tls_key is None):
        raise ConfigError("tls_cert and tls_key go together")
    if not all(0 < t <= 3600 for t in (cfg.header_timeout, cfg.read_timeout, cfg.send_timeout)):
        raise ConfigError("header_timeout, read_timeout and send_timeout must be in (0, 3600] seconds")
    if not 0 <= cfg.trusted_proxies <= 16:
        raise ConfigError("trusted_proxies must be 0..16")
    if not 1 <= cfg.bytes_in_flight_mb <= 1 << 16:
        raise ConfigError("bytes_in_flight_mb must be 1..65536")
    if cfg.log_format not in ("text", "json"):
        raise ConfigError("log_format must be 'text' or 'json'")
    rate = getattr(cfg, "rate_limit", None)
    if rate is not None and (rate < 0 or getattr(cfg, "rate_limit_burst") < 1):
        raise ConfigError("rate_limit must be >= 0 and rate_limit_burst >= 1")


@dataclass(frozen=True)
class LogConfig(HTTPConfig):
    data_dir: Path = Path("data")
    port: int = 8080
    origin: str = "oap.localhost/log"
    max_batch: int = 1024
    batch_interval_ms: int = 50
    max_pending: int = 100_000
    max_entry_body: int = 256 * 1024
    max_body: int = 16 * 1024 * 1024
    max_batch_entries: int = 10_000
    max_proof_batch: int = 100_000
    hash_sync_interval: float = 5.0
    witness_policy: Path | None = None  # tlog-policy file: witness lines with URLs, groups, quorum
    witnesses: tuple[tuple[str, str, str], ...] = ()  # or: [[log.witnesses]] name, vkey, url ...
    witness_quorum: int = 0  # ... with k of them required (0: none)
    witness_timeout: float = 5.0
    rate_limit_write: float = 2000.0  # entries per second per client (0: off)
    rate_limit_write_burst: float = 20000.0
    rate_limit_read: float = 1000.0  # dynamic reads (proofs, lookups): requests per second per client (0: off)
    rate_limit_read_burst: float = 2000.0
    rate_limit_tiles: bool = False  # also limit checkpoint and tile reads (immutable: serve them through a cache)
    rate_limit_unauthenticated: float = 50.0  # write requests/s per client without a token, where tokens are used
    auth_required_for: tuple[str, ...] = ()  # entry types that need a bearer token ("*" for all)
    tokens_file: Path | None = None  # lines "<sha256 hex of token> <types|*> [label]"
    read_workers: int = 0  # extra processes answering tile and checkpoint reads (tlog.server.readworkers)
    map_window_mb: int = 16  # MiB of each hash-file level kept mapped (tlog.storage.hashfiles; 0: no limit)

    def validate(self) -> None:
        check_http_limits(self)
        if not 0 <= self.read_workers <= 64:
            raise ConfigError("read_workers must be 0..64")
        if not 0 <= self.map_window_mb <= 1 << 20:
            raise ConfigError("map_window_mb must be 0..1048576 (0: no limit)")
        if self.read_workers and self.tls_cert is not None:
            raise ConfigError("read_workers need plain HTTP: a TLS session cannot move between processes "
                              "(terminate TLS in front of the log)")
        if not self.origin or len(self.origin.encode()) > 255 or any(c.isspace() or c == "+" for c in self.origin):
            raise ConfigError("origin must be 1..255 bytes with no spaces or '+'")
        if not 1 <= self.max_batch <= 100_000:
            raise ConfigError("max_batch must be 1..100000")
        if not 0 <= self.batch_interval_ms <= 60_000:
            raise ConfigError("batch_interval_ms must be 0..60000")
        if self.max_pending < self.max_batch:
            raise ConfigError("max_pending must be at least max_batch")
        if self.max_batch_entries > self.max_pending:
            raise ConfigError("max_batch_entries must not exceed max_pending")
        if not 1 <= self.max_proof_batch <= 1_000_000:
            raise ConfigError("max_proof_batch must be 1..1000000")
        if self.max_entry_body < 65535 + 1024 or self.max_body < self.max_entry_body:
            raise ConfigError("max_entry_body must leave room for a 65535-byte entry; max_body >= max_entry_body")
        if self.witness_policy is not None and self.witnesses:
            raise ConfigError("configure witnesses either with witness_policy or with witnesses, not both")
        if not 0 <= self.witness_quorum <= len(self.witnesses):
            raise ConfigError(f"witness_quorum must be 0..{len(self.witnesses)} (the number of witnesses)")
        if any(not url for _, _, url in self.witnesses):
            raise ConfigError("every witness needs a url the log can push to")
        if not 0.05 <= self.witness_timeout <= 120:
            raise ConfigError("witness_timeout must be 0.05..120 seconds")
        if self.auth_required_for and self.tokens_file is None:
            raise ConfigError("auth_required_for needs a tokens_file")
        unknown = set(self.auth_required_for) - {"*", "receipt", "commitment", "conformance", "registry"}
        if unknown:
            raise ConfigError(f"auth_required_for: unknown entry types {sorted(unknown)}")
        if min(self.rate_limit_write, self.rate_limit_read, self.rate_limit_unauthenticated) < 0:
            raise ConfigError("rate limits must be >= 0")
        if self.rate_limit_write and self.rate_limit_write_burst < self.max_batch_entries:
            raise ConfigError("rate_limit_write_burst must allow one full batch (max_batch_entries)")

    def replace(self, **kw: Any) -> "LogConfig":
        cfg = dataclasses.replace(self, **kw)
        cfg.validate()
        return cfg
