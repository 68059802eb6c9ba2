"""Client library for the OAP log: async `LogClient` and blocking `SyncLogClient`.

`anchor()` submits one entry and returns an `Anchored` whose `bundle` is a
`.tlog-proof` text verifiable offline with `tlog.client.verifier`. The client checks
what the server returns: the leaf hash must be the hash of the canonical
entry it computed itself, and, when given a trust policy, the bundle must
verify before `anchor()` returns.
"""
from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tlog.client.tilereader import TileTree, view, with_tiles
from tlog.client.verifier import TrustPolicy
from tlog.errors import InvalidInput, NotFound, OAPError, UpstreamError, VerificationError
from tlog.formats.diddoc import skip_resolved_signatures
from tlog.formats.encoding import b64dec
from tlog.formats.entries import canonical_entry, check_entry_signature, decode_entry
from tlog.formats.hashing import format_sha256, leaf_hash
from tlog.formats.proofbundle import ProofBundle, parse_proof_bundle
from tlog.formats.tiles import CLIENT_ACCEPT_ENCODING
from tlog.formats.urls import check_url
from tlog.transport import MAX_ANSWER, Outbound, read_capped


class ServerError(OAPError):
    """The server refused a request; carries its status and OAP error code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code = status, code


def bearer(token: str | None) -> dict[str, str]:
    """The Authorization header of an `oap-log token` (none without one)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def token_from(path: str | Path | None = None) -> str | None:
    """The bearer token for writes: read from `path` (first line; the file should be
    mode 0600), else the OAP_TOKEN environment variable, else none. Never from a flag:
    flags show in `ps` and shell history."""
    if path is not None:
        try:
            text = Path(path).read_text().strip().splitlines()
        except OSError as e:
            raise InvalidInput(f"cannot read the token file {path}: {e.strerror}") from None
        if not text or not text[0].strip():
            raise InvalidInput(f"the token file {path} is empty")
        return text[0].strip()
    return os.environ.get("OAP_TOKEN") or None


async def oap_request(session: aiohttp.ClientSession, method: str, url: str, *, body: Any = None,
                      params: dict | None = None, headers: dict[str, str] | None = None) -> tuple[bytes, str]:
    """One request to an OAP service (log, witness, registry): a JSON body out, the raw
    body and content type back; a non-200 answer becomes NotFound or ServerError with
    the service's OAP error code and message, and a service that cannot be reached an
    UpstreamError that says so in one line."""
    kw: dict[str, Any] = {"params": params, "headers": dict(headers or {})}
    if body is not None:
        kw["data"] = json.dumps(body, separators=(",", ":")).encode()
        kw["headers"]["Content-Type"] = "application/oap+json"
    try:
        async with session.request(method, url, **kw) as resp:
            return await read_answer(resp)
    except (TimeoutError, aiohttp.ClientError, OSError) as e:
        raise UpstreamError(f"cannot reach {url.split('?')[0]}: {_reason(e)}") from None


def _reason(e: BaseException) -> str:
    if isinstance(e, TimeoutError):
        return "no answer within the timeout"
    os_error = getattr(e, "os_error", None)
    if isinstance(os_error, OSError) and os_error.strerror:
        return os_error.strerror.lower()
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text[:200]}" if text else type(e).__name__


async def read_answer(resp: aiohttp.ClientResponse, cap: int = MAX_ANSWER) -> tuple[bytes, str]:
    """The body and content type of a 200 answer, at most `cap` bytes (TooLarge beyond); any
    other status raises the service's error (NotFound, or ServerError with its OAP code and
    message)."""
    data = await read_capped(resp, cap)
    if resp.status != 200:
        try:
            err = json.loads(data)
            code, msg = err.get("error", "unknown"), err.get("message", "")
        except (ValueError, AttributeError):
            code, msg = "unknown", data[:200].decode("utf-8", "replace")
        if resp.status == 404:
            raise NotFound(msg)
        raise ServerError(resp.status, code, msg)
    return data, resp.content_type


def stored_entry(sent: bytes, stored: bytes | None, leaf: bytes) -> bytes:
    """The entry a log stored for the one sent, checked: the same bytes, or, for a signer
    named by a DID other than did:key, the same entry plus the DID document the log
    resolved (docs/architecture.md §3.1), with which its signature must verify."""
    if leaf == leaf_hash(sent):
        return sent
    if stored is None or leaf_hash(stored) != leaf:
        raise VerificationError("server's leaf hash is not the hash of the entry sent")
    a, b = decode_entry(sent), decode_entry(stored)
    if "did_document" in a or "did_document" not in b or {k: v for k, v in b.items() if k != "did_document"} != a:
        raise VerificationError("the log stored another entry than the one sent")
    try:
        check_entry_signature(stored, None)
    except OAPError as e:
        raise VerificationError(f"the entry the log stored does not verify with the DID document it kept: "
                                f"{e.message}") from None
    return stored


