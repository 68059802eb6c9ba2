"""OAP Conformance Receipts (OAP-CORE-1.0 §31, §5.2 OAPConformance; docs/architecture.md §5).

A conformance receipt states the level an implementation reached. There is no
central issuer (§31), so the receipt carries its own evidence: a self signature
by the implementation's DID key and, for L4/L5, signatures of independent peer
witnesses. Two forms are accepted, with the same meaning field by field:

- compact: the receipt's own JSON; every signature (self and witness) is over
  `jcs(receipt without "signatures")` (RFC 8785), so signatures can be collected
  in any order and added without invalidating one another;
- W3C Verifiable Credential 2.0 (§5.2): type ["VerifiableCredential",
  "OAPConformance"], issuer = credentialSubject.id = the subject, with a Data
  Integrity proof set (`eddsa-jcs-2022`, `tlog.formats.dataintegrity`): the
  subject's proof and one proof per witness.

Checked here, offline: schema, times, every signature, the §31 level rules that need
no registry: the L3+ publisher check (the subject is a did:web whose document, fetched
over HTTPS from the subject's own domain, lists the key of the self signature; a
did:key or did:plc names no publisher and fails), the witness count, witness
independence as far as DIDs and keys show it (`tlog.formats.independence`), and for L5
the audit attestation's signature and anchor binding (`tlog.formats.audit`).

Not checked here (needs state this pure module does not have): that each witness
itself holds a valid L4/L5 receipt (§31 L5), independence through registry key events
and full DID documents, the audit anchor's inclusion in a trusted log, and that the
receipt is anchored in the registry. The registry enforces those.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from tlog.errors import Forbidden, FormatError, InvalidInput, SignatureError
from tlog.formats.audit import Audit, check_audit
from tlog.formats.canonical import check_json_value, jcs
from tlog.formats.dataintegrity import create_proof, did_key_method, proofs_of, verify_proof
from tlog.formats.did import did_key_from_public, is_did
from tlog.formats.diddoc import (
    ED25519,
    P256,
    SECP256K1,
    UNCHECKED,
    KeyLookup,
    VerificationKey,
    key_did,
    needs_resolution,
    signer_keys,
    skip_resolved_signatures,
    split_did_url,
    verify_signed_by,
)
from tlog.formats.encoding import b64dec_either, b64enc
from tlog.formats.hashing import parse_sha256
from tlog.formats.independence import Principal, parties, principal, relation
from tlog.formats.keys import Ed25519Key, ed25519_signer
from tlog.formats.times import format_utc, parse_utc

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

NON_COMMERCIAL = "non-commercial"
"""§31: the Non-Commercial Profile (RFC 0025), what the test suite's `--profile non-commercial`
writes in `profile`."""
FULL_PROFILES = frozenset({"standard", "commercial"})
"""The full profile (every requirement of the level), which §31 leaves unnamed: `standard` is what
`new_claims` and `oap-registry conformance make` write; `commercial`, the name of the profile the
Non-Commercial Profile waives requirements of, is read as the same."""
PROFILES = FULL_PROFILES | {NON_COMMERCIAL}
"""The `profile` values a receipt may carry: anything else (a misspelled "noncommercial") would be
read as the full profile and let a receipt claim requirements it skipped, so it is refused."""
NC_LEVELS = frozenset({"L1-NC", "L3-NC"})
"""§31: "L1-NC and L3-NC correspond to L1 and L3 with the Wallet, Subscription, and refund
requirements waived"; the profile defines no other level."""
COMMERCIAL_LEVELS = frozenset({"L1", "L2", "L3", "L4", "L5"})
"""Levels whose requirements include what the Non-Commercial Profile waives (L2 and up hold
the Wallet, Subscription and refund requirements; L1 has its own -NC form): a receipt with
`profile` non-commercial cannot claim them."""
PUBLISHER_LEVELS = frozenset({"L3", "L3-NC", "L4", "L5"})
"""§31: L3 asks "DNS or DID-based publisher verification"; levels are cumulative."""
AUDIT_LEVELS = frozenset({"L5"})
"""§31 L5: a third-party security audit attestation published in machine-readable form."""

VC_CONTEXT = "https://www.w3.org/ns/credentials/v2"
VC_TYPES = ("VerifiableCredential", "OAPConformance")
MAX_CONTEXTS = 8

