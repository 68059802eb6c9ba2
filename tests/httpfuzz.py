"""HTTP fuzzer: malformed, oversize, truncated and slow requests to
every endpoint of a running service, while valid traffic is sent at the same
time. Checks: no 5xx, the process stays up, its memory stays bounded, and the
valid traffic is still served.

`python -m tests.httpfuzz --requests 10000` (make fuzz) runs it against a
log, a witness and a registry; the test suite runs a shorter version.
"""
from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
from yarl import URL


@dataclass
class Endpoint:
    method: str
    path: str
    seeds: list[bytes] = field(default_factory=list)  # valid-looking bodies to mutate
    content_types: list[str] = field(default_factory=lambda: ["application/json"])
    stream: bool = False  # an answer that may never end (Server-Sent Events): read the status only


@dataclass
class FuzzReport:
    sent: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    server_errors: list[str] = field(default_factory=list)
    transport_errors: int = 0
    valid_ok: int = 0
    valid_failed: list[str] = field(default_factory=list)
    rss_start_kb: int = 0
    rss_peak_kb: int = 0
    rss_end_kb: int = 0


def rss_kb(pid: int) -> int:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def mutate(rng: random.Random, body: bytes) -> bytes:
    b = bytearray(body)
    for _ in range(rng.randrange(1, 8)):
        op = rng.randrange(7)
        pos = rng.randrange(len(b) + 1)
        if op == 0 and b:
            del b[pos % len(b): pos % len(b) + rng.randrange(1, 16)]
        elif op == 1:
            b[pos:pos] = rng.randbytes(rng.randrange(1, 16))
        elif op == 2 and b:
            b[pos % len(b)] ^= 1 << rng.randrange(8)
        elif op == 3:
            b = b[:pos]
        elif op == 4:
            b[pos:pos] = rng.choice([b"\r\n", b"\n\n", b"\x00", b"\xff\xfe", b"\xe2\x80", b'"', b"{" * 50,
                                     b"[" * 50, b"1e999", b"-0", b"\\u0000", b"\xc0\xaf"])
        elif op == 5 and b:
            seg = b[pos % len(b):pos % len(b) + 64]
            b[pos:pos] = seg * rng.randrange(2, 20)
        else:
            b = b.replace(b"\n", b"\r\n") if rng.random() < 0.5 else b.replace(b"=", b"")
    return bytes(b)


def junk_path(rng: random.Random, path: str) -> str:
    choices = ["%00", "%2e%2e/", "../", "//", "%ff", "x" * rng.randrange(1, 3000), "?a=" + "b" * 5000,
               "?index=-1", "?index=99999999999999999999999", "?old=2&new=1", ";", "%", "\\", "\u2014",
               "%C2%B2", "%D9%A1%D9%A2", "?index=%C2%B2", "?after=9223372036854775808", "?limit=%D9%A1", "/01"]
    tail = "".join(rng.choice(choices) for _ in range(rng.randrange(1, 4)))
    return path + tail if rng.random() < 0.7 else path.rsplit("/", 1)[0] + "/" + tail


async def raw_request(host: str, port: int, data: bytes, *, slow: float = 0.0, timeout: float = 20.0) -> int | None:
    """Send raw bytes (optionally trickled), return the status code or None if closed."""
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
    except (TimeoutError, OSError):
        return None
    try:
        if slow:
            for i in range(0, len(data), 7):
                w.write(data[i:i + 7])
                await w.drain()
                await asyncio.sleep(slow)
        else:
            w.write(data)
            await w.drain()
        line = await asyncio.wait_for(r.readline(), timeout)
        parts = line.split()
        return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None
    except (TimeoutError, OSError, ValueError):
        return None
    finally:
        w.close()


