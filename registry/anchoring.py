"""Anchoring registry history in logs (docs/architecture.md §6) and checking those anchors.

Every registry commit `seq` is anchored as a `registry` log entry (commit id,
tree id, seq, signed by the registry key; `tlog.formats.entries.registry_entry`). The
proof the log returns cannot live in the commit it proves (the commit id
would change), so it is committed by the *next* commit as
`anchors/<seq // 1000>/<seq>.tlog-proof`; the newest commit's proof is served
at `GET /v1/anchors/<seq>` until then. A registry that goes idle makes one
anchor-only commit so that every record commit has its proof in the tree.
So for a history of commits 0..n, commits 0..n-1 are proven by files in the
tree and commit n by the served proof: the whole history is checkable
against the logs, offline, from any clone (`oap-registry verify`).

A registry anchors in one log or in several (OAP-CORE-1.0 §19.3: receipt hashes
SHOULD be anchored in at least two logs). Its genesis names the logs and k, how
many of them must hold an anchor: a commit is published only once k logs hold it,
and every verifier requires k. With several logs an anchor is an `oap-anchors/v1`
file (`tlog.formats.anchors`: one tlog-proof per log) at `.anchors.json` paths
instead of `.tlog-proof` (`layout`); with one log it is a plain tlog-proof.

Kill switch invocations (§22.3 "recorded as a Receipt") are anchored as
`receipt` entries of `sha256(jcs(record))` signed by the registry key, before
the commit that adds them; their proof sits beside the record.

Verifiers raise `AnchorError` (a VerificationError) with the reason.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tlog.client.verifier import TrustPolicy
from tlog.errors import FormatError, InvalidInput, OAPError, VerificationError
from tlog.formats.anchors import MAX_LOGS, parse_anchors
from tlog.formats.canonical import jcs
from tlog.formats.did import is_did
from tlog.formats.entries import canonical_entry, decode_entry
from tlog.formats.hashing import format_sha256
from tlog.formats.keys import parse_vkey
from tlog.formats.proofbundle import ProofBundle, parse_proof_bundle
from tlog.formats.strict import loads_json
from tlog.formats.times import format_utc

GENESIS_FORMAT = "oap-registry/1"  # one log: {"log": {origin, vkey}}
GENESIS_FORMAT_LOGS = "oap-registry/2"  # several: {"logs": [{origin, vkey}, ...], "anchor_quorum": k}


class AnchorError(VerificationError):
    """A log anchor is missing, malformed, for another commit, or does not verify."""


@dataclass(frozen=True)
class AnchorLog:
    """A log the registry anchors in, as its genesis names it."""

    origin: str
    vkey: str


@dataclass(frozen=True)
class Genesis:
    registry: str  # did:key of the registry key
    name: str
    logs: tuple[AnchorLog, ...]  # sorted by origin
    anchor_quorum: int  # k: a commit is anchored once k of `logs` hold it
    bootstrap_witnesses: tuple[str, ...]
    created_at: str

    @property
    def several(self) -> bool:
        """Anchors are oap-anchors/v1 files (several logs), not single tlog-proofs."""
        return len(self.logs) > 1

    def policy(self) -> TrustPolicy:
        """The logs' keys and k, without witnesses: what a verifier that pins nothing checks."""
        return TrustPolicy.for_logs([log.vkey for log in self.logs], self.anchor_quorum)

    def pinned(self, policy: TrustPolicy | None) -> TrustPolicy:
        """`policy` (the verifier's own, pinned) requiring at least this registry's k; else `policy()`."""
        if policy is None:
            return self.policy()
        try:
            return policy.requiring(self.anchor_quorum)
        except OAPError as e:
            raise AnchorError(f"this registry anchors in {self.anchor_quorum} log(s) at least: {e.message}") from None


def genesis_bytes(registry: str, name: str, logs: Sequence[AnchorLog], anchor_quorum: int, bootstrap: Sequence[str],
                  created_at) -> bytes:
    """`registry.json`, the only file of commit 0: who signs this registry's anchors,
    which logs hold them and how many must (k), and the §31 bootstrap witnesses (see
    `records`). One log gives the `oap-registry/1` form, several `oap-registry/2`."""
    doc: dict[str, Any] = {"registry": registry, "name": name, "bootstrap_witnesses": sorted(set(bootstrap)),
                           "created_at": format_utc(created_at)}
    if len(logs) == 1 and anchor_quorum == 1:
        doc |= {"format": GENESIS_FORMAT, "log": {"origin": logs[0].origin, "vkey": logs[0].vkey}}
    else:
        doc |= {"format": GENESIS_FORMAT_LOGS, "anchor_quorum": anchor_quorum,
                "logs": [{"origin": log.origin, "vkey": log.vkey} for log in sorted(logs, key=lambda x: x.origin)]}
    data = jcs(doc)
    parse_genesis(data)  # never write what a mirror would refuse
    return data


def _anchor_log(item: object, *, check_key: bool = True) -> AnchorLog:
    if not isinstance(item, dict) or set(item) != {"origin", "vkey"} \
            or not all(isinstance(v, str) for v in item.values()):
        raise InvalidInput("registry.json: a log is {origin, vkey}")
    if check_key:
        try:
            parse_vkey(item["vkey"])
        except FormatError as e:
            raise InvalidInput(f"registry.json: log key: {e.message}") from None
    return AnchorLog(item["origin"], item["vkey"])