_FIELDS = frozenset(
    {"id", "subject", "level", "profile", "suite", "results_digest",
     "issued_at", "expires_at", "signatures"}
)
_OPTIONAL = frozenset({"audit"})
_VC_FIELDS = frozenset({"@context", "id", "type", "issuer", "validFrom", "validUntil", "credentialSubject", "proof"})
_VC_SUBJECT = frozenset({"id", "level", "profile", "suite", "resultsDigest"})
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
    form: str = "compact"  # or "vc": a W3C Verifiable Credential 2.0 with Data Integrity proofs
    audit: Audit | None = None
    signing_keys: tuple[tuple[str, str], ...] = ()
    """(signer DID, did:key of the Ed25519 key its signature verified with) for the subject, each
    witness and the auditor: a signature counts only while that key is valid too (§28.5)."""


@dataclass(frozen=True)
class _Signature:
    where: str
    by: str  # the DID (URL) that signed
    verify: Callable[[], VerificationKey]  # SignatureError / InvalidInput when it does not


def is_vc(receipt: object) -> bool:
    """A receipt in W3C VC form (as opposed to the compact form)."""
    return isinstance(receipt, dict) and ("@context" in receipt or "credentialSubject" in receipt)


def signing_bytes(receipt: dict[str, Any]) -> bytes:
    """The bytes every compact signature covers: JCS of the receipt minus "signatures"."""
    return jcs({k: v for k, v in receipt.items() if k != "signatures"})


def claims_of(receipt: dict[str, Any]) -> dict[str, Any]:
    """The claims of a receipt in either form, in the compact form's field names (the
    mapping of docs/architecture.md §5); no check beyond the shape."""
    if not is_vc(receipt):
        return {k: v for k, v in receipt.items() if k != "signatures"}
    cs = receipt.get("credentialSubject")
    cs = cs if isinstance(cs, dict) else {}
    out = {"id": receipt.get("id"), "subject": receipt.get("issuer"), "level": cs.get("level"),
           "profile": cs.get("profile"), "suite": cs.get("suite"), "results_digest": cs.get("resultsDigest"),
           "issued_at": receipt.get("validFrom"), "expires_at": receipt.get("validUntil")}
    if "audit" in cs:
        out["audit"] = cs["audit"]
    return out


def _exact_fields(obj: dict[str, Any], required: frozenset[str], optional: frozenset[str], what: str) -> None:
    missing = sorted(required - obj.keys())
    if missing:
        raise InvalidInput(f"{what}: missing field(s): {', '.join(missing)}")
    unknown = sorted(obj.keys() - required - optional)
    if unknown:
        raise InvalidInput(f"{what}: unknown field(s): {', '.join(unknown)}")


def _compact(receipt: dict[str, Any], lookup: KeyLookup | None) -> tuple[dict[str, Any], list[_Signature]]:
    _exact_fields(receipt, _FIELDS, _OPTIONAL, "conformance receipt")
    sigs = receipt["signatures"]
    if not isinstance(sigs, list) or not sigs:
        raise InvalidInput("conformance receipt: signatures must be a non-empty list")
    message = signing_bytes(receipt)
    out = []
    for i, sig in enumerate(sigs):
        where = f"conformance receipt: signatures[{i}]"
        if not isinstance(sig, dict) or sig.keys() != _SIG_FIELDS:
            raise InvalidInput(f"{where} must be {{\"by\", \"alg\", \"value\"}} exactly")
        if sig["alg"] not in ALGS.values():
            raise InvalidInput(f"{where}: alg must be one of {', '.join(ALGS.values())}")
        by = sig["by"]
        if not isinstance(by, str) or not is_did(split_did_url(by)[0]):
            raise InvalidInput(f"{where}: by must be a DID")
        try:
            value = b64dec_either(sig["value"], what="value")
        except FormatError as e:
            raise InvalidInput(f"{where}: {e}") from None
        if len(value) != 64:
            raise InvalidInput(f"{where}: value must be base64 of a 64-byte signature")

        def verify(by: str = by, value: bytes = value, alg: str = sig["alg"], where: str = where) -> VerificationKey:
            key = verify_signed_by(by, message, value, lookup)
            if key.curve != UNCHECKED and ALGS[key.curve] != alg:
                raise InvalidInput(f"{where}: alg must be {ALGS[key.curve]} for the key that signed")
            return key
        out.append(_Signature(where, by, verify))
    return claims_of(receipt), out


