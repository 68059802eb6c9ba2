"""The fast path for hot GETs (tlog.http.fastpath) against aiohttp itself.

A log is served on two ports from one app: one `FastSite` with the log's fast
routes, one plain aiohttp site. The same raw bytes sent to both must come back
as the same responses (status, headers but Date, body), whatever the request:
fast answers are checked against aiohttp's, and every request the fast path
does not take must reach aiohttp intact (pipelined, split, with a body, odd).
"""
from __future__ import annotations

import asyncio
import base64
import json
import re
import socket
import time

import cbor2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tlog.formats.entries import canonical_entry
from tlog.formats.hashing import leaf_hash
from tlog.formats.tiles import tile_path
from tlog.http.fastpath import FAST_ROUTES_KEY, MAX_HEAD, FastSite
from tlog.http.serve import start_app
from tlog.server.api import build_app
from tlog.server.config import LogConfig
from tlog.server.service import LogService

N = 600  # two full level-0 tiles and a partial one


def entry(i: int) -> bytes:
    return canonical_entry({"type": "commitment", "commitment": "sha256:" + leaf_hash(i.to_bytes(8, "big")).hex()})


class Pair:
    def __init__(self, svc, runner, fast_port: int, plain_port: int) -> None:
        self.svc, self.runner, self.fast, self.plain = svc, runner, fast_port, plain_port
        self.routes = runner.app[FAST_ROUTES_KEY]


async def open_pair(tmp_path, **cfg) -> Pair:
    settings_ = dict(data_dir=tmp_path / "data", port=0, batch_interval_ms=2, rate_limit_read=0, rate_limit_write=0)
    settings_.update(cfg)
    svc = await LogService.open(LogConfig(**settings_))
    await svc.appender.add_many([entry(i) for i in range(N)])
    runner = await start_app(build_app(svc), "127.0.0.1", 0, header_timeout=cfg.get("header_timeout", 15.0))
    plain = FastSite(runner, "127.0.0.1", 0, routes=None, timeout=15.0)
    await plain.start()
    ports = [a[1] for a in runner.addresses]
    return Pair(svc, runner, ports[0], ports[1])


@pytest.fixture
async def pair(tmp_path):
    p = await open_pair(tmp_path)
    yield p
    await p.runner.cleanup()
    await p.svc.close()


