"""Witness networks: provision the logs this witness follows from `logs/v0` lists.

Each source in `log_lists` (a file, an https:// URL, or http:// to this machine) is read
at start and every `log_list_refresh` seconds. The logs the witness cosigns are then:

1. the logs of its configuration (`[[witness.logs]]`): they always win, whatever a list says;
2. then each list's logs, lists in configuration order: an origin already taken by the
   configuration or an earlier list is left out (a conflict when the key differs).

A list that cannot be fetched or parsed changes nothing: the last good copy stays in force
(kept under DATA/log-lists/, so a restart without network keeps its logs). Each log's
`qpd` becomes its budget of new checkpoints per day (`witness.core.QueryBudget`).

Keys are pinned: the first vkey a list gave an origin is remembered (DATA/log-lists/pins.json)
and a list that later names another key for it does not change it: the log stays followed
with the pinned key, and the conflict is reported (/v1/info and the log). A compromised
or mistaken list cannot swap a log's key under a witness. To accept a rotated key,
configure the log by hand (config wins) or remove its pin. A log that leaves every list is
no longer cosigned (404); its last cosigned checkpoint is still served to monitors.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from tlog.errors import FormatError, TooLarge
from tlog.formats.loglist import MAX_LIST_BYTES, LogList, parse_log_list
from tlog.transport import Outbound, read_capped

from .config import WitnessConfig, WitnessedLog
from .core import Witness
from .metrics import WitnessMetrics

log = logging.getLogger("oap.witness.network")


@dataclass
class ListStatus:
    """What the witness knows of one list source, for /v1/info and the operator."""

    source: str
    logs: LogList | None = None  # the last good copy (None: never read)
    fetched_at: float | None = None  # when that copy was read
    error: str | None = None  # why the last attempt failed (None: it succeeded)
    conflicts: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        return {"source": self.source, "logs": len(self.logs.logs) if self.logs else 0,
                "fetched_at": int(self.fetched_at) if self.fetched_at else None, "error": self.error,
                "skipped": [f"{vkey.split('+', 1)[0]}: {why}" for vkey, why in self.logs.skipped] if self.logs else [],
                "conflicts": list(self.conflicts)}


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class LogLists:
    """The witness's log lists: read, merged with the configuration, applied to `witness`."""

    def __init__(self, cfg: WitnessConfig, witness: Witness, metrics: WitnessMetrics | None = None) -> None:
        self.cfg = cfg
        self.witness = witness
        self.metrics = metrics
        self.lists = [ListStatus(source) for source in cfg.log_lists]
        self.cache = cfg.lists_cache_dir
        self.pins: dict[str, str] = self._load_pins()
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task | None = None
        self.rounds = 0  # completed refresh rounds (tests wait on it)
        for status in self.lists:  # the last good copies, before any network
            try:
                data = self._cache_path(status.source).read_bytes()
                status.logs, status.fetched_at = parse_log_list(data), self._cache_path(status.source).stat().st_mtime
            except (OSError, FormatError):
                pass
        self.apply()

    # --- files ---------------------------------------------------------------------

    def _cache_path(self, source: str) -> Path:
        return self.cache / (hashlib.sha256(source.encode("utf-8")).hexdigest() + ".list")

    def _load_pins(self) -> dict[str, str]:
        try:
            pins = json.loads((self.cache / "pins.json").read_text())
        except (OSError, ValueError):
            return {}
        return {k: v for k, v in pins.items() if isinstance(k, str) and isinstance(v, str)} \
            if isinstance(pins, dict) else {}

    def _save_pins(self) -> None:
        _atomic_write(self.cache / "pins.json", json.dumps(self.pins, indent=1, sort_keys=True).encode())

    # --- merging -------------------------------------------------------------------

    def effective(self) -> list[WitnessedLog]:
        """Configuration logs, then each list's logs not already taken (see module doc)."""
        out = list(self.cfg.logs)
        taken = {w.origin: {w.vkey, *w.extra_vkeys} for w in out}
        new_pins = False
        for status in self.lists:
            status.conflicts = []
            if status.logs is None:
                continue
            for entry in status.logs.logs:
                if entry.origin in taken:
                    if entry.vkey not in taken[entry.origin]:
                        status.conflicts.append(f"{entry.origin}: already followed with another key "
                                                "(the configuration or an earlier list wins)")
                    continue
                vkey = self.pins.get(entry.origin)
                if vkey is None:
                    vkey = self.pins[entry.origin] = entry.vkey
                    new_pins = True
                elif vkey != entry.vkey:
                    status.conflicts.append(f"{entry.origin}: the list names a key other than the pinned one; "
                                            "the pinned key stays (configure the log by hand to accept a new key)")
                taken[entry.origin] = {vkey}
                out.append(WitnessedLog(entry.origin, vkey, None, entry.qpd, status.source, entry.contact))
        if new_pins:
            self._save_pins()
        return out

    def apply(self) -> None:
        logs = self.effective()
        for status in self.lists:
            for c in status.conflicts:
                log.warning("log list %s: %s", status.source, c)
        self.witness.set_logs(logs)
        if self.metrics is not None:
            self.metrics.logs_followed.set(len(logs))
            for status in self.lists:
                if status.fetched_at is not None:
                    self.metrics.list_fetched.labels(status.source).set(status.fetched_at)

    # --- fetching ------------------------------------------------------------------

    async def _read(self, source: str) -> bytes:
        if "://" not in source:
            def read() -> bytes:
                with open(source, "rb") as f:
                    data = f.read(MAX_LIST_BYTES + 1)
                return data
            data = await asyncio.to_thread(read)
        else:
            if self._session is None:
                self._session = Outbound.from_config(self.cfg).session(
                    timeout=self.cfg.log_list_timeout, headers={"User-Agent": "oap-witness (log list)"})
            async with self._session.get(source, allow_redirects=False) as r:
                if r.status != 200:
                    raise OSError(f"HTTP {r.status}")
                try:
                    return await read_capped(r, MAX_LIST_BYTES)
                except TooLarge:
                    raise FormatError(f"log list larger than {MAX_LIST_BYTES} bytes") from None
        if len(data) > MAX_LIST_BYTES:
            raise FormatError(f"log list larger than {MAX_LIST_BYTES} bytes")
        return data

    def _failed(self, source: str) -> None:
        if self.metrics is not None:
            self.metrics.list_failures.labels(source).inc()

    async def refresh(self) -> None:
        """Read every list once; keep the last good copy of each that fails; apply."""
        for status in self.lists:
            try:
                data = await self._read(status.source)
                parsed = parse_log_list(data)
            except FormatError as e:
                status.error = e.message
                self._failed(status.source)
                log.error("log list %s refused, keeping the last good copy: %s", status.source, e.message)
                continue
            except (OSError, aiohttp.ClientError, TimeoutError) as e:
                status.error = f"{type(e).__name__}: {e}"
                self._failed(status.source)
                log.warning("log list %s unreachable, keeping the last good copy: %s", status.source, status.error)
                continue
            status.logs, status.fetched_at, status.error = parsed, time.time(), None
            try:
                await asyncio.to_thread(_atomic_write, self._cache_path(status.source), data)
            except OSError as e:
                log.warning("could not keep a copy of log list %s: %s", status.source, e)
        self.apply()
        self.rounds += 1

    async def _refresh_safely(self) -> None:
        try:
            await self.refresh()
        except Exception:  # a bug must not stop the refreshes (the last good lists stay)
            log.exception("log list refresh failed")

    async def run(self) -> None:
        """Refresh every `log_list_refresh` seconds until cancelled."""
        while True:
            await asyncio.sleep(self.cfg.log_list_refresh)
            await self._refresh_safely()

    async def start(self) -> None:
        """Read every list once (each fetch bounded by `log_list_timeout`), so the witness
        serves its lists' logs from its first request, then refresh in the background."""
        if self.lists and self._task is None:
            await self._refresh_safely()
            self._task = asyncio.get_running_loop().create_task(self.run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - closing: how the loop ended no longer matters
                pass
            self._task = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def info(self) -> list[dict]:
        return [s.summary() for s in self.lists]
