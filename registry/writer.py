"""The registry writer: validate a batch, commit it, anchor it, then publish it.

One writer owns `refs/heads/main` (a lock file in the data directory keeps a
second process out). A batch goes through these steps, and a submission is
acknowledged only after the last one:

1. validate every record in arrival order against the committed registry
   plus the batch so far (`records.validate_submission`, `now` = the commit
   time, exactly what a mirror will re-check);
2. anchor kill switch invocations in the log as receipts;
3. write one commit adding the records (+ the previous head's anchor) — Git
   objects only, no ref moves yet;
4. write `pending.json` (fsync), then anchor the commit in the log;
5. move `refs/heads/main` by compare-and-swap, drop `pending.json`.

Anchoring means: in k of the registry's logs (`registry.anchorer`); a log that
missed a published commit is put on the backlog and caught up later (`catch_up`).

Crash safety: after a crash between 4 and 5 the next start (or batch)
re-anchors the *same* commit — Ed25519 is deterministic, so the log sees the
identical entry and returns its index — and publishes it. The registry never
anchors two different commits with one seq. A failed CAS means someone moved
the ref behind the writer's back; the writer then refuses all writes (503)
until an operator looks, rather than guess which history is right.
"""
from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, TypeVarTuple

from tlog.errors import Conflict, OAPError, Unavailable, UpstreamError
from tlog.formats.canonical import jcs
from tlog.formats.diddoc import keys_from_document, lookup_from
from tlog.formats.hashing import sha256
from tlog.formats.strict import loads_json
from tlog.storage.durable import write_atomic

from .anchorer import Anchorer, Anchors, Backlog, merge
from .history import Replayer
from .index import CommitInfo, Index, Layered
from .keyrotation import Rotation
from .layout import GENESIS, anchor_path, did_document_path, receipt_proof_path, rotation_path
from .records import Record, validate_submission
from .store import MAIN, ReadGate, RegistryRepo

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

log = logging.getLogger("oap.registry.writer")


def commit_seconds() -> int:
    """A commit's time, whole seconds as Git stores them, rounded up from the clock: never
    before its records arrived (docs/architecture.md §6.1)."""
    return math.ceil(time.time())


@dataclass(frozen=True)
class Accepted:
    record: Record
    fresh: bool  # False: the identical record was already there
    seq: int
    commit: str
    anchor: str  # the commit's anchor(s) (or "" for an old duplicate: see GET /v1/anchors/<seq>)
    receipt_anchor: str | None = None  # kill switch: the receipt's anchor(s)


@dataclass
class Item:
    doc: object
    future: asyncio.Future
    documents: dict[str, Any] = field(default_factory=dict)  # DID -> document, resolved for this submission


write_durably = write_atomic  # the project's one durable-write helper (tlog.storage.durable)


