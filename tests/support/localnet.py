"""`oap-localnet` (what `make run` starts) on free ports, for tests that need the whole
network: a log, three witnesses (quorum 2), a registry and a mirror, as real processes."""
from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tlog.runtime import children

BIN = Path(sys.executable).parent
SPAN = 10  # the log on base, witness i on base + i, the mirror on base + 4, the monitor on base + 6,
# the did:web host on base + 8, the registry on base + 9


@dataclass
class LocalNet:
    base: int  # the log's port; witness i listens on base + i, the mirror on base + 4, the registry on base + 9
    proc: subprocess.Popen | None = None  # what was started: oap-localnet, or the command around it
    lines: list[str] = field(default_factory=list)  # what the network printed
    up: threading.Event = field(default_factory=threading.Event)
    reader: threading.Thread | None = None

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

    @property
    def monitor(self) -> str:
        return f"http://127.0.0.1:{self.base + 6}"

    @property
    def ports(self) -> list[int]:
        return [self.base, self.base + 1, self.base + 2, self.base + 3, self.base + 4, self.base + 6, self.base + 8,
                self.base + 9]

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def finish(self, timeout: float = 60) -> int:
        """Wait for the started process to exit and for its last line to be read."""
        assert self.proc is not None and self.reader is not None
        code = self.proc.wait(timeout)
        self.reader.join(timeout)
        return code


def ports_free(ports: Sequence[int]) -> bool:
    """Nothing listens on any of `ports` of 127.0.0.1 (a bind as the services do succeeds)."""
    for port in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def free_base() -> int:
    """A base port whose span is free now, below the kernel's range for outgoing
    connections (32768 and up), so that no client socket takes one of them meanwhile."""
    for _ in range(200):
        base = random.randrange(20000, 32768 - SPAN, SPAN)
        if ports_free(range(base, base + SPAN)):
            return base
    raise RuntimeError("no free range of ports for oap-localnet")


def start(data: str | Path, *, cwd: Path | None = None, base: int | None = None, wrap: Sequence[str] = (),
          extra: Sequence[str] = (), timeout: float = 120) -> LocalNet:
    """Start the network (tied to this process: it dies with it) and wait until it says
    it is up. `wrap`: a command that runs oap-localnet's command line (`sh -c '"$@"' sh`).
    Unless `base` is given, a base whose ports another process took meanwhile is replaced
    by another (3 tries)."""
    for attempt in range(3):
        net = LocalNet(base or free_base())
        args = [str(BIN / "oap-localnet"), "--data", str(data), "--log-port", str(net.base),
                "--registry-port", str(net.base + 9), *extra]
        net.proc = children.popen([*wrap, *args], death_signal=signal.SIGTERM, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, start_new_session=True, cwd=cwd)
        net.reader = threading.Thread(target=_read, args=(net,), daemon=True)
        net.reader.start()
        deadline = time.monotonic() + timeout
        while not net.up.wait(0.2) and net.proc.poll() is None and time.monotonic() < deadline:
            pass
        if net.up.is_set():
            return net
        if net.proc.poll() is None:
            os.killpg(net.proc.pid, signal.SIGKILL)
        net.finish()
        if "already in use" not in net.output or attempt == 2 or base:
            raise AssertionError("oap-localnet did not start:\n" + "".join(net.lines[-30:]))
    raise AssertionError("unreachable")


def _read(net: LocalNet) -> None:
    assert net.proc is not None and net.proc.stdout is not None
    for line in net.proc.stdout:
        net.lines.append(line)
        if "network is up" in line:
            net.up.set()


@contextlib.contextmanager
def localnet(data: str | Path, *, cwd: Path | None = None, timeout: float = 120) -> Iterator[LocalNet]:
    """Start the network with its data in `data`, yield once it says it is up, stop it
    with Ctrl-C (SIGINT to its process group) on exit; `net.lines` then holds all it said."""
    net = start(data, cwd=cwd, timeout=timeout)
    try:
        yield net
    finally:
        assert net.proc is not None
        if net.proc.poll() is None:
            os.killpg(net.proc.pid, signal.SIGINT)
        net.finish()
