"""Short HTTP fuzz runs against real log, witness and registry processes
(`make fuzz` sends 10,000 per service)."""
import pytest

from tests.httpfuzz import fuzz, fuzz_all, log_endpoints, log_valid_traffic, passed

pytestmark = pytest.mark.slow


async def test_log_survives_hostile_http(server):
    srv = server("--rate-limit-write", "0", "--rate-limit-read", "0")
    rep = await fuzz(srv.url, log_endpoints(), requests=800, pid=srv.proc.pid,
                     valid=log_valid_traffic(srv.url), seed=11, slow_fraction=0.005)
    assert rep.sent == 800
    assert rep.server_errors == [], rep.server_errors[:5]
    assert srv.proc.poll() is None, "the server died"
    assert rep.valid_ok > 0 and rep.valid_failed == []
    assert sum(n for s, n in rep.statuses.items() if 400 <= s < 500) > 250
    assert rep.rss_peak_kb - rep.rss_start_kb < 300_000, "memory grew without bound"


async def test_every_service_survives_hostile_http(tmp_path):
    report = await fuzz_all(tmp_path, requests=300, seed=7)
    assert set(report) == {"log", "log+read-worker", "witness", "registry"}
    for name, r in report.items():
        assert r["sent"] == 300, name
        assert r["server_errors"] == [], (name, r["server_errors"])
        assert r["alive"] and r["valid_ok"] > 0 and r["valid_failed"] == [], (name, r)
        assert sum(n for s, n in r["statuses"].items() if 400 <= s < 500) > 100, (name, r["statuses"])
    assert passed(report)
