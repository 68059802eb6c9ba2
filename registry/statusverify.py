"""Offline verification of a saved status response (`oap-registry status --offline`).

Needs the registry's key (did:key) and, to check the log anchors too, the log's
trust policy; no network. After the registry rotated its key, also its rotation
statements (`keys`, `registry.keyrotation`): "the registry key" below is then the key
the epoch statement names, which must be the pinned key or one the statements hand over
to from it, not retired before the epoch; and each record's anchor is checked against
the key in force at its commit. Checks, in order:

1. the response is signed by the registry key;
2. the response is about the id the caller asked about (`status_id`: a signed answer is
   public and cacheable, so a cache or a man in the middle can hand out a genuine answer
   about another id);
3. the embedded epoch statement is signed by the same key and has the same
   `this_update` / `next_update`;
4. the epoch statement is anchored in the log (a `receipt` entry of its hash,
   signed by the registry) — inclusion checked when a policy is given, in k of
   its logs for a registry anchored in several: the policy's `logs <k>`, and at least
   the k of the registry's genesis when the caller has it (`genesis`, as mirrors read it);
5. `good` / `unknown`: the bracketing leaves prove the id is not in the
   sorted tree whose root and size the epoch statement signs;
   `revoked` / `suspended`: the id's leaf is in that tree, is a leaf of that verdict
   and names the deciding record's hash; for that record (and for the rotation it is
   `linked_by` and the recovery that `reinstated` a token class, when the answer has
   them) its own signatures verify, the Git path leads from the anchored commit tree
   to exactly its bytes, and that commit's `.tlog-proof` anchors it in the log (and,
   for a kill switch, the receipt anchor) — anchors signed by the registry whose history
   the statement names (`history`: a mirror signs answers about its upstream's records);
   and the records are ones that decide this
   verdict for this id at that time for that reason (docs/architecture.md §6.1). A
   conformance receipt revoked or suspended with its subject carries `via`: the receipt
   itself, with the same evidence, whose id is this id; the records then decide the
   verdict for the subject it names (only a receipt's answer may carry `via`). A receipt
   whose level does not hold (reason `witness_invalid` / `auditor_invalid` / `subject_invalid`) names the
   `signer` that does not count and carries `via` with the receipt's raw Git commit: the
   signer is one of its witnesses (its auditor), the records give it — or, with `signer.key`,
   the key its signature on the receipt verified with — the standing stated,
   from no later than the commit time (the latest time it can have signed), and the receipt
   is revoked from its issued_at; `witness_unqualified` is decided by the L5 receipt itself.
   A token status id is `<principal>#<class>` or `<principal>#<class>@<recovery id>` (a
   token epoch); a kill switch of the principal revokes either, and a `reinstated` recovery
   names the next epoch (`reinstated_id`), never the epoch asked about;
6. the response is fresh: `this_update <= now < next_update`.

This module deliberately shares no code with `registry.status`, `registry.standing`
or `registry.sortedtree`, which build what it checks; it uses the tlog verifiers.
Failures raise `StatusVerificationError` naming the check.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tlog.client.verifier import TrustPolicy
from tlog.errors import InvalidInput, OAPError, VerificationError
from tlog.formats import ed25519
from tlog.formats.canonical import jcs
from tlog.formats.conformance import MAX_CLOCK_SKEW, claims_of
from tlog.formats.did import public_from_did_key
from tlog.formats.diddoc import MAX_DIDS_PER_DOCUMENT, KeyLookup, keys_from_document
from tlog.formats.encoding import b64dec
from tlog.formats.hashing import HASH_SIZE, format_sha256, leaf_hash, parse_sha256, sha256
from tlog.formats.strict import loads_json
from tlog.formats.times import parse_utc
from tlog.merkle.verify import verify_inclusion

from .anchoring import Genesis, verify_commit_anchor, verify_receipt_anchor
from .keyrotation import KeyChain
from .layout import classify, id_hash
from .records import Record, check_record, vc_status_key

STATUSES = ("good", "revoked", "suspended", "unknown")
_REVOKED = frozenset({"id", "reason", "record", "revoked_at"})
LEAF_SHAPES = {_REVOKED: "revoked", _REVOKED | {"reinstated_at", "reinstated_by"}: "revoked",
               frozenset({"id", "reason", "record", "suspended_at"}): "suspended"}
"""The leaves of the sorted tree, one key set per verdict (registry.status)."""
_EVIDENCE = frozenset({"record", "path", "seq", "commit", "tree", "git_path", "anchor"})
_EVIDENCE_OPTIONAL = frozenset({"receipt_anchor", "did_documents", "commit_object"})
SIGNER_REASONS = frozenset({"witness_invalid", "auditor_invalid", "witness_unqualified", "subject_invalid"})
"""Why a conformance receipt's level does not hold: a signer that does not count (§31, §28.5)."""
_RECOVERIES = ("rotate", "resume")
_RECEIPT_PREFIX = "urn:oap:conformance:"
"""A conformance receipt's status id: the only id whose answer may carry `via`."""
_TOKEN_CLASSES = ("subscription_tokens", "oauth_grants", "trust_tokens", "webhook_subscriptions")
_EPOCH_PREFIX = "urn:oap:key-event:"
"""A token epoch `<principal>#<class>@<id>` is named by the recovery key event that opened it."""


