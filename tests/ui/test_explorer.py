"""The explorer (/ui/) in a real browser: headless Chromium from the system packages,
driven by selenium, against a real local network (`oap-localnet`: a log, three
witnesses with quorum 2, a registry) on 127.0.0.1. The verdicts come from the page's
own verification (WebCrypto), so a green result means the math held in the browser;
the failures are the specific reasons the verifiers give. Every test also reads the
browser's console: no SEVERE entry is allowed.

Screenshots of each view are written under pytest's tmp dir, and copied to
$OAP_UI_SHOTS when it is set (for review)."""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.browser import available as browser_available
from tests.support.browser import start_browser
from tests.support.localnet import localnet

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent
STATIC = Path(__file__).resolve().parents[2] / "tlog" / "ui" / "static"
if not browser_available():
    pytest.skip("chromium/chromedriver not installed: `make tools` installs them where apt-get works",
                allow_module_level=True)


@pytest.fixture(scope="module")
def network(tmp_path_factory):
    """oap-localnet on free ports, with the README tour's entries (a receipt, its salted
    commitment), a revoked agent key and a principal with a key event."""
    tmp = tmp_path_factory.mktemp("net")
    with localnet(tmp / "data", cwd=tmp) as net:
        log, registry, witness = net.log, net.registry, net.witness
        env = {**os.environ, "OAP_LOG_URL": log, "OAP_REGISTRY_URL": registry}

        def cli(*args: str) -> str:
            r = subprocess.run([str(BIN / args[0]), *args[1:]], cwd=tmp, env=env, capture_output=True, text=True,
                               timeout=120)
            assert r.returncode == 0, r.stderr
            return r.stdout.strip()

        cli("oap-log", "keygen", "--name", "ui.test", "--out", "me.key")
        (tmp / "receipt.json").write_text(json.dumps({"receipt_id": "urn:oap:receipt:ui", "type": "invocation",
                                                      "input_hash": "sha256:" + "ab" * 32}))
        index = json.loads(cli("oap-log", "add", "receipt.json", "--key", "me.key"))["index"]
        cli("oap-log", "add", "receipt.json", "--commitment", "--out", "privileged.tlog-proof")
        agent = cli("oap-registry", "keygen", "--out", "agent.key")
        cli("oap-registry", "revoke", "--key", "agent.key", "--kind", "key", "--reason", "key_compromise")
        owner, controller = cli("oap-registry", "keygen", "--out", "owner.key"), cli("oap-registry", "keygen", "--out", "c.key")
        cli("oap-registry", "key-event", "--key", "owner.key", "--subject", owner, "--controller", controller)
        # status answers show a record once a status epoch covers its commit: wait for it here
        deadline = time.monotonic() + 90
        for who, want in ((agent, "revoked"), (owner, "good")):
            while status_of(registry, who) != want:
                assert time.monotonic() < deadline, f"{who} never became {want} in the registry's answers"
                time.sleep(0.2)
        yield {"log": log, "registry": registry, "witness": witness, "index": index, "agent": agent, "owner": owner,
               "dir": tmp, "policy": (tmp / "data" / "log" / "log.policy").read_text(),
               "vkey": (tmp / "data" / "log" / "log.vkey").read_text().strip()}


def status_of(registry: str, who: str) -> str:
    with urllib.request.urlopen(f"{registry}/v1/status/{who}", timeout=10) as r:
        return json.loads(r.read())["status"]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = start_browser(tmp_path_factory.mktemp("chromium"))
    yield driver
    driver.quit()


# --- helpers ----------------------------------------------------------------------------------

def wait_verdict(driver, element_id: str, states: tuple[str, ...] = ("pass", "fail", "revoked", "unknown")) -> tuple[str, str]:
    """The verdict element's state and text once it has one of `states` (an explicit wait).
    The text is the element's textContent: a verdict of a view not shown is read too."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    el = driver.find_element(By.ID, element_id)
    WebDriverWait(driver, 30).until(lambda d: el.get_attribute("data-state") in states)
    return el.get_attribute("data-state"), el.get_attribute("textContent")


def wait_ready(driver) -> None:
    """Until the page has loaded every service it was pointed at."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 60).until(lambda d: d.find_element("tag name", "body").get_attribute("data-ready"))
    assert driver.find_element("tag name", "body").get_attribute("data-ready") == "1"


