"""Shared helpers for the witness tests: the V4 (litewitness) and V8 vectors, an in-memory
signing log with forks, and a witness service on 127.0.0.1."""
from __future__ import annotations

import contextlib
import json
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp.test_utils import TestServer

from tlog.formats.checkpoint import Checkpoint
from tlog.formats.keys import CosignatureSigner, Signer
from tlog.formats.mirror import add_checkpoint_body
from tlog.formats.note import sign_note
from tlog.http.serve import start_app
from tlog.merkle.tree import memory_view
from tlog.runtime.keyfiles import write_private_key
from witness.api import build_app
from witness.config import WitnessConfig, WitnessedLog
from witness.service import WitnessService

from tests.support.services import Service

# --- V4 (the litewitness test suite's scenario) and V8 ------------------------------

V4_ORIGIN = "sigsum.org/v1/tree/4d6d8825a6bb689d459628312889dfbb0bcd41b5211d9e1ce768b0ff0309e562"
V4_VKEY = V4_ORIGIN + "+5202289b+Af/cLU2Y5BJNP+r3iMDC+av9eWCD0fBJVDfzAux5zxAP"
V4_ROOTS = {
    1: "KgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
    3: "RcCI1Nk56ZcSmIEfIn0SleqtV7uvrlXNccFx595Iwl0=",
    5: "QrtXrQZCCvpIgsSmOsah7HdICzMLLyDfxToMql9WTjY=",
}
V4_SIGS = {
    1: "UgIom7fPZTqpxWWhyjWduBvTvGVqsokMbqTArsQilegKoFBJQjUFAmQ0+YeSPM3wfUQMFSzVnnNuWRTYrajXpNUbIQY=",
    3: "UgIom2VbtIcdFbwFAy1n7s6IkAxIY6J/GQOTuZF2ORV39d75cbAj2aQYwyJre36kezNobZs4SUUdrcawfAB8WVrx6go=",
    5: "UgIomw/EOJmWi0i1FQsOj+etB7F8IccFam/jgd6wzRns4QPVmyEZtdvl1U2KEmLOZ/ASRcWJi0tW90dJWAShei7sDww=",
}
V4_PROOFS = {
    (1, 3): ["KgEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "KgIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="],
    (1, 5): ["KgEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "+fUDV+k970B4I3uKrqJM4aP1lloPZP8mvr2Z4wRw2LI=",
             "KgQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="],
    (3, 5): ["KgIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "KgMAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
             "wgiIFdZfYNv6WU1OllBKsWnLYIS/DBMqt8Uh/S4OukE=", "KgQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="],
}

V8_SEED = bytes.fromhex("31ffc2116ecbe003acaa800ab70757bd7d53206e3febef6a6d0796d95530b34f")
V8_NAME = "example.com/witness"
V8_VKEY = "example.com/witness+10a1c019+BGSEitir7W6FmBs7OHWyUrh2frtLAvcDrKOx5xu9ao5Q"
V8_TS = 1700000000
V8_LINE = ("— example.com/witness EKHAGQAAAABlU/EAx63UqrTpgWwhS2mgX9uIuoao54YP2S3rcDOnUVGFRU5HhEqQQyy+1buBh+kBUoIQ"
           "pxQbasasirZm28WyE3HDDQ==\n")


def v4_checkpoint(size: int, *, origin: str = V4_ORIGIN, sig: str | None = None) -> str:
    return f"{origin}\n{size}\n{V4_ROOTS[size]}\n\n— {origin} {sig or V4_SIGS[size]}\n"


def v4_body(old: int, proof: list[str], cp: str) -> bytes:
    return ("".join(f"{x}\n" for x in [f"old {old}", *proof, ""]) + cp).encode()


# --- an in-memory log that signs checkpoints, with forks -------------------------------


@dataclass
class MemLog:
    """Leaves are 32-byte hashes; `fork(at)` shares the first `at` leaves then diverges."""

    origin: str = "test.example/log"
    seed: bytes = bytes(range(32))
    leaves: list[bytes] = field(default_factory=list)
    tag: int = 0

    @property
    def signer(self) -> Signer:
        return Signer(self.origin, self.seed)

    @property
    def vkey(self) -> str:
        return self.signer.vkey

    def grow(self, n: int) -> MemLog:
        start = len(self.leaves)
        self.leaves += [bytes([self.tag]) + i.to_bytes(8, "big") + bytes(23) for i in range(start, start + n)]
        return self

    def fork(self, at: int, tag: int) -> MemLog:
        return MemLog(self.origin, self.seed, list(self.leaves[:at]), tag)

    def root(self, size: int) -> bytes:
        return memory_view(self.leaves[:size]).root

    def checkpoint(self, size: int) -> str:
        return sign_note(Checkpoint(self.origin, size, self.root(size)).to_text(), [self.signer])

    def proof(self, old: int, size: int) -> list[bytes]:
        return memory_view(self.leaves[:size]).consistency_proof(old)

    def body(self, old: int, size: int) -> bytes:
        return add_checkpoint_body(old, self.proof(old, size), self.checkpoint(size))


# --- a witness on 127.0.0.1 -------------------------------------------------------------


def witness_config(tmp: Path, logs: list[WitnessedLog], *, seed: bytes = V8_SEED, name: str = V8_NAME,
                   **kw) -> WitnessConfig:
    tmp.mkdir(parents=True, exist_ok=True)
    key = tmp / "witness.key"
    if not key.exists():
        write_private_key(key, CosignatureSigner(name, seed).to_skey())
    kw.setdefault("rate_limit", 0)  # the tests send their load from one address
    return WitnessConfig(data_dir=tmp, logs=tuple(logs), **kw)


@contextlib.asynccontextmanager
async def running_witness(cfg: WitnessConfig, *, fast: bool = True, **open_kw):
    """WitnessService + a real server on 127.0.0.1 + a client session.

    As `oap-witness serve` runs it (`tlog.http.serve.start_app`: add-checkpoint on the fast
    path), or with `fast=False` aiohttp alone (a TestServer)."""
    cfg.validate()
    svc = WitnessService.open(cfg, **open_kw)
    session = aiohttp.ClientSession()
    if fast:
        runner = await start_app(build_app(svc), "127.0.0.1", 0)
        url, stop = f"http://127.0.0.1:{runner.addresses[0][1]}", runner.cleanup
    else:
        server = TestServer(build_app(svc), host="127.0.0.1")
        await server.start_server()
        url, stop = str(server.make_url("")).rstrip("/"), server.close
    try:
        yield svc, url, session
    finally:
        await session.close()
        await stop()
        svc.close()


async def post(session: aiohttp.ClientSession, url: str, body: bytes) -> tuple[int, str, str]:
    async with session.post(url + "/add-checkpoint", data=body) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.text()


# --- a real `oap-witness serve` process -------------------------------------------------

BIN = Path(sys.executable).parent


def write_config(path: Path, data: Path, logs: list[WitnessedLog], *, name: str = "w.test", **extra) -> Path:
    lines = ["[witness]", f'data_dir = "{data}"', f'name = "{name}"']
    extra.setdefault("rate_limit", 0)  # the tests send their load from one address
    for k, v in extra.items():
        lines.append(f"{k} = {json.dumps(v)}")
    for log in logs:
        lines += ["", "[[witness.logs]]", f'origin = "{log.origin}"', f'vkey = "{log.vkey}"']
        if log.url:
            lines.append(f'url = "{log.url}"')
    path.write_text("\n".join(lines) + "\n")
    return path


class WitnessProcess(Service):
    """`oap-witness serve` on 127.0.0.1 with a kernel-chosen port; kill() is SIGKILL, stop() SIGTERM."""

    def __init__(self, config: Path) -> None:
        super().__init__("witness", [str(BIN / "oap-witness"), "serve", "--config", str(config), "--port", "0"])
        self.config = config

    def stop(self) -> int:
        assert self.proc is not None
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        return self._reaped(30)


