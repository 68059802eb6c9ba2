"""`oap-mirror serve` and `oap-mirror follow` as real processes on 127.0.0.1: the HTTP API of
C2SP tlog-mirror, the copy served as tlog-tiles, and a real `oap-log serve` followed as it grows."""
from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess

import aiohttp
import pytest

from tlog.client.client import LogClient
from tlog.formats.entries import commitment_entry
from tlog.formats.keys import parse_vkey
from tlog.formats.mirror import add_checkpoint_body, encode_header, encode_package, package_ranges, parse_mirror_info
from tlog.formats.note import open_note
from tlog.formats.tiles import encode_entry_bundle, entries_for_size, tiles_for_size
from tlog.merkle.subtrees import subtree_consistency_proof

from tests.support.mirror import (
    BIN,
    EntryLog,
    check_cosigned,
    cosigner,
    cosigner_key,
    http,
    info_row,
    metric,
    mirror_service,
    origin_hash,
    served_root,
)
from tests.support.staticlog import LazyEntries, StaticLog

pytestmark = pytest.mark.slow


OCTETS = {"Content-Type": "application/octet-stream"}
GZIP = {**OCTETS, "Content-Encoding": "gzip"}




def follow(log_url: str, mirror_url: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "oap-mirror"), "follow", log_url, "--mirror", mirror_url, "--once", *extra],
                          capture_output=True, text=True, timeout=300)


async def _grow(url: str, n: int) -> dict:
    async with LogClient(url) as c:
        for i in range(0, n, 250):
            await c.anchor_many([commitment_entry(os.urandom(32)) for _ in range(min(250, n - i))])
        return await c.info()


def test_the_mirror_follows_a_real_log_and_serves_the_same_tiles(server, started, tmp_path):
    log = server()
    origin = log.vkey.split("+")[0]
    m = started(mirror_service(tmp_path / "m", [(origin, log.vkey, log.url)]))
    prefix = f"{m.url}/{origin_hash(origin)}"
    assert http(prefix + "/checkpoint")[0] == 404  # nothing mirrored yet
    for grow in (300, 500, 1):  # crosses the 256 and 512 bundle boundaries
        size = asyncio.run(_grow(log.url, grow))["tree_size"]
        out = follow(log.url, m.url, "--log-key", log.vkey, "--mirror-key", cosigner().vkey)
        assert out.returncode == 0 and f"cosigned size {size}" in out.stdout, out.stdout + out.stderr
        status, headers, note = http(prefix + "/checkpoint")
        assert status == 200 and headers["Content-Type"].startswith("text/plain")
        open_note(note, [parse_vkey(log.vkey)])  # the log's signature, retained
        open_note(note, [cosigner_key()])  # and the mirror's cosignature
        assert note.decode().split("\n")[1] == str(size)
        for t in tiles_for_size(size) + entries_for_size(size):  # the copy is the log, byte for byte
            assert http(f"{prefix}/{t.path}")[2] == http(f"{log.url}/{t.path}")[2], t.path
    text = http(m.url + "/metrics")[2].decode()
    assert metric(text, "oap_mirror_entries_stored_total", origin) == size
    assert metric(text, "oap_mirror_entries_received_total", origin) == size  # nothing sent twice
    assert metric(text, "oap_mirror_size", origin) == size
    info = json.loads(http(m.url + "/v1/info")[2])
    assert info["kind"] == "mirror" and info["verifier_key"] == cosigner().vkey
    (row,) = info["logs"]
    assert row["origin"] == origin and row["size"] == row["next_entry"] == row["pending_size"] == size
    assert row["monitoring_prefix"] == prefix and row["minimum_index"] == 0