def _vc(receipt: dict[str, Any], lookup: KeyLookup | None) -> tuple[dict[str, Any], list[_Signature]]:
    _exact_fields(receipt, _VC_FIELDS, frozenset(), "conformance credential")
    ctx = receipt["@context"]
    if not isinstance(ctx, list) or not 1 <= len(ctx) <= MAX_CONTEXTS or ctx[0] != VC_CONTEXT \
            or not all(isinstance(c, str) and c for c in ctx) or len(set(ctx)) != len(ctx):
        raise InvalidInput(f"conformance credential: @context must be a list starting with {VC_CONTEXT!r} "
                           f"(at most {MAX_CONTEXTS} distinct URLs)")
    types = receipt["type"]
    if not isinstance(types, list) or len(types) != 2 or not all(isinstance(t, str) for t in types) \
            or set(types) != set(VC_TYPES):
        raise InvalidInput(f"conformance credential: type must be {list(VC_TYPES)}")
    issuer = receipt["issuer"]
    if not is_did(issuer) or "#" in issuer:
        raise InvalidInput("conformance credential: issuer must be the subject's DID (§5.2: self-issued)")
    cs = receipt["credentialSubject"]
    if not isinstance(cs, dict):
        raise InvalidInput("conformance credential: credentialSubject must be an object")
    _exact_fields(cs, _VC_SUBJECT, _OPTIONAL, "conformance credential: credentialSubject")
    if cs["id"] != issuer:
        raise InvalidInput("conformance credential: credentialSubject.id must be the issuer (§5.2: self-issued)")
    out = []
    for i, proof in enumerate(proofs_of(receipt)):
        where = f"conformance credential: proof[{i}]"
        if proof.get("@context", ctx) != ctx:
            raise InvalidInput(f"{where}: @context must be the credential's @context")
        vm = proof.get("verificationMethod")
        if not isinstance(vm, str) or not is_did(split_did_url(vm)[0]):
            raise InvalidInput(f"{where}: verificationMethod must be a DID URL")

        def verify(proof: dict[str, Any] = proof, where: str = where) -> VerificationKey:
            return verify_proof(receipt, proof, lookup, where=where)
        out.append(_Signature(where, vm, verify))
    return claims_of(receipt), out


