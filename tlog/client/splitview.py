"""Evidence of a split view: two checkpoints a log signed that cannot both be true, checkable offline.

A log that shows one tree to some readers and another to others (a split view, or fork)
must sign two checkpoints that no single append-only tree can explain: two roots for one
size, or a smaller checkpoint that is not a prefix of a larger one. A monitor that meets
one (from the log, a witness's or a mirror's read API, a proof someone handed it) keeps
both signed notes, as they were served, and what shows the contradiction:

- same size, different roots: the two notes are the evidence;
- sizes b < a: an RFC 9162 consistency proof from b to a in the tree of the larger note A,
  and the root of that tree at size b (`root_in_a`) the proof yields. The proof verifies
  against A's root with `root_in_a` (so A commits to it: with SHA-256, no other root at b
  can be proven from A's root), and `root_in_a` differs from B's root.

The file (`"type": "oap-split-view/v1"`, JSON) is checked by `check_split_view` with the
log's key only: a split view needs nothing but the log's own signatures. Which witnesses
cosigned each note is reported, since witnesses that cosigned both broke their promise too
(C2SP tlog-witness). `oap-monitor check-evidence FILE --policy log.policy` runs it.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from tlog.client.verifier import TrustPolicy
from tlog.errors import FormatError, OAPError, SignatureError, UnknownKeyError, VerificationError
from tlog.formats.checkpoint import Checkpoint, parse_checkpoint
from tlog.formats.encoding import b64dec_hash, b64enc
from tlog.formats.note import MAX_NOTE_SIZE, open_note, parse_note
from tlog.merkle.verify import verify_consistency

SPLIT_VIEW_TYPE = "oap-split-view/v1"
MAX_EVIDENCE_BYTES = 4 * MAX_NOTE_SIZE
"""Two notes of at most 1 MiB each and a proof: anything larger is not this evidence."""
MAX_CONSISTENCY_HASHES = 128


class SplitViewError(VerificationError):
    """The evidence does not prove a split view (or is not this evidence at all)."""


@dataclass(frozen=True)
class SplitView:
    """Two signed checkpoints of one log, `a` at least as large as `b`, that contradict each other."""

    a: str  # the larger (or equal) checkpoint, the signed note as served
    b: str
    proof: tuple[bytes, ...] = ()  # consistency proof from b's size to a's size, in a's tree
    root_in_a: bytes | None = None  # the root of a's tree at b's size (None when the sizes are equal)
    sources: tuple[str, str] = ("", "")  # where each note was read (a URL, "state", a file)
    observed_at: str = ""

    def to_json(self) -> dict:
        out: dict = {"type": SPLIT_VIEW_TYPE, "origin": parse_checkpoint(parse_note(self.a).text).origin,
                     "checkpoints": [self.a, self.b], "sources": list(self.sources),
                     "consistency_proof": [b64enc(h) for h in self.proof]}
        if self.root_in_a is not None:
            out["root_in_a"] = b64enc(self.root_in_a)
        if self.observed_at:
            out["observed_at"] = self.observed_at
        return out

    def to_bytes(self) -> bytes:
        return (json.dumps(self.to_json(), indent=2) + "\n").encode()


@dataclass(frozen=True)
class SplitViewReport:
    """A proven split view: the two checkpoints and the policy's cosigners on each."""

    origin: str
    a: Checkpoint
    b: Checkpoint
    root_in_a: bytes  # what a's tree holds at b's size (a's root when the sizes are equal)
    cosigners_a: frozenset[str]
    cosigners_b: frozenset[str]
    quorum_a: bool
    quorum_b: bool

    def describe(self) -> str:
        if self.a.size == self.b.size:
            what = f"two roots for size {self.a.size}"
        else:
            what = f"the checkpoint of size {self.b.size} is not a prefix of the checkpoint of size {self.a.size}"
        both = sorted(self.cosigners_a & self.cosigners_b)
        return f"{self.origin}: {what}" + (f"; cosigned by both: {', '.join(both)}" if both else "")