async def fuzz(base_url: str, endpoints: list[Endpoint], *, requests: int, pid: int | None,
               valid: Callable[[aiohttp.ClientSession, int], Awaitable[bool]] | None = None,
               seed: int = 0, concurrency: int = 24, slow_fraction: float = 0.01) -> FuzzReport:
    rng = random.Random(seed)
    rep = FuzzReport()
    url = URL(base_url)
    host, port = url.host, url.port
    if pid:
        rep.rss_start_kb = rep.rss_peak_kb = rss_kb(pid)
    queue = list(range(requests))
    stop = asyncio.Event()

    def record(status: int | None, what: str) -> None:
        rep.sent += 1
        if status is None:
            rep.transport_errors += 1
            return
        rep.statuses[status] = rep.statuses.get(status, 0) + 1
        if status >= 500:
            rep.server_errors.append(f"{status} {what[:160]}")

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        ep = endpoints[i % len(endpoints)]
        kind = rng.random()
        ctype = rng.choice([*ep.content_types, "text/plain", "", "application/json; charset=latin1"])
        if kind < slow_fraction:  # slow: trickle a request head and part of a body
            body = mutate(rng, rng.choice(ep.seeds)) if ep.seeds else b""
            head = (f"{ep.method} {ep.path} HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\n"
                    f"Content-Length: {len(body) + 100}\r\n\r\n").encode()
            record(await raw_request(host, port, head + body, slow=0.05), f"slow {ep.path}")
            return
        if kind < 0.12:  # truncated: promise more body than is sent, then close
            body = (rng.choice(ep.seeds) if ep.seeds else b"x")[: rng.randrange(0, 40)]
            data = (f"{ep.method} {ep.path} HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\n"
                    f"Content-Length: {len(body) + rng.randrange(1, 5000)}\r\nConnection: close\r\n\r\n").encode() + body
            try:
                _r, w = await asyncio.open_connection(host, port)
                w.write(data)
                await w.drain()
                w.close()
            except OSError:
                pass
            rep.sent += 1
            return
        if kind < 0.2:  # malformed HTTP itself
            data = rng.choice([
                b"GARBAGE\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", b"GET " + b"/a" * 5000 + b" HTTP/1.1\r\n\r\n",
                b"POST " + ep.path.encode() + b" HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                b"POST " + ep.path.encode() + b" HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                b"GET " + ep.path.encode() + b" HTTP/1.1\r\n" + b"X-H: v\r\n" * 300 + b"\r\n",
                b"GET " + ep.path.encode() + b" HTTP/1.1\r\nX: " + b"v" * 20000 + b"\r\n\r\n",
                rng.randbytes(rng.randrange(1, 200)),
            ])
            record(await raw_request(host, port, data, timeout=10), "raw")
            return
        if kind < 0.24 and ep.method == "POST":  # hostile bodies within the size cap (tests/system/test_hostile.py)
            n = rng.choice([4096, 65536, 250_000] if requests >= 2000 else [4096, 16384])  # make fuzz: bigger
            data = rng.choice([
                b"\x9a" + n.to_bytes(4, "big") + b"\x80" * n,  # CBOR array of empty arrays
                b"\xa1\x67entries\x9a" + n.to_bytes(4, "big") + b"\x80" * n,  # the same inside a batch
                b"[" * n + b"]" * n,  # deep JSON
                b'{"entries":[' + b"[]," * n + b"[]]",  # a batch of empty arrays
                b'{"indices":[' + b"0," * n + b"0]}",  # many proofs
            ])
            hdrs = {"Content-Type": rng.choice(["application/oap+cbor", "application/json"]),
                    "X-Forwarded-For": f"{rng.randrange(256)}.1.1.1, garbage, {'x' * rng.randrange(0, 300)}"}
            if rng.random() < 0.3:  # and a client that never reads the answer
                head = (f"POST {ep.path} HTTP/1.1\r\nHost: x\r\nContent-Type: {hdrs['Content-Type']}\r\n"
                        f"Content-Length: {len(data)}\r\n\r\n").encode()
                try:
                    _r, w = await asyncio.open_connection(host, port)
                    w.write(head + data)
                    await asyncio.sleep(0.05)
                    w.close()
                except OSError:
                    pass
                rep.sent += 1
                return
            try:
                async with session.post(URL(base_url + ep.path, encoded=True), data=data, headers=hdrs) as resp:
                    await resp.read()
                    record(resp.status, f"hostile {ep.path} {data[:40]!r}")
            except (TimeoutError, aiohttp.ClientError, ValueError, OSError):
                record(None, ep.path)
            return
        if kind < 0.27 and ep.method == "POST":  # oversize
            body = b"[" + b"0," * rng.choice([100_000, 3_000_000, 10_000_000]) + b"0]"
            headers = {"Content-Type": ep.content_types[0]}
        elif ep.method == "POST":
            body = mutate(rng, rng.choice(ep.seeds)) if ep.seeds else rng.randbytes(64)
            headers = {"Content-Type": ctype} if ctype else {}
        else:
            body, headers = None, {}
        path = junk_path(rng, ep.path) if ep.method == "GET" or rng.random() < 0.1 else ep.path
        try:
            async with session.request(ep.method, URL(base_url + path, encoded=True), data=body,
                                       headers=headers) as resp:
                if not ep.stream:
                    await resp.read()
                record(resp.status, f"{ep.method} {path} {body[:80] if body else b''!r}")
        except (TimeoutError, aiohttp.ClientError, ValueError, OSError):
            record(None, path)

    async def worker(session: aiohttp.ClientSession) -> None:
        while queue:
            await one(session, queue.pop())

    async def watch() -> None:
        while not stop.is_set():
            if pid:
                rep.rss_peak_kb = max(rep.rss_peak_kb, rss_kb(pid))
            await asyncio.sleep(0.2)

    async def valid_traffic(session: aiohttp.ClientSession) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                if await valid(session, n):
                    rep.valid_ok += 1
                else:
                    rep.valid_failed.append(f"valid request {n} refused")
            except (TimeoutError, aiohttp.ClientError) as e:
                rep.valid_failed.append(f"valid request {n}: {type(e).__name__}")
            await asyncio.sleep(0.02)

    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as fz, aiohttp.ClientSession(timeout=timeout) as ok:
        side = [asyncio.create_task(watch())]
        if valid is not None:
            side.append(asyncio.create_task(valid_traffic(ok)))
        await asyncio.gather(*(worker(fz) for _ in range(concurrency)))
        stop.set()
        await asyncio.gather(*side)
    if pid:
        rep.rss_end_kb = rss_kb(pid)
    return rep


