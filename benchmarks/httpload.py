"""HTTP load for the benchmarks: a real server process and two load generators.

Everything talks to 127.0.0.1 only, with a bounded number of requests and a
bounded time. The load generator runs in a separate process from the server
(wrk, a compiled tool, when installed; else a minimal asyncio HTTP/1.1
client in a forked process) and its CPU time is measured next to the
server's, so a result can say which side was the bottleneck.
"""
from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import ORIGIN, child_pids, cpu_seconds, proc_memory

from tlog.runtime import children

BIN = Path(sys.executable).parent


class Server:
    """`oap-log serve` on 127.0.0.1 with a kernel-chosen port."""

    def __init__(self, data: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self.data, self.extra, self.env = data, extra, env
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.port = 0

    def command(self) -> list[str]:
        return [str(BIN / "oap-log"), "serve", "--data", str(self.data), "--host", "127.0.0.1", "--port", "0",
                "--origin", ORIGIN, *self.extra]

    def __enter__(self) -> Server:
        # All load comes from 127.0.0.1, one "client" to the per-client rate
        # limits; they are off so that the server's capacity is measured.
        env = dict(os.environ) | {"OAP_LOG_RATE_LIMIT_WRITE": "0", "OAP_LOG_RATE_LIMIT_READ": "0"} | (self.env or {})
        self.proc = children.popen(self.command(), death_signal=signal.SIGKILL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, env=env)
        deadline = time.monotonic() + 120
        lines = []
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if m := re.match(r"url:\s+(\S+)", line):
                self.url = m.group(1)
                self.port = int(self.url.rsplit(":", 1)[1])
            if line.startswith("data:"):
                return self
        self.kill()
        raise RuntimeError("server did not start:\n" + "".join(lines))

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def cpu(self) -> float:
        """CPU seconds of the server and of its child processes (the log's read workers)."""
        total = cpu_seconds(self.pid)
        for child in child_pids(self.pid):
            try:
                total += cpu_seconds(child)
            except OSError:  # exited meanwhile
                pass
        return total

    def memory(self) -> dict[str, int]:
        return proc_memory(self.pid)


class WitnessServer(Server):
    """`oap-witness serve --config FILE` on 127.0.0.1 with a kernel-chosen port."""

    def __init__(self, config: Path, env: dict[str, str] | None = None) -> None:
        super().__init__(config.parent, env=env)
        self.config = config

    def command(self) -> list[str]:
        return [str(BIN / "oap-witness"), "serve", "--config", str(self.config), "--host", "127.0.0.1",
                "--port", "0", "--rate-limit", "0"]  # all load comes from one address


class RegistryServer(Server):
    """`oap-registry serve` anchoring in the log at `log_url`, on 127.0.0.1."""

    def __init__(self, data: Path, log_url: str) -> None:
        super().__init__(data)
        self.log_url = log_url

    def command(self) -> list[str]:
        return [str(BIN / "oap-registry"), "serve", "--data", str(self.data), "--host", "127.0.0.1", "--port", "0",
                "--log-url", self.log_url, "--rate-limit", "0"]


class BareServer(Server):
    """benchmarks/bare.py: the cheapest aiohttp handlers, the scale for the HTTP targets."""

    def __init__(self) -> None:
        super().__init__(Path("."))

    def command(self) -> list[str]:
        return [sys.executable, str(Path(__file__).with_name("bare.py"))]


@dataclass
class Load:
    """What one load run measured."""

    requests: int
    seconds: float
    errors: int
    latencies_ms: dict[str, float] = field(default_factory=dict)  # p50, p99 ...
    client_cpu: float = 0.0  # CPU seconds used by the load generator
    server_cpu: float = 0.0  # CPU seconds used by the server process
    tool: str = ""
    bytes_in: int = 0

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def describe(self) -> dict:
        return {
            "requests": self.requests, "seconds": round(self.seconds, 2), "errors": self.errors,
            "load_tool": self.tool,
            "client_cpu_util": round(self.client_cpu / self.seconds, 2) if self.seconds else None,
            "server_cpu_util": round(self.server_cpu / self.seconds, 2) if self.seconds else None,
            **{k: round(v, 2) for k, v in self.latencies_ms.items()},
        }


# --- wrk -------------------------------------------------------------------------------

def have_wrk() -> bool:
    return shutil.which("wrk") is not None


_LUA_COMMON = r"""
local function tilepath(n)
  local s = tostring(n)
  while #s % 3 ~= 0 do s = "0" .. s end
  local parts = {}
  for i = 1, #s, 3 do parts[#parts + 1] = s:sub(i, i + 2) end
  for i = 1, #parts - 1 do parts[i] = "x" .. parts[i] end
  return table.concat(parts, "/")
end
local threads = {}
setup = function(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end
done = function(summary, latency, requests)
  io.write(string.format("OAPSTATS p50=%.3f p90=%.3f p99=%.3f p999=%.3f max=%.3f n=%d errs=%d\n",
    latency:percentile(50) / 1000, latency:percentile(90) / 1000, latency:percentile(99) / 1000,
    latency:percentile(99.9) / 1000, latency.max / 1000, summary.requests,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write
    + summary.errors.timeout))
end
"""

LUA_APPEND_SINGLE = _LUA_COMMON + r"""
local counter = 0
local salt = 0
init = function(args) salt = tonumber(args[1]) end
request = function()
  counter = counter + 1
  local body = string.format('{"type":"commitment","commitment":"sha256:%08x%08x%s%08x"}',
    salt, tid, string.rep("0", 40), counter)
  return wrk.format("POST", "/v1/entries", {["Content-Type"] = "application/json"}, body)
end
"""

LUA_TILES = _LUA_COMMON + r"""
local ntiles = 0
init = function(args) ntiles = tonumber(args[1]); math.randomseed(tonumber(args[2]) + tid) end
request = function()
  return wrk.format("GET", "/tile/0/" .. tilepath(math.random(0, ntiles - 1)))
end
"""

LUA_STATUS = _LUA_COMMON + r"""
local population = 1000000000
local sequential = false
local counter = 0
init = function(args)
  math.randomseed(tonumber(args[1]) + tid); population = tonumber(args[2]); sequential = args[3] == "seq"
end
request = function()
  counter = counter + 1
  local id = sequential and ((counter - 1) % population + 1) or math.random(1, population)
  return wrk.format("GET", "/v1/status/urn:oap:bench:" .. id)
end
"""

LUA_BODIES = _LUA_COMMON + r"""
local bodies = {}
local i = 0
local path = "/"
local headers = {}
init = function(args)
  path = args[1]
  headers = {["Content-Type"] = "application/json", ["Accept"] = args[2]}
  for k = 3, #args do
    local f = io.open(args[k], "rb"); bodies[#bodies + 1] = f:read("*a"); f:close()
  end
end
request = function()
  i = i % #bodies + 1
  return wrk.format("POST", path, headers, bodies[i])
end
"""


def run_wrk(server: Server, script: str, args: list[str], *, connections: int, seconds: float,
            threads: int = 1, timeout_s: int = 10) -> Load:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
        path = f.name
    try:
        cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(seconds))}s", f"--timeout={timeout_s}s",
               "--latency", "-s", path, server.url, "--", *args]
        cpu0 = server.cpu()
        t0 = time.perf_counter()
        proc = children.popen(cmd, death_signal=signal.SIGKILL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        out = proc.stdout.read()
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        server_cpu = server.cpu() - cpu0
    finally:
        os.unlink(path)
    m = re.search(r"OAPSTATS p50=(\S+) p90=(\S+) p99=(\S+) p999=(\S+) max=(\S+) n=(\d+) errs=(\d+)", out)
    dur = re.search(r"requests in ([\d.]+)(ms|s|m)", out)
    if proc.returncode != 0 or m is None or dur is None:
        raise RuntimeError(f"wrk failed:\n{out}")
    secs = float(dur.group(1)) * {"ms": 1e-3, "s": 1.0, "m": 60.0}[dur.group(2)]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return Load(
        requests=int(m.group(6)), seconds=secs, errors=int(m.group(7)) + (int(non2xx.group(1)) if non2xx else 0),
        latencies_ms={"p50_ms": float(m.group(1)), "p90_ms": float(m.group(2)), "p99_ms": float(m.group(3)),
                      "p999_ms": float(m.group(4)), "max_ms": float(m.group(5))},
        client_cpu=ru.ru_utime + ru.ru_stime, server_cpu=server_cpu * secs / wall, tool="wrk",
    )


# --- the Python load generator ----------------------------------------------------------

def _http_request(method: str, path: str, body: bytes, content_type: str, accept: str, port: int) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
    if accept:
        head += f"Accept: {accept}\r\n"
    if body or method == "POST":
        head += f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


async def _connection(port: int, make, seq, deadline: float, lat: list[float], stats: dict, first: list) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for i in seq:
            if time.monotonic() > deadline:
                break
            req = make(i)
            t = time.perf_counter()
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            m = re.search(rb"(?i)content-length:\s*(\d+)", head)
            body = await reader.readexactly(int(m.group(1))) if m else b""
            lat.append(time.perf_counter() - t)
            stats["bytes"] += len(body)
            if not head.startswith(b"HTTP/1.1 200"):
                stats["errors"] += 1
                if not first:
                    first.append(head[:200] + body[:300])
            elif not first:
                first.append(body)
    finally:
        writer.close()


def _pyload_child(port: int, make, connections: int, total: int, seconds: float, conn_q: mp.Queue,
                  sequences: list[list[bytes]] | None = None) -> None:
    children.die_with_parent(signal.SIGKILL)

    async def main() -> None:
        counter = iter(range(total))
        lat: list[float] = []
        stats = {"errors": 0, "bytes": 0}
        first: list[bytes] = []
        deadline = time.monotonic() + seconds
        t0 = time.perf_counter()
        if sequences is not None:  # each connection sends its own requests, in order
            conns = [_connection(port, seq.__getitem__, iter(range(len(seq))), deadline, lat, stats, first)
                     for seq in sequences]
        else:
            conns = [_connection(port, make, counter, deadline, lat, stats, first) for _ in range(connections)]
        await asyncio.gather(*conns)
        wall = time.perf_counter() - t0
        ru = resource.getrusage(resource.RUSAGE_SELF)
        conn_q.put({"n": len(lat), "wall": wall, "lat": lat, "cpu": ru.ru_utime + ru.ru_stime,
                    "first": first[0] if first else b"", **stats})

    asyncio.run(main())


def run_pyload(server: Server, make, *, connections: int, total: int, seconds: float,
               sequences: list[list[bytes]] | None = None) -> tuple[Load, bytes]:
    """`total` requests (make(i) -> raw HTTP bytes) over `connections` keep-alive connections,
    or, with `sequences`, one connection per sequence sending its requests in order.

    One forked process (the server has the other core). Returns the Load and
    the first response body (for a spot check by the caller).
    """
    ctx = mp.get_context("fork")
    q: mp.Queue = ctx.Queue()
    cpu0 = server.cpu()
    p = ctx.Process(target=_pyload_child, args=(server.port, make, connections, total, seconds, q, sequences))
    p.start()
    res = q.get(timeout=seconds + 120)
    p.join(30)
    server_cpu = server.cpu() - cpu0
    lat = sorted(res["lat"])

    def pct(x: float) -> float:
        return lat[min(len(lat) - 1, int(len(lat) * x))] * 1000 if lat else 0.0

    load = Load(requests=res["n"], seconds=res["wall"], errors=res["errors"],
                latencies_ms={"p50_ms": pct(0.5), "p90_ms": pct(0.9), "p99_ms": pct(0.99), "max_ms": pct(1.0)},
                client_cpu=res["cpu"], server_cpu=server_cpu, tool="python-asyncio (1 process)",
                bytes_in=res["bytes"])
    return load, res["first"]


def post(path: str, body: bytes, port: int, *, content_type: str = "application/json", accept: str = "") -> bytes:
    return _http_request("POST", path, body, content_type, accept, port)


def get(path: str, port: int) -> bytes:
    return _http_request("GET", path, b"", "", "", port)
