"""One hostile client against real services, beside honest ones: `make soak`.

`python benchmarks/hostile.py [--quick] [--out FILE]` prints one JSON document.
Everything runs on 127.0.0.1, bounded in count and time. Scenarios:

- `attack_mix`: a log with every setting at its default except `auth_required_for = *`
  (so that unauthenticated batches mean something), hit at once by four 256 KiB CBOR
  bombs, four 100,000-proof batches that are never read, and two unauthenticated
  14 MiB batches, while `GET /checkpoint` is polled every 20 ms. Reports the slowest
  checkpoint answer, the statuses, and the log's RSS growth.
- `forged_forwarded_for`: behind one trusted proxy, 300 reads with a fresh forged
  left-most X-Forwarded-For hop each, under a 20/s limit: how many got 429.
- `witness_attack`: single writes to a log that needs its witness's cosignature, with and
  without 1 MiB CBOR bodies and deep JSON sent to the witness's conformance endpoint.
- `honest_p99`: 32 honest clients (single appends and checkpoint reads, each its own
  address behind a proxy) with and without one hostile client that loops over bombs,
  unread proof batches and malformed writes. The honest p99 must stay within 2x.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import meta

from tlog.http.limits import new_token
from tlog.runtime import children

from tests.httpfuzz import rss_kb
from tests.support.services import Service, log_service, witness_service

BOMB = b"\x9a" + (256 * 1024 - 5).to_bytes(4, "big") + b"\x80" * (256 * 1024 - 5)


def commitment(i: int) -> bytes:
    return json.dumps({"type": "commitment", "commitment": "sha256:" + i.to_bytes(32, "big").hex()}).encode()


def post(path: str, body: bytes, ctype: str = "application/json", *extra: str, close: bool = True) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: t", f"Content-Type: {ctype}", f"Content-Length: {len(body)}", *extra]
    if close:
        head.append("Connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def get(path: str, *extra: str) -> bytes:
    return ("\r\n".join([f"GET {path} HTTP/1.1", "Host: t", *extra]) + "\r\n\r\n").encode()


async def exchange(port: int, data: bytes, timeout: float = 60) -> int:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    try:
        w.write(data)
        await w.drain()
        line = await asyncio.wait_for(r.readline(), timeout)
        await asyncio.wait_for(r.read(), timeout)
        return int(line.split()[1]) if line else 0
    except (TimeoutError, ConnectionError):
        return 0
    finally:
        w.close()


class Conn:
    """A keep-alive connection for honest requests: one request, one answer, timed."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.r: asyncio.StreamReader | None = None
        self.w: asyncio.StreamWriter | None = None

    async def ask(self, data: bytes) -> float:
        if self.w is None:
            self.r, self.w = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.r is not None
        t0 = time.perf_counter()
        self.w.write(data)
        head = await asyncio.wait_for(self.r.readuntil(b"\r\n\r\n"), 30)
        status = int(head.split(b" ", 2)[1])
        length = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")))
        await self.r.readexactly(length)
        if status != 200:
            raise RuntimeError(f"honest request got {status}")
        return time.perf_counter() - t0


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return round(1000 * xs[min(len(xs) - 1, int(p / 100 * len(xs)))], 2) if xs else 0.0


def env(**kw: object) -> dict:
    return dict(os.environ) | {f"OAP_LOG_{k.upper()}": str(v) for k, v in kw.items()}


async def fill(port: int, n: int) -> None:
    for a in range(0, n, 5000):
        body = b'{"entries":[' + b",".join(commitment(i) for i in range(a, min(n, a + 5000))) + b"]}"
        assert await exchange(port, post("/v1/entries:batch", body)) == 200


