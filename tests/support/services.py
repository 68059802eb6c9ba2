"""Start the three services as real processes on 127.0.0.1 (kernel-chosen ports),
for the ops checks, the fuzzer, the crash harness and the `server` fixture."""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

BIN = Path(sys.executable).parent
ORIGIN = "oap.localhost/log"


class Service:
    def __init__(self, name: str, args: list[str], env: dict | None = None) -> None:
        self.name, self.args, self.env = name, args, env
        self.proc: subprocess.Popen | None = None
        self.url = self.vkey = ""
        self.lines: list[str] = []

    def start(self, timeout: float = 60) -> Service:
        self.lines = []
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=self.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            if m := re.match(r"verifier key: (\S+)", line):
                self.vkey = m.group(1)
            if m := re.match(r"url:\s+(\S+)", line):
                self.url = m.group(1)
            if line.startswith("data:"):
                threading.Thread(target=self._drain, daemon=True).start()
                return self
        self.kill()
        raise RuntimeError(f"{self.name} did not start:\n" + "".join(self.lines[-20:]))

    def _drain(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            if len(self.lines) > 20000:
                del self.lines[:10000]

    @property
    def log_text(self) -> str:
        return "".join(self.lines)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int:
        if self.alive():
            self.proc.send_signal(signal.SIGINT)
            return self.proc.wait(30)
        return self.proc.returncode


class ServerProcess(Service):
    """A real `oap-log serve` process on 127.0.0.1 with a kernel-chosen port."""

    def __init__(self, data: Path, *extra: str) -> None:
        super().__init__("log", [str(BIN / "oap-log"), "serve", "--data", str(data), "--port", "0", *extra])
        self.data = data

    def stop(self) -> int:
        rc = super().stop()
        time.sleep(0.1)  # let the drain thread read the last lines
        self.output = self.log_text
        return rc


def log_service(data: Path, *extra: str, env: dict | None = None) -> Service:
    return Service("log", [str(BIN / "oap-log"), "serve", "--data", str(data), "--port", "0", "--origin", ORIGIN,
                           *extra], env)


def witness_service(data: Path, log_vkey: str, *extra: str, name: str = "witness.test", log_url: str = "",
                    env: dict | None = None) -> Service:
    data.mkdir(parents=True, exist_ok=True)
    cfg = data / "witness.toml"
    cfg.write_text(f'[witness]\nname = "{name}"\nport = 0\n\n[[witness.logs]]\norigin = "{ORIGIN}"\n'
                   f'vkey = "{log_vkey}"\n' + (f'url = "{log_url}"\n' if log_url else ""))
    return Service("witness", [str(BIN / "oap-witness"), "serve", "--config", str(cfg), "--data", str(data), *extra],
                   env)


def registry_service(data: Path, log_url: str, *extra: str, env: dict | None = None) -> Service:
    return Service("registry", [str(BIN / "oap-registry"), "serve", "--data", str(data), "--port", "0",
                                "--log-url", log_url, *extra], env)


async def fetch_entries(url: str, size: int) -> list[bytes]:
    """Every entry of a log of `size`, read through its entry bundles alone (tlog-tiles)."""
    import aiohttp

    from tlog.formats.tiles import TILE_WIDTH, entries_path

    out: list[bytes] = []
    async with aiohttp.ClientSession() as session:
        for n in range((size + TILE_WIDTH - 1) // TILE_WIDTH):
            async with session.get(f"{url}/{entries_path(n, min(TILE_WIDTH, size - n * TILE_WIDTH))}") as r:
                assert r.status == 200, f"entry bundle {n}: HTTP {r.status}"
                raw = await r.read()
            pos = 0
            while pos < len(raw):
                k = int.from_bytes(raw[pos:pos + 2], "big")
                out.append(raw[pos + 2:pos + 2 + k])
                pos += 2 + k
    return out
