"""Mirror configuration: one frozen dataclass, from TOML, env and flags (docs/architecture.md §4.1).

Loaded with `tlog.runtime.config.load(MirrorConfig, section="mirror", ...)`:

    [mirror]
    data_dir = "/var/lib/oap-mirror"
    name = "mirror.example.org"          # the mirror's cosigner name (key made 0600 on first start)
    # cosigners = ["ed25519", "mldsa44"] # also cosign with ML-DSA-44 (subtree/v1) and answer sign-subtree
    port = 8084
    monitoring_prefix = "https://mirror.example.org"   # where readers find /<sha256(origin)>/...

    [[mirror.logs]]                      # one table per log this mirror keeps a copy of
    origin = "log.example.org"
    vkey = "log.example.org+1a2b3c4d+AU..."
    url = "https://log.example.org"      # optional: what `oap-mirror follow` reads
    # minimum_index = 0                  # C2SP tlog-tiles pruning: needs retention_policy
    # retention_policy = "https://example.org/retention"

`validate()` fails on bad or conflicting settings instead of adjusting them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tlog.errors import ConfigError, FormatError
from tlog.formats.checkpoint import MAX_ORIGIN_BYTES
from tlog.formats.keys import Verifier, parse_vkey
from tlog.formats.mirror import PACKAGE_SIZE
from tlog.runtime.config import CosignerConfig, HTTPConfig, check_http_limits
from witness.config import check_log_keys, log_vkeys

_LOG_FIELDS = frozenset({"origin", "vkey", "url", "minimum_index", "retention_policy"})


@dataclass(frozen=True)
class MirroredLog:
    """A log this mirror keeps a copy of (C2SP tlog-mirror: public key, URL prefix, minimum index).

    `minimum_index` is the tlog-tiles pruning bound of the copy: full tiles and bundles that
    end at or below it are refused to readers (pruning by denying requests, as tlog-tiles
    recommends; the data is kept), up to the mirror checkpoint's size while the copy is
    smaller. Without a `retention_policy` permitting pruning it must be 0 (tlog-mirror
    "Pruning and Retention Policies").
    """

    origin: str
    vkey: str
    url: str | None = None
    minimum_index: int = 0
    retention_policy: str = ""
    extra_vkeys: tuple[str, ...] = ()  # the log's other keys during its key rotation (`vkey` as a list)

    @property
    def verifier(self) -> Verifier:
        return parse_vkey(self.vkey)

    @property
    def verifiers(self) -> tuple[Verifier, ...]:
        """Every key of the log: a checkpoint signed by any of them is the log's (C2SP signed-note)."""
        return tuple(parse_vkey(v) for v in (self.vkey, *self.extra_vkeys))


def _as_log(item: object, i: int) -> MirroredLog:
    if isinstance(item, MirroredLog):
        return item
    if not isinstance(item, dict):
        raise ConfigError(f"logs[{i}]: expected a table with origin, vkey and optional url")
    unknown = sorted(set(item) - _LOG_FIELDS)
    if unknown or not {"origin", "vkey"} <= set(item):
        raise ConfigError(f"logs[{i}]: needs origin and vkey (optional: url, minimum_index, retention_policy); "
                          f"unknown: {unknown}")
    vkey, extra = log_vkeys(item["vkey"], i)
    if not all(isinstance(item[k], str) for k in item if k not in ("minimum_index", "vkey")):
        raise ConfigError(f"logs[{i}]: origin, vkey, url and retention_policy must be strings")
    mi = item.get("minimum_index", 0)
    if isinstance(mi, bool) or not isinstance(mi, int):
        raise ConfigError(f"logs[{i}]: minimum_index must be an integer")
    return MirroredLog(item["origin"], vkey, item.get("url") or None, mi, item.get("retention_policy", ""), extra)


