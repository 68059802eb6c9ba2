"""Revocation status, OCSP style (OAP-CORE-1.0 §22.1, docs/architecture.md §6): epochs and signed responses.

A status id is one of
- a DID or did:key (revoked by `did` / `key` revocations),
- a conformance receipt id (revoked by a `conformance` revocation, or expired),
- `<principal DID>#<class>` for class in subscription_tokens, oauth_grants,
  trust_tokens, webhook_subscriptions (revoked by the principal's kill switch,
  §22.3: every such token or grant of the principal checks as revoked),
- `vc <issuer DID> <credential id>` (a `vc` revocation by that issuer; asked as
  `GET /v1/status/<credential id>?issuer=<DID>`).

Per epoch the registry computes the set of ids revoked at `this_update` from
its add-only history, builds a sorted Merkle tree of them (`sortedtree`),
signs an epoch statement with its root and anchors the statement in the log as
a `receipt` entry. Responses are produced from the epoch: `revoked` carries
the record, the Git path from the anchored commit tree down to the record and
that commit's .tlog-proof; `good` (the id is named by some record) and
`unknown` (it is not) carry the non-revocation proof. Each response is signed
by the registry key; `registry.statusverify` checks one offline.

`next_update` is `this_update + epoch_seconds`, or earlier when a scheduled
revocation or a receipt expiry falls before that, so no response claims `good`
past a change the registry already knows about.
"""
from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tlog.formats import ed25519
from tlog.formats.canonical import jcs
from tlog.formats.did import did_key_from_public
from tlog.formats.diddoc import dids_to_resolve
from tlog.formats.encoding import b64enc
from tlog.formats.hashing import format_sha256, sha256
from tlog.formats.times import format_utc

from .index import CommitInfo, Index
from .layout import anchor_path, receipt_proof_path
from .records import Record
from .sortedtree import Leaf, SortedTree
from .store import RegistryRepo

STATEMENT_TYPE = "oap-status-epoch"
RESPONSE_TYPE = "oap-status-response"
MAX_PREPRODUCED = 20_000
"""Responses signed ahead per epoch (revoked ids first, then known ids); the
rest are produced on first request and cached for the epoch (LRU)."""
MAX_ON_DEMAND = 20_000


@dataclass(frozen=True)
class Revoked:
    key: str
    revoked_at: datetime
    reason: str
    record: Record


def revoked_entries(index: Index, at: datetime) -> dict[str, Revoked]:
    """Every status id revoked at `at`, with its earliest revocation in force."""
    out: dict[str, Revoked] = {}

    def put(key: str, when: datetime, reason: str, rec: Record) -> None:
        if key not in out or when < out[key].revoked_at:
            out[key] = Revoked(key, when, reason, rec)

    for rec in index.all_records():
        if rec.type == "conformance":
            if rec.expires_at is not None and rec.expires_at <= at:
                put(rec.id, rec.expires_at, "expired", rec)
        elif rec.type in ("revocation", "kill_switch") and rec.effective_at <= at:
            reason = rec.body["reason"] if rec.type == "revocation" else "kill_switch"
            for key in rec.status_keys():
                put(key, rec.effective_at, reason, rec)
    return out


def next_change(index: Index, at: datetime) -> datetime | None:
    """The first scheduled revocation or expiry after `at`."""
    times = [t for rec in index.all_records()
             for t in ((rec.expires_at,) if rec.type == "conformance" else
                       (rec.effective_at,) if rec.type in ("revocation", "kill_switch") else ())
             if t is not None and t > at]
    return min(times) if times else None


def leaf_bytes(r: Revoked) -> bytes:
    return jcs({"id": r.key, "reason": r.reason, "record": format_sha256(r.record.hash),
                "revoked_at": format_utc(r.revoked_at)})


def build_tree(revoked: dict[str, Revoked]) -> SortedTree:
    return SortedTree([Leaf(k, leaf_bytes(r)) for k, r in revoked.items()])


def sign_object(obj: dict[str, Any], seed: bytes) -> dict[str, Any]:
    body = {k: v for k, v in obj.items() if k != "signature"}
    return {**body, "signature": b64enc(ed25519.sign(seed, jcs(body)))}


@dataclass(frozen=True)
class Produced:
    body: dict[str, Any]
    json: bytes
    etag: str


@dataclass
class Epoch:
    number: int
    this_update: datetime
    next_update: datetime
    head: CommitInfo
    statement: dict[str, Any]
    tree: SortedTree
    revoked: dict[str, Revoked]
    anchor: str = ""
    responses: dict[str, Produced] = field(default_factory=dict)
    on_demand: OrderedDict = field(default_factory=OrderedDict)
    known: frozenset[str] = frozenset()  # ids named by some record at this epoch: good, not unknown
    located: dict[str, CommitInfo] = field(default_factory=dict)  # record path -> commit that added it
    lists: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    list_cache: dict[tuple[str, int, str], Produced] = field(default_factory=dict)

    @property
    def statement_hash(self) -> bytes:
        return sha256(jcs(self.statement))

    @property
    def statement_id(self) -> str:
        return f"urn:oap:status-epoch:{self.number}"