async def exchange(port: int, data: bytes | list[bytes], *, pause: float = 0.0, timeout: float = 10.0) -> bytes:
    """Send `data` (pieces `pause` s apart), then read until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for piece in [data] if isinstance(data, bytes) else data:
            writer.write(piece)
            await writer.drain()
            if pause:
                await asyncio.sleep(pause)
        return await asyncio.wait_for(reader.read(-1), timeout)
    finally:
        writer.close()


CLOSE = b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"  # not a fast route: aiohttp closes after it


def responses(stream: bytes, head_only: tuple[int, ...] = ()) -> list[tuple[bytes, tuple, bytes]]:
    """(status line, sorted headers without Date, body) per response; bodies by Content-Length."""
    out, pos = [], 0
    while pos < len(stream):
        end = stream.index(b"\r\n\r\n", pos)
        lines = stream[pos:end].split(b"\r\n")
        headers = [tuple(line.split(b": ", 1)) for line in lines[1:]]
        length = int(dict((k.lower(), v) for k, v in headers).get(b"content-length", b"0"))
        if len(out) in head_only:
            length = 0
        body = stream[end + 4:end + 4 + length]
        assert len(body) == length, "truncated response"
        out.append((lines[0], tuple(sorted(h for h in headers if h[0].lower() != b"date")), body))
        pos = end + 4 + length
    return out


async def same(p: Pair, data: bytes, head_only: tuple[int, ...] = ()) -> list:
    fast = responses(await exchange(p.fast, data), head_only)
    plain = responses(await exchange(p.plain, data), head_only)
    assert fast == plain
    return fast


def get(path: str, *headers: str) -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode()


async def test_fast_answers_are_aiohttp_answers_byte_for_byte(pair):
    size = pair.svc.state.size
    paths = ["/checkpoint", "/" + tile_path(0, 0), "/" + tile_path(0, 1), "/" + tile_path(0, 2, size % 256),
             "/" + tile_path(1, 0, size >> 8), "/" + tile_path(0, 0, 17)]
    before = pair.routes.answered
    got = await same(pair, b"".join(get(path) for path in paths) + CLOSE)
    assert pair.routes.answered - before == len(paths)  # all of them fast, on one connection
    assert [r[0] for r in got] == [b"HTTP/1.1 200 OK"] * (len(paths) + 1)
    assert got[0][2] == pair.svc.state.note.encode()
    levels = pair.svc.hashes
    assert got[1][2] == levels.read_range(0, 0, 256) and got[3][2] == levels.read_range(0, 512, size % 256)
    headers = dict(got[1][1])
    assert headers[b"Cache-Control"] == b"public, max-age=31536000, immutable"
    assert headers[b"Content-Type"] == b"application/octet-stream" and headers[b"Content-Length"] == b"8192"
    # the same answers with a header the fast path leaves to aiohttp
    slow = await same(pair, b"".join(get(path, "X-Anything: 1") for path in paths) + CLOSE)
    assert slow == got


@pytest.mark.parametrize("request_", [
    get("/" + tile_path(0, 9)),  # beyond the tree: 404 from aiohttp
    get("/tile/0/x001/002"),  # non-canonical tile path: 400
    get("/tile/entries/000"),  # entry bundle: read off the loop, by aiohttp
    get("/tile/0/%30%30%30"),  # percent-escapes are aiohttp's to decode
    get("/tile/0/./000"), get("/tile//0/000"), get("/tile/0/000?x=1"), get("/checkpoint/"),
    get("/checkpoint", "Host: again"),  # a second Host
    get("/checkpoint", "If-None-Match: \"x\""), get("/checkpoint", "Range: bytes=0-3"),
    get("/checkpoint", "Connection: keep-alive, x"), get("/checkpoint", "Transfer-Encoding: chunked"),
    get("/checkpoint", "Content-Length: 5")[:-2] + b"\r\nhello",
    b"GET /checkpoint HTTP/1.0\r\n\r\n", b"GET /checkpoint HTTP/1.1\r\n\r\n",  # no Host
    b"GET  /checkpoint HTTP/1.1\r\nHost: x\r\n\r\n", b"get /checkpoint HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /checkpoint HTTP/1.1\r\nHost : x\r\n\r\n", b"GET /checkpoint HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
    b"GET /checkpoint HTTP/1.1\r\nHost: \x01\r\n\r\n", b"GET /checkpoint HTTP/1.1\nHost: x\n\n",
    b"POST /checkpoint HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
    b"\r\nGET /checkpoint HTTP/1.1\r\nHost: x\r\n\r\n", b"FOO\r\n\r\n",
])
async def test_requests_the_fast_path_leaves_reach_aiohttp_intact(pair, request_):
    before = pair.routes.answered
    got = await same(pair, request_ + CLOSE)
    assert pair.routes.answered == before  # nothing of these is answered fast
    assert all(not r[0].startswith(b"HTTP/1.1 5") for r in got)


async def test_a_connection_goes_on_after_a_fast_write_and_in_aiohttp_after_a_head(pair):
    body = b'{"type":"commitment","commitment":"sha256:' + b"ab" * 32 + b'"}'
    post = (b"POST /v1/entries HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body
    stream = get("/checkpoint") + get("/" + tile_path(0, 0)) + post + get("/" + tile_path(0, 1)) + CLOSE
    before, handed = pair.routes.answered, pair.routes.handed_off
    got = responses(await exchange(pair.fast, stream))
    assert pair.routes.answered - before == 4 and pair.routes.handed_off - handed == 1  # at /healthz
    assert [r[0] for r in got] == [b"HTTP/1.1 200 OK"] * 5
    assert b'"index":600' in got[2][2]
    assert got[3][2] == pair.svc.hashes.read_range(0, 256, 256)
    head = responses(await exchange(pair.fast, b"HEAD /checkpoint HTTP/1.1\r\nHost: x\r\n\r\n" + CLOSE), (0,))
    assert head[0][0] == b"HTTP/1.1 200 OK" and head[0][2] == b""


async def test_heads_split_anywhere_are_answered_the_same(pair):
    stream = get("/" + tile_path(0, 1)) + get("/checkpoint", "Accept: */*", "User-Agent: t") + CLOSE
    whole = responses(await exchange(pair.fast, stream))
    pieces = [stream[i:i + 7] for i in range(0, len(stream), 7)]
    assert responses(await exchange(pair.fast, pieces, pause=0.002)) == whole
    assert len(whole) == 3 and whole[0][2] == pair.svc.hashes.read_range(0, 256, 256)


@pytest.mark.parametrize("garbage", [b"\x16\x03\x01\x02\x00\x01", b"GARBAGE", b"GET /x HTTP/1.0\r\nHost: x\r\n",
                                     b"POST /v1/entries HTTP/1.1\r\n"])
async def test_unfinished_heads_that_cannot_be_fast_go_to_aiohttp_at_once(pair, garbage):
    """Random bytes, a TLS hello or another method are aiohttp's to refuse now, not at the
    header timeout (15 s here, longer than this read waits)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", pair.fast)
    try:
        writer.write(garbage)
        await writer.drain()
        if garbage.endswith(b"\r\n"):
            writer.write(b"Content-Length: 2\r\n\r\n{}")  # complete it: aiohttp answers
        line = await asyncio.wait_for(reader.readline(), 5)
        assert line.split(b" ")[1][:1] in (b"2", b"4"), line
    finally:
        writer.close()
    assert pair.routes.handed_off == 1 and pair.routes.answered == 0


