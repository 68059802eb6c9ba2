"""The engines `make run-scale` and the tests start (tlog.cli.engines): the settings the log
relies on, and nothing left behind."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tlog.cli.engines import Postgres, Seaweed

from tests.support.waiting import until

pytestmark = pytest.mark.slow


def test_a_postgres_socket_directory_made_in_tmp_goes_when_the_server_stops_or_is_killed(tmp_path):
    """A data directory whose socket path would pass the 107-byte limit gets a short socket
    directory in /tmp: it is made once per server and removed when the server is gone."""
    deep = tmp_path / ("d" * 100)
    pg = Postgres(deep)
    for end in (pg.stop, pg.kill):
        pg.start()
        sock = pg._socket_dir()
        try:
            assert sock != pg.dir and str(sock).startswith("/tmp/oap-pgsock-")
            assert sock.joinpath(f".s.PGSQL.{pg.port}").is_socket()  # the server listens there
        finally:
            end()
        assert not sock.exists(), f"{end.__name__} left {sock}"


def test_seaweedfs_keeps_its_logs_in_its_directory_and_its_sockets_go_when_it_stops_or_is_killed(tmp_path):
    """`weed` makes a Unix socket in /tmp for each gRPC port (the path is fixed in the binary)
    and leaves it when it stops; its logs would go to /tmp too. Its logs go under its own
    directory, and its sockets are removed when it stops or is killed."""
    weed = Seaweed(tmp_path / "weed")
    for end in (weed.stop, weed.kill):
        weed.start()
        socks = [Path(f"/tmp/seaweedfs-{name}-grpc-{weed.ports[name + '.grpc']}.sock")
                 for name in ("master", "volume", "filer", "s3")]
        try:
            weed.create_bucket("b")  # it serves
            # each server makes its socket as its gRPC server starts, which on a busy machine
            # can come after the S3 gateway answers
            asyncio.run(until(lambda socks=socks: all(s.is_socket() for s in socks), 60,
                              f"the gRPC sockets {[str(s) for s in socks]}"))
            assert any(p.name.startswith("weed.") for p in (weed.dir / "logs").iterdir())
            assert not [p for p in Path("/tmp").glob(f"weed.*.{weed.proc.pid}")]
        finally:
            end()
        assert not [str(s) for s in socks if s.exists()], f"{end.__name__} left them"


def test_the_postgres_engine_is_durable_and_does_not_compress_its_wal(engines):
    """What the log's acknowledgements rest on (fsync, synchronous commit, full-page writes),
    and no WAL compression: the full-page images an append writes are mostly of the
    leaf-hash index, random keys that pglz cannot shrink, at about half of a large log's
    append CPU (benchmarks/README.md). A buffer pool of an eighth of the memory (128 MB to
    2 GB), where the index's pages stay instead of being written out on every append.
    Settings given on the command line, so they win over a postgresql.conf."""
    import os

    import psycopg

    with psycopg.connect(engines.pg.dsn, autocommit=True) as c:
        shown = {name: c.execute(f"SHOW {name}").fetchone()[0]
                 for name in ("fsync", "synchronous_commit", "full_page_writes", "wal_compression")}
        pool_mb = int(c.execute("SELECT setting::bigint * 8192 / 1048576 FROM pg_settings "
                                "WHERE name = 'shared_buffers'").fetchone()[0])
    assert shown == {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on", "wal_compression": "off"}
    memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 20
    assert pool_mb == max(128, min(2048, memory_mb // 8))


def test_a_server_with_the_machine_to_itself_gets_the_runbooks_quarter_of_memory(tmp_path):
    """The growth benchmark's server has the machine to itself: the scale-out runbook's pool,
    a quarter of the memory and not capped at 2 GB, so that a 2^24 log's leaf-hash index
    stays in it. A pool asked for is the pool given; none asked for, the shared rule."""
    import os

    from tlog.cli.engines import shared_buffers_mb

    memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 20
    assert shared_buffers_mb(dedicated=True) == max(128, memory_mb // 4)
    assert shared_buffers_mb() == max(128, min(2048, memory_mb // 8))
    assert Postgres(tmp_path, pool_mb=6144).pool_mb == 6144
    assert Postgres(tmp_path).pool_mb == shared_buffers_mb()


def test_the_seaweedfs_engine_has_large_volumes_and_a_fixed_volume_count(engines):
    """When a volume fills, the writes in flight to it wait 0.2-1 s while the master makes a
    new one (a tile write stalled a PostgreSQL append past 100 ms that way, every minute or
    so with 64 MB volumes): volumes of 1 GB, as the master reports them. Their number is
    fixed, not derived from the free disk space, so a small disk still has room for a
    volume per bucket."""
    import json
    import re
    import urllib.request

    master = f"http://127.0.0.1:{engines.weed.ports['master']}"
    with urllib.request.urlopen(master + "/", timeout=10) as r:  # the master's status page
        page = r.read().decode()
    limit = re.search(r"Volume Size Limit</th>\s*<td>(\d+)MB</td>", page)
    assert limit is not None and int(limit.group(1)) == 1024
    with urllib.request.urlopen(master + "/dir/status", timeout=10) as r:
        assert json.load(r)["Topology"]["Max"] == 1000