@dataclass(frozen=True)
class Anchored:
    index: int
    leaf_hash: bytes
    tree_size: int
    checkpoint: str
    bundle: str
    duplicate: bool


class LogClient:
    """One log. `token` (an `oap-log token`; see `token_from`) is sent with every request
    as a bearer token: logs that require one for writes accept the client's appends."""

    def __init__(self, url: str, *, policy: TrustPolicy | None = None, timeout: float = 60.0,
                 session: aiohttp.ClientSession | None = None, token: str | None = None,
                 outbound: Outbound | None = None) -> None:
        """`outbound`: how the log is reached (tlog.transport; by default TLS 1.3, and plain
        http:// to loopback only)."""
        self.outbound = outbound or Outbound()
        self.url = check_url(url, "log URL", insecure_http=self.outbound.insecure_http)
        self.policy = policy
        self._headers = bearer(token)
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session = session
        self._own_session = session is None

    async def __aenter__(self) -> LogClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = self.outbound.session(timeout=self._timeout,
                                                  headers={"Accept-Encoding": CLIENT_ACCEPT_ENCODING})
        return self._session

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def _request(self, method: str, path: str, *, body: Any = None, params=None, raw: bool = False):
        data, _ = await oap_request(self.session, method, self.url + path, body=body, params=params,
                                    headers=self._headers)
        return data if raw else json.loads(data)

    # --- writes ----------------------------------------------------------------------

    async def anchor(self, entry: dict) -> Anchored:
        canon = canonical_entry(entry, lookup=skip_resolved_signatures)
        r = await self._request("POST", "/v1/entries", body=entry)
        leaf = b64dec(r["leaf_hash"])
        if leaf != leaf_hash(canon):
            canon = stored_entry(canon, parse_proof_bundle(r["bundle"]).extra, leaf)
        out = Anchored(r["index"], leaf, r["tree_size"], r["checkpoint"], r["bundle"], r["duplicate"])
        if self.policy is not None:
            self.policy.verify_bundle(out.bundle, entry=canon)
        return out

    async def anchor_many(self, entries: Sequence[dict]) -> list[Anchored]:
        """One `entries:batch` request; bundles are built here from the shared checkpoint."""
        canon = [canonical_entry(e, lookup=skip_resolved_signatures) for e in entries]
        r = await self._request("POST", "/v1/entries:batch", body={"entries": list(entries)})
        out = []
        for k, (c, res) in enumerate(zip(canon, r["results"], strict=True)):
            lh = b64dec(res["leaf_hash"])
            if lh != leaf_hash(c):  # the log kept the signer's DID document in it: read what it stored
                c = canon[k] = stored_entry(c, b64dec((await self.entry(res["index"]))["entry_cbor"]), lh)
            proof = tuple(b64dec(h) for h in res["inclusion_proof"])
            bundle = ProofBundle(index=res["index"], proof=proof, checkpoint=r["checkpoint"], extra=c).to_text()
            out.append(Anchored(res["index"], lh, r["tree_size"], r["checkpoint"], bundle, res["duplicate"]))
        if self.policy is not None:
            for a, c in zip(out, canon):
                self.policy.verify_bundle(a.bundle, entry=c)
        return out

    # --- reads ------------------------------------------------------------------------

    async def info(self) -> dict:
        return await self._request("GET", "/v1/info")

    async def checkpoint(self) -> str:
        return (await self._request("GET", "/checkpoint", raw=True)).decode()

    async def entry(self, index: int) -> dict:
        return await self._request("GET", f"/v1/entries/{index}")

    async def receipts_page(self, signer: str, *, since: str | None = None, after: int = -1,
                            limit: int = 1000) -> dict:
        """One page of a signer's receipt entries (`/v1/receipts`)."""
        params = {"signer": signer, "limit": str(limit)} | ({"since": since} if since else {})
        if after >= 0:
            params["after"] = str(after)
        return await self._request("GET", "/v1/receipts", params=params)

    async def receipts(self, signer: str, *, since: str | None = None, max_pages: int = 10_000) -> list[dict]:
        """Every receipt entry of `signer` (logged or claiming to be signed at or after
        `since`), page by page, in index order."""
        out: list[dict] = []
        after = -1
        for _ in range(max_pages):
            page = await self.receipts_page(signer, since=since, after=after)
            out += page["receipts"]
            if "next_after" not in page:
                return out
            after = page["next_after"]
        raise OAPError(f"more than {max_pages} pages of receipts: narrow the query with since")

    async def receipts_anchoring(self, receipt_hash: bytes) -> list[dict]:
        """The receipt entries that anchor this receipt hash (who signed it, and where)."""
        r = await self._request("GET", "/v1/entries:lookup", params={"receipt_hash": format_sha256(receipt_hash)})
        return r["receipts"]

    async def prove(self, index: int, size: int | None = None) -> dict:
        params = {"index": str(index)} | ({"size": str(size)} if size else {})
        return await self._request("GET", "/v1/proof/inclusion", params=params)

    async def prove_many(self, indices: Sequence[int], size: int | None = None) -> dict:
        body: dict[str, Any] = {"indices": list(indices)}
        if size:
            body["size"] = size
        return await self._request("POST", "/v1/proof/inclusion:batch", body=body)

    async def consistency(self, old: int, new: int) -> list[bytes]:
        r = await self._request("GET", "/v1/proof/consistency", params={"old": str(old), "new": str(new)})
        return [b64dec(h) for h in r["consistency_proof"]]

    async def bundle_for(self, index: int, entry: bytes | None = None) -> str:
        """A fresh bundle for an entry already in the log, against the current checkpoint."""
        r = await self.prove(index)
        proof = tuple(b64dec(h) for h in r["inclusion_proof"])
        if entry is None:
            entry = b64dec((await self.entry(index))["entry_cbor"])
        return ProofBundle(index=index, proof=proof, checkpoint=r["checkpoint"], extra=entry).to_text()

    async def fetch(self, path: str) -> bytes:
        return await self._request("GET", "/" + path, raw=True)

    async def root_from_tiles(self, size: int) -> bytes:
        """Recompute the root of tree `size` from the served tiles alone."""
        tree = TileTree(size)
        v = await with_tiles(tree, self.fetch, view)
        return v.root