async def test_connection_close_oversize_heads_and_idle_timeouts(tmp_path):
    p = await open_pair(tmp_path, header_timeout=1.0)
    try:
        got = responses(await exchange(p.fast, get("/checkpoint", "Connection: close") + get("/checkpoint")))
        assert len(got) == 1 and (b"Connection", b"close") in got[0][1]  # nothing after close is read
        big = get("/checkpoint", "User-Agent: " + "a" * (MAX_HEAD + 10))
        assert responses(await exchange(p.fast, big))[0][0].split(b" ")[1].startswith(b"4")  # from aiohttp
        # an idle keep-alive connection and a head that never ends are both closed by the timeout
        for data in (get("/checkpoint"), b"GET /checkpoint HTTP/1.1\r\nHost: x\r\n"):
            out = await exchange(p.fast, data, timeout=60)  # closed after 1 s idle; 60: a bound only
            assert out.count(b"HTTP/1.1 200") == (1 if data.endswith(b"\r\n\r\n") else 0)
    finally:
        await p.runner.cleanup()
        await p.svc.close()


async def test_rate_limits_and_metrics_count_fast_answers(tmp_path):
    p = await open_pair(tmp_path, rate_limit_read=0.001, rate_limit_read_burst=3, rate_limit_tiles=True)
    try:
        got = responses(await exchange(p.fast, get("/checkpoint") * 5 + CLOSE))
        assert [r[0][:12] for r in got[:5]] == [b"HTTP/1.1 200"] * 3 + [b"HTTP/1.1 429"] * 2
        assert dict(got[3][1])[b"Retry-After"] and b'"rate_limited"' in got[3][2]
        assert p.routes.answered == 3
    finally:
        await p.runner.cleanup()
        await p.svc.close()
    # By default checkpoints and tiles are not limited (they belong behind a cache); proofs are.
    p = await open_pair(tmp_path / "d", rate_limit_read=0.001, rate_limit_read_burst=3)
    try:
        got = responses(await exchange(p.fast, (get("/checkpoint") + get("/" + tile_path(0, 0))) * 5
                                       + get("/v1/proof/inclusion?index=0") * 4 + CLOSE))
        assert [r[0][:12] for r in got[:10]] == [b"HTTP/1.1 200"] * 10
        assert [r[0][:12] for r in got[10:14]] == [b"HTTP/1.1 200"] * 3 + [b"HTTP/1.1 429"]
    finally:
        await p.runner.cleanup()
        await p.svc.close()
    p = await open_pair(tmp_path / "m")
    try:
        await exchange(p.fast, get("/" + tile_path(0, 0)) * 4 + get("/checkpoint") + CLOSE)
        text = responses(await exchange(p.plain, get("/metrics") + CLOSE))[0][2].decode()
        count = re.search(r'oap_log_http_requests_total\{route="/tile/\{path\}",status="200"\} (\S+)', text)
        assert count and float(count.group(1)) == 4.0
    finally:
        await p.runner.cleanup()
        await p.svc.close()


