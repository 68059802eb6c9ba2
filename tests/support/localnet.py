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
import time
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
    with Ctrl-C (SIGINT to its process group) on exit. Ports are picked at random; when
    one is taken (by another process on a busy machine), another set is tried."""
    for attempt in range(5):
        net, proc = _start(data, cwd, timeout)
        if proc is not None:
            break
        if attempt == 4 or "already in use" not in "".join(net.lines):
            raise AssertionError("".join(net.lines[-30:]))
    try:
        yield net
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(60)


def _start(data: str | Path, cwd: Path | None, timeout: float) -> tuple[LocalNet, subprocess.Popen | None]:
    """The network up (its process), or None if it exited or did not come up in time."""
    net = LocalNet(random.randrange(20000, 40000, 10))
    proc = subprocess.Popen([str(BIN / "oap-localnet"), "--data", str(data), "--log-port", str(net.base),
                             "--registry-port", str(net.base + 9)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, cwd=cwd)
    up, ended = threading.Event(), threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            net.lines.append(line)
            if "network is up" in line:
                up.set()
        ended.set()

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + timeout
    while not up.is_set() and not ended.is_set() and time.monotonic() < deadline:
        up.wait(0.1)
    if up.is_set():
        return net, proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    proc.wait(60)
    return net, None
