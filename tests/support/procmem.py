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


def cached_pages(path, pages) -> list[bool]:
    """Whether each of `pages` (page numbers) of the file at `path` is in the page cache:
    mincore(2) over a mapping of the file, which reports the page cache, not this process."""
    import ctypes
    import mmap
    import os

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    finally:
        os.close(fd)
    if addr in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap failed")
    try:
        vec = (ctypes.c_ubyte * ((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE))()
        if libc.mincore(addr, size, vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
        return [bool(vec[p] & 1) for p in pages]
    finally:
        libc.munmap(addr, size)
