"""OAP Conformance Receipts (OAP-CORE-1.0 §31, §5.2 OAPConformance; docs/architecture.md §5).

A conformance receipt states the level an implementation reached. There is no
central issuer (§31), so the receipt carries its own evidence: a self signature
by the implementation's DID key and, for L4/L5, signatures of independent peer
witnesses. Everything here is checkable offline because every signer is a
did:key (§5.1).

Signed bytes: every signature (self and witness) is Ed25519 over
`jcs(receipt without "signatures")` (RFC 8785), so signatures can be collected
in any order and added without invalidating one another.

Not checked here (needs state this pure module does not have): that each
witness itself holds a valid L4/L5 receipt (§31 L5) and that the receipt is
anchored in the registry. The witness service and registry enforce those.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from tlog.errors import FormatError, InvalidInput, SignatureError
from tlog.formats import ed25519
from tlog.formats.canonical import check_json_value, jcs
from tlog.formats.did import did_key_from_public, is_did
from tlog.formats.diddoc import ED25519, P256, SECP256K1, UNCHECKED, KeyLookup, split_did_url, verify_signed_by
from tlog.formats.encoding import b64dec_either, b64enc
from tlog.formats.hashing import parse_sha256
from tlog.formats.times import parse_utc

LEVELS = frozenset({"L0", "L1", "L2", "L3", "L4", "L5", "L1-NC", "L3-NC"})
MIN_WITNESSES = {"L4": 1, "L5": 3}
"""§31: L4 needs at least one, L5 at least three independent peer witnesses."""

MAX_VALIDITY = timedelta(days=90)
"""docs/architecture.md §5: expires_at <= issued_at + 90 days, so a stale claim ages out."""

MAX_CLOCK_SKEW = timedelta(minutes=5)
"""A receipt may be issued slightly in the future of our clock, not more."""

ID_PREFIX = "urn:oap:conformance:"
MAX_ID_LEN = 256
ALG = "EdDSA"
ALGS = {ED25519: "EdDSA", P256: "ES256", SECP256K1: "ES256K"}
"""The JOSE name a signature's `alg` must give for the key that made it (App. C)."""

_FIELDS = frozenset(
    {"id", "subject", "level", "profile", "suite", "results_digest",
     "issued_at", "expires_at", "signatures"}
)
_SIG_FIELDS = frozenset({"by", "alg", "value"})
_URN = re.compile(r"urn:oap:[\x21-\x7e]+")


@dataclass(frozen=True)
class ConformanceReceipt:
    """The facts a verified receipt establishes (the signatures have been checked)."""

    id: str
    subject: str
    level: str
    issued_at: datetime
    expires_at: datetime
    witnesses: tuple[str, ...]


def signing_bytes(receipt: dict[str, Any]) -> bytes:
    """The bytes every signature covers: JCS of the receipt minus "signatures"."""
    return jcs({k: v for k, v in receipt.items() if k != "signatures"})


