"""OAP log entries (DESIGN §3.1): validate a submission, produce the stored bytes.

The log anchors four kinds of entry:

- `receipt`: the hash of an OAP receipt (OAP-CORE-1.0 §19.1, §19.3), signed by
  the anchoring party so a log cannot be filled with unattributable hashes;
- `commitment`: an opaque 32-byte commitment for Privileged Mode receipts
  (§18.4, §19.3: "commitments that do not reveal participants or contents"),
  so it carries nothing else at all;
- `conformance`: a whole conformance receipt (§31), validated by
  `tlog.formats.conformance`;
- `registry`: a signed OAP Registry commit (§32.6, DESIGN §6).

A submission arrives as JSON or CBOR (App. D `application/oap+json`,
`application/oap+cbor`) with the same keys; `canonical_entry` validates it
and returns deterministic CBOR (RFC 8949 §4.2.1), the bytes the log stores and
hashes, so both forms of one entry yield one leaf. Errors are `InvalidInput`
(400 `invalid_input`, App. B) naming the field, or `TooLarge` (413).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tlog.errors import FormatError, InvalidInput, SignatureError, TooLarge
from tlog.formats import ed25519
from tlog.formats.canonical import check_json_value, dcbor, jcs
from tlog.formats.conformance import validate_conformance
from tlog.formats.did import did_key_from_public, parse_signer
from tlog.formats.encoding import b64dec, b64enc
from tlog.formats.hashing import format_sha256, is_sha256_text, parse_sha256, sha256
from tlog.formats.strict import loads_cbor

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


def _signer_and_signature(obj: dict[str, Any], kind: str) -> tuple[bytes, bytes]:
    try:
        pub = parse_signer(obj["signer"])
    except InvalidInput as e:
        raise InvalidInput(f"{kind} entry: signer: {e}") from None
    sig_text = obj["signature"]
    if not isinstance(sig_text, str):
        raise InvalidInput(f"{kind} entry: signature must be a base64 string")
    try:
        sig = b64dec(sig_text, what="signature")
    except FormatError as e:
        raise InvalidInput(f"{kind} entry: {e}") from None
    if len(sig) != 64:
        raise InvalidInput(f"{kind} entry: signature must be base64 of 64 bytes")
    return pub, sig


def _verify(kind: str, pub: bytes, message: bytes, sig: bytes) -> None:
    try:
        ed25519.verify(pub, message, sig)
    except SignatureError:
        raise InvalidInput(f"{kind} entry: signature does not verify for signer") from None


# --- per-type validation -------------------------------------------------------


def _receipt(obj: dict[str, Any], now: datetime) -> dict[str, Any]:
    """Signature is Ed25519 over the raw 32-byte receipt hash; hex is lowercased."""
    _fields(obj, "receipt", {"type", "receipt_hash", "signer", "signature"}, frozenset({"receipt_id"}))
    digest = _sha256_field(obj["receipt_hash"], "receipt entry: receipt_hash")
    pub, sig = _signer_and_signature(obj, "receipt")
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
    _verify("receipt", pub, digest, sig)
    return out


def _commitment(obj: dict[str, Any], now: datetime) -> dict[str, Any]:
    """Privileged Mode (§18.4): exactly the commitment, nothing that identifies anyone."""
    _fields(obj, "commitment", {"type", "commitment"})
    digest = _sha256_field(obj["commitment"], "commitment entry: commitment")
    return {"type": "commitment", "commitment": format_sha256(digest)}


def _conformance(obj: dict[str, Any], now: datetime) -> dict[str, Any]:
    """Stored verbatim: the receipt's signatures cover its exact JCS form.

    The log anchors a receipt before its peers witness it (a witness checks
    the receipt's inclusion before signing, §31), so an L4/L5 receipt may
    carry fewer witness signatures than its level needs here; every signature
    present must verify. The registry enforces the witness count.
    """
    _fields(obj, "conformance", {"type", "receipt"})
    validate_conformance(obj["receipt"], now=now, require_witnesses=False)
    return {"type": "conformance", "receipt": obj["receipt"]}


def _registry(obj: dict[str, Any], now: datetime) -> dict[str, Any]:
    """Signature is Ed25519 over jcs(entry without "signature"); git ids lowercase only,
    since the signature covers their exact spelling and cannot survive normalising."""
    _fields(obj, "registry", {"type", "commit", "tree", "seq", "signer", "signature"})
    for field in ("commit", "tree"):
        if not isinstance(obj[field], str) or not _GIT_ID.fullmatch(obj[field]):
            raise InvalidInput(f"registry entry: {field} must be 40 lowercase hex digits")
    seq = obj["seq"]
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= MAX_SEQ:
        raise InvalidInput(f"registry entry: seq must be an integer from 0 to {MAX_SEQ}")
    pub, sig = _signer_and_signature(obj, "registry")
    out = {k: obj[k] for k in ("type", "commit", "tree", "seq", "signer", "signature")}
    _verify("registry", pub, jcs({k: v for k, v in out.items() if k != "signature"}), sig)
    return out


_VALIDATORS: dict[str, Callable[[dict[str, Any], datetime], dict[str, Any]]] = {
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


def canonical_entry(obj: object, *, now: datetime | None = None) -> bytes:
    """Validate a decoded submission and return its deterministic-CBOR entry bytes.

    `obj` comes from `loads_json` or `loads_cbor` (same keys in both). `now`
    (default: the current UTC time) decides conformance receipt expiry.
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
    entry = validator(obj, now if now is not None else datetime.now(UTC))
    data = dcbor(entry)
    if len(data) > MAX_ENTRY_BYTES:
        raise TooLarge(f"entry is {len(data)} bytes; the limit is {MAX_ENTRY_BYTES}",
                       limit=MAX_ENTRY_BYTES)
    return data


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


def receipt_entry(receipt_hash: bytes, seed: bytes, receipt_id: str | None = None) -> dict[str, Any]:
    """Build a signed `receipt` submission (signer as did:key)."""
    if len(receipt_hash) != 32:
        raise InvalidInput("receipt_hash must be 32 bytes")
    entry: dict[str, Any] = {
        "type": "receipt",
        "receipt_hash": format_sha256(receipt_hash),
        "signer": did_key_from_public(ed25519.public_from_seed(seed)),
        "signature": b64enc(ed25519.sign(seed, receipt_hash)),
    }
    if receipt_id is not None:
        entry["receipt_id"] = receipt_id
    return entry


def commitment_entry(commitment: bytes) -> dict[str, Any]:
    """Build a `commitment` submission."""
    if len(commitment) != 32:
        raise InvalidInput("commitment must be 32 bytes")
    return {"type": "commitment", "commitment": format_sha256(commitment)}


def registry_entry(commit: str, tree: str, seq: int, seed: bytes) -> dict[str, Any]:
    """Build a signed `registry` submission (signer as did:key)."""
    entry: dict[str, Any] = {
        "type": "registry", "commit": commit, "tree": tree, "seq": seq,
        "signer": did_key_from_public(ed25519.public_from_seed(seed)),
    }
    entry["signature"] = b64enc(ed25519.sign(seed, jcs(entry)))
    return entry
