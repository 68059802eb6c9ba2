"""What the explorer's browser tests share: driving headless Chromium (selenium) with bounded
waits on DOM conditions (never sleeps), reading verdicts, screenshots for review, and
starting the pieces a test needs beside the `network` (tests/ui/conftest.py): a single log,
a plain HTTP server on 127.0.0.1."""
from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path

from tests.support.services import ServerProcess

BIN = Path(sys.executable).parent
STATIC = Path(__file__).resolve().parents[2] / "tlog" / "ui" / "static"
AXE = Path(__file__).resolve().parent / "vendor" / "axe-core" / "axe.min.js"
AXE_SHA256 = "29348999450cdf2849a8e70b7912fc2da85a849da39c0d0d5394f51d4a9ed95c"
FINAL = ("pass", "fail", "unpinned", "incomplete", "revoked", "suspended", "unknown", "info", "input")
WAIT = 60  # seconds: the longest any condition may take on a busy machine



def fetch_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def status_of(registry: str, who: str) -> str:
    return fetch_json(f"{registry}/v1/status/{who}")["status"]



@contextmanager
def single_log(tmp: Path, origin: str, entries: int, *, key_from: Path | None = None, salt: bytes = b"",
               mirrors: tuple[str, ...] = ()):
    """A log of its own (no witnesses) with `entries` commitments, started as a real process on
    a kernel-chosen port; with `key_from`, it signs with the key of that other log; it names
    `mirrors` in its info."""
    from tlog.formats.entries import commitment_entry
    from tlog.formats.hashing import leaf_hash

    tmp.mkdir(parents=True, exist_ok=True)
    if key_from is not None:
        for name in ("log.key", "log.vkey"):
            shutil.copy2(key_from / name, tmp / name)
    (tmp.parent / f"{tmp.name}.toml").write_text(f"[log]\nmirror_urls = {json.dumps(list(mirrors))}\n")
    proc = ServerProcess(tmp, "--origin", origin, "--config", str(tmp.parent / f"{tmp.name}.toml")).start()
    try:
        for start in range(0, entries, 1000):
            batch = [commitment_entry(leaf_hash(salt + i.to_bytes(8, "big"))) for i in range(start, min(entries, start + 1000))]
            req = urllib.request.Request(f"{proc.url}/v1/entries:batch", data=json.dumps({"entries": batch}).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
            with urllib.request.urlopen(req, timeout=60) as r:
                assert r.status == 200
        deadline = time.monotonic() + WAIT
        while fetch_json(f"{proc.url}/v1/info").get("tree_size") != entries:
            assert time.monotonic() < deadline, "the log never published its entries"
            time.sleep(0.05)
        yield proc
    finally:
        proc.stop()


# --- helpers ----------------------------------------------------------------------------------

def wait_for(driver, condition, what: str, timeout: float = WAIT):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, ignored_exceptions=(Exception,)).until(condition, what)


def wait_verdict(driver, element_id: str, states: tuple[str, ...] = FINAL) -> tuple[str, str]:
    """The verdict element's state and text once it has one of `states` (an explicit wait)."""
    def settled(d):
        el = d.find_element("id", element_id)
        return (el.get_attribute("data-state"), el.get_attribute("textContent")) if el.get_attribute("data-state") in states else None

    return wait_for(driver, settled, f"a verdict in #{element_id}")


def open_page(driver, url: str) -> None:
    """Load a URL and wait until the page has loaded every service it was pointed at."""
    driver.get(url)
    ready = wait_for(driver, lambda d: d.find_element("tag name", "body").get_attribute("data-ready"), f"{url} ready")
    assert ready == "1", ready


def fresh(driver, url: str) -> None:
    """Open `url` in a browser that remembers nothing for its origin (no pins, no history),
    with the console of earlier pages read and dropped."""
    driver.get("about:blank")
    driver.get_log("browser")
    driver.get(url)
    driver.execute_script("localStorage.clear();")
    open_page(driver, url)


