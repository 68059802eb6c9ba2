"""The log's configuration: one frozen dataclass, from TOML (`[log]`), env (`OAP_LOG_*`), flags.

`validate()` fails on bad or conflicting settings instead of adjusting them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tlog.errors import ConfigError, FormatError, InvalidInput
from tlog.formats.keys import cosigner_verifier, parse_vkey
from tlog.formats.policy import parse_policy
from tlog.formats.times import parse_utc
from tlog.formats.urls import is_base_url
from tlog.runtime.config import HTTPConfig, check_http_limits


def _dsn_has_password(dsn: str) -> bool:
    """Whether a libpq connection string (URI or key=value) carries a password."""
    import re
    from urllib.parse import urlsplit

    if dsn.startswith(("postgres://", "postgresql://")):
        return urlsplit(dsn).password is not None or "password=" in dsn
    return re.search(r"(^|\s)password\s*=", dsn) is not None


@dataclass(frozen=True)
class LogConfig(HTTPConfig):
    data_dir: Path = Path("data")
    port: int = 8080
    key_file: Path | None = None  # the log's signing key; default data_dir/log.key (frontends share one)
    # More keys of this origin that sign every checkpoint too (files, encrypted files or pkcs11: URIs):
    # a key rotation's overlap (ops/runbooks/key-rotation.md, docs/architecture.md §3.9)
    extra_key_files: tuple[str, ...] = ()
    storage: str = "embedded"  # "embedded" (SQLite + hash files in data_dir) or "postgres" (+ a bucket)
    postgres_dsn: str = ""  # libpq connection string without a password (PGPASSWORD or a 0600 PGPASSFILE)
    bucket_url: str = ""  # S3-compatible endpoint and bucket the log is also published to, e.g. http://127.0.0.1:8333/oap-log
    bucket_region: str = "us-east-1"
    bucket_credentials_file: Path | None = None  # "access_key secret_key" (mode 0600); else AWS_* variables
    checkpoint_publish_interval: float = 1.0  # at most one write of the bucket's checkpoint object per interval
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
    # Mirrors the log pushes its entries to (C2SP tlog-mirror): `mirror` lines of witness_policy,
    # or [[log.mirrors]] name, vkey, url (never waited for: only a policy's quorum can count a mirror)
    mirrors: tuple[tuple[str, str, str], ...] = ()
    mirror_timeout: float = 60.0  # seconds without progress on one request to a mirror before it fails
    # C2SP tlog-tiles pruning: tiles, bundles and entries below minimum_index are refused (the
    # data is kept); it needs a retention_policy (URL or text) that permits pruning
    minimum_index: int = 0
    retention_policy: str = ""
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
    # Where readers find this log and its neighbours, named in GET /v1/info (the explorer's
    # pages find each other with them; the witnesses' URLs come from the witness config)
    public_url: str = ""  # this log's own URL
    registry_url: str = ""  # the registry anchored in this log
    mirror_urls: tuple[str, ...] = ()  # mirrors serving copies of this log (tlog-tiles)
    # A temporal shard (docs/architecture.md §3.8): entries only while the log's clock is in
    # [accept_from, accept_until) (RFC 3339 UTC; empty: unbounded), and where writes go next
    accept_from: str = ""
    accept_until: str = ""
    successor_url: str = ""  # named by refusals outside the window and by `oap-log freeze`

    def window(self) -> tuple[float | None, float | None]:
        """The shard's window as Unix times (None: unbounded on that side)."""
        return tuple(parse_utc(v, name).timestamp() if v else None  # type: ignore[return-value]
                     for name, v in (("accept_from", self.accept_from), ("accept_until", self.accept_until)))

    def validate(self) -> None:
        check_http_limits(self)
        if len(self.extra_key_files) > 4 or len(set(self.extra_key_files)) != len(self.extra_key_files):
            raise ConfigError("extra_key_files: at most 4 keys, each once")
        if self.storage not in ("embedded", "postgres"):
            raise ConfigError("storage must be 'embedded' or 'postgres'")
        if self.storage == "postgres":
            if not self.postgres_dsn:
                raise ConfigError("storage = 'postgres' needs postgres_dsn")
            if _dsn_has_password(self.postgres_dsn):
                raise ConfigError("postgres_dsn must not hold a password: use PGPASSWORD or a PGPASSFILE (mode 0600)")
            if self.read_workers:
                raise ConfigError("read_workers serve the embedded storage's hash files; with postgres, run more "
                                  "frontends instead")
        elif self.postgres_dsn:
            raise ConfigError("postgres_dsn needs storage = 'postgres'")
        if self.bucket_url and not self.bucket_url.startswith(("http://", "https://")):
            raise ConfigError("bucket_url must be http(s)://host[:port]/bucket")
        if not 0.05 <= self.checkpoint_publish_interval <= 3600:
            raise ConfigError("checkpoint_publish_interval must be 0.05..3600 seconds")
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
        if self.witness_policy is not None and self.mirrors:
            raise ConfigError("with a witness_policy, list the mirrors in it (mirror <name> <vkey> <url>), "
                              "not in mirrors")
        if any(not url or not is_base_url(url) for _, _, url in self.mirrors):
            raise ConfigError("every mirror needs the http(s) url the log pushes to (its submission prefix)")
        if len(self.mirrors) > 32:
            raise ConfigError("mirrors: at most 32")
        names = [name for name, _, _ in (*self.witnesses, *self.mirrors)]
        if len(set(names)) != len(names):
            raise ConfigError("witness and mirror names must be unique (one tlog-policy namespace)")
        for name, vkey, _ in self.mirrors:
            try:
                cosigner_verifier(parse_vkey(vkey))
            except FormatError as e:
                raise ConfigError(f"mirror {name!r}: {e.message}") from None
        if not 1 <= self.mirror_timeout <= 600:
            raise ConfigError("mirror_timeout must be 1..600 seconds")
        if self.minimum_index < 0 or self.minimum_index % 256:
            raise ConfigError("minimum_index must be a non-negative multiple of 256 (whole entry bundles)")
        if self.minimum_index and not self.retention_policy.strip():
            raise ConfigError("minimum_index needs a retention_policy that permits pruning (C2SP tlog-tiles: "
                              "without one a log MUST NOT be pruned)")
        if len(self.retention_policy) > 1024 or not self.retention_policy.isprintable():
            raise ConfigError("retention_policy must be printable, at most 1024 characters")
        if self.auth_required_for and self.tokens_file is None:
            raise ConfigError("auth_required_for needs a tokens_file")
        unknown = set(self.auth_required_for) - {"*", "receipt", "commitment", "conformance", "registry"}
        if unknown:
            raise ConfigError(f"auth_required_for: unknown entry types {sorted(unknown)}")
        if min(self.rate_limit_write, self.rate_limit_read, self.rate_limit_unauthenticated) < 0:
            raise ConfigError("rate limits must be >= 0")
        if self.rate_limit_write and self.rate_limit_write_burst < self.max_batch_entries:
            raise ConfigError("rate_limit_write_burst must allow one full batch (max_batch_entries)")
        for name, url in (("public_url", self.public_url), ("registry_url", self.registry_url),
                          *(("mirror_urls", u) for u in self.mirror_urls)):
            if url and not is_base_url(url):
                raise ConfigError(f"{name} must be an http(s) URL without a trailing '/' or spaces: {url!r}")
        if len(self.mirror_urls) > 32:
            raise ConfigError("mirror_urls: at most 32")
        try:
            start, end = self.window()
        except InvalidInput as e:
            raise ConfigError(f"{e.message} (an RFC 3339 UTC time such as 2027-01-01T00:00:00Z)") from None
        if start is not None and end is not None and start >= end:
            raise ConfigError("accept_from must be before accept_until")
        if self.successor_url and not is_base_url(self.successor_url):
            raise ConfigError(f"successor_url must be an http(s) URL without a trailing '/': {self.successor_url!r}")

    def upstream_urls(self) -> Iterable[tuple[str, str]]:
        """The witnesses and mirrors the log pushes checkpoints to, and the bucket it publishes in."""
        yield from (("witness", url) for _, _, url in self.witnesses)
        yield from (("mirror", url) for _, _, url in self.mirrors)
        if self.witness_policy is not None:
            try:
                policy = parse_policy(Path(self.witness_policy).read_bytes())
            except (OSError, FormatError):
                policy = None  # the service refuses to start with the reason
            if policy is not None:
                yield from (("mirror" if w.mirror else "witness", w.url) for w in policy.witnesses.values() if w.url)
        if self.bucket_url:
            yield "bucket_url", self.bucket_url

    def advertised_urls(self) -> Iterable[tuple[str, str]]:
        """The log's own URL, its registry's and its mirrors', which `/v1/info` names."""
        if self.public_url:
            yield "public_url", self.public_url
        if self.registry_url:
            yield "registry_url", self.registry_url
        yield from (("mirror_urls", url) for url in self.mirror_urls)

    def replace(self, **kw: Any) -> LogConfig:
        cfg = dataclasses.replace(self, **kw)
        cfg.validate()
        return cfg
