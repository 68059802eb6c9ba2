"""tlog.runtime.children: a child gets its death signal when its parent dies, and not
before, also when the thread that started it has ended; by the kernel's parent-death
signal and by the lifeline pipe (exercised here on Linux too)."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid

import pytest

from tlog.runtime import children

from tests.support.proctree import command, matching, wait_gone
from tests.support.waiting import readable

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# The child blocks SIGTERM, so a death signal stays pending, where /proc shows it: what
# the kernel (or the watcher) sent is seen without waiting for anything to happen.
CHILD = ("import signal, time  # {token}\n"
         "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])\n"
         "print('ready', flush=True)\n"
         "time.sleep(600)  # until the test kills it\n")
PARENT = """
import os, subprocess, sys, threading, time
from tlog.runtime import children

lifeline = sys.argv[1] == "lifeline"
started = []
t = threading.Thread(target=lambda: started.append(children.popen(
    [sys.executable, "-c", sys.argv[2]], lifeline=lifeline, stdout=subprocess.PIPE, text=True)))
t.start()
t.join()
deadline = time.monotonic() + 60
while os.path.exists(f"/proc/self/task/{t.native_id}") and time.monotonic() < deadline:
    time.sleep(0.01)  # until the kernel has ended the thread that started the child
assert not os.path.exists(f"/proc/self/task/{t.native_id}")
child = started[0]
print(child.pid, child.stdout.readline().strip(), flush=True)
time.sleep(600)  # until the test kills it
"""


def pending(pid: int, sig: int) -> bool:
    """Whether `sig` is pending (sent, blocked) for process `pid`."""
    with open(f"/proc/{pid}/status") as f:
        masks = dict(line.split(":", 1) for line in f if line.startswith(("SigPnd", "ShdPnd")))
    return any(int(v, 16) >> (sig - 1) & 1 for v in masks.values())


def read_line(proc: subprocess.Popen, timeout: float = 60) -> str:
    ready = readable(proc.stdout, timeout)
    assert ready, "no answer from the parent"
    return proc.stdout.readline()


def kill_and_expect_sigterm(parent: subprocess.Popen, child: int) -> None:
    """kill -9 `parent` (nothing of it runs any more); its orphan `child` must get SIGTERM."""
    parent.kill()
    parent.wait(10)
    deadline = time.monotonic() + 30
    while not pending(child, signal.SIGTERM):
        assert time.monotonic() < deadline, "no SIGTERM for the orphan"
        time.sleep(0.02)


def clean_up(parent: subprocess.Popen, child: int) -> None:
    if parent.poll() is None:
        parent.kill()
        parent.wait(10)
    if child:
        subprocess.run(["kill", "-9", str(child)], check=False)


@pytest.mark.parametrize("lifeline", [False, True], ids=["deathsig", "lifeline"])
def test_a_child_is_signalled_when_its_parent_dies_and_not_when_the_starting_thread_ends(lifeline):
    if not lifeline and not children.DEATHSIG:
        pytest.skip("no PR_SET_PDEATHSIG here")
    token = uuid.uuid4().hex
    parent = children.popen([sys.executable, "-c", PARENT, "lifeline" if lifeline else "deathsig",
                             CHILD.format(token=token)], death_signal=signal.SIGKILL, stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        pid, ready = read_line(parent).split()
        child = int(pid)
        assert ready == "ready"  # alive after the thread that started it ended
        assert not pending(child, signal.SIGTERM)
        watcher = matching(token, "tlog.runtime.children") if lifeline else set()
        assert len(watcher) == (1 if lifeline else 0)
        kill_and_expect_sigterm(parent, child)
    finally:
        clean_up(parent, child)
    if lifeline:  # the watcher leaves with the program it watched
        assert not wait_gone(watcher, 10)


def test_run_kills_what_outlives_its_timeout():
    token = uuid.uuid4().hex
    with pytest.raises(subprocess.TimeoutExpired):
        children.run([sys.executable, "-c", f"import time  # {token}\ntime.sleep(600)"], timeout=1)
    assert not matching(token)  # run() killed it


def test_run_returns_what_the_program_printed():
    r = children.run([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"], capture_output=True, text=True,
                     timeout=60)
    assert (r.returncode, r.stdout) == (3, "out\n")
    with pytest.raises(subprocess.CalledProcessError):
        children.run([sys.executable, "-c", "raise SystemExit(1)"], check=True, timeout=60)


FOREIGN_PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.argv[1]], stdout=subprocess.PIPE, text=True)  # as chromedriver starts Chromium
print(child.pid, child.stdout.readline().strip(), flush=True)
time.sleep(600)  # until the test kills it
"""


@pytest.mark.parametrize("watcher", [False, True], ids=["deathsig", "watcher"])
def test_a_program_a_foreign_parent_starts_through_the_wrapper_is_signalled_when_it_dies(tmp_path, watcher):
    if not watcher and not children.DEATHSIG:
        pytest.skip("no PR_SET_PDEATHSIG here")
    token = uuid.uuid4().hex
    program = tmp_path / "program"
    program.write_text(f"#!{sys.executable}\n" + CHILD.format(token=token))
    program.chmod(0o755)
    wrapper = children.write_wrapper(tmp_path / "wrapped", str(program), signal.SIGTERM, watcher=watcher)
    parent = children.popen([sys.executable, "-c", FOREIGN_PARENT, str(wrapper)], death_signal=signal.SIGKILL,
                            stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        pid, ready = read_line(parent).split()
        child = int(pid)  # the wrapper became the program: same pid
        assert ready == "ready" and str(program) in command(child) and not pending(child, signal.SIGTERM)
        assert len(matching(str(program), "tlog.runtime.children")) == (1 if watcher else 0)
        kill_and_expect_sigterm(parent, child)
    finally:
        clean_up(parent, child)
    assert not wait_gone(matching(str(program), "tlog.runtime.children"), 10)  # no watcher left