async def attack_mix(work: Path) -> dict:
    token, line = new_token()
    (work / "tokens").write_text(line + " *\n")
    log = log_service(work / "log", env=env(auth_required_for="*", tokens_file=work / "tokens")).start()
    try:
        port = int(log.url.rsplit(":", 1)[1])
        big = b'{"entries":[' + b"[]," * (14 * 1024 * 1024 // 3) + b"[]]"
        auth = f"Authorization: Bearer {token}"
        r, w = await asyncio.open_connection("127.0.0.1", port)
        for a in range(0, 4096, 4096):
            body = b'{"entries":[' + b",".join(commitment(i) for i in range(a, a + 4096)) + b"]}"
            w.write(post("/v1/entries:batch", body, "application/json", auth))
        await w.drain()
        await r.read()
        w.close()
        rss0 = rss_kb(log.pid)
        proofs = post("/v1/proof/inclusion:batch", json.dumps({"indices": [i % 4096 for i in range(100_000)]}).encode())
        unread = []
        for _ in range(4):
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(proofs)
            unread.append(w)
        # The bombs come with a valid token: they are parsed, and refused by the item budget.
        attacks = [exchange(port, post("/v1/entries", BOMB, "application/oap+cbor", auth)) for _ in range(4)]
        attacks += [exchange(port, post("/v1/entries:batch", big)) for _ in range(2)]
        lat: list[float] = []
        peak = rss0
        stop = asyncio.Event()

        async def poll() -> None:
            nonlocal peak
            c = Conn(port)
            while not stop.is_set():
                lat.append(await c.ask(get("/checkpoint")))
                peak = max(peak, rss_kb(log.pid))
                await asyncio.sleep(0.02)

        poller = asyncio.create_task(poll())
        await asyncio.sleep(0.1)
        statuses = await asyncio.gather(*attacks)
        await asyncio.sleep(3)  # the unread batches sit in their sockets meanwhile
        stop.set()
        await poller
        for w in unread:
            w.close()
        return {"checkpoint_max_ms": pct(lat, 100), "checkpoint_p99_ms": pct(lat, 99), "checkpoint_polls": len(lat),
                "bomb_statuses": statuses[:4], "unauthenticated_14MiB_statuses": statuses[4:],
                "rss_growth_mb": round((peak - rss0) / 1024, 1), "targets": {
                    "checkpoint_max_ms": "<= 300", "bombs": "413", "unauthenticated": "401", "rss_growth_mb": "< 200"},
                "ok": pct(lat, 100) <= 300 and statuses[:4] == [413] * 4 and statuses[4:] == [401, 401]
                and (peak - rss0) / 1024 < 200}
    finally:
        log.kill()


async def forged_forwarded_for(work: Path) -> dict:
    log = log_service(work / "xff", env=env(trusted_proxies=1, rate_limit_read=20, rate_limit_read_burst=20)).start()
    try:
        port = int(log.url.rsplit(":", 1)[1])
        c = Conn(port)
        limited = 0
        for i in range(300):
            try:
                await c.ask(get("/v1/info", f"X-Forwarded-For: 10.{i % 250}.{i // 250}.9, 198.51.100.4"))
            except RuntimeError:
                limited += 1
                c = Conn(port)
        return {"requests": 300, "limit": "20/s, burst 20", "got_429": limited, "ok": limited >= 250}
    finally:
        log.kill()


def _hostile(port: int, seconds: float, sent) -> None:
    """A hostile client in its own process: bombs, unread proof batches, malformed writes."""
    children.die_with_parent(signal.SIGKILL)
    async def run() -> None:
        deadline = time.monotonic() + seconds
        proofs = post("/v1/proof/inclusion:batch", json.dumps({"indices": list(range(4096)) * 24}).encode(),
                      "application/json", "X-Forwarded-For: 203.0.113.66")
        held: list[asyncio.StreamWriter] = []
        n = 0
        while time.monotonic() < deadline and n < 100_000:
            n += 1
            fwd = "X-Forwarded-For: 203.0.113.66"
            await exchange(port, post("/v1/entries", BOMB, "application/oap+cbor", fwd), timeout=5)
            await exchange(port, post("/v1/entries:batch", b'{"entries": [' * 2000, "application/json", fwd),
                           timeout=5)
            if len(held) < 4:
                _r, w = await asyncio.open_connection("127.0.0.1", port)
                w.write(proofs)
                held.append(w)
            sent.value = 2 * n + len(held)
        for w in held:
            w.close()
    asyncio.run(run())


async def honest_load(port: int, seconds: float, clients: int, *, start: int) -> dict:
    reads: list[float] = []
    writes: list[float] = []
    errors = 0
    deadline = time.monotonic() + seconds

    async def client(k: int) -> None:
        nonlocal errors
        c = Conn(port)
        i = 0
        fwd = f"X-Forwarded-For: 10.1.{k}.1"
        while time.monotonic() < deadline and i < 100_000:
            i += 1
            try:
                if k % 2:
                    reads.append(await c.ask(get("/checkpoint", fwd)))
                    await asyncio.sleep(0.01)
                else:
                    writes.append(await c.ask(post("/v1/entries", commitment(start + k * 100_000 + i),
                                                   "application/json", fwd, close=False)))
            except (TimeoutError, RuntimeError, ConnectionError, asyncio.IncompleteReadError):
                errors += 1
                c = Conn(port)

    await asyncio.gather(*(client(k) for k in range(clients)))
    return {"errors": errors, "checkpoint_reads": len(reads), "read_p50_ms": pct(reads, 50),
            "read_p99_ms": pct(reads, 99), "single_appends": len(writes), "append_p50_ms": pct(writes, 50),
            "append_p99_ms": pct(writes, 99)}


async def honest_p99(work: Path, seconds: float) -> dict:
    log = log_service(work / "p99", env=env(trusted_proxies=1, send_timeout=5)).start()
    try:
        port = int(log.url.rsplit(":", 1)[1])
        await fill(port, 4096)
        quiet = await honest_load(port, seconds, 32, start=10**7)
        ctx = mp.get_context("spawn")
        sent = ctx.Value("q", 0)
        p = ctx.Process(target=_hostile, args=(port, seconds + 2, sent))
        p.start()
        await asyncio.sleep(1)
        loud = await honest_load(port, seconds, 32, start=2 * 10**7)
        p.join(30)
        if p.is_alive():
            p.kill()
        ratios = {k: round(loud[k] / quiet[k], 2) if quiet[k] else None for k in ("read_p99_ms", "append_p99_ms")}
        return {"without_hostile": quiet, "with_hostile": loud, "hostile_requests": sent.value,
                "p99_ratios": ratios, "target": "each ratio <= 2",
                "ok": all(r is not None and r <= 2 for r in ratios.values()) and loud["errors"] == 0}
    finally:
        log.kill()


async def witness_attack(work: Path, n: int) -> dict:
    first = log_service(work / "wlog").start()
    vkey = first.vkey
    first.stop()
    w = witness_service(work / "w", vkey, "--rate-limit", "0").start()
    services: list[Service] = [w]
    try:
        policy = work / "policy"
        policy.write_text(f"witness w1 {w.vkey} {w.url}\ngroup g 1 w1\nquorum g\n")
        log = log_service(work / "wlog", "--witness-policy", str(policy)).start()
        services.append(log)
        port = int(log.url.rsplit(":", 1)[1])
        wport = int(w.url.rsplit(":", 1)[1])

        async def writes(start: int) -> list[float]:
            c = Conn(port)
            return [await c.ask(post("/v1/entries", commitment(start + i), close=False)) for i in range(n)]

        quiet = await writes(0)
        stop = asyncio.Event()

        async def attack() -> int:
            sent = 0
            bomb = b"\x9a" + (1024 * 1024 - 5).to_bytes(4, "big") + b"\x80" * (1024 * 1024 - 5)
            deep = b"[" * 200_000 + b"]" * 200_000
            while not stop.is_set() and sent < 10_000:
                await asyncio.gather(exchange(wport, post("/v1/conformance/witness", bomb, "application/oap+cbor")),
                                     exchange(wport, post("/v1/conformance/witness", deep)))
                sent += 2
            return sent

        task = asyncio.create_task(attack())
        await asyncio.sleep(0.2)
        loud = await writes(10**6)
        stop.set()
        sent = await task
        return {"writes": n, "attack_requests": sent, "p50_ms": [pct(quiet, 50), pct(loud, 50)],
                "p99_ms": [pct(quiet, 99), pct(loud, 99)], "note": "[without, with] the attack on the witness",
                "ok": pct(loud, 99) <= 2 * max(pct(quiet, 99), 5.0)}
    finally:
        for s in services:
            s.kill()


async def main_async(quick: bool) -> dict:
    work = Path(tempfile.mkdtemp(prefix="oap-hostile-"))
    try:
        out = {"attack_mix": await attack_mix(work), "forged_forwarded_for": await forged_forwarded_for(work),
               "witness_attack": await witness_attack(work, 100 if quick else 400),
               "honest_p99": await honest_p99(work, 5 if quick else 20)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["ok"] = all(v["ok"] for v in out.values() if isinstance(v, dict))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    out = asyncio.run(main_async(args.quick))
    out = {"_meta": meta(command=" ".join(["benchmarks/hostile.py", *sys.argv[1:]]), mode="quick" if args.quick
                         else "full"), **out}
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    sys.exit(0 if out["ok"] else 1)


if __name__ == "__main__":
    main()
