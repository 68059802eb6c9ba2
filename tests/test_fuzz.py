"""A short HTTP fuzz run against a real log process (make fuzz sends 10,000+ per service)."""
import pytest

from .httpfuzz import fuzz, log_endpoints, log_valid_traffic

pytestmark = pytest.mark.slow


async def test_log_survives_hostile_http(server):
    srv = server("--rate-limit-write", "0", "--rate-limit-read", "0")
    rep = await fuzz(srv.url, log_endpoints(), requests=1500, pid=srv.proc.pid,
                     valid=log_valid_traffic(srv.url), seed=11, slow_fraction=0.005)
    assert rep.sent == 1500
    assert rep.server_errors == [], rep.server_errors[:5]
    assert srv.proc.poll() is None, "the server died"
    assert rep.valid_ok > 0 and rep.valid_failed == []
    assert sum(n for s, n in rep.statuses.items() if 400 <= s < 500) > 500
    assert rep.rss_peak_kb - rep.rss_start_kb < 300_000, "memory grew without bound"