class RegistryWriter:
    def __init__(self, repo: RegistryRepo, index: Index, anchorer: Anchorer, data_dir: Path,
                 executor: ThreadPoolExecutor, replayer: Replayer, *, strict_l4: bool = False,
                 policy: Any = None, before_publish: Callable[[], Awaitable[None]] | None = None) -> None:
        """`before_publish`: a test hook awaited after a batch is anchored, before the ref's
        compare-and-swap (None in production)."""
        self.repo, self.index, self.anchorer = repo, index, anchorer
        self.several = anchorer.several  # anchors are anchors files (several logs), not single tlog-proofs
        self.strict_l4 = strict_l4  # the l4_witnesses_hold_level setting
        self.policy = policy  # the log trust policy audit attestation anchors are checked with
        self.data_dir = data_dir
        self.anchors_dir = data_dir / "anchors"
        self.anchors_dir.mkdir(parents=True, exist_ok=True)
        self.backlog = anchorer.backlog or Backlog(self.anchors_dir / "backlog.json")
        anchorer.backlog = self.backlog
        self.executor = executor
        self.replayer = replayer
        self.broken: str | None = None
        self.before_publish = before_publish
        self.on_commit: Callable[[CommitInfo, list[Record]], None] | None = None
        self.gate: ReadGate | None = None  # set by the service: compaction keeps Git readers out
        self.max_packs = 64

    async def in_thread(self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    @property
    def pending_path(self) -> Path:
        return self.data_dir / "pending.json"

    def anchor_file(self, seq: int) -> Path:
        return self.anchors_dir / Path(anchor_path(seq, self.several)).name

    def anchor_text(self, seq: int) -> str | None:
        try:
            return self.anchor_file(seq).read_text()
        except FileNotFoundError:
            return None

    def _keep_anchor(self, seq: int, bundle: str) -> None:
        write_durably(self.anchor_file(seq), bundle.encode())

    def _anchored(self, seq: int, anchors: Anchors) -> None:
        """Keep a commit's anchors, and put it on the backlog of the logs that lack it."""
        self._keep_anchor(seq, anchors.text)
        self.backlog.add(anchors.missing, seq)

    async def catch_up(self, batch: int = 256) -> int:
        """Anchor the published commits each log that was behind missed, oldest first, and add
        its proofs to their anchors (served at GET /v1/anchors/<seq>; the tree keeps the
        anchors a commit had when the next commit was made). Returns how many were caught up."""
        head = self.index.head
        caught = 0
        for origin in sorted(self.backlog.behind()):
            seqs = [s for s in self.backlog.pending(origin) if head is not None and s <= head.seq][:batch]
            if not seqs:
                continue
            commits = [(self.index.commits[s].commit, self.index.commits[s].tree, s) for s in seqs]
            try:
                bundles = await self.anchorer.commits_in(origin, commits)
            except Exception as e:  # noqa: BLE001 - still down: next round
                log.debug("log %s is still behind: %s", origin, e)
                continue
            for s, bundle in zip(seqs, bundles):
                text = self.anchor_text(s)
                if text is not None:
                    self._keep_anchor(s, merge(text, bundle))
            self.backlog.done(origin, seqs)
            caught += len(seqs)
            log.info("log %s caught up on %d commit(s) (seq %d..%d)", origin, len(seqs), seqs[0], seqs[-1])
        return caught

    # --- recovery -----------------------------------------------------------------

    async def recover(self) -> None:
        """Finish a commit that was anchored but not published; make sure the head has its anchor."""
        if self.pending_path.exists():
            p = json.loads(self.pending_path.read_text())
            head = self.repo.ref(MAIN)
            if head == p["parent"] and self.repo.has(p["commit"]):
                log.warning("publishing commit %s (seq %d) left pending by an interrupted batch", p["commit"], p["seq"])
                self._anchored(p["seq"], await self.anchorer.anchor_commit(p["commit"], p["tree"], p["seq"]))
                await self.in_thread(self.repo.cas, MAIN, p["parent"], p["commit"])
                records = await self.in_thread(self.replayer.apply, p["commit"])
                if self.on_commit is not None:
                    self.on_commit(self.index.commits[-1], records)
            elif head != p["commit"]:
                # The pending commit may already be anchored under this seq; anchoring another
                # commit with the same seq would give the log two commits for one seq. Stop.
                self.broken = (f"pending commit {p['commit']} (seq {p['seq']}) cannot be published: main is at "
                               f"{head}, not its parent, or the commit is missing; writes are stopped until an "
                               "operator checks the log's anchors (see ops/runbooks/registry-recovery.md)")
                log.error("%s", self.broken)
                return
            self.pending_path.unlink()
        last = self.index.head
        if last is not None and self.anchor_text(last.seq) is None:
            self._anchored(last.seq, await self.anchorer.anchor_commit(last.commit, last.tree, last.seq))

    async def create_genesis(self, content: bytes) -> None:
        """Commit 0: `registry.json` only, anchored like every other commit."""
        when = commit_seconds()
        cid, tree, _ = await self.in_thread(self.repo.build_commit, None, [(GENESIS, content)], "registry: genesis",
                                          when)
        write_durably(self.pending_path, json.dumps({"seq": 0, "commit": cid, "tree": tree, "parent": None}).encode())
        self._anchored(0, await self.anchorer.anchor_commit(cid, tree, 0))
        await self.in_thread(self.repo.cas, MAIN, None, cid)
        self.pending_path.unlink()
        await self.in_thread(self.replayer.apply, cid)
        if self.on_commit is not None:
            self.on_commit(self.index.commits[-1], [])

    async def commit_rotation(self, rotation: Rotation) -> None:
        """A key rotation: its statement alone (with the head's anchor, signed by the old key
        before the restart), anchored by the new key, the anchorer's (`keyrotation`)."""
        head = self.index.head
        text = self.anchor_text(head.seq) if head is not None else None
        if head is None or text is None:
            raise Unavailable("the anchor of the head commit is missing; a key rotation needs it")
        files = [] if head.seq in self.index.anchors_in_tree else [(anchor_path(head.seq, self.several), text.encode())]
        files.append((rotation_path(rotation.number), rotation.content))
        seq, when = head.seq + 1, max(int(time.time()), head.time)
        cid, tree, _ = await self.in_thread(self.repo.build_commit, head.commit, files,
                                          f"registry: seq {seq}, key rotation {rotation.number}", when)
        write_durably(self.pending_path, json.dumps(
            {"seq": seq, "commit": cid, "tree": tree, "parent": head.commit}).encode())
        self._anchored(seq, await self.anchorer.anchor_commit(cid, tree, seq))
        await self.in_thread(self.repo.cas, MAIN, head.commit, cid)
        self.pending_path.unlink()
        await self.in_thread(self.replayer.apply, cid)
        if self.on_commit is not None:
            self.on_commit(self.index.commits[-1], [])

    # --- one batch ------------------------------------------------------------------

    async def commit_batch(self, items: list[Item], *, anchor_only: bool = False) -> None:
        """Validate, commit, anchor and publish `items`; settle every future."""
        try:
            if self.broken:
                raise Unavailable(self.broken)
            await self.recover()
            await self._commit(items, anchor_only)
            await self.maybe_compact()
        except UpstreamError as e:  # the log cannot be reached: say so without naming its URL
            log.warning("registry batch not anchored: %s", e.message)
            self._fail_all(items, Unavailable("the registry cannot anchor in enough of its logs; nothing was "
                                              "committed", retry_after=1))
        except OAPError as e:
            self._fail_all(items, e)
        except Exception as e:  # network errors, disk errors: nothing was published
            log.exception("registry batch failed")
            self._fail_all(items, Unavailable(f"the registry could not commit: {type(e).__name__}", retry_after=1))

    async def maybe_compact(self) -> None:
        """One pack per batch adds up; fold them into one past `max_packs`."""
        if self.gate is None or await self.in_thread(self.repo.pack_count) <= self.max_packs:
            return
        async with self.gate.write():
            n = await self.in_thread(self.repo.compact)
        log.info("compacted the repository into one pack (%d objects)", n)

    @staticmethod
    def _fail_all(items: list[Item], err: OAPError) -> None:
        for it in items:
            if not it.future.done():
                it.future.set_exception(err)
                it.future.exception()  # the waiter may be gone

    async def _commit(self, items: list[Item], anchor_only: bool) -> None:
        # Rounded up: the commit time is the latest time its records can have been signed (a
        # compromise dated at or before it voids what the key signed); rounded down, a record
        # that arrived at 10.4 would be dated 10, and a compromise dated 10.2 would miss it.
        when = commit_seconds()
        now = datetime.fromtimestamp(when, UTC)
        head = self.index.head
        batch = Index()
        state = Layered(self.index, batch)
        accepted: list[tuple[Item, Record, bool]] = []
        # Every document resolved for the batch: a mirror replaying the commit sees those of
        # the records it holds, a subset, so it never finds a relation the writer missed.
        batch_documents = {did: doc for it in items for did, doc in it.documents.items()}
        for it in items:
            try:
                lookup = lookup_from(it.documents.items()) if it.documents else None
                rec, fresh = validate_submission(it.doc, state, now, lookup=lookup, strict_l4=self.strict_l4,
                                                 documents=batch_documents, policy=self.policy)
            except OAPError as e:
                self._fail_all([it], e)
                continue
            if fresh:
                batch.add(rec, -1, now)
            accepted.append((it, rec, fresh))
        fresh_recs = [rec for _, rec, fresh in accepted if fresh]
        documents = self._new_documents([it for it, _, fresh in accepted if fresh])
        if not fresh_recs and not anchor_only:
            for it, rec, _ in accepted:  # all duplicates of published records
                await self._resolve_duplicate(it, rec)
            return
        files: list[tuple[str, bytes]] = []
        if head is not None and head.seq not in self.index.anchors_in_tree:
            text = self.anchor_text(head.seq)
            if text is None:
                raise Unavailable("the anchor of the head commit is missing; restart to re-anchor it")
            files.append((anchor_path(head.seq, self.several), text.encode()))
        kills = [rec for rec in fresh_recs if rec.type == "kill_switch"]
        receipts: dict[str, str] = {}
        if kills:
            got = await self.anchorer.anchor_receipts([(r.hash, r.id) for r in kills])
            receipts = {r.path: a.text for r, a in zip(kills, got)}
        files += [(path, content) for path, _, _, content in documents]
        for rec in fresh_recs:
            files.append((rec.path, rec.content))
            if rec.path in receipts:
                files.append((receipt_proof_path(rec.path, self.several), receipts[rec.path].encode()))
        seq = head.seq + 1 if head else 0
        summary = f"registry: seq {seq}, {len(fresh_recs)} record(s)" if fresh_recs else f"registry: seq {seq}, anchors"
        parent = head.commit if head else None
        cid, tree, changed = await self.in_thread(self.repo.build_commit, parent, files, summary, when)
        if not changed:
            raise Conflict("the batch adds nothing new")
        write_durably(self.pending_path, json.dumps(
            {"seq": seq, "commit": cid, "tree": tree, "parent": parent}).encode())
        anchors = await self.anchorer.anchor_commit(cid, tree, seq)
        self._anchored(seq, anchors)
        bundle = anchors.text
        if self.before_publish is not None:
            await self.before_publish()
        try:
            await self.in_thread(self.repo.cas, MAIN, parent, cid)
        except Conflict:
            self.broken = ("refs/heads/main was moved outside the registry writer; writes are stopped "
                           "until an operator checks the repository")
            self.pending_path.unlink(missing_ok=True)
            log.error("%s (commit %s seq %d was anchored but not published)", self.broken, cid, seq)
            raise
        self.pending_path.unlink()
        if head is not None:
            self.index.anchors_in_tree.add(head.seq)
        for path, did, content_hash, content in documents:
            doc = loads_json(content)
            self.index.did_documents.add(did, content_hash, keys_from_document(did, doc), path, doc)
        for rec in fresh_recs:
            self.index.add(rec, seq, now)
        info = CommitInfo(seq, cid, tree, when)
        self.index.add_commit(info)
        if self.on_commit is not None:
            self.on_commit(info, fresh_recs)
        for it, rec, fresh in accepted:
            if fresh or self.index.seq_of.get(rec.path) == seq:
                it.future.set_result(Accepted(rec, fresh, seq, cid, bundle, receipts.get(rec.path)))
            else:
                await self._resolve_duplicate(it, rec)

    def _new_documents(self, items: list[Item]) -> list[tuple[str, str, str, bytes]]:
        """(path, DID, content hash, JCS bytes) of the resolved DID documents of `items`
        this registry does not hold yet: stored with the records whose signatures they
        checked, so that a mirror checks them the same way."""
        out: dict[str, tuple[str, str, str, bytes]] = {}
        for it in items:
            for did, doc in it.documents.items():
                content = jcs(doc)
                content_hash = sha256(content).hex()
                if not self.index.did_documents.has(did, content_hash):
                    path = did_document_path(did, content)
                    out[path] = (path, did, content_hash, content)
        return list(out.values())

    async def _resolve_duplicate(self, it: Item, rec: Record) -> None:
        seq = self.index.seq_of[rec.path]
        receipt = None
        if rec.type == "kill_switch":
            data = await self.in_thread(self.repo.read, self.index.commits[seq].tree,
                                        receipt_proof_path(rec.path, self.several))
            receipt = data.decode() if data else None
        it.future.set_result(Accepted(rec, False, seq, self.index.commits[seq].commit,
                                      self.anchor_text(seq) or "", receipt))
