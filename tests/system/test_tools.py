"""A suite that cannot pass untested: a test that needs a tool (tests.support.tools) is
skipped without it, and failed under OAP_REQUIRE_ALL_TOOLS=1, which `.ci/run` sets; every
skip for a missing tool goes through that one helper."""
from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import pytest

from tlog.runtime import children

from tests.support.tools import SWITCH, TOOLS, need, required

ROOT = Path(__file__).resolve().parents[2]

NEEDS_CHROMIUM = '''
import pytest

from tests.support.tools import need


def test_calls_the_helper():
    need("chromium")


@pytest.mark.needs("chromium")
def test_marked():
    pass
'''


def _pytest_without_chromium(tmp_path: Path, switch: str | None) -> tuple[int, str]:
    """Two tests that need Chromium, run by pytest in a process whose PATH has no chromium."""
    (tmp_path / "t").mkdir(exist_ok=True)
    (tmp_path / "t" / "test_needs.py").write_text(NEEDS_CHROMIUM)
    (tmp_path / "empty").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in (SWITCH, "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    env.update(PATH=str(tmp_path / "empty"), PYTHONPATH=str(ROOT))
    if switch is not None:
        env[SWITCH] = switch
    r = children.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.support.tools",
                      "-p", "no:asyncio", "-rsf", str(tmp_path / "t")], timeout=300, death_signal=signal.SIGKILL,
                     capture_output=True, text=True, cwd=tmp_path, env=env)
    return r.returncode, r.stdout + r.stderr


@pytest.mark.parametrize("switch", [None, "0", "1"])
def test_a_missing_tool_skips_its_tests_and_fails_them_under_the_switch(tmp_path, switch):
    code, out = _pytest_without_chromium(tmp_path, switch)
    if switch == "1":
        assert code == 1 and "1 failed, 1 error" in out, out[-3000:]  # the mark fails the test's setup
        assert out.count(f"{SWITCH} is set: a missing tool fails the run") >= 2, out[-3000:]
    else:
        assert code == 0 and "2 skipped" in out, out[-3000:]
        assert "Chromium and chromedriver (the explorer's browser tests) is not here" in out, out[-3000:]


def test_ci_runs_make_test_under_the_switch_and_the_readme_says_so():
    ci = (ROOT / ".ci" / "run").read_text()
    commands = [line.strip() for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert f"export {SWITCH}=1" in commands and "make test" in commands
    readme = (ROOT / "README.md").read_text()
    assert f"{SWITCH}=1 make test" in readme


def test_every_tool_is_here_when_the_switch_is_set():
    """Under the switch (CI), each tool any test needs is here, even one whose tests were
    not selected; otherwise this names what is missing and skips."""
    missing = [f"{name}: {tool.what}" for name, tool in TOOLS.items() if not tool.find()]
    if missing and not required():
        pytest.skip("missing: " + "; ".join(missing))
    for name in TOOLS:
        need(name)


# Words of a skip's reason that name a tool: such a skip belongs in tests.support.tools.
TOOL_WORDS = ("chrom", "selenium", "node", "golang", "go is", "go ", "promtool", "prometheus", "systemd", "gcc",
              "compiler", "openssl", "native", "c extension", "postgres", "seaweed", "weed", "xdist", "wrk", "apt",
              "softhsm", "pkcs11")
SKIP = re.compile(r"pytest\.(?:skip|importorskip)\(|mark\.skipif\(")


def test_every_skip_for_a_missing_tool_goes_through_the_one_helper():
    """The skips left in the suite are for what no install provides (an IPv6 loopback, a
    tmpfs mount, glibc's malloc, Linux's /proc, a backend without a bucket), each with its
    reason written where it is (a reason kept in a variable could name a tool)."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path in (ROOT / "tests" / "support" / "tools.py", Path(__file__).resolve()):
            continue
        text = path.read_text()
        for m in SKIP.finditer(text):
            call = text[m.start() : m.start() + 240].split("\n\n")[0]
            rest = call[m.end() - m.start() :]
            literal = re.search(r"""reason=f?["']""", rest) if "skipif" in m.group() else re.match(r"""\s*f?["']""", rest)
            if literal is None or any(w in call.lower() for w in TOOL_WORDS):
                found.append(f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}")
    assert found == [], "skips for a missing tool (or for a reason not written there) outside tests.support.tools"
