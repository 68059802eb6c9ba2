"""A reader of hash files in a process of its own (tlog.storage.hashfiles, as a read worker
reads them), for the tests that repair hash files under it: it maps levels and holds
those maps; `check()` then reads every byte of the maps it held (a file shortened under a
map kills it with SIGBUS, which its exit status shows) and the same levels again through
its HashFiles (what a reader serves after a repair)."""
from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
from pathlib import Path

from tlog.runtime import children

_READER = r"""
import hashlib, json, os, sys
from pathlib import Path

import numpy as np

from tlog.storage.hashfiles import HashFiles

hf = HashFiles(Path(sys.argv[1]), window=0)
held = {}
for k in json.loads(sys.argv[2]):
    rows = os.stat(hf.dir / f"level-{k:02d}").st_size // 32
    hf.gather(k, np.arange(rows))  # maps the whole level, as a gather does
    held[k] = hf._maps[k]  # kept: the map a gather under way would hold
print(json.dumps({k: hashlib.sha256(m.arr.tobytes()).hexdigest() for k, m in held.items()}), flush=True)
for line in sys.stdin:  # the parent changed the files: level -> nodes to read now
    old = {k: hashlib.sha256(m.arr.tobytes()).hexdigest() for k, m in held.items()}  # every page of each map
    now = {k: hashlib.sha256(hf.read_range(int(k), 0, n)).hexdigest() for k, n in json.loads(line).items()}
    print(json.dumps({"old": old, "now": now}), flush=True)
"""


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class MappedReader:
    """`levels` of the hash directory `directory` mapped by a reader process; `mapped` holds
    the digest of each level as it mapped it."""

    def __init__(self, directory: Path, levels: list[int]) -> None:
        self.proc = children.popen([sys.executable, "-c", _READER, str(directory), json.dumps(levels)],
                                   death_signal=signal.SIGKILL, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # bounded: the reader maps a few files and prints
        if not line:
            raise RuntimeError(f"the reader did not start: {self.proc.communicate(timeout=60)[1][-2000:]}")
        self.mapped = {int(k): v for k, v in json.loads(line).items()}

    def check(self, rows: dict[int, int]) -> tuple[int | None, dict[int, str], dict[int, str]]:
        """(None while the reader lives, else its exit status; the digest of each held map
        read in full; the digest of the first rows[k] nodes of level k read through the
        reader's HashFiles now)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(rows) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        line = self.proc.stdout.readline()  # bounded: the reader answers or dies
        if not line:
            return self.proc.wait(60), {}, {}
        got = json.loads(line)
        return None, {int(k): v for k, v in got["old"].items()}, {int(k): v for k, v in got["now"].items()}

    def close(self) -> int:
        """Its exit status once its input ends (0: it read everything asked without a fault)."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(60)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(60)
