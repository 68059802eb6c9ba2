"""Building signed records and talking to a registry (CLI, scripts, tests)."""
from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import aiohttp

from tlog.client.client import ServerError, bearer, oap_request, read_answer
from tlog.client.verifier import TrustPolicy
from tlog.errors import OAPError
from tlog.formats.did import did_key_from_public
from tlog.formats.keys import Ed25519Key, ed25519_signer
from tlog.formats.times import format_utc
from tlog.formats.urls import check_url
from tlog.transport import Outbound

from .anchoring import Genesis
from .keyrotation import KeyChain, chain_of_document
from .records import sign_record
from .statusverify import StatusVerificationError, VerifiedStatus, check_answer_id, status_id_of, verify_status

MAX_EPOCHS = 64
"""Token epochs `token_epoch` follows at most (one per recovery after a kill switch)."""


def _now() -> str:
    return format_utc(datetime.now(UTC).replace(microsecond=0))


def did_of(seed: Ed25519Key) -> str:
    return did_key_from_public(ed25519_signer(seed).public)


def make_revocation(seed: Ed25519Key, *, kind: str, subject: str, reason: str = "unspecified",
                    effective_at: str | None = None, status_list_index: int | None = None,
                    status_list: int | None = None, record_id: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "revocation", "id": record_id or f"urn:oap:revocation:{uuid.uuid4()}",
                            "kind": kind, "subject": subject, "reason": reason,
                            "effective_at": effective_at or _now(), "issued_at": _now()}
    if status_list_index is not None:
        body["status_list_index"] = status_list_index
    if status_list is not None:
        body["status_list"] = status_list
    return sign_record(body, seed)


def make_kill_switch(seed: Ed25519Key, *, principal: str | None = None, effective_at: str | None = None,
                     reason: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "kill_switch", "id": f"urn:oap:kill-switch:{uuid.uuid4()}",
                            "principal": principal or did_of(seed), "effective_at": effective_at or _now(),
                            "issued_at": _now()}
    if reason:
        body["reason"] = reason
    return sign_record(body, seed)


def make_key_event(seed: Ed25519Key, *, subject: str, key: str | None = None, event: str = "add_controller",
                   effective_at: str | None = None, reason: str | None = None) -> dict[str, Any]:
    """`key` for add_controller and rotate; `reason` for suspend (registry.records)."""
    body: dict[str, Any] = {"type": "key_event", "id": f"urn:oap:key-event:{uuid.uuid4()}", "subject": subject,
                            "event": event, "effective_at": effective_at or _now(), "issued_at": _now()}
    if key is not None:
        body["key"] = key
    if reason is not None:
        body["reason"] = reason
    return sign_record(body, seed)


RegistryError = ServerError  # a refusal from the registry: status, OAP code, message


