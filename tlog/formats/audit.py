"""Audit attestations of L5 conformance receipts (OAP-CORE-1.0 §31 L5: "an independent
third-party security audit (SOC 2 Type II, ISO 27001, or an equivalent attestation
published in machine-readable form)"; docs/architecture.md §5).

A receipt does not carry the audit report; it carries a signed, hashed reference to it:

    "audit": {
      "standard":  "SOC 2 Type II" | "ISO 27001" | ...   what was audited against
      "uri":       where the machine-readable attestation is published
      "digest":    "sha256:<64 hex>" of the attestation document's bytes
      "auditor":   the auditor's DID
      "signature": the auditor's signature (base64 of 64 bytes) over attestation_bytes()
      "anchor":    a .tlog-proof (or an oap-anchors/v1 file) of a `receipt` log entry
                   whose receipt_hash is `digest`, signed by the auditor
    }

The auditor signs `jcs({"type": "OAPAuditAttestation", "subject": <the receipt's subject>,
"standard", "uri", "digest", "auditor"})`: naming the subject stops one implementation
reusing another's audit. `anchor` is not covered by that signature (it is made after the
document is published) but binds itself: its entry must anchor exactly `digest` and be
signed by the auditor.

What this pure module checks: the schema, the auditor's signature, and that the anchor's
entry is that auditor-signed hash. What needs state is checked by the registry: that the
anchor is included in a log its trust policy accepts, and that the auditor is independent
of the subject (`tlog.formats.independence`). Nobody fetches `uri`: a relying party that
reads the report compares its SHA-256 with `digest`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tlog.errors import FormatError, InvalidInput, SignatureError
from tlog.formats.anchors import parse_anchors
from tlog.formats.canonical import jcs
from tlog.formats.did import RAW_KEY_PREFIX, did_key_from_public, is_did, parse_signer
from tlog.formats.diddoc import KeyLookup, key_did, split_did_url, verify_signed_by
from tlog.formats.encoding import b64dec_either, b64enc
from tlog.formats.hashing import format_sha256, parse_sha256
from tlog.formats.keys import Ed25519Key, ed25519_signer
from tlog.formats.strict import loads_cbor

__all__ = ["AUDIT_FIELDS", "Audit", "attestation_bytes", "check_audit", "sign_audit"]

AUDIT_FIELDS = frozenset({"standard", "uri", "digest", "auditor", "signature", "anchor"})
_SIGNED = ("standard", "uri", "digest", "auditor")
MAX_ANCHOR = 32 * 1024
MAX_URI = 512
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[\x21-\x7e]+")
_STANDARD = re.compile(r"[\x20-\x7e]{1,64}")


@dataclass(frozen=True)
class Audit:
    """A checked audit reference: `entry` is the anchored log entry (dCBOR bytes)."""

    standard: str
    uri: str
    digest: bytes
    auditor: str
    anchor: str
    entry: bytes
    key: str | None = None  # the did:key of the Ed25519 key that made the auditor's signature (None: another curve)


def attestation_bytes(subject: str, audit: dict[str, Any]) -> bytes:
    """What the auditor signs."""
    return jcs({"type": "OAPAuditAttestation", "subject": subject, **{k: audit[k] for k in _SIGNED}})


def sign_audit(subject: str, reference: dict[str, Any], seed: Ed25519Key) -> dict[str, Any]:
    """`reference` (standard, uri, digest, anchor) signed by the auditor key `seed`, whose
    did:key becomes `auditor`."""
    out = {k: v for k, v in reference.items() if k in ("standard", "uri", "digest", "anchor")}
    out["auditor"] = did_key_from_public(ed25519_signer(seed).public)
    out["signature"] = b64enc(ed25519_signer(seed).sign(attestation_bytes(subject, out)))
    return out


def _same_principal(signer: str, auditor: str) -> bool:
    if signer.startswith(RAW_KEY_PREFIX):
        try:
            return did_key_from_public(parse_signer(signer)) == auditor
        except InvalidInput:
            return False
    return split_did_url(signer)[0] == auditor


def check_audit(audit: object, subject: str, lookup: KeyLookup | None, *, where: str = "audit") -> Audit:
    """Schema, the auditor's signature and the anchor's binding (see the module doc)."""
    if not isinstance(audit, dict):
        raise InvalidInput(f"{where} must be an object")
    if set(audit) != AUDIT_FIELDS:
        raise InvalidInput(f"{where} must have exactly the fields {', '.join(sorted(AUDIT_FIELDS))}")
    standard, uri, auditor, anchor = audit["standard"], audit["uri"], audit["auditor"], audit["anchor"]
    if not isinstance(standard, str) or not _STANDARD.fullmatch(standard):
        raise InvalidInput(f"{where}: standard must be 1 to 64 printable ASCII characters (e.g. 'SOC 2 Type II')")
    if not isinstance(uri, str) or len(uri) > MAX_URI or not _URI.fullmatch(uri):
        raise InvalidInput(f"{where}: uri must be an absolute URI of at most {MAX_URI} characters")
    digest = parse_sha256(audit["digest"], f"{where}: digest")
    if len(digest) != 32 or audit["digest"] != format_sha256(digest):
        raise InvalidInput(f"{where}: digest must be 'sha256:' followed by 64 lowercase hex digits")
    if not is_did(auditor) or "#" in auditor:
        raise InvalidInput(f"{where}: auditor must be a DID")
    try:
        raw = b64dec_either(audit["signature"], what="signature")
    except FormatError as e:
        raise InvalidInput(f"{where}: {e.message}") from None
    if len(raw) != 64:
        raise InvalidInput(f"{where}: signature must be base64 of a 64-byte signature")
    try:
        signed_with = verify_signed_by(auditor, attestation_bytes(subject, audit), raw, lookup)
    except SignatureError:
        raise InvalidInput(f"{where}: the auditor's signature by {auditor} does not verify for subject "
                           f"{subject}") from None
    except InvalidInput as e:
        raise type(e)(f"{where}: auditor: {e.message}") from None
    if not isinstance(anchor, str) or len(anchor) > MAX_ANCHOR:
        raise InvalidInput(f"{where}: anchor must be a .tlog-proof (or anchors file) of at most {MAX_ANCHOR} bytes")
    try:
        bundles = parse_anchors(anchor)
    except FormatError as e:
        raise InvalidInput(f"{where}: anchor: {e.message}") from None
    entry = bundles[0].extra
    if entry is None or any(b.extra != entry for b in bundles):
        raise InvalidInput(f"{where}: anchor must carry its log entry (the tlog-proof 'extra' line), the same in "
                           "every bundle")
    try:
        _check_anchored_entry(entry, digest, auditor, lookup)
    except InvalidInput as e:
        raise InvalidInput(f"{where}: anchor: {e.message}") from None
    return Audit(standard, uri, digest, auditor, anchor, entry, key_did(signed_with))


def _check_anchored_entry(entry: bytes, digest: bytes, auditor: str, lookup: KeyLookup | None) -> None:
    """The anchored entry is a `receipt` entry (docs/architecture.md §3.1: its signature is
    over the raw 32-byte receipt hash) of `digest`, signed by the auditor. (Read here, not
    with `tlog.formats.entries`, which imports this module through the conformance check.)"""
    obj = loads_cbor(entry)
    if not isinstance(obj, dict) or obj.get("type") != "receipt" or obj.get("receipt_hash") != format_sha256(digest):
        raise InvalidInput("the anchored entry is not a receipt entry of the attestation's digest")
    signer, sig_text = obj.get("signer"), obj.get("signature")
    if not isinstance(signer, str) or not _same_principal(signer, auditor):
        raise InvalidInput(f"the anchored entry is signed by {signer}, not by the auditor {auditor}")
    try:
        sig = b64dec_either(sig_text, what="signature")
        if len(sig) != 64:
            raise InvalidInput("the anchored entry's signature is not 64 bytes")
        verify_signed_by(signer, digest, sig, lookup)
    except SignatureError:
        raise InvalidInput(f"the anchored entry's signature by {signer} does not verify") from None
