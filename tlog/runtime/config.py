"""Typed configuration: one frozen dataclass per service, from TOML, env, flags.

Precedence: defaults < TOML file (a `[log]` table, or top level) < environment
(`OAP_LOG_<FIELD>`) < command-line flags. `validate()` fails on bad or
conflicting settings instead of silently adjusting them.
"""
from __future__ import annotations

import os
import ssl
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from tlog.errors import ConfigError, FormatError
from tlog.formats.keys import check_key_name
from tlog.formats.policy import MAX_POLICY_BYTES, parse_policy
from tlog.formats.urls import INSECURE_HINT, is_loopback, plain_beyond_loopback
from tlog.runtime.keyfiles import check_cosigner_kinds
from tlog.transport import Outbound

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


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
    rows: list[tuple[str, ...]] = []
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
    # Principals named by DIDs other than did:key (tlog.didresolver)
    did_resolution: bool = True  # fetch did:web and did:plc documents (off: did:key and pinned only)
    did_plc_directory: str = "https://plc.directory"
    did_cache_seconds: float = 300.0
    did_timeout: float = 5.0
    did_allow_private_networks: bool = False  # did:web hosts on loopback/private addresses (tests, intranets)
    did_ca_file: Path | None = None  # extra CA certificates for did:web hosts only
    # Extra CA certificates (a PEM bundle) trusted, beside the system's, for every outbound
    # HTTPS connection: peers, upstreams, did:web hosts (tlog.transport)
    outbound_ca_file: Path | None = None
    did_documents_dir: Path | None = None  # pinned DID documents (*.json), never fetched
    # A tlog-policy shipped with the explorer as /ui/trust.policy: what its pages verify against
    # (the operator's pin, as a static host would ship it beside the files), instead of the
    # log's own word (/v1/policy)
    ui_trust_policy: Path | None = None
    insecure_http: bool = False  # allow plain HTTP beyond loopback (listening, URLs used, advertised): §8.1 forbids it

    def validate(self) -> None:
        check_http_limits(self)

    def upstream_urls(self) -> Iterable[tuple[str, str]]:
        """(setting, URL) of every service this one sends requests to; each service's config
        names its own. Each goes through `plain_http_uses`."""
        return ()

    def advertised_urls(self) -> Iterable[tuple[str, str]]:
        """(setting, URL) of every URL this service hands its clients (its own public URL,
        its mirrors, its registry); each service's config names its own. Each goes through
        `plain_http_uses`: a client told to use plain HTTP elsewhere would."""
        return ()


@dataclass(frozen=True)
class CosignerConfig:
    """The cosigning-key settings a witness and a mirror share (their configs extend this and
    HTTPConfig): one cosigner name, its Ed25519 and ML-DSA-44 key files, and which it uses."""

    KEY_STEM: ClassVar[str] = "cosigner"
    """Key files default to data_dir/<KEY_STEM>.key and data_dir/<KEY_STEM>-mldsa44.key."""

    data_dir: Path = Path("data")
    name: str = ""  # the cosigner's key name; empty: take it from an existing key file
    key_file: Path | None = None  # default data_dir/<KEY_STEM>.key
    mldsa_key_file: Path | None = None  # default data_dir/<KEY_STEM>-mldsa44.key
    cosigners: tuple[str, ...] = ("ed25519",)  # cosigning keys held and used (keyfiles.COSIGNER_KINDS)

    @property
    def key_path(self) -> Path:
        return self.key_file if self.key_file is not None else self.data_dir / f"{self.KEY_STEM}.key"

    @property
    def mldsa_key_path(self) -> Path:
        if self.mldsa_key_file is not None:
            return self.mldsa_key_file
        return self.data_dir / f"{self.KEY_STEM}-mldsa44.key"

    @property
    def cosigner_key_paths(self) -> dict[str, Path]:
        """The key file of each of keyfiles.COSIGNER_KINDS (`keyfiles.load_or_create_cosigners`)."""
        return {"ed25519": self.key_path, "mldsa44": self.mldsa_key_path}

    def check_cosigner_settings(self) -> None:
        """Refuse a bad key name or `cosigners` list (ConfigError)."""
        if self.name:
            try:
                check_key_name(self.name)
            except FormatError as e:
                raise ConfigError(f"name: {e.message}") from None
        check_cosigner_kinds(self.cosigners)


