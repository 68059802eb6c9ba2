"""Witness networks: the logs/v0 list format (positive and negative cases, a real published
list), and a witness provisioning its logs from a file and from a URL served by a real
aiohttp server on 127.0.0.1, refreshed, with qpd, key pins, and configuration logs winning."""
from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import given, settings
from hypothesis import strategies as st

from tlog.errors import ConfigError, FormatError
from tlog.formats.keys import CosignatureSigner, MLDSACosigner
from tlog.formats.loglist import parse_log_list
from witness.config import WitnessConfig, WitnessedLog, check_list_source

from tests.support.waiting import until
from tests.support.witness import MemLog, post, running_witness, witness_config

REAL_LIST = Path(__file__).parent / "testdata" / "witness-network-testing.list"
A = MemLog("a.example/log", bytes([1]) * 32).grow(8)
B = MemLog("b.example/log", bytes([2]) * 32).grow(8)
C = MemLog("c.example/log", bytes([3]) * 32).grow(8)
C2 = MemLog("c.example/log", bytes([4]) * 32).grow(8)  # the same origin under another key


def entry(log: MemLog, qpd: int = 86400, origin: bool = False) -> str:
    o = f"origin {log.origin}\n" if origin else ""
    return f"vkey {log.vkey}\n{o}qpd {qpd}\ncontact ops@{log.origin.split('/')[0]}\n"


def listing(*entries: str) -> str:
    return "# a test list\n# Revision: 1\nlogs/v0\n\n" + "\n".join(entries)


# --- the format -------------------------------------------------------------------------


def test_a_real_published_list_parses():
    lst = parse_log_list(REAL_LIST.read_bytes())
    assert len(lst.logs) == 9 and not lst.skipped
    first = lst.logs[0]
    assert first.origin == "arche2025h1.staging.ct.transparency.dev" and first.qpd == 86400
    assert first.contact == "google-ct-logs@googlegroups.com"
    sigsum = [x for x in lst.logs if x.origin.startswith("sigsum.org/v1/tree/")]
    assert sigsum and all(x.qpd == 8640 for x in sigsum)
    assert any("|" in x.contact for x in lst.logs)  # free text kept whole


def test_the_format_documents_example_shape():
    text = ("#\n# List: 10qps-100klogs\n#\nlogs/v0\n\n# 1st\n" + entry(A)
            + f"\n  # 2nd, with an origin line and surrounding spaces\n  vkey {B.vkey}  \n"
              "origin something-not-equal-to-vkey-keyname\nqpd 24\ncontact sysadmin (at) bar.org\n")
    lst = parse_log_list(text)
    assert [(x.origin, x.qpd) for x in lst.logs] == [(A.origin, 86400), ("something-not-equal-to-vkey-keyname", 24)]
    assert lst.logs[1].contact == "sysadmin (at) bar.org"
    assert parse_log_list("logs/v0").logs == () and parse_log_list("# nothing yet\nlogs/v0\n").logs == ()


def test_keys_a_log_may_use_and_skipped_types():
    pq = MLDSACosigner("pq.example/log", bytes(32))  # an ML-DSA-44 log key (as Sunlight issues)
    ed04 = CosignatureSigner("ed04.example/log", bytes(32))  # a cosigner key: not a log key
    lst = parse_log_list(listing(f"vkey {pq.vkey}\nqpd 1\ncontact x\n", f"vkey {ed04.vkey}\nqpd 1\ncontact x\n",
                                 entry(A)))
    assert [x.origin for x in lst.logs] == ["pq.example/log", A.origin]
    assert len(lst.skipped) == 1 and "0x04" in lst.skipped[0][1]


def test_keywords_of_a_later_format_revision_are_ignored():
    """As the witness network's validator (cmd/validate) does: a keyword added to the format
    later must not make older witnesses drop the whole list. Lines end at "\\n" only."""
    lst = parse_log_list(listing(f"vkey {A.vkey}\nbastion none\nqpd 7\nfuture-key x y\ncontact a\u2028b\n",
                                 "retired yes\n", entry(C)))
    assert [(x.origin, x.qpd, x.contact) for x in lst.logs] == [(A.origin, 7, "a\u2028b"), (C.origin, 86400, "ops@c.example")]