@dataclass(frozen=True)
class MirrorConfig(HTTPConfig, CosignerConfig):
    KEY_STEM: ClassVar[str] = "mirror"  # data_dir/mirror.key, data_dir/mirror-mldsa44.key

    data_dir: Path = Path("mirror-data")
    port: int = 8084
    logs: Sequence[MirroredLog] = ()  # [[mirror.logs]]
    monitoring_prefix: str = ""  # the public URL of the read API (default: this server's URL)
    max_body: int = 128 * 1024  # add-checkpoint body cap (16 post-quantum signatures fit)
    max_uploads: int = 8  # add-entries streams processed at once (503 beyond)
    max_excess: int = 2048  # entries a request may resend below the next entry (409 beyond)
    upload_timeout: float = 300.0  # an add-entries request is cut (and answered 202) after this long
    hash_sync_interval: float = 10.0  # seconds between fdatasyncs of the hash files (derived data)
    # Also publish every copy to an S3-compatible bucket (witness.mirror.publish)
    bucket_url: str = ""  # http(s)://host[:port]/bucket
    bucket_region: str = "us-east-1"
    bucket_credentials_file: Path | None = None  # "<access key> <secret key>" (0600); else AWS_* variables
    rate_limit: float = 200.0  # requests per second per client (0: off); 429 + Retry-After
    rate_limit_burst: float = 400.0

    def __post_init__(self) -> None:
        logs = self.logs
        if isinstance(logs, (str, bytes)) or not isinstance(logs, Sequence):
            raise ConfigError("logs: expected [[mirror.logs]] tables with origin, vkey, url")
        object.__setattr__(self, "logs", tuple(_as_log(item, i) for i, item in enumerate(logs)))

    @property
    def ticket_key_path(self) -> Path:
        return self.data_dir / "ticket.key"

    def validate(self) -> None:
        check_http_limits(self)
        self.check_cosigner_settings()
        origins: set[str] = set()
        for i, lg in enumerate(self.logs):
            where = f"logs[{i}] ({lg.origin})"
            if not lg.origin or len(lg.origin.encode("utf-8")) > MAX_ORIGIN_BYTES or "\n" in lg.origin:
                raise ConfigError(f"logs[{i}]: origin must be 1..{MAX_ORIGIN_BYTES} bytes on one line")
            if lg.origin in origins:
                raise ConfigError(f"{where}: origin configured twice")
            origins.add(lg.origin)
            if self.name and lg.origin == self.name:
                raise ConfigError(f"{where}: a log origin must not be the mirror's own name")
            try:
                verifiers = lg.verifiers
            except FormatError as e:
                raise ConfigError(f"{where}: vkey: {e.message}") from None
            check_log_keys(verifiers, where)  # tlog-mirror: add-checkpoint "handled identically to" a witness's
            if lg.url is not None and not lg.url.startswith(("http://", "https://")):
                raise ConfigError(f"{where}: url must be http:// or https://")
            if lg.minimum_index < 0:
                raise ConfigError(f"{where}: minimum_index must be >= 0")
            if lg.minimum_index and not lg.retention_policy:
                raise ConfigError(f"{where}: minimum_index {lg.minimum_index} needs a retention_policy that permits "
                                  "pruning (C2SP tlog-mirror: without one a mirror MUST NOT be pruned)")
            if lg.minimum_index % PACKAGE_SIZE:
                raise ConfigError(f"{where}: minimum_index must be a multiple of {PACKAGE_SIZE}")
        if self.monitoring_prefix and not self.monitoring_prefix.startswith(("http://", "https://")):
            raise ConfigError("monitoring_prefix must be an http:// or https:// URL")
        if not 1024 <= self.max_body <= 1 << 20:
            raise ConfigError("max_body must be 1024..1048576 bytes (a signed note is at most 1 MiB)")
        if not 1 <= self.max_uploads <= 256:
            raise ConfigError("max_uploads must be 1..256")
        if not 0 <= self.max_excess <= 1 << 20:
            raise ConfigError("max_excess must be 0..1048576 entries")
        if not 1 <= self.upload_timeout <= 3600:
            raise ConfigError("upload_timeout must be 1..3600 seconds")
        if self.bucket_url:
            from urllib.parse import urlsplit

            parts = urlsplit(self.bucket_url)
            if parts.scheme not in ("http", "https") or not parts.netloc or not parts.path.strip("/") \
                    or "/" in parts.path.strip("/"):
                raise ConfigError(f"bucket_url must be http(s)://host[:port]/bucket, not {self.bucket_url!r}")
        elif self.bucket_credentials_file is not None:
            raise ConfigError("bucket_credentials_file needs a bucket_url")
        if not 0.1 <= self.hash_sync_interval <= 3600:
            raise ConfigError("hash_sync_interval must be 0.1..3600 seconds")

    def advertised_urls(self) -> Iterable[tuple[str, str]]:
        """The read API's public URL and each mirrored log's URL, which `/v1/info` names."""
        if self.monitoring_prefix:
            yield "monitoring_prefix", self.monitoring_prefix
        yield from ((f"logs ({lg.origin}) url", lg.url) for lg in self.logs if lg.url)

    def upstream_urls(self) -> Iterable[tuple[str, str]]:
        """The bucket every copy is also published to."""
        if self.bucket_url:
            yield "bucket_url", self.bucket_url

    def replace(self, **kw: Any) -> MirrorConfig:
        cfg = dataclasses.replace(self, **kw)
        cfg.validate()
        return cfg
