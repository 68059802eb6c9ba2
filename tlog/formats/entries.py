"""OAP log entries (docs/architecture.md §3.1): validate a submission, produce the stored bytes.

The log anchors four kinds of entry:

- `receipt`: the hash of an OAP receipt (OAP-CORE-1.0 §19.1, §19.3), signed by
  the anchoring party so a log cannot be filled with unattributable hashes;
- `commitment`: an opaque 32-byte commitment for Privileged Mode receipts
  (§18.4, §19.3: "commitments that do not reveal participants or contents"),
  so it carries nothing else at all;
- `conformance`: a whole conformance receipt (§31), validated by
  `tlog.formats.conformance`;
- `registry`: a signed OAP Registry commit (§32.6, docs/architecture.md §6).

A submission arrives as JSON or CBOR (App. D `application/oap+json`,
`application/oap+cbor`) with the same keys; `canonical_entry` validates it
and returns deterministic CBOR (RFC 8949 §4.2.1), the bytes the log stores and
hashes, so both forms of one entry yield one leaf. Errors are `InvalidInput`
(400 `invalid_input`, App. B) naming the field, or `TooLarge` (413).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

import cbor2

from tlog.errors import FormatError, InvalidInput, SignatureError, TooLarge
from tlog.formats.canonical import check_json_value, dcbor, jcs
from tlog.formats.conformance import signing_bytes as conformance_signing_bytes
from tlog.formats.conformance import validate_conformance
from tlog.formats.did import MAX_DID, did_key_from_public, parse_signer
from tlog.formats.diddoc import (
    KeyLookup,
    document_of,
    keys_from_document,
    lookup_from,
    needs_resolution,
    skip_resolved_signatures,
    split_did_url,
    verify_signed_by,
)
from tlog.formats.encoding import b64dec_either, b64enc
from tlog.formats.hashing import format_sha256, is_sha256_text, parse_sha256, sha256
from tlog.formats.keys import Ed25519Key, ed25519_signer
from tlog.formats.strict import loads_cbor
from tlog.formats.times import parse_utc

MAX_ENTRY_BYTES = 65535
"""tlog-tiles entry bundles prefix each entry with a 16-bit length."""

MAX_RECEIPT_ID_LEN = 256
MAX_SEQ = 2**53 - 1
"""Registry entries are signed over their JCS form, and RFC 8785 integers stop here."""

_GIT_ID = re.compile(r"[0-9a-f]{40}")
_URN = re.compile(r"urn:oap:[\x21-\x7e]+")


# --- field helpers -------------------------------------------------------------


def _fields(
    obj: dict[str, Any], kind: str, required: set[str], optional: frozenset[str] = frozenset()
) -> None:
    missing = sorted(required - obj.keys())
    if missing:
        raise InvalidInput(f"{kind} entry: missing field(s): {', '.join(missing)}")
    unknown = sorted(obj.keys() - required - optional)
    if unknown:
        raise InvalidInput(f"{kind} entry: unknown field(s): {', '.join(unknown)}")


def _sha256_field(value: object, field: str) -> bytes:
    digest = parse_sha256(value, field)
    if len(digest) != 32:  # bytes.fromhex skips whitespace; insist on 64 hex digits
        raise InvalidInput(f"{field} must be 'sha256:' followed by 64 hex digits")
    return digest


def _signer_and_signature(obj: dict[str, Any], kind: str) -> tuple[str, bytes]:
    signer = obj["signer"]
    if not isinstance(signer, str) or len(signer) > MAX_DID + 64:
        raise InvalidInput(f"{kind} entry: signer must be a DID or 'ed25519:<base64 key>'")
    sig_text = obj["signature"]
    if not isinstance(sig_text, str):
        raise InvalidInput(f"{kind} entry: signature must be a base64 string")
    try:
        sig = b64dec_either(sig_text, what="signature")
    except FormatError as e:
        raise InvalidInput(f"{kind} entry: {e}") from None
    if len(sig) != 64:
        raise InvalidInput(f"{kind} entry: signature must be base64 of 64 bytes")
    return signer, sig


def _verify(kind: str, signer: str, message: bytes, sig: bytes, lookup: KeyLookup | None) -> None:
    try:
        verify_signed_by(signer, message, sig, lookup)
    except SignatureError:
        raise InvalidInput(f"{kind} entry: signature does not verify for signer") from None
    except InvalidInput as e:
        raise type(e)(f"{kind} entry: signer: {e.message}") from None


def _signer_document(obj: dict[str, Any], kind: str, signer: str, lookup: KeyLookup | None) -> Any | None:
    """The DID document a signed entry keeps for its signer (docs/architecture.md §3.1):
    the one the log resolved (or was pinned) and checked the signature with, so that the
    entry verifies offline for as long as the log exists. None for did:key signers.

    A submission may carry `did_document` itself; it must then be exactly the document
    resolved here (a sender's own copy is never trusted). A client building the entry
    it expects (`skip_resolved_signatures`) keeps the copy it was given unchecked: the
    log checks it."""
    did = needs_resolution(signer)
    given = obj.get("did_document")
    if did is None:
        if "did_document" in obj:
            raise InvalidInput(f"{kind} entry: did_document is only for signers named by a DID other than did:key")
        return None
    try:
        doc = document_of(lookup, did)
    except InvalidInput as e:
        raise type(e)(f"{kind} entry: signer: {e.message}") from None
    if doc is not None:
        if "did_document" in obj and jcs(given) != jcs(doc):
            raise InvalidInput(f"{kind} entry: did_document is not the DID document of {did} as resolved by the log")
        return doc
    if "did_document" not in obj:
        return None
    if not isinstance(given, dict) or given.get("id") != did:
        raise InvalidInput(f"{kind} entry: did_document must be the DID document of {did}")
    if lookup is not skip_resolved_signatures:
        raise InvalidInput(f"{kind} entry: did_document is kept only by a log that resolves {did} itself")
    keys_from_document(did, given)  # a document with no usable key is refused here already
    return given


# --- per-type validation -------------------------------------------------------


def _receipt(obj: dict[str, Any], now: datetime, lookup: KeyLookup | None) -> dict[str, Any]:
    """Signature is Ed25519 over the raw 32-byte receipt hash; hex is lowercased."""
    _fields(obj, "receipt", {"type", "receipt_hash", "signer", "signature"},
            frozenset({"receipt_id", "timestamp", "did_document"}))
    digest = _sha256_field(obj["receipt_hash"], "receipt entry: receipt_hash")
    signer, sig = _signer_and_signature(obj, "receipt")
    out = {"type": "receipt", "receipt_hash": format_sha256(digest),
           "signer": obj["signer"], "signature": obj["signature"]}
    if "receipt_id" in obj:
        rid = obj["receipt_id"]
        if not isinstance(rid, str) or len(rid) > MAX_RECEIPT_ID_LEN or not _URN.fullmatch(rid):
            raise InvalidInput(
                f"receipt entry: receipt_id must be a 'urn:oap:' identifier of printable ASCII, "
                f"at most {MAX_RECEIPT_ID_LEN} characters"
            )
        out["receipt_id"] = rid
    if "timestamp" in obj:
        out["timestamp"] = _receipt_timestamp(obj["timestamp"])
    _verify("receipt", signer, digest, sig, lookup)
    doc = _signer_document(obj, "receipt", signer, lookup)
    if doc is not None:
        out["did_document"] = doc
    return out


def _receipt_timestamp(value: object) -> str:
    """The receipt's own `timestamp` (OAP-CORE-1.0 §19.1), copied by the anchoring client so
    the log can list a signer's receipts by time (§28.5). The signature covers only the
    receipt hash: whoever holds the receipt checks that its hash matches."""
    parse_utc(value, "receipt entry: timestamp")
    assert isinstance(value, str)
    return value


class ReceiptRow(NamedTuple):
    """A receipt entry in the log's index by signer (OAP-CORE-1.0 §28.5)."""

    signer: str  # did:key form for Ed25519 keys, so one key has one name; other DIDs as given
    index: int  # type: ignore[assignment]  # shadows tuple.index, which nothing here calls
    receipt_hash: bytes
    timestamp: str | None  # the receipt's own claim, when the anchoring client copied it
    signed_at: float | None  # that claim as Unix time, for range queries
    logged_at: float  # when the log committed it: what a key's thief cannot backdate


def signer_name(signer: str) -> str:
    """The one name of an entry's signer: the did:key of an Ed25519 key however it is spelled
    (`ed25519:<base64>` or a did:key URL with a fragment), else the DID without its fragment
    (another DID method: the DID, whichever of its keys signed). What the receipts index and
    monitors key a signer by (OAP-CORE-1.0 §28.5)."""
    if signer.startswith("did:key:") and "#" not in signer:
        return signer
    try:
        return did_key_from_public(parse_signer(split_did_url(signer)[0]))
    except InvalidInput:
        return split_did_url(signer)[0]


def receipt_rows(rows: Sequence[tuple[int, object, bytes]], logged_at: float) -> list[ReceiptRow]:
    """The index rows of the receipt entries among (index, _, stored entry) rows."""
    out = []
    for idx, _, data in rows:
        if b"receipt_hash" not in data:  # every receipt entry names it: others skip the decode
            continue
        obj = cbor2.loads(data)  # written by this log after validation: the strict parser is not needed
        if not isinstance(obj, dict) or obj.get("type") != "receipt":
            continue
        signer = signer_name(obj["signer"])
        ts = obj.get("timestamp")
        signed_at = datetime.fromisoformat(ts).timestamp() if ts is not None else None  # validated on entry
        out.append(ReceiptRow(signer, idx, bytes.fromhex(obj["receipt_hash"][7:]), ts, signed_at, logged_at))
    return out


def _commitment(obj: dict[str, Any], now: datetime, lookup: KeyLookup | None) -> dict[str, Any]:
    """Privileged Mode (§18.4): exactly the commitment, nothing that identifies anyone."""
    _fields(obj, "commitment", {"type", "commitment"})
    digest = _sha256_field(obj["commitment"], "commitment entry: commitment")
    return {"type": "commitment", "commitment": format_sha256(digest)}


def _conformance(obj: dict[str, Any], now: datetime, lookup: KeyLookup | None) -> dict[str, Any]:
    """Stored verbatim: the receipt's signatures cover its exact JCS form.

    The log anchors a receipt before its peers witness it (a witness checks
    the receipt's inclusion before signing, §31), so an L4/L5 receipt may
    carry fewer witness signatures than its level needs here; every signature
    present must verify. The registry enforces the witness count.
    """
    _fields(obj, "conformance", {"type", "receipt"})
    validate_conformance(obj["receipt"], now=now, require_witnesses=False, lookup=lookup)
    return {"type": "conformance", "receipt": obj["receipt"]}


def _registry(obj: dict[str, Any], now: datetime, lookup: KeyLookup | None) -> dict[str, Any]:
    """Signature is over jcs(entry without "signature" and "did_document"); git ids lowercase
    only, since the signature covers their exact spelling and cannot survive normalising."""
    _fields(obj, "registry", {"type", "commit", "tree", "seq", "signer", "signature"}, frozenset({"did_document"}))
    for field in ("commit", "tree"):
        if not isinstance(obj[field], str) or not _GIT_ID.fullmatch(obj[field]):
            raise InvalidInput(f"registry entry: {field} must be 40 lowercase hex digits")
    seq = obj["seq"]
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= MAX_SEQ:
        raise InvalidInput(f"registry entry: seq must be an integer from 0 to {MAX_SEQ}")
    signer, sig = _signer_and_signature(obj, "registry")
    out = {k: obj[k] for k in ("type", "commit", "tree", "seq", "signer", "signature")}
    _verify("registry", signer, jcs({k: v for k, v in out.items() if k != "signature"}), sig, lookup)
    doc = _signer_document(obj, "registry", signer, lookup)
    if doc is not None:
        out["did_document"] = doc
    return out


_VALIDATORS: dict[str, Callable[[dict[str, Any], datetime, KeyLookup | None], dict[str, Any]]] = {
    "receipt": _receipt,
    "commitment": _commitment,
    "conformance": _conformance,
    "registry": _registry,
}


# The bulk entry type, Privileged Mode commitments, has one fixed shape: its dCBOR
# is a constant prefix and the 71-byte "sha256:<lowercase hex>" text. Encoding it
# by concatenation skips the generic validator and encoder (~12 us of a 15 us
# entry). The prefix comes from `dcbor` itself; tests compare the two on every form.
_COMMITMENT_TEMPLATE = dcbor({"type": "commitment", "commitment": "sha256:" + "0" * 64})
_COMMITMENT_PREFIX = _COMMITMENT_TEMPLATE[:-64]


def _commitment_bytes(obj: dict) -> bytes | None:
    """dCBOR of a well-formed commitment submission, or None for the general path
    (which also produces the error message for a malformed one)."""
    if len(obj) != 2 or obj.get("type") != "commitment":
        return None
    c = obj.get("commitment")
    if not is_sha256_text(c):
        return None
    return _COMMITMENT_PREFIX + c[7:].lower().encode("ascii")


# The common submission as clients write it, compact JSON with the keys in this order;
# anything else (spacing, key order, escapes, other fields) takes the general path.
_COMMITMENT_JSON = re.compile(rb'\{"type":"commitment","commitment":"sha256:([0-9a-fA-F]{64})"\}')


def commitment_json_entry(body: bytes) -> bytes | None:
    """`canonical_entry(loads_json(body))` for a body that is exactly a compact commitment
    submission, without parsing it; None for any other body."""
    m = _COMMITMENT_JSON.fullmatch(body)
    return None if m is None else _COMMITMENT_PREFIX + m.group(1).lower()


# --- public API ----------------------------------------------------------------


def canonical_entry(obj: object, *, now: datetime | None = None, lookup: KeyLookup | None = None) -> bytes:
    """Validate a decoded submission and return its deterministic-CBOR entry bytes.

    `obj` comes from `loads_json` or `loads_cbor` (same keys in both). `now`
    (default: the current UTC time) decides conformance receipt expiry. `lookup`
    gives the keys of signers named by DIDs other than did:key (resolved before,
    by the caller: `tlog.formats.diddoc.dids_to_resolve` says which).
    Raises InvalidInput (400) naming the field, TooLarge (413) over
    MAX_ENTRY_BYTES.
    """
    if not isinstance(obj, dict):
        raise InvalidInput("entry must be an object")
    fast = _commitment_bytes(obj)
    if fast is not None:
        return fast
    check_json_value(obj)
    kind = obj.get("type")
    validator = _VALIDATORS.get(kind) if isinstance(kind, str) else None
    if validator is None:
        raise InvalidInput(f"entry type must be one of: {', '.join(_VALIDATORS)}")
    entry = validator(obj, now if now is not None else datetime.now(UTC), lookup)
    try:
        data = dcbor(entry)
    except InvalidInput as e:
        if "did_document" not in entry:
            raise
        raise InvalidInput(f"the DID document of {entry['signer']} cannot be kept in a log entry: "
                           f"{e.message}") from None
    if len(data) > MAX_ENTRY_BYTES:
        why = ""
        if "did_document" in entry:
            why = (f" (the signer's DID document, which the entry keeps so that it verifies offline, is "
                   f"{len(dcbor(entry['did_document']))} bytes of it)")
        raise TooLarge(f"entry is {len(data)} bytes; the limit is {MAX_ENTRY_BYTES}{why}", limit=MAX_ENTRY_BYTES)
    return data


def check_entry_signature(data: bytes, lookup: KeyLookup | None, *, pinned: bool = False) -> str | None:
    """The signer of a stored receipt or registry entry, once its signature is checked
    again, offline: with the DID document the entry keeps (the log's copy from when it
    was submitted), else with `lookup` (pinned documents) for DIDs other than did:key.
    With `pinned`, `lookup` is the caller's own copy and the only one used: the entry's
    kept copy is set aside (a relying party that pins does not trust the log for it).
    None for an unsigned entry type. What a bundle's reader checks beyond inclusion:
    that the entry the log anchored was signed by whom it names."""
    obj = decode_entry(data)
    if obj["type"] not in ("receipt", "registry"):
        return None
    did = needs_resolution(obj.get("signer"))
    if did is not None and "did_document" in obj:
        if pinned:
            obj = {k: v for k, v in obj.items() if k != "did_document"}
        else:
            lookup = lookup_from([(did, obj["did_document"])])
    _VALIDATORS[obj["type"]](obj, datetime.now(UTC), lookup)
    return str(obj["signer"])


def decode_entry(data: bytes) -> dict[str, Any]:
    """Stored entry bytes -> the JSON-shaped dict (for GET /v1/entries/<i>)."""
    obj = loads_cbor(data)
    if not isinstance(obj, dict) or obj.get("type") not in _VALIDATORS:
        raise InvalidInput("not an OAP log entry")
    return obj


def receipt_hash(receipt: object) -> bytes:
    """SHA-256 of the RFC 8785 form of the whole receipt as given (§19.1, §19.2).

    A receipt is a JSON object, but any JSON value hashes the same way: `oap-log verify
    --receipt` hashes the file it is given as it is."""
    return sha256(jcs(receipt))


def receipt_signing_bytes(receipt: dict[str, Any]) -> bytes:
    """What each signature in a receipt's `signatures` covers (OAP-CORE-1.0 §19.1): the
    RFC 8785 form of the receipt without `signatures`, the rule of every signed OAP
    object here (conformance receipts, registry records), so the agent and the tool can
    sign in either order. The receipt hash covers the whole receipt, signatures included."""
    return conformance_signing_bytes(receipt)


def commitment_for(receipt_hash: bytes, salt: bytes) -> bytes:
    """SHA-256(receipt_hash || salt): hides the receipt hash (§18.4, §19.3).

    The 32-byte random salt stops anyone confirming a guessed receipt; keeping
    it lets its holder later open the commitment.
    """
    if len(receipt_hash) != 32:
        raise InvalidInput("receipt_hash must be 32 bytes")
    if len(salt) != 32:
        raise InvalidInput("salt must be 32 bytes")
    return sha256(receipt_hash + salt)


def receipt_entry(receipt_hash: bytes, seed: Ed25519Key, receipt_id: str | None = None,
                  timestamp: str | None = None) -> dict[str, Any]:
    """Build a signed `receipt` submission (signer as did:key)."""
    if len(receipt_hash) != 32:
        raise InvalidInput("receipt_hash must be 32 bytes")
    entry: dict[str, Any] = {
        "type": "receipt",
        "receipt_hash": format_sha256(receipt_hash),
        "signer": did_key_from_public(ed25519_signer(seed).public),
        "signature": b64enc(ed25519_signer(seed).sign(receipt_hash)),
    }
    if receipt_id is not None:
        entry["receipt_id"] = receipt_id
    if timestamp is not None:
        entry["timestamp"] = timestamp
    return entry


def commitment_entry(commitment: bytes) -> dict[str, Any]:
    """Build a `commitment` submission."""
    if len(commitment) != 32:
        raise InvalidInput("commitment must be 32 bytes")
    return {"type": "commitment", "commitment": format_sha256(commitment)}


def registry_entry(commit: str, tree: str, seq: int, seed: Ed25519Key) -> dict[str, Any]:
    """Build a signed `registry` submission (signer as did:key)."""
    entry: dict[str, Any] = {
        "type": "registry", "commit": commit, "tree": tree, "seq": seq,
        "signer": did_key_from_public(ed25519_signer(seed).public),
    }
    entry["signature"] = b64enc(ed25519_signer(seed).sign(jcs(entry)))
    return entry