def view(driver, name: str) -> None:
    """Open a view from the navigation, as a user would, and wait until it shows."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.find_element(By.ID, f"nav-{name}").click()
    WebDriverWait(driver, 10).until(lambda d: d.find_element(By.ID, name).is_displayed())


def click(driver, selector: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, selector).click()


def stale(driver, element_id: str) -> None:
    """Mark a verdict as old, so that the next wait sees the verdict of the next check."""
    driver.execute_script("document.getElementById(arguments[0]).dataset.state = 'stale';", element_id)


def rerun(driver, element_id: str, selector: str) -> tuple[str, str]:
    """Start a check again and wait for its new verdict."""
    stale(driver, element_id)
    click(driver, selector)
    return wait_verdict(driver, element_id)


def text(driver, element_id: str) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, element_id).text


def no_console_errors(driver) -> None:
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
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


def set_text(driver, element_id: str, value: str) -> None:
    """Set a field as a user would (paste), firing its input event."""
    driver.execute_script("const e = document.getElementById(arguments[0]); e.value = arguments[1];"
                          "e.dispatchEvent(new Event('input'));", element_id, value)


def set_policy(driver, value: str) -> tuple[str, str]:
    """Paste a trust policy; the log view checks its checkpoint again: that verdict."""
    stale(driver, "log-verdict")
    set_text(driver, "policy", value)
    return wait_verdict(driver, "log-verdict")


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


def lying_log(upstream: str):
    """A proxy in front of the log that changes one hash of every inclusion proof it serves."""

    class Proxy(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            try:
                with urllib.request.urlopen(upstream + self.path, timeout=10) as r:
                    status, ctype, body = r.status, r.headers.get("Content-Type", ""), r.read()
            except urllib.error.HTTPError as e:
                status, ctype, body = e.code, e.headers.get("Content-Type", ""), e.read()
            if self.path.startswith("/v1/proof/inclusion") and status == 200:
                doc = json.loads(body)
                h = doc["inclusion_proof"][0]
                doc["inclusion_proof"][0] = ("B" if h[0] == "A" else "A") + h[1:]
                body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Access-Control-Allow-Origin", "*")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    return Proxy


ROOT = STATIC.parents[2]
LIB_CSP = ("default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src data:; "
           "base-uri 'none'; form-action 'none'; require-trusted-types-for 'script'; trusted-types 'none'")


class LibChecks(SimpleHTTPRequestHandler):
    """tests/ui/js (the checks and their fixtures) and the verifiers they import, under a strict CSP."""

    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".js": "text/javascript", ".mjs": "text/javascript"}

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, directory=str(ROOT), **kwargs)

    def send_head(self):
        if not self.path.startswith(("/tests/ui/js/", "/tlog/ui/static/lib/")) or ".." in self.path:
            self.send_error(404)
            return None
        return super().send_head()

    def end_headers(self) -> None:
        self.send_header("Content-Security-Policy", LIB_CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        super().end_headers()

    def log_message(self, *args) -> None:
        pass


class StaticHost(SimpleHTTPRequestHandler):
    """A static host with no special headers: the page's own <meta> CSP is all there is."""

    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".js": "text/javascript"}

    def log_message(self, *args) -> None:
        pass


# --- the views --------------------------------------------------------------------------------