class StatusProducer:
    """Builds epochs and responses.

    `prepare` reads the index (call it where the index is updated: the event
    loop); it snapshots all an epoch needs, so `preproduce`, which reads Git
    and signs, can run in the writer thread while commits go on; `produce`
    (ids not revoked) touches neither.
    """

    def __init__(self, seed: bytes, repo: RegistryRepo, index: Index, anchors_dir: Path) -> None:
        self.seed = seed
        self.registry = did_key_from_public(ed25519.public_from_seed(seed))
        self.repo, self.index, self.anchors_dir = repo, index, anchors_dir

    def prepare(self, number: int, at: datetime, period: timedelta) -> Epoch:
        head = self.index.head
        if head is None:
            raise ValueError("no registry history yet")
        revoked = revoked_entries(self.index, at)
        tree = build_tree(revoked)
        nxt = at + period
        change = next_change(self.index, at)
        if change is not None and change < nxt:
            nxt = max(change, at + timedelta(seconds=1))
        statement = sign_object({
            "type": STATEMENT_TYPE, "registry": self.registry, "epoch": number,
            "this_update": format_utc(at), "next_update": format_utc(nxt),
            "registry_seq": head.seq, "registry_commit": head.commit,
            "revoked_size": tree.size, "revoked_root": format_sha256(tree.root),
        }, self.seed)
        epoch = Epoch(number, at, nxt, head, statement, tree, revoked, known=self.index.snapshot_known())
        for r in revoked.values():
            epoch.located[r.record.path] = self.index.commits[self.index.seq_of[r.record.path]]
            if r.record.type == "revocation" and r.record.kind == "vc" and r.record.issuer_list:
                lst, idx = r.record.issuer_list
                epoch.lists.setdefault((r.record.issued_by, lst), []).append(idx)
        return epoch

    def preproduce(self, epoch: Epoch, limit: int = MAX_PREPRODUCED) -> None:
        """Sign the responses of the ids the registry knows, revoked ones first (reads Git)."""
        for key in epoch.revoked:
            if len(epoch.responses) >= limit:
                return
            epoch.responses[key] = self.produce_revoked(epoch, key)
        for key in epoch.known:
            if len(epoch.responses) >= limit:
                return
            if key and key not in epoch.responses:
                epoch.responses[key] = self.produce(epoch, key)

    def produce_revoked(self, epoch: Epoch, key: str) -> Produced:
        """A `revoked` response (reads Git: call from the writer thread)."""
        return self._finish(epoch, key, self._revoked_body(epoch, key))

    def cached(self, epoch: Epoch, key: str) -> Produced | None:
        return epoch.responses.get(key) or epoch.on_demand.get(key)

    def remember(self, epoch: Epoch, key: str, got: Produced) -> None:
        epoch.on_demand[key] = got
        if len(epoch.on_demand) > MAX_ON_DEMAND:
            epoch.on_demand.popitem(last=False)

    def produce(self, epoch: Epoch, key: str) -> Produced:
        """A `good` or `unknown` response (no Git access)."""
        if key in epoch.revoked:
            raise KeyError(f"{key} is revoked: use produce_revoked")
        status = "good" if key in epoch.known else "unknown"
        body = self._base(epoch, key, status)
        body["proof"] = epoch.tree.absence(key)
        return self._finish(epoch, key, body)

    def _base(self, epoch: Epoch, key: str, status: str) -> dict[str, Any]:
        return {"type": RESPONSE_TYPE, "id": key, "status": status,
                "this_update": format_utc(epoch.this_update), "next_update": format_utc(epoch.next_update),
                "epoch": epoch.statement, "epoch_anchor": epoch.anchor}

    def _revoked_body(self, epoch: Epoch, key: str) -> dict[str, Any]:
        r = epoch.revoked[key]
        rec = r.record
        commit = epoch.located[rec.path]
        seq = commit.seq
        body = self._base(epoch, key, "revoked")
        body["proof"] = epoch.tree.membership(key)
        revocation: dict[str, Any] = {
            "revoked_at": format_utc(r.revoked_at), "reason": r.reason, "record": rec.body, "path": rec.path,
            "seq": seq, "commit": commit.commit, "tree": commit.tree,
            "git_path": [b64enc(t) for t in self.repo.tree_path(commit.tree, rec.path)],
            "anchor": (self.anchors_dir / Path(anchor_path(seq, self.index.several_logs)).name).read_text(),
        }
        if rec.type == "kill_switch":
            proof = self.repo.read(commit.tree, receipt_proof_path(rec.path, self.index.several_logs))
            revocation["receipt_anchor"] = proof.decode() if proof else ""
        documents = self._did_documents(rec, commit.tree)
        if documents:
            revocation["did_documents"] = documents
        body["revocation"] = revocation
        return body

    def _did_documents(self, rec: Record, tree: str) -> list[dict[str, Any]]:
        """The stored DID documents the record's signatures were checked with, each with
        its Git path in the record's tree: a verifier checks the signatures offline."""
        out = []
        for did in sorted(dids_to_resolve(rec.body)):
            for path in self.index.did_documents.paths(did):
                data = self.repo.read(tree, path)
                if data is not None:
                    out.append({"path": path, "document": json.loads(data),
                                "git_path": [b64enc(t) for t in self.repo.tree_path(tree, path)]})
        return out

    def _finish(self, epoch: Epoch, key: str, body: dict[str, Any]) -> Produced:
        signed = sign_object(body, self.seed)
        data = json.dumps(signed, separators=(",", ":"), sort_keys=True).encode()
        return Produced(signed, data, '"' + sha256(data).hex()[:32] + '"')