Keys = str | KeyChain
"""Whose anchors a record's evidence must carry: one key, or a registry's keys by commit."""


class StatusVerificationError(VerificationError):
    pass


@dataclass(frozen=True)
class VerifiedStatus:
    id: str
    status: str
    this_update: datetime
    next_update: datetime
    epoch: int
    log_checked: bool
    revoked_at: datetime | None = None
    reason: str | None = None
    record: dict[str, Any] | None = None
    suspended_at: datetime | None = None
    reinstated_at: datetime | None = None  # a token class: the recovery that opened the next token epoch...
    reinstated_id: str | None = None  # ...whose tokens carry this status id (this id's tokens stay revoked)
    subject: str | None = None  # a receipt that falls with its subject (`via`): the subject, as the receipt names it
    signer: str | None = None  # a receipt whose level does not hold: the witness or auditor that does not count


def _fail(msg: str) -> StatusVerificationError:
    return StatusVerificationError(msg)


def _check_signed(obj: dict[str, Any], public: bytes, what: str) -> None:
    sig = obj.get("signature")
    try:
        raw = b64dec(sig, what="signature") if isinstance(sig, str) else b""
        ed25519.verify(public, jcs({k: v for k, v in obj.items() if k != "signature"}), raw)
    except OAPError:
        raise _fail(f"{what} is not signed by the registry key") from None


def _time(value: object, what: str) -> datetime:
    try:
        return parse_utc(value, what)
    except OAPError:
        raise _fail(f"{what} is not an RFC 3339 UTC time") from None


BARE_STATUS_PREFIXES = ("did:", "urn:oap:")
"""A status id asked without an issuer is a DID, a token class of one, or a conformance receipt
id; anything else is a credential id, which a `vc` revocation can never touch (`records`)."""


def status_id_of(target: str, issuer: str | None = None) -> str:
    """The status id the registry answers `GET /v1/status/<target>[?issuer=<issuer>]` about:
    the target itself, or for a credential the id scoped by its issuer (`vc_status_key`).

    InvalidInput for a credential id without its issuer (docs/architecture.md §6.1): its
    revocations are scoped by issuer, so an answer about the bare id could only be `good`
    or `unknown` for a credential its issuer revoked; fail safe, the asker must name it."""
    if issuer is None:
        if not target.startswith(BARE_STATUS_PREFIXES):
            raise InvalidInput(f"{target[:80]!r} is not a DID nor a urn:oap: id: a credential's status is scoped "
                               "by its issuer, ask /v1/status/<credential id>?issuer=<issuer DID> "
                               "(oap-registry status --issuer)")
        return target
    return vc_status_key(target, issuer)


def check_answer_id(resp: object, status_id: str) -> None:
    """The answer is about `status_id` (before anything else is verified: a cheap refusal
    of a genuine answer about another id)."""
    got = resp.get("id") if isinstance(resp, dict) else None
    if got != status_id:
        raise _fail(f"the answer is about {got}, not {status_id}")


def anchor_policy(policy: TrustPolicy, at_least: int = 1) -> TrustPolicy:
    """The relying party's log policy as status answers are checked against it: with several
    logs pinned, an anchor must be in at least two of them (min(2, N), the registry's own
    default k), in the policy's `logs <k>` when that is more, and in `at_least` (an explicit
    `--min-logs`, or the k a registry declares) when that is more. Anchoring in k logs
    protects against a registry colluding with fewer than k log operators, so k must come
    from what the relying party pins; what a registry says can only raise it. To accept an
    answer anchored in one log, pin only that log. PolicyError when the policy lists fewer
    logs than k."""
    return policy.requiring(max(min(2, policy.policy.log_count), at_least))