def plain_http_uses(cfg: HTTPConfig) -> list[str]:
    """What in `cfg` would carry OAP traffic in plain HTTP beyond this machine: listening
    on a non-loopback address without TLS, and http:// URLs of other hosts that it calls or
    advertises (`service_urls`).

    Behind a TLS-terminating proxy on the same machine the service listens on 127.0.0.1
    and nothing here applies; a proxy elsewhere reaches it beyond loopback, which counts."""
    uses = []
    if cfg.tls_cert is None and not is_loopback(cfg.host):
        uses.append(f"listening on {cfg.host or 'every interface'} without TLS")
    uses += [f"{what} {url} is plain http:// beyond loopback" for what, url in service_urls(cfg)
             if plain_beyond_loopback(url)]
    return uses


def service_urls(cfg: HTTPConfig) -> list[tuple[str, str]]:
    """(setting, URL) of every URL `cfg` calls or advertises: each goes through the one check
    of plain HTTP beyond loopback (`tlog.formats.urls.plain_beyond_loopback`, which the
    command lines' `check_url` and the outbound clients' `tlog.transport.Outbound` apply too)."""
    return [*cfg.upstream_urls(), *cfg.advertised_urls()]


def check_transport(cfg: HTTPConfig) -> None:
    """Refuse plain HTTP beyond loopback unless the operator said `insecure_http`, and an
    `outbound_ca_file` that holds no certificate."""
    uses = plain_http_uses(cfg)
    if uses and not cfg.insecure_http:
        raise ConfigError(f"{uses[0]}. {INSECURE_HINT}")
    if cfg.outbound_ca_file is not None:
        try:
            Outbound.from_config(cfg).ssl_context()
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"outbound_ca_file {cfg.outbound_ca_file}: not a readable PEM file of CA "
                              f"certificates ({e})") from None


def check_http_limits(cfg: HTTPConfig) -> None:
    """The HTTP settings every service has: TLS pair, plain HTTP beyond loopback, slow-client
    timeouts, rate limit."""
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
    if not 0 < cfg.did_timeout <= 60 or not 0 <= cfg.did_cache_seconds <= 86400:
        raise ConfigError("did_timeout must be in (0, 60] and did_cache_seconds in [0, 86400] seconds")
    if not cfg.did_plc_directory.startswith(("https://", "http://")) or plain_beyond_loopback(cfg.did_plc_directory):
        raise ConfigError("did_plc_directory must be an https:// URL (or http:// on loopback, for tests)")
    rate = getattr(cfg, "rate_limit", None)
    if rate is not None and (rate < 0 or getattr(cfg, "rate_limit_burst", 1) < 1):
        raise ConfigError("rate_limit must be >= 0 and rate_limit_burst >= 1")
    check_transport(cfg)
    if cfg.ui_trust_policy is not None:
        read_ui_trust_policy(cfg.ui_trust_policy)


def read_ui_trust_policy(path: Path) -> str:
    """The text of `ui_trust_policy`, refused (ConfigError) unless it is a policy that names a log."""
    try:
        data = Path(path).read_bytes()
        if len(data) > MAX_POLICY_BYTES:
            raise FormatError("policy larger than 64 KiB")
        text = data.decode("utf-8")
        if not parse_policy(text).logs:
            raise FormatError("the policy names no log")
    except (OSError, UnicodeDecodeError, FormatError) as e:
        raise ConfigError(f"ui_trust_policy {path}: {e}") from None
    return text
