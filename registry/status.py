"""Revocation status, OCSP style (OAP-CORE-1.0 §22.1, docs/architecture.md §6.1): epochs and signed responses.

A status id is one of
- a DID or did:key (revoked by `did` / `key` revocations, or — `superseded` — by the
  rotation that retired the key; suspended while its principal is, §5.3),
- a conformance receipt id (revoked by a `conformance` revocation, or expired; revoked
  or suspended with its subject, the subject's deciding record and reason),
- `<principal DID>#<class>` for class in subscription_tokens, oauth_grants,
  trust_tokens, webhook_subscriptions: the tokens the principal issued before its first
  recovery (revoked for good by its kill switch, §22.3, with `reinstated_at` naming the
  recovery that opened the next token epoch; suspended while the principal is; `good`
  for a principal the registry knows, until then), and
  `<principal DID>#<class>@<recovery id>`: the tokens issued since that recovery (a
  `rotate` or `resume` key event of the principal), which the kill switches it recovered
  from do not revoke (`unknown` until that recovery takes effect),
- `vc <issuer DID> <credential id>` (a `vc` revocation by that issuer; asked as
  `GET /v1/status/<credential id>?issuer=<DID>`).

Per epoch the registry computes the standing of every id at `this_update`
(`registry.standing`), builds a sorted Merkle tree of the ids that are not plainly
good (`sortedtree`), signs an epoch statement with its root and anchors the
statement in the log as a `receipt` entry. A leaf is the JCS of one of

    revoked                {id, reason, record, revoked_at}
    revoked, reinstated    {id, reason, record, revoked_at, reinstated_at, reinstated_by}
    suspended              {id, reason, record, suspended_at}

(`record`, `reinstated_by`: `sha256:` of the records that decided it; a receipt whose level
does not hold is a revoked leaf whose reason is `witness_invalid`, `auditor_invalid`, `subject_invalid` or
`witness_unqualified`). Responses are
produced from the epoch: `revoked` carries a `revocation` block and `suspended` a
`suspension` block, each with the deciding record, the Git path from the anchored
commit tree down to it and that commit's .tlog-proof (the same evidence for the
rotation a retired or lost key is linked by, `linked_by`, and for the recovery,
`reinstated`, and for a conformance receipt that falls with its subject, the receipt
itself, `via`; for a receipt whose level does not hold, `signer` names the witness or
auditor that does not count, with its own standing when it signed, the deciding record is
that signer's, and `via` the receipt with its raw Git commit, whose time bounds the
signing); `good` (the id is named by some record) and `unknown` (it is not)
carry the non-membership proof. Each response is signed by the registry key;
`registry.statusverify` checks one offline.

`next_update` is `this_update + epoch_seconds`, or earlier when a scheduled record
or a receipt expiry falls before that, so no response claims `good` past a change
the registry already knows about. A change the registry learns of later (a kill
switch committed now) is in a new epoch within seconds, not at `next_update`: the
statement names the push stream (`push`, Server-Sent Events) that delivers it.
"""
from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tlog.formats.canonical import jcs
from tlog.formats.did import did_key_from_public
from tlog.formats.diddoc import dids_to_resolve
from tlog.formats.encoding import b64enc
from tlog.formats.hashing import format_sha256, sha256
from tlog.formats.keys import Ed25519Key, ed25519_signer
from tlog.formats.times import format_utc

from .index import CommitInfo, Index
from .layout import anchor_path, receipt_proof_path
from .sortedtree import Leaf, SortedTree
from .standing import RECOVERY_EVENTS, Rec, Standing, next_change, standings, token_epochs, token_id, whole_lists
from .store import RegistryRepo

STATEMENT_TYPE = "oap-status-epoch"
RESPONSE_TYPE = "oap-status-response"
PUSH_PATH = "/v1/status-events"
CAVEAT = ("an answer holds as of this_update: a kill switch, revocation or suspension committed later is in a new "
          "epoch within seconds, yet a cached answer may be used until next_update; to learn of it within seconds, "
          "subscribe to push (?id=<status id>) or fetch again with Cache-Control: no-cache")
"""The documented caveat each epoch statement carries (docs/architecture.md §6.1)."""
MAX_PREPRODUCED = 20_000
"""Responses signed ahead per epoch (ids with a standing first, then known ids); the
rest are produced on first request and cached for the epoch (LRU)."""
MAX_ON_DEMAND = 20_000


def leaf_body(s: Standing) -> dict[str, Any]:
    """The leaf of an id that is not plainly good; its keys say which verdict it is."""
    out: dict[str, Any] = {"id": s.key, "reason": s.reason, "record": format_sha256(sha256(s.record.content))}
    if s.status == "suspended":
        out["suspended_at"] = format_utc(s.since)
        return out
    out["revoked_at"] = format_utc(s.since)
    if s.reinstated_at is not None and s.reinstated_by is not None:
        out["reinstated_at"] = format_utc(s.reinstated_at)
        out["reinstated_by"] = format_sha256(sha256(s.reinstated_by.content))
    return out