@pytest.mark.parametrize(("text", "why"), [
    (entry(A), "header"),
    ("logs/v1\n" + entry(A), "header"),
    ("logs/v0\nlogs/v0\n" + entry(A), "second 'logs/v0' header"),
    (listing(f"qpd 1\nvkey {A.vkey}\ncontact x\n"), "before the vkey"),
    (listing(f"vkey {A.vkey}\nqpd 1\norigin x\ncontact x\n"), "out of order"),
    (listing(f"vkey {A.vkey}\ncontact x\nqpd 1\n"), "out of order"),
    (listing(f"vkey {A.vkey}\nqpd 1\n"), "no contact"),
    (listing(f"vkey {A.vkey}\ncontact x\n"), "no qpd"),
    (listing(f"vkey {A.vkey}\nqpd 1\ncontact x\nqpd 2\n"), "out of order"),
    (listing(f"vkey {A.vkey}\nqpd 0\ncontact x\n"), "qpd"),
    (listing(f"vkey {A.vkey}\nqpd 2147483648\ncontact x\n"), "qpd"),
    (listing(f"vkey {A.vkey}\nqpd 012\ncontact x\n"), "qpd"),
    (listing(f"vkey {A.vkey}\nqpd 1.5\ncontact x\n"), "qpd"),
    (listing(f"vkey {A.vkey}\nqpd toast\ncontact x\n"), "qpd"),
    (listing(f"vkey {A.vkey}\nqpd\ncontact x\n"), "needs a value"),
    (listing("vkey BANANAS\nqpd 1\ncontact x\n"), "vkey"),
    (listing(f"vkey {A.vkey[:-4]}AAAA\nqpd 1\ncontact x\n"), "vkey"),
    (listing(entry(A), entry(A)), "listed twice"),
    (listing(entry(C), entry(C2)), "listed twice"),
    (listing(f"vkey {A.vkey}\norigin {'o' * 256}\nqpd 1\ncontact x\n"), "255"),
    (listing(f"vkey {A.vkey}\nqpd 1\ncontact a\x01b\n"), "control"),
    (b"logs/v0\n\xff\n", "UTF-8"),
    (b"logs/v0\n" + b"#" * (16 << 20), "larger"),
])
def test_malformed_lists_are_refused_whole(text, why):
    with pytest.raises(FormatError, match=why):
        parse_log_list(text)


def test_list_sources():
    for ok in ("/etc/oap/log-list.1", "lists/testing", "https://witness-network.example/log-list.1",
               "http://127.0.0.1:8000/l", "http://[::1]:9/l", "http://localhost/l"):
        check_list_source(ok)
    for bad in ("http://witness-network.example/log-list.1", "ftp://x/y", "https://", "", "http://10.0.0.1/l"):
        with pytest.raises(ConfigError):
            check_list_source(bad)
    with pytest.raises(ConfigError):
        WitnessConfig(log_lists=("http://example.org/list",)).validate()


# --- provisioning ---------------------------------------------------------------------------


class ListServer:
    """A real aiohttp server on 127.0.0.1 serving a log list that the test changes."""

    def __init__(self) -> None:
        self.body = ""
        self.status = 200
        self.hits = 0
        app = web.Application()
        app.router.add_get("/log-list.1", self.handle)
        self.server = TestServer(app, host="127.0.0.1", port=0)

    async def handle(self, request: web.Request) -> web.Response:
        self.hits += 1
        return web.Response(text=self.body, status=self.status)

    async def __aenter__(self) -> ListServer:
        await self.server.start_server()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.server.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}/log-list.1"


async def info(s, url) -> dict:
    async with s.get(url + "/v1/info") as r:
        assert r.status == 200
        return await r.json()


async def test_provisioning_from_a_file_with_its_qpd(tmp_path):
    path = tmp_path / "log-list.1"
    path.write_text(listing(entry(A, qpd=2), entry(B)))
    cfg = witness_config(tmp_path / "w", [], log_lists=(str(path),), log_list_refresh=3600)
    async with running_witness(cfg) as (_svc, url, s):
        # the list is read at start, before any request
        got = await info(s, url)
        assert {x["origin"]: x["qpd"] for x in got["logs"]} == {A.origin: 2, B.origin: 86400}
        assert got["log_lists"][0]["source"] == str(path) and got["log_lists"][0]["logs"] == 2
        assert (await post(s, url, A.body(0, 1)))[0] == 200
        assert (await post(s, url, A.body(1, 2)))[0] == 200
        assert (await post(s, url, A.body(2, 3)))[0] == 429  # qpd 2 from the list
        assert (await post(s, url, B.body(0, 3)))[0] == 200
        assert (await post(s, url, C.body(0, 3)))[0] == 404  # not listed