def verify_status(resp: object, *, registry: str, status_id: str | None, policy: TrustPolicy | None = None,
                  genesis: Genesis | None = None, now: datetime | None = None,
                  allow_stale: bool = False, keys: KeyChain | None = None) -> VerifiedStatus:
    """Verify a status answer (see the module doc). `status_id` is the id asked about
    (`status_id_of`); None only for a caller that did not ask about one (it must then read
    `VerifiedStatus.id`). `genesis`, the registry's `registry.json` when the caller has it,
    raises the policy's k to the registry's (never lowers it) and names whose history the
    records must be in. `keys`, the registry's verified key rotations (`keyrotation`, from
    `GET /v1/key-rotations`): when the pinned key `registry` is one of its keys, the answer
    may be signed by that key or a later one, each only for epochs made before it was
    retired, and the records' anchors are checked against the key of their commit."""
    if not isinstance(resp, dict):
        raise _fail("status response must be a JSON object")
    signer = registry
    if keys is not None and registry in keys.keys:
        st0 = resp.get("epoch")
        named = st0.get("registry") if isinstance(st0, dict) else None
        number0 = st0.get("epoch") if isinstance(st0, dict) else None
        if type(number0) is not int:
            raise _fail("epoch statement: epoch and revoked_size must be integers")
        if not isinstance(named, str) or not keys.may_sign(named, number0, registry):
            raise _fail(f"the answer is signed by {named}, not by {registry} or a key it was rotated to "
                        "(in force when the answer was made)")
        signer = named
    try:
        public = public_from_did_key(signer)
    except OAPError as e:
        raise _fail(f"registry key: {e.message}") from None
    _check_signed(resp, public, "status response")
    need = {"type", "id", "status", "this_update", "next_update", "epoch", "epoch_anchor", "proof", "signature"}
    if resp.get("status") == "revoked":
        need.add("revocation")
    elif resp.get("status") == "suspended":
        need.add("suspension")
    if set(resp) != need or resp["type"] != "oap-status-response" or resp["status"] not in STATUSES:
        raise _fail("not an oap-status-response")
    key = resp["id"]
    if not isinstance(key, str) or not key:
        raise _fail("id must be a non-empty string")
    if status_id is not None:
        check_answer_id(resp, status_id)
    if genesis is not None:
        try:
            policy = genesis.pinned(policy)
        except OAPError as e:
            raise _fail(e.message) from None

    st = resp["epoch"]
    if not isinstance(st, dict) or st.get("type") != "oap-status-epoch":
        raise _fail("epoch statement missing")
    _check_signed(st, public, "epoch statement")
    if st.get("registry") != signer:
        raise _fail("epoch statement names another registry")
    if (st.get("this_update"), st.get("next_update")) != (resp["this_update"], resp["next_update"]):
        raise _fail("response times differ from the epoch statement")
    this_update = _time(resp["this_update"], "this_update")
    next_update = _time(resp["next_update"], "next_update")
    number, size = st.get("epoch"), st.get("revoked_size")
    if type(number) is not int or type(size) is not int or size < 0:
        raise _fail("epoch statement: epoch and revoked_size must be integers")
    try:
        root = parse_sha256(st.get("revoked_root"), "revoked_root")
    except OAPError as e:
        raise _fail(e.message) from None
    try:
        verify_receipt_anchor(resp["epoch_anchor"], receipt_hash=sha256(jcs(st)),
                              receipt_id=f"urn:oap:status-epoch:{number}", registry=signer, policy=policy)
    except OAPError as e:
        raise _fail(f"epoch anchor: {e.message}") from None

    history = st.get("history", signer)  # whose commits the records are in: a mirror answers for its upstream
    if not isinstance(history, str) or not history.startswith("did:key:"):
        raise _fail("epoch statement: history must be the did:key of a registry")
    if genesis is not None and history != genesis.registry:
        raise _fail(f"the answer is about the history of {history}, not of the registry {genesis.registry}")
    out: dict[str, Any] = {}
    if resp["status"] in ("revoked", "suspended"):
        out = _check_standing(resp, key, size, root, keys if keys is not None and history == keys.registry
                              else history, policy)
    else:
        verify_absence(resp["proof"], key, size, root)

    now = now or datetime.now(UTC)
    if this_update > now + MAX_CLOCK_SKEW:
        raise _fail("response is from the future (this_update after now)")
    if now >= next_update and not allow_stale:
        raise _fail(f"response is stale: next_update {resp['next_update']} has passed")
    return VerifiedStatus(key, resp["status"], this_update, next_update, number, policy is not None, **out)


