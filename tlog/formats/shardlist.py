"""The registry's signed log list (docs/architecture.md §6.2): which logs exist, which take
entries now (temporal shards, each with its window), which are frozen, and each one's
successor, so that a client moves to the next shard without a change of its configuration.

A list is one JSON object, signed like every other registry statement: Ed25519 by the
registry key over the JCS (RFC 8785) of the object without its `signature` member, base64:

    {"type": "oap-log-list", "registry": "<did:key>", "issued_at": "<RFC 3339 UTC>",
     "logs": [{"origin": "...", "url": "https://...", "vkey": "<C2SP vkey>",
               "state": "active" | "frozen",
               "accept_from": "<RFC 3339 UTC>", "accept_until": "<RFC 3339 UTC>",
               "successor": "<origin of another log of the list>"}, ...],
     "signature": "<base64>"}

`accept_from`, `accept_until` and `successor` are optional. A client verifies the list
offline against the registry key it pinned (a tlog-policy `registry` line), and picks the
log to write to with `writable_log`; the operator writes the unsigned part
(`check_log_list_body` refuses a bad one at the registry's start).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tlog.errors import FormatError, OAPError, SignatureError
from tlog.formats import ed25519
from tlog.formats.canonical import jcs
from tlog.formats.did import public_from_did_key
from tlog.formats.encoding import b64dec
from tlog.formats.keys import parse_vkey
from tlog.formats.times import parse_utc
from tlog.formats.urls import is_base_url

LIST_TYPE = "oap-log-list"
STATES = ("active", "frozen")
MAX_LOGS = 256
_LOG_FIELDS = {"origin", "url", "vkey", "state", "accept_from", "accept_until", "successor"}
_LIST_FIELDS = {"type", "registry", "issued_at", "logs", "signature"}


@dataclass(frozen=True)
class ListedLog:
    origin: str
    url: str
    vkey: str
    state: str
    accept_from: datetime | None = None
    accept_until: datetime | None = None
    successor: str | None = None

    def takes_entries_at(self, now: datetime) -> bool:
        """Active, and `now` inside its window."""
        return self.state == "active" and (self.accept_from is None or self.accept_from <= now) and \
            (self.accept_until is None or now < self.accept_until)


@dataclass(frozen=True)
class LogList:
    registry: str
    issued_at: datetime
    logs: tuple[ListedLog, ...]

    def by_origin(self, origin: str) -> ListedLog | None:
        return next((log for log in self.logs if log.origin == origin), None)

    def by_url(self, url: str) -> ListedLog | None:
        url = url.rstrip("/")
        return next((log for log in self.logs if log.url == url), None)


def _str(value: object, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 1024 or not value.isprintable():
        raise FormatError(f"{where} must be a printable string of 1..1024 characters")
    return value


def _log(doc: object, i: int) -> ListedLog:
    where = f"logs[{i}]"
    if not isinstance(doc, dict):
        raise FormatError(f"{where} must be an object")
    unknown = set(doc) - _LOG_FIELDS
    if unknown:
        raise FormatError(f"{where}: unknown members {sorted(unknown)}")
    origin, url, vkey, state = (_str(doc.get(k), f"{where}.{k}") for k in ("origin", "url", "vkey", "state"))
    if not is_base_url(url):
        raise FormatError(f"{where}.url must be an http(s) URL without a trailing '/'")
    v = parse_vkey(vkey)
    if v.name != origin:
        raise FormatError(f"{where}.vkey is named {v.name!r}, not the log's origin {origin!r}")
    if state not in STATES:
        raise FormatError(f"{where}.state must be one of {', '.join(STATES)}")
    start, end = (parse_utc(doc[k], f"{where}.{k}") if k in doc else None for k in ("accept_from", "accept_until"))
    if start is not None and end is not None and start >= end:
        raise FormatError(f"{where}: accept_from must be before accept_until")
    successor = _str(doc["successor"], f"{where}.successor") if "successor" in doc else None
    return ListedLog(origin, url, vkey, state, start, end, successor)


def check_log_list_body(doc: object) -> tuple[ListedLog, ...]:
    """The logs of a list (signed or not): every member checked, origins and URLs unique,
    every successor a log of the list and none its own; FormatError naming the first fault."""
    if not isinstance(doc, dict):
        raise FormatError("a log list must be a JSON object")
    logs = doc.get("logs")
    if not isinstance(logs, list) or len(logs) > MAX_LOGS:
        raise FormatError(f"logs must be a list of at most {MAX_LOGS} logs")
    out = tuple(_log(d, i) for i, d in enumerate(logs))
    origins = [log.origin for log in out]
    if len(set(origins)) != len(origins) or len({log.url for log in out}) != len(out):
        raise FormatError("every log of the list needs its own origin and url")
    for log in out:
        if log.successor is not None and (log.successor not in origins or log.successor == log.origin):
            raise FormatError(f"the successor of {log.origin} must be another log of the list")
    return out


def verify_log_list(doc: object, registry: str) -> LogList:
    """A signed list, checked offline against the pinned registry key `registry` (a did:key):
    SignatureError if it is not signed by it, FormatError if it is malformed."""
    if not isinstance(doc, dict):
        raise FormatError("a log list must be a JSON object")
    if doc.get("type") != LIST_TYPE:
        raise FormatError(f"not a log list (type must be {LIST_TYPE!r})")
    unknown = set(doc) - _LIST_FIELDS
    if unknown:
        raise FormatError(f"log list: unknown members {sorted(unknown)}")
    if doc.get("registry") != registry:
        raise SignatureError(f"the log list is by {doc.get('registry')!r}, not the pinned registry {registry}")
    sig = doc.get("signature")
    try:
        raw = b64dec(sig, what="signature") if isinstance(sig, str) else b""
        ed25519.verify(public_from_did_key(registry), jcs({k: v for k, v in doc.items() if k != "signature"}), raw)
    except OAPError:
        raise SignatureError("the log list is not signed by the pinned registry key") from None
    logs = check_log_list_body(doc)
    return LogList(registry, parse_utc(doc.get("issued_at"), "issued_at"), logs)


def unsigned_log_list(registry: str, issued_at: str, body: dict[str, Any]) -> dict[str, Any]:
    """What the registry signs: the operator's `logs`, checked, with the list's header."""
    check_log_list_body(body)
    return {"type": LIST_TYPE, "registry": registry, "issued_at": issued_at, "logs": body["logs"]}


def writable_log(lst: LogList, now: datetime, *, start: str | None = None) -> ListedLog | None:
    """The log to write to at `now`: from the log whose origin is `start`, itself or its
    successors in turn (a frozen or closed shard hands over to the next), the first that
    takes entries; never a log outside that chain. Without `start`, the first log of the
    list that takes entries. None if none does."""
    if start is None:
        return next((log for log in lst.logs if log.takes_entries_at(now)), None)
    seen: set[str] = set()
    log = lst.by_origin(start)
    while log is not None and log.origin not in seen:
        if log.takes_entries_at(now):
            return log
        seen.add(log.origin)
        log = lst.by_origin(log.successor) if log.successor is not None else None
    return None