async def test_shutdown_closes_idle_fast_connections(tmp_path):
    p = await open_pair(tmp_path)
    reader, writer = await asyncio.open_connection("127.0.0.1", p.fast)
    writer.write(get("/checkpoint"))
    await writer.drain()
    first = await reader.readuntil(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200")
    await asyncio.wait_for(p.runner.cleanup(), 10)
    await p.svc.close()
    rest = await asyncio.wait_for(reader.read(-1), 5)  # the body, then the close
    assert rest == p.svc.state.note.encode()
    writer.close()


_FAST_HEADERS = ["Accept: */*", "User-Agent: y", "Accept-Language: en", "DNT: 1", "Referer: /x", "Accept:",
                 "Accept: application/oap+cbor", "User-Agent: x/1", "Connection: keep-alive", "Accept-Encoding: gzip",
                 "X-Forwarded-For: 10.0.0.1", "Cache-Control: no-cache", "Accept:   spaced  ", "Pragma: no-cache"]
def post(body: bytes, *headers: str, ctype: str = "application/json", path: str = "/v1/entries") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
    return (head + "".join(h + "\r\n" for h in headers) + "\r\n").encode() + body


def commitment(i: int) -> bytes:
    return b'{"type":"commitment","commitment":"sha256:%s"}' % leaf_hash(b"post %d" % i).hex().encode()


async def test_single_appends_on_the_fast_path_answer_in_order_and_as_aiohttp_does(pair):
    size = pair.svc.state.size
    before = pair.routes.answered
    stream = post(commitment(1)) + post(commitment(2)) + get("/checkpoint") + post(commitment(3)) + CLOSE
    got = responses(await exchange(pair.fast, stream))
    assert pair.routes.answered - before == 4 and [r[0] for r in got] == [b"HTTP/1.1 200 OK"] * 5
    docs = [json.loads(got[k][2]) for k in (0, 1, 3)]
    for doc, i in zip(docs, (1, 2, 3)):  # each answer is its own request's
        e = canonical_entry(json.loads(commitment(i)))
        assert base64.b64decode(doc["leaf_hash"]) == leaf_hash(e) and not doc["duplicate"]
    assert sorted(d["index"] for d in docs) == [size, size + 1, size + 2]
    # the same entry again, to each site: the same duplicate answer, JSON and CBOR
    for accept, decode in (("*/*", json.loads), ("application/oap+cbor", cbor2.loads)):
        dup = await same(pair, post(commitment(2), f"Accept: {accept}") + CLOSE)
        doc = decode(dup[0][2])
        assert doc["duplicate"] and doc["index"] == docs[1]["index"]
    # a body that arrives in pieces, after its head
    whole = post(commitment(4))
    cut = whole.index(b"\r\n\r\n") + 4
    before = pair.routes.answered
    out = responses(await exchange(pair.fast, [whole[:cut], whole[cut:cut + 5], whole[cut + 5:] + CLOSE], pause=0.02))
    assert pair.routes.answered - before == 1 and json.loads(out[0][2])["index"] == size + 3


BAD = b'{"type":"nope"}'  # a body aiohttp refuses too: nothing may be appended by any of these


@pytest.mark.parametrize("request_", [
    post(b"{"), post(b""), post(b'{"type":"commitment"}'), post(BAD), post(commitment(9), ctype="text/plain"),
    post(b"[" + b"0," * 40_000 + b"0]"),  # over max_entry_body: 413
    post(BAD, path="/v1/entries:batch"), post(BAD, path="/v1/entries?x=1"), post(BAD, path="/v1/entries/"),
    post(BAD, "Transfer-Encoding: chunked"), post(BAD, "Expect: 100-continue"), post(BAD, "Content-Length: 3"),
])
async def test_bad_or_unusual_posts_get_what_aiohttp_gives_and_append_nothing(pair, request_):
    # Refusals of a body the fast path read are answered there, through the error
    # middleware's own mapping (a hostile body is not parsed twice); the rest by aiohttp.
    size = pair.svc.state.size
    fast = responses(await exchange(pair.fast, request_ + CLOSE))
    plain = responses(await exchange(pair.plain, request_ + CLOSE))
    assert fast == plain and fast[0][0].split(b" ")[1][:1] in (b"1", b"4")
    assert pair.svc.state.size == size


async def test_a_body_shorter_than_its_length_is_not_answered(pair):
    size = pair.svc.state.size
    for port in (pair.fast, pair.plain):  # both wait for the rest (until a timeout far beyond this one)
        with pytest.raises(asyncio.TimeoutError):
            await exchange(port, post(commitment(9))[:-3], timeout=1.5)
    assert pair.svc.state.size == size and pair.routes.answered == 0


async def test_a_failure_after_the_body_is_answered_as_the_error_middleware_does(pair):
    from tlog.errors import LogHalted

    pair.svc.appender.halted = LogHalted("test: the log refuses writes")
    before = pair.routes.answered
    got = await same(pair, post(commitment(5)) + CLOSE)
    assert pair.routes.answered - before == 1  # answered fast: the failure came from the appender
    assert got[0][0].startswith(b"HTTP/1.1 5") and json.loads(got[0][2])["message"] == "test: the log refuses writes"


async def test_write_auth_and_limits_apply_to_fast_appends(tmp_path):
    from tlog.http.limits import new_token

    token, line = new_token()
    (tmp_path / "tokens").write_text(line + " commitment\n")
    p = await open_pair(tmp_path, auth_required_for=("commitment",), tokens_file=tmp_path / "tokens",
                        rate_limit_write=0.001, rate_limit_write_burst=4)
    try:
        answers = []
        for i, auth in enumerate(["", f"Authorization: Bearer {token}", "Authorization: Bearer nope",
                                  f"Authorization: Bearer {token}", f"Authorization: Bearer {token}"]):
            got = responses(await exchange(p.fast, post(commitment(20 + i), *([auth] if auth else [])) + CLOSE))
            answers.append(int(got[0][0].split(b" ")[1]))
        assert answers == [401, 200, 401, 200, 429]  # every write takes a token before its body is read
        assert p.routes.answered == 5  # refusals too are answered without aiohttp
    finally:
        await p.runner.cleanup()
        await p.svc.close()


HEADER_LINES = st.sampled_from(_FAST_HEADERS * 3 + [
    "Connection: close", "Connection: Upgrade", "If-None-Match: *", "Content-Length: 0", "Cookie: a=b",
    "Host: second", "Bad Header: x", "X: \x7f", "Expect: 100-continue",
])
TARGETS = st.sampled_from([
    "/checkpoint", "/checkpoint", "/" + tile_path(0, 1), "/" + tile_path(0, 1), "/" + tile_path(0, 2, 88), "/" + tile_path(0, 0), "/" + tile_path(0, 2, 88), "/" + tile_path(0, 2, 89),
    "/" + tile_path(1, 0, 2), "/" + tile_path(2, 0, 1), "/tile/0/0", "/tile/0/000.p/0", "/tile/entries/000",
    "/tile/", "/tile/0/%30%30%30", "/tile/0/../0/000", "/checkpoint?x", "/v1/info", "/nope", "*", "",
    "/v1/entries", "/v1/entries", "/v1/entries",
])


# Weighted so that about half the requests are ones the fast path answers.
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests=st.lists(st.tuples(st.sampled_from(["GET"] * 8 + ["POST", "PUT"]), TARGETS,
                                   st.sampled_from(["HTTP/1.1"] * 8 + ["HTTP/1.0"]),
                                   st.lists(HEADER_LINES, max_size=3), st.sampled_from([True] * 8 + [False]),
                                   st.sampled_from([BAD, b"{", b"", b'{"type":"commitment","commitment":"x"}']),
                                   st.sampled_from(["application/json", "application/oap+cbor", "text/plain", None])),
                         min_size=1, max_size=4))
