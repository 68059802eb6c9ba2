"""The engines `make run-scale` and the tests start (tlog.cli.engines): the settings the log
relies on, and nothing left behind."""
from __future__ import annotations

from pathlib import Path

import pytest

from tlog.cli.engines import Postgres, Seaweed

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
            assert all(s.is_socket() for s in socks), [str(s) for s in socks if not s.is_socket()]
            assert any(p.name.startswith("weed.") for p in (weed.dir / "logs").iterdir())
            assert not [p for p in Path("/tmp").glob(f"weed.*.{weed.proc.pid}")]
        finally:
            end()
        assert not [str(s) for s in socks if s.exists()], f"{end.__name__} left them"


def test_the_postgres_engine_is_durable_and_does_not_compress_its_wal(engines):
    """What the log's acknowledgements rest on (fsync, synchronous commit, full-page writes),
    and no WAL compression: the full-page images an append writes are mostly of the
    leaf-hash index, random keys that pglz cannot shrink, at about half of a large log's
    append CPU (benchmarks/README.md). Settings given on the command line, so they win over
    a postgresql.conf."""
    import psycopg

    with psycopg.connect(engines.pg.dsn, autocommit=True) as c:
        shown = {name: c.execute(f"SHOW {name}").fetchone()[0]
                 for name in ("fsync", "synchronous_commit", "full_page_writes", "wal_compression")}
    assert shown == {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on", "wal_compression": "off"}
