"""Process trees from /proc (Linux): which processes descend from one, and whether they
are gone, for the tests that kill a parent and check that its children die with it."""
from __future__ import annotations

import os
import time
from collections.abc import Iterable

Proc = tuple[int, int]  # (pid, start time in clock ticks): a pid that was reused is another process


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of `pid`, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return fields[0], int(fields[1]), int(fields[19])


def descendants(root: int) -> set[Proc]:
    """Every live process below `root` (children, grandchildren, ...)."""
    parent_of: dict[int, tuple[int, int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (st := _stat(int(name))) is not None and st[0] != "Z":
            parent_of[int(name)] = (st[1], st[2])
    found: set[Proc] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, (ppid, _) in parent_of.items() if ppid in frontier} - {p for p, _ in found}
        found |= {(pid, parent_of[pid][1]) for pid in frontier}
    return found


def matching(*texts: str) -> set[Proc]:
    """Every live process whose command line holds all of `texts`."""
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit() and all(t in command(int(name)) for t in texts):
            st = _stat(int(name))
            if st is not None and st[0] != "Z":
                found.add((int(name), st[2]))
    return found


def alive(procs: Iterable[Proc]) -> set[Proc]:
    """Those of `procs` still running (a zombie has ended: only its exit status is left)."""
    out = set()
    for pid, started in procs:
        st = _stat(pid)
        if st is not None and st[2] == started and st[0] != "Z":
            out.add((pid, started))
    return out


def command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def wait_gone(procs: Iterable[Proc], timeout: float) -> set[Proc]:
    """Wait up to `timeout` seconds for every one of `procs` to end; those left running."""
    procs = set(procs)
    deadline = time.monotonic() + timeout
    while (left := alive(procs)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left
