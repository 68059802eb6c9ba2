"""`make run`'s witnesses as OAP participants (OAP-CORE-1.0 §31; docs/architecture.md §4).

A peer witness signs conformance receipts as the participant that runs it. On the local
network witness i is `did:web:witness-i.localhost%3A<port>`, its document (listing its
identity key as `#key-1`) served by the local did:web host (`tlog.cli.didhost`), and it
holds an L4 receipt in the local registry: self-signed, witnessed by the next witness, and
registered over the registry's HTTP API, as any participant's. That is the bootstrap of a
peer-witness network: the first witnesses vouch for each other, and from then on a
newcomer climbs to L5 through their HTTP APIs. A receipt is made again when it is missing,
expires within RENEW_BEFORE, or the registry does not answer `good` about it (a new
registry, a revocation).
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from tlog.client.client import ServerError, oap_request
from tlog.errors import OAPError, UpstreamError
from tlog.formats import ed25519
from tlog.formats.conformance import new_claims, sign_conformance, witness_signature
from tlog.formats.diddoc import ed25519_document
from tlog.formats.hashing import format_sha256, sha256
from tlog.formats.strict import loads_json
from tlog.formats.times import parse_utc
from tlog.runtime.keyfiles import read_seed
from tlog.storage.durable import write_atomic
from tlog.transport import Outbound

RENEW_BEFORE = timedelta(days=30)
SUITE = {"name": "oap-localnet", "version": "1"}
RESULTS = b"make run: a local network's witness, not tested by the OAP test suite\n"


@dataclass(frozen=True)
class Participant:
    """A witness of the local network as a participant: its did:web and identity key."""

    name: str  # witness-1.localhost
    did: str
    seed: bytes
    receipt_file: Path

    @property
    def key_id(self) -> str:
        return f"{self.did}#key-1"


def participant(did_root: Path, wdir: Path, name: str, did_port: int) -> Participant:
    """Witness `wdir`'s participant identity, its DID document published under `did_root`."""
    did = f"did:web:{name}%3A{did_port}"
    seed = read_seed(wdir / "identity.key")
    doc_dir = did_root / name / ".well-known"
    doc_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(doc_dir / "did.json", json.dumps(ed25519_document(did, {"key-1": ed25519.public_from_seed(seed)}),
                                                  indent=2) + "\n")
    return Participant(name, did, seed, wdir / "conformance-L4.json")


async def _status(session: aiohttp.ClientSession, registry: str, rid: str, timeout: float = 60.0) -> str:
    """What the registry answers about `rid` (not verified: this only decides whether to
    register a receipt), once it answers: a registry just started has no status epoch yet (503)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            data, _ = await oap_request(session, "GET", f"{registry}/v1/status/{quote(rid, safe=':')}")
        except ServerError as e:
            if e.status != 503 or asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.1)
            continue
        status = json.loads(data).get("status")
        return status if isinstance(status, str) else "unknown"


async def _current(session: aiohttp.ClientSession, registry: str, p: Participant) -> bool:
    """`p` holds an L4 receipt that the registry answers `good` about, valid for RENEW_BEFORE more."""
    try:
        doc = loads_json(p.receipt_file.read_bytes())
        expires = parse_utc(doc["expires_at"], "expires_at") if isinstance(doc, dict) else None
        rid = doc["id"] if isinstance(doc, dict) else None
    except (OSError, OAPError, KeyError):
        return False
    if expires is None or not isinstance(rid, str) or expires < datetime.now(UTC) + RENEW_BEFORE:
        return False
    return await _status(session, registry, rid) == "good"


def l4_receipt(p: Participant, witness: Participant) -> dict[str, Any]:
    """`p`'s L4 receipt, self-signed and witnessed by `witness` (both as their did:web keys)."""
    claims = new_claims(p.did, "L4", results_digest=format_sha256(sha256(RESULTS)), suite=SUITE,
                        issued_at=datetime.now(UTC))
    receipt = sign_conformance(claims, p.seed, by=p.key_id)
    receipt["signatures"].append(witness_signature(receipt, witness.seed, by=witness.key_id))
    return receipt


async def ensure_l4(registry: str, people: list[Participant], *, timeout: float = 60.0) -> list[str]:
    """Every participant holds an L4 receipt in `registry` (see the module doc), each
    witnessed by the next one; returns the names of those that got a new one. Waits
    (at most `timeout`) until the registry answers `good` about each new receipt."""
    if len(people) < 2:
        return []  # one witness alone has nobody independent to witness it
    made: list[tuple[Participant, dict[str, Any]]] = []
    async with Outbound().session(timeout=timeout) as session:  # the local registry: http:// on loopback
        current = await asyncio.gather(*(_current(session, registry, p) for p in people))
        for i, (p, ok) in enumerate(zip(people, current)):
            if not ok:
                made.append((p, l4_receipt(p, people[(i + 1) % len(people)])))
        await asyncio.gather(*(oap_request(session, "POST", f"{registry}/v1/records",
                                           body={"type": "conformance", "receipt": r}) for _, r in made))
        for p, r in made:
            write_atomic(p.receipt_file, json.dumps(r, indent=2) + "\n")
        deadline = asyncio.get_running_loop().time() + timeout
        for _, r in made:
            while await _status(session, registry, r["id"]) != "good":
                if asyncio.get_running_loop().time() > deadline:
                    raise UpstreamError(f"the registry does not answer 'good' about {r['id']} within {timeout:g} s")
                await asyncio.sleep(0.1)
    return [p.name for p, _ in made]
