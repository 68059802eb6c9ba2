"""Every route that appends entries runs one write pipeline (tlog.server.pipeline), in the
order docs/architecture.md §3.3 states: the first refusal wins, and it is the same refusal
whichever route and path a request takes.

A log is served on two ports from one app, as in tests/service/test_fastpath.py: one with
the log's fast routes (a small POST /v1/entries is answered there, with the body in hand),
one plain aiohttp site. Each request is sent to four routes: a single entry on the fast
path, a single entry in aiohttp, a single entry over 4 KiB (decoded on the CPU pool) and a
batch of one entry, and each must get the same status and App. B error code.
"""
from __future__ import annotations

import json

import aiohttp
import pytest

from tlog.formats.entries import commitment_entry
from tlog.formats.hashing import leaf_hash
from tlog.http.bodies import SMALL_BODY
from tlog.http.fastpath import FAST_ROUTES_KEY, FastSite
from tlog.http.limits import new_token
from tlog.http.serve import start_app
from tlog.server.api import build_app
from tlog.server.config import LogConfig
from tlog.server.service import LogService

PAD = "a" * (SMALL_BODY + 100)  # makes a body "large": decoded and canonicalized on the CPU pool


class Log:
    """One log served on a fast-path port and a plain aiohttp port."""

    def __init__(self, svc: LogService, runner, fast: int, plain: int) -> None:
        self.svc, self.runner, self.fast, self.plain = svc, runner, fast, plain
        self.routes = runner.app[FAST_ROUTES_KEY]


@pytest.fixture
async def serve(tmp_path):
    opened: list[Log] = []

    async def open_log(**cfg) -> Log:
        settings = dict(data_dir=tmp_path / f"data{len(opened)}", port=0, batch_interval_ms=2, max_entry_body=80_000)
        settings.update(cfg)
        svc = await LogService.open(LogConfig(**settings))
        runner = await start_app(build_app(svc), "127.0.0.1", 0)
        plain = FastSite(runner, "127.0.0.1", 0, routes=None, timeout=15.0)
        await plain.start()
        ports = [a[1] for a in runner.addresses]
        opened.append(Log(svc, runner, ports[0], ports[1]))
        return opened[-1]

    yield open_log
    for lg in opened:
        await lg.runner.cleanup()
        await lg.svc.close()


def routes(log: Log, small: bytes, large: bytes, batch: bytes) -> list[tuple[str, str, bytes]]:
    """(route, URL, body) for the four ways a write reaches the pipeline."""
    fast, plain = f"http://127.0.0.1:{log.fast}", f"http://127.0.0.1:{log.plain}"
    assert len(small) <= SMALL_BODY < len(large) <= log.svc.config.max_entry_body
    return [("single, fast path", fast + "/v1/entries", small),
            ("single, aiohttp", plain + "/v1/entries", small),
            ("large single, fast path", fast + "/v1/entries", large),
            ("batch", fast + "/v1/entries:batch", batch)]


async def answers(log: Log, cases: list[tuple[str, str, bytes]], ctype: str = "application/json",
                  headers: dict | None = None) -> dict[str, tuple[int, str, dict]]:
    """route -> (status, error code, headers) of each case, in order; checks that the fast
    path answered exactly the requests sent to its port for /v1/entries."""
    out = {}
    async with aiohttp.ClientSession() as s:
        for name, url, body in cases:
            before = log.routes.answered
            async with s.post(url, data=body, headers={"Content-Type": ctype, **(headers or {})}) as r:
                doc = json.loads(await r.read())
                out[name] = (r.status, doc.get("error", ""), dict(r.headers))
            fast = url.endswith("/v1/entries") and f":{log.fast}/" in url
            assert log.routes.answered == before + fast, f"{name}: answered by the wrong path"
    return out