def test_the_http_api_speaks_tlog_mirror(started, tmp_path):
    lg = EntryLog().grow(600)
    m = started(mirror_service(tmp_path / "m", [(lg.origin, lg.vkey, "")]))
    prefix = f"{m.url}/{origin_hash(lg.origin)}"
    status, headers, body = http(m.url + "/add-checkpoint", lg.add_checkpoint(0, 300))
    assert (status, body) == (200, b"")  # the pending checkpoint moved; nothing signed
    status, headers, body = http(m.url + "/add-checkpoint", lg.add_checkpoint(0, 600))
    assert (status, headers["Content-Type"], body) == (409, "text/x.tlog.size", b"300\n")
    assert http(m.url + "/add-checkpoint", lg.add_checkpoint(300, 600))[0] == 200
    status, headers, _ = http(m.url + "/add-entries", lg.body(0, 600), {"Content-Type": "text/plain"})
    assert status == 415
    status, headers, body = http(m.url + "/add-entries", lg.body(0, 600, origin="nobody.example/log"), OCTETS)
    assert status == 404 and "gzip" in headers["Accept-Encoding"]
    status, headers, body = http(m.url + "/add-entries", lg.body(256, 600), OCTETS)  # past the next entry
    assert (status, headers["Content-Type"]) == (409, "text/x.tlog.mirror-info")
    info = parse_mirror_info(body)
    assert (info.size, info.next_entry) == (600, 0) and "gzip" in headers["Accept-Encoding"]
    status, headers, body = http(m.url + "/add-entries", gzip.compress(lg.body(0, 600, packages=1)), GZIP)
    assert (status, parse_mirror_info(body).next_entry) == (202, 256)
    status, headers, body = http(m.url + "/add-entries", lg.body(256, 600), OCTETS)  # identity works too
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    open_note(lg.checkpoint(600).encode() + body, [cosigner_key()])
    # entry bundles: gzip when the client takes it (tlog-tiles), as stored otherwise
    bundle = encode_entry_bundle(lg.entries[256:512])
    status, headers, raw = http(prefix + "/tile/entries/001", headers={"Accept-Encoding": "gzip"})
    assert status == 200 and headers["Content-Encoding"] == "gzip" and gzip.decompress(raw) == bundle
    status, headers, raw = http(prefix + "/tile/entries/001", headers={"Accept-Encoding": "identity"})
    assert status == 200 and "Content-Encoding" not in headers and raw == bundle
    assert "immutable" in headers["Cache-Control"]
    assert http(prefix + "/tile/entries/002.p/88")[0] == 200
    assert http(prefix + "/tile/entries/002.p/89")[0] == 404  # not stored
    assert http(prefix + "/tile/0/x001")[0] == 400  # not a tile path
    assert http(f"{m.url}/{'0' * 64}/checkpoint")[0] == 404  # not a log of this mirror
    assert http(prefix + "/tile/0/002.p/88")[2] == b"".join(lg.levels[0][512:600])


def test_pruning_denies_reads_below_the_minimum_index(started, tmp_path):
    lg = EntryLog().grow(600)
    m = started(mirror_service(tmp_path / "m", [], settings=(
        f'\n[[mirror.logs]]\norigin = "{lg.origin}"\nvkey = "{lg.vkey}"\nminimum_index = 512\n'
        'retention_policy = "https://example.org/retention"\n')))
    prefix = f"{m.url}/{origin_hash(lg.origin)}"

    def minimum_index() -> int:
        row = info_row(m.url)
        return row["minimum_index"]

    # tlog-tiles: the minimum index MUST NOT exceed the current checkpoint's size
    assert minimum_index() == 0
    assert http(m.url + "/add-checkpoint", lg.add_checkpoint(0, 300))[0] == 200
    assert http(m.url + "/add-entries", lg.body(0, 300), OCTETS)[0] == 200
    assert minimum_index() == 300
    assert http(prefix + "/tile/entries/000")[0] == 404  # ends at 256 <= 300
    assert http(prefix + "/tile/entries/001.p/44")[0] == 200
    assert http(m.url + "/add-checkpoint", lg.add_checkpoint(300, 600))[0] == 200
    assert http(m.url + "/add-entries", lg.body(300, 600), OCTETS)[0] == 200
    assert minimum_index() == 512
    assert http(prefix + "/tile/entries/000")[0] == 404  # ends at 256 <= 512: pruned
    assert http(prefix + "/tile/entries/001")[0] == 404  # ends at 512 <= 512: pruned
    assert http(prefix + "/tile/0/001")[0] == 404
    assert http(prefix + "/tile/entries/002.p/88")[0] == 200  # entries from the minimum index on
    assert http(prefix + "/tile/1/000.p/2")[0] == 200  # ends at 65536: needed for proofs, served
    assert http(prefix + "/checkpoint")[0] == 200
    row = info_row(m.url)
    assert row["minimum_index"] == 512 and row["retention_policy"] == "https://example.org/retention"
    # with no monitoring_prefix configured, the prefix is the address the mirror listens on,
    # never the Host header a client wrote
    info = json.loads(http(m.url + "/v1/info", headers={"Host": "evil.example:1"})[2])
    assert info["monitoring_prefix"] == m.url and info["logs"][0]["monitoring_prefix"] == prefix, info


