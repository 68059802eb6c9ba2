"""Conformance receipts for the tests: did:web subjects with their DID documents (pinned
or served by tests/support/didhosts.py), audit attestations anchored in an in-memory log
or a real one, and the VC 2.0 form."""
from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import base58

from tlog.formats import ed25519
from tlog.formats.audit import attestation_bytes, sign_audit
from tlog.formats.conformance import sign_conformance, witness_signature
from tlog.formats.did import did_key_from_public
from tlog.formats.diddoc import KeyLookup, lookup_from
from tlog.formats.encoding import b64enc
from tlog.formats.entries import canonical_entry, receipt_entry
from tlog.formats.hashing import format_sha256, leaf_hash, sha256
from tlog.formats.proofbundle import ProofBundle
from tlog.formats.times import format_utc
from tlog.merkle.tree import memory_view

from tests.support.witness import MemLog

AUDIT_DOCUMENT = b'{"report": "SOC 2 Type II", "period": "2025", "opinion": "unqualified"}'


def did(seed: bytes) -> str:
    return did_key_from_public(ed25519.public_from_seed(seed))


def multikey(seed: bytes) -> str:
    return "z" + base58.b58encode(b"\xed\x01" + ed25519.public_from_seed(seed)).decode()


def web_document(web_did: str, seeds: dict[str, bytes], *, also_known_as: list[str] | None = None,
                 controller: str | None = None) -> dict[str, Any]:
    """A DID document listing Ed25519 keys (fragment -> seed) for assertions."""
    doc: dict[str, Any] = {
        "@context": ["https://www.w3.org/ns/did/v1"], "id": web_did,
        "verificationMethod": [{"id": f"{web_did}#{f}", "type": "Multikey", "controller": controller or web_did,
                                "publicKeyMultibase": multikey(s)} for f, s in seeds.items()],
        "assertionMethod": [f"{web_did}#{f}" for f in seeds],
    }
    if also_known_as:
        doc["alsoKnownAs"] = also_known_as
    return doc


def memlog_bundle(entry: bytes, log: MemLog) -> str:
    """A .tlog-proof of `entry` at index 1 of a small in-memory log (signed by `log`'s key)."""
    entries = [b"\x00" * 8, entry, b"\x01" * 8, b"\x02" * 8]
    log.leaves = [leaf_hash(e) for e in entries]
    proof = tuple(memory_view(log.leaves).inclusion_proof(1))
    return ProofBundle(index=1, proof=proof, checkpoint=log.checkpoint(len(entries)), extra=entry).to_text()


def audit_entry(auditor_seed: bytes, document: bytes = AUDIT_DOCUMENT) -> dict[str, Any]:
    """The log entry an auditor submits to anchor its attestation document."""
    return receipt_entry(sha256(document), auditor_seed)


def audit_for(subject: str, auditor_seed: bytes, *, anchor: str | None = None, log: MemLog | None = None,
              document: bytes = AUDIT_DOCUMENT, lookup: KeyLookup | None = None) -> dict[str, Any]:
    """A signed audit reference for `subject`; anchored in `anchor` (a real log's bundle of
    `audit_entry`) or else in an in-memory log."""
    if anchor is None:
        entry = canonical_entry(audit_entry(auditor_seed, document), lookup=lookup)
        anchor = memlog_bundle(entry, log or MemLog(origin="audit.example/log", seed=bytes([77]) * 32))
    return sign_audit(subject, {"standard": "SOC 2 Type II", "uri": "https://auditor.example/reports/impl.json",
                                "digest": format_sha256(sha256(document)), "anchor": anchor}, auditor_seed)


def web_audit_for(subject: str, auditor: WebSubject, *, document: bytes = AUDIT_DOCUMENT) -> dict[str, Any]:
    """A signed audit reference for `subject` by a did:web auditor (its #k key), anchored in an
    in-memory log by an entry the auditor signed as its did:web."""
    entry = {**audit_entry(auditor.seed, document), "signer": auditor.key_id}
    anchor = memlog_bundle(canonical_entry(entry, lookup=auditor.lookup()),
                           MemLog(origin="audit.example/log", seed=bytes([77]) * 32))
    out = {"standard": "SOC 2 Type II", "uri": "https://auditor.example/reports/impl.json",
           "digest": format_sha256(sha256(document)), "anchor": anchor, "auditor": auditor.did}
    out["signature"] = b64enc(ed25519.sign(auditor.seed, attestation_bytes(subject, out)))
    return out


class WebSubject:
    """A did:web implementation with one Ed25519 key "#k" and a pinned document."""

    def __init__(self, web_did: str, seed: bytes, **doc_kw: Any) -> None:
        self.did, self.seed = web_did, seed
        self.document = web_document(web_did, {"k": seed}, **doc_kw)

    @property
    def key_id(self) -> str:
        return f"{self.did}#k"

    def lookup(self, *more: tuple[str, Any]) -> KeyLookup:
        return lookup_from([(self.did, self.document), *more])


def web_receipt(subject: WebSubject, level: str = "L3", *, witnesses: tuple[WebSubject | bytes, ...] = (),
                audit: dict[str, Any] | None = None, issued: datetime | None = None,
                valid: timedelta = timedelta(days=30)) -> dict[str, Any]:
    """A compact receipt self-signed by `subject` (#k) and by each witness: a WebSubject signs
    as its #k key, a seed as its did:key."""
    issued = issued or datetime.now(UTC).replace(microsecond=0)
    body: dict[str, Any] = {
        "id": f"urn:oap:conformance:{uuid.uuid4()}", "subject": subject.did, "level": level,
        "profile": "non-commercial" if level.endswith("-NC") else "standard", "suite": {"name": "oap-test-suite", "version": "1.0.0"},
        "results_digest": "sha256:" + "ab" * 32, "issued_at": format_utc(issued),
        "expires_at": format_utc(issued + valid)}
    if audit is not None:
        body["audit"] = audit
    signed = sign_conformance(body, subject.seed, by=subject.key_id)
    for w in witnesses:
        if isinstance(w, WebSubject):
            signed["signatures"].append({**witness_signature(signed, w.seed), "by": w.key_id})
        else:
            signed["signatures"].append(witness_signature(signed, w))
    return signed
