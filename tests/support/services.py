"""Start the three services as real processes on 127.0.0.1 (kernel-chosen ports),
for the ops checks, the fuzzer, the crash harness and the `server` fixture. Each dies
with the process that started it (SIGKILL: a killed test run leaves nothing running)."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tlog.runtime import children

BIN = Path(sys.executable).parent
ORIGIN = "oap.localhost/log"


class Service:
    def __init__(self, name: str, args: list[str], env: dict | None = None) -> None:
        self.name, self.args, self.env = name, args, env
        self.proc: subprocess.Popen | None = None
        self.url = self.vkey = ""
        self.lines: list[str] = []
        self._reader: threading.Thread | None = None
        self._up = threading.Event()  # its banner was read, or it exited
        self.started = False

    def start(self, timeout: float = 60) -> Service:
        """Start it and wait (at most `timeout` seconds) for its banner's last line."""
        self.lines = []
        self._up.clear()
        self.started = False
        self.proc = children.popen(self.args, death_signal=signal.SIGKILL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, env=self.env)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if self._up.wait(timeout) and self.started:
            return self
        self.kill()
        raise RuntimeError(f"{self.name} did not start:\n" + "".join(self.lines[-20:]))

    def _read(self) -> None:
        """Every line it prints, to its end (it never blocks on a full pipe)."""
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if not self._up.is_set():
                if m := re.match(r"verifier key: (\S+)", line):
                    self.vkey = m.group(1)
                if m := re.match(r"url:\s+(\S+)", line):
                    self.url = m.group(1)
                if line.startswith("data:"):
                    self.started = True
                    self._up.set()
            if len(self.lines) > 20000:
                del self.lines[:10000]
        self._up.set()  # it exited: start() stops waiting

    def _reaped(self, timeout: float) -> int:
        """Its exit status, once it has exited and its last line has been read."""
        assert self.proc is not None
        code = self.proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(timeout)
        return code

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
            self._reaped(10)

    def stop(self) -> int:
        if self.alive():
            self.proc.send_signal(signal.SIGINT)
        return self._reaped(60)


class ServerProcess(Service):
    """A real `oap-log serve` process on 127.0.0.1 with a kernel-chosen port."""

    def __init__(self, data: Path, *extra: str) -> None:
        super().__init__("log", [str(BIN / "oap-log"), "serve", "--data", str(data), "--port", "0", *extra])
        self.data = data

    def stop(self) -> int:
        rc = super().stop()
        self.output = self.log_text
        return rc


def log_service(data: Path, *extra: str, env: dict | None = None) -> Service:
    return Service("log", [str(BIN / "oap-log"), "serve", "--data", str(data), "--port", "0", "--origin", ORIGIN,
                           *extra], env)


def witness_service(data: Path, log_vkey: str, *extra: str, name: str = "witness.test", log_url: str = "",
                    cosigners: tuple[str, ...] = (), env: dict | None = None) -> Service:
    """`cosigners`: its cosigning key kinds ("ed25519", "mldsa44"); () for the default."""
    data.mkdir(parents=True, exist_ok=True)
    cfg = data / "witness.toml"
    kinds = f"cosigners = {json.dumps(list(cosigners))}\n" if cosigners else ""
    cfg.write_text(f'[witness]\nname = "{name}"\nport = 0\n{kinds}\n[[witness.logs]]\norigin = "{ORIGIN}"\n'
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
