"""Short crash harness run (5 kill -9 cycles); `make crash` runs 50."""
import pytest

from .crashharness import ok, run

pytestmark = pytest.mark.slow


async def test_crash_cycles_lose_nothing(tmp_path):
    report = await run(cycles=5, workdir=tmp_path, seed=5)
    assert report["acknowledged"] > 0 and report["checkpoints_seen"] > 0
    assert report["lost_or_moved"] == [] and report["forks"] == []
    assert report["inconsistent_checkpoints"] == [] and report["tiles_match_root"]
    assert ok(report)
