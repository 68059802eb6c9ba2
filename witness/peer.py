"""Peer-witnessing of OAP conformance receipts (OAP-CORE-1.0 §31, docs/architecture.md §4).

`POST /v1/conformance/witness` with `{"receipt": <receipt>, "bundle": <.tlog-proof>}`:
the witness adds its Ed25519 signature to a receipt only after checking

1. its own standing (§31: witnesses must "themselves hold a valid L4/L5
   receipt"): the configured own receipt exists, is valid now, is about this
   witness's identity key, and is at least `require_own_level`;
2. the receipt, in either form (compact or W3C VC 2.0 with `eddsa-jcs-2022` proofs):
   schema, self signature, level rules (the L3+ publisher check, the L5 audit
   attestation), expiry (`tlog.formats.conformance.validate_conformance`);
3. that it is independent of the subject (§31 "independent peer-witness"): not the
   subject, not a key the subject's DID document lists, not on the subject's did:web
   host (`tlog.formats.independence`; key events are the registry's to check);
4. that the receipt is in a log it trusts: the bundle's entry must be the
   canonical `conformance` entry of exactly this receipt
   (`tlog.formats.entries.canonical_entry`), verified offline against the configured
   trust policy (`tlog.client.verifier.TrustPolicy.verify_bundle`).

Which key signs: a separate Ed25519 identity key (`identity.key`), named by its
did:key, not the cosigning key. The cosigning key's name and vkey identify the
witness to logs; the DID identifies it as an OAP implementation, is the subject
of its own conformance receipt, and can be rotated without re-onboarding the
witness with every log (and vice versa).

Refusals are OAPErrors: Forbidden (403) for the witness's own standing or
configuration, InvalidInput (400) for a bad request or receipt, a
VerificationError (422) for an inclusion proof that does not verify.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tlog.client.verifier import TrustPolicy
from tlog.errors import Forbidden, InvalidInput
from tlog.formats.conformance import (
    ConformanceReceipt,
    add_witness_signature,
    offline_independence,
    validate_conformance,
)
from tlog.formats.did import did_key_from_public
from tlog.formats.diddoc import KeyLookup
from tlog.formats.entries import canonical_entry
from tlog.formats.keys import Ed25519Key, ed25519_signer
from tlog.formats.strict import loads_json

LEVEL_RANK = {"L4": 4, "L5": 5}


class PeerWitness:
    """Checks and signs conformance receipts with the identity key `seed`."""

    def __init__(
        self,
        seed: Ed25519Key,
        *,
        policy_text: str | None,
        own_receipt: Path | None,
        require_own_level: str = "L4",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._seed = seed
        self.did = did_key_from_public(ed25519_signer(seed).public)
        self.policy = TrustPolicy.from_text(policy_text) if policy_text is not None else None
        self.own_receipt = own_receipt
        self.require_own_level = require_own_level
        self.clock = clock

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), tz=UTC)

    def standing(self, now: datetime | None = None) -> tuple[dict[str, Any], ConformanceReceipt] | None:
        """This witness's own valid receipt, or Forbidden saying why it may not witness.

        Re-read on every call, so renewing the file takes effect without a restart.
        Returns None only when `require_own_level` is "none".
        """
        if self.require_own_level == "none":
            return None
        now = now or self.now()
        if self.own_receipt is None:
            raise Forbidden("this witness has no conformance receipt configured (own_receipt); "
                            f"§31 requires a valid {self.require_own_level}+ receipt to witness others")
        try:
            raw = Path(self.own_receipt).read_bytes()
        except OSError as e:
            raise Forbidden(f"this witness's own conformance receipt is missing or unreadable: {e.strerror}") from None
        try:
            doc = loads_json(raw)
            own = validate_conformance(doc, now=now, check_publisher=False)  # read with no resolver
        except InvalidInput as e:
            raise Forbidden(f"this witness's own conformance receipt is not valid: {e.message}") from None
        if own.subject != self.did:
            raise Forbidden(f"this witness's own conformance receipt is about {own.subject}, "
                            f"not its identity {self.did}")
        if LEVEL_RANK.get(own.level, 0) < LEVEL_RANK[self.require_own_level]:
            raise Forbidden(f"this witness's own conformance receipt is level {own.level}; "
                            f"witnessing needs {self.require_own_level} or higher")
        assert isinstance(doc, dict)
        return doc, own

    def witness(self, doc: object, lookup: KeyLookup | None = None) -> dict[str, Any]:
        """Check a request {"receipt", "bundle"} and return our signature (see module doc).
        `lookup`: the keys of a subject or witnesses named by DIDs other than did:key."""
        now = self.now()
        mine = self.standing(now)
        if not isinstance(doc, dict) or set(doc) != {"receipt", "bundle"}:
            raise InvalidInput('body must be {"receipt": <conformance receipt>, "bundle": <.tlog-proof text>}')
        receipt, bundle = doc["receipt"], doc["bundle"]
        if not isinstance(bundle, str):
            raise InvalidInput("bundle must be the .tlog-proof text")
        checked = validate_conformance(receipt, now=now, lookup=lookup)
        assert isinstance(receipt, dict)
        if checked.subject == self.did:
            raise Forbidden("a witness cannot witness its own conformance receipt (§31: independent peers)")
        try:
            offline_independence(checked.subject, (self.did,), None, lookup)
        except Forbidden as e:
            raise Forbidden(f"this witness may not witness this receipt: {e.message}") from None
        if self.policy is None:
            raise Forbidden("this witness trusts no log for inclusion checks (configure trusted_logs or trust_policy)")
        entry = canonical_entry({"type": "conformance", "receipt": receipt}, now=now, lookup=lookup)
        included = self.policy.verify_bundle(bundle, entry=entry)  # VerificationError (422) / FormatError (400)
        sig, signed = add_witness_signature(receipt, self._seed)  # deterministic: a repeat gives the same
        out: dict[str, Any] = {
            "signature": sig,
            "receipt": signed,
            "inclusion": {"origin": included.checkpoint.checkpoint.origin, "index": included.index,
                          "tree_size": included.checkpoint.checkpoint.size},
        }
        if mine is not None:
            out["witness_receipt"] = mine[0]  # lets a verifier check our standing (§31) offline
        return out