def validate_conformance(receipt: object, *, now: datetime, require_witnesses: bool = True,
                         lookup: KeyLookup | None = None, check_publisher: bool = True) -> ConformanceReceipt:
    """Check a conformance receipt (either form) completely; raise InvalidInput naming the
    problem, or Forbidden when a §31 level rule fails (publisher check, independence).

    Schema (exactly the fields of docs/architecture.md §5, unknown fields refused because the
    log stores the receipt verbatim), time window, the subject's self signature,
    witness signatures (distinct DIDs, each verifying and independent of the subject as
    far as DIDs and keys show), the level's witness minimum, the L3+ publisher check and
    the L5 audit attestation. `now` must be timezone-aware. Subjects, witnesses and
    auditors named by DIDs other than did:key need `lookup` (tlog.formats.diddoc).
    `check_publisher=False` is for a receipt read with no resolver at all (a peer
    witness's own receipt file); everything that admits a receipt keeps it on.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if not isinstance(receipt, dict):
        raise InvalidInput("conformance receipt must be an object")
    check_json_value(receipt)
    claims, signatures = _vc(receipt, lookup) if is_vc(receipt) else _compact(receipt, lookup)
    what = "conformance credential" if is_vc(receipt) else "conformance receipt"

    rid = claims["id"]
    if not isinstance(rid, str) or not rid.startswith(ID_PREFIX) or len(rid) > MAX_ID_LEN \
            or len(rid) == len(ID_PREFIX) or not _URN.fullmatch(rid):
        raise InvalidInput(f"{what}: id must be '{ID_PREFIX}<id>' "
                           f"(printable ASCII, at most {MAX_ID_LEN} chars)")
    subject = claims["subject"]
    if not is_did(subject) or "#" in subject:
        raise InvalidInput(f"{what}: subject must be a DID")
    level = claims["level"]
    if not isinstance(level, str) or level not in LEVELS:
        raise InvalidInput(f"{what}: level must be one of {', '.join(sorted(LEVELS))}")
    if not isinstance(claims["profile"], str) or claims["profile"] not in PROFILES:
        raise InvalidInput(f"{what}: profile must be one of {', '.join(sorted(PROFILES))} (§31: the test suite's "
                           f"--profile; {NON_COMMERCIAL!r} is the Non-Commercial Profile)")
    profile_rule(level, claims["profile"], what)
    suite = claims["suite"]
    if not isinstance(suite, dict) or suite.keys() != {"name", "version"} \
            or not all(isinstance(v, str) and v for v in suite.values()):
        raise InvalidInput(f"{what}: suite must be {{\"name\": <string>, \"version\": <string>}}")
    digest = parse_sha256(claims["results_digest"], f"{what}: results_digest")
    if len(digest) != 32:  # bytes.fromhex skips spaces; insist on 64 hex digits
        raise InvalidInput(f"{what}: results_digest must be 'sha256:' followed by 64 hex digits")

    issued_at = parse_utc(claims["issued_at"], f"{what}: issued_at")
    expires_at = parse_utc(claims["expires_at"], f"{what}: expires_at")
    if expires_at <= issued_at:
        raise InvalidInput(f"{what}: expires_at must be after issued_at")
    if expires_at - issued_at > MAX_VALIDITY:
        raise InvalidInput(f"{what}: validity period exceeds 90 days")
    if issued_at > now + MAX_CLOCK_SKEW:
        raise InvalidInput(f"{what}: issued_at is in the future")
    if now >= expires_at:
        raise InvalidInput(f"{what}: expired")

    witnesses, signing_keys = _check_signatures(what, signatures, subject)
    needed = MIN_WITNESSES.get(level, 0) if require_witnesses else 0
    if len(witnesses) < needed:
        raise InvalidInput(
            f"{what}: level {level} needs at least {needed} witness signature(s), has {len(witnesses)}"
        )
    if check_publisher and level in PUBLISHER_LEVELS:
        publisher_check(subject, level, what)
    audit = None
    if "audit" in claims:
        audit = check_audit(claims["audit"], subject, lookup, where=f"{what}: audit")
    elif level in AUDIT_LEVELS:
        raise InvalidInput(f"{what}: level {level} needs an audit attestation (§31: an independent third-party "
                           "security audit published in machine-readable form): the 'audit' field")
    offline_independence(subject, witnesses, audit.auditor if audit else None, lookup, what)
    independent_witnesses(what, level, needed, [principal(w, keys=_offline_keys(w, lookup)) for w in witnesses])
    if audit is not None and audit.key is not None:
        signing_keys[audit.auditor] = audit.key
    return ConformanceReceipt(rid, subject, level, issued_at, expires_at, witnesses,
                              "vc" if is_vc(receipt) else "compact", audit, tuple(sorted(signing_keys.items())))


def profile_rule(level: str, profile: str, what: str = "conformance receipt") -> None:
    """§31 Non-Commercial Profile: an -NC level is produced under `--profile non-commercial`,
    so its `profile` must say so; and a receipt of that profile (the Wallet, Subscription and
    refund requirements waived) claims an -NC level (or L0), never the full L1-L5 whose
    requirements it skipped. InvalidInput otherwise: the receipt contradicts itself."""
    if level in NC_LEVELS and profile != NON_COMMERCIAL:
        raise InvalidInput(f"{what}: level {level} is the Non-Commercial Profile (§31): its profile must be "
                           f"{NON_COMMERCIAL!r}, not {profile!r}")
    if profile == NON_COMMERCIAL and level in COMMERCIAL_LEVELS:
        raise InvalidInput(f"{what}: profile {NON_COMMERCIAL!r} waives requirements of level {level} (§31); "
                           f"a non-commercial receipt claims {' or '.join(sorted(NC_LEVELS))}")


def _check_signatures(what: str, signatures: list[_Signature], subject: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """Verify every signature: the witnesses' DIDs, once exactly one self signature is found,
    and the did:key of the Ed25519 key each signer's signature verified with (`key_did`).
    (The self signature of a did:web subject verifies only with a key its document lists.)"""
    self_keys: list[VerificationKey] = []
    witnesses: list[str] = []
    keys: dict[str, str] = {}
    for sig in signatures:
        who = split_did_url(sig.by)[0]  # a DID URL names one key of the DID: the witness is the DID
        try:
            key = sig.verify()
        except SignatureError:
            kind = "self signature" if who == subject else f"witness signature by {sig.by}"
            raise InvalidInput(f"{sig.where}: {kind} does not verify") from None
        except InvalidInput as e:
            raise type(e)(e.message if e.message.startswith(sig.where) else f"{sig.where}: {e.message}") from None
        if who == subject:
            self_keys.append(key)
        elif who in witnesses:
            raise InvalidInput(f"{sig.where}: duplicate witness {who}")
        else:
            witnesses.append(who)
        signed_with = key_did(key)
        if signed_with is not None:
            keys[who] = signed_with
    if len(self_keys) != 1:
        raise InvalidInput(f"{what}: needs exactly one self signature by the subject, has {len(self_keys)}")
    return tuple(witnesses), keys


def publisher_check(subject: str, level: str, what: str = "conformance receipt") -> None:
    """§31 L3 "DNS or DID-based publisher verification", made checkable: the subject is a
    did:web, so its DID document was fetched over HTTPS (TLS 1.3) from the publisher's
    own domain, and the self signature verified with a key that document lists for
    assertions. A did:key names no publisher, and a did:plc document is whatever its
    directory serves: both fail (fail safe; docs/architecture.md §5)."""
    if not subject.startswith("did:web:"):
        method = subject.split(":")[1]
        raise Forbidden(f"{what}: level {level} needs the publisher check (§31 L3: DNS or DID-based publisher "
                        f"verification), and the subject {subject} is a did:{method}, which names no publisher "
                        "domain; use a did:web whose DID document lists the signing key")


def _offline_keys(did: str, lookup: KeyLookup | None) -> tuple[VerificationKey, ...]:
    if lookup is None or lookup is skip_resolved_signatures or needs_resolution(did) is None:
        return ()
    try:
        return signer_keys(did, lookup)
    except InvalidInput:
        return ()


def offline_independence(subject: str, witnesses: tuple[str, ...], auditor: str | None, lookup: KeyLookup | None,
                         what: str = "conformance receipt") -> None:
    """Witnesses and the auditor independent of the subject as far as the DIDs and the
    signing keys of their resolved documents show (rules 1, 4 and 5 of
    `tlog.formats.independence`); Forbidden naming who and which rule otherwise."""
    s = principal(subject, keys=_offline_keys(subject, lookup))
    for role, who in [*(("witness", w) for w in witnesses), *((("auditor", auditor),) if auditor else ())]:
        why = relation(s, principal(who, keys=_offline_keys(who, lookup)))
        if why is not None:
            raise Forbidden(f"{what}: {role} {who} is not independent of the subject {subject}: {why}",
                            witness=who, rule=why)


def independent_witnesses(what: str, level: str, needed: int, members: list[Principal], *,
                          kind: str = "") -> None:
    """§31's "at least three independent peer-witness signatures" counts parties, not DIDs:
    witnesses that are not independent of each other (the rules between a witness and the
    subject, `tlog.formats.independence.parties`) count as one. Forbidden naming the
    witnesses and the rule when fewer than `needed` parties signed. `kind` qualifies the
    witnesses counted (the registry counts those holding L4/L5)."""
    if needed < 2:
        return  # one witness is one party
    groups, related = parties(members)
    if len(groups) >= needed:
        return
    _, b, rule = related[0]
    why = "; ".join(f"{y}: {r}" for _, y, r in related)
    raise Forbidden(f"{what}: level {level} needs at least {needed} independent {kind}peer witnesses, and its "
                    f"{len(members)} {kind}witnesses are {len(groups)} part{'y' if len(groups) == 1 else 'ies'} "
                    f"({'; '.join(' = '.join(g) for g in groups)}): {why}",
                    witness=b, rule=rule)


# --- signing ---------------------------------------------------------------------------


def _signature(receipt: dict[str, Any], seed: Ed25519Key, by: str | None = None) -> dict[str, str]:
    did = by or did_key_from_public(ed25519_signer(seed).public)
    return {"by": did, "alg": ALG, "value": b64enc(ed25519_signer(seed).sign(signing_bytes(receipt)))}


def new_claims(subject: str, level: str, *, results_digest: str, suite: dict[str, str], issued_at: datetime,
               validity: timedelta = MAX_VALIDITY, profile: str = "standard",
               audit: dict[str, Any] | None = None) -> dict[str, Any]:
    """The unsigned claims of a new compact receipt, with a fresh id (urn:oap:conformance:<uuid>):
    what an implementation signs with `sign_conformance` once the test suite has run."""
    import uuid

    if not timedelta(0) < validity <= MAX_VALIDITY:
        raise InvalidInput("a conformance receipt is valid for at most 90 days")
    issued = issued_at.replace(microsecond=0)
    body: dict[str, Any] = {"id": f"{ID_PREFIX}{uuid.uuid4()}", "subject": subject, "level": level,
                            "profile": profile, "suite": dict(suite), "results_digest": results_digest,
                            "issued_at": format_utc(issued), "expires_at": format_utc(issued + validity)}
    if audit is not None:
        body["audit"] = audit
    return body


def sign_conformance(unsigned: dict[str, Any], seed: Ed25519Key, by: str | None = None) -> dict[str, Any]:
    """Return a copy of `unsigned` self-signed by the Ed25519 key `seed`.

    Any existing "signatures" member is replaced by the one self signature; add
    witness signatures (`witness_signature`) to the result's list afterwards.
    `by` names the key (a DID URL of the subject, e.g. "did:web:impl.example#key-1",
    whose document lists it); by default the subject must be the did:key of `seed`.
    """
    body = {k: v for k, v in unsigned.items() if k != "signatures"}
    sig = _signature(body, seed, by)
    if body.get("subject") != split_did_url(sig["by"])[0]:
        raise InvalidInput("sign_conformance: subject is not the did:key of the signing key (or the DID of `by`)")
    return {**body, "signatures": [sig]}


def witness_signature(receipt: dict[str, Any], seed: Ed25519Key, by: str | None = None) -> dict[str, str]:
    """A peer witness's {"by", "alg", "value"} over `receipt` (minus its signatures).

    `by` names the key as a DID URL of the witness (e.g. "did:web:witness.example#key-1",
    whose document lists it): a witness that is a participant signs with its participant's
    DID. By default `by` is the did:key of `seed`. Signing is all this does: the witness
    service must validate the receipt (and its own standing, §31) before calling it.
    """
    return _signature(receipt, seed, by)


def to_vc(claims: dict[str, Any], *, contexts: tuple[str, ...] = ()) -> dict[str, Any]:
    """The unsigned W3C VC form of compact claims (the mapping of docs/architecture.md §5)."""
    cs: dict[str, Any] = {"id": claims["subject"], "level": claims["level"], "profile": claims["profile"],
                          "suite": claims["suite"], "resultsDigest": claims["results_digest"]}
    if "audit" in claims:
        cs["audit"] = claims["audit"]
    return {"@context": [VC_CONTEXT, *contexts], "id": claims["id"], "type": list(VC_TYPES),
            "issuer": claims["subject"], "validFrom": claims["issued_at"], "validUntil": claims["expires_at"],
            "credentialSubject": cs}


def add_proof(vc: dict[str, Any], seed: Ed25519Key, verification_method: str | None = None) -> dict[str, Any]:
    """A copy of `vc` with one more `eddsa-jcs-2022` proof (by the did:key of `seed`, or the
    given DID URL): the subject's first, then a witness's. `proof` becomes a list (a proof
    set) once it holds two."""
    unsecured = {k: v for k, v in vc.items() if k != "proof"}
    proof = create_proof(unsecured, seed, verification_method)
    have = [] if "proof" not in vc else (vc["proof"] if isinstance(vc["proof"], list) else [vc["proof"]])
    if proof in have:
        return dict(vc)
    proofs = [*have, proof]
    return {**unsecured, "proof": proofs[0] if len(proofs) == 1 else proofs}


def add_witness_signature(receipt: dict[str, Any], seed: Ed25519Key,
                          by: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the witness's signature, the receipt with it) for a receipt in either form: a compact
    {"by", "alg", "value"}, or an `eddsa-jcs-2022` proof added to a VC's proof set. Both are
    deterministic: asking twice gives the same signature, added once. `by`: the DID URL the
    key signs as (the `by` of a compact signature, the proof's `verificationMethod`); by
    default the did:key of `seed`."""
    if is_vc(receipt):
        method = by or did_key_method(did_key_from_public(ed25519_signer(seed).public))
        proof = create_proof({k: v for k, v in receipt.items() if k != "proof"}, seed, method)
        return proof, with_witness_signatures(receipt, [proof])
    sig = witness_signature(receipt, seed, by)
    return sig, with_witness_signatures(receipt, [sig])


def with_witness_signatures(receipt: dict[str, Any], signatures: list[dict[str, Any]]) -> dict[str, Any]:
    """A copy of `receipt` with `signatures` added, each once: compact signatures to
    `signatures`, Data Integrity proofs to a VC's proof set. Every signature covers the
    claims alone, so those witnesses gave for one receipt join in any order (each witness
    checks the receipt it is sent; the registry checks the whole set)."""
    field = "proof" if is_vc(receipt) else "signatures"
    have = receipt.get(field, [])
    have = list(have) if isinstance(have, list) else [have]
    for sig in signatures:
        if sig not in have:
            have.append(sig)
    if is_vc(receipt) and len(have) == 1:
        return {**receipt, "proof": have[0]}
    return {**receipt, field: have}
