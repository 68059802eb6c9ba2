"""Witness configuration: one frozen dataclass, from TOML, env and flags (docs/architecture.md §4).

Loaded with `tlog.runtime.config.load(WitnessConfig, section="witness", ...)`; a file
looks like this:

    [witness]
    data_dir = "/var/lib/oap-witness"
    name = "witness.example.org"            # key name of the cosigning key
    port = 8081
    identity_did = "did:web:example.org#witness"   # the participant it signs receipts as
    own_receipt = "/etc/oap-witness/conformance.json"
    trusted_logs = ["log.example.org+1a2b3c4d+AU..."]   # for conformance inclusion
    registry_url = "https://registry.example.org"     # consulted before it signs (§22.1)
    registry_key = "did:key:z6Mk..."                  # the registry's status key

    cosigners = ["ed25519", "mldsa44"]      # cosigning keys: Ed25519 (0x04) and/or ML-DSA-44 (0x06)
    log_lists = ["https://witness-network.example/log-list.1"]  # logs/v0 lists (files or URLs)
    log_list_refresh = 3600                 # seconds between list refreshes

    [[witness.logs]]                        # one table per log this witness cosigns
    origin = "log.example.org"
    vkey = "log.example.org+1a2b3c4d+AU..."
    url = "https://log.example.org"          # optional: only `oap-witness feed` uses it
    qpd = 86400                             # optional: new checkpoints cosigned per day (429 beyond)
    # during the log's key rotation: vkey = ["<old vkey>", "<new vkey>"] (a checkpoint signed by either
    # is accepted); edit the file and send SIGHUP: the witness reloads its logs without a restart

`validate()` fails on bad or conflicting settings instead of adjusting them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tlog.errors import ConfigError, FormatError, InvalidInput
from tlog.formats.checkpoint import MAX_ORIGIN_BYTES
from tlog.formats.did import is_did, public_from_did_key
from tlog.formats.diddoc import split_did_url
from tlog.formats.keys import COSIGNATURE_MLDSA44, ECDSA, ED25519, Verifier, parse_vkey
from tlog.formats.loglist import MAX_QPD
from tlog.formats.policy import parse_policy
from tlog.formats.urls import is_loopback
from tlog.runtime.config import CosignerConfig, HTTPConfig, check_http_limits

OWN_LEVELS = ("L4", "L5", "none")
"""`require_own_level`: the least level of the witness's own receipt (§31); "none" disables the check."""

_LOG_FIELDS = frozenset({"origin", "vkey", "url", "qpd"})
LOG_KEY_TYPES = (ED25519, ECDSA, COSIGNATURE_MLDSA44)
"""Log keys a witness verifies checkpoints with: Ed25519 and ECDSA note signatures, and ML-DSA-44
(tlog-cosignature type 0x06: the post-quantum log key Sunlight and transparency-dev issue)."""


@dataclass(frozen=True)
class WitnessedLog:
    """A log this witness cosigns: its origin, its note key, and (for the feeder) its URL.

    The key name need not equal the origin (C2SP tlog-checkpoint: sum.golang.org signs
    origin "go.sum database tree"); Ed25519 (0x01) and ECDSA (0x02) log keys work.
    """

    origin: str
    vkey: str
    url: str | None = None
    qpd: int | None = None  # new checkpoints cosigned per day (None: no limit)
    source: str | None = None  # the logs/v0 list it came from (None: this configuration)
    contact: str | None = None
    extra_vkeys: tuple[str, ...] = ()  # the log's other keys during its key rotation (`vkey` as a list)

    @property
    def verifier(self) -> Verifier:
        return parse_vkey(self.vkey)

    @property
    def verifiers(self) -> tuple[Verifier, ...]:
        """Every key of the log: a checkpoint signed by any of them is the log's (C2SP signed-note)."""
        return tuple(parse_vkey(v) for v in (self.vkey, *self.extra_vkeys))


def check_list_source(source: str) -> None:
    """A logs/v0 list source: a file path, an https:// URL, or http:// to this machine only
    (a list decides which keys the witness trusts: never fetch it in the clear from elsewhere)."""
    from urllib.parse import urlsplit

    if not isinstance(source, str) or not source.strip():
        raise ConfigError("log_lists: an entry is empty")
    if "://" not in source:
        return
    try:
        url = urlsplit(source)
        host = url.hostname or ""
    except ValueError:
        raise ConfigError(f"log_lists: {source!r} is not a URL") from None
    if url.scheme == "https" and host:
        return
    if url.scheme == "http" and host and is_loopback(host):
        return
    raise ConfigError(f"log_lists: {source!r} must be a file, an https:// URL or http:// to 127.0.0.1/::1")