# --- sorted Merkle tree proofs (RFC 9162 inclusion via tlog.merkle.verify) -----------------


def _leaf(item: object, size: int, root: bytes, what: str) -> dict[str, Any]:
    if not isinstance(item, dict) or set(item) != {"index", "leaf", "inclusion_proof"}:
        raise _fail(f"{what}: must be {{index, leaf, inclusion_proof}}")
    index, proof = item["index"], item["inclusion_proof"]
    if type(index) is not int or not isinstance(proof, list) or not isinstance(item["leaf"], str) \
            or not all(isinstance(h, str) for h in proof):
        raise _fail(f"{what}: malformed")
    try:
        data = b64dec(item["leaf"], what="leaf")
        hashes = [b64dec(h, what="proof hash") for h in proof]
        leaf = loads_json(data)
    except OAPError as e:
        raise _fail(f"{what}: {e.message}") from None
    if not isinstance(leaf, dict) or jcs(leaf) != data or frozenset(leaf) not in LEAF_SHAPES \
            or not isinstance(leaf["id"], str):
        raise _fail(f"{what}: leaf is not a canonical status leaf")
    if any(len(h) != HASH_SIZE for h in hashes):
        raise _fail(f"{what}: proof hashes must be 32 bytes")
    try:
        verify_inclusion(index, size, leaf_hash(data), hashes, root)
    except OAPError as e:
        raise _fail(f"{what}: {e.message}") from None
    return {**leaf, "_index": index}


def verify_absence(proof: object, key: str, size: int, root: bytes) -> None:
    if not isinstance(proof, dict) or proof.get("type") != "sorted-merkle-absence" \
            or set(proof) != {"type", "left", "right"}:
        raise _fail("good/unknown responses need a sorted-merkle-absence proof")
    k = key.encode("utf-8")
    left = _leaf(proof["left"], size, root, "left leaf") if proof["left"] is not None else None
    right = _leaf(proof["right"], size, root, "right leaf") if proof["right"] is not None else None
    if left is None and right is None:
        if size != 0 or root != hashlib.sha256(b"").digest():
            raise _fail("no bracketing leaves, but the revoked tree is not empty")
        return
    if left is not None and not left["id"].encode("utf-8") < k:
        raise _fail("left leaf does not sort before the id")
    if right is not None and not k < right["id"].encode("utf-8"):
        raise _fail("right leaf does not sort after the id")
    if left is None and right is not None and right["_index"] != 0:
        raise _fail("id sorts before the first leaf, but the right leaf is not leaf 0")
    if right is None and left is not None and left["_index"] != size - 1:
        raise _fail("id sorts after the last leaf, but the left leaf is not the last")
    if left is not None and right is not None and right["_index"] != left["_index"] + 1:
        raise _fail("bracketing leaves are not adjacent")


# --- revoked / suspended: records, Git paths, anchors -----------------------------------------


