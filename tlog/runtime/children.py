"""Child processes that die with the process that started them.

A service started by `oap-localnet`, a server a test starts, a PostgreSQL the scale-out
tests start: each must end when the process that started it ends, however that ends
(Ctrl-C, a closed terminal, kill -9 of a test run). Otherwise it lingers, serving from a
data directory its user thinks is stopped and holding the ports the next run needs.
Every child process of this project is started here.

On Linux the child asks the kernel for a signal when its parent dies
(prctl(PR_SET_PDEATHSIG), between fork and exec). Two details make that reliable:

- the signal is tied to the parent *thread* that forked, not the parent process, so a
  child started from a short-lived thread would be killed when that thread ends.
  Children started off the main thread are forked by one spawner thread that lives as
  long as the process does;
- a parent that dies between the fork and the prctl call sends nothing, so the child
  checks getppid() after the call and exits if its parent is already gone.

Elsewhere (or with `lifeline=True`, which the tests use to exercise this path on Linux)
the parent holds the write end of a pipe whose read end the child inherits; the end of
the parent closes it. The program is started through this module (`python -m
tlog.runtime.children`), which forks a watcher and then execs the program, keeping its
pid: the watcher signals the program when the pipe reports EOF, and exits when the
program does.

Processes of `multiprocessing` are not started by `popen`; `die_with_parent` ties one
to its parent from inside. For a process a library starts (chromedriver), `preexec` is
the hook to pass it; for one that a foreign program starts (Chromium, started by
chromedriver), `write_wrapper` makes a script to start instead, which ties the program
to whatever process runs the script.
"""
from __future__ import annotations

import concurrent.futures
import ctypes
import os
import select
import shlex
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

DEATHSIG = sys.platform.startswith("linux")
"""Whether this system has PR_SET_PDEATHSIG (else the lifeline pipe is used)."""

_PR_SET_PDEATHSIG = 1
_prctl: Callable[..., int] | None = None
if DEATHSIG:
    # Resolved here, not in the forked child: a dlopen() between fork and exec could
    # wait forever on a lock another thread of the parent held at the fork.
    _prctl = ctypes.CDLL(None, use_errno=True).prctl

_spawner: concurrent.futures.ThreadPoolExecutor | None = None
_spawner_lock = threading.Lock()


def _set_death_signal(sig: int, parent: int) -> None:
    """In the child, before exec: `sig` when the parent dies; exit now if it already has."""
    assert _prctl is not None
    if _prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # the parent died before the prctl: no signal will come
        os._exit(126)


def _on_spawner(fn: Callable[[], subprocess.Popen]) -> subprocess.Popen:
    """Run `fn` (a fork) on the thread that lives as long as this process."""
    global _spawner
    if threading.current_thread() is threading.main_thread():
        return fn()
    with _spawner_lock:
        if _spawner is None:
            _spawner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="children-spawner")
    return _spawner.submit(fn).result()


def popen(args: Sequence[str], *, death_signal: int = signal.SIGTERM, lifeline: bool | None = None,
          **kwargs: Any) -> subprocess.Popen:
    """`subprocess.Popen(args, **kwargs)` whose process gets `death_signal` when this one dies.

    SIGTERM lets a service stop cleanly (commit what is queued, close its files);
    SIGKILL suits a process whose state does not matter. A `preexec_fn` in `kwargs`
    runs first (a credential change clears the death signal, so it must come before).
    `lifeline`: None picks the kernel's death signal where there is one.
    """
    use_lifeline = not DEATHSIG if lifeline is None else lifeline
    if use_lifeline:
        return _popen_lifeline(list(args), int(death_signal), kwargs)
    parent = os.getpid()
    first = kwargs.pop("preexec_fn", None)

    def pre() -> None:
        if first is not None:
            first()
        _set_death_signal(death_signal, parent)

    return _on_spawner(lambda: subprocess.Popen(args, preexec_fn=pre, **kwargs))


def preexec(death_signal: int = signal.SIGTERM) -> Callable[[], None] | None:
    """For a library that starts the process itself (selenium's chromedriver): a
    `preexec_fn` that gives the child `death_signal` when this process dies, or None where
    there is no such signal. Call it on the main thread, which the signal follows."""
    if not DEATHSIG:
        return None
    assert threading.current_thread() is threading.main_thread(), "the death signal follows the forking thread"
    parent = os.getpid()
    return lambda: _set_death_signal(death_signal, parent)


def run(args: Sequence[str], *, timeout: float, death_signal: int = signal.SIGKILL, capture_output: bool = False,
        input: str | bytes | None = None, check: bool = False, **kwargs: Any) -> subprocess.CompletedProcess:
    """`subprocess.run` with `popen`'s guarantee, and always a timeout (killed when it passes)."""
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with popen(args, death_signal=death_signal, **kwargs) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


