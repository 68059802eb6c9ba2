"""Conformance receipts from the participant's side: the §31 ladder with the project's
services (OAP-CORE-1.0 §31, §5.2; docs/architecture.md §4, §5). What `oap-registry
conformance` runs:

- `make`: claims signed by the implementation's key, named by its DID (a did:web from
  L3 up: the publisher check);
- `request-witness`: the receipt anchored in a log as a `conformance` entry (its
  .tlog-proof is what a peer witness checks inclusion with), sent to each peer witness
  (`POST /v1/conformance/witness`), each signature checked to be one more signature of
  exactly this receipt, and merged. Every signature covers the claims alone, so the
  witnesses are asked at once, with one anchor;
- `audit`: the auditor's side of L5: the attestation document's SHA-256 anchored in the
  log(s) as a `receipt` entry the auditor signs, and the signed audit reference;
- `register`: the receipt submitted to the registry, which checks the level rules, then
  waited for until the registry's status answers name it (an epoch covers it), so that a
  witness asked next finds the participant known.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import aiohttp

from tlog.client.client import LogClient, anchor_in_logs, oap_request
from tlog.errors import InvalidInput, OAPError, UpstreamError, VerificationError
from tlog.formats.anchors import anchors_text
from tlog.formats.audit import sign_audit
from tlog.formats.conformance import claims_of, is_vc, with_witness_signatures
from tlog.formats.dataintegrity import proofs_of
from tlog.formats.diddoc import split_did_url
from tlog.formats.entries import receipt_entry
from tlog.formats.hashing import format_sha256, sha256
from tlog.formats.keys import Ed25519Key
from tlog.transport import Outbound

from .client import RegistryClient


@dataclass(frozen=True)
class WitnessAnswer:
    """What one peer witness answered: its signature (None when it refused) and why not."""

    url: str
    signature: dict[str, Any] | None = None
    by: str = ""
    inclusion: dict[str, Any] | None = None
    error: str = ""


def _signatures(receipt: dict[str, Any]) -> list[dict[str, Any]]:
    return proofs_of(receipt) if is_vc(receipt) else list(receipt.get("signatures", []))


def _signer(sig: dict[str, Any]) -> str:
    by = sig.get("verificationMethod", sig.get("by"))
    return by if isinstance(by, str) else ""


def check_answer(sent: dict[str, Any], answer: object) -> tuple[dict[str, Any], str]:
    """The witness's signature, checked to be exactly one more signature of the receipt
    sent, by another DID than the subject: (signature, its DID URL). The signature itself is
    verified by the registry (which resolves the witness's DID) when the receipt is registered."""
    if not isinstance(answer, dict) or not isinstance(answer.get("signature"), dict) \
            or not isinstance(answer.get("receipt"), dict):
        raise VerificationError("the witness's answer is not {signature, receipt, ...}")
    sig = answer["signature"]
    if answer["receipt"] != with_witness_signatures(sent, [sig]) or sig in _signatures(sent):
        raise VerificationError("the witness returned another receipt than the one sent, with one signature more")
    by = _signer(sig)
    subject = claims_of(sent).get("subject")
    if not by or split_did_url(by)[0] == subject:
        raise VerificationError("the witness's signature names no witness DID (or the subject's)")
    return sig, by


async def anchor_receipt(receipt: dict[str, Any], log_url: str, *, timeout: float = 60.0,
                         token: str | None = None, outbound: Outbound | None = None) -> str:
    """The .tlog-proof of the receipt's `conformance` entry in the log (a log stores
    receipts with fewer witness signatures than their level needs: docs/architecture.md §3.1)."""
    async with LogClient(log_url, timeout=timeout, token=token, outbound=outbound) as log:
        return (await log.anchor({"type": "conformance", "receipt": receipt})).bundle


async def ask_witness(session: aiohttp.ClientSession, url: str, receipt: dict[str, Any],
                      bundle: str) -> WitnessAnswer:
    """One witness's signature of `receipt` (anchored by `bundle`), or why it refused."""
    try:
        data, _ = await oap_request(session, "POST", url.rstrip("/") + "/v1/conformance/witness",
                                    body={"receipt": receipt, "bundle": bundle})
        answer = json.loads(data)
        sig, by = check_answer(receipt, answer)
    except OAPError as e:
        return WitnessAnswer(url, error=e.message)
    except ValueError:
        return WitnessAnswer(url, error="the witness's answer is not JSON")
    return WitnessAnswer(url, sig, by, answer.get("inclusion"))


async def request_witnesses(receipt: dict[str, Any], witnesses: Sequence[str], log_url: str, *,
                            bundle: str | None = None, timeout: float = 60.0, token: str | None = None,
                            outbound: Outbound | None = None) -> tuple[dict[str, Any], list[WitnessAnswer]]:
    """The receipt with every signature the witnesses gave, and each witness's answer.
    The receipt is anchored in the log first unless `bundle` (its .tlog-proof) is given.
    `outbound`: how the log and the witnesses are reached (tlog.transport; default strict)."""
    outbound = outbound or Outbound()
    if bundle is None:
        bundle = await anchor_receipt(receipt, log_url, timeout=timeout, token=token, outbound=outbound)
    async with outbound.session(timeout=timeout) as session:
        answers = await asyncio.gather(*(ask_witness(session, url, receipt, bundle) for url in witnesses))
    signed = with_witness_signatures(receipt, [a.signature for a in answers if a.signature is not None])
    return signed, list(answers)


async def make_audit(seed: Ed25519Key, *, subject: str, standard: str, uri: str, document: bytes,
                     log_urls: Sequence[str], timeout: float = 60.0, token: str | None = None,
                     outbound: Outbound | None = None) -> dict[str, Any]:
    """The auditor's signed audit reference for `subject` (tlog.formats.audit): the document's
    SHA-256 anchored in every log of `log_urls` as a `receipt` entry signed by the auditor,
    then the reference signed. One log gives a .tlog-proof, several an oap-anchors/v1 file."""
    digest = sha256(document)
    results = await anchor_in_logs(receipt_entry(digest, seed), list(log_urls), timeout=timeout, token=token,
                                   outbound=outbound)
    failed = [f"{r.url}: {r.error}" for r in results if r.anchored is None]
    if failed:
        raise UpstreamError(f"the attestation could not be anchored in every log: {'; '.join(failed)}")
    bundles = [r.anchored.bundle for r in results if r.anchored is not None]
    anchor = bundles[0] if len(bundles) == 1 else anchors_text(bundles)
    return sign_audit(subject, {"standard": standard, "uri": uri, "digest": format_sha256(digest),
                                "anchor": anchor}, seed)


async def register(registry_url: str, receipt: dict[str, Any], *, wait: float = 60.0, timeout: float = 60.0,
                   outbound: Outbound | None = None) -> tuple[dict[str, Any], str]:
    """Submit the receipt; then, unless `wait` is 0, wait (at most `wait` seconds) until the
    registry's status answer about it is no longer `unknown`. Returns (the registry's
    acknowledgement, the status it answers then, or "" without waiting)."""
    async with RegistryClient(registry_url, timeout=timeout, outbound=outbound) as client:
        ack = await client.submit({"type": "conformance", "receipt": receipt})
        if wait <= 0:
            return ack, ""
        rid = ack.get("id") if isinstance(ack.get("id"), str) else claims_of(receipt).get("id")
        if not isinstance(rid, str):
            raise InvalidInput("the receipt has no id")
        deadline = datetime.now(UTC) + timedelta(seconds=wait)
        while True:
            status = (await client.status(rid)).get("status")
            if status != "unknown":
                return ack, str(status)
            if datetime.now(UTC) > deadline:
                raise UpstreamError(f"registered, but the registry's status answers still do not name {rid} after "
                                    f"{wait:g} s (GET /v1/status/{quote(rid, safe=':')})")
            await asyncio.sleep(0.2)