def state_of(driver, element_id: str) -> str:
    return driver.find_element("id", element_id).get_attribute("data-state")


def stale(driver, element_id: str) -> None:
    """Mark a verdict as old, so that the next wait sees the verdict of the next check."""
    driver.execute_script("document.getElementById(arguments[0]).dataset.state = 'stale';", element_id)


def click(driver, selector: str, timeout: float = 30.0) -> None:
    """Click `selector` once it is on the page. The page may re-render it between the find
    and the click (a stale element, seen on a busy machine): then find it again, within a
    bounded deadline."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    deadline = time.monotonic() + timeout
    while True:
        try:
            driver.find_element("css selector", selector).click()
            return
        except (StaleElementReferenceException, NoSuchElementException):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def rerun(driver, element_id: str, selector: str) -> tuple[str, str]:
    stale(driver, element_id)
    click(driver, selector)
    return wait_verdict(driver, element_id)


def text(driver, element_id: str) -> str:
    return driver.find_element("id", element_id).get_attribute("textContent")


def set_text(driver, element_id: str, value: str) -> None:
    """Set a field as a user would (paste), firing its input event."""
    driver.execute_script("const e = document.getElementById(arguments[0]); e.value = arguments[1];"
                          "e.dispatchEvent(new Event('input'));", element_id, value)


def console_errors(driver, allowed: tuple[str, ...] = ()) -> list[str]:
    return [e["message"] for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and not any(a in e["message"] for a in allowed)]


def no_console_errors(driver, allowed: tuple[str, ...] = ()) -> None:
    severe = console_errors(driver, allowed)
    assert severe == [], severe


def shot(driver, tmp_path: Path, name: str) -> None:
    """A PNG of the page for review: under the test's tmp dir, and copied to $OAP_UI_SHOTS."""
    driver.execute_script("window.scrollTo(0, 0);")
    path = tmp_path / f"{name}.png"
    assert driver.save_screenshot(str(path)) and path.stat().st_size > 0
    if os.environ.get("OAP_UI_SHOTS"):
        out = Path(os.environ["OAP_UI_SHOTS"])
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, out / path.name)


def keys_named(driver, element_id: str) -> list[str]:
    """The full keys, hashes and DIDs an element shows (shortened on screen, whole in their title)."""
    return driver.execute_script("return [...document.getElementById(arguments[0]).querySelectorAll('.value [title]')]"
                                 ".map(e => e.title);", element_id)


def no_green(driver) -> None:
    """Nothing on the page is green: no verdict, table row or trust line is in the pass state
    (the rows of a checklist say which checks held; their verdict says what that is worth)."""
    green = driver.execute_script("return [...document.querySelectorAll('[data-state=\"pass\"]:not(li)')]"
                                  ".map(e => (e.id || e.tagName) + ': ' + e.textContent.slice(0, 120));")
    assert green == [], green


@contextmanager
def http_server(handler):
    """A plain HTTP server on 127.0.0.1 in a thread (a static host, or a lying log)."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def audit(driver, axe: str) -> list[str]:
    """axe-core's serious and critical violations on the page shown (it is injected here only)."""
    if not driver.execute_script("return typeof window.axe === 'object';"):
        driver.execute_script(axe)
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']}).then(r => done(JSON.stringify(r.violations.map("
        "v => ({id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))})))))"
        ".catch(e => done(JSON.stringify([{id: 'axe-error', impact: 'critical', nodes: [String(e)]}])));")
    return [f"{v['id']} ({v['impact']}): {v['nodes']}" for v in json.loads(result) if v["impact"] in ("serious", "critical")]


def axe_clean(driver) -> None:
    """axe-core (vendored, its hash checked) finds no serious or critical violation on the page
    shown, in light and dark."""
    import hashlib

    assert hashlib.sha256(AXE.read_bytes()).hexdigest() == AXE_SHA256, "tests/ui/vendor/axe-core/README.md"
    try:
        for scheme in ("light", "dark"):
            driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
            bad = audit(driver, AXE.read_text())
            assert bad == [], (scheme, bad)
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
