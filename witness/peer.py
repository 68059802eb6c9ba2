"""Peer-witnessing of OAP conformance receipts (OAP-CORE-1.0 §31, docs/architecture.md §4).

A peer witness is run by a participant and signs with that participant's identity
(`identity_did`: a did:web, so that its own receipts pass the L3+ publisher check and
it can hold the L4/L5 receipt §31 asks of L5 witnesses; by default the did:key of its
identity key, which can witness only with `require_own_level = "none"`).

`POST /v1/conformance/witness` with `{"receipt": <receipt>, "bundle": <.tlog-proof>}`:
the witness adds its signature to a receipt only after checking

1. its own standing (§31: witnesses must "themselves hold a valid L4/L5
   receipt"): the configured own receipt exists, is valid now (every signature, the
   publisher check), is about this witness's identity, and is at least
   `require_own_level`; a did:web identity's document lists the identity key;
2. the receipt, in either form (compact or W3C VC 2.0 with `eddsa-jcs-2022` proofs):
   schema, self signature, level rules (the L3+ publisher check, the L5 audit
   attestation), expiry (`tlog.formats.conformance.validate_conformance`), but not the
   level's witness count: a witness gives the first signature of an L4 receipt and the
   first, second or third of an L5 one, and the registry counts them;
3. that it is independent of the subject (§31 "independent peer-witness"): not the
   subject, not a key the subject's DID document lists, not on the subject's did:web
   host (`tlog.formats.independence`; key events are the registry's to check);
4. that the receipt is in a log it trusts: the bundle's entry must be the
   canonical `conformance` entry of exactly this receipt
   (`tlog.formats.entries.canonical_entry`), verified offline against the configured
   trust policy (`tlog.client.verifier.TrustPolicy.verify_bundle`);
5. the registry's word (§22.1 "consult the Revocation Service before acting on any
   DID"), in signed status answers it verifies (`registry.statusverify`): its own
   receipt answers `good` (with `require_own_level = "none"`: its own DID is neither
   revoked nor suspended), the did:key of its identity key, when it signs as another
   DID, is neither revoked nor suspended (§28.5: a compromised key voids what it signs,
   whatever DID it signs as), and the subject's DID answers `good` — a subject the
   registry knows nothing of (`unknown`) registers a lower-level receipt first.

Refusals are OAPErrors: Forbidden (403) for the witness's own standing or
configuration and for a subject the registry does not answer `good` about,
InvalidInput (400) for a bad request or receipt, a VerificationError (422) for an
inclusion proof that does not verify, UpstreamError (502) when the registry cannot be
asked or its answer does not verify.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from registry.client import RegistryClient
from registry.statusverify import VerifiedStatus, anchor_policy, verify_status
from tlog.client.verifier import TrustPolicy
from tlog.errors import Forbidden, InvalidInput, OAPError, UpstreamError
from tlog.formats.conformance import (
    ConformanceReceipt,
    add_witness_signature,
    offline_independence,
    validate_conformance,
)
from tlog.formats.did import did_key_from_public
from tlog.formats.diddoc import KeyLookup, dids_to_resolve, signer_keys, split_did_url
from tlog.formats.entries import canonical_entry
from tlog.formats.keys import Ed25519Key, ed25519_signer
from tlog.formats.strict import loads_json
from tlog.formats.times import format_utc
from tlog.transport import Outbound

LEVEL_RANK = {"L4": 4, "L5": 5}


class RegistryCheck:
    """The registry a witness consults before it signs (§22.1): signed status answers,
    verified against the registry's pinned key and, with `policy`, the logs its epochs
    are anchored in."""

    def __init__(self, url: str, key: str, *, policy: TrustPolicy | None, timeout: float = 10.0,
                 outbound: Outbound | None = None) -> None:
        self.url, self.key, self.timeout, self.outbound = url, key, timeout, outbound
        self.policy = anchor_policy(policy) if policy is not None else None
        self._client: RegistryClient | None = None

    async def answer(self, status_id: str, now: datetime) -> VerifiedStatus:
        """The registry's verified answer about `status_id`; UpstreamError when it cannot
        be had (the registry is down, refuses, or answers something that does not verify)."""
        if self._client is None:
            self._client = RegistryClient(self.url, timeout=self.timeout, outbound=self.outbound)  # in the loop
        try:
            resp = await self._client.status(status_id)
            return verify_status(resp, registry=self.key, status_id=status_id, policy=self.policy, now=now,
                                 keys=await self._client.keys_for(resp, self.key))  # follows key rotations
        except OAPError as e:
            raise UpstreamError(f"the registry {self.url} gave no verified answer about {status_id}: "
                                f"{e.message}") from None
        except ValueError:
            raise UpstreamError(f"the registry {self.url} answered about {status_id} with something that is "
                                "not JSON") from None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.__aexit__(None, None, None)
            self._client = None


@dataclass(frozen=True)
class Checked:
    """A request that passed every offline check (steps 1-4): what is left is the registry."""

    receipt: dict[str, Any]
    conformance: ConformanceReceipt
    inclusion: dict[str, Any]
    own: tuple[dict[str, Any], ConformanceReceipt] | None


def _standing_text(v: VerifiedStatus) -> str:
    if v.status == "revoked" and v.revoked_at is not None:
        return f"revoked since {format_utc(v.revoked_at)} (reason {v.reason})"
    if v.status == "suspended" and v.suspended_at is not None:
        return f"suspended since {format_utc(v.suspended_at)} (reason {v.reason})"
    return v.status


class PeerWitness:
    """Checks and signs conformance receipts with the identity key `seed`, as `identity`
    (a DID URL whose document lists the key; default: the key's did:key)."""

    def __init__(
        self,
        seed: Ed25519Key,
        *,
        identity: str = "",
        policy_text: str | None,
        own_receipt: Path | None,
        require_own_level: str = "L4",
        registry: RegistryCheck | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._seed = seed
        self.public = ed25519_signer(seed).public
        self.signer = identity or did_key_from_public(self.public)  # what its signatures name (`by`)
        self.did = split_did_url(self.signer)[0]
        self.policy = TrustPolicy.from_text(policy_text) if policy_text is not None else None
        self.own_receipt = own_receipt
        self.require_own_level = require_own_level
        self.registry = registry
        self.clock = clock

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), tz=UTC)

    def _own_document(self) -> object:
        """The own receipt file as JSON (Forbidden when it is missing or unreadable)."""
        if self.own_receipt is None:
            raise Forbidden("this witness has no conformance receipt configured (own_receipt); "
                            f"§31 requires a valid {self.require_own_level}+ receipt to witness others")
        try:
            raw = Path(self.own_receipt).read_bytes()
        except OSError as e:
            raise Forbidden(f"this witness's own conformance receipt is missing or unreadable: {e.strerror}") from None
        try:
            return loads_json(raw)
        except InvalidInput as e:
            raise Forbidden(f"this witness's own conformance receipt is not valid: {e.message}") from None

    def dids_to_resolve(self, request: object) -> set[str]:
        """The DIDs a request's checks need resolved: those the request names, this
        witness's own identity, and those its own receipt names."""
        out = dids_to_resolve(request)
        if not self.did.startswith("did:key:"):
            out.add(self.did)
        if self.require_own_level != "none":
            try:
                out |= dids_to_resolve(self._own_document())
            except Forbidden:
                pass  # said when the standing is checked
        return out

    def standing(self, now: datetime | None = None,
                 lookup: KeyLookup | None = None) -> tuple[dict[str, Any], ConformanceReceipt] | None:
        """This witness's own valid receipt, or Forbidden saying why it may not witness.
        Checked as any receipt is (every signature, the publisher check), with `lookup`
        for the DIDs it names. Re-read on every call, so renewing the file takes effect
        without a restart. Returns None only when `require_own_level` is "none"."""
        if self.require_own_level == "none":
            return None
        now = now or self.now()
        doc = self._own_document()
        try:
            own = validate_conformance(doc, now=now, lookup=lookup)
        except (InvalidInput, Forbidden) as e:
            raise Forbidden(f"this witness's own conformance receipt is not valid: {e.message}") from None
        if own.subject != self.did:
            raise Forbidden(f"this witness's own conformance receipt is about {own.subject}, "
                            f"not its identity {self.did}")
        if LEVEL_RANK.get(own.level, 0) < LEVEL_RANK[self.require_own_level]:
            raise Forbidden(f"this witness's own conformance receipt is level {own.level}; "
                            f"witnessing needs {self.require_own_level} or higher")
        assert isinstance(doc, dict)
        return doc, own

    def check_identity(self, lookup: KeyLookup | None) -> None:
        """A witness named by a DID other than did:key signs with a key its document lists."""
        if self.did.startswith("did:key:"):
            if self.signer != did_key_from_public(self.public):
                raise Forbidden(f"this witness's identity {self.signer} is not the did:key of its identity key")
            return
        try:
            keys = signer_keys(self.signer, lookup)
        except InvalidInput as e:  # (a document that could not be fetched is a 502, as it comes)
            raise Forbidden(f"this witness's identity {self.signer} cannot be checked: {e.message}") from None
        if not any(k.public == self.public for k in keys):
            raise Forbidden(f"this witness's identity {self.signer}: its DID document does not list the witness's "
                            "identity key (publish it there, or set identity_did to the key's id)")

    def check(self, doc: object, lookup: KeyLookup | None = None) -> Checked:
        """Steps 1-4 of the module doc on a request {"receipt", "bundle"}, offline.
        `lookup`: the keys of the DIDs `dids_to_resolve` names."""
        now = self.now()
        mine = self.standing(now, lookup)
        if not isinstance(doc, dict) or set(doc) != {"receipt", "bundle"}:
            raise InvalidInput('body must be {"receipt": <conformance receipt>, "bundle": <.tlog-proof text>}')
        receipt, bundle = doc["receipt"], doc["bundle"]
        if not isinstance(bundle, str):
            raise InvalidInput("bundle must be the .tlog-proof text")
        # The level's witness count is the registry's to enforce: this may be the first signature.
        checked = validate_conformance(receipt, now=now, lookup=lookup, require_witnesses=False)
        assert isinstance(receipt, dict)
        if checked.subject == self.did:
            raise Forbidden("a witness cannot witness its own conformance receipt (§31: independent peers)")
        self.check_identity(lookup)
        try:
            offline_independence(checked.subject, (self.did,), None, lookup)
        except Forbidden as e:
            raise Forbidden(f"this witness may not witness this receipt: {e.message}") from None
        if self.policy is None:
            raise Forbidden("this witness trusts no log for inclusion checks (configure trusted_logs or trust_policy)")
        entry = canonical_entry({"type": "conformance", "receipt": receipt}, now=now, lookup=lookup)
        included = self.policy.verify_bundle(bundle, entry=entry)  # VerificationError (422) / FormatError (400)
        inclusion = {"origin": included.checkpoint.checkpoint.origin, "index": included.index,
                     "tree_size": included.checkpoint.checkpoint.size}
        return Checked(receipt, checked, inclusion, mine)

    async def consult(self, checked: Checked) -> dict[str, Any]:
        """Step 5: the registry's verified answers about this witness and the subject;
        Forbidden with the reason unless both stand. Returns what it was told."""
        if self.registry is None:
            raise Forbidden("this witness consults no registry (registry_url, registry_key): §22.1 asks it to check "
                            "the standing of the subject and its own before it signs")
        now = self.now()
        own_id = checked.own[1].id if checked.own is not None else self.did
        subject = checked.conformance.subject
        key_id = did_key_from_public(self.public)  # the key this witness signs with, whatever DID it signs as
        asked = [self.registry.answer(own_id, now), self.registry.answer(subject, now)]
        if key_id != self.did:
            asked.append(self.registry.answer(key_id, now))
        own, subj, *mine = await asyncio.gather(*asked)
        url = self.registry.url
        if mine and mine[0].status not in ("good", "unknown"):
            raise Forbidden(f"this witness's identity key {key_id} is {_standing_text(mine[0])} in the registry "
                            f"{url}: a signature made with it does not count (§28.5); rotate the identity key and "
                            "publish the new one in the DID document", key=key_id)
        if checked.own is not None and own.status != "good":
            if own.status == "unknown":
                raise Forbidden(f"this witness's own conformance receipt {own_id} is not in the registry {url}: "
                                "register it before witnessing (§31)")
            raise Forbidden(f"this witness's own conformance receipt {own_id} is {_standing_text(own)} in the "
                            f"registry {url}: it may not witness (§31, §22.1)")
        if checked.own is None and own.status not in ("good", "unknown"):
            raise Forbidden(f"this witness's DID {own_id} is {_standing_text(own)} in the registry {url}: "
                            "it may not witness (§22.1)")
        if subj.status == "unknown":
            raise Forbidden(f"the registry {url} knows nothing of the subject {subject} (it answers 'unknown'): "
                            "register one of its receipts (e.g. its L3 receipt) first, so that its standing can "
                            "be checked (§22.1)", subject_status="unknown")
        if subj.status != "good":
            raise Forbidden(f"the subject {subject} is {_standing_text(subj)} in the registry {url}: this witness "
                            "does not vouch for it (§22.1)", subject_status=subj.status)
        return {"registry": self.registry.key, "this_update": format_utc(subj.this_update),
                "subject": {"id": subject, "status": subj.status},
                "witness": {"id": own_id, "status": own.status}}

    def sign(self, checked: Checked, consulted: dict[str, Any]) -> dict[str, Any]:
        """The answer: our signature (deterministic: a repeat gives the same), the receipt
        with it, where it is included, what the registry said and our own receipt."""
        sig, signed = add_witness_signature(checked.receipt, self._seed,
                                            None if self.signer.startswith("did:key:") else self.signer)
        out: dict[str, Any] = {"signature": sig, "receipt": signed, "inclusion": checked.inclusion,
                               "standing": consulted}
        if checked.own is not None:
            out["witness_receipt"] = checked.own[0]  # lets a verifier check our standing (§31) offline
        return out