def _check_standing(resp: dict[str, Any], key: str, size: int, root: bytes, registry: Keys,
                    policy: TrustPolicy | None) -> dict[str, Any]:
    status = resp["status"]
    proof = resp["proof"]
    if not isinstance(proof, dict) or proof.get("type") != "sorted-merkle-membership":
        raise _fail(f"a {status} response needs a sorted-merkle-membership proof")
    leaf = _leaf({k: v for k, v in proof.items() if k != "type"}, size, root, f"{status} leaf")
    if leaf["id"] != key:
        raise _fail("the leaf proven is not this id's")
    if LEAF_SHAPES[frozenset(leaf) - {"_index"}] != status:
        raise _fail(f"the leaf proven is not a {status} leaf")
    revoked = status == "revoked"
    name, when = ("revocation", "revoked_at") if revoked else ("suspension", "suspended_at")
    block = resp[name]
    allowed = _EVIDENCE | _EVIDENCE_OPTIONAL | {when, "reason", "linked_by", "via"} \
        | ({"reinstated", "signer"} if revoked else set())
    if not isinstance(block, dict) or not _EVIDENCE | {when, "reason"} <= set(block) or not set(block) <= allowed:
        raise _fail(f"{name} block malformed")
    if "via" in block and not key.startswith(_RECEIPT_PREFIX):
        raise _fail("via: only a conformance receipt's answer falls with its subject")
    rec, content = _evidence(block, registry, policy, f"{name} record")
    if leaf["record"] != format_sha256(sha256(content)) or leaf[when] != block[when] \
            or leaf["reason"] != block["reason"]:
        raise _fail("the leaf does not commit to this record")
    since = _time(block[when], when)
    linked = _evidence(_sole(block["linked_by"], "linked_by"), registry, policy, "linked_by")[0] \
        if "linked_by" in block else None
    out: dict[str, Any] = {"reason": block["reason"], "record": block["record"]}
    if "signer" in block or block["reason"] in SIGNER_REASONS:  # the receipt's level does not hold
        return out | _signer_decides(block, rec, linked, key, since, registry, policy)
    if "via" in block:  # the records decide the standing of the subject the receipt names
        key = _via(block["via"], key, registry, policy)
        out["subject"] = key
    if not revoked:
        _record_suspends(rec, linked, key, block["reason"], since)
        return out | {"suspended_at": since}
    _record_revokes(rec, linked, key, block["reason"], since)
    out["revoked_at"] = since
    if "reinstated" in block:
        r = block["reinstated"]
        if not isinstance(r, dict) or not _EVIDENCE | {"reinstated_at"} <= set(r) \
                or not set(r) <= _EVIDENCE | _EVIDENCE_OPTIONAL | {"reinstated_at"}:
            raise _fail("reinstated block malformed")
        rrec, rcontent = _evidence(r, registry, policy, "reinstating record")
        if leaf.get("reinstated_at") != r["reinstated_at"] \
                or leaf.get("reinstated_by") != format_sha256(sha256(rcontent)):
            raise _fail("the leaf does not commit to this reinstatement")
        out["reinstated_at"] = _time(r["reinstated_at"], "reinstated_at")
        out["reinstated_id"] = _record_reinstates(rrec, key, since, out["reinstated_at"])
    elif "reinstated_at" in leaf:
        raise _fail("the leaf names a reinstatement the answer does not prove")
    return out


def _signer_decides(block: dict[str, Any], rec: Record, linked: Record | None, key: str, since: datetime,
                    registry: Keys, policy: TrustPolicy | None) -> dict[str, Any]:
    """A conformance receipt whose level does not hold because of a signer (docs/architecture.md
    §6.1): revoked from its `issued_at`; `signer` is one of its witnesses (or its auditor) and,
    for an invalid key, the deciding record (with `linked_by`) gives that signer the standing
    `signer` states, from no later than the receipt's commit time (the raw Git commit in `via`,
    bound to the anchored commit id): the latest time it can have signed. That the signers
    left are too few for the level is the registry's word, as a `good` answer is."""
    reason, signer = block["reason"], block.get("signer")
    if reason not in SIGNER_REASONS or not key.startswith(_RECEIPT_PREFIX) or not isinstance(signer, dict) \
            or not isinstance(signer.get("id"), str):
        raise _fail("signer: only a conformance receipt's answer names a signer, with its reason")
    if reason == "witness_unqualified":  # the receipt itself decides; no signer standing to prove
        ok = set(signer) == {"id"} and "via" not in block and linked is None and rec.type == "conformance" \
            and rec.id == key and rec.level == "L5" and signer["id"] in rec.witnesses and since == rec.effective_at
        if not ok:
            raise _fail("the record does not show an unqualified witness of this receipt")
        return {"revoked_at": since, "signer": signer["id"]}
    if set(signer) - {"key"} != {"id", "status", "since", "reason"} \
            or signer["status"] not in ("revoked", "suspended") \
            or not isinstance(signer["reason"], str) or "via" not in block \
            or ("key" in signer and (not isinstance(signer["key"], str) or signer["key"] == signer["id"])):
        raise _fail("signer malformed")
    receipt, _ = _evidence(_sole(block["via"], "via"), registry, policy, "via")
    if receipt.type != "conformance" or receipt.id != key:
        raise _fail("via: not this conformance receipt")
    committed = _commit_time(block["via"], "via")
    who, signed_since = signer["id"], _time(signer["since"], "signer since")
    audit = claims_of(receipt.body).get("audit")
    if reason == "subject_invalid":  # the subject's own signature: only the key it made it with can fail it
        signs = who == receipt.subject and "key" in signer
    else:
        signs = who in receipt.witnesses if reason == "witness_invalid" else \
            isinstance(audit, dict) and audit.get("auditor") == who
    if not signs:
        role = {"witness_invalid": " witness", "auditor_invalid": "n auditor"}.get(reason, " subject signing by key")
        raise _fail(f"signer: {who} is not a{role} of this receipt")
    if signed_since > committed:
        raise _fail("signer: its standing began after the receipt was committed, so its signature counts")
    decided = who  # whose standing the records prove: the signer's DID, or the key it signed with
    if "key" in signer:
        if receipt.signing_key(who) != signer["key"]:
            raise _fail(f"signer: {who} did not sign this receipt with the key {signer['key']}")
        decided = signer["key"]
    if signer["status"] == "revoked":
        _record_revokes(rec, linked, decided, signer["reason"], signed_since)
    else:
        _record_suspends(rec, linked, decided, signer["reason"], signed_since)
    if since != receipt.effective_at:
        raise _fail("a receipt whose level does not hold is revoked from its issued_at")
    return {"revoked_at": since, "signer": who}


