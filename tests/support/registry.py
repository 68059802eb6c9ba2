"""Shared helpers for the registry tests (the `log_server` fixture is in tests/registry/conftest.py).

A real `oap-log serve` process per module (anchoring is real), registries run
in-process on real aiohttp servers bound to 127.0.0.1 with kernel-chosen ports.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import aiohttp
from aiohttp import web

from registry.api import build_app
from registry.config import RegistryConfig
from registry.service import RegistryService
from registry.statuslist import decode_list, verify_proof
from registry.statusverify import verify_status
from tlog.client.verifier import TrustPolicy
from tlog.formats.conformance import sign_conformance, witness_signature
from tlog.formats.did import did_key_from_public, public_from_did_key
from tlog.formats.ed25519 import public_from_seed
from tlog.formats.times import format_utc
from tlog.http.serve import start_app
from tlog.runtime import children

from tests.support.services import ServerProcess

BIN = Path(sys.executable).parent
JSON = {"Content-Type": "application/oap+json"}


def did(seed: bytes) -> str:
    return did_key_from_public(public_from_seed(seed))


def utc(dt: datetime) -> str:
    return format_utc(dt.replace(microsecond=0))


def now_utc() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def receipt(seed: bytes, level: str = "L1", *, witnesses: tuple[bytes, ...] = (), valid: timedelta = timedelta(days=30),
            issued: datetime | None = None) -> dict:
    issued = issued or now_utc()
    body = {"id": f"urn:oap:conformance:{uuid.uuid4()}", "subject": did(seed), "level": level,
            "profile": "non-commercial" if level.endswith("-NC") else "standard", "suite": {"name": "oap-test-suite", "version": "1.0.0"},
            "results_digest": "sha256:" + "ab" * 32, "issued_at": utc(issued), "expires_at": utc(issued + valid)}
    signed = sign_conformance(body, seed)
    signed["signatures"] += [witness_signature(signed, w) for w in witnesses]
    return signed


def conformance_doc(rcpt: dict) -> dict:
    return {"type": "conformance", "receipt": rcpt}


@dataclass
class Running:
    svc: RegistryService
    runner: web.AppRunner | None
    url: str
    log: ServerProcess

    @property
    def policy(self) -> TrustPolicy:
        return TrustPolicy.for_log(self.log.vkey)

    async def post(self, doc: object, *, raw: bytes | None = None, headers=JSON) -> tuple[int, dict]:
        async with aiohttp.ClientSession() as s:
            data = raw if raw is not None else json.dumps(doc).encode()
            async with s.post(self.url + "/v1/records", data=data, headers=headers) as r:
                return r.status, await r.json(content_type=None)

    async def get(self, path: str, **kw) -> tuple[int, object, dict]:
        async with aiohttp.ClientSession() as s:
            async with s.get(self.url + path, **kw) as r:
                body = await r.read()
                ctype = r.headers.get("Content-Type", "")
                if "json" in ctype:
                    return r.status, json.loads(body), r.headers.copy()
                return r.status, body, r.headers.copy()

    async def stop(self) -> None:
        if self.runner is None:
            return
        runner, self.runner = self.runner, None
        await runner.cleanup()
        await self.svc.close()


async def start_registry(data: Path, log: ServerProcess, *,
                         before_publish: Callable[[], Awaitable[None]] | None = None, **overrides) -> Running:
    # no idle anchor commit unless a test asks for one: commit numbers do not depend on timing
    settings = dict(data_dir=data, log_url=log.url, port=0, epoch_seconds=60, anchor_idle_seconds=3600,
                    batch_interval_ms=20, min_epoch_interval=0.0, rate_limit=0)
    settings.update(overrides)
    cfg = RegistryConfig(**settings)
    cfg.validate()
    svc = await RegistryService.open(cfg, before_publish=before_publish)
    runner = await start_app(build_app(svc), "127.0.0.1", 0)
    return Running(svc, runner, f"http://127.0.0.1:{runner.addresses[0][1]}", log)


async def wait_epoch_after(reg: Running, seq: int, timeout: float = 60.0) -> None:
    """Wait until the status epoch covers registry commit `seq` (epochs follow commits)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        e = reg.svc.epoch
        if e is not None and e.head.seq >= seq:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no status epoch covering seq {seq} within {timeout}s")


async def run(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 60) -> tuple[int, str, str]:
    """Run a subprocess without blocking the event loop (the servers share it); it dies
    with this process, and when `timeout` passes."""
    pre = children.preexec(signal.SIGKILL)
    proc = await asyncio.create_subprocess_exec(*args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                env={**os.environ, **(env or {})}, **({"preexec_fn": pre} if pre else {}))
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1",
           "HOME": "/nonexistent"}