def leaf_bytes(s: Standing) -> bytes:
    return jcs(leaf_body(s))


def build_tree(found: dict[str, Standing]) -> SortedTree:
    return SortedTree([Leaf(k, leaf_bytes(s)) for k, s in found.items()])


def sign_object(obj: dict[str, Any], seed: Ed25519Key) -> dict[str, Any]:
    body = {k: v for k, v in obj.items() if k != "signature"}
    return {**body, "signature": b64enc(ed25519_signer(seed).sign(jcs(body)))}


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
    standing: dict[str, Standing]  # every id that is not plainly good
    anchor: str = ""
    responses: dict[str, Produced] = field(default_factory=dict)
    on_demand: OrderedDict = field(default_factory=OrderedDict)
    known: frozenset[str] = frozenset()  # ids named by some record at this epoch: good, not unknown
    located: dict[str, CommitInfo] = field(default_factory=dict)  # record path -> commit that added it
    lists: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    list_cache: dict[tuple[str, int, str, str], Produced] = field(default_factory=dict)
    fills: dict[str, frozenset[str]] = field(default_factory=dict)  # issuer -> its wholly set lists
    epochs: dict[str, frozenset[str]] = field(default_factory=dict)  # principal -> ids of its token epochs in force

    @property
    def statement_hash(self) -> bytes:
        return sha256(jcs(self.statement))

    @property
    def statement_id(self) -> str:
        return f"urn:oap:status-epoch:{self.number}"

    def whole_lists(self, issuer: str) -> frozenset[str]:
        """The issuer's status lists with every bit set (docs/architecture.md §6.1): `revocation`
        once it is revoked for any reason but `superseded`, `suspension` while it is suspended
        (`registry.standing.whole_lists`, computed per epoch in `prepare`)."""
        return self.fills.get(issuer, frozenset())


