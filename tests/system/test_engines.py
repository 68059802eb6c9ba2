"""The engines `make run-scale` and the tests start (tlog.cli.engines) leave nothing behind."""
from __future__ import annotations

import pytest

from tlog.cli.engines import Postgres

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