async def git(*args: str, cwd: Path | None = None, date: int | None = None) -> str:
    """`date`: the commit's author and committer time (Unix seconds) — a forged commit dated
    after the registry's head (which the registry dates by rounding its clock up), so that
    what a test forges is refused for what it tests, not for a commit time going backwards."""
    env = GIT_ENV if date is None else {**GIT_ENV, "GIT_AUTHOR_DATE": f"@{date} +0000",
                                        "GIT_COMMITTER_DATE": f"@{date} +0000"}
    code, out, err = await run("git", *args, cwd=cwd, env=env)
    assert code == 0, f"git {' '.join(args)} failed: {err}"
    return out


# --- status answers end to end (tests/registry/test_statuses.py, test_status_via.py) ------------

CLI = str(BIN / "oap-registry")
ALL = "all"


def status_key(reg: Running) -> str:
    """The key status answers are signed with: a mirror signs with its own."""
    assert reg.svc.producer is not None
    return reg.svc.producer.registry


async def post(reg: Running, doc: dict) -> dict:
    st, body = await reg.post(doc)
    assert st == 200, body
    await wait_epoch_after(reg, body["seq"])
    return body


async def answer(reg: Running, key: str) -> tuple[dict, tuple]:
    """The signed answer, verified offline against the registry key and the log, and its verdict:
    (status, revoked_at or suspended_at, reason, reinstated_at)."""
    st, resp, _ = await reg.get("/v1/status/" + quote(key, safe=":"))
    assert st == 200, resp
    v = verify_status(resp, registry=status_key(reg), status_id=key, policy=reg.policy)
    assert v.log_checked and v.status == resp["status"]
    since = v.revoked_at or getattr(v, "suspended_at", None)
    reinstated = getattr(v, "reinstated_at", None)
    return resp, (v.status, utc(since) if since else None, v.reason, utc(reinstated) if reinstated else None)


async def cli_status(reg: Running, key: str, tmp_path: Path) -> tuple[int, dict]:
    """`oap-registry status` online (saving the answer), then --offline on the saved file: both agree."""
    saved = tmp_path / f"{uuid.uuid4()}.json"
    trust = ("--registry-key", reg.svc.registry, "--log-vkey", reg.log.vkey, "--json")
    code, out, err = await run(CLI, "status", key, "--url", reg.url, "--out", str(saved), *trust)
    offline, out2, err2 = await run(CLI, "status", "--offline", str(saved), *trust)
    assert code == offline and json.loads(out) == json.loads(out2), (out + err, out2 + err2)
    return code, json.loads(out)


async def list_bits(reg: Running, issuer: str, purpose: str = "") -> set[int] | str:
    """The set bits of the issuer's status list 0 (`ALL` when every bit is set), its proof checked."""
    st, cred, _ = await reg.get(f"/v1/status-lists/{issuer}/0{purpose}")
    assert st == 200, cred
    verify_proof(cred, public_from_did_key(status_key(reg)))
    assert cred["credentialSubject"]["statusPurpose"] == (purpose.strip("/") or "revocation")
    bits = decode_list(cred["credentialSubject"]["encodedList"])
    if bits == b"\xff" * len(bits):
        return ALL
    return {8 * i + j for i, byte in enumerate(bits) if byte for j in range(8) if byte & (0x80 >> j)}


async def mirror_verdicts(reg: Running, keys: list[str], tmp_path: Path) -> dict[str, tuple]:
    """A verifying mirror replays the whole history (`oap-registry mirror`, then a serving mirror
    with a status service of its own key): it accepts it, and answers with these verdicts."""
    code, out, err = await run(CLI, "mirror", "--upstream", reg.url, "--data", str(tmp_path / "m"),
                               "--registry-key", reg.svc.registry, "--log-vkey", reg.log.vkey)
    assert code == 0 and out.startswith("OK"), out + err
    mirror = await start_registry(tmp_path / "m", reg.log, upstream=reg.url, registry_key=reg.svc.registry,
                                  mirror_interval=3600, epoch_seconds=3600)
    try:
        result = await mirror.svc.sync_once()
        assert not result.refused, result.message
        await wait_epoch_after(mirror, reg.svc.index.head.seq)
        return {k: (await answer(mirror, k))[1] for k in keys}
    finally:
        await mirror.stop()


async def raw(reg: Running, key: str) -> dict:
    st, resp, _ = await reg.get("/v1/status/" + quote(key, safe=":"))
    assert st == 200, resp
    return resp