def test_the_log_view_and_an_anchored_entry_verify_in_the_browser(network, browser, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(f"{network['log']}/ui/?index={network['index']}")  # a link to an entry opens the entry view
    state, said = wait_verdict(browser, "entry-verdict")
    assert state == "pass", said
    assert f"VERIFIED: entry {network['index']}" in said and network["vkey"] in said and "oap.localhost/log" in said
    assert "signed by did:key:" in said and "(signature verified)" in said  # the receipt's own signature
    assert '"receipt_hash": "sha256:' in text(browser, "entry-json")
    assert text(browser, "entry-proof").startswith("c2sp.org/tlog-proof@v1")
    wait_ready(browser)
    shot(browser, tmp_path, "entry")
    # looked up by the receipt itself, hashed in the page (JCS + SHA-256)
    set_text(browser, "entry-index", "")
    set_text(browser, "entry-receipt", (network["dir"] / "receipt.json").read_text())
    state, said = rerun(browser, "entry-verdict", "#entry-form button")
    assert state == "pass" and f"entry {network['index']}" in said, said
    assert "computed here" in text(browser, "entry-hash")
    # and by its leaf hash, in hex
    with urllib.request.urlopen(f"{network['log']}/v1/entries/{network['index']}", timeout=10) as r:
        leaf = base64.b64decode(json.loads(r.read())["leaf_hash"]).hex()
    set_text(browser, "entry-receipt", "")
    set_text(browser, "entry-leaf", leaf)
    state, said = rerun(browser, "entry-verdict", "#entry-form button")
    assert state == "pass" and f"entry {network['index']} " in said, said
    set_text(browser, "entry-leaf", "")
    # the log view: its checkpoint, each witness's cosignature and age, the quorum
    view(browser, "log")
    state, said = wait_verdict(browser, "log-verdict")
    assert state == "pass" and "VERIFIED checkpoint" in said and "witness quorum met" in said, said
    assert network["vkey"] in said
    rows = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#cosignatures tbody tr")]
    assert len(rows) == 3 and sum("verified" in r and "ago" in r for r in rows) >= 2, rows
    assert text(browser, "quorum").startswith("Quorum local-witnesses: met")
    assert "entries" in text(browser, "growth-text")
    shot(browser, tmp_path, "log")
    # one click on the latest entries verifies one the tour anchored
    set_text(browser, "entry-receipt", "")
    buttons = browser.find_elements(By.CSS_SELECTOR, "#recent tbody button")
    assert len(buttons) >= 2
    index = buttons[1].get_attribute("data-index")
    stale(browser, "entry-verdict")
    buttons[1].click()
    state, said = wait_verdict(browser, "entry-verdict")
    assert state == "pass" and f"entry {index} " in said, said
    assert browser.find_element(By.ID, "entry").is_displayed()
    no_console_errors(browser)


def test_a_wrong_key_or_a_missing_quorum_shows_the_specific_failure(network, browser, tmp_path):

    from tlog.formats.keys import CosignatureSigner, Signer

    browser.get(f"{network['log']}/ui/#entry")
    wait_ready(browser)
    other = Signer.generate("oap.localhost/log")
    click(browser, "#policy-box summary")
    state, said = set_policy(browser, f"log {other.vkey}\nquorum none\n")
    assert state == "fail" and "checkpoint is not signed by a log in the policy" in said and other.vkey in said, said
    set_text(browser, "entry-index", str(network["index"]))
    state, said = rerun(browser, "entry-verdict", "#entry-form button")
    assert state == "fail" and "checkpoint is not signed by a log in the policy" in said, said
    assert f"checked against log key {other.vkey}" in said  # the failure names the key it checked
    shot(browser, tmp_path, "wrong-key")
    stranger = CosignatureSigner("stranger.example", os.urandom(32))
    state, said = set_policy(browser, network["policy"].replace("quorum local-witnesses", "")
                             + f"witness s {stranger.vkey}\ngroup strict all w1 w2 s\nquorum strict\n")
    assert state == "fail" and "witness quorum not met" in said, said
    state, said = rerun(browser, "entry-verdict", "#entry-form button")
    assert state == "fail" and "witness quorum not met (valid cosignatures from: w1, w2, w3)" in said, said
    view(browser, "log")
    assert text(browser, "quorum").startswith("Quorum strict: NOT met")
    assert "stranger.example no cosignature" in text(browser, "cosignatures")
    shot(browser, tmp_path, "quorum-not-met")
    no_console_errors(browser)


def test_a_tampered_proof_from_a_lying_log_fails_in_the_page(network, browser, tmp_path):
    with http_server(lying_log(network["log"])) as liar:
        browser.get(f"{network['log']}/ui/?log={liar}&index={network['index']}")
        state, said = wait_verdict(browser, "entry-verdict")
        assert state == "fail" and "FAILED: inclusion proof does not lead to the checkpoint root" in said, said
        assert network["vkey"] in said  # what it was checked against
        assert wait_verdict(browser, "log-verdict")[0] == "pass"  # its checkpoint is the real one
        shot(browser, tmp_path, "tampered-proof")
    no_console_errors(browser)


def test_bundle_check_gives_oap_log_verify_verdicts(network, browser, tmp_path):
    bundle = (network["dir"] / "receipt.json.tlog-proof").read_text()
    receipt = (network["dir"] / "receipt.json").read_text()
    browser.get(f"{network['log']}/ui/#bundle")
    wait_ready(browser)
    set_text(browser, "bundle-text", bundle)
    set_text(browser, "bundle-receipt", receipt)
    state, said = rerun(browser, "bundle-verdict", "#bundle-check")
    assert state == "pass" and said.startswith("OK"), said
    assert f"pasted bundle: index {network['index']} in oap.localhost/log at size " in said, said
    assert "(witnesses: w1, w2, w3); signed by did:key:" in said and "anchors the receipt given" in said, said
    assert "1 verified, 0 failed" in said
    shot(browser, tmp_path, "bundle")
    lines = bundle.split("\n")
    assert lines[2].startswith("index ") and lines[3]
    lines[3] = ("A" if lines[3][0] != "A" else "B") + lines[3][1:]  # one proof hash changed
    set_text(browser, "bundle-text", "\n".join(lines))
    state, said = rerun(browser, "bundle-verdict", "#bundle-check")
    assert state == "fail" and said.startswith("FAIL"), said
    assert "pasted bundle: inclusion proof does not lead to the checkpoint root" in said and "0 verified, 1 failed" in said
    shot(browser, tmp_path, "bundle-tampered")
    set_text(browser, "bundle-text", bundle)
    set_text(browser, "bundle-receipt", '{"receipt_id": "urn:oap:receipt:other"}')
    state, said = rerun(browser, "bundle-verdict", "#bundle-check")
    assert state == "fail" and "pasted bundle: the bundle anchors a different receipt" in said, said
    # Privileged Mode: the salted commitment opens to the receipt with its salt
    set_text(browser, "bundle-text", (network["dir"] / "privileged.tlog-proof").read_text())
    set_text(browser, "bundle-receipt", receipt)
    set_text(browser, "bundle-salt", (network["dir"] / "privileged.tlog-proof.salt.json").read_text())
    state, said = rerun(browser, "bundle-verdict", "#bundle-check")
    assert state == "pass" and "the commitment opens to the receipt given" in said, said
    set_text(browser, "bundle-salt", json.dumps({"salt": "00" * 32}))
    state, said = rerun(browser, "bundle-verdict", "#bundle-check")
    assert state == "fail" and "the commitment does not open to this receipt with this salt" in said, said
    no_console_errors(browser)


def test_registry_status_records_and_commit_anchors_verify_in_the_page(network, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    # served by the registry itself: it names its log, whose policy (witness quorum) is used
    browser.get(f"{network['registry']}/ui/")
    wait_ready(browser)
    assert browser.find_element(By.ID, "registry").is_displayed()
    assert wait_verdict(browser, "log-verdict")[0] == "pass"
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#commits tbody tr"))
    rows = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#commits tbody tr")]
    assert len(rows) >= 3 and all("verified in the log (index" in r for r in rows if "not in the log yet" not in r), rows
    assert any("revocation urn:oap:revocation:" in r for r in rows), rows
    assert "quorum local-witnesses" in text(browser, "commits-note")
    for who, want in ((network["agent"], "revoked"), (network["owner"], "pass")):
        set_text(browser, "status-id", who)
        state, said = rerun(browser, "status-verdict", "#registry-form button")
        assert state == want, said
        assert "(verified): signed by the status key did:key:" in said and "quorum local-witnesses" in said, said
        assert "fresh until" in said and "for another" in said
        records = text(browser, "principal-records")
        assert "verified" in records and who in records, records
        shot(browser, tmp_path, f"registry-{'good' if want == 'pass' else want}")
    assert "key_event add_controller" in records, records  # the owner's key event
    no_console_errors(browser)


def test_witness_view_shows_its_logs_and_refusals(network, browser, tmp_path):
    # a refused add-checkpoint (a log this witness does not follow) to show
    req = urllib.request.Request(f"{network['witness']}/add-checkpoint", method="POST",
                                 data=b"old 0\n\nnot.followed/log\n1\nAAAA\n\n")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=10)
    assert refused.value.code in (400, 403, 404)
    browser.get(f"{network['witness']}/ui/")
    state, said = wait_verdict(browser, "witness-verdict")
    assert state == "pass" and "1 log(s) followed" in said, said
    assert wait_verdict(browser, "log-verdict")[0] == "pass"  # and the log it follows, from its URL
    logs = text(browser, "witness-logs")
    assert "oap.localhost/log" in logs and "ago" in logs
    assert "verified: signed by oap.localhost/log, cosigned by witness-1.localhost" in logs, logs
    refusals = text(browser, "witness-refusals")
    assert "not.followed/log" in refusals and str(refused.value.code) in refusals
    shot(browser, tmp_path, "witness")
    no_console_errors(browser)


def test_the_same_files_work_from_a_static_host(network, browser, tmp_path):
    """tlog/ui/static served as plain files from another origin (no CSP header: the page's
    own <meta> policy applies), pointed at the services with ?log=&registry=&witness=: the
    reads cross origins, and the services answer them with CORS."""
    with http_server(partial(StaticHost, directory=str(STATIC))) as host:
        browser.get(f"{host}/index.html?log={network['log']}&registry={network['registry']}"
                    f"&witness={network['witness']}&index={network['index']}")
        state, said = wait_verdict(browser, "entry-verdict")
        assert state == "pass" and f"VERIFIED: entry {network['index']}" in said and network["vkey"] in said, said
        assert wait_verdict(browser, "log-verdict")[0] == "pass"
        assert wait_verdict(browser, "witness-verdict")[0] == "pass"
        wait_ready(browser)
        view(browser, "registry")
        assert "verified in the log" in text(browser, "commits")
        shot(browser, tmp_path, "static-host-registry")
    no_console_errors(browser)


def test_the_verifiers_pass_their_checks_in_chromium(browser):
    """The 442 checks of tests/ui/js (c2sp.md vectors, the Python code's verdicts and reasons,
    mutations) run in Chromium, under a CSP whose probes must all hold (no inline script or
    style, no eval, Trusted Types): WebCrypto Ed25519 and SHA-256 as the explorer uses them."""
    from selenium.webdriver.support.ui import WebDriverWait

    with http_server(LibChecks) as host:
        browser.get(f"{host}/tests/ui/js/browser.html")
        WebDriverWait(browser, 120).until(lambda d: d.title.startswith("DONE"))
        summary = text(browser, "summary")
        assert browser.find_element("id", "summary").get_attribute("data-state") == "pass", text(browser, "log")[-3000:]
    passed = int(summary.split()[0])
    assert passed >= 442 and " 0 failed" in summary and "CSP probes ok" in summary, summary
    assert "WebCrypto Ed25519: yes" in text(browser, "env")
    # the only console errors are the CSP refusals of the page's own probes
    severe = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    # (an inline script, an inline style, eval and an innerHTML string, each refused)
    assert len(severe) == 4 and all("violates the following Content Security Policy" in m
                                    or "This document requires 'Trusted" in m for m in severe), severe
