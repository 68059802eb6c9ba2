"""Replaying registry history commit by commit, with or without full verification.

`Replayer.apply(commit)` adds one commit (the next `seq`) to an `Index`. In
strict mode — mirrors, rebuilds and `oap-registry verify` — it checks what
docs/architecture.md §6 promises about every commit, in this order:

1. linear history: one parent (none for commit 0), commit times never go
   backwards and are not in the future;
2. add-only: compared with its parent the commit only adds plain files; it
   never modifies or deletes one (`RegistryRepo.added`);
3. layout: every added path is a registry path and is listed in the commit
   message, in the order the registry validated it;
4. commit 0 holds exactly `registry.json` (registry key, logs and k, bootstrap
   witnesses); the registry key must match the one pinned by the caller;
5. commit n >= 1 holds the log anchor of commit n-1, and it verifies: a
   `registry` entry for exactly that commit and tree, signed by the registry
   key, included in checkpoints of k of the pinned logs (`anchoring`; k is the
   genesis's, or the caller's policy's `logs <k>` when that is more);
6. every record passes `records.check_record` and `records.check_rules`
   against the registry as it was, with `now` = the commit time — the same
   checks the registry ran when it accepted the record;
7. kill switch records come with their receipt's log anchor;
8. a key rotation (`key-rotations/<n>.json`, `keyrotation`) is the next in order, hands over
   from the key in force, is signed by it and countersigned by the new key, and comes alone
   (with the anchor of the commit before it). Anchors of commits up to the one before are
   checked against the old key, the rotation commit's and later ones against the new key.

Non-strict mode (a registry loading its own repository) parses records and
checks their signatures only. Failures raise `HistoryError` carrying the commit.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from tlog.client.verifier import TrustPolicy
from tlog.errors import InvalidInput, OAPError, VerificationError
from tlog.formats.canonical import jcs
from tlog.formats.conformance import MAX_CLOCK_SKEW
from tlog.formats.diddoc import keys_from_document
from tlog.formats.hashing import sha256
from tlog.formats.strict import loads_json
from tlog.storage.durable import write_atomic

from .anchoring import Genesis, parse_genesis, verify_commit_anchor, verify_receipt_anchor
from .index import CommitInfo, Index, Layered
from .keyrotation import KeyChain, parse_rotation
from .layout import GENESIS, PROOF_EXT, PathInfo, anchor_path, classify, id_hash, receipt_proof_path, rotation_path
from .records import Record, check_record, check_rules
from .store import RegistryRepo, message_paths


class HistoryError(VerificationError):
    """A commit breaks a registry rule; `reason` is a short machine-readable word."""

    def __init__(self, message: str, *, reason: str, commit: str, seq: int) -> None:
        super().__init__(message, reason=reason, commit=commit, seq=seq)
        self.reason, self.commit, self.seq = reason, commit, seq


def _utc(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


class Replayer:
    def __init__(self, repo: RegistryRepo, index: Index, *, strict: bool, registry: str | None = None,
                 policy: TrustPolicy | None = None, anchors_dir: Path | None = None) -> None:
        self.repo, self.index, self.strict = repo, index, strict
        self.registry = registry  # pinned registry key (did:key); None: take it from registry.json
        self.policy = policy
        self.anchors_dir = anchors_dir
        self.genesis: Genesis | None = None
        self.tofu_log = False  # True when the log keys came from registry.json itself
        self.several = index.several_logs  # the genesis names several logs: anchors are anchors files

    @property
    def key(self) -> str:
        """The key in force after the last commit applied: it signs the next anchors."""
        return self.index.keys.current if self.index.keys is not None else self.registry or ""

    def _fail(self, reason: str, message: str, cid: str, seq: int) -> HistoryError:
        return HistoryError(f"commit {seq} ({cid[:12]}): {message}", reason=reason, commit=cid, seq=seq)

    def apply(self, cid: str) -> list[Record]:
        seq = len(self.index.commits)
        try:
            return self._apply(cid, seq)
        except HistoryError:
            raise
        except OAPError as e:
            reason = "rewrite" if e.data.get("rewritten") else "bad_record"
            raise self._fail(reason, e.message, cid, seq) from None

    def _apply(self, cid: str, seq: int) -> list[Record]:
        c = self.repo.commit(cid)
        prev = self.index.head
        parents = [p.decode() for p in c.parents]
        if parents != ([prev.commit] if prev else []):
            raise self._fail("not_linear", f"parents {parents} do not continue the history", cid, seq)
        tree = c.tree.decode()
        if self.strict:
            if prev is not None and c.commit_time < prev.time:
                raise self._fail("bad_time", "commit time goes backwards", cid, seq)
            if c.commit_time > time.time() + MAX_CLOCK_SKEW.total_seconds():
                raise self._fail("bad_time", "commit time is in the future", cid, seq)
        try:
            added = self.repo.added(prev.tree if prev else None, tree)
        except OAPError as e:
            raise self._fail("not_add_only", e.message, cid, seq) from None
        files = {a.path: a.blob for a in added}
        listed = message_paths(c.message)
        if self.strict and (sorted(listed) != sorted(files) or len(set(listed)) != len(listed)):
            raise self._fail("bad_layout", "commit message does not list exactly the added paths", cid, seq)
        order = listed if sorted(listed) == sorted(files) else sorted(files)
        infos = {}
        for path in order:
            try:
                infos[path] = classify(path)
            except OAPError as e:
                raise self._fail("bad_layout", e.message, cid, seq) from None
        if seq == 0:
            self._genesis(files, cid)
        elif GENESIS in files:
            raise self._fail("bad_layout", "registry.json may only be added by commit 0", cid, seq)
        anchors = [p for p in order if infos[p].what == "anchor"]
        if seq > 0 and self.strict and [infos[p].seq for p in anchors] != [seq - 1]:
            raise self._fail("missing_anchor", f"must add exactly the anchor of commit {seq - 1}", cid, seq)
        if self.strict and any(infos[p].several != self.several for p in order if infos[p].what in
                               ("anchor", "receipt_proof")):
            raise self._fail("bad_layout", f"this registry's anchors are {PROOF_EXT[self.several]} files", cid, seq)
        for p in anchors:
            a_seq = infos[p].seq
            assert a_seq is not None  # classify gives every anchor path its seq
            bundle = self.repo.blob(files[p])
            if self.strict:
                target = self.index.commits[a_seq] if a_seq < seq else None
                if target is None:
                    raise self._fail("bad_anchor", f"{p} anchors a commit that is not before it", cid, seq)
                verify_commit_anchor(bundle, commit=target.commit, tree=target.tree, seq=a_seq,
                                     registry=self.key, policy=self.policy)
            self.index.anchors_in_tree.add(a_seq)
            self._keep_anchor(a_seq, bundle)
        rotations = [p for p in order if infos[p].what == "key_rotation"]
        if rotations:
            self._rotation(rotations, order, files, infos, cid, seq)
        now = _utc(c.commit_time)
        for p in order:
            if infos[p].what == "did_document":
                self._did_document(p, infos[p], self.repo.blob(files[p]), cid, seq)
        batch = Index()
        state = Layered(self.index, batch)
        records: list[Record] = []
        lookup = self.index.did_documents.lookup
        for p in order:
            if infos[p].what != "record":
                continue
            data = self.repo.blob(files[p])
            try:
                rec = check_record(loads_json(data), now=now if self.strict else None, lookup=lookup)
            except OAPError as e:
                raise self._fail("bad_record", f"{p}: {e.message}", cid, seq) from None
            if rec.content != data or rec.path != p:
                raise self._fail("bad_record", f"{p}: not the canonical bytes or path of record {rec.id}", cid, seq)
            if self.strict and not check_rules(rec, state, now, policy=self.policy):
                raise self._fail("bad_record", f"{p}: record already present", cid, seq)
            if rec.type == "kill_switch":
                proof = receipt_proof_path(p, self.several)
                if proof not in files:
                    raise self._fail("missing_anchor", f"{p}: kill switch without its receipt anchor", cid, seq)
                if self.strict:
                    verify_receipt_anchor(self.repo.blob(files[proof]), receipt_hash=rec.hash, receipt_id=rec.id,
                                          registry=self.key, policy=self.policy)
            batch.add(rec, seq, now)
            records.append(rec)
        stray = [p for p in order if infos[p].what == "receipt_proof"
                 and p[: -len(PROOF_EXT[infos[p].several])] + ".json" not in files]
        if stray:
            raise self._fail("bad_layout", f"receipt proof without its record: {stray[0]}", cid, seq)
        for rec in records:
            self.index.add(rec, seq, now)
        self.index.add_commit(CommitInfo(seq, cid, tree, c.commit_time))
        return records

    def _rotation(self, paths: list[str], order: list[str], files: dict[str, str], infos: dict[str, PathInfo],
                  cid: str, seq: int) -> None:
        """A key rotation: alone in its commit (besides the previous commit's anchor), the next
        in order, handing over from the key in force; from here on the new key signs."""
        chain = self.index.keys or KeyChain(self.registry or "")
        if len(paths) != 1 or any(infos[p].what not in ("key_rotation", "anchor") for p in order):
            raise self._fail("bad_layout", "a key rotation comes alone in its commit", cid, seq)
        path = paths[0]
        if path != rotation_path(len(chain.rotations) + 1):
            raise self._fail("bad_rotation", f"{path}: expected key rotation {len(chain.rotations) + 1}", cid, seq)
        data = self.repo.blob(files[path])
        try:
            rotation = parse_rotation(data)
            if rotation.content != data:
                raise InvalidInput("not in canonical form")
            self.index.keys = chain.then(rotation, seq)
        except OAPError as e:
            raise self._fail("bad_rotation", f"{path}: {e.message}", cid, seq) from None

    def _did_document(self, path: str, info: PathInfo, data: bytes, cid: str, seq: int) -> None:
        """A DID document the registry stored: its path names its DID and content."""
        try:
            doc = loads_json(data)
            did = doc.get("id") if isinstance(doc, dict) else None
            if not isinstance(did, str) or id_hash(did) != info.hash or jcs(doc) != data \
                    or sha256(data).hex() != info.content_hash:
                raise InvalidInput("not the canonical document of the DID its path names")
            keys = keys_from_document(did, doc)
        except OAPError as e:
            raise self._fail("bad_layout", f"{path}: {e.message}", cid, seq) from None
        self.index.did_documents.add(did, info.content_hash or "", keys, path, doc)

    def _genesis(self, files: dict[str, str], cid: str) -> None:
        if set(files) != {GENESIS}:
            raise self._fail("bad_layout", "commit 0 must add exactly registry.json", cid, 0)
        g = parse_genesis(self.repo.blob(files[GENESIS]))
        if self.registry is not None and g.registry != self.registry:
            raise self._fail("wrong_registry", f"registry key is {g.registry}, expected {self.registry}", cid, 0)
        self.registry = g.registry
        self.genesis = g
        self.index.keys = KeyChain(g.registry)
        self.several = self.index.several_logs = g.several
        self.index.bootstrap_witnesses = frozenset(g.bootstrap_witnesses)
        if self.strict:
            self.tofu_log = self.policy is None
            try:
                self.policy = g.pinned(self.policy)
            except OAPError as e:
                raise self._fail("bad_anchor", e.message, cid, 0) from None

    def verify_head_anchor(self, bundle: str | bytes) -> None:
        head = self.index.head
        if head is None:
            raise VerificationError("empty registry has no head to anchor")
        verify_commit_anchor(bundle, commit=head.commit, tree=head.tree, seq=head.seq,
                             registry=self.key, policy=self.policy)
        self._keep_anchor(head.seq, bundle.encode() if isinstance(bundle, str) else bundle)

    def _keep_anchor(self, seq: int, bundle: bytes) -> None:
        """Every anchor is also kept as a file, so services serve them without reading Git.

        Replaced when verifying: a sync that was refused may have left the anchor
        of a commit at this seq that never became part of `main`."""
        if self.anchors_dir is None:
            return
        path = self.anchors_dir / Path(anchor_path(seq, self.several)).name
        if not self.strict and path.exists():
            return  # a registry loading its own history: the file is the one it wrote
        self.anchors_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(path, bundle)  # served as immutable: must never be torn or empty


def replay(repo: RegistryRepo, index: Index, head: str | None, replayer: Replayer,
           progress: Callable[[int], object] | None = None) -> None:
    """Apply every commit from the index's head (exclusive) to `head`."""
    if head is None:
        return
    start = index.head.commit if index.head else None
    for cid in repo.chain(head, start):
        replayer.apply(cid)
        if progress is not None:
            progress(1)