# --- the log's endpoints ---------------------------------------------------------------


def log_endpoints() -> list[Endpoint]:
    import json

    import cbor2

    from tlog.formats.ed25519 import generate_seed
    from tlog.formats.entries import commitment_entry, receipt_entry
    from tlog.formats.hashing import leaf_hash

    seed = generate_seed()
    e1 = receipt_entry(leaf_hash(b"fuzz"), seed)
    e2 = commitment_entry(leaf_hash(b"fuzz2"))
    cts = ["application/json", "application/oap+json", "application/oap+cbor"]
    return [
        Endpoint("POST", "/v1/entries", [json.dumps(e1).encode(), json.dumps(e2).encode(), cbor2.dumps(e1)], cts),
        Endpoint("POST", "/v1/entries:batch", [json.dumps({"entries": [e1, e2]}).encode()], cts),
        Endpoint("POST", "/v1/proof/inclusion:batch", [b'{"indices":[0,1,2],"size":3}', b'{"indices":[0]}'], cts),
        Endpoint("GET", "/checkpoint"), Endpoint("GET", "/tile/0/000"), Endpoint("GET", "/tile/entries/000.p/2"),
        Endpoint("GET", "/v1/entries/0"), Endpoint("GET", "/v1/proof/inclusion?index=0"),
        Endpoint("GET", "/v1/proof/consistency?old=1&new=2"), Endpoint("GET", "/v1/entries:lookup?leaf_hash="),
        Endpoint("GET", "/v1/info"), Endpoint("GET", "/healthz"), Endpoint("GET", "/metrics"),
    ]


def log_valid_traffic(base_url: str):
    from tlog.formats.ed25519 import generate_seed
    from tlog.formats.entries import receipt_entry
    from tlog.formats.hashing import leaf_hash

    seed = generate_seed()

    async def valid(session: aiohttp.ClientSession, n: int) -> bool:
        async with session.post(base_url + "/v1/entries", json=receipt_entry(leaf_hash(n.to_bytes(8, "big")), seed)) as r:
            return r.status == 200

    return valid


# --- the witness's and the registry's endpoints ---------------------------------------------


def witness_endpoints(add_checkpoint: bytes, cosigned: str) -> list[Endpoint]:
    """Seeds that pass every check: `add_checkpoint`, a body the witness accepts (the next
    checkpoint of the log, with its consistency proof); `cosigned`, a checkpoint of the log
    that the witness cosigned, so that the seed sign-subtree of its whole tree is answered 200."""
    import hashlib
    import json

    from tlog.formats.checkpoint import parse_checkpoint
    from tlog.formats.note import parse_note

    cp = parse_checkpoint(parse_note(cosigned).text)
    note = add_checkpoint.split(b"\n\n", 1)[1].decode()
    subtree = subtree_seed(cosigned)  # tlog-witness sign-subtree (the witness holds an ML-DSA-44 key)
    conf = json.dumps({"receipt": {"id": "urn:oap:conformance:x", "level": "L4"},
                       "bundle": "c2sp.org/tlog-proof@v1\nindex 0\n\n" + cosigned}).encode()
    return [
        Endpoint("POST", "/add-checkpoint", [add_checkpoint, ("old 1\nAAAA\n\n" + note).encode()], ["text/plain"]),
        Endpoint("POST", "/v1/conformance/witness", [conf], ["application/json"]),
        Endpoint("POST", "/sign-subtree", [subtree], ["text/plain"]),
        Endpoint("GET", f"/{hashlib.sha256(cp.origin.encode()).hexdigest()}/checkpoint"),
        Endpoint("GET", "/v1/info"), Endpoint("GET", "/healthz"), Endpoint("GET", "/metrics"),
    ]


