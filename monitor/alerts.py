"""The alert document: one JSON object per alert, the same for every sink (README "Alerts").

    {"type": "oap-monitor-alert/v1", "id": "<64 hex>", "kind": "watched_entry",
     "source": {"log": "<name>", "origin": "<origin>", "url": "<url>"}, "raised_at": "<RFC 3339>",
     "summary": "<one line>", "evidence": {...}}

`id` is stable: it is computed from what the alert is about (the log and the entry's index
and leaf hash; the two checkpoints of a split view; the status answer that changed; the
incident's start), never from when it was raised, so the same finding is one alert however
often it is found again (after a restart, in a rescan, from another witness), and a sink
that receives it twice can tell. Evidence a person or a program checks offline is also
written to the state directory's `evidence/` and named in `evidence.file`: a watched
entry's `.tlog-proof` (`oap-log verify`), a split view's `.split.json` (`oap-monitor
check-evidence`).
"""
from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tlog.client.splitview import SplitView
from tlog.errors import OAPError
from tlog.formats.checkpoint import parse_checkpoint
from tlog.formats.encoding import b64enc
from tlog.formats.entries import decode_entry
from tlog.formats.note import parse_note
from tlog.formats.parties import Parties

from .state import NewAlert

ALERT_TYPE = "oap-monitor-alert/v1"


def alert_id(kind: str, *parts: object) -> str:
    h = hashlib.sha256(kind.encode())
    for p in parts:
        raw = p if isinstance(p, bytes) else str(p).encode()
        h.update(len(raw).to_bytes(8, "big") + raw)
    return h.hexdigest()


def now_utc() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def document(kind: str, aid: str, source: dict[str, Any], summary: str, evidence: dict[str, Any]) -> dict[str, Any]:
    return {"type": ALERT_TYPE, "id": aid, "kind": kind, "source": source, "raised_at": now_utc(),
            "summary": summary, "evidence": evidence}


def watched_entry(evidence_dir: Path, source: dict[str, Any], index: int, entry: bytes, leaf: bytes,
                  parties: Parties, matched: list[str], bundle: str, checkpoint_size: int) -> NewAlert:
    """An entry signed by, or naming, a watched identity (OAP-CORE-1.0 §28.5)."""
    aid = alert_id("watched_entry", source["origin"], index, leaf)
    name = f"{aid}.tlog-proof"
    try:
        decoded: Any = decode_entry(entry)
    except OAPError:
        decoded = None  # read as an OAP entry by its head only: `entry_cbor` has its bytes
    who = "signed by" if parties.signer in matched else "naming"
    summary = (f"entry {index} of {source['log']} is a {parties.kind} {who} {', '.join(matched)} (watched); "
               f"check it with: oap-log verify {evidence_dir / name} --policy <the log's policy>")
    ev = {"index": index, "leaf_hash": b64enc(leaf), "type": parties.kind, "signer": parties.signer,
          "names": list(parties.names), "watched": matched, "entry": decoded, "entry_cbor": b64enc(entry),
          "checkpoint_size": checkpoint_size, "bundle": bundle, "file": str(evidence_dir / name)}
    return NewAlert(document("watched_entry", aid, source, summary, ev), ((name, bundle.encode()),))


def split_view(evidence_dir: Path, source: dict[str, Any], split: SplitView, detail: str) -> NewAlert:
    """Two checkpoints the log signed that no append-only tree explains."""
    a, b = (parse_checkpoint(parse_note(n).text) for n in (split.a, split.b))
    aid = alert_id("split_view", a.origin, a.size, a.root, b.size, b.root)
    name = f"{aid}.split.json"
    what = (f"two roots for size {a.size}" if a.size == b.size
            else f"the checkpoint of size {b.size} is not a prefix of the one of size {a.size}")
    summary = (f"split view of {source['log']}: {what} ({detail}); check it with: oap-monitor check-evidence "
               f"{evidence_dir / name} --policy <the log's policy>")
    ev = {**split.to_json(), "file": str(evidence_dir / name)}
    return NewAlert(document("split_view", aid, source, summary, ev), ((name, split.to_bytes()),))


def health(kind: str, source: dict[str, Any], what: str, since: float, reason: str) -> NewAlert:
    """An incident that lasted: unreachable, invalid data, behind (one alert per incident)."""
    aid = alert_id(kind, *sorted(source.items()), since)
    started = datetime.fromtimestamp(since, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return NewAlert(document(kind, aid, source, f"{what} since {started}: {reason}",
                             {"since": started, "reason": reason}))


def registry_status(source: dict[str, Any], status_id: str, answer: dict[str, Any], previous: str | None,
                    mark: str) -> NewAlert:
    """A watched DID's status changed (or is not good when first seen), as a verified answer says."""
    status = answer["status"]
    aid = alert_id("registry_status", source["registry"], status_id, mark)
    block = answer.get("revocation") or answer.get("suspension") or {}
    why = f" ({block.get('reason')}, from {block.get('revoked_at') or block.get('suspended_at')})" if block else ""
    was = f"was {previous}" if previous else "first seen"
    summary = f"{status_id} is {status}{why} in the registry {source['registry']} ({was}); answer verified"
    ev = {"id": status_id, "status": status, "previous": previous, "this_update": answer.get("this_update"),
          "epoch": (answer.get("epoch") or {}).get("epoch"), "answer": answer}
    return NewAlert(document("registry_status", aid, source, summary, ev))


def registry_anchor(source: dict[str, Any], seq: int, commit: str, reason: str,
                    anchor: str | None) -> NewAlert:
    """A registry commit whose anchor is missing, or is not in a log the monitor watches."""
    aid = alert_id("registry_anchor", source["registry"], seq, commit, reason)
    return NewAlert(document("registry_anchor", aid, source, f"registry commit {seq} ({commit[:12]}): {reason}",
                             {"seq": seq, "commit": commit, "reason": reason, "anchor": anchor}))