def _commit_time(block: dict[str, Any], what: str) -> datetime:
    """The committer time of the raw Git commit `commit_object`, which must hash to the
    evidence's `commit` and name its `tree`."""
    raw_text = block.get("commit_object")
    try:
        raw = b64dec(raw_text, what="commit_object") if isinstance(raw_text, str) else None
    except OAPError as e:
        raise _fail(f"{what}: {e.message}") from None
    if raw is None or _git_sha(b"commit", raw) != block["commit"]:
        raise _fail(f"{what}: commit_object is not the commit {block['commit']}")
    headers = raw.split(b"\n\n", 1)[0].split(b"\n")
    committer = [h for h in headers if h.startswith(b"committer ")]
    parts = committer[0].rsplit(b" ", 2) if len(committer) == 1 else []
    if headers[0] != b"tree " + str(block["tree"]).encode() or len(parts) != 3 or not parts[1].isdigit() \
            or len(parts[1]) > 12:
        raise _fail(f"{what}: commit_object is not a commit of the tree {block['tree']}")
    return datetime.fromtimestamp(int(parts[1]), UTC)


def _sole(item: Any, what: str) -> Any:
    """Evidence that stands alone in the block (`linked_by`, `via`): nothing but the evidence."""
    if isinstance(item, dict) and not set(item) <= _EVIDENCE | _EVIDENCE_OPTIONAL:
        raise _fail(f"{what}: evidence malformed")
    return item


def _via(item: Any, key: str, registry: Keys, policy: TrustPolicy | None) -> str:
    """A receipt answering with its subject's standing: `via` is this receipt, proven in the
    registry as any deciding record is; the subject it names is whose standing decides."""
    rec, _ = _evidence(_sole(item, "via"), registry, policy, "via")
    if rec.type != "conformance" or rec.id != key:
        raise _fail("via: not this conformance receipt")
    return rec.subject


def _evidence(block: dict[str, Any], registry: Keys, policy: TrustPolicy | None, what: str) -> tuple[Record, bytes]:
    """A record the answer relies on: its signatures, its Git path from the anchored commit
    tree, the commit's log anchor (and a kill switch's receipt anchor)."""
    if not isinstance(block, dict) or not _EVIDENCE <= set(block):
        raise _fail(f"{what}: evidence malformed")
    if type(block["seq"]) is not int or not isinstance(block["commit"], str) or not isinstance(block["tree"], str):
        raise _fail(f"{what}: seq, commit, tree malformed")
    if "commit_object" in block:
        _commit_time(block, what)  # bound to the commit, wherever it is given
    record = block["record"]
    lookup = _did_documents(block.get("did_documents", []), block["tree"])
    try:
        rec = check_record(record, now=None, lookup=lookup)
    except OAPError as e:
        raise _fail(f"{what}: {e.message}") from None
    content = jcs(record)
    if block["path"] != rec.path:
        raise _fail(f"{what}: path is not the record's")
    _verify_git_path(block["tree"], rec.path, block["git_path"], content)
    signer = registry.at(block["seq"]) if isinstance(registry, KeyChain) else registry  # the key of that commit
    try:
        verify_commit_anchor(block["anchor"], commit=block["commit"], tree=block["tree"], seq=block["seq"],
                             registry=signer, policy=policy)
        if rec.type == "kill_switch":
            verify_receipt_anchor(block.get("receipt_anchor", ""), receipt_hash=sha256(content), receipt_id=rec.id,
                                  registry=signer, policy=policy)
    except OAPError as e:
        raise _fail(e.message) from None
    return rec, content