def registry_endpoints() -> list[Endpoint]:
    import json

    import cbor2

    from tlog.formats.did import did_key_from_public
    from tlog.formats.ed25519 import generate_seed, public_from_seed

    d = did_key_from_public(public_from_seed(generate_seed()))
    rev = {"type": "revocation", "id": "urn:oap:revocation:fz", "kind": "key", "subject": d, "reason": "x",
           "effective_at": "2026-11-20T09:00:00Z", "issued_at": "2026-11-20T09:00:00Z", "issued_by": d,
           "signature": "A" * 86 + "=="}
    cts = ["application/json", "application/oap+json", "application/oap+cbor"]
    return [
        Endpoint("POST", "/v1/records", [json.dumps(rev).encode(), cbor2.dumps(rev)], cts),
        Endpoint("POST", "/registry.git/git-upload-pack", [b"0032want 0000000000000000000000000000000000000000\n0000"],
                 ["application/x-git-upload-pack-request"]),
        Endpoint("POST", "/registry.git/git-receive-pack", [b"0000"], ["application/x-git-receive-pack-request"]),
        Endpoint("GET", "/registry.git/info/refs?service=git-upload-pack"),
        Endpoint("GET", "/v1/records?type=revocation&limit=5"), Endpoint("GET", "/v1/records/urn:oap:revocation:fz"),
        Endpoint("GET", f"/v1/subjects/{d}"), Endpoint("GET", "/v1/files/registry.json"),
        Endpoint("GET", "/v1/anchors/1"), Endpoint("GET", f"/v1/status/{d}"),
        Endpoint("GET", f"/v1/status-lists/{d}"), Endpoint("GET", f"/v1/status-events?id={d}", stream=True),
        Endpoint("GET", "/v1/info"), Endpoint("GET", "/metrics"),
    ]


def getter(base_url: str, path: str):
    async def valid(session: aiohttp.ClientSession, n: int) -> bool:
        async with session.get(base_url + path) as r:
            await r.read()
            return r.status == 200

    return valid


async def _witness_seeds(s: aiohttp.ClientSession, log_url: str, witness_url: str) -> tuple[bytes, str]:
    """Have the witness cosign the log's checkpoint (the sign-subtree seed's), then wait for a
    larger one: the add-checkpoint seed from one to the other, checked here without sending it.
    The fuzzer sends it only mutated, so the witness stays at the first checkpoint and the
    mutations reach the consistency check. (The registry anchors in this log too, so its sizes
    are not known in advance.)"""
    from tlog.formats.checkpoint import parse_checkpoint
    from tlog.formats.note import parse_note
    from tlog.merkle.verify import verify_consistency
    from witness.core import parse_add_checkpoint

    from tests.support.waiting import until

    valid = log_valid_traffic(log_url)

    async def checkpoint(above: int) -> tuple[int, str] | None:
        async with s.get(log_url + "/checkpoint") as r:
            text = await r.text()
        size = int(text.split("\n")[1]) if r.status == 200 else 0
        return (size, text) if size > above else None

    assert await valid(s, 1)
    n, one = await until(lambda: checkpoint(0), 60, "a checkpoint of the log")
    async with s.post(witness_url + "/add-checkpoint", data=("old 0\n\n" + one).encode()) as r:
        assert r.status == 200, await r.text()
        cosigned = one + await r.text()
    assert await valid(s, 2)
    m, two = await until(lambda: checkpoint(n), 60, "a larger checkpoint of the log")
    async with s.get(log_url + "/v1/proof/consistency", params={"old": str(n), "new": str(m)}) as r:
        proof = (await r.json())["consistency_proof"]
    body = (f"old {n}\n" + "".join(h + "\n" for h in proof) + "\n" + two).encode()
    req = parse_add_checkpoint(body)  # what the witness would accept, short of sending it
    verify_consistency(n, m, parse_checkpoint(parse_note(one).text).root, req.checkpoint.root, req.proof)
    return body, cosigned


