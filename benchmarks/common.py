"""Shared helpers for the benchmarks: results, timing, machine facts, entries."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tlog.formats.canonical import dcbor

ORIGIN = "bench.oap.localhost/log"


@dataclass
class Result:
    name: str
    value: float | None
    unit: str
    params: dict[str, Any] = field(default_factory=dict)
    baseline: dict[str, Any] | None = None  # {"name": ..., "value": ...}
    target: float | None = None  # the figure to meet (benchmarks/README.md); None: report only
    target_op: str = ">="
    skipped: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value, "unit": self.unit, "params": self.params}
        if self.baseline is not None:
            out["baseline"] = self.baseline
            if self.value and self.baseline.get("value"):
                out["ratio"] = round(self.value / self.baseline["value"], 2)
        if self.target is not None:
            out["target"] = f"{self.target_op} {self.target:g}"
            out["meets_target"] = self.meets()
        if self.skipped:
            out["skipped"] = self.skipped
        return out

    def meets(self) -> bool | None:
        if self.value is None or self.target is None:
            return None
        return self.value >= self.target if self.target_op == ">=" else self.value <= self.target


def best_of(fn, reps: int) -> tuple[float, list[float]]:
    """Run fn() `reps` times; return (best seconds, all seconds)."""
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), times


def median(xs: list[float]) -> float:
    return float(np.median(xs))


def round_stats(rates: list[float]) -> dict[str, Any]:
    """What a figure taken from repeated rounds reports beside it: every round's rate, the
    median and the slowest (a shared machine moves single rounds by a fifth and more)."""
    return {"rounds": len(rates), "rounds_per_s": [round(r) for r in rates],
            "median_round_per_s": round(median(rates)), "slowest_round_per_s": round(min(rates))}


def commit() -> dict[str, Any]:
    """The checkout the figures were measured on: its commit, and whether files differed from it."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "modified": None}
    if head.returncode != 0:
        return {"commit": None, "modified": None}
    return {"commit": head.stdout.strip(), "modified": bool(dirty.stdout.strip()) if dirty.returncode == 0 else None}


def meta(**extra: Any) -> dict[str, Any]:
    """The `_meta` of every results file: the commit, the machine (CPU model, cores, memory,
    kernel, Python, libraries), the date and what the caller adds."""
    return {**commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "machine": machine(),
            **extra}


def describe_meta(m: dict[str, Any]) -> str:
    """One line for a results file written as text (growth.md)."""
    mc = m["machine"]
    state = " (with local changes)" if m.get("modified") else ""
    return (f"commit {m.get('commit') or 'unknown'}{state}, {m['date']}; {mc['nproc']} x {mc['cpu']}, "
            f"{mc['mem_mb']:,} MB, Linux {mc['kernel']}, Python {mc['python']}")


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) // 1024
    except OSError:
        pass
    import ssl

    import aiohttp

    wrk = None
    try:
        wrk = subprocess.run(["wrk", "--version"], capture_output=True, text=True).stdout.split("\n")[0].strip() or None
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "mem_mb": mem,
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "aiohttp": aiohttp.__version__,
        "openssl": ssl.OPENSSL_VERSION,
        "wrk": wrk,
        "native_extension": native_extension(),  # tlog._native built: bulk hashing through OpenSSL
    }


def native_extension() -> bool:
    from tlog.formats import hashing

    return hashing.native is not None


# --- entries -----------------------------------------------------------------------

_TEMPLATE = dcbor({"type": "commitment", "commitment": "sha256:" + "ab" * 32})
_POS = _TEMPLATE.index(b"ab" * 32)
_PRE, _POST = _TEMPLATE[:_POS], _TEMPLATE[_POS + 64 :]


def entry_bytes(i: int, salt: int = 0) -> bytes:
    """The canonical (dcbor) bytes of commitment entry number i: real log entries, ~100 bytes."""
    return _PRE + b"%016x%048x" % (salt, i) + _POST


def entry_json(i: int, salt: int) -> str:
    """The JSON submission whose canonical form is entry_bytes(i, salt)."""
    return '{"type":"commitment","commitment":"sha256:%016x%048x"}' % (salt, i)


def cpu_seconds(pid: int) -> float:
    """user+system CPU seconds of a process and its threads (from /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(parts[11]) + int(parts[12])) / ticks


def child_pids(pid: int) -> list[int]:
    """The live child processes of `pid` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return out


def proc_memory(pid: int) -> dict[str, int]:
    """VmHWM (peak RSS), VmRSS, RssAnon, RssFile of a process, in MiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem"):
                out[key] = int(line.split()[1]) // 1024
    return out


class SyncAppender:
    """The log's own appender (tlog.server.appender) on a storage driver, driven from
    synchronous benchmark code through an event loop of its own: `append` is a durable,
    published batch, as the service makes it."""

    def __init__(self, driver, sign, *, publisher=None, max_batch: int = 1 << 16) -> None:
        import asyncio

        from tlog.server.appender import Appender

        self.loop = asyncio.new_event_loop()
        self.app = Appender(driver, sign, publisher=publisher, max_batch=max_batch, batch_interval=0,
                            max_pending=4 * max_batch)
        self.driver = driver
        self.loop.run_until_complete(self.app.start())

    @property
    def state(self):
        return self.app.state

    def wait_integrating(self, seconds: float = 60) -> None:
        """Until this process holds the integrator role (a new PostgreSQL frontend waits out the
        lease's TTL first): appends measured after it do not wait out the lease. The first
        still carries the rest of the takeover, which runs as it is sequenced: the read of the
        bucket's checkpoint and the new integrator's first checkpoint."""
        deadline = time.monotonic() + seconds
        while not self.app.integrating:
            if time.monotonic() > deadline:
                raise RuntimeError("the appender never took the integrator role")
            self.loop.run_until_complete(__import__("asyncio").sleep(0.02))

    def append(self, datas: list[bytes]):
        return self.loop.run_until_complete(self.app.add_many(datas))

    def close(self) -> None:
        self.loop.run_until_complete(self.app.close())
        self.loop.close()
