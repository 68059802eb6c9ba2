"""`oap-localnet` (what `make run` starts) on free ports, for tests that need the whole
network: a log, three witnesses (quorum 2) and a registry, as real processes."""
from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

BIN = Path(sys.executable).parent


@dataclass
class LocalNet:
    base: int  # the log's port; witness i listens on base + i, the mirror on base + 4, the registry on base + 9
    lines: list[str] = field(default_factory=list)  # what the network printed

    @property
    def log(self) -> str:
        return f"http://127.0.0.1:{self.base}"

    @property
    def witness(self) -> str:
        return f"http://127.0.0.1:{self.base + 1}"

    @property
    def registry(self) -> str:
        return f"http://127.0.0.1:{self.base + 9}"

    @property
    def mirror(self) -> str:
        return f"http://127.0.0.1:{self.base + 4}"


@contextlib.contextmanager
def localnet(data: str | Path, *, cwd: Path | None = None, timeout: float = 90) -> Iterator[LocalNet]:
    """Start the network with its data in `data`, yield once it says it is up, stop it
    with Ctrl-C (SIGINT to its process group) on exit."""
    net = LocalNet(random.randrange(20000, 40000, 10))
    proc = subprocess.Popen([str(BIN / "oap-localnet"), "--data", str(data), "--log-port", str(net.base),
                             "--registry-port", str(net.base + 9)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, cwd=cwd)
    up = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            net.lines.append(line)
            if "network is up" in line:
                up.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert up.wait(timeout), "".join(net.lines[-30:])
        yield net
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(60)
