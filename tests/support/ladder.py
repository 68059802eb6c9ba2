"""Helpers for the §31 ladder tests: registries run as `oap-registry serve` processes,
records signed by did:web principals, and waiting for the registry's status answers."""
from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from registry.records import signing_bytes
from tlog.formats import ed25519
from tlog.formats.encoding import b64enc
from tlog.formats.times import format_utc

from tests.support.services import BIN, Service

JSON = {"Content-Type": "application/oap+json"}


def registry_process(data: Path, log_urls: list[str], **settings: Any) -> Service:
    """`oap-registry serve` anchoring in `log_urls`, with `settings` as OAP_REGISTRY_* variables
    (commits and status epochs as soon as records come: no idle anchors, no epoch timer)."""
    env = {**os.environ, "OAP_REGISTRY_MIN_EPOCH_INTERVAL": "0", "OAP_REGISTRY_ANCHOR_IDLE_SECONDS": "3600",
           "OAP_REGISTRY_EPOCH_SECONDS": "3600", "OAP_REGISTRY_BATCH_INTERVAL_MS": "20",
           "OAP_REGISTRY_RATE_LIMIT": "0"}
    env.update({f"OAP_REGISTRY_{k.upper()}": str(v).lower() if isinstance(v, bool) else str(v)
                for k, v in settings.items()})
    args = [str(BIN / "oap-registry"), "serve", "--data", str(data), "--port", "0"]
    for url in log_urls:
        args += ["--log-url", url]
    return Service("registry", args, env)


def registry_key(data: Path) -> str:
    return (data / "registry.did").read_text().strip()


def web_signed(body: dict[str, Any], did: str, seed: bytes) -> dict[str, Any]:
    """A registry record (revocation, kill switch, key event) issued by the did:web `did`,
    signed with `seed`, a key its document lists."""
    body = {**body, "issued_by": did}
    return {**body, "signature": b64enc(ed25519.sign(seed, signing_bytes(body)))}


def now() -> str:
    from datetime import UTC, datetime

    return format_utc(datetime.now(UTC).replace(microsecond=0))


def revocation_of(did: str, seed: bytes, *, kind: str = "did", subject: str | None = None,
                  reason: str = "key_compromise") -> dict[str, Any]:
    return web_signed({"type": "revocation", "id": f"urn:oap:revocation:{uuid.uuid4()}", "kind": kind,
                       "subject": subject or did, "reason": reason, "effective_at": now(), "issued_at": now()},
                      did, seed)


def suspension_of(did: str, seed: bytes) -> dict[str, Any]:
    return web_signed({"type": "key_event", "id": f"urn:oap:key-event:{uuid.uuid4()}", "subject": did,
                       "event": "suspend", "effective_at": now(), "issued_at": now()}, did, seed)


async def submit(registry: str, doc: dict[str, Any]) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s:
        async with s.post(registry + "/v1/records", data=json.dumps(doc).encode(), headers=JSON) as r:
            body = await r.json(content_type=None)
            assert r.status == 200, body
            return body


async def status_of(registry: str, status_id: str) -> str:
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{registry}/v1/status/{quote(status_id, safe=':')}") as r:
            body = await r.json(content_type=None)
            return body["status"] if r.status == 200 else f"HTTP {r.status}"


async def wait_status(registry: str, status_id: str, want: str, timeout: float = 60.0) -> None:
    """Wait (bounded) until the registry answers `want` about `status_id` (epochs follow commits)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    got = ""
    while loop.time() < end:
        got = await status_of(registry, status_id)
        if got == want:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the registry answers {got!r} about {status_id}, not {want!r}, after {timeout} s")
