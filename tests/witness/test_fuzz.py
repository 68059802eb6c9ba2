"""Property test: malformed add-checkpoint bodies get a 4xx, never a 5xx.

Bodies are a valid request for a configured log, broken in one generated way:
CRLF line endings, too many proof lines, oversize, bad base64, a key the
witness does not know, non-UTF-8 bytes, truncation, or plain random bytes.
They go to the core (many examples) and to a real `oap-witness serve`
process over HTTP on 127.0.0.1.
"""
from __future__ import annotations

import asyncio
import http.client
from urllib.parse import urlparse

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tlog.errors import OAPError
from tlog.formats.encoding import b64enc
from tlog.formats.keys import CosignatureSigner
from tlog.formats.mirror import add_checkpoint_body
from witness.config import WitnessedLog
from witness.core import MAX_BODY, Witness
from witness.state import WitnessState

from tests.support.witness import MemLog, WitnessProcess, write_config

LOG = MemLog().grow(12)
STRANGER = MemLog(seed=bytes([5]) * 32).grow(12)  # same origin, a key the witness does not trust
VALID = LOG.body(0, 12)


def _crlf(body: bytes, which: int) -> bytes:
    idx = [i for i, b in enumerate(body) if b == 0x0A]
    i = idx[which % len(idx)]
    return body[:i] + b"\r" + body[i:]


def _proof_lines(extra: int) -> bytes:
    lines = [bytes([i % 256]) * 32 for i in range(64 + extra)]
    return add_checkpoint_body(0, lines, LOG.checkpoint(12))


def _bad_b64(body: bytes, pos: int, ch: bytes) -> bytes:
    line = b64enc(LOG.proof(3, 12)[0]).encode()
    broken = line[: pos % 43] + ch + line[pos % 43 + 1 :]
    return add_checkpoint_body(3, [], LOG.checkpoint(12)).replace(b"old 3\n", b"old 3\n" + broken + b"\n")


def _non_utf8(body: bytes, pos: int, junk: bytes) -> bytes:
    i = pos % (len(body) + 1)
    return body[:i] + junk + body[i:]


def _truncate(body: bytes, pos: int) -> bytes:
    return body[: pos % len(body)]


malformed = st.one_of(
    st.integers(0, 200).map(lambda w: _crlf(VALID, w)),
    st.integers(0, 40).map(_proof_lines),
    st.integers(1, 4096).map(lambda n: VALID + b"A" * (MAX_BODY + n - len(VALID))),
    st.tuples(st.integers(0, 42), st.sampled_from([b"!", b"-", b"_", b" ", b"*", b"\x00", b"\xc3"])).map(
        lambda a: _bad_b64(VALID, *a)),
    st.sampled_from([STRANGER.body(0, 12), STRANGER.body(0, 5)]),
    st.tuples(st.integers(0, 5000), st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xfe\xff", b"\x80"])).map(
        lambda a: _non_utf8(VALID, *a)),
    st.integers(0, 10_000).map(lambda p: _truncate(VALID, p)),
    st.binary(max_size=300),
    st.text(max_size=300).map(lambda t: ("old 0\n\n" + t).encode()),
)


@pytest.fixture(scope="module")
def core_witness(tmp_path_factory):
    st_ = WitnessState(tmp_path_factory.mktemp("wfuzz") / "w.db")
    w = Witness(CosignatureSigner("w.example", bytes(32)), [WitnessedLog(LOG.origin, LOG.vkey)], st_)
    yield w
    st_.close()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(body=malformed)
def test_core_malformed_bodies_are_4xx(core_witness, body):
    with pytest.raises(OAPError) as e:
        asyncio.run(core_witness.submit(body))
    assert 400 <= e.value.status < 500, (e.value.status, e.value.message)
    assert core_witness.state.get_sync(LOG.origin) is None  # nothing was ever cosigned


@pytest.fixture(scope="module")
def live_witness(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wfuzzlive")
    cfg = write_config(tmp / "w.toml", tmp / "data", [WitnessedLog(LOG.origin, LOG.vkey)])
    p = WitnessProcess(cfg).start()
    u = urlparse(p.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    yield conn, p
    conn.close()
    p.kill()


def _post(conn: http.client.HTTPConnection, body: bytes) -> tuple[int, bytes]:
    conn.request("POST", "/add-checkpoint", body=body)
    resp = conn.getresponse()
    data = resp.read()
    if resp.getheader("Connection", "").lower() == "close":
        conn.close()
    return resp.status, data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(body=malformed)
def test_live_server_malformed_bodies_are_4xx(live_witness, body):
    conn, _ = live_witness
    status, data = _post(conn, body)
    assert 400 <= status < 500, (status, data[:200])


def test_live_server_still_cosigns_after_the_fuzzing(live_witness):
    conn, _ = live_witness
    status, data = _post(conn, VALID)
    assert status == 200 and data.startswith("— w.test ".encode())
