"""`tune_for_serving` keeps glibc's malloc from giving every large block its own mmap, and
from handing freed heap back at once (`tlog.http.serve._keep_large_blocks`).

Checked in fresh child interpreters, through glibc's own counters (`mallinfo2`): `hblks`,
the blocks mmapped of their own; `arena`, the bytes of the main heap. Fresh, because glibc
raises its mmap threshold by itself once a large mmapped block is freed; and the test
process keeps its allocator as it was. The children get no malloc settings from the
environment unless a test gives them some.
"""
import ctypes
import json
import os
import platform
import sys

import pytest

from tlog.runtime import children


def _has_mallinfo2() -> bool:
    try:
        return platform.libc_ver()[0] == "glibc" and hasattr(ctypes.CDLL(None), "mallinfo2")  # glibc >= 2.33
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not _has_mallinfo2(), reason="glibc's malloc (2.33 or later) only")

PROBE = r"""
import ctypes, json, sys, threading
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

# A thread whose arena exists before the tuning, as the services' worker threads do.
go, done, seen = threading.Event(), threading.Event(), {}
def worker():
    keep = [bytearray(64) for _ in range(1000)]
    go.wait(30)
    seen["thread_4mib"] = mapped(4 << 20)  # larger than the 2 MiB freed before (glibc's own threshold)
    done.set()
threading.Thread(target=worker, daemon=True).start()

if sys.argv[1] == "tuned":
    from tlog.http.serve import tune_for_serving
    tune_for_serving()
out = {"2mib": mapped(2 << 20)}
go.set()
done.wait(30)
out |= {"24mib": mapped(24 << 20), "64mib": mapped(64 << 20), "heap_mib": libc.mallinfo2().arena >> 20, **seen}
print(json.dumps(out))
"""


def probe(mode: str, **env: str) -> dict[str, int]:
    clean = {k: v for k, v in os.environ.items() if not (k.startswith("MALLOC_") or k == "GLIBC_TUNABLES")}
    out = children.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=60,
                       check=True, env=clean | env)
    return json.loads(out.stdout)


def test_by_default_glibc_maps_a_large_block_of_its_own():
    got = probe("default")  # what the tuning is for, and proof that the probe sees it
    assert got["2mib"] == 1 and got["thread_4mib"] == 1


def test_tuned_blocks_up_to_32_mib_come_from_the_heap_which_keeps_them_for_reuse():
    got = probe("tuned")
    assert (got["2mib"], got["24mib"], got["64mib"]) == (0, 0, 1)  # from the heap up to 32 MiB, mmapped above
    assert got["thread_4mib"] == 0  # process-wide: a thread's arena made before the tuning too
    assert got["heap_mib"] >= 24  # the freed 24 MiB stays in the heap for the next answer


def test_thresholds_an_operator_set_are_left_alone():
    got = probe("tuned", MALLOC_MMAP_THRESHOLD_=str(4 << 20))  # the operator's 4 MiB, not our 32
    assert (got["2mib"], got["24mib"]) == (0, 1)
