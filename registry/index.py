"""The registry's state in memory: every record by path, id and subject.

Built from the Git history at start (and by mirrors while they verify), then
updated per commit. It implements `records.RegistryState`; `Layered` stacks the
records of a batch being validated on top of the committed index, so the
committed index never shows a record before its commit is anchored and the
ref has moved.
"""
from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import chain
from typing import Any

from tlog.errors import InvalidInput
from tlog.formats.diddoc import VerificationKey

from .keyrotation import KeyChain
from .records import Record


class DidDocuments:
    """The DID documents a registry stored beside the records they signed: every
    version, by DID. A record is checked against the keys of all versions stored up
    to its commit, as the registry checked it against the version it fetched."""

    def __init__(self) -> None:
        self._keys: dict[str, dict[str, tuple[VerificationKey, ...]]] = defaultdict(dict)
        self._docs: dict[str, list[object]] = defaultdict(list)
        self._paths: dict[str, list[str]] = defaultdict(list)

    def add(self, did: str, content_hash: str, keys: tuple[VerificationKey, ...], path: str,
            document: object = None) -> None:
        if content_hash not in self._keys[did]:
            self._keys[did][content_hash] = keys
            self._paths[did].append(path)
            if document is not None:
                self._docs[did].append(document)

    def documents(self, did: str) -> list[object]:
        """Every stored version of `did`'s document (the independence rules read them whole)."""
        return list(self._docs.get(did, ()))

    def paths(self, did: str) -> list[str]:
        """Where the stored versions of `did`'s document are, oldest first."""
        return list(self._paths.get(did, ()))

    def has(self, did: str, content_hash: str) -> bool:
        return content_hash in self._keys.get(did, {})

    def lookup(self, did: str) -> list[VerificationKey]:
        versions = self._keys.get(did)
        if not versions:
            raise InvalidInput(f"no DID document of {did} is stored in this registry")
        return [k for keys in versions.values() for k in keys]


@dataclass(frozen=True)
class CommitInfo:
    seq: int
    commit: str  # 40 hex
    tree: str
    time: int  # commit time, Unix seconds (the `now` its records were checked at)


