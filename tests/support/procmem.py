"""Resident memory of this process by mapped file, from /proc/self/smaps: how the
tests check that a bounded-memory path really unmapped what it read."""
from __future__ import annotations


def mapped_kb(path) -> int:
    """Resident kB of this process's mappings of `path`."""
    total, inside = 0, False
    for line in open("/proc/self/smaps"):
        if line[0] in "0123456789abcdef" and "-" in line.split()[0]:
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total