async def test_any_request_sequence_gets_what_aiohttp_alone_gives(pair, requests):
    """One request at a time, each after the last answer, as a client that does not pipeline
    (pipelining is above: aiohttp drops the answers to good requests parsed in the same read
    as a bad one, which the fast path, answering before aiohttp parses, does not)."""
    sequence = []
    for method, target, version, headers, host, body, ctype in requests:
        lines = [f"{method} {target} {version}"] + (["Host: 127.0.0.1"] if host else []) + headers
        if method == "POST":  # bodies no service accepts: each site must refuse them the same way
            lines += [f"Content-Length: {len(body)}"] + ([f"Content-Type: {ctype}"] if ctype else [])
        else:
            body = b""
        sequence.append(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
    assert await converse(pair.fast, sequence) == await converse(pair.plain, sequence)


async def converse(port: int, sequence: list[bytes]) -> list:
    """Send each request once the previous answer is in; the answers until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    out = []
    try:
        for data in [*sequence, CLOSE]:
            writer.write(data)
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                while head.startswith(b"HTTP/1.1 1"):  # 100 Continue: the answer follows
                    out.append(head)
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            except asyncio.IncompleteReadError:
                break
            length = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head).group(1))
            body = await asyncio.wait_for(reader.readexactly(length), 10)
            out.extend(responses(head + body))
    finally:
        writer.close()
    return out


def test_reply_headers_are_formatted_once_per_header_set():
    from tlog.http.fastpath import _header_bytes
    from tlog.http.reply import Reply

    r = Reply(b"x", (("Content-Type", "a/b"), ("ETag", '"1"')))
    assert _header_bytes(r.headers) == b'Content-Type: a/b\r\nETag: "1"\r\n'
    assert _header_bytes(r.headers) is _header_bytes((("Content-Type", "a/b"), ("ETag", '"1"')))


# --- found by an independent review: flow control, timers, rate limits, shutdown ----------------

def _fast_conn_buffer(p: Pair) -> int:
    sizes = [0]
    for site in p.runner.sites:
        for c in getattr(site, "_fast_conns", ()):
            if c._transport is not None:
                sizes.append(c._transport.get_write_buffer_size())
    for h in p.runner.server._connections:
        if h.transport is not None:
            sizes.append(h.transport.get_write_buffer_size())
    return max(sizes)


async def _send_without_reading(port: int, data: bytes, settle: float = 1.0):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.setblocking(False)
    await asyncio.get_running_loop().sock_sendall(s, data)
    await asyncio.sleep(settle)  # let the server answer what it will
    return s


async def test_pipelined_answers_wait_for_a_client_that_does_not_read(tmp_path):
    """The fast path stops answering while the transport's write buffer is over its high-water
    mark, as aiohttp does; a hand-off in that state tells aiohttp writing is paused."""
    loop = asyncio.get_running_loop()
    errors = []
    loop.set_exception_handler(lambda _, ctx: errors.append(ctx))
    p = await open_pair(tmp_path)
    try:
        fast = get("/" + tile_path(0, 0)) * 1000  # ~8 MB of answers: more than the kernel's buffers
        s = await _send_without_reading(p.fast, fast + get("/" + tile_path(0, 0), "X-Anything: 1") * 300 + CLOSE)
        assert _fast_conn_buffer(p) < 1_000_000  # without flow control: ~8 MB
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)  # now read it all, quickly
        got = b""
        while chunk := await asyncio.wait_for(loop.sock_recv(s, 1 << 20), 10):
            got += chunk
        s.close()
        assert got.count(b"HTTP/1.1 200 OK") == 1301 and not errors  # every answer, then aiohttp's close
    finally:
        loop.set_exception_handler(None)
        await p.runner.cleanup()
        await p.svc.close()


async def test_the_idle_timer_drops_a_client_that_stopped_reading(tmp_path):
    p = await open_pair(tmp_path, header_timeout=1.0)
    try:
        site = next(s for s in p.runner.sites if getattr(s, "_fast", None))
        s = await _send_without_reading(p.fast, get("/" + tile_path(0, 0)) * 2000, settle=0.1)
        conn = next(iter(site._fast_conns))
        transport = conn._transport
        deadline = time.monotonic() + 60
        while (transport.get_write_buffer_size() or conn in site._fast_conns) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        s.close()
        assert transport.get_write_buffer_size() == 0 and conn not in site._fast_conns
    finally:
        await p.runner.cleanup()
        await p.svc.close()


async def test_requests_the_fast_path_declines_are_charged_to_the_rate_limit_once(tmp_path):
    for burst, requests in ((2, [get("/tile/entries/000")] * 2), (1, [get("/" + tile_path(0, 9))])):
        codes = {}
        for name in ("fast", "plain"):
            p = await open_pair(tmp_path / f"{name}{burst}", rate_limit_read=0.001, rate_limit_read_burst=burst)
            try:
                port = p.fast if name == "fast" else p.plain
                codes[name] = [int(r[0].split(b" ")[1]) for r in responses(await exchange(port, b"".join(requests) + CLOSE))]
            finally:
                await p.runner.cleanup()
                await p.svc.close()
        assert codes["fast"] == codes["plain"] and codes["fast"][0] in (200, 404)


async def test_shutdown_answers_appends_in_flight(tmp_path):
    p = await open_pair(tmp_path, batch_interval_ms=1000)
    size = p.svc.state.size
    reader, writer = await asyncio.open_connection("127.0.0.1", p.fast)
    writer.write(post(commitment(77)))
    await writer.drain()
    site = next(s for s in p.runner.sites if getattr(s, "_fast", None))
    deadline = time.monotonic() + 60
    while not any(c.busy is not None for c in site._fast_conns):  # read, and waiting for its batch
        assert time.monotonic() < deadline, "the append never reached the server"
        await asyncio.sleep(0.01)
    await p.runner.cleanup()  # what serve_until_signal does after draining the appender
    data = await asyncio.wait_for(reader.read(-1), 10)
    writer.close()
    await p.svc.close()
    assert data.startswith(b"HTTP/1.1 200 OK") and p.svc.state.size == size + 1
    assert json.loads(data.split(b"\r\n\r\n", 1)[1])["index"] == size


async def test_a_head_trickled_byte_by_byte_goes_to_aiohttp(pair):
    whole = get("/checkpoint", "User-Agent: " + "t" * 60) + CLOSE
    got = responses(await exchange(pair.fast, [whole[i:i + 1] for i in range(len(whole))], pause=0.002))
    assert [r[0] for r in got] == [b"HTTP/1.1 200 OK"] * 2 and got[0][2] == pair.svc.state.note.encode()
    assert pair.routes.handed_off == 1 and pair.routes.answered == 0


async def test_a_client_that_half_closes_after_its_post_still_gets_the_answer(pair):
    """shutdown(SHUT_WR) right after the request: the EOF arrives while the entry is being
    committed; the answer is written, then the connection closes. (aiohttp closes at the EOF
    and the answer is lost, though the entry is durable: here the two differ on purpose.)"""
    for port, i in ((pair.fast, 40),):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(post(commitment(i)))
        await writer.drain()
        writer.write_eof()
        got = responses(await asyncio.wait_for(reader.read(-1), 10))
        writer.close()
        assert len(got) == 1 and got[0][0] == b"HTTP/1.1 200 OK"
        assert json.loads(got[0][2])["leaf_hash"] == base64.b64encode(
            leaf_hash(canonical_entry(json.loads(commitment(i))))).decode()


async def test_long_request_lines_are_not_kept(pair):
    """Found in review: every distinct GET line was kept (up to 16,384), whatever its
    length; 8 KB junk lines could pin ~250 MB. Only lines of canonical-path length are."""
    for i in range(20):
        line = b"GET /tile/0/%s%04d HTTP/1.1" % (b"a" * 8000, i)
        await exchange(pair.fast, line + b"\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert pair.routes.handed_off >= 20
    assert all(len(k) <= 300 for k in pair.routes._lines)
    await exchange(pair.fast, get("/" + tile_path(0, 1)) + CLOSE)
    assert ("GET /" + tile_path(0, 1) + " HTTP/1.1").encode() in pair.routes._lines  # short lines are
