"""Offline verification of `.tlog-proof` bundles against a trust policy (docs/architecture.md §3.6).

Needs no network: the bundle carries the index, the inclusion proof and the
checkpoint with its cosignatures; the entry comes from the bundle's `extra`
line or from the caller; the policy names the log key, the witnesses and the
quorum. Checks, in order: log signature and origin, witness quorum, leaf
hash, inclusion. Each failure raises a typed error with a readable reason.
Checkpoints are verified once per distinct text, so a batch of bundles that
share a checkpoint costs one signature check, not one per bundle.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tlog.errors import (
    FormatError,
    InclusionProofError,
    PolicyError,
    SignatureError,
    UnknownKeyError,
    VerificationError,
)
from tlog.formats.anchors import parse_anchors
from tlog.formats.checkpoint import Checkpoint, parse_checkpoint
from tlog.formats.hashing import EMPTY_ROOT, leaf_hash
from tlog.formats.keys import COSIGNATURE_MLDSA44, Verifier, cosigner_verifier, parse_vkey
from tlog.formats.note import open_note
from tlog.formats.policy import Policy, parse_policy
from tlog.formats.proofbundle import ProofBundle, parse_proof_bundle
from tlog.merkle.verify import hash32, root_from_inclusion, verify_inclusion


@dataclass(frozen=True)
class VerifiedCheckpoint:
    checkpoint: Checkpoint
    log_key: str  # vkey of the log that signed it
    witnesses: frozenset[str]  # policy names of witnesses whose cosignature verified
    post_quantum: frozenset[str] = frozenset()  # those of them that are ML-DSA-44 keys (type 0x06)


@dataclass(frozen=True)
class VerifiedEntry:
    index: int
    leaf_hash: bytes
    entry: bytes | None
    checkpoint: VerifiedCheckpoint


@dataclass
class TrustPolicy:
    """A parsed tlog-policy with its keys resolved."""

    policy: Policy
    logs: list[Verifier]
    witnesses: dict[str, list[Verifier]]  # policy witness name -> accepted key forms
    _cache: dict[str, VerifiedCheckpoint] = field(default_factory=dict)

    @classmethod
    def from_text(cls, text: str) -> TrustPolicy:
        policy = parse_policy(text)
        logs = [parse_vkey(entry.vkey) for entry in policy.logs]
        if not logs:
            raise FormatError("policy names no log")
        witnesses = {}
        for name, w in policy.witnesses.items():
            v = parse_vkey(w.vkey)
            witnesses[name] = [cosigner_verifier(v)]
        return cls(policy, logs, witnesses)

    @classmethod
    def for_log(cls, vkey: str) -> TrustPolicy:
        return cls.from_text(f"log {vkey}\nquorum none\n")

    @classmethod
    def for_logs(cls, vkeys: Sequence[str], k: int = 1) -> TrustPolicy:
        """These logs' keys, no witnesses, and an entry counts once k of them hold it (`logs <k>`)."""
        return cls.from_text("".join(f"log {v}\n" for v in vkeys) + "quorum none\n" + (f"logs {k}\n" if k > 1 else ""))

    def requiring(self, k: int) -> TrustPolicy:
        """This policy, with entries required in at least k of its logs (never fewer than its own
        `logs <k>`); PolicyError when it lists fewer than k logs."""
        if k <= self.policy.log_quorum:
            return self
        if k > self.policy.log_count:
            raise PolicyError(f"the policy lists {self.policy.log_count} log(s); anchors must be checked in {k}")
        return TrustPolicy(dataclasses.replace(self.policy, log_quorum=k), self.logs, self.witnesses)

    def verify_checkpoint(self, note: str) -> VerifiedCheckpoint:
        hit = self._cache.get(note)
        if hit is not None:
            return hit
        try:
            parsed, verified = open_note(note, self.logs)
        except UnknownKeyError:
            raise PolicyError("checkpoint is not signed by a log in the policy") from None
        except SignatureError:
            raise PolicyError("the log's signature on the checkpoint does not verify") from None
        cp = parse_checkpoint(parsed.text)
        if cp.size == 0 and cp.root != EMPTY_ROOT:  # RFC 9162 §2.1.1: the empty tree has one root
            raise PolicyError("a checkpoint of size 0 must carry the empty tree's root (SHA-256 of the empty string)")
        log_key = verified[0][0]
        if cp.origin != log_key.name:
            raise PolicyError(f"checkpoint origin {cp.origin!r} does not match the log key {log_key.name!r}")
        cosigned: set[str] = set()
        for wname, forms in self.witnesses.items():
            try:
                open_note(note, forms)
            except UnknownKeyError:
                continue  # this witness did not cosign
            except SignatureError:
                raise PolicyError(f"cosignature of witness {wname!r} does not verify") from None
            cosigned.add(wname)
        if not self.policy.quorum_met(cosigned):
            have = ", ".join(sorted(cosigned)) or "none"
            raise PolicyError(f"witness quorum not met (valid cosignatures from: {have})")
        pq = frozenset(n for n in cosigned if self.witnesses[n][0].key_type == COSIGNATURE_MLDSA44)
        out = VerifiedCheckpoint(cp, log_key.vkey, frozenset(cosigned), pq)
        if len(self._cache) > 1024:
            self._cache.clear()
        self._cache[note] = out
        return out

    def verify_bundle(self, bundle: str | bytes | ProofBundle, *, entry: bytes | None = None,
                      leaf: bytes | None = None) -> VerifiedEntry:
        b = bundle if isinstance(bundle, ProofBundle) else parse_proof_bundle(bundle)
        if entry is not None and not isinstance(entry, bytes):
            raise FormatError("the entry must be bytes")
        if entry is not None and b.extra is not None and entry != b.extra:
            raise VerificationError("the entry given differs from the entry in the bundle")
        entry = entry if entry is not None else b.extra
        if leaf is None:
            if entry is None:
                raise VerificationError("no entry: the bundle has no extra line and none was given")
            leaf = leaf_hash(entry)
        else:
            leaf = hash32(leaf, "leaf hash", InclusionProofError)
            if entry is not None and leaf_hash(entry) != leaf:
                raise VerificationError("leaf hash does not match the entry")
        vc = self.verify_checkpoint(b.checkpoint)
        verify_inclusion(b.index, vc.checkpoint.size, leaf, b.proof, vc.checkpoint.root)
        return VerifiedEntry(b.index, leaf, entry, vc)

    def verify_anchored(self, data: str | bytes, *, entry: bytes | None = None, leaf: bytes | None = None,
                        read_extra: bool = True) -> VerifiedAnchors:
        """Verify an anchors file (`tlog.formats.anchors`) or a single tlog-proof: every
        bundle against this policy, all for the same entry, and at least the policy's
        `logs <k>` distinct logs among those that verify (one log being wrong or absent
        fails only when it leaves fewer than k). PolicyError says which failed and why.

        `entry` / `leaf` as in `verify_bundle`. `read_extra=False` ignores the bundles'
        `extra` lines: C2SP tlog-proof leaves that line to the application and unauthenticated,
        so a proof made by another C2SP log is checked against the entry (or leaf hash) the
        caller names, whatever its extra line holds."""
        return _verify_anchored(self, data, entry, leaf, read_extra)

    def mirrors(self, names: Iterable[str]) -> list[str]:
        """Those of the cosigners `names` that the policy lists on `mirror` lines: their
        cosignature also says that they store the log (C2SP tlog-mirror)."""
        return sorted(n for n in names if (w := self.policy.witnesses.get(n)) is not None and w.mirror)