class Index:
    def __init__(self, bootstrap_witnesses: Iterable[str] = ()) -> None:
        self.bootstrap_witnesses = frozenset(bootstrap_witnesses)
        self.records: dict[str, Record] = {}
        self.seq_of: dict[str, int] = {}
        self.by_id: dict[str, str] = {}
        self.order: list[str] = []  # record paths in commit order (stable: the registry is add-only)
        self.known: set[str] = set()
        self.commits: list[CommitInfo] = []
        self.anchors_in_tree: set[int] = set()
        self.several_logs = False  # the genesis names several logs: anchors are anchors files (layout)
        self.keys: KeyChain | None = None  # the registry's keys: genesis key and rotations (`keyrotation`)
        self.did_documents = DidDocuments()
        self._receipts: dict[str, list[Record]] = defaultdict(list)
        self._revocations: dict[str, list[Record]] = defaultdict(list)
        self._key_events: dict[str, list[Record]] = defaultdict(list)
        self._naming: dict[str, list[Record]] = defaultdict(list)  # key -> key events naming it as `key`
        self._pos: dict[str, int] = {}  # record path -> place in commit order
        self._committed: dict[str, datetime] = {}  # record path -> its commit time (the `now` it was checked at)
        self._about: dict[str, list[str]] = defaultdict(list)  # DID or id -> record paths
        self.per_commit: dict[int, int] = defaultdict(int)  # seq -> records it added
        self._lock = threading.Lock()  # `add` may run in a mirror's sync thread while the loop reads
        self.generation = 0  # moves on every change: what `memo` holds is for one generation
        self._memo: dict[Any, Any] = {}
        self._memo_generation = 0

    # --- RegistryState -------------------------------------------------------------

    def content(self, path: str) -> bytes | None:
        rec = self.records.get(path)
        return rec.content if rec is not None else None

    def conformance(self, receipt_id: str) -> Record | None:
        path = self.by_id.get(receipt_id)
        rec = self.records.get(path) if path else None
        return rec if rec is not None and rec.type == "conformance" else None

    def receipts_of(self, did: str) -> list[Record]:
        return self._receipts.get(did, [])

    def revocations_of(self, status_key: str) -> list[Record]:
        return self._revocations.get(status_key, [])

    def key_events_of(self, subject: str) -> list[Record]:
        return self._key_events.get(subject, [])

    def did_documents_of(self, did: str) -> list[object]:
        return self.did_documents.documents(did)

    def key_events_naming(self, key: str) -> list[Record]:
        return self._naming.get(key, [])

    def position(self, path: str) -> int:
        return self._pos[path]

    def memo(self) -> dict[Any, Any]:
        """A cache for what `registry.standing` derives from this index, valid while nothing
        is added (an epoch asks for one principal's key events many times)."""
        if self._memo_generation != self.generation:
            self._memo, self._memo_generation = {}, self.generation
        return self._memo

    def committed_at(self, path: str) -> datetime | None:
        """The commit time of the record at `path` (its commit's log anchor proves it existed
        by then); None when unknown (an index fed without commit times)."""
        got = self._committed.get(path)
        if got is not None:
            return got
        seq = self.seq_of.get(path)
        if seq is not None and 0 <= seq < len(self.commits):
            return datetime.fromtimestamp(self.commits[seq].time, UTC)
        return None

    # --- updates ---------------------------------------------------------------------

    def add(self, rec: Record, seq: int, committed: datetime | None = None) -> None:
        """`committed`: the commit time the record was checked at (a batch being validated
        passes the time it will be committed at, before its commit exists)."""
        with self._lock:
            self._add(rec, seq)
            if committed is not None:
                self._committed.setdefault(rec.path, committed)
            self.generation += 1

    def snapshot_known(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self.known)

    def _add(self, rec: Record, seq: int) -> None:
        if rec.path in self.records:
            return
        self.records[rec.path] = rec
        self.seq_of[rec.path] = seq
        self.per_commit[seq] += 1
        self.by_id[rec.id] = rec.path
        self._pos[rec.path] = len(self.order)
        self.order.append(rec.path)
        if rec.type == "conformance":
            self._receipts[rec.subject].append(rec)
            self.known.update((rec.id, rec.subject, *rec.witnesses))
        elif rec.type == "key_event":
            self._key_events[rec.subject].append(rec)
            if rec.key is not None:
                self._naming[rec.key].append(rec)
            self.known.update((rec.subject, rec.key or "", rec.issued_by))
        else:
            for key in rec.status_keys():
                self._revocations[key].append(rec)
            # a vc revocation's subject is a bare credential id: its status is the issuer-scoped key
            # alone, so the bare id must never answer `good` (it is refused without ?issuer=)
            self.known.update((*rec.status_keys(), rec.issued_by, *(() if rec.kind == "vc" else (rec.subject,))))
        about = {rec.id, rec.subject, rec.issued_by, *rec.witnesses}
        if rec.key is not None:
            about.add(rec.key)
        for who in about:  # each once: the order of the lists is the order of the records
            self._about[who].append(rec.path)

    def add_commit(self, info: CommitInfo) -> None:
        if info.seq != len(self.commits):
            raise ValueError(f"commit seq {info.seq} does not follow {len(self.commits) - 1}")
        self.commits.append(info)
        self.generation += 1  # commit times of records added without one come from here

    def copy(self) -> Index:
        """An independent copy: a mirror verifies new commits into a copy and swaps
        it in only when every commit passed, so readers never see unverified records."""
        with self._lock:
            out = Index(self.bootstrap_witnesses)
            out.records, out.seq_of, out.by_id = dict(self.records), dict(self.seq_of), dict(self.by_id)
            out.order, out.known, out.commits = list(self.order), set(self.known), list(self.commits)
            out._pos = dict(self._pos)
            out._committed = dict(self._committed)
            out.anchors_in_tree = set(self.anchors_in_tree)
            out.several_logs, out.keys = self.several_logs, self.keys
            out.per_commit.update(self.per_commit)
            for mine, theirs in ((out._receipts, self._receipts), (out._revocations, self._revocations),
                                 (out._key_events, self._key_events), (out._naming, self._naming)):
                mine.update({k: list(v) for k, v in theirs.items()})
            out._about.update({k: list(v) for k, v in self._about.items()})
            return out

    # --- queries ---------------------------------------------------------------------

    @property
    def head(self) -> CommitInfo | None:
        return self.commits[-1] if self.commits else None

    def head_unproven(self) -> bool:
        """The head adds content (genesis or records) and its anchor is not yet in the tree.

        Anchor-only commits are not followed by another anchor-only commit, or
        an idle registry would commit forever."""
        head = self.head
        return head is not None and head.seq not in self.anchors_in_tree and \
            (head.seq == 0 or self.per_commit.get(head.seq, 0) > 0)

    def about(self, who: str) -> list[Record]:
        return [self.records[p] for p in self._about.get(who, [])]

    def all_records(self) -> Iterator[Record]:
        return (self.records[p] for p in self.order)


class Layered:
    """A batch (`top`) over the committed index (`base`), read as one registry."""

    def __init__(self, base: Index, top: Index) -> None:
        self.base, self.top = base, top
        self.bootstrap_witnesses = base.bootstrap_witnesses
        self._memo: dict[Any, Any] = {}
        self._memo_generation: tuple[int, int] | None = None

    def content(self, path: str) -> bytes | None:
        got = self.top.content(path)
        return got if got is not None else self.base.content(path)

    def conformance(self, receipt_id: str) -> Record | None:
        return self.top.conformance(receipt_id) or self.base.conformance(receipt_id)

    def receipts_of(self, did: str) -> Iterable[Record]:
        return chain(self.base.receipts_of(did), self.top.receipts_of(did))

    def revocations_of(self, status_key: str) -> Iterable[Record]:
        return chain(self.base.revocations_of(status_key), self.top.revocations_of(status_key))

    def key_events_of(self, subject: str) -> Iterable[Record]:
        return chain(self.base.key_events_of(subject), self.top.key_events_of(subject))

    def did_documents_of(self, did: str) -> Iterable[object]:
        return self.base.did_documents_of(did)  # a batch's documents come with each submission

    def key_events_naming(self, key: str) -> Iterable[Record]:
        return chain(self.base.key_events_naming(key), self.top.key_events_naming(key))

    def committed_at(self, path: str) -> datetime | None:
        if path in self.base.records:
            return self.base.committed_at(path)
        return self.top.committed_at(path)

    def memo(self) -> dict[Any, Any]:
        """`Index.memo` for the two together: valid while neither changes."""
        generation = (self.base.generation, self.top.generation)
        if self._memo_generation != generation:
            self._memo, self._memo_generation = {}, generation
        return self._memo

    def position(self, path: str) -> int:
        """The batch comes after everything committed."""
        if path in self.base.records:
            return self.base.position(path)
        return len(self.base.order) + self.top.position(path)
