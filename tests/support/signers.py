"""A checkpoint signer for storage tests (a fixed test key)."""
from __future__ import annotations

from tlog.formats.checkpoint import Checkpoint
from tlog.formats.keys import Signer
from tlog.formats.note import sign_note


def make_signer(origin: str = "test.example/log") -> Signer:
    return Signer(origin, bytes(range(32)))


def checkpoint_signer(signer: Signer):
    return lambda size, root: sign_note(Checkpoint(signer.name, size, root).to_text(), [signer])
