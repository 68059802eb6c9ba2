from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tlog.formats.checkpoint import Checkpoint
from tlog.formats.keys import Signer
from tlog.formats.note import sign_note

from .services import Service

BIN = Path(sys.executable).parent


def make_signer(origin: str = "test.example/log") -> Signer:
    return Signer(origin, bytes(range(32)))


def checkpoint_signer(signer: Signer):
    return lambda size, root: sign_note(Checkpoint(signer.name, size, root).to_text(), [signer])


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