async def test_over_the_rate_limit_wins_over_every_later_refusal_on_every_route(serve):
    """Step 1 (a write token, before the body is read) comes before the media type, the
    decode and everything after: a malformed body is counted, and once the client's
    bucket is empty every route answers 429 whatever is wrong with the request."""
    log = await serve(rate_limit_write=0.001, rate_limit_write_burst=1, max_batch_entries=1)
    malformed = routes(log, b'{"type": "commitment", "commitment": ',
                       b'{"pad": "' + PAD.encode() + b'", "type": ',
                       b'{"entries": [{"type": "commitment", ')
    first = await answers(log, malformed[:1])
    assert first["single, fast path"][:2] == (400, "invalid_input")  # took the only token
    for ctype in ("application/json", "text/plain"):  # malformed, and of a refused media type (415)
        got = await answers(log, malformed, ctype)
        for name, (status, code, headers) in got.items():
            assert (status, code) == (429, "rate_limited"), (ctype, name, status, code)
            assert int(headers["Retry-After"]) >= 1, name
    valid = commitment_entry(leaf_hash(b"ok"))
    got = await answers(log, routes(log, json.dumps(valid).encode(), json.dumps({**valid, "pad": PAD}).encode(),
                                    json.dumps({"entries": [valid]}).encode()))
    assert {a[:2] for a in got.values()} == {(429, "rate_limited")}
    assert log.svc.state.size == 0


async def test_authorization_comes_after_decode_and_before_canonicalization_on_every_route(serve, tmp_path):
    """Where commitments need a bearer token: a request without one whose body does not
    parse is refused by the decode (400, step 4) on every route; one whose body parses
    but is not a valid entry is refused by the authorization (401, step 5) on every route,
    before canonicalization (step 7) could call it invalid."""
    tok, digest = new_token()
    (tmp_path / "tokens").write_text(f"{digest} commitment\n")
    log = await serve(auth_required_for=("commitment",), tokens_file=tmp_path / "tokens")
    malformed = routes(log, b'{"type": "commitment", "commitment": ',
                       b'{"pad": "' + PAD.encode() + b'", "type": ',
                       b'{"entries": [{"type": "commitment", ')
    got = await answers(log, malformed)
    assert {name: a[:2] for name, a in got.items()} == {name: (400, "invalid_input") for name in got}

    bad = {"type": "commitment", "commitment": "sha256:zz"}  # parses; canonical_entry refuses it
    not_canonical = routes(log, json.dumps(bad).encode(), json.dumps({**bad, "pad": PAD}).encode(),
                           json.dumps({"entries": [bad]}).encode())
    got = await answers(log, not_canonical)
    assert {name: a[:2] for name, a in got.items()} == {name: (401, "auth_required") for name in got}
    got = await answers(log, not_canonical, headers={"Authorization": "Bearer not-a-token"})
    assert {name: a[:2] for name, a in got.items()} == {name: (401, "auth_required") for name in got}
    # With the token, the same requests reach canonicalization, and it refuses them alike.
    got = await answers(log, not_canonical, headers={"Authorization": f"Bearer {tok}"})
    assert {name: a[:2] for name, a in got.items()} == {name: (400, "invalid_input") for name in got}
    assert log.svc.state.size == 0


async def test_a_token_required_for_every_write_is_checked_before_the_body(serve, tmp_path):
    """Where every write needs a token, a request without a valid one is refused at
    admission (401, step 1), before its media type or body is looked at, on every route."""
    _, digest = new_token()
    (tmp_path / "tokens").write_text(f"{digest} *\n")
    log = await serve(auth_required_for=("*",), tokens_file=tmp_path / "tokens")
    malformed = routes(log, b'{"type": "commitment", "commitment": ',
                       b'{"pad": "' + PAD.encode() + b'", "type": ',
                       b'{"entries": [{"type": "commitment", ')
    for ctype in ("application/json", "text/plain"):
        got = await answers(log, malformed, ctype)
        assert {name: a[:2] for name, a in got.items()} == {name: (401, "auth_required") for name in got}, ctype