class StatusProducer:
    """Builds epochs and responses.

    `prepare` reads the index (call it where the index is updated: the event
    loop); it snapshots all an epoch needs, so `preproduce`, which reads Git
    and signs, can run in the writer thread while commits go on; `produce`
    (ids plainly good or unknown) touches neither.
    """

    def __init__(self, seed: Ed25519Key, repo: RegistryRepo, index: Index, anchors_dir: Path, *,
                 history: str = "") -> None:
        self.seed = seed
        self.registry = did_key_from_public(ed25519_signer(seed).public)
        self.history = history or self.registry  # whose commits these are: a mirror answers for its upstream
        self.repo, self.index, self.anchors_dir = repo, index, anchors_dir

    def prepare(self, number: int, at: datetime, period: timedelta) -> Epoch:
        head = self.index.head
        if head is None:
            raise ValueError("no registry history yet")
        found = standings(self.index, at)
        tree = build_tree(found)
        nxt = at + period
        change = next_change(self.index, at)
        if change is not None and change < nxt:
            nxt = max(change, at + timedelta(seconds=1))
        statement = sign_object({
            "type": STATEMENT_TYPE, "registry": self.registry, "epoch": number,
            "this_update": format_utc(at), "next_update": format_utc(nxt),
            "registry_seq": head.seq, "registry_commit": head.commit,
            "revoked_size": tree.size, "revoked_root": format_sha256(tree.root),
            "history": self.history, "push": PUSH_PATH, "caveat": CAVEAT,
        }, self.seed)
        epoch = Epoch(number, at, nxt, head, statement, tree, found, known=self.index.snapshot_known())
        for key, s in found.items():
            for rec in s.records():
                epoch.located[rec.path] = self.index.commits[self.index.seq_of[rec.path]]
            if key.startswith("did:") and "#" not in key:  # an issuer with a standing: its lists may be filled
                fill = whole_lists(self.index, key, at)
                if fill:
                    epoch.fills[key] = fill
        epochs: dict[str, set[str]] = {}
        for rec in self.index.all_records():
            if rec.type == "revocation" and rec.kind == "vc" and rec.issuer_list and rec.effective_at <= at:
                lst, idx = rec.issuer_list
                epoch.lists.setdefault((rec.issued_by, lst), []).append(idx)
            elif rec.type == "key_event" and rec.body["event"] in RECOVERY_EVENTS and rec.effective_at <= at:
                epochs.setdefault(rec.subject, set())
        # a token epoch is opened by a recovery that counts: a void one has no effect (`unknown`)
        epoch.epochs = {p: frozenset(e.id for e in token_epochs(self.index, p, at)) for p in epochs}
        return epoch

    @staticmethod
    def known(epoch: Epoch, key: str) -> bool:
        """Whether a record names `key` at this epoch (`good` rather than `unknown` when it has no
        standing): an id a record names; a token class of a principal the registry knows; a token
        epoch whose recovery is in force."""
        if key in epoch.known:
            return True
        tc = token_id(key)
        if tc is None or tc[0] not in epoch.known:
            return False
        return tc[2] is None or tc[2] in epoch.epochs.get(tc[0], frozenset())

    def preproduce(self, epoch: Epoch, limit: int = MAX_PREPRODUCED) -> None:
        """Sign the responses of the ids the registry knows, those with a standing first (reads Git)."""
        for key in epoch.standing:
            if len(epoch.responses) >= limit:
                return
            epoch.responses[key] = self.produce_standing(epoch, key)
        for key in epoch.known:
            if len(epoch.responses) >= limit:
                return
            if key and key not in epoch.responses:
                epoch.responses[key] = self.produce(epoch, key)

    def produce_standing(self, epoch: Epoch, key: str) -> Produced:
        """A `revoked` or `suspended` response (reads Git: call from the writer thread)."""
        s = epoch.standing[key]
        body = self._base(epoch, key, s.status)
        body["proof"] = epoch.tree.membership(key)
        block = self._evidence(epoch, s.record)
        if s.linked_by is not None:
            block["linked_by"] = self._evidence(epoch, s.linked_by)
        if s.via is not None:  # the receipt: it names the subject whose standing it shares, or the signer
            block["via"] = self._evidence(epoch, s.via, with_commit=s.signer is not None)
        if s.signer is not None:  # a receipt whose level does not hold: the signer that does not count
            block["signer"] = {"id": s.signer}
            if s.signer_standing is not None:  # ... and its own standing then (the deciding record's)
                block["signer"] |= {"status": s.signer_standing.status, "since": format_utc(s.signer_standing.since),
                                    "reason": s.signer_standing.reason}
                if s.signer_standing.key != s.signer:  # its DID stood; the key it signed with did not (§28.5)
                    block["signer"]["key"] = s.signer_standing.key
        if s.status == "suspended":
            body["suspension"] = {"suspended_at": format_utc(s.since), "reason": s.reason, **block}
        else:
            if s.reinstated_at is not None and s.reinstated_by is not None:
                block["reinstated"] = {"reinstated_at": format_utc(s.reinstated_at),
                                       **self._evidence(epoch, s.reinstated_by)}
            body["revocation"] = {"revoked_at": format_utc(s.since), "reason": s.reason, **block}
        return self._finish(epoch, key, body)

    def cached(self, epoch: Epoch, key: str) -> Produced | None:
        return epoch.responses.get(key) or epoch.on_demand.get(key)

    def remember(self, epoch: Epoch, key: str, got: Produced) -> None:
        epoch.on_demand[key] = got
        if len(epoch.on_demand) > MAX_ON_DEMAND:
            epoch.on_demand.popitem(last=False)

    def produce(self, epoch: Epoch, key: str) -> Produced:
        """A `good` or `unknown` response (no Git access)."""
        if key in epoch.standing:
            raise KeyError(f"{key} has a standing: use produce_standing")
        status = "good" if self.known(epoch, key) else "unknown"
        body = self._base(epoch, key, status)
        body["proof"] = epoch.tree.absence(key)
        return self._finish(epoch, key, body)

    def _base(self, epoch: Epoch, key: str, status: str) -> dict[str, Any]:
        return {"type": RESPONSE_TYPE, "id": key, "status": status,
                "this_update": format_utc(epoch.this_update), "next_update": format_utc(epoch.next_update),
                "epoch": epoch.statement, "epoch_anchor": epoch.anchor}

    def _evidence(self, epoch: Epoch, rec: Rec, *, with_commit: bool = False) -> dict[str, Any]:
        """A record with what proves it is in the registry: the Git path from its anchored
        commit's tree, that commit's .tlog-proof, the kill switch receipt's anchor and the
        DID documents its signature was checked with. `with_commit`: the raw Git commit too,
        whose committer time (bound to the anchored commit id) is the latest time the record
        can have been signed."""
        commit = epoch.located[rec.path]
        out: dict[str, Any] = {
            "record": rec.body, "path": rec.path, "seq": commit.seq, "commit": commit.commit, "tree": commit.tree,
            "git_path": [b64enc(t) for t in self.repo.tree_path(commit.tree, rec.path)],
            "anchor": (self.anchors_dir / Path(anchor_path(commit.seq, self.index.several_logs)).name).read_text(),
        }
        if with_commit:
            out["commit_object"] = b64enc(self.repo.commit(commit.commit).as_raw_string())
        if rec.type == "kill_switch":
            proof = self.repo.read(commit.tree, receipt_proof_path(rec.path, self.index.several_logs))
            out["receipt_anchor"] = proof.decode() if proof else ""
        documents = self._did_documents(rec, commit.tree)
        if documents:
            out["did_documents"] = documents
        return out

    def _did_documents(self, rec: Rec, tree: str) -> list[dict[str, Any]]:
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
