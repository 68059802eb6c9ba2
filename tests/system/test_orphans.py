"""Nothing a test starts outlives the test run: a stand-in for pytest starts servers with
the test helpers (the three services, a witness, PostgreSQL) and is killed with -9;
every one of them, and every process below them, ends within a bounded time and their
ports are free."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tlog.runtime import children

from tests.support.localnet import ports_free
from tests.support.proctree import alive, command, descendants, wait_gone
from tests.support.waiting import readable

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]
ROOT = Path(__file__).resolve().parents[2]


def kill_and_check_gone(run: subprocess.Popen, procs: set[tuple[int, int]], ports: list[int]) -> None:
    """kill -9 of the test process `run`: every one of `procs` ends, and `ports` are free."""
    run.kill()
    run.wait(10)
    left = wait_gone(procs, 30)
    assert not left, [command(pid) for pid, _ in left]  # (clean_up kills them)
    deadline = time.monotonic() + 30  # a process's last thread closes its sockets
    while not ports_free(ports):
        assert time.monotonic() < deadline, "ports still in use"
        time.sleep(0.02)


def clean_up(run: subprocess.Popen, procs: set[tuple[int, int]]) -> None:
    """What a failure left running."""
    if run.poll() is None:
        run.kill()
        run.wait(10)
    for pid, _ in alive(procs):
        os.kill(pid, signal.SIGKILL)

TEST_RUN = """
import sys, time
from pathlib import Path
from tests.support.services import log_service, registry_service, witness_service
from tests.support.witness import WitnessProcess, write_config
from tlog.cli.engines import Postgres

d = Path(sys.argv[1])
log = log_service(d / "log", "--read-workers", "1").start()
w = witness_service(d / "w", log.vkey).start()
reg = registry_service(d / "reg", log.url).start()
w2 = WitnessProcess(write_config(d / "w2.toml", d / "w2", [])).start()
pg = Postgres(d / "pg").start()
ports = [int(s.url.rsplit(":", 1)[1]) for s in (log, w, reg, w2)] + [pg.port]
print(" ".join(map(str, ports)), flush=True)
time.sleep(600)  # until the test kills this process
"""


def test_servers_the_test_helpers_start_die_with_a_killed_test_process(tmp_path):
    run = children.popen([sys.executable, "-c", TEST_RUN, str(tmp_path)], death_signal=signal.SIGKILL, cwd=ROOT,
                         stdout=subprocess.PIPE, text=True)
    procs: set[tuple[int, int]] = set()
    try:
        ready = readable(run.stdout, 240)
        assert ready, "the helpers did not start their servers"
        ports = [int(p) for p in run.stdout.readline().split()]
        assert len(ports) == 5, "the helpers did not start their servers"
        procs = descendants(run.pid)
        names = " ".join(command(pid) for pid, _ in procs)
        for program in ("oap-log serve", "tlog.server.readworkers", "oap-witness serve", "oap-registry serve",
                        "postgres"):
            assert program in names, names
        kill_and_check_gone(run, procs, ports)
    finally:
        clean_up(run, procs)


HELD_TESTS = """
import ctypes, os, time
from pathlib import Path
from tests.support.services import log_service

def _hold(tmp_path):
    log = log_service(tmp_path / "log").start()
    sig = ctypes.c_int()
    ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0)  # PR_GET_PDEATHSIG of this worker
    out = Path(os.environ["OAP_HELD_DIR"]) / os.environ["PYTEST_XDIST_WORKER"]
    out.with_suffix(".tmp").write_text(f"{log.url.rsplit(':', 1)[1]} {sig.value}")
    out.with_suffix(".tmp").rename(out)  # whole, or not there
    time.sleep(600)  # until the test kills pytest

def test_a(tmp_path):
    _hold(tmp_path)

def test_b(tmp_path):
    _hold(tmp_path)
"""


def test_xdist_workers_and_their_servers_die_with_a_killed_pytest(tmp_path):
    """`make test` runs pytest with two xdist workers: each holds the death signal SIGKILL
    (tests/support/workers.py), and kill -9 of pytest ends the workers and so the servers
    their tests started. (execnet alone would end them 5-15 s later: within the bound
    below, which is why the signal itself is checked.)"""
    (tmp_path / "t").mkdir()
    (tmp_path / "t/test_held.py").write_text(HELD_TESTS)
    held = tmp_path / "held"
    held.mkdir()
    run = children.popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.support.workers",
                          "-n", "2", "--rootdir", str(tmp_path / "t"), str(tmp_path / "t/test_held.py")],
                         death_signal=signal.SIGKILL, cwd=ROOT, env={**os.environ, "OAP_HELD_DIR": str(held)},
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs: set[tuple[int, int]] = set()
    try:
        deadline = time.monotonic() + 240
        while len([f for f in held.iterdir() if f.suffix != ".tmp"]) < 2:
            assert run.poll() is None, "pytest ended before its workers started their servers"
            assert time.monotonic() < deadline, "the workers did not start their servers"
            time.sleep(0.05)
        found = [f.read_text().split() for f in held.iterdir() if f.suffix != ".tmp"]
        assert [int(sig) for _, sig in found] == [signal.SIGKILL] * 2, found  # each worker's death signal
        ports = [int(port) for port, _ in found]
        procs = descendants(run.pid)
        names = [command(pid) for pid, _ in procs]
        assert sum("oap-log serve" in n for n in names) == 2, names
        assert sum("sys.stdin.readline" in n for n in names) == 2, names  # the two execnet workers
        kill_and_check_gone(run, procs, ports)
    finally:
        clean_up(run, procs)


BROWSER_RUN = """
import sys, time
from pathlib import Path
from tests.support.browser import start_browser

driver = start_browser(Path(sys.argv[1]))
print(driver.service.process.pid, flush=True)
time.sleep(600)  # until the test kills this process
"""


@pytest.mark.needs("chromium")
def test_the_browser_the_explorer_tests_drive_dies_with_a_killed_test_process(tmp_path):
    run = children.popen([sys.executable, "-c", BROWSER_RUN, str(tmp_path)], death_signal=signal.SIGKILL, cwd=ROOT,
                         stdout=subprocess.PIPE, text=True)
    procs: set[tuple[int, int]] = set()
    try:
        ready = readable(run.stdout, 240)
        assert ready and run.stdout.readline().strip().isdigit(), "no browser started"
        procs = descendants(run.pid)
        names = [command(pid) for pid, _ in procs]
        assert any("chromedriver" in n for n in names), names
        assert any("chromium" in n and "chromedriver" not in n for n in names), names  # the browser, its child
        kill_and_check_gone(run, procs, [])
    finally:
        clean_up(run, procs)