def token_parts(key: str) -> tuple[str, str, str | None] | None:
    """(principal, class, epoch) for a token status id: `<principal>#<class>` (epoch None: the
    tokens issued before the principal's first recovery) or `<principal>#<class>@<recovery id>`
    (the tokens issued since that recovery); None for any other id. A DID holds no `#`."""
    principal, sep, rest = key.partition("#")
    cls, at, epoch = rest.partition("@")
    if not sep or cls not in _TOKEN_CLASSES or not principal.startswith("did:"):
        return None
    if at and (not epoch.startswith(_EPOCH_PREFIX) or epoch == _EPOCH_PREFIX):
        return None
    return principal, cls, (epoch if at else None)


def _principal_of(key: str) -> tuple[str, bool]:
    """(principal, True) for a token status id, else (key, False); a credential `vc <issuer> <id>`
    is suspended while its issuer is: (issuer, False)."""
    parts = token_parts(key)
    if parts is not None:
        return parts[0], True
    return _credential_issuer(key) or key, False


def _credential_issuer(key: str) -> str | None:
    """The issuer DID of a credential status id `vc <issuer> <id>`, else None."""
    kind, _, rest = key.partition(" ")
    issuer, sep, _ = rest.partition(" ")
    return issuer if kind == "vc" and sep and issuer.startswith("did:") else None


def _rotation(rec: Record | None) -> bool:
    return rec is not None and rec.type == "key_event" and rec.body["event"] == "rotate"


def _did_documents(items: object, tree: object) -> KeyLookup | None:
    """The DID documents a revoked answer carries for signers other than did:key, each
    proven to be in the registry's tree at the record's commit: the lookup to check
    the record's signatures with, as the registry checked them."""
    if not isinstance(items, list) or len(items) > MAX_DIDS_PER_DOCUMENT * 8:
        raise _fail("did_documents must be a list")
    if not items:
        return None
    docs = []
    for item in items:
        if not isinstance(item, dict) or set(item) != {"path", "document", "git_path"}:
            raise _fail("a did_documents item is {path, document, git_path}")
        doc, path = item["document"], item["path"]
        try:
            info = classify(path) if isinstance(path, str) else None
            content = jcs(doc)
        except OAPError as e:
            raise _fail(e.message) from None
        did = doc.get("id") if isinstance(doc, dict) else None
        if info is None or info.what != "did_document" or not isinstance(did, str) or id_hash(did) != info.hash \
                or sha256(content).hex() != info.content_hash:
            raise _fail(f"{path}: not the path of this DID document")
        if not isinstance(tree, str):
            raise _fail("revocation: tree malformed")
        _verify_git_path(tree, path, item["git_path"], content)
        docs.append((did, doc))
    by_did: dict[str, list] = {}
    for did, doc in docs:
        try:
            by_did.setdefault(did, []).extend(keys_from_document(did, doc))
        except OAPError as e:
            raise _fail(e.message) from None

    def lookup(did: str) -> list:
        if did not in by_did:
            raise _fail(f"no DID document of {did} in the answer")
        return by_did[did]
    return lookup


def _record_revokes(rec: Record, linked: Record | None, key: str, reason: str, revoked_at: datetime) -> None:
    """The record must be one that revokes `key`, at the time and for the reason claimed."""
    if rec.type == "revocation":
        want = vc_status_key(rec.subject, rec.issued_by) if rec.kind == "vc" else rec.subject
        # a credential falls with its issuer revoked for cause (its status lists are then all set)
        falls = rec.kind in ("did", "key") and _credential_issuer(key) == rec.subject and reason != "superseded"
        # a principal whose primary key is revoked for cause, with no controller left, is dead: its
        # tokens fall with it (that no controller is left is the registry's word, as `good` is)
        principal, is_token = _principal_of(key)
        primary = rec.subject == principal if linked is None else \
            _rotation(linked) and linked.subject == principal and linked.key == rec.subject
        gone = is_token and rec.kind in ("did", "key") and reason not in ("superseded", "loss_of_key") and primary
        ok = (((key == want or falls) and linked is None) or gone) and reason == rec.body["reason"] \
            and revoked_at == rec.effective_at
    elif rec.type == "kill_switch":  # the principal's tokens, of any epoch
        ok = _principal_of(key) == (rec.subject, True) and reason == "kill_switch" \
            and revoked_at == rec.effective_at and linked is None
    elif rec.type == "conformance":
        ok = key == rec.id and reason == "expired" and revoked_at == rec.expires_at and linked is None
    elif _rotation(rec):  # superseded: the subject's did:key, or the key of its previous rotation, is retired
        if linked is None:
            retires = key == rec.subject and key.startswith("did:key:")
        else:
            retires = _rotation(linked) and linked.subject == rec.subject and linked.key == key \
                and rec.key != key and linked.effective_at <= rec.effective_at
        ok = retires and reason == "superseded" and revoked_at == rec.effective_at
    else:
        ok = False
    if not ok:
        raise _fail("the record does not revoke this id at that time for that reason")


