"""`oap-log` with crash points armed, for the crash harness: `python -m tests.crashserve
POINT[:P][,POINT[:P]...] serve ...` runs `oap-log serve ...` with a fault hook injected into
the embedded storage that exits the process (status 137, as kill -9 would leave it) at
each named point with probability P (default 1). Production code reads no such setting.
"""
from __future__ import annotations

import os
import random
import sys

from tlog.storage.embedded import EmbeddedStorage

CRASH_STATUS = 137


def arm(spec: str) -> None:
    points: dict[str, float] = {}
    for item in filter(None, spec.split(",")):
        name, _, p = item.partition(":")
        points[name] = float(p or 1.0)

    def fault(name: str) -> None:
        p = points.get(name)
        if p and random.random() < p:
            os._exit(CRASH_STATUS)

    EmbeddedStorage.faults = staticmethod(fault)  # type: ignore[assignment]


def main() -> None:
    arm(sys.argv[1])
    from tlog.cli.main import main as oap_log

    sys.argv = ["oap-log", *sys.argv[2:]]
    oap_log()


if __name__ == "__main__":
    main()
