"""Monitor configuration: one frozen dataclass, from TOML, env and flags (README "oap-monitor").

Loaded with `tlog.runtime.config.load(MonitorConfig, section="monitor", ...)`; the keys sit
at the top level of the file (or in a `[monitor]` table). Relative paths are relative to
the file's directory (`resolve_paths`):

    state_dir = "monitor-state"          # fsynced; a restart resumes, never re-alerts, never skips
    poll_seconds = 10
    metrics = "127.0.0.1:9466"           # Prometheus (/metrics), and /healthz, /readyz, /v1/status
    [[logs]]                             # any C2SP tlog-tiles log
    url = "https://log.example"
    policy = "log.policy"                # tlog-policy: log key, witnesses, quorum
    [[watch]]
    signer = "did:key:z6Mk..."           # alert on every entry it signed, or that names it
    [registry]
    url = "https://registry.example"
    key = "did:key:z6Mk..."              # the registry's key: its answers are verified with it
    dids = ["did:key:z6Mk..."]           # alert on every status change of these
    [[alerts]]
    webhook = "https://hooks.example/oap" # or hooks_dir, email (with smtp), file

`validate()` fails on bad or conflicting settings instead of adjusting them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tlog.errors import ConfigError, InvalidInput
from tlog.formats.did import is_did, parse_signer
from tlog.formats.entries import signer_name
from tlog.formats.urls import is_base_url, is_loopback
from tlog.runtime.config import HTTPConfig, check_http_limits

ALERT_KINDS = ("watched_entry", "split_view", "registry_status", "registry_anchor", "log_unreachable",
               "log_invalid", "log_behind", "registry_unreachable", "registry_invalid")
"""Every kind of alert the monitor raises (README "Alerts")."""

_LOG_KEYS = frozenset({"url", "policy", "name", "witnesses", "mirrors", "entries"})
_REGISTRY_KEYS = frozenset({"url", "key", "dids", "policy", "anchors"})
_SINK_TARGETS = ("webhook", "hooks_dir", "email", "file")
_SINK_KEYS = frozenset({*_SINK_TARGETS, "name", "kinds", "smtp", "smtp_from", "smtp_tls", "smtp_user",
                        "smtp_password_file", "webhook_token_file"})


@dataclass(frozen=True)
class LogWatch:
    """A log to monitor: any C2SP tlog-tiles log (ours, Go's sumdb/tlog, Tessera, Sunlight)."""

    url: str
    policy: Path
    name: str = ""  # how alerts and metrics name it (default: its origin)
    witnesses: tuple[str, ...] | None = None  # read-API prefixes (None: the policy's witness lines' URLs)
    mirrors: tuple[str, ...] | None = None  # mirrors' monitoring prefixes (None: the policy's mirror lines' URLs)
    entries: bool = True  # read every entry (off: only the tree and its views)


@dataclass(frozen=True)
class Watch:
    """An identity to watch: a DID or key, in its one spelling (`signer_name`)."""

    did: str
    label: str = ""


@dataclass(frozen=True)
class RegistryWatch:
    url: str
    key: str  # the registry's did:key: every answer is verified with it ("": the policy's registry line)
    dids: tuple[str, ...] = ()  # status ids (DIDs) whose every change is an alert
    policy: Path | None = None  # the logs its anchors must be in (default: the first [[logs]]'s policy)
    anchors: bool = True  # check that every commit it publishes is anchored in a watched log


@dataclass(frozen=True)
class Sink:
    """Where alerts go. `kind` is webhook, hooks_dir, email or file; `target` its URL, directory,
    address or path; `name` its stable name in the delivery queue (default: kind:target)."""

    kind: str
    target: str
    name: str
    kinds: tuple[str, ...] = ()  # only these alert kinds (empty: all)
    smtp: str = ""  # host:port of the mail server (email)
    smtp_from: str = ""
    smtp_tls: str = "starttls"  # starttls, tls, or none (only to a server on this machine, or with insecure_http)
    smtp_user: str = ""
    smtp_password_file: Path | None = None
    webhook_token_file: Path | None = None  # a bearer token sent with each POST (first line of the file)

    def wants(self, kind: str) -> bool:
        return not self.kinds or kind in self.kinds


def _strs(value: object, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{what}: expected a list of strings")
    return tuple(value)


def _table(item: object, what: str, allowed: frozenset[str]) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise ConfigError(f"{what}: expected a table")
    unknown = sorted(set(item) - allowed)
    if unknown:
        top = {f.name for f in dataclasses.fields(MonitorConfig)} & set(unknown)
        hint = (f"; {', '.join(sorted(top))} belong(s) at the top of the file, before the first [table] "
                "(in TOML a key belongs to the table above it)") if top else ""
        raise ConfigError(f"{what}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(allowed))}){hint}")
    return item


def _tables(value: object, name: str) -> Sequence[object]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(f"{name}: expected [[{name}]] tables")
    return value


def _as_log(item: object, i: int) -> LogWatch:
    if isinstance(item, LogWatch):
        return item
    t = _table(item, f"logs[{i}]", _LOG_KEYS)
    if not isinstance(t.get("url"), str) or not isinstance(t.get("policy"), str):
        raise ConfigError(f"logs[{i}]: url and policy (a tlog-policy file) are required")
    entries = t.get("entries", True)
    if not isinstance(entries, bool):
        raise ConfigError(f"logs[{i}]: entries must be true or false")
    return LogWatch(t["url"].rstrip("/"), Path(t["policy"]), str(t.get("name", "")),
                    _strs(t["witnesses"], f"logs[{i}].witnesses") if "witnesses" in t else None,
                    _strs(t["mirrors"], f"logs[{i}].mirrors") if "mirrors" in t else None, entries)


def watch_name(text: str, what: str) -> str:
    """A DID or key to watch, in the one spelling entries are matched in (ConfigError if neither)."""
    text = text.strip()
    if text.startswith("ed25519:"):
        try:
            parse_signer(text)
        except InvalidInput:
            raise ConfigError(f"{what}: {text!r} is not an ed25519:<base64> key") from None
    elif not is_did(text.partition("#")[0]):
        raise ConfigError(f"{what}: {text!r} is not a DID (or an ed25519:<base64> key)")
    return signer_name(text)


def _as_watch(item: object, i: int) -> Watch:
    if isinstance(item, Watch):
        return item
    t = _table(item, f"watch[{i}]", frozenset({"signer", "did", "label"}))
    given = [k for k in ("signer", "did") if k in t]
    if len(given) != 1 or not isinstance(t[given[0]], str):
        raise ConfigError(f"watch[{i}]: give one of signer or did (a DID or an ed25519:<base64> key)")
    return Watch(watch_name(t[given[0]], f"watch[{i}]"), str(t.get("label", "")))


def _as_registry(item: object) -> RegistryWatch | None:
    if item is None or isinstance(item, RegistryWatch):
        return item
    t = _table(item, "registry", _REGISTRY_KEYS)
    if not isinstance(t.get("url"), str) or not isinstance(t.get("key", ""), str):
        raise ConfigError("registry: url is required, and key is the registry's did:key")
    anchors = t.get("anchors", True)
    if not isinstance(anchors, bool):
        raise ConfigError("registry: anchors must be true or false")
    policy = t.get("policy")
    if policy is not None and not isinstance(policy, str):
        raise ConfigError("registry: policy must be a file name")
    return RegistryWatch(t["url"].rstrip("/"), t.get("key", ""), _strs(t.get("dids", ()), "registry.dids"),
                         Path(policy) if policy else None, anchors)


def _as_sink(item: object, i: int) -> Sink:
    if isinstance(item, Sink):
        return item
    t = _table(item, f"alerts[{i}]", _SINK_KEYS)
    given = [k for k in _SINK_TARGETS if k in t]
    if len(given) != 1 or not isinstance(t[given[0]], str) or not t[given[0]]:
        raise ConfigError(f"alerts[{i}]: give exactly one of {', '.join(_SINK_TARGETS)}")
    kind = given[0]
    for k in ("name", "smtp", "smtp_from", "smtp_tls", "smtp_user", "smtp_password_file", "webhook_token_file"):
        if k in t and not isinstance(t[k], str):
            raise ConfigError(f"alerts[{i}]: {k} must be a string")
    return Sink(kind, t[kind], t.get("name") or f"{kind}:{t[kind]}", _strs(t.get("kinds", ()), f"alerts[{i}].kinds"),
                t.get("smtp", ""), t.get("smtp_from", ""), t.get("smtp_tls", "starttls"), t.get("smtp_user", ""),
                Path(t["smtp_password_file"]) if t.get("smtp_password_file") else None,
                Path(t["webhook_token_file"]) if t.get("webhook_token_file") else None)


@dataclass(frozen=True)
class MonitorConfig(HTTPConfig):
    state_dir: Path = Path("monitor-state")
    poll_seconds: float = 10.0  # between passes over every log (and the registry's anchors)
    metrics: str = "127.0.0.1:9466"  # host:port of /metrics, /healthz, /readyz, /v1/status ("" off)
    logs: Sequence[LogWatch] = ()  # [[logs]]
    watch: Sequence[Watch] = ()  # [[watch]]
    watch_files: tuple[str, ...] = ()  # files of DIDs or keys to watch, one a line ('#' comments), read every pass
    journals: tuple[str, ...] = ()  # `oap-log add --journal` files: entries they list are not alerted
    registry: RegistryWatch | None = None  # [registry]
    alerts: Sequence[Sink] = ()  # [[alerts]]
    timeout: float = 30.0  # seconds for one HTTP request, answer included: a slower peer is cut off
    fetch_window: int = 8  # entry bundles (and tiles) read ahead of the one being checked
    unreachable_after: float = 300.0  # a log or registry unreachable or serving invalid data this long: alert
    behind_after: float = 3600.0  # the verified view behind the largest checkpoint seen this long: alert
    retry_max_seconds: float = 300.0  # the longest wait between two tries of a sink (backoff from 1 s)

    def __post_init__(self) -> None:
        object.__setattr__(self, "logs", tuple(_as_log(x, i) for i, x in enumerate(_tables(self.logs, "logs"))))
        object.__setattr__(self, "watch", tuple(_as_watch(x, i) for i, x in enumerate(_tables(self.watch, "watch"))))
        object.__setattr__(self, "alerts", tuple(_as_sink(x, i) for i, x in enumerate(_tables(self.alerts, "alerts"))))
        object.__setattr__(self, "registry", _as_registry(self.registry))
        if self.metrics:
            host, sep, port = self.metrics.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigError(f"metrics must be host:port, not {self.metrics!r}")
            object.__setattr__(self, "host", host.strip("[]"))
            object.__setattr__(self, "port", int(port))

    # --- paths ----------------------------------------------------------------------------

    def resolve_paths(self, base: Path) -> MonitorConfig:
        """Relative paths (state_dir, policies, watch files, journals, hooks, files) taken from `base`."""
        def p(x: Path | str) -> Path:
            x = Path(x)
            return x if x.is_absolute() else base / x

        logs = tuple(dataclasses.replace(lg, policy=p(lg.policy)) for lg in self.logs)
        reg = self.registry
        if reg is not None and reg.policy is not None:
            reg = dataclasses.replace(reg, policy=p(reg.policy))
        sinks = tuple(dataclasses.replace(
            s, target=str(p(s.target)) if s.kind in ("hooks_dir", "file") else s.target,
            smtp_password_file=p(s.smtp_password_file) if s.smtp_password_file else None,
            webhook_token_file=p(s.webhook_token_file) if s.webhook_token_file else None) for s in self.alerts)
        return dataclasses.replace(self, state_dir=p(self.state_dir), logs=logs, registry=reg, alerts=sinks,
                                   watch_files=tuple(str(p(f)) for f in self.watch_files),
                                   journals=tuple(str(p(f)) for f in self.journals))

    @property
    def registry_policy(self) -> Path | None:
        if self.registry is None:
            return None
        return self.registry.policy or (self.logs[0].policy if self.logs else None)

    # --- checks ---------------------------------------------------------------------------

    def upstream_urls(self) -> Iterable[tuple[str, str]]:
        for i, lg in enumerate(self.logs):
            yield f"logs[{i}].url", lg.url
            for w in (lg.witnesses or ()) + (lg.mirrors or ()):
                yield f"logs[{i}] witness or mirror", w
        if self.registry is not None:
            yield "registry.url", self.registry.url
        for s in self.alerts:
            if s.kind == "webhook":
                yield f"webhook {s.name}", s.target

    def validate(self) -> None:
        check_http_limits(self)
        if not self.logs and self.registry is None:
            raise ConfigError("nothing to monitor: give [[logs]] or [registry]")
        if not 0.1 <= self.poll_seconds <= 86400:
            raise ConfigError("poll_seconds must be 0.1..86400")
        if not 1 <= self.timeout <= 600:
            raise ConfigError("timeout must be 1..600 seconds")
        if not 1 <= self.fetch_window <= 64:
            raise ConfigError("fetch_window must be 1..64")
        if not 0 <= self.unreachable_after <= 7 * 86400 or not 0 <= self.behind_after <= 30 * 86400:
            raise ConfigError("unreachable_after must be 0..604800 and behind_after 0..2592000 seconds")
        if not 1 <= self.retry_max_seconds <= 86400:
            raise ConfigError("retry_max_seconds must be 1..86400")
        names: set[str] = set()
        for i, lg in enumerate(self.logs):
            if not is_base_url(lg.url):
                raise ConfigError(f"logs[{i}]: url must be an http:// or https:// URL without a trailing /")
            for w in (lg.witnesses or ()) + (lg.mirrors or ()):
                if not is_base_url(w.rstrip("/")):
                    raise ConfigError(f"logs[{i}]: {w!r} is not an http:// or https:// URL")
            if lg.name and lg.name in names:
                raise ConfigError(f"logs[{i}]: name {lg.name!r} given twice")
            names.add(lg.name)
        if self.registry is not None:
            r = self.registry
            if not is_base_url(r.url):
                raise ConfigError("registry: url must be an http:// or https:// URL without a trailing /")
            if r.key and not r.key.startswith("did:key:"):
                raise ConfigError("registry: key must be the registry's did:key (its /v1/info `registry`)")
            for d in r.dids:
                if not is_did(d):
                    raise ConfigError(f"registry.dids: {d!r} is not a DID")
            if len(r.dids) > 256:
                raise ConfigError("registry.dids: at most 256 (16 push streams of 16 ids, the registry's limit "
                                  "per client)")
            if self.registry_policy is None:
                raise ConfigError("registry: give policy (the logs its anchors must be in), or a [[logs]] entry")
        sink_names: set[str] = set()
        for i, s in enumerate(self.alerts):
            if s.name in sink_names:
                raise ConfigError(f"alerts[{i}]: another sink is named {s.name!r} (give it a name)")
            sink_names.add(s.name)
            bad = sorted(set(s.kinds) - set(ALERT_KINDS))
            if bad:
                raise ConfigError(f"alerts[{i}].kinds: unknown kind(s) {', '.join(bad)} "
                                  f"(known: {', '.join(ALERT_KINDS)})")
            if s.kind == "webhook" and not is_base_url(s.target.rstrip("/")):
                raise ConfigError(f"alerts[{i}]: webhook must be an http:// or https:// URL")
            if s.kind == "email":
                _check_email(s, i, self.insecure_http)

    def load_watch_files(self) -> frozenset[str]:
        """The identities of `watch` and of every watch file now (a missing file: none from it)."""
        out = {w.did for w in self.watch}
        for f in self.watch_files:
            try:
                text = Path(f).read_text()
            except FileNotFoundError:
                continue
            except (OSError, UnicodeDecodeError) as e:
                raise ConfigError(f"watch file {f}: {e}") from None
            for n, line in enumerate(text.splitlines()[:100_000], 1):
                words = line.split()
                if not words or words[0].startswith("#"):
                    continue  # a blank line or a comment; anything after the identity is a label
                try:
                    out.add(watch_name(words[0], f"{f}:{n}"))
                except ConfigError:
                    continue  # the file is the operator's: a bad line is skipped, the rest still counts
        return frozenset(out)


def _check_email(s: Sink, i: int, insecure: bool) -> None:
    if "@" not in s.target or not s.smtp:
        raise ConfigError(f"alerts[{i}]: email needs an address and smtp = \"host:port\"")
    host, sep, port = s.smtp.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"alerts[{i}]: smtp must be host:port")
    if s.smtp_tls not in ("starttls", "tls", "none"):
        raise ConfigError(f"alerts[{i}]: smtp_tls must be starttls, tls or none")
    if s.smtp_tls == "none" and not is_loopback(host.strip("[]")) and not insecure:
        raise ConfigError(f"alerts[{i}]: smtp_tls = \"none\" sends alerts in the clear: only to a mail server on "
                          "this machine (or set insecure_http)")
    if s.smtp_user and s.smtp_password_file is None:
        raise ConfigError(f"alerts[{i}]: smtp_user needs smtp_password_file")