def parse_split_view(data: bytes | str) -> SplitView:
    """The evidence in a file (FormatError when it is not `oap-split-view/v1`)."""
    raw = data.encode() if isinstance(data, str) else data
    if len(raw) > MAX_EVIDENCE_BYTES:
        raise FormatError("split-view evidence larger than 4 MiB")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise FormatError("split-view evidence is not JSON") from None
    if not isinstance(doc, dict) or doc.get("type") != SPLIT_VIEW_TYPE:
        raise FormatError(f"not {SPLIT_VIEW_TYPE} evidence")
    cps, proof, sources = doc.get("checkpoints"), doc.get("consistency_proof", []), doc.get("sources", ["", ""])
    if not isinstance(cps, list) or len(cps) != 2 or not all(isinstance(c, str) for c in cps):
        raise FormatError("checkpoints must be the two signed notes")
    if not isinstance(proof, list) or len(proof) > MAX_CONSISTENCY_HASHES or not all(isinstance(h, str) for h in proof):
        raise FormatError("consistency_proof must be a list of base64 hashes")
    if not isinstance(sources, list) or len(sources) != 2 or not all(isinstance(s, str) for s in sources):
        raise FormatError("sources must be two strings")
    root = doc.get("root_in_a")
    if root is not None and not isinstance(root, str):
        raise FormatError("root_in_a must be a base64 hash")
    return SplitView(cps[0], cps[1], tuple(b64dec_hash(h, what="proof hash") for h in proof),
                     b64dec_hash(root, what="root_in_a") if root is not None else None,
                     (sources[0], sources[1]), str(doc.get("observed_at", "")))


def check_split_view(evidence: SplitView, policy: TrustPolicy) -> SplitViewReport:
    """Prove the split view with the log keys of `policy` (a tlog-policy: its `log` lines;
    witness lines only name the cosigners reported). SplitViewError says why it is not proven."""
    a, b = _signed(evidence.a, policy, "the first checkpoint"), _signed(evidence.b, policy, "the second checkpoint")
    if a.origin != b.origin:
        raise SplitViewError(f"the checkpoints are of two logs ({a.origin!r} and {b.origin!r})")
    if a.size < b.size:
        raise SplitViewError("the first checkpoint must be the larger one")
    if a.size == b.size:
        if evidence.proof or (evidence.root_in_a is not None and evidence.root_in_a != a.root):
            raise SplitViewError("checkpoints of one size need no consistency proof")
        if a.root == b.root:
            raise SplitViewError(f"both checkpoints have the same root for size {a.size}: no split view")
        root_in_a = a.root
    else:
        if evidence.root_in_a is None:
            raise SplitViewError("checkpoints of two sizes need root_in_a and a consistency proof")
        root_in_a = evidence.root_in_a
        try:
            verify_consistency(b.size, a.size, root_in_a, a.root, list(evidence.proof))
        except VerificationError as e:
            raise SplitViewError(f"the consistency proof does not show what the larger checkpoint's tree holds at "
                                 f"size {b.size}: {e.message}") from None
        if root_in_a == b.root:
            raise SplitViewError(f"the checkpoint of size {b.size} is a prefix of the one of size {a.size}: "
                                 "no split view")
    (ca, qa), (cb, qb) = _cosigners(evidence.a, policy), _cosigners(evidence.b, policy)
    return SplitViewReport(a.origin, a, b, root_in_a, ca, cb, qa, qb)


def split_view_of(a: str, b: str, *, tree_proof: Sequence[bytes] = (), root_in_a: bytes | None = None,
                  sources: tuple[str, str] = ("", ""), observed_at: str = "") -> SplitView:
    """The evidence, larger checkpoint first (the caller gives the proof in that one's tree)."""
    return SplitView(a, b, tuple(tree_proof), root_in_a, sources, observed_at)


def log_signed(note: str, policy: TrustPolicy) -> Checkpoint:
    """The checkpoint of a note signed by a log of `policy`, its origin that key's name (its
    witness quorum aside: a split view needs the log's signature only). VerificationError
    saying what is wrong: no signature of the log, one that does not verify, a malformed note."""
    try:
        parsed, verified = open_note(note, policy.logs)
        cp = parse_checkpoint(parsed.text)
    except UnknownKeyError:
        raise VerificationError("not signed by a log of the policy") from None
    except SignatureError:
        raise VerificationError("the log's signature does not verify") from None
    except OAPError as e:
        raise VerificationError(f"a malformed checkpoint ({e.message})") from None
    if cp.origin != verified[0].verifier.name:
        raise VerificationError(f"origin {cp.origin!r} is not the log key's name {verified[0].verifier.name!r}")
    return cp


def _signed(note: str, policy: TrustPolicy, what: str) -> Checkpoint:
    try:
        return log_signed(note, policy)
    except VerificationError as e:
        raise SplitViewError(f"{what}: {e.message}") from None


def _cosigners(note: str, policy: TrustPolicy) -> tuple[frozenset[str], bool]:
    """The policy's cosigners whose cosignature on `note` verifies, and whether they meet its quorum."""
    names = set()
    for name, forms in policy.witnesses.items():
        try:
            open_note(note, forms)
        except (UnknownKeyError, SignatureError, FormatError):
            continue
        names.add(name)
    try:
        policy.verify_checkpoint(note)
        quorum = True
    except OAPError:
        quorum = False
    return frozenset(names), quorum