def test_cli_keygen_config_checks_and_status(tmp_path, started):
    out = subprocess.run([str(BIN / "oap-mirror"), "keygen", "--name", "m.example", "--data", str(tmp_path / "k")],
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("m.example+")
    assert (tmp_path / "k/mirror.key").stat().st_mode & 0o777 == 0o600
    assert "PRIVATE" not in out.stdout + out.stderr
    again = subprocess.run([str(BIN / "oap-mirror"), "keygen", "--name", "m.example", "--data", str(tmp_path / "k")],
                           capture_output=True, text=True)
    assert again.returncode != 0 and "refusing to overwrite" in again.stderr
    lg = EntryLog().grow(10)
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[mirror]\nname = "m.example"\n[[mirror.logs]]\norigin = "{lg.origin}"\nvkey = "{lg.vkey}"\n'
                   'minimum_index = 256\n')
    out = subprocess.run([str(BIN / "oap-mirror"), "serve", "--config", str(bad), "--data", str(tmp_path / "b")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "retention_policy" in out.stderr
    m = started(mirror_service(tmp_path / "m", [(lg.origin, lg.vkey, "")]))
    assert http(m.url + "/add-checkpoint", lg.add_checkpoint(0, 10))[0] == 200
    assert http(m.url + "/add-entries", lg.body(0, 10), OCTETS)[0] == 200
    m.stop()
    out = subprocess.run([str(BIN / "oap-mirror"), "status", "--config", str(tmp_path / "m/mirror.toml"), "--data",
                          str(tmp_path / "m"), "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"origin": lg.origin, "pending_size": 10, "next_entry": 10, "size": 10}


def test_add_checkpoint_answers_refusals_in_text(started, tmp_path):
    lg = EntryLog().grow(10)
    m = started(mirror_service(tmp_path / "m", [(lg.origin, lg.vkey, "")]))
    for body, status in ((b"old 0\n\nnot a checkpoint\n", 400), (add_checkpoint_body(0, [], lg.checkpoint(10)), 200),
                         (EntryLog(seed=bytes(32)).grow(3).add_checkpoint(0, 3), 403)):
        got, headers, text = http(m.url + "/add-checkpoint", body)
        assert got == status and headers["Content-Type"].startswith("text/plain")
        assert status == 200 or text.endswith(b"\n")


def test_add_entries_refuses_bad_uploads_in_the_protocols_text(started, tmp_path):
    """upload_end (u64 on the wire) over 2^63 - 1 can be no pending checkpoint's size: a 400 in
    tlog-mirror's text form, as any malformed header, not an overflow in storage (a 500)."""
    lg = EntryLog().grow(10)
    m = started(mirror_service(tmp_path / "m", [(lg.origin, lg.vkey, "")]))
    assert http(m.url + "/add-checkpoint", lg.add_checkpoint(0, 10))[0] == 200
    for start, end in ((0, 2**63), (0, 2**64 - 1), (2**63, 2**64 - 1)):
        status, headers, text = http(m.url + "/add-entries", encode_header(lg.origin, start, end), OCTETS)
        assert (status, headers["Content-Type"]) == (400, "text/plain; charset=utf-8"), text
        assert b"2^63" in text and text.endswith(b"\n") and "gzip" in headers["Accept-Encoding"]
    # a Content-Encoding aiohttp does not decode is 415; a gzip stream that does not decode is
    # named (it read as "the body ended inside the add-entries header")
    status, headers, text = http(m.url + "/add-entries", lg.body(0, 10), {**OCTETS, "Content-Encoding": "xyz"})
    assert (status, headers["Content-Type"]) == (415, "text/plain; charset=utf-8") and b"Content-Encoding" in text
    status, headers, text = http(m.url + "/add-entries", b"garbage, not gzip", GZIP)
    assert (status, headers["Content-Type"]) == (400, "text/plain; charset=utf-8"), text
    assert b"not valid gzip" in text and headers["Connection"] == "close"
    status, _, _ = http(m.url + "/add-entries", gzip.compress(lg.body(0, 10)), GZIP)  # the mirror still takes entries
    assert status == 200


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM (peak RSS) ... of a process, kB."""
    with open(f"/proc/{pid}/status") as f:
        return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in f) if k.startswith("Vm")}


def test_one_huge_add_entries_body_is_stored_in_bounded_memory(tmp_path, started):
    """One request of 782 packages (195 MiB, made as it is sent): the mirror takes it whole, no
    cap per request, holding one package at a time; its peak RSS grows by a fraction of it."""
    n, entry_bytes = 200_000, 1024  # 782 packages, 200 MiB, in one request
    slog = StaticLog(tmp_path / "log", LazyEntries(n, entry_bytes), origin="static.example/one-huge-body")
    m = started(mirror_service(tmp_path / "m", [(slog.origin, slog.vkey, "")]))
    assert http(m.url + "/add-checkpoint", add_checkpoint_body(0, [], slog.note(n)))[0] == 200
    pid = m.pid
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")  # the peak (VmHWM) starts again from the idle mirror's RSS
    idle = memory_kb(pid)["VmRSS"]
    sent = 0

    async def body():
        nonlocal sent
        yield encode_header(slog.origin, 0, n)
        for sub, first, stop in package_ranges(0, n):
            package = encode_package(slog.entries[first:stop], subtree_consistency_proof(sub, stop, n, slog.mth))
            sent += len(package)
            yield package

    async def upload() -> tuple[int, bytes]:
        async with aiohttp.ClientSession() as s, s.post(m.url + "/add-entries", data=body(), headers=OCTETS) as r:
            return r.status, await r.read()

    status, lines = asyncio.run(upload())
    assert status == 200, lines
    peak = memory_kb(pid)["VmHWM"]
    assert sent > n * entry_bytes
    assert peak - idle < 64 << 10, f"the mirror grew by {(peak - idle) >> 10} MiB for a {sent >> 20} MiB body"
    check_cosigned(slog.note(n), lines.decode())
    row = info_row(m.url)
    assert (row["size"], row["next_entry"]) == (n, n)
    assert served_root(f"{m.url}/{origin_hash(slog.origin)}", n) == slog.root(n)
