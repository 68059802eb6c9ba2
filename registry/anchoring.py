"""Anchoring registry history in the log (docs/architecture.md §6) and checking those anchors.

Every registry commit `seq` is anchored as a `registry` log entry (commit id,
tree id, seq, signed by the registry key; `tlog.formats.entries.registry_entry`). The
`.tlog-proof` the log returns cannot live in the commit it proves (the commit id
would change), so it is committed by the *next* commit as
`anchors/<seq // 1000>/<seq>.tlog-proof`; the newest commit's proof is served
at `GET /v1/anchors/<seq>` until then. A registry that goes idle makes one
anchor-only commit so that every record commit has its proof in the tree.
So for a history of commits 0..n, commits 0..n-1 are proven by files in the
tree and commit n by the served bundle: the whole history is checkable
against the log, offline, from any clone (`oap-registry verify`).

Kill switch invocations (§22.3 "recorded as a Receipt") are anchored as
`receipt` entries of `sha256(jcs(record))` signed by the registry key, before
the commit that adds them; their proof sits beside the record.

Verifiers raise `AnchorError` (a VerificationError) with the reason.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tlog.client.client import LogClient
from tlog.client.verifier import TrustPolicy
from tlog.errors import InvalidInput, OAPError, VerificationError
from tlog.formats.canonical import jcs
from tlog.formats.did import did_key_from_public, is_did
from tlog.formats.ed25519 import public_from_seed
from tlog.formats.entries import canonical_entry, decode_entry, receipt_entry, registry_entry
from tlog.formats.hashing import format_sha256
from tlog.formats.proofbundle import parse_proof_bundle
from tlog.formats.strict import loads_json
from tlog.formats.times import format_utc

GENESIS_FORMAT = "oap-registry/1"


class AnchorError(VerificationError):
    """A log anchor is missing, malformed, for another commit, or does not verify."""


@dataclass(frozen=True)
class Genesis:
    registry: str  # did:key of the registry key
    name: str
    log_origin: str
    log_vkey: str
    bootstrap_witnesses: tuple[str, ...]
    created_at: str


def genesis_bytes(registry: str, name: str, log_origin: str, log_vkey: str, bootstrap: Sequence[str],
                  created_at) -> bytes:
    """`registry.json`, the only file of commit 0: who signs this registry's anchors,
    which log holds them, and the §31 bootstrap witnesses (see `records`)."""
    return jcs({"format": GENESIS_FORMAT, "registry": registry, "name": name,
                "log": {"origin": log_origin, "vkey": log_vkey},
                "bootstrap_witnesses": sorted(set(bootstrap)), "created_at": format_utc(created_at)})


def parse_genesis(data: bytes) -> Genesis:
    doc = loads_json(data)
    if not isinstance(doc, dict) or jcs(doc) != data:
        raise InvalidInput("registry.json must be an RFC 8785 canonical JSON object")
    if set(doc) != {"format", "registry", "name", "log", "bootstrap_witnesses", "created_at"} \
            or doc["format"] != GENESIS_FORMAT:
        raise InvalidInput(f"registry.json: not an {GENESIS_FORMAT} genesis file")
    log = doc["log"]
    if not isinstance(log, dict) or set(log) != {"origin", "vkey"} or not all(isinstance(v, str) for v in log.values()):
        raise InvalidInput("registry.json: log must be {origin, vkey}")
    boot = doc["bootstrap_witnesses"]
    if not isinstance(boot, list) or not all(is_did(w) for w in boot):
        raise InvalidInput("registry.json: bootstrap_witnesses must be a list of DIDs")
    if not isinstance(doc["registry"], str) or not isinstance(doc["name"], str):
        raise InvalidInput("registry.json: registry and name must be strings")
    return Genesis(doc["registry"], doc["name"], log["origin"], log["vkey"], tuple(boot), str(doc["created_at"]))


def _entry_of(bundle: str | bytes, what: str) -> tuple[Any, dict[str, Any]]:
    try:
        b = parse_proof_bundle(bundle)
    except OAPError as e:
        raise AnchorError(f"{what}: malformed .tlog-proof: {e.message}") from None
    if b.extra is None:
        raise AnchorError(f"{what}: the .tlog-proof carries no entry")
    try:
        entry = decode_entry(b.extra)
        if canonical_entry(entry) != b.extra:  # re-validates, signature included
            raise AnchorError(f"{what}: entry is not in canonical form")
    except InvalidInput as e:
        raise AnchorError(f"{what}: bad entry: {e.message}") from None
    return b, entry


def _check_in_log(b, policy: TrustPolicy | None, what: str) -> int:
    if policy is not None:
        try:
            policy.verify_bundle(b)
        except OAPError as e:
            raise AnchorError(f"{what}: not proven in the log: {e.message}") from None
    return b.index


def verify_commit_anchor(bundle: str | bytes, *, commit: str, tree: str, seq: int, registry: str,
                         policy: TrustPolicy | None) -> int:
    """Check that `bundle` anchors exactly (commit, tree, seq) signed by `registry`; returns the log index.

    With `policy` None only the binding is checked, not the log inclusion.
    """
    what = f"anchor of commit {seq}"
    b, e = _entry_of(bundle, what)
    if e.get("type") != "registry":
        raise AnchorError(f"{what}: entry is not a registry entry")
    if (e["commit"], e["tree"], e["seq"]) != (commit, tree, seq):
        raise AnchorError(f"{what}: anchors commit {e['commit']} seq {e['seq']}, not {commit} seq {seq}")
    if e["signer"] != registry:
        raise AnchorError(f"{what}: signed by {e['signer']}, not the registry key {registry}")
    return _check_in_log(b, policy, what)


def verify_receipt_anchor(bundle: str | bytes, *, receipt_hash: bytes, receipt_id: str, registry: str,
                          policy: TrustPolicy | None) -> int:
    what = f"receipt anchor of {receipt_id}"
    b, e = _entry_of(bundle, what)
    if e.get("type") != "receipt" or e.get("receipt_hash") != format_sha256(receipt_hash):
        raise AnchorError(f"{what}: entry does not anchor this record's hash")
    if e.get("receipt_id") != receipt_id or e["signer"] != registry:
        raise AnchorError(f"{what}: entry names another receipt id or signer")
    return _check_in_log(b, policy, what)


class Anchorer:
    """Writes anchors to a log (LogClient) and checks every bundle it gets back."""

    def __init__(self, log_url: str, seed: bytes, policy: TrustPolicy | None, *, timeout: float = 30.0,
                 token: str | None = None) -> None:
        self.client = LogClient(log_url, policy=policy, timeout=timeout, token=token)
        self.seed = seed
        self.registry = did_key_from_public(public_from_seed(seed))

    async def close(self) -> None:
        await self.client.close()

    async def anchor_commit(self, commit: str, tree: str, seq: int) -> str:
        return (await self.client.anchor(registry_entry(commit, tree, seq, self.seed))).bundle

    async def anchor_receipts(self, items: Sequence[tuple[bytes, str]]) -> list[str]:
        entries = [receipt_entry(h, self.seed, rid) for h, rid in items]
        return [a.bundle for a in await self.client.anchor_many(entries)]

    async def anchor_statement(self, statement_hash: bytes, statement_id: str) -> str:
        return (await self.client.anchor(receipt_entry(statement_hash, self.seed, statement_id))).bundle
