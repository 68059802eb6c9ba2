"""Tickets: how a mirror recognises a past pending checkpoint a client names (C2SP tlog-mirror).

A ticket is opaque to clients. Ours carries the pending checkpoint itself (the signed
note, with the log's signatures), authenticated with HMAC-SHA-256 under a 32-byte key
only this mirror holds (`ticket.key`, made 0600 on first start, never logged):

    0x01 || u8 len(origin) || origin || note || HMAC(key, "oap-mirror ticket v1\\n" || the bytes before)

so an `add-entries` request can end at any pending checkpoint the mirror ever accepted
for that log, even one since replaced, without the mirror keeping them all. The spec
asks only that the mirror authenticate what it derives from a ticket; pending
checkpoints are public (the log signed them), so the ticket is not encrypted. A ticket
is still opened only after its MAC verifies, and the caller re-verifies the log's
signature on the note it carries (defence in depth should the key ever leak).
"""
from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

from tlog.runtime.keyfiles import read_private_key, write_secret

VERSION = 1
_LABEL = b"oap-mirror ticket v1\n"
MAX_TICKET = 0xFFFF
"""add-entries carries the ticket behind a u16 length."""


class TicketKey:
    """The mirror's ticket key; `repr` never shows it."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("a ticket key is 32 bytes")
        self._key = bytes(key)

    @classmethod
    def load_or_create(cls, path: Path) -> TicketKey:
        """Read `path` (mode checked: 0600), or make a fresh random key there on first start."""
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                write_secret(path, os.urandom(32).hex())
            except FileExistsError:  # another process made it first: use that one
                pass
        text = read_private_key(path).strip()
        try:
            return cls(bytes.fromhex(text))
        except ValueError:
            raise ValueError(f"{path}: not a 32-byte hex ticket key") from None

    def _tag(self, body: bytes) -> bytes:
        return hmac.new(self._key, _LABEL + body, hashlib.sha256).digest()

    def seal(self, origin: str, note: bytes) -> bytes:
        """A ticket for the pending checkpoint `note` of `origin`, or b"" if it would not fit."""
        raw = origin.encode("utf-8")
        body = bytes([VERSION, len(raw)]) + raw + note
        if len(raw) > 255 or len(body) + 32 > MAX_TICKET:
            return b""
        return body + self._tag(body)

    def open(self, origin: str, ticket: bytes) -> bytes | None:
        """The note a ticket of `origin` carries, or None if it is not a valid ticket of ours
        for that origin (wrong MAC, other origin, malformed)."""
        if len(ticket) < 2 + 32 or ticket[0] != VERSION:
            return None
        body, tag = ticket[:-32], ticket[-32:]
        if not hmac.compare_digest(self._tag(body), tag):
            return None
        olen = body[1]
        if body[2:2 + olen] != origin.encode("utf-8"):
            return None
        return body[2 + olen:]

    def __repr__(self) -> str:
        return "TicketKey(...)"
