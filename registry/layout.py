"""Where things live in the registry's Git tree (docs/architecture.md §6). Pure path maths, no I/O.

    registry.json                                  genesis: registry key, log, bootstrap witnesses (commit 0 only)
    conformance/ab/cd/<sha256(id)>.json            conformance receipts (OAP-CORE-1.0 §31)
    revocations/<kind>/ab/cd/<sha256(id)>.json     revocations, kind in did|vc|key|conformance (§22.1, §28.5)
    killswitch/ab/cd/<sha256(id)>.json             kill switch invocations (§22.3)
    killswitch/ab/cd/<sha256(id)>.tlog-proof       ... and the log anchor of that invocation as a receipt
    keys/ab/cd/<sha256(id)>.json                   key events (controllers, rotation; §5.3)
    anchors/<seq // 1000>/<seq>.tlog-proof         log anchor of registry commit <seq>, added by commit seq+1
    key-rotations/<n>.json                         the registry's own key rotations, 1, 2, ... (`keyrotation`)
    dids/ab/cd/<sha256(did)>/<sha256(doc)>.json    a DID document as the registry resolved it, added with the
                                                   first record it checked a signature of (§5.1)

A registry that anchors in several logs (its genesis names them) keeps each anchor
as an `oap-anchors/v1` file, one tlog-proof per log (`tlog.formats.anchors`), at the
same places with `.anchors.json` for `.tlog-proof`; one registry uses one form only.

Paths are sharded by the SHA-256 of the record id so that no directory grows
past 256 entries per level and a record's place is computable from its id
alone. A path is a pure function of (type, kind, id): the same id can never be
stored twice, and a record can never move. Files are the RFC 8785 (JCS) bytes
of the record, so `sha256(file)` is the record's hash.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tlog.errors import InvalidInput
from tlog.formats.hashing import sha256

GENESIS = "registry.json"
REVOCATION_KINDS = ("did", "vc", "key", "conformance")
ANCHORS = "anchors"
KEY_ROTATIONS = "key-rotations"
_DIRS = {"conformance": "conformance", "kill_switch": "killswitch", "key_event": "keys"}

_HEX64 = r"[0-9a-f]{64}"
_RECORD_RE = re.compile(
    rf"(?P<dir>conformance|killswitch|keys|revocations/(?P<kind>did|vc|key|conformance))"
    rf"/(?P<a>[0-9a-f]{{2}})/(?P<b>[0-9a-f]{{2}})/(?P<h>{_HEX64})(?P<ext>\.anchors\.json|\.json|\.tlog-proof)"
)
_DID_DOC_RE = re.compile(rf"dids/([0-9a-f]{{2}})/([0-9a-f]{{2}})/({_HEX64})/({_HEX64})\.json")
_ANCHOR_RE = re.compile(r"anchors/(0|[1-9][0-9]{0,15})/(0|[1-9][0-9]{0,15})(\.tlog-proof|\.anchors\.json)")
_ROTATION_RE = re.compile(r"key-rotations/([1-9][0-9]{0,3})\.json")
PROOF_EXT = {False: ".tlog-proof", True: ".anchors.json"}
"""The extension of an anchor: one log's tlog-proof, or an anchors file of several logs' proofs."""


def id_hash(record_id: str) -> str:
    return sha256(record_id.encode("utf-8")).hex()


def _shard(h: str) -> str:
    return f"{h[:2]}/{h[2:4]}/{h}"


def record_path(rtype: str, record_id: str, kind: str | None = None) -> str:
    """The one path of a record: a function of its type, revocation kind and id."""
    h = id_hash(record_id)
    if rtype == "revocation":
        if kind not in REVOCATION_KINDS:
            raise InvalidInput(f"revocation kind must be one of {', '.join(REVOCATION_KINDS)}")
        return f"revocations/{kind}/{_shard(h)}.json"
    if rtype not in _DIRS:
        raise InvalidInput(f"unknown record type {rtype!r}")
    return f"{_DIRS[rtype]}/{_shard(h)}.json"


def receipt_proof_path(record_path_: str, several: bool = False) -> str:
    """Kill switch invocations carry their receipt's .tlog-proof (`several` logs: .anchors.json) beside them."""
    if not record_path_.startswith("killswitch/") or not record_path_.endswith(".json") \
            or record_path_.endswith(PROOF_EXT[True]):
        raise ValueError("only kill switch records have a receipt proof")
    return record_path_[: -len(".json")] + PROOF_EXT[several]


def did_document_path(did: str, content: bytes) -> str:
    """Where the registry keeps a version of a DID's document (`content`: its JCS bytes).
    Versions sit side by side: a mirror checks each record against the document
    versions stored up to its commit, as the registry checked it when it was new."""
    return f"dids/{_shard(id_hash(did))}/{sha256(content).hex()}.json"


def rotation_path(number: int) -> str:
    """Where the registry's key rotation `number` (1, 2, ...) is committed."""
    if number < 1:
        raise ValueError("key rotations are numbered from 1")
    return f"{KEY_ROTATIONS}/{number}.json"


def anchor_path(seq: int, several: bool = False) -> str:
    """Where the anchor of commit `seq` goes in the tree (and, by its name, in the data directory)."""
    if seq < 0:
        raise ValueError("negative seq")
    return f"{ANCHORS}/{seq // 1000}/{seq}{PROOF_EXT[several]}"


@dataclass(frozen=True)
class PathInfo:
    """What a path in the tree is: `what` in record|receipt_proof|anchor|genesis|did_document|key_rotation
    (`seq`: an anchor's commit, a key rotation's number)."""

    what: str
    rtype: str | None = None
    kind: str | None = None
    hash: str | None = None
    seq: int | None = None
    content_hash: str | None = None  # DID documents: sha256 of the file
    several: bool = False  # anchors and receipt proofs: an anchors file of several logs' proofs


_TYPE_OF_DIR = {"conformance": "conformance", "killswitch": "kill_switch", "keys": "key_event"}


def classify(path: str) -> PathInfo:
    """Parse a tree path; InvalidInput for anything the layout does not allow."""
    if path == GENESIS:
        return PathInfo("genesis")
    m = _ANCHOR_RE.fullmatch(path)
    if m:
        seq = int(m.group(2))
        if int(m.group(1)) != seq // 1000:
            raise InvalidInput(f"{path}: anchor in the wrong shard")
        return PathInfo("anchor", seq=seq, several=m.group(3) == PROOF_EXT[True])
    m = _ROTATION_RE.fullmatch(path)
    if m:
        return PathInfo("key_rotation", seq=int(m.group(1)))
    m = _DID_DOC_RE.fullmatch(path)
    if m:
        if m.group(1) != m.group(3)[:2] or m.group(2) != m.group(3)[2:4]:
            raise InvalidInput(f"{path}: DID document in the wrong shard")
        return PathInfo("did_document", hash=m.group(3), content_hash=m.group(4))
    m = _RECORD_RE.fullmatch(path)
    if m is None:
        raise InvalidInput(f"{path}: not a path of the registry layout")
    h = m.group("h")
    if m.group("a") != h[:2] or m.group("b") != h[2:4]:
        raise InvalidInput(f"{path}: record in the wrong shard")
    d = m.group("dir")
    rtype = "revocation" if d.startswith("revocations/") else _TYPE_OF_DIR[d]
    if m.group("ext") != ".json":
        if rtype != "kill_switch":
            raise InvalidInput(f"{path}: only kill switch records have a receipt proof")
        return PathInfo("receipt_proof", rtype, None, h, several=m.group("ext") == PROOF_EXT[True])
    return PathInfo("record", rtype, m.group("kind"), h)