async def test_provisioning_from_a_url_refreshed_and_fail_safe(tmp_path):
    async with ListServer() as lists:
        lists.body = listing(entry(A))
        cfg = witness_config(tmp_path / "w", [WitnessedLog(C.origin, C.vkey)], log_lists=(lists.url,),
                             log_list_refresh=1)
        async with running_witness(cfg) as (_svc, url, s):
            async def origins():
                return {x["origin"] for x in (await info(s, url))["logs"]}

            await until(lambda: _has(origins, {A.origin, C.origin}), 30, "A from the list, C from the config")
            assert (await post(s, url, A.body(0, 2)))[0] == 200

            # the list changes: A leaves, B arrives; C listed with another key: the config wins
            lists.body = listing(entry(B), entry(C2))
            await until(lambda: _is(origins, {B.origin, C.origin}), 30, "the refreshed list")
            assert (await post(s, url, A.body(2, 3)))[0] == 404  # no longer followed...
            async with s.get(f"{url}/{_path(A.origin)}/checkpoint") as r:
                assert r.status == 200  # ...but its last cosigned checkpoint is still served
            assert (await post(s, url, B.body(0, 2)))[0] == 200
            assert (await post(s, url, C.body(0, 2)))[0] == 200  # the configured key
            assert (await post(s, url, C2.body(0, 3)))[0] == 403  # the list's key: not trusted
            conflicts = (await info(s, url))["log_lists"][0]["conflicts"]
            assert any(C.origin in c and "configuration" in c for c in conflicts)

            # the server fails, then serves garbage: the last good list stays in force
            hits = lists.hits
            lists.status = 500
            await until(lambda: lists.hits > hits + 1, 30, "a refresh against the failing server")
            got = await info(s, url)
            assert "HTTP 500" in got["log_lists"][0]["error"] and B.origin in {x["origin"] for x in got["logs"]}
            lists.status, lists.body, hits = 200, "not a list\n", lists.hits
            await until(lambda: lists.hits > hits + 1, 30, "a refresh of the garbage list")
            got = await info(s, url)
            assert "header" in got["log_lists"][0]["error"] and B.origin in {x["origin"] for x in got["logs"]}
            async with s.get(url + "/metrics") as r:
                metrics = await r.text()
            failures = [ln for ln in metrics.splitlines()
                        if ln.startswith(f'oap_witness_log_list_failures_total{{list="{lists.url}"}}')]
            assert failures and float(failures[0].split()[-1]) >= 2
            assert "oap_witness_logs_followed 2.0" in metrics  # B from the list, C configured

            # B's key swapped in the list: refused, B keeps its pinned key
            B2 = MemLog(B.origin, bytes([9]) * 32).grow(8)
            lists.body, hits = listing(entry(B2)), lists.hits
            await until(lambda: lists.hits > hits + 1, 30, "the list with a swapped key")
            conflicts = (await info(s, url))["log_lists"][0]["conflicts"]
            assert any("pinned" in c for c in conflicts)
            assert (await post(s, url, B2.body(0, 4)))[0] == 403
            assert (await post(s, url, B.body(2, 4)))[0] == 200

    # restart with the list server gone: the last good copy (B, pinned key) is still followed
    async with running_witness(cfg) as (_svc, url, s):
        assert (await post(s, url, B.body(4, 5)))[0] == 200
        got = await info(s, url)
        assert B.origin in {x["origin"] for x in got["logs"]}


def _path(origin: str) -> str:
    from witness.core import origin_path
    return origin_path(origin)


async def _has(origins, want: set[str]) -> bool:
    return want <= await origins()


async def _is(origins, want: set[str]) -> bool:
    return want == await origins()


# --- hostile input: only FormatError, whatever the bytes -------------------------------------


_LINES = st.sampled_from(["logs/v0", f"vkey {A.vkey}", f"vkey {B.vkey}", "vkey x", "origin o", "origin",
                          "qpd 1", "qpd 0", "qpd 99999999999", "contact c", "contact", "# c", "", "  ", "bastion b",
                          "\x00", "vkey " + A.vkey + " extra"])


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINES, max_size=12) | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_any_list_text_parses_or_raises_format_error(lines):
    text = "\n".join(lines) if isinstance(lines, list) else lines
    try:
        lst = parse_log_list(text)
    except FormatError:
        return
    origins = [x.origin for x in lst.logs]
    assert len(origins) == len(set(origins)) and all(1 <= x.qpd < 2**31 for x in lst.logs)