def _record_reinstates(rec: Record, key: str, revoked_at: datetime, reinstated_at: datetime) -> str:
    """A recovery (rotate or resume) of the token class's principal, after the kill switch, that
    opened a later token epoch than this id's (the epoch a recovery opened is never revoked by the
    kill switches it recovered from). -> the status id of the tokens issued since it."""
    parts = token_parts(key)
    ok = parts is not None and rec.type == "key_event" and rec.body["event"] in _RECOVERIES \
        and rec.subject == parts[0] and reinstated_at == rec.effective_at and reinstated_at > revoked_at \
        and rec.id != parts[2]
    if not ok or parts is None:
        raise _fail("the record does not reinstate this id at that time")
    return f"{parts[0]}#{parts[1]}@{rec.id}"


def _record_suspends(rec: Record, linked: Record | None, key: str, reason: str, suspended_at: datetime) -> None:
    """A `suspend` of the principal, or (automatic suspension, §5.3) a loss_of_key revocation
    of its key: the principal's did:key, or the key a rotation of it made its key."""
    principal, _ = _principal_of(key)
    if rec.type == "key_event":
        ok = rec.body["event"] == "suspend" and rec.subject == principal and linked is None \
            and suspended_at == rec.effective_at and reason == rec.body.get("reason", "unspecified")
    elif rec.type == "revocation":
        if linked is None:
            names = rec.subject == principal
        else:
            names = _rotation(linked) and linked.subject == principal and linked.key == rec.subject
        ok = names and rec.body["reason"] == reason == "loss_of_key" and rec.kind in ("did", "key") \
            and suspended_at >= rec.effective_at
    else:
        ok = False
    if not ok:
        raise _fail("the record does not suspend this id at that time for that reason")


def _git_sha(kind: bytes, data: bytes) -> str:
    return hashlib.sha1(kind + b" " + str(len(data)).encode() + b"\0" + data).hexdigest()


def _tree_entries(raw: bytes) -> dict[bytes, tuple[bytes, str]]:
    out: dict[bytes, tuple[bytes, str]] = {}
    pos = 0
    while pos < len(raw):
        sp = raw.find(b" ", pos)
        nul = raw.find(b"\0", sp + 1)
        if sp < 0 or nul < 0 or nul + 21 > len(raw):
            raise _fail("malformed Git tree object in the path proof")
        out[raw[sp + 1:nul]] = (raw[pos:sp], raw[nul + 1:nul + 21].hex())
        pos = nul + 21
    return out


def _verify_git_path(tree: str, path: str, raw_trees: object, content: bytes) -> None:
    """Walk Git tree objects from `tree` to the blob at `path`; the blob must be `content`."""
    parts = path.encode("utf-8").split(b"/")
    if not isinstance(raw_trees, list) or len(raw_trees) != len(parts):
        raise _fail("Git path proof has the wrong length")
    expected = tree
    for i, (item, part) in enumerate(zip(raw_trees, parts)):
        try:
            raw = b64dec(item, what="tree object")
        except OAPError as e:
            raise _fail(e.message) from None
        if _git_sha(b"tree", raw) != expected:
            raise _fail(f"Git path proof: tree object {i} does not hash to {expected}")
        entry = _tree_entries(raw).get(part)
        if entry is None:
            raise _fail(f"Git path proof: {part.decode()} is not in tree {expected}")
        mode, expected = entry
        if mode != (b"100644" if i == len(parts) - 1 else b"40000"):
            raise _fail(f"Git path proof: {part.decode()} has mode {mode.decode()}")
    if _git_sha(b"blob", content) != expected:
        raise _fail("Git path proof: the blob is not the record")
