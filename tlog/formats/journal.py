"""The anchoring journal: what an operator anchored itself, so that its monitor does not alert on it.

OAP-CORE-1.0 §28.5 asks that the owner of a key learn of every receipt signed with it; the
receipts it made itself are not news. `oap-log add --journal FILE` appends one line to FILE
for every entry it anchors, *before* it sends the entry (so no monitor can see the entry in
a log before the line is on disk), and `oap-monitor` reads the journals it is given and
raises no alert for an entry they list. A journal line that was written for an entry that
then failed to anchor costs nothing: it only names an entry the operator meant to make.

A line is one JSON object (UTF-8, no newline inside, at most `MAX_LINE` bytes):

    {"type": "oap-anchored/v1", "key": "<hex>", "entry_type": "receipt",
     "signer": "did:key:z6Mk...", "at": "2026-05-02T10:00:00Z"}

`key` is `anchored_key(entry)`: the leaf hash of the entry without the `did_document` a log
adds to entries signed by DIDs other than did:key (docs/architecture.md §3.1), so that the
line written before the log answered matches the entry the log stored. The other fields
are for the people reading the file. Pure: the writing and the reading are the callers'.
"""
from __future__ import annotations

import json

from tlog.errors import InvalidInput
from tlog.formats.canonical import dcbor
from tlog.formats.diddoc import skip_resolved_signatures
from tlog.formats.entries import canonical_entry, signer_name
from tlog.formats.hashing import leaf_hash
from tlog.formats.strict import loads_cbor

JOURNAL_TYPE = "oap-anchored/v1"
MAX_LINE = 4096
"""Longer lines are not journal lines (and one write of at most this many bytes to a file
opened for appending lands whole, so writers need no lock)."""


def anchored_key(entry: bytes) -> bytes:
    """What a journal line names an entry by: its leaf hash without the signer's DID
    document (which a log adds), so that the same key comes out before and after the log."""
    if b"did_document" not in entry:
        return leaf_hash(entry)
    try:
        obj = loads_cbor(entry)
    except InvalidInput:
        return leaf_hash(entry)
    if not isinstance(obj, dict) or "did_document" not in obj:
        return leaf_hash(entry)
    return leaf_hash(dcbor({k: v for k, v in obj.items() if k != "did_document"}))


def journal_line(entry: bytes, *, entry_type: str, signer: str | None, at: str) -> bytes:
    """The journal line of one entry (its stored bytes, as canonical_entry gives them), with its newline."""
    doc = {"type": JOURNAL_TYPE, "key": anchored_key(entry).hex(), "entry_type": entry_type, "at": at}
    if signer is not None:
        doc["signer"] = signer
    line = json.dumps(doc, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"
    if len(line) > MAX_LINE:
        raise InvalidInput("journal line too long")
    return line


def journal_line_for(entry: dict, *, at: str) -> bytes:
    """The journal line of a submission (a dict, as `oap-log add` builds it), canonicalized as
    the log will store it (the signer's DID document aside, which `anchored_key` leaves out)."""
    data = canonical_entry(entry, lookup=skip_resolved_signatures)
    signer = entry.get("signer")
    return journal_line(data, entry_type=str(entry.get("type")), at=at,
                        signer=signer_name(signer) if isinstance(signer, str) else None)


def parse_journal(data: bytes) -> tuple[list[bytes], int, int]:
    """The keys of the complete lines of `data` (a journal, or a part of it that starts at a
    line), how many bytes those lines take (where the next read starts), and how many lines
    were not journal lines (skipped: a journal is the operator's own file, a bad line in it
    must not stop the monitor)."""
    keys: list[bytes] = []
    bad = 0
    end = data.rfind(b"\n") + 1
    for line in data[:end].split(b"\n")[:-1]:
        if not line.strip():
            continue
        key = _key_of(line)
        if key is None:
            bad += 1
        else:
            keys.append(key)
    return keys, end, bad


def _key_of(line: bytes) -> bytes | None:
    if len(line) > MAX_LINE:
        return None
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("type") != JOURNAL_TYPE:
        return None
    key = doc.get("key")
    if not isinstance(key, str) or len(key) != 64:
        return None
    try:
        raw = bytes.fromhex(key)
    except ValueError:
        return None
    return raw if len(raw) == 32 else None  # fromhex skips spaces