@dataclass(frozen=True)
class VerifiedAnchors:
    """An entry proven included in `len(entries)` distinct logs of the policy; `failures`
    are the bundles that did not verify (a log the policy does not trust, a bad proof),
    which do not count, with the reason for each."""

    entry: bytes | None
    entries: tuple[VerifiedEntry, ...]
    failures: tuple[tuple[str, str], ...]  # (origin or "bundle <i>", reason)

    @property
    def logs(self) -> tuple[str, ...]:
        return tuple(v.checkpoint.checkpoint.origin for v in self.entries)


def _verify_anchored(policy: TrustPolicy, data: str | bytes, entry: bytes | None, leaf: bytes | None = None,
                     read_extra: bool = True) -> VerifiedAnchors:
    bundles = parse_anchors(data)
    verified: list[VerifiedEntry] = []
    failures: list[tuple[str, str]] = []
    seen_logs: set[str] = set()
    for i, b in enumerate(bundles):
        if not read_extra:
            b = dataclasses.replace(b, extra=None)
        try:
            v = policy.verify_bundle(b, entry=entry, leaf=leaf)
        except (VerificationError, FormatError) as e:
            failures.append((f"bundle {i}", e.message))
            continue
        if entry is None:
            entry = v.entry
        elif v.entry is not None and v.entry != entry:
            failures.append((v.checkpoint.checkpoint.origin, "anchors a different entry than the other bundles"))
            continue
        # one log, whichever of its keys signed (a key rotation's keys share the origin)
        if v.checkpoint.checkpoint.origin in seen_logs:
            failures.append((v.checkpoint.checkpoint.origin, "a second bundle from the same log counts once"))
            continue
        seen_logs.add(v.checkpoint.checkpoint.origin)
        verified.append(v)
    need = policy.policy.log_quorum
    if len(verified) < need:
        why = "; ".join(f"{where}: {reason}" for where, reason in failures)
        raise PolicyError(f"anchored in {len(verified)} log(s) of the policy, and it requires {need}"
                          + (f" ({why})" if why else ""))
    return VerifiedAnchors(entry, tuple(verified), tuple(failures))


def root_for(index: int, size: int, leaf: bytes, proof) -> bytes:
    """The root an inclusion proof implies (for callers that compare roots themselves)."""
    return root_from_inclusion(index, size, leaf, proof)
