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

import aiohttp
from aiohttp import web

from registry.api import build_app
from registry.config import RegistryConfig
from registry.service import RegistryService
from tlog.client.verifier import TrustPolicy
from tlog.formats.conformance import sign_conformance, witness_signature
from tlog.formats.did import did_key_from_public
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
            "profile": "standard", "suite": {"name": "oap-test-suite", "version": "1.0.0"},
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


async def git(*args: str, cwd: Path | None = None) -> str:
    code, out, err = await run("git", *args, cwd=cwd, env=GIT_ENV)
    assert code == 0, f"git {' '.join(args)} failed: {err}"
    return out
