from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tlog.checkpoint import Checkpoint
from tlog.keys import Signer
from tlog.note import sign_note

BIN = Path(sys.executable).parent


def make_signer(origin: str = "test.example/log") -> Signer:
    return Signer(origin, bytes(range(32)))


def checkpoint_signer(signer: Signer):
    return lambda size, root: sign_note(Checkpoint(signer.name, size, root).to_text(), [signer])


class ServerProcess:
    """A real `oap-log serve` process on 127.0.0.1 with a kernel-chosen port."""

    def __init__(self, data: Path, *extra: str) -> None:
        self.data = data
        self.extra = extra
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.vkey = ""

    def start(self, timeout: float = 30) -> "ServerProcess":
        self.proc = subprocess.Popen(
            [str(BIN / "oap-log"), "serve", "--data", str(self.data), "--port", "0", *self.extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        deadline = time.monotonic() + timeout
        lines = []
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if m := re.match(r"verifier key: (\S+)", line):
                self.vkey = m.group(1)
            if m := re.match(r"url:\s+(\S+)", line):
                self.url = m.group(1)
            if line.startswith("data:"):
                self.lines = lines
                threading.Thread(target=self._drain, daemon=True).start()
                return self
        self.kill()
        raise RuntimeError("server did not start:\n" + "".join(lines))

    def _drain(self) -> None:
        """Keep reading the server's output so a full pipe never blocks it."""
        for line in self.proc.stdout:
            self.lines.append(line)
            if len(self.lines) > 20000:
                del self.lines[:10000]

    @property
    def log_text(self) -> str:
        return "".join(self.lines)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        rc = self.proc.wait(timeout=30)
        time.sleep(0.1)  # let the drain thread read the last lines
        self.output = self.log_text
        return rc


@pytest.fixture
def server(tmp_path):
    procs: list[ServerProcess] = []

    def start(*extra: str, data: Path | None = None) -> ServerProcess:
        p = ServerProcess(data or tmp_path / "data", *extra).start()
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()
