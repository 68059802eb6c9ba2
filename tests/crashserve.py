"""`oap-log` with crash points armed, for the crash harness: `python -m tests.crashserve
POINT[:P][,POINT[:P]...] serve ...` runs `oap-log serve ...` with a fault hook, passed to the
storage driver and the appender as a constructor argument (through `tlog.server.cli.Hooks`),
that exits the process (status 137, as kill -9 would leave it) at each named point with
probability P (default 1). Production code reads no such setting.

The points: the embedded driver's (`tlog.storage.embedded.FAULT_POINTS`), the PostgreSQL
driver's (`tlog.storage.postgres.FAULT_POINTS`) and the appender's
(`tlog.server.appender.FAULT_POINTS`, e.g. `after_record`: a checkpoint recorded by
compare-and-swap but not yet published).
"""
from __future__ import annotations

import os
import random
import sys

from tlog.server.cli import Hooks

CRASH_STATUS = 137


def hooks(spec: str) -> Hooks:
    points: dict[str, float] = {}
    for item in filter(None, spec.split(",")):
        name, _, p = item.partition(":")
        points[name] = float(p or 1.0)

    def fault(name: str) -> None:
        p = points.get(name)
        if p and random.random() < p:
            os._exit(CRASH_STATUS)

    return Hooks(faults=fault)


def main() -> None:
    from tlog.server.cli import main as oap_log

    armed = hooks(sys.argv[1])
    oap_log(args=sys.argv[2:], prog_name="oap-log", obj=armed)


if __name__ == "__main__":
    main()