def validate_conformance(receipt: object, *, now: datetime, require_witnesses: bool = True,
                         lookup: KeyLookup | None = None) -> ConformanceReceipt:
    """Check a conformance receipt completely; raise InvalidInput naming the problem.

    Schema (exactly the fields of docs/architecture.md §5, unknown fields refused because the
    log stores the receipt verbatim), time window, the subject's self signature,
    witness signatures (distinct DIDs other than the subject, each verifying) and
    the level's witness minimum. `now` must be timezone-aware. Subjects and
    witnesses named by DIDs other than did:key need `lookup` (tlog.formats.diddoc).
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if not isinstance(receipt, dict):
        raise InvalidInput("conformance receipt must be an object")
    check_json_value(receipt)
    missing = sorted(_FIELDS - receipt.keys())
    if missing:
        raise InvalidInput(f"conformance receipt: missing field(s): {', '.join(missing)}")
    unknown = sorted(receipt.keys() - _FIELDS)
    if unknown:
        raise InvalidInput(f"conformance receipt: unknown field(s): {', '.join(unknown)}")

    rid = receipt["id"]
    if not isinstance(rid, str) or not rid.startswith(ID_PREFIX) or len(rid) > MAX_ID_LEN \
            or len(rid) == len(ID_PREFIX) or not _URN.fullmatch(rid):
        raise InvalidInput(f"conformance receipt: id must be '{ID_PREFIX}<id>' "
                           f"(printable ASCII, at most {MAX_ID_LEN} chars)")
    subject = receipt["subject"]
    if not is_did(subject) or "#" in subject:
        raise InvalidInput("conformance receipt: subject must be a DID")
    level = receipt["level"]
    if not isinstance(level, str) or level not in LEVELS:
        raise InvalidInput(f"conformance receipt: level must be one of {', '.join(sorted(LEVELS))}")
    if not isinstance(receipt["profile"], str) or not receipt["profile"]:
        raise InvalidInput("conformance receipt: profile must be a non-empty string")
    suite = receipt["suite"]
    if not isinstance(suite, dict) or suite.keys() != {"name", "version"} \
            or not all(isinstance(v, str) and v for v in suite.values()):
        raise InvalidInput("conformance receipt: suite must be {\"name\": <string>, \"version\": <string>}")
    digest = parse_sha256(receipt["results_digest"], "conformance receipt: results_digest")
    if len(digest) != 32:  # bytes.fromhex skips spaces; insist on 64 hex digits
        raise InvalidInput("conformance receipt: results_digest must be 'sha256:' followed by 64 hex digits")

    issued_at = parse_utc(receipt["issued_at"], "conformance receipt: issued_at")
    expires_at = parse_utc(receipt["expires_at"], "conformance receipt: expires_at")
    if expires_at <= issued_at:
        raise InvalidInput("conformance receipt: expires_at must be after issued_at")
    if expires_at - issued_at > MAX_VALIDITY:
        raise InvalidInput("conformance receipt: validity period exceeds 90 days")
    if issued_at > now + MAX_CLOCK_SKEW:
        raise InvalidInput("conformance receipt: issued_at is in the future")
    if now >= expires_at:
        raise InvalidInput("conformance receipt: expired")

    witnesses = _check_signatures(receipt, subject, lookup)
    needed = MIN_WITNESSES.get(level, 0) if require_witnesses else 0
    if len(witnesses) < needed:
        raise InvalidInput(
            f"conformance receipt: level {level} needs at least {needed} witness signature(s), has {len(witnesses)}"
        )
    return ConformanceReceipt(rid, subject, level, issued_at, expires_at, witnesses)


def _check_signatures(receipt: dict[str, Any], subject: str, lookup: KeyLookup | None) -> tuple[str, ...]:
    sigs = receipt["signatures"]
    if not isinstance(sigs, list) or not sigs:
        raise InvalidInput("conformance receipt: signatures must be a non-empty list")
    message = signing_bytes(receipt)
    self_sigs = 0
    witnesses: list[str] = []
    for i, sig in enumerate(sigs):
        where = f"conformance receipt: signatures[{i}]"
        if not isinstance(sig, dict) or sig.keys() != _SIG_FIELDS:
            raise InvalidInput(f"{where} must be {{\"by\", \"alg\", \"value\"}} exactly")
        if sig["alg"] not in ALGS.values():
            raise InvalidInput(f"{where}: alg must be one of {', '.join(ALGS.values())}")
        by = sig["by"]
        if not isinstance(by, str) or not is_did(split_did_url(by)[0]):
            raise InvalidInput(f"{where}: by must be a DID")
        who = split_did_url(by)[0]  # a DID URL names one key of the DID: the witness is the DID
        try:
            value = b64dec_either(sig["value"], what="value")
        except FormatError as e:
            raise InvalidInput(f"{where}: {e}") from None
        if len(value) != 64:
            raise InvalidInput(f"{where}: value must be base64 of a 64-byte signature")
        try:
            key = verify_signed_by(by, message, value, lookup)
        except SignatureError:
            what = "self signature" if who == subject else f"witness signature by {by}"
            raise InvalidInput(f"{where}: {what} does not verify") from None
        except InvalidInput as e:
            raise type(e)(f"{where}: by: {e.message}") from None
        if key.curve != UNCHECKED and ALGS[key.curve] != sig["alg"]:
            raise InvalidInput(f"{where}: alg must be {ALGS[key.curve]} for the key that signed")
        if who == subject:
            self_sigs += 1
        elif who in witnesses:
            raise InvalidInput(f"{where}: duplicate witness {who}")
        else:
            witnesses.append(who)
    if self_sigs != 1:
        raise InvalidInput(f"conformance receipt: needs exactly one self signature by the subject, has {self_sigs}")
    return tuple(witnesses)


def _signature(receipt: dict[str, Any], seed: bytes) -> dict[str, str]:
    did = did_key_from_public(ed25519.public_from_seed(seed))
    return {"by": did, "alg": ALG, "value": b64enc(ed25519.sign(seed, signing_bytes(receipt)))}


def sign_conformance(unsigned: dict[str, Any], seed: bytes) -> dict[str, Any]:
    """Return a copy of `unsigned` self-signed by `seed` (the subject's key).

    Any existing "signatures" member is replaced by the one self signature; add
    witness signatures (`witness_signature`) to the result's list afterwards.
    The subject must be the did:key of `seed`, or the receipt would never verify.
    """
    body = {k: v for k, v in unsigned.items() if k != "signatures"}
    sig = _signature(body, seed)
    if body.get("subject") != sig["by"]:
        raise InvalidInput("sign_conformance: subject is not the did:key of the signing key")
    return {**body, "signatures": [sig]}


def witness_signature(receipt: dict[str, Any], seed: bytes) -> dict[str, str]:
    """A peer witness's {"by", "alg", "value"} over `receipt` (minus its signatures).

    Signing is all this does: the witness service must validate the receipt
    (and its own standing, §31) before calling it.
    """
    return _signature(receipt, seed)