def log_vkeys(value: object, i: int) -> tuple[str, tuple[str, ...]]:
    """A `[[logs]]` table's vkey: one key, or a list of the log's keys during its key rotation
    (the first, and the others). Shared by the witness's and the mirror's configurations."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return value[0], tuple(value[1:])
    if isinstance(value, str):
        return value, ()
    raise ConfigError(f"logs[{i}]: vkey must be a string, or a list of the log's keys during a key rotation")


def check_log_keys(verifiers: Sequence[Verifier], where: str) -> None:
    """A followed log's keys: of a type a log signs with, each once, at most 4 (a rotation's overlap)."""
    if any(v.key_type not in LOG_KEY_TYPES for v in verifiers):
        raise ConfigError(f"{where}: a log key must be Ed25519 (0x01), ECDSA (0x02) or ML-DSA-44 (0x06)")
    if len({(v.name, v.key_id) for v in verifiers}) != len(verifiers) or len(verifiers) > 4:
        raise ConfigError(f"{where}: vkey lists one key twice (or more than 4 keys)")


def _as_log(item: object, i: int) -> WitnessedLog:
    if isinstance(item, WitnessedLog):
        return item
    if not isinstance(item, dict):
        raise ConfigError(f"logs[{i}]: expected a table with origin, vkey and optional url")
    unknown = sorted(set(item) - _LOG_FIELDS)
    if unknown or not {"origin", "vkey"} <= set(item):
        raise ConfigError(f"logs[{i}]: needs origin and vkey (and optional url); unknown: {unknown}")
    vkey, extra = log_vkeys(item["vkey"], i)
    if not all(isinstance(item[k], str) for k in item if k not in ("qpd", "vkey")):
        raise ConfigError(f"logs[{i}]: origin, vkey and url must be strings")
    qpd = item.get("qpd")
    if qpd is not None and (isinstance(qpd, bool) or not isinstance(qpd, int)):
        raise ConfigError(f"logs[{i}]: qpd must be an integer")
    return WitnessedLog(item["origin"], vkey, item.get("url") or None, qpd, extra_vkeys=extra)


@dataclass(frozen=True)
class WitnessConfig(HTTPConfig, CosignerConfig):
    KEY_STEM: ClassVar[str] = "witness"  # data_dir/witness.key, data_dir/witness-mldsa44.key

    data_dir: Path = Path("witness-data")
    port: int = 8081
    log_lists: tuple[str, ...] = ()  # logs/v0 lists to provision logs from: file paths or URLs
    log_list_refresh: float = 3600.0  # seconds between refreshes of every list
    log_list_timeout: float = 30.0  # per list fetch
    identity_key_file: Path | None = None  # key for conformance peer-witnessing; default data_dir/identity.key
    # More Ed25519 cosigning keys of this witness (same name) that cosign every checkpoint too: a
    # key rotation's overlap (ops/runbooks/key-rotation.md)
    extra_key_files: tuple[str, ...] = ()
    # The participant the witness signs conformance receipts as: a DID URL naming the identity
    # key in its document (did:web:example.org#witness). Empty: the identity key's did:key,
    # which names no publisher, so it can hold no L4 receipt (witness with require_own_level "none")
    identity_did: str = ""
    logs: Sequence[WitnessedLog] = ()  # [[witness.logs]] origin, vkey, url
    trusted_logs: tuple[str, ...] = ()  # log vkeys whose inclusion proofs count for conformance receipts
    trust_policy: Path | None = None  # ... or a tlog-policy file (logs + witness quorum) instead
    own_receipt: Path | None = None  # this witness's own conformance receipt (JSON)
    require_own_level: str = "L4"
    # The registry consulted before a receipt is witnessed (§22.1): its status answers about the
    # witness's own receipt and the subject, signed by registry_key and anchored in registry_logs
    # (log vkeys; default: the logs trusted for inclusion)
    registry_url: str = ""
    registry_key: str = ""
    registry_logs: tuple[str, ...] = ()
    registry_timeout: float = 10.0
    max_body: int = 128 * 1024  # add-checkpoint and sign-subtree body cap (16 post-quantum signatures fit)
    max_conformance_body: int = 1024 * 1024  # receipt + .tlog-proof bundle
    feed_timeout: float = 10.0  # per HTTP request of the feeder
    rate_limit: float = 200.0  # requests per second per client (0: off); 429 + Retry-After
    rate_limit_burst: float = 400.0

    def __post_init__(self) -> None:
        # TOML gives a list of tables; keep a tuple of WitnessedLog whatever came in.
        logs = self.logs
        if isinstance(logs, (str, bytes)) or not isinstance(logs, Sequence):
            raise ConfigError("logs: expected [[witness.logs]] tables with origin, vkey, url")
        object.__setattr__(self, "logs", tuple(_as_log(item, i) for i, item in enumerate(logs)))
        for name in ("trusted_logs", "cosigners", "log_lists", "registry_logs", "extra_key_files"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))

    @property
    def lists_cache_dir(self) -> Path:
        """The last good copy of each logs/v0 list (so a restart without network keeps its logs)."""
        return self.data_dir / "log-lists"

    @property
    def identity_key_path(self) -> Path:
        return self.identity_key_file if self.identity_key_file is not None else self.data_dir / "identity.key"

    @property
    def state_path(self) -> Path:
        return self.data_dir / "witness.db"

    def validate(self) -> None:
        check_http_limits(self)
        self.check_cosigner_settings()
        if len(self.extra_key_files) > 4 or len(set(self.extra_key_files)) != len(self.extra_key_files):
            raise ConfigError("extra_key_files: at most 4 keys, each once")
        origins: set[str] = set()
        for i, log in enumerate(self.logs):
            if not log.origin or len(log.origin.encode("utf-8")) > MAX_ORIGIN_BYTES or "\n" in log.origin:
                raise ConfigError(f"logs[{i}]: origin must be 1..{MAX_ORIGIN_BYTES} bytes on one line")
            if log.origin in origins:
                raise ConfigError(f"logs[{i}]: origin {log.origin!r} configured twice")
            origins.add(log.origin)
            try:
                verifiers = log.verifiers
            except FormatError as e:
                raise ConfigError(f"logs[{i}] ({log.origin}): vkey: {e.message}") from None
            check_log_keys(verifiers, f"logs[{i}] ({log.origin})")
            if log.url is not None and not log.url.startswith(("http://", "https://")):
                raise ConfigError(f"logs[{i}] ({log.origin}): url must be http:// or https://")
            if log.qpd is not None and not 1 <= log.qpd <= MAX_QPD:
                raise ConfigError(f"logs[{i}] ({log.origin}): qpd must be 1..{MAX_QPD}")
        for source in self.log_lists:
            check_list_source(source)
        if not 1 <= self.log_list_refresh <= 7 * 86400:
            raise ConfigError("log_list_refresh must be 1..604800 seconds")
        if not 1 <= self.log_list_timeout <= 300:
            raise ConfigError("log_list_timeout must be 1..300 seconds")
        for vkey in self.trusted_logs:
            try:
                parse_vkey(vkey)
            except FormatError as e:
                raise ConfigError(f"trusted_logs: {vkey!r}: {e.message}") from None
        if self.trusted_logs and self.trust_policy is not None:
            raise ConfigError("give trusted_logs or trust_policy for conformance inclusion checks, not both")
        if self.trust_policy is not None:
            try:
                parse_policy(Path(self.trust_policy).read_bytes())
            except OSError as e:
                raise ConfigError(f"trust_policy: {e}") from None
            except FormatError as e:
                raise ConfigError(f"trust_policy: {e.message}") from None
        if self.require_own_level not in OWN_LEVELS:
            raise ConfigError(f"require_own_level must be one of {', '.join(OWN_LEVELS)}")
        self._check_identity_and_registry()
        if not 1024 <= self.max_body <= 1 << 20:
            raise ConfigError("max_body must be 1024..1048576 bytes (a signed note is at most 1 MiB)")
        if not 4096 <= self.max_conformance_body <= 16 << 20:
            raise ConfigError("max_conformance_body must be 4096..16777216 bytes")
        if not 0.1 <= self.feed_timeout <= 300:
            raise ConfigError("feed_timeout must be 0.1..300 seconds")

    def _check_identity_and_registry(self) -> None:
        if self.identity_did:
            did, fragment = split_did_url(self.identity_did)
            if not is_did(did) or any(c.isspace() for c in self.identity_did):
                raise ConfigError(f"identity_did: {self.identity_did!r} is not a DID URL")
            if not did.startswith("did:key:") and not fragment:
                raise ConfigError(f"identity_did must name the identity key in the DID document, e.g. "
                                  f"{did}#key-1")
        if bool(self.registry_url) != bool(self.registry_key):
            raise ConfigError("registry_url and registry_key go together: the registry consulted before witnessing "
                              "and the did:key its status answers are signed with")
        if self.registry_url and (not self.registry_url.startswith(("http://", "https://"))
                                  or any(c.isspace() for c in self.registry_url)):
            raise ConfigError("registry_url must be an http(s) URL")
        if self.registry_key:
            try:
                public_from_did_key(self.registry_key)
            except InvalidInput as e:
                raise ConfigError(f"registry_key: {e.message}") from None
        for vkey in self.registry_logs:
            try:
                parse_vkey(vkey)
            except FormatError as e:
                raise ConfigError(f"registry_logs: {vkey!r}: {e.message}") from None
        if not 0.1 <= self.registry_timeout <= 300:
            raise ConfigError("registry_timeout must be 0.1..300 seconds")

    def upstream_urls(self) -> Iterable[tuple[str, str]]:
        """The logs the feeder polls, and the registry consulted before witnessing."""
        yield from ((f"logs ({log.origin}) url", log.url) for log in self.logs if log.url)
        if self.registry_url:
            yield "registry_url", self.registry_url

    def registry_policy_text(self) -> str | None:
        """tlog-policy text for the anchors of the registry's status answers: registry_logs,
        else the policy of the inclusion checks."""
        if self.registry_logs:
            return "".join(f"log {v}\n" for v in self.registry_logs) + "quorum none\n"
        return self.trust_policy_text()

    def trust_policy_text(self) -> str | None:
        """tlog-policy text for conformance inclusion checks, or None when none is configured."""
        if self.trust_policy is not None:
            return Path(self.trust_policy).read_text()
        if self.trusted_logs:
            return "".join(f"log {v}\n" for v in self.trusted_logs) + "quorum none\n"
        return None

    def replace(self, **kw: Any) -> WitnessConfig:
        cfg = dataclasses.replace(self, **kw)
        cfg.validate()
        return cfg