def parse_genesis(data: bytes) -> Genesis:
    doc = loads_json(data)
    if not isinstance(doc, dict) or jcs(doc) != data:
        raise InvalidInput("registry.json must be an RFC 8785 canonical JSON object")
    common = {"format", "registry", "name", "bootstrap_witnesses", "created_at"}
    if doc.get("format") == GENESIS_FORMAT and set(doc) == common | {"log"}:
        logs: tuple[AnchorLog, ...] = (_anchor_log(doc["log"], check_key=False),)  # as it always was read
        k = 1
    elif doc.get("format") == GENESIS_FORMAT_LOGS and set(doc) == common | {"logs", "anchor_quorum"}:
        items, k = doc["logs"], doc["anchor_quorum"]
        if not isinstance(items, list) or not 2 <= len(items) <= MAX_LOGS:
            raise InvalidInput(f"registry.json: logs must list 2..{MAX_LOGS} logs")
        logs = tuple(_anchor_log(item) for item in items)
        if [log.origin for log in logs] != sorted({log.origin for log in logs}) \
                or len({log.vkey for log in logs}) != len(logs):
            raise InvalidInput("registry.json: logs must be sorted by origin, each origin and key once")
        if type(k) is not int or not 1 <= k <= len(logs):
            raise InvalidInput(f"registry.json: anchor_quorum must be 1..{len(logs)}")
    else:
        raise InvalidInput(f"registry.json: not an {GENESIS_FORMAT} or {GENESIS_FORMAT_LOGS} genesis file")
    boot = doc["bootstrap_witnesses"]
    if not isinstance(boot, list) or not all(is_did(w) for w in boot):
        raise InvalidInput("registry.json: bootstrap_witnesses must be a list of DIDs")
    if not isinstance(doc["registry"], str) or not isinstance(doc["name"], str):
        raise InvalidInput("registry.json: registry and name must be strings")
    return Genesis(doc["registry"], doc["name"], logs, k, tuple(boot), str(doc["created_at"]))


def is_anchors_file(data: object) -> bool:
    """An oap-anchors/v1 file (JSON), as opposed to a single tlog-proof (or anything else,
    which the tlog-proof parser then refuses with a FormatError)."""
    return isinstance(data, (str, bytes)) and data.lstrip()[:1] in ("{", b"{")


def _entry_of(data: str | bytes, what: str) -> tuple[list[ProofBundle], dict[str, Any]]:
    """The proofs of an anchor (one tlog-proof, or an anchors file) and the one entry they all carry."""
    try:
        bundles = parse_anchors(data) if is_anchors_file(data) else [parse_proof_bundle(data)]
    except OAPError as e:
        raise AnchorError(f"{what}: malformed .tlog-proof: {e.message}") from None
    extras = {b.extra for b in bundles}
    if None in extras:
        raise AnchorError(f"{what}: the .tlog-proof carries no entry")
    if len(extras) != 1:
        raise AnchorError(f"{what}: the logs' proofs carry different entries")
    extra = bundles[0].extra
    assert extra is not None
    try:
        entry = decode_entry(extra)
        if canonical_entry(entry) != extra:  # re-validates, signature included
            raise AnchorError(f"{what}: entry is not in canonical form")
    except InvalidInput as e:
        raise AnchorError(f"{what}: bad entry: {e.message}") from None
    return bundles, entry


def _check_in_logs(data: str | bytes, bundles: list[ProofBundle], policy: TrustPolicy | None, what: str) -> int:
    """The entry is included in the policy's logs (k of them, its `logs <k>`); the first proof's index."""
    if policy is None:
        return bundles[0].index
    single = not is_anchors_file(data)
    try:
        if single and policy.policy.log_quorum <= 1:
            policy.verify_bundle(bundles[0])
            return bundles[0].index
        return policy.verify_anchored(data).entries[0].index
    except OAPError as e:
        raise AnchorError(f"{what}: not proven in the log{'' if single else 's'}: {e.message}") from None


def verify_commit_anchor(bundle: str | bytes, *, commit: str, tree: str, seq: int, registry: str,
                         policy: TrustPolicy | None) -> int:
    """Check that `bundle` (a tlog-proof, or an anchors file of one per log) anchors exactly
    (commit, tree, seq) signed by `registry`, in k of the policy's logs; returns the log index
    (of the first log's proof).

    With `policy` None only the binding is checked, not the log inclusion.
    """
    what = f"anchor of commit {seq}"
    bundles, e = _entry_of(bundle, what)
    if e.get("type") != "registry":
        raise AnchorError(f"{what}: entry is not a registry entry")
    if (e["commit"], e["tree"], e["seq"]) != (commit, tree, seq):
        raise AnchorError(f"{what}: anchors commit {e['commit']} seq {e['seq']}, not {commit} seq {seq}")
    if e["signer"] != registry:
        raise AnchorError(f"{what}: signed by {e['signer']}, not the registry key {registry}")
    return _check_in_logs(bundle, bundles, policy, what)


def verify_receipt_anchor(bundle: str | bytes, *, receipt_hash: bytes, receipt_id: str, registry: str,
                          policy: TrustPolicy | None) -> int:
    what = f"receipt anchor of {receipt_id}"
    bundles, e = _entry_of(bundle, what)
    if e.get("type") != "receipt" or e.get("receipt_hash") != format_sha256(receipt_hash):
        raise AnchorError(f"{what}: entry does not anchor this record's hash")
    if e.get("receipt_id") != receipt_id or e["signer"] != registry:
        raise AnchorError(f"{what}: entry names another receipt id or signer")
    return _check_in_logs(bundle, bundles, policy, what)
