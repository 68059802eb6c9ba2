"""Run cases through the browser's verifiers (tests/ui/js/differential.js) and get their
verdicts back: in Node (tests.support.tools.node, a test extra), else in headless Chromium
(selenium, the same harness and CSP as tests/ui/test_explorer.py). OAP_JS_RUNNER=chromium
forces the browser. Without either the test is skipped, or fails under OAP_REQUIRE_ALL_TOOLS."""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from tests.support.tools import need, node, required

JS = Path(__file__).resolve().parent / "js"
ROOT = JS.parents[2]
CSP = ("default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src data:; "
       "base-uri 'none'; form-action 'none'; require-trusted-types-for 'script'; trusted-types 'none'")


def run_js(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The JavaScript verdict of each case (JSON-encoded with tests.support.malformed.to_json)."""
    exe = node()
    if exe is not None and os.environ.get("OAP_JS_RUNNER") != "chromium":
        return _node(exe, cases)
    if exe is None and required():
        need("node")  # fails: under the switch both runners must be here (else Chromium runs them)
    return _chromium(cases)


def _node(exe: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cases, f)
    try:
        out = subprocess.run([exe, str(JS / "differential.mjs"), f.name], capture_output=True, text=True, timeout=600)
    finally:
        os.unlink(f.name)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@contextmanager
def _serve(cases_json: bytes) -> Iterator[str]:
    class Handler(SimpleHTTPRequestHandler):
        extensions_map: ClassVar[dict[str, str]] = {**SimpleHTTPRequestHandler.extensions_map, ".js": "text/javascript"}

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(ROOT), **kwargs)

        def do_GET(self) -> None:
            if self.path == "/tests/ui/js/cases.json":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(cases_json)))
                self.end_headers()
                self.wfile.write(cases_json)
                return
            if not self.path.startswith(("/tests/ui/js/", "/tlog/ui/static/lib/")) or ".." in self.path:
                self.send_error(404)
                return
            super().do_GET()

        def end_headers(self) -> None:
            self.send_header("Content-Security-Policy", CSP)
            self.send_header("X-Content-Type-Options", "nosniff")
            super().end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _chromium(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    need("chromium")
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.support.browser import start_browser

    with tempfile.TemporaryDirectory(prefix="oap-chromium-") as work:
        driver = start_browser(Path(work))
        try:
            with _serve(json.dumps(cases).encode()) as host:
                driver.get(f"{host}/tests/ui/js/differential.html")
                WebDriverWait(driver, 300).until(lambda d: d.title.startswith("DONE"))
                assert driver.title == "DONE", driver.find_element("id", "state").get_attribute("textContent")
                return json.loads(driver.find_element("id", "results").get_attribute("textContent"))
        finally:
            driver.quit()
