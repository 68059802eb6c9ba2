"""Registry configuration: one frozen dataclass, loaded like the log's (`tlog.runtime.config.load`).

Precedence: defaults < TOML (`[registry]` table) < env `OAP_REGISTRY_<FIELD>` <
flags. `validate()` refuses bad or conflicting settings rather than adjusting them.

Example `registry.toml`:

    [registry]
    data_dir = "registry-data"
    host = "127.0.0.1"
    port = 8090
    name = "registry"                     # served as /registry.git
    log_url = "http://127.0.0.1:8080"     # where commits and status epochs are anchored
    log_policy = "log.policy"             # optional tlog-policy (log key, witnesses, quorum)
    # or, to anchor in several logs (OAP-CORE-1.0 §19.3), instead of log_url:
    # log_urls = ["https://log-a.example", "https://log-b.example"]
    # anchor_quorum = 2                   # a commit counts as anchored once k of them hold it
    public_url = "https://registry.example"
    epoch_seconds = 300
    bootstrap_witnesses = "did:key:z6Mk...,did:key:z6Mk..."   # genesis only
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tlog.errors import ConfigError
from tlog.formats.anchors import MAX_LOGS
from tlog.formats.did import is_did
from tlog.formats.urls import is_loopback
from tlog.runtime.config import HTTPConfig, check_http_limits


@dataclass(frozen=True)
class RegistryConfig(HTTPConfig):
    data_dir: Path = Path("registry-data")
    port: int = 8090
    name: str = "registry"
    log_url: str = ""  # the log every commit, status epoch and kill switch is anchored in ...
    log_urls: tuple[str, ...] = ()  # ... or several logs (§19.3), each anchoring all of them
    anchor_quorum: int = 0  # k: anchored once k of the logs hold it; 0 means min(2, number of logs)
    log_timeout: float = 10.0  # per log and request: a log that does not answer delays anchoring no longer
    catch_up_seconds: float = 5.0  # how often a log that missed commits is tried again (several logs)
    log_policy: Path | None = None
    log_wait_seconds: float = 30.0  # at start, wait this long for the logs to answer
    log_token_file: Path | None = None  # a bearer token (`oap-log token`) for a log that requires one for writes
    key_file: Path | None = None  # default: <data_dir>/registry.key, created on first start
    public_url: str = ""  # base of status list credential ids; required when listening beyond loopback
    upstream: str = ""  # mirror mode: the registry to follow (read-only here)
    registry_key: str = ""  # mirror mode: pin the upstream registry key (did:key)
    mirror_interval: float = 30.0
    max_batch: int = 512
    batch_interval_ms: int = 50
    anchor_idle_seconds: float = 5.0
    epoch_seconds: int = 300
    min_epoch_interval: float = 1.0
    max_body: int = 1024 * 1024
    max_git_body: int = 16 * 1024 * 1024
    max_packs: int = 64  # compact the repository when batches have left more packs than this
    bootstrap_witnesses: str = ""
    l4_witnesses_hold_level: bool = False  # stricter than §31: an L4 receipt's witness must hold L4/L5 here
    rate_limit: float = 200.0  # requests per second per client (0: off); 429 + Retry-After
    rate_limit_burst: float = 400.0
    log_list: Path | None = None  # JSON {"logs": [...]} the registry signs and serves at /v1/log-list (§6.2)

    @property
    def bootstrap(self) -> tuple[str, ...]:
        return tuple(w.strip() for w in self.bootstrap_witnesses.split(",") if w.strip())

    @property
    def mirror(self) -> bool:
        return bool(self.upstream)

    @property
    def logs(self) -> tuple[str, ...]:
        """The URLs of the logs this registry anchors in (log_url is the one-log form)."""
        return (self.log_url,) if self.log_url else self.log_urls

    @property
    def quorum(self) -> int:
        """k: in how many of `logs` a commit must be anchored before it is published."""
        return self.anchor_quorum or min(2, len(self.logs))

    def upstream_urls(self) -> Iterable[tuple[str, str]]:
        yield from (("log_urls" if self.log_urls else "log_url", url) for url in self.logs)
        if self.upstream:
            yield "upstream", self.upstream

    def advertised_urls(self) -> Iterable[tuple[str, str]]:
        """The base of the status list credentials' ids, which clients fetch."""
        if self.public_url:
            yield "public_url", self.public_url

    def validate(self) -> None:
        check_http_limits(self)
        if not self.name or not all(c.isalnum() or c in "-_." for c in self.name) or self.name.startswith("."):
            raise ConfigError("name must be letters, digits, '-', '_' or '.'")
        if self.log_url and self.log_urls:
            raise ConfigError("give log_url (one log) or log_urls (several), not both")
        if self.log_list is not None and self.upstream:
            raise ConfigError("log_list is signed by the registry's key: a mirror (upstream) has none")
        if not self.mirror and not self.logs:
            raise ConfigError("log_url is required: every registry commit is anchored in a log")
        if self.mirror and not self.upstream.startswith(("http://", "https://")):
            raise ConfigError("upstream must be an http(s) URL")
        for url in self.logs:
            if not url.startswith(("http://", "https://")) or any(c.isspace() for c in url):
                raise ConfigError(f"log URL {url!r}: must be an http(s) URL")
        if len({u.rstrip("/") for u in self.logs}) != len(self.logs):
            raise ConfigError("log_urls names the same log twice")
        if len(self.logs) > MAX_LOGS:
            raise ConfigError(f"at most {MAX_LOGS} logs")
        if not 0 <= self.anchor_quorum <= len(self.logs):
            raise ConfigError(f"anchor_quorum must be 1..{len(self.logs)} (the number of logs), or 0 for "
                              "min(2, number of logs)")
        if not 0.1 <= self.log_timeout <= 300:
            raise ConfigError("log_timeout must be 0.1..300 seconds")
        if not 0.05 <= self.catch_up_seconds <= 86400:
            raise ConfigError("catch_up_seconds must be 0.05..86400")
        if self.registry_key and not self.registry_key.startswith("did:key:"):
            raise ConfigError("registry_key must be a did:key")
        if not 1 <= self.max_batch <= 10_000:
            raise ConfigError("max_batch must be 1..10000")
        if not 0 <= self.batch_interval_ms <= 60_000:
            raise ConfigError("batch_interval_ms must be 0..60000")
        if not 1 <= self.epoch_seconds <= 7 * 86400:
            raise ConfigError("epoch_seconds must be 1..604800")
        if not 0 <= self.min_epoch_interval <= self.epoch_seconds:
            raise ConfigError("min_epoch_interval must be 0..epoch_seconds")
        if self.log_wait_seconds < 0:
            raise ConfigError("log_wait_seconds must not be negative")
        if self.anchor_idle_seconds <= 0 or self.mirror_interval <= 0:
            raise ConfigError("anchor_idle_seconds and mirror_interval must be positive")
        if self.max_packs < 1:
            raise ConfigError("max_packs must be at least 1")
        if self.max_body < 64 * 1024 or self.max_git_body < 64 * 1024:
            raise ConfigError("max_body and max_git_body must be at least 64 KiB")
        if self.public_url and (not self.public_url.startswith(("http://", "https://"))
                                or self.public_url.endswith("/") or any(c.isspace() for c in self.public_url)):
            raise ConfigError("public_url must be an http(s) URL without a trailing '/'")
        if not self.public_url and not is_loopback(self.host):
            raise ConfigError("public_url is required when the registry listens beyond loopback: status list "
                              "credentials name their own URL, which must not come from a request's Host header")
        bad = [w for w in self.bootstrap if not is_did(w)]
        if bad:
            raise ConfigError(f"bootstrap_witnesses: not a DID: {bad[0]}")

    def replace(self, **kw: Any) -> RegistryConfig:
        cfg = dataclasses.replace(self, **kw)
        cfg.validate()
        return cfg
