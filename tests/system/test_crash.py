"""Short crash-harness runs (5 kill -9 cycles each); `make crash` runs 50 on the network."""
from pathlib import Path

import pytest

from tests.crashharness import network_ok, ok, run, run_network, run_scale, scale_ok

pytestmark = pytest.mark.slow


async def test_log_crash_cycles_lose_nothing(tmp_path):
    report = await run(cycles=5, workdir=tmp_path, seed=5)
    assert report["acknowledged"] > 0 and report["checkpoints_seen"] > 0
    assert report["lost_or_moved"] == [] and report["forks"] == []
    assert report["inconsistent_checkpoints"] == [] and report["tiles_match_root"]
    assert ok(report)


async def test_network_crash_cycles(tmp_path):
    report = await run_network(cycles=5, workdir=tmp_path, seed=3)
    assert report["log_acknowledged"] > 0 and report["registry_acknowledged"] > 0
    assert report["witness_cosigned_sizes"] > 0
    assert report["lost_or_moved"] == [] and report["forks"] == [] and report["inconsistent_checkpoints"] == []
    assert report["witness_forks"] == [] and report["witness_went_backwards"] == []
    assert report["registry_missing"] == [] and report["registry_history_verified"], report["registry_verify_output"]
    assert network_ok(report)


def test_a_crash_during_the_first_start_is_a_crash_cycle_and_the_next_start_recovers(tmp_path):
    """A new log commits (signs its empty tree) while starting, so an armed crash point can
    fire before it serves: the harness counts that as a crash, not a failure to start."""
    import signal
    import urllib.request

    from tests.crashharness import DiedDuringStart, start_log

    with pytest.raises(DiedDuringStart) as died:
        start_log(tmp_path / "log", "before_commit:1")
    assert died.value.returncode == 137
    proc, url, _ = start_log(tmp_path / "log")
    try:
        with urllib.request.urlopen(url + "/checkpoint", timeout=10) as r:
            assert r.read().decode().split("\n")[1] == "0"  # the empty tree, signed on this start
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)


async def test_scale_out_crash_cycles(tmp_path_factory):
    import tempfile

    with tempfile.TemporaryDirectory(dir="/tmp") as d:  # PostgreSQL's own user must reach it
        report = await run_scale(cycles=5, workdir=Path(d), seed=7)
    assert report["acknowledged"] > 0 and report["checkpoints_seen"] > 0
    assert report["lost_or_moved"] == [] and report["forks"] == [] and report["database_forks"] == 0
    assert report["inconsistent_checkpoints"] == [] and report["bucket_verified"]
    assert scale_ok(report)
