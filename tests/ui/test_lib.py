"""The explorer's verifiers (tlog/ui/static/lib) against fixtures made by the Python
code: the same verdict, and the same reason, for every vector and mutation (453 checks, with the tile reader),
run by Node (a test extra; also in Chromium by tests/ui/test_explorer.py)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.tools import need

RUN = Path(__file__).resolve().parent / "js" / "run.mjs"


@pytest.mark.needs("node")
def test_the_javascript_verifiers_agree_with_the_python_ones():
    out = subprocess.run([need("node"), str(RUN)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    last = out.stdout.strip().splitlines()[-1]
    passed = int(last.split()[0])
    assert last.endswith("0 failed") and passed >= 453, last


def test_the_fixture_verdicts_are_the_python_codes_verdicts_today():
    """The Python verdicts the checks above compare the browser with are what today's
    registry.records and registry.statusverify say for the same inputs: a reason changed
    in Python without the fixture (tests/ui/fixture_verdicts.py writes it) fails here."""
    from tests.ui.fixture_verdicts import stale

    assert stale() == []


def test_the_explorer_is_served_with_a_strict_csp():
    """Every file under /ui/ has a type, nosniff and a CSP without inline code or eval."""
    import asyncio

    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from tlog.http.middleware import make_error_middleware
    from tlog.http.ui import add_ui

    async def go() -> None:
        app = web.Application(middlewares=[make_error_middleware(lambda *args: None)])
        add_ui(app)
        async with TestClient(TestServer(app)) as client:
            for path, ctype in (("/ui/", "text/html"), ("/ui/app.js", "text/javascript"),
                                ("/ui/style.css", "text/css"), ("/ui/lib/merkle.js", "text/javascript")):
                r = await client.get(path)
                assert r.status == 200 and r.headers["Content-Type"].startswith(ctype), path
                csp = r.headers["Content-Security-Policy"]
                assert "script-src 'self'" in csp and "unsafe" not in csp and "default-src 'none'" in csp
                assert r.headers["X-Content-Type-Options"] == "nosniff"
            for bad in ("/ui/../pyproject.toml", "/ui/lib/nothing.js", "/ui/%2e%2e/setup.py"):
                assert (await client.get(bad)).status == 404, bad
            r = await client.get("/ui", allow_redirects=False)
            assert r.status == 302 and r.headers["Location"] == "/ui/"

    asyncio.run(go())


def test_the_operator_ships_a_trust_policy_with_the_explorer(tmp_path):
    """`ui_trust_policy` is served as /ui/trust.policy (what the pages verify against); none
    configured is a 204 (the pages then say nothing is pinned); a file that is not a policy
    naming a log is refused when the service starts."""
    import asyncio

    import pytest
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from tlog.errors import ConfigError
    from tlog.formats.keys import Signer
    from tlog.http.middleware import make_error_middleware
    from tlog.http.ui import add_ui
    from tlog.server.config import LogConfig

    policy = tmp_path / "net.policy"
    policy.write_text(f"log {Signer.generate('ship.test/log').vkey}\nquorum none\n")

    async def go() -> None:
        for shipped, status, body in ((policy, 200, policy.read_text()), (None, 204, "")):
            app = web.Application(middlewares=[make_error_middleware(lambda *args: None)])
            add_ui(app, shipped)
            async with TestClient(TestServer(app)) as client:
                r = await client.get("/ui/trust.policy")
                assert r.status == status and await r.text() == body
                if status == 200:
                    assert r.headers["Content-Type"].startswith("text/plain") and r.headers["X-Content-Type-Options"] == "nosniff"

    asyncio.run(go())
    LogConfig(ui_trust_policy=policy).validate()
    for bad in ("quorum none\n", "log not-a-key\n", "\xff"):
        (tmp_path / "bad.policy").write_bytes(bad.encode("latin-1"))
        with pytest.raises(ConfigError, match="ui_trust_policy"):
            LogConfig(ui_trust_policy=tmp_path / "bad.policy").validate()
    with pytest.raises(ConfigError, match="ui_trust_policy"):
        LogConfig(ui_trust_policy=tmp_path / "missing.policy").validate()


def test_every_explorer_file_is_package_data():
    """An installed package serves the same page: each file under tlog/ui/static matches a
    package-data pattern of pyproject.toml (a new directory of modules needs its own)."""
    import tomllib
    from fnmatch import fnmatch

    root = Path(__file__).resolve().parents[2]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["tlog.ui"]
    static = root / "tlog" / "ui"
    files = [p.relative_to(static).as_posix() for p in (static / "static").rglob("*") if p.is_file()]
    missing = [f for f in files if not any(fnmatch(f, pat) and f.count("/") == pat.count("/") for pat in patterns)]
    assert files and missing == [], missing


def test_the_vendored_ml_dsa_library_is_the_recorded_one():
    """tlog/ui/static/lib/noble: every file's sha256 is the one its README records (a changed
    file must come with an updated table), and it imports only its neighbours."""
    import hashlib
    import re

    lib = Path(__file__).resolve().parents[2] / "tlog" / "ui" / "static" / "lib" / "noble"
    table = (lib / "README.md").read_text()
    rows = re.findall(r"^\| (\S+\.js) \| [^|]+ \| ([0-9a-f]{64}) \| ([0-9a-f]{64}|\(unchanged\)) \|$", table, re.M)
    assert {name for name, _, _ in rows} == {p.name for p in lib.glob("*.js")}
    for name, original, vendored in rows:
        text = (lib / name).read_text()
        want = original if vendored == "(unchanged)" else vendored
        assert hashlib.sha256(text.encode()).hexdigest() == want, name
        code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        for spec in re.findall(r"""from\s+['"]([^'"]+)['"]""", code):
            assert spec.startswith("./") and (lib / spec[2:]).exists(), (name, spec)
    assert "MIT" in (lib / "LICENSE").read_text()