@dataclass(frozen=True)
class LogAnchor:
    """One log's answer to `anchor_in_logs`: the anchor, or why there is none."""

    url: str
    anchored: Anchored | None
    error: str | None = None
    code: str | None = None  # the log's OAP error code, when it refused (`deprecated`: frozen or closed)


async def anchor_in_logs(entry: dict, urls: Sequence[str], *, policy: TrustPolicy | None = None,
                         timeout: float = 30.0, token: str | None = None,
                         outbound: Outbound | None = None) -> list[LogAnchor]:
    """Anchor one entry in several logs at once (OAP-CORE-1.0 §19.3), in the order of
    `urls`. A log that is down or slow costs at most `timeout`: its LogAnchor carries
    the error and the others are kept. With a policy every bundle is verified against
    it before it counts; `anchors_text` then writes them to one file."""
    canonical_entry(entry, lookup=skip_resolved_signatures)  # a malformed entry fails here, once

    async def one(url: str) -> LogAnchor:
        try:
            async with LogClient(url, policy=policy, timeout=timeout, token=token, outbound=outbound) as client:
                return LogAnchor(url, await asyncio.wait_for(client.anchor(entry), timeout))
        except TimeoutError:
            return LogAnchor(url, None, f"no answer within {timeout:g} s")
        except ServerError as e:
            return LogAnchor(url, None, e.message, e.code)
        except OAPError as e:
            return LogAnchor(url, None, e.message)

    if len(set(urls)) != len(urls):
        raise InvalidInput("the same log URL is given twice")
    return list(await asyncio.gather(*(one(u) for u in urls)))


class SyncLogClient:
    """Blocking wrapper (CLI, scripts): runs `LogClient` on a private event loop."""

    def __init__(self, url: str, **kw: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._client = LogClient(url, **kw)

    def __getattr__(self, name: str):
        fn = getattr(self._client, name)
        if not asyncio.iscoroutinefunction(fn):
            return fn

        def call(*a, **kw):
            return self._loop.run_until_complete(fn(*a, **kw))

        return call

    def close(self) -> None:
        self._loop.run_until_complete(self._client.close())
        self._loop.close()

    def __enter__(self) -> SyncLogClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