def die_with_parent(sig: int = signal.SIGTERM, *, parent: int | None = None) -> None:
    """Called first thing in a process that `popen` did not start (a `multiprocessing`
    worker, `oap-localnet` under `make run`): get `sig` when its parent process dies.
    `parent`: the pid the parent had, where the caller knows it (then a parent that died
    before this call ends this process at once, instead of going unnoticed). Off Linux, a
    thread watches for the parent to change (an orphan is adopted by another process)."""
    import multiprocessing

    if parent is None:
        mp_parent = multiprocessing.parent_process()  # known even if it has died already
        parent = mp_parent.pid if mp_parent is not None and mp_parent.pid is not None else os.getppid()
    if DEATHSIG:
        _set_death_signal(sig, parent)
        return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os.kill(os.getpid(), sig)

    threading.Thread(target=watch, daemon=True, name="die-with-parent").start()


# --- the lifeline pipe, and programs started by others --------------------------------------


def _popen_lifeline(args: list[str], sig: int, kwargs: dict) -> subprocess.Popen:
    read_end, write_end = os.pipe()  # neither inheritable: the child gets the read end alone
    try:
        kwargs["pass_fds"] = (*kwargs.get("pass_fds", ()), read_end)
        shim = [sys.executable, "-m", "tlog.runtime.children", "--signal", str(sig), "--lifeline", str(read_end),
                "--", *args]
        proc = subprocess.Popen(shim, **kwargs)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    # The write end stays open while the Popen object lives (the process ends before it
    # is collected: subprocess keeps running children it has not reaped).
    weakref.finalize(proc, os.close, write_end)
    return proc


def write_wrapper(path: Path, program: str, death_signal: int = signal.SIGTERM, *,
                  watcher: bool | None = None) -> Path:
    """An executable script at `path` that runs `program` (with the script's arguments)
    so that it gets `death_signal` when whatever started the script dies: for a program
    that another program starts, as chromedriver starts Chromium. `watcher`: None uses
    the kernel's death signal where there is one, else a watcher process polls."""
    use_watcher = not DEATHSIG if watcher is None else watcher
    path.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m tlog.runtime.children '
                    f'--signal {int(death_signal)} --parent "$PPID"{" --watch" if use_watcher else ""} '
                    f'-- {shlex.quote(program)} "$@"\n')
    path.chmod(0o755)
    return path


def _exec_tied(sig: int, argv: list[str], *, lifeline: int | None, parent: int | None, watch: bool) -> None:
    """Become `argv` (same pid, so callers can signal it), tied to the lifeline pipe or to
    the process `parent`. With a parent and PR_SET_PDEATHSIG, the kernel does it; else a
    watcher does: it waits for the lifeline's EOF (or polls whether `parent` lives) and
    then signals the program, and for a pipe whose write end only the program holds, whose
    EOF means the program has exited (so it never signals a reused pid). It is forked
    twice, so that it is no child of the program (PostgreSQL, for one, takes an unknown
    child's exit for a crashed backend)."""
    if lifeline is None and parent is not None and DEATHSIG and not watch:
        _set_death_signal(sig, parent)
    else:
        exited_r, exited_w = os.pipe()
        target = os.getpid()
        middle = os.fork()
        if middle == 0:
            if os.fork() == 0:
                os.close(exited_w)
                _watch(sig, target, exited_r, lifeline, parent)
            os._exit(0)
        os.waitpid(middle, 0)
        os.close(exited_r)
        if lifeline is not None:
            os.close(lifeline)
        os.set_inheritable(exited_w, True)
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        print(f"error: cannot run {argv[0]}: {e}", file=sys.stderr)
        os._exit(127)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch(sig: int, target: int, exited: int, lifeline: int | None, parent: int | None) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # hold none of the program's pipes open
        os.dup2(null, fd)
    os.setsid()  # out of the program's process group: a signal to the group is for the program
    watching = [exited] if lifeline is None else [lifeline, exited]
    signalled = False
    while True:
        ready, _, _ = select.select(watching, [], [], 0.5 if parent is not None and not signalled else None)
        if exited in ready:
            os._exit(0)
        if signalled:
            continue
        gone = (lifeline in ready and not os.read(lifeline, 1)) or (parent is not None and not _alive(parent))
        if gone:
            os.kill(target, sig)
            signalled = True
            watching = [exited]


def _main() -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m tlog.runtime.children",
                                 description="Run PROGRAM so that it gets SIGNAL when its parent dies.")
    ap.add_argument("--signal", type=int, required=True)
    tie = ap.add_mutually_exclusive_group(required=True)
    tie.add_argument("--lifeline", type=int, help="the read end of a pipe only the parent writes")
    tie.add_argument("--parent", type=int, help="the parent's pid")
    ap.add_argument("--watch", action="store_true", help="with --parent: a watcher, not the kernel's signal")
    ap.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- PROGRAM [ARGS...]")
    opts = ap.parse_args()
    argv = opts.argv[1:] if opts.argv[:1] == ["--"] else opts.argv
    if not argv:
        ap.error("no program")
    _exec_tied(opts.signal, argv, lifeline=opts.lifeline, parent=opts.parent, watch=opts.watch)


if __name__ == "__main__":
    _main()