def subtree_seed(cosigned: str) -> bytes:
    """sign-subtree of a cosigned checkpoint's whole tree: the subtree hash is the root, the
    proof empty."""
    from tlog.formats.checkpoint import parse_checkpoint
    from tlog.formats.encoding import b64enc
    from tlog.formats.note import parse_note

    cp = parse_checkpoint(parse_note(cosigned).text)
    return (f"subtree 0 {cp.size}\n{b64enc(cp.root)}\n\n" + cosigned).encode()


async def fuzz_all(workdir, requests: int, seed: int = 0) -> dict:
    """Fuzz a log, a witness and a registry (real processes), each with `requests` requests."""
    from pathlib import Path

    from tests.support.services import log_service, registry_service, witness_service
    from tests.support.waiting import until

    workdir = Path(workdir)
    import os

    # Slow-client requests wait for the body and head timeouts: shorter ones keep a short run short.
    env = dict(os.environ)
    if requests < 2000:
        for svc in ("LOG", "WITNESS", "REGISTRY"):
            env |= {f"OAP_{svc}_READ_TIMEOUT": "3", f"OAP_{svc}_HEADER_TIMEOUT": "3"}
    log = log_service(workdir / "log", "--rate-limit-write", "0", "--rate-limit-read", "0", env=env).start()
    # The same log with a read worker: hostile requests that land on the worker are handed over.
    logw = log_service(workdir / "logw", "--rate-limit-write", "0", "--rate-limit-read", "0",
                       "--read-workers", "1", env=env).start()
    w = witness_service(workdir / "w", log.vkey, "--rate-limit", "0", cosigners=("ed25519", "mldsa44"),
                        env=env).start()
    reg = registry_service(workdir / "reg", log.url, "--rate-limit", "0", env=env).start()
    out = {}
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(w.url + "/v1/info") as r:  # else sign-subtree is a 404 before any parsing
                assert (await r.json())["sign_subtree"] is True, "the fuzzed witness has no ML-DSA-44 key"
            add_checkpoint, cosigned = await _witness_seeds(s, log.url, w.url)
            async with s.post(w.url + "/sign-subtree", data=subtree_seed(cosigned)) as r:  # the seed passes
                assert r.status == 200 and "\u2014 " in await r.text(), r.status
            # The registry answers status reads 503 (rightly) until its first epoch is signed
            # and anchored: fuzz it once it is ready, so that every 5xx is a finding.
            async def ready() -> bool:
                async with s.get(reg.url + "/readyz") as r:
                    return r.status == 200

            await until(ready, 120, "the registry's first status epoch")
        plans = [("log", log, log_endpoints(), log_valid_traffic(log.url)),
                 ("log+read-worker", logw, log_endpoints(), log_valid_traffic(logw.url)),
                 ("witness", w, witness_endpoints(add_checkpoint, cosigned), getter(w.url, "/healthz")),
                 ("registry", reg, registry_endpoints(), getter(reg.url, "/v1/info"))]
        # The four at once: each waits mostly on its slow-client requests' timeouts.
        reps = await asyncio.gather(*(fuzz(svc.url, endpoints, requests=requests, pid=svc.pid, valid=valid,
                                           seed=seed) for _, svc, endpoints, valid in plans))
        for (name, svc, _, _), rep in zip(plans, reps):
            out[name] = {"sent": rep.sent, "statuses": dict(sorted(rep.statuses.items())),
                         "server_errors": rep.server_errors[:20], "alive": svc.alive(),
                         "valid_ok": rep.valid_ok, "valid_failed": rep.valid_failed[:20],
                         "rss_start_mb": rep.rss_start_kb // 1024, "rss_peak_mb": rep.rss_peak_kb // 1024,
                         "rss_end_mb": rep.rss_end_kb // 1024}
    finally:
        for svc in (reg, w, logw, log):
            svc.kill()
    return out


def passed(report: dict) -> bool:
    return all(not r["server_errors"] and r["alive"] and r["valid_ok"] > 0 and not r["valid_failed"]
               and r["rss_peak_mb"] - r["rss_start_mb"] < 400 for r in report.values())


def main() -> None:
    import argparse
    import json
    import sys
    import tempfile

    ap = argparse.ArgumentParser(description="Fuzz the log, a witness and the registry over HTTP.")
    ap.add_argument("--requests", type=int, default=10_000, help="requests per service")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        report = asyncio.run(fuzz_all(d, args.requests, args.seed))
    print(json.dumps(report, indent=2))
    sys.exit(0 if passed(report) else 1)


if __name__ == "__main__":
    main()
