"""The signed log list this registry publishes (`GET /v1/log-list`, docs/architecture.md §6.2).

The operator keeps the list's logs in a JSON file (`log_list`: `{"logs": [...]}`, the
format of `tlog.formats.shardlist`); the registry checks it at start (a bad file stops the
start), signs it with its key and serves it. An edit of the file (a log frozen, a shard
opened) is picked up at the next request: signed again with a new `issued_at`; an edit
that does not check keeps the last good list served and is logged.
"""
from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tlog.errors import ConfigError, FormatError
from tlog.formats.did import did_key_from_public
from tlog.formats.keys import Ed25519Key, ed25519_signer
from tlog.formats.shardlist import unsigned_log_list
from tlog.formats.times import format_utc

from .status import sign_object

log = logging.getLogger("oap.registry.shardlist")
MAX_FILE = 1 << 20


class LogListFile:
    """The operator's file, signed when it changes."""

    def __init__(self, path: Path, seed: Ed25519Key) -> None:
        self.path, self.seed = Path(path), seed
        self.registry = did_key_from_public(ed25519_signer(seed).public)
        self._seen: tuple[int, int, int] | None = None
        self.signed: dict[str, Any] = {}
        try:
            self._load()
        except (OSError, ValueError, FormatError) as e:
            raise ConfigError(f"log_list {self.path}: {getattr(e, 'message', e)}") from None

    def _stamp(self) -> tuple[int, int, int]:
        st = os.stat(self.path)
        return st.st_mtime_ns, st.st_size, st.st_ino

    def _load(self) -> None:
        stamp = self._stamp()
        raw = self.path.read_bytes()
        if len(raw) > MAX_FILE:
            raise FormatError(f"over {MAX_FILE} bytes")
        body = json.loads(raw)
        issued = format_utc(datetime.now(UTC).replace(microsecond=0))
        self.signed = sign_object(unsigned_log_list(self.registry, issued, body), self.seed)
        self._seen = stamp

    def current(self) -> dict[str, Any]:
        """The signed list, signed again first if the file changed since."""
        try:
            if self._stamp() != self._seen:
                self._load()
        except (OSError, ValueError, FormatError) as e:
            log.error("log_list %s does not check (still serving the list of %s): %s", self.path,
                      self.signed.get("issued_at"), getattr(e, "message", e))
            try:
                self._seen = self._stamp()  # logged once per edit
            except OSError:
                pass
        return self.signed