class RegistryClient:
    def __init__(self, url: str, *, timeout: float = 60.0, token: str | None = None,
                 outbound: Outbound | None = None) -> None:
        """`outbound`: how the registry is reached (tlog.transport; by default TLS 1.3, and
        plain http:// to loopback only)."""
        outbound = outbound or Outbound()
        self.url = check_url(url, "registry URL", insecure_http=outbound.insecure_http)
        self._headers = bearer(token)
        self._session = outbound.session(timeout=timeout)

    async def __aenter__(self) -> RegistryClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self._session.close()

    async def _call(self, method: str, path: str, body: Any = None, params: dict | None = None) -> Any:
        data, content_type = await oap_request(self._session, method, self.url + path, body=body, params=params,
                                               headers=self._headers)
        return json.loads(data) if content_type.endswith("json") else data.decode()

    async def submit(self, record: dict[str, Any]) -> dict[str, Any]:
        return await self._call("POST", "/v1/records", record)

    async def status(self, status_id: str, issuer: str | None = None) -> dict[str, Any]:
        """The registry's signed answer about `status_id` (with `issuer`: that issuer's
        credential). StatusVerificationError when the answer is about another id; verify it
        with `registry.statusverify.verify_status(..., status_id=status_id_of(status_id, issuer))`
        before acting on it."""
        asked = status_id_of(status_id, issuer)  # InvalidInput: a credential id without its issuer
        resp = await self._call("GET", "/v1/status/" + quote(status_id, safe=":"),
                                params={"issuer": issuer} if issuer else None)
        check_answer_id(resp, asked)
        return resp

    async def verified_status(self, status_id: str, *, registry: str, policy: TrustPolicy | None = None,
                              issuer: str | None = None, genesis: Genesis | None = None) -> VerifiedStatus:
        """The registry's answer about `status_id`, verified offline (`statusverify.verify_status`:
        the registry key `registry` pinned by the caller, the log anchors against `policy`).
        A relying party acts only on `.status == "good"`."""
        resp = await self.status(status_id, issuer)
        return verify_status(resp, registry=registry, status_id=status_id_of(status_id, issuer), policy=policy,
                             genesis=genesis, keys=await self.keys_for(resp, registry))

    async def keys_for(self, resp: object, registry: str) -> KeyChain | None:
        """The registry's key rotations when an answer needs them for a verifier pinned to
        `registry`: signed by another key, or about records another key may have anchored (a
        rotated registry's, a mirror's upstream's); else None (one request saved)."""
        epoch = resp.get("epoch") if isinstance(resp, dict) else None
        if isinstance(epoch, dict) and {epoch.get("registry"), epoch.get("history", registry)} != {registry}:
            return await self.key_rotations()
        return None

    async def key_rotations(self) -> KeyChain | None:
        """The registry's keys (`GET /v1/key-rotations`), every rotation verified to be signed by
        the key before it and countersigned by the next (`keyrotation`); None from a registry
        that serves none. StatusVerificationError for a chain that does not verify."""
        try:
            doc = await self._call("GET", "/v1/key-rotations")
        except ServerError as e:
            if e.status == 404:
                return None
            raise
        try:
            return chain_of_document(doc)
        except OAPError as e:
            raise StatusVerificationError(f"key rotations: {e.message}") from None

    async def token_epoch(self, principal: str, token_class: str, *, registry: str,
                          policy: TrustPolicy | None = None) -> VerifiedStatus:
        """The verified answer about the status id the tokens `principal` issues now carry
        (docs/architecture.md §6.1, token epochs): `<principal>#<class>` until a kill switch;
        after each recovery the id of the epoch it opened, which every revoked answer names
        (`reinstated_id`). While a kill switch is in force no epoch is open: the answer is the
        revoked one. StatusVerificationError when the answers lead nowhere."""
        sid = f"{principal}#{token_class}"
        for _ in range(MAX_EPOCHS):
            got = await self.verified_status(sid, registry=registry, policy=policy)
            if got.reinstated_id is None:
                return got
            sid = got.reinstated_id
        raise StatusVerificationError(f"more than {MAX_EPOCHS} token epochs of {principal}: stopped following them")

    async def info(self) -> dict[str, Any]:
        return await self._call("GET", "/v1/info")

    async def status_events(self, ids: Sequence[str], issuer: str | None = None) -> AsyncIterator[dict[str, Any]]:
        """Follow the registry's push stream (`GET /v1/status-events`, Server-Sent Events):
        each id's signed answer now, then again whenever it changes, until the stream
        ends. An answer about an id that was not asked for raises StatusVerificationError.
        Verify each with `registry.statusverify.verify_status` (`status_id` the answer's,
        which is one of `ids`) before acting on it."""
        asked = {status_id_of(i, issuer) for i in ids}
        params = [("id", i) for i in ids] + ([("issuer", issuer)] if issuer else [])
        timeout = aiohttp.ClientTimeout(total=None, sock_read=60)  # keep-alives come every 15 s
        async with self._session.get(self.url + "/v1/status-events", params=params, headers=self._headers,
                                     timeout=timeout) as resp:
            if resp.status != 200:
                await read_answer(resp)  # raises the registry's error
            event, data = "", b""
            while True:
                line = await resp.content.readline()
                if not line:
                    return
                line = line.rstrip(b"\r\n")
                if line.startswith(b"event:"):
                    event = line[6:].strip().decode()
                elif line.startswith(b"data:"):
                    data += line[5:].lstrip(b" ")
                elif not line:
                    if event == "status" and data:
                        answer = json.loads(data)
                        got = answer.get("id") if isinstance(answer, dict) else None
                        if got not in asked:
                            raise StatusVerificationError(f"the answer is about {got}, not one of the ids asked about "
                                                          f"({', '.join(sorted(asked))})")
                        yield answer
                    event, data = "", b""
