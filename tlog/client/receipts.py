"""Offline verification of a receipt and of the log entry that anchors it: every
signature, each with its own verdict (docs/architecture.md §3.6). `oap-log verify`
is a thin layer over `verify_proof_file`; the explorer's JavaScript twin is
tlog/ui/static/lib/receipts.js.

What is checked, with no network:

- the bundle (or anchors file): inclusion in logs the trust policy accepts
  (`TrustPolicy.verify_anchored`);
- the entry's own signature (`receipt` and `registry` entries): a did:key offline;
  another DID with a pinned copy the caller gives, else the DID document the entry keeps
  (the log's copy from when it was submitted). A pinned document is the only one used
  for its DID: a relying party pins it so as not to trust the log for that DID, so the
  log's copy is then set aside (each verdict names its `source`);
- with a receipt (OAP-CORE-1.0 §19.1): that the entry anchors exactly it (or, with a
  salt, that the Privileged Mode commitment opens to it), and every signature in its
  `signatures`, `{"by": <DID or DID URL>, "alg": "EdDSA" | "ES256" | "ES256K",
  "value": <base64 or base64url of 64 bytes>}`, each over the receipt's RFC 8785 form
  without `signatures` (`receipt_signing_bytes`): a did:key offline; another DID with
  a pinned copy, else the document anchored with the entry (when the entry's signer is
  that DID). The receipt must name its agent (`agent_did`) and its tool (`tool_did`) by
  their DIDs, and each must have signed it: a receipt that names neither, or names them
  by something else than a DID, fails (nobody could say whose signatures are required).

Each signature is `verified`, `failed` (why), `not_checkable` (why: no DID document,
an algorithm or key type this verifier has no code for) or `missing`. The verdict of
the whole is the fail-safe one (SECURITY.md): `ok` only when every signature was
checked and verified; `failed` when any failed or is missing, or when the receipt
carries no signatures at all; otherwise `incomplete`, which is not ok: a signature no
one could check may be forged.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tlog.client.verifier import TrustPolicy, VerifiedAnchors
from tlog.errors import FormatError, InvalidInput, OAPError, SignatureError, VerificationError
from tlog.formats.conformance import ALGS
from tlog.formats.did import is_did, public_from_did_key
from tlog.formats.diddoc import (
    ED25519,
    VerificationKey,
    keys_from_document,
    lookup_from,
    needs_resolution,
    split_did_url,
)
from tlog.formats.encoding import b64dec_either, b64enc
from tlog.formats.entries import (
    check_entry_signature,
    commitment_for,
    decode_entry,
    receipt_hash,
    receipt_signing_bytes,
)
from tlog.formats.hashing import format_sha256

__all__ = [
    "FAILED",
    "MISSING",
    "NOT_CHECKABLE",
    "VERIFIED",
    "BundleCheck",
    "ReceiptCheck",
    "SignatureCheck",
    "verdict_of",
    "verify_entry_signature",
    "verify_proof_file",
    "verify_receipt_signatures",
]

VERIFIED, FAILED, NOT_CHECKABLE, MISSING = "verified", "failed", "not_checkable", "missing"
OK, INCOMPLETE = "ok", "incomplete"
FROM_DID_KEY, FROM_ENTRY, FROM_PINNED = "did:key", "anchored", "pinned"
"""Where a verifying key came from: the did:key itself, the DID document kept in the log
entry (the log's copy at anchoring time), or a document the caller pinned."""
ROLES = (("agent", "agent_did"), ("tool", "tool_did"), ("principal", "principal_did"))
REQUIRED_ROLES = ("agent", "tool")
"""§19.1: a receipt carries the agent's and the tool's signatures."""
MAX_SIGNATURES = 64


@dataclass(frozen=True)
class SignatureCheck:
    """One signature's verdict. `index` is its position in the receipt's `signatures`
    (None for the entry's own signature, a missing one, or a receipt with none)."""

    status: str
    reason: str
    by: str | None = None
    index: int | None = None
    roles: tuple[str, ...] = ()
    alg: str | None = None
    key: str | None = None  # the verification method that verified it
    source: str | None = None  # FROM_DID_KEY, FROM_ENTRY or FROM_PINNED

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "reason": self.reason}
        for name in ("by", "index", "alg", "key", "source"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.roles:
            out["roles"] = list(self.roles)
        return out


def verdict_of(checks: Sequence[SignatureCheck]) -> str:
    if any(c.status in (FAILED, MISSING) for c in checks):
        return FAILED
    return INCOMPLETE if any(c.status == NOT_CHECKABLE for c in checks) else OK


@dataclass(frozen=True)
class ReceiptCheck:
    receipt_hash: bytes
    signatures: tuple[SignatureCheck, ...]

    @property
    def verdict(self) -> str:
        return verdict_of(self.signatures)

    def to_json(self) -> dict[str, Any]:
        return {"receipt_hash": format_sha256(self.receipt_hash), "verdict": self.verdict,
                "signatures": [s.to_json() for s in self.signatures]}


# --- keys ------------------------------------------------------------------------------


def _did_key_keys(did: str) -> list[VerificationKey]:
    public = public_from_did_key(did)  # InvalidInput for anything but an Ed25519 did:key
    return [VerificationKey(f"{did}#{did[len('did:key:'):]}", ED25519, public)]


def _sources(did: str, anchored: Mapping[str, Any], pinned: Mapping[str, Any]) \
        -> tuple[list[tuple[str, list[VerificationKey]]], list[str]]:
    """The keys `did` may have signed with, per source, and why a source gave none. A
    pinned document is the only source for its DID: the log's kept copy is not trusted then."""
    if did.startswith("did:key:"):
        try:
            return [(FROM_DID_KEY, _did_key_keys(did))], []
        except InvalidInput:
            return [], ["only Ed25519 did:key DIDs can be checked"]
    found: list[tuple[str, list[VerificationKey]]] = []
    problems: list[str] = []
    for source, docs in ((FROM_PINNED, pinned),) if did in pinned else ((FROM_ENTRY, anchored),):
        if did in docs:
            try:
                found.append((source, list(keys_from_document(did, docs[did]))))
            except InvalidInput as e:
                problems.append(f"{source} document: {e.message}")
    if not found and not problems:
        problems.append(f"no DID document of {did} was anchored with the entry or pinned")
    return found, problems


def _check_one(i: int, sig: object, message: bytes, roles: dict[str, tuple[str, ...]],
               anchored: Mapping[str, Any], pinned: Mapping[str, Any]) -> SignatureCheck:
    if not isinstance(sig, dict) or set(sig) != {"by", "alg", "value"}:
        return SignatureCheck(FAILED, "a signature is {\"by\", \"alg\", \"value\"} exactly", index=i)
    by, alg, value = sig["by"], sig["alg"], sig["value"]
    if not isinstance(by, str) or not is_did(split_did_url(by)[0]):
        return SignatureCheck(FAILED, "by must be a DID or a DID URL", index=i)
    did, fragment = split_did_url(by)
    base: dict[str, Any] = {"by": by, "index": i, "roles": roles.get(did, ())}
    if not isinstance(alg, str):
        return SignatureCheck(FAILED, "alg must be a string", **base)
    base["alg"] = alg
    if alg not in ALGS.values():
        return SignatureCheck(NOT_CHECKABLE, f"alg {alg!r} is not one this verifier checks (EdDSA, ES256, ES256K)",
                              **base)
    try:
        raw = b64dec_either(value, what="value")
    except FormatError:
        return SignatureCheck(FAILED, "value is not base64 or base64url", **base)
    if len(raw) != 64:
        return SignatureCheck(FAILED, "value must be base64 of a 64-byte signature", **base)
    sources, problems = _sources(did, anchored, pinned)
    if not sources:
        return SignatureCheck(NOT_CHECKABLE, "; ".join(problems), **base)
    named = [(src, [k for k in keys if fragment is None or k.id == f"{did}#{fragment}"]) for src, keys in sources]
    if not any(keys for _, keys in named):
        return SignatureCheck(FAILED, f"the DID document of {did} lists no signing key #{fragment}", **base)
    fitting = [(src, [k for k in keys if ALGS[k.curve] == alg]) for src, keys in named]
    if not any(keys for _, keys in fitting):
        return SignatureCheck(FAILED, f"{did} has no {alg} signing key" + (f" #{fragment}" if fragment else ""),
                              **base)
    for src, keys in fitting:
        for key in keys:
            try:
                key.verify(message, raw)
            except SignatureError:
                continue
            return SignatureCheck(VERIFIED, f"verified with {key.id}", key=key.id, source=src, **base)
    return SignatureCheck(FAILED, f"does not verify with the {alg} key(s) of {did}", **base)


def verify_receipt_signatures(receipt: object, *, anchored: Mapping[str, Any] | None = None,
                              pinned: Mapping[str, Any] | None = None) -> ReceiptCheck:
    """Every signature of an OAP receipt (§19.1), each verified or not and why, offline.
    `anchored` and `pinned` map DIDs to DID documents: the one kept in the anchoring
    entry, and copies the caller vouches for. InvalidInput when `receipt` is not a
    JSON object with an RFC 8785 form."""
    if not isinstance(receipt, dict):
        raise InvalidInput("a receipt must be a JSON object")
    rh = receipt_hash(receipt)
    anchored, pinned = anchored or {}, pinned or {}
    roles: dict[str, tuple[str, ...]] = {}
    for role, name in ROLES:
        value = receipt.get(name)
        if isinstance(value, str) and is_did(value):
            roles[value] = (*roles.get(value, ()), role)
    sigs = receipt.get("signatures")
    if not isinstance(sigs, list) or not sigs:
        return ReceiptCheck(rh, (SignatureCheck(FAILED, "the receipt carries no signatures (OAP-CORE-1.0 §19.1: "
                                                        "receipts are signed by the agent and the tool)"),))
    if len(sigs) > MAX_SIGNATURES:
        return ReceiptCheck(rh, (SignatureCheck(FAILED, f"more than {MAX_SIGNATURES} signatures"),))
    message = receipt_signing_bytes(receipt)
    checks = [_check_one(i, sig, message, roles, anchored, pinned) for i, sig in enumerate(sigs)]
    signed_by = {split_did_url(s["by"])[0] for s in sigs if isinstance(s, dict) and isinstance(s.get("by"), str)}
    for role, name in ROLES:
        did = receipt.get(name)
        if role not in REQUIRED_ROLES:
            continue
        if name not in receipt:
            checks.append(SignatureCheck(FAILED, f"the receipt names no {role} ({name}; OAP-CORE-1.0 §19.1: it names "
                                                 "its agent and its tool, and both sign it)", roles=(role,)))
        elif not isinstance(did, str) or not is_did(did):
            checks.append(SignatureCheck(FAILED, f"{name} is not a DID (OAP-CORE-1.0 §19.1: the agent and the tool "
                                                 "are named by their DIDs, and both sign)", roles=(role,)))
        elif did not in signed_by:
            checks.append(SignatureCheck(MISSING, f"no signature by the {role} {did} (OAP-CORE-1.0 §19.1)",
                                         by=did, roles=roles.get(did, (role,))))
    return ReceiptCheck(rh, tuple(checks))


def entry_document(entry: bytes) -> tuple[str, Any] | None:
    """(signer DID, DID document) kept in a stored entry, when it keeps one."""
    try:
        obj = decode_entry(entry)
    except OAPError:
        return None
    did = needs_resolution(obj.get("signer"))
    if did is None or "did_document" not in obj:
        return None
    return did, obj["did_document"]


def verify_entry_signature(entry: bytes, *, pinned: Mapping[str, Any] | None = None) -> SignatureCheck | None:
    """The verdict on a stored entry's own signature (receipt and registry entries;
    None for the unsigned types and for data that is not an OAP entry)."""
    try:
        obj = decode_entry(entry)
    except OAPError:
        return None
    if obj["type"] not in ("receipt", "registry"):
        return None
    signer = obj.get("signer")
    by = signer if isinstance(signer, str) else None
    did = needs_resolution(signer)
    source = FROM_DID_KEY
    lookup = None
    if did is not None and "did_document" in obj and did not in (pinned or {}):
        source = FROM_ENTRY
    elif did is not None:  # a pinned document wins over the entry's kept copy
        if did not in (pinned or {}):
            return SignatureCheck(NOT_CHECKABLE, f"the entry keeps no DID document of {did} (it predates that) and "
                                                 "none is pinned", by=by)
        source = FROM_PINNED
        try:
            lookup = lookup_from([(did, (pinned or {})[did])])
        except OAPError as e:
            return SignatureCheck(NOT_CHECKABLE, f"pinned document: {e.message}", by=by)
    try:
        check_entry_signature(entry, lookup, pinned=source == FROM_PINNED)
    except OAPError as e:
        return SignatureCheck(FAILED, e.message, by=by, source=source)
    return SignatureCheck(VERIFIED, "verified", by=by, source=source)


# --- one bundle, as `oap-log verify` reports it ----------------------------------------------


@dataclass
class BundleCheck:
    """What verifying one .tlog-proof or anchors file found: `error` when inclusion (or
    the receipt's hash) does not verify; else the anchors and each signature's verdict."""

    error: str | None = None
    anchors: VerifiedAnchors | None = None
    entry_signature: SignatureCheck | None = None
    receipt: ReceiptCheck | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        if self.error is not None:
            return FAILED
        checks = [c for c in (self.entry_signature,) if c is not None]
        checks += list(self.receipt.signatures) if self.receipt is not None else []
        return verdict_of(checks)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": self.verdict == OK, "verdict": self.verdict}
        if self.error is not None:
            out["error"] = self.error
            return out
        assert self.anchors is not None
        out["logs"] = [{"origin": v.checkpoint.checkpoint.origin, "index": v.index,
                        "tree_size": v.checkpoint.checkpoint.size, "leaf_hash": b64enc(v.leaf_hash),
                        "witnesses": sorted(v.checkpoint.witnesses),
                        "post_quantum": sorted(v.checkpoint.post_quantum)}
                       for v in self.anchors.entries]
        out["not_counted"] = [{"log": where, "reason": reason} for where, reason in self.anchors.failures]
        if self.entry_signature is not None:
            out["signer"] = self.entry_signature.by
            out["signature_checked"] = self.entry_signature.status == VERIFIED
            out["entry_signature"] = self.entry_signature.to_json()
        if self.receipt is not None:
            out["receipt"] = self.receipt.to_json()
        return out


def verify_proof_file(data: bytes | str, policy: TrustPolicy, *, receipt: object | None = None,
                      salt: bytes | None = None, pinned: Mapping[str, Any] | None = None, entry: bytes | None = None,
                      leaf: bytes | None = None) -> BundleCheck:
    """Verify a .tlog-proof or anchors file offline: inclusion, the entry's signature and,
    with `receipt` (a parsed receipt), that the entry anchors it (a commitment to it,
    with `salt`) and every signature it carries. Never raises for a bad bundle: the
    problem is in the result. `entry` or `leaf` names what the bundles prove (a proof made
    by any C2SP log): their extra lines are then not read."""
    try:
        anchors = policy.verify_anchored(data, entry=entry, leaf=leaf, read_extra=entry is None and leaf is None)
        entry = anchors.entries[0].entry
        out = BundleCheck(anchors=anchors)
        if entry is not None:
            out.entry_signature = verify_entry_signature(entry, pinned=pinned)
        if receipt is not None:
            _check_anchors_receipt(entry, receipt, salt)
            kept = entry_document(entry) if entry is not None else None
            out.receipt = verify_receipt_signatures(receipt, anchored=dict([kept]) if kept else {}, pinned=pinned)
        return out
    except (OAPError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return BundleCheck(error=str(getattr(e, "message", e)))


def _check_anchors_receipt(entry: bytes | None, receipt: object, salt: bytes | None) -> None:
    if entry is None:
        raise VerificationError("bundle carries no entry to compare with the receipt")
    e = decode_entry(entry)
    rh = receipt_hash(receipt)
    if salt is not None:
        if e.get("type") != "commitment" or e["commitment"] != format_sha256(commitment_for(rh, salt)):
            raise VerificationError("the commitment does not open to this receipt with this salt")
    elif e.get("type") != "receipt" or e["receipt_hash"] != format_sha256(rh):
        raise VerificationError("the bundle anchors a different receipt")
