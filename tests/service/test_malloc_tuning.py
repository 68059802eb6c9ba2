"""`tune_for_serving` keeps glibc's malloc from giving every large block its own mmap, and
from handing the freed heap back at once (`tlog.http.serve._keep_large_blocks`).

Checked in fresh child interpreters, through glibc's own counters (`mallinfo2`): `hblks`,
the blocks mmapped of their own; `arena`, the bytes of the main heap. Fresh, because glibc
raises its mmap threshold by itself once a large mmapped block is freed; and the test
process keeps its allocator as it was.
"""
import platform
import sys

import pytest

from tlog.runtime import children

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")

PROBE = r"""
import ctypes, sys
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2

def mapped(n):
    before = libc.mallinfo2().hblks
    block = bytearray(n)
    grew = libc.mallinfo2().hblks - before
    del block
    return grew

if sys.argv[1] == "tuned":
    from tlog.http.serve import _keep_large_blocks
    _keep_large_blocks()
print(mapped(2 << 20), mapped(24 << 20), mapped(64 << 20), libc.mallinfo2().arena >> 20)
"""


def probe(mode: str) -> list[int]:
    out = children.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=60, check=True)
    return [int(x) for x in out.stdout.split()]


def test_by_default_glibc_maps_a_large_block_of_its_own():
    assert probe("default")[0] == 1  # what the tuning is for (and proof that the probe sees it)


def test_tuned_blocks_up_to_32_mib_come_from_the_heap_which_keeps_them_for_reuse():
    two, twenty_four, sixty_four, heap_mib = probe("tuned")
    assert (two, twenty_four, sixty_four) == (0, 0, 1)  # from the heap up to 32 MiB, mmapped above
    assert heap_mib >= 24  # the freed 24 MiB stays in the heap (trimmed only beyond 128 MiB)
