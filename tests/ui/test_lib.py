"""The explorer's verifiers (tlog/ui/static/lib) against fixtures made by the Python
code: the same verdict, and the same reason, for every vector and mutation (442 checks),
run by Node when it is installed (and in Chromium by tests/ui/test_explorer.py)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

NODE = shutil.which("node")
RUN = Path(__file__).resolve().parent / "js" / "run.mjs"


@pytest.mark.skipif(NODE is None, reason="node not installed: the same checks run in Chromium (tests/ui/test_explorer.py)")
def test_the_javascript_verifiers_agree_with_the_python_ones():
    out = subprocess.run([NODE, str(RUN)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    last = out.stdout.strip().splitlines()[-1]
    passed = int(last.split()[0])
    assert last.endswith("0 failed") and passed >= 442, last


def test_the_explorer_is_served_with_a_strict_csp():
    """Every file under /ui/ has a type, nosniff and a CSP without inline code or eval."""
    import asyncio

    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from tlog.service.middleware import make_error_middleware
    from tlog.service.ui import add_ui

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
