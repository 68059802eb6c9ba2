"""The explorer (/ui/) in a real browser: headless Chromium from the system packages,
driven by selenium, against a real local network (`oap-localnet`: a log, three
witnesses with quorum 2, a registry) on 127.0.0.1. The verdicts come from the page's
own verification (WebCrypto), so a green result means the math held in the browser."""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent
CHROMIUM, DRIVER = shutil.which("chromium") or "/usr/bin/chromium", shutil.which("chromedriver") or "/usr/bin/chromedriver"

try:
    import selenium  # noqa: F401
    HAVE = os.path.exists(CHROMIUM) and os.path.exists(DRIVER)
except ImportError:  # pragma: no cover - the test extra installs it
    HAVE = False
if not HAVE:
    pytest.skip("chromium/chromedriver not installed: `make tools` installs them where apt-get works",
                allow_module_level=True)


@pytest.fixture(scope="module")
def network(tmp_path_factory):
    """oap-localnet on free ports, with one receipt anchored and one key revoked."""
    tmp = tmp_path_factory.mktemp("net")
    base = random.randrange(20000, 40000, 10)
    net = subprocess.Popen([str(BIN / "oap-localnet"), "--data", str(tmp / "data"), "--log-port", str(base),
                            "--registry-port", str(base + 9)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, start_new_session=True, cwd=tmp)
    up = threading.Event()
    lines: list[str] = []

    def read() -> None:
        assert net.stdout is not None
        for line in net.stdout:
            lines.append(line)
            if "network is up" in line:
                up.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert up.wait(90), "".join(lines[-30:])
        log, registry, witness = f"http://127.0.0.1:{base}", f"http://127.0.0.1:{base + 9}", f"http://127.0.0.1:{base + 1}"
        env = {**os.environ, "OAP_LOG_URL": log, "OAP_REGISTRY_URL": registry}

        def cli(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([str(BIN / args[0]), *args[1:]], cwd=tmp, env=env, capture_output=True,
                                  text=True, timeout=120)

        assert cli("oap-log", "keygen", "--name", "ui.test", "--out", "me.key").returncode == 0
        (tmp / "receipt.json").write_text(json.dumps({"receipt_id": "urn:oap:receipt:ui", "type": "invocation",
                                                      "input_hash": "sha256:" + "ab" * 32}))
        r = cli("oap-log", "add", "receipt.json", "--key", "me.key")
        assert r.returncode == 0, r.stderr
        index = json.loads(r.stdout)["index"]
        agent = cli("oap-registry", "keygen", "--out", "agent.key").stdout.strip()
        r = cli("oap-registry", "revoke", "--key", "agent.key", "--kind", "key", "--reason", "key_compromise")
        assert r.returncode == 0, r.stderr
        yield {"log": log, "registry": registry, "witness": witness, "index": index, "agent": agent, "dir": tmp,
               "policy": (tmp / "data" / "log" / "log.policy").read_text(),
               "vkey": (tmp / "data" / "log" / "log.vkey").read_text().strip()}
    finally:
        os.killpg(net.pid, signal.SIGINT)
        net.wait(60)


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,2200",
                "--disable-gpu", "--no-first-run", "--disable-extensions", "--disable-background-networking"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def wait_verdict(driver, element_id: str, states: tuple[str, ...] = ("pass", "fail", "revoked", "unknown")) -> tuple[str, str]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    el = driver.find_element(By.ID, element_id)
    WebDriverWait(driver, 30).until(lambda d: el.get_attribute("data-state") in states)
    return el.get_attribute("data-state"), el.text


def no_console_errors(driver) -> None:
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == [], severe


def shot(driver, tmp_path: Path, name: str) -> None:
    out = Path(os.environ.get("OAP_UI_SHOTS", tmp_path))
    out.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(out / f"{name}.png"))


def set_text(driver, element_id: str, text: str) -> None:
    """Set a field as a user would (paste), firing its input event."""
    driver.execute_script("const e = document.getElementById(arguments[0]); e.value = arguments[1];"
                          "e.dispatchEvent(new Event('input'));", element_id, text)


def test_the_log_view_and_an_anchored_entry_verify_in_the_browser(network, browser, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(f"{network['log']}/ui/?index={network['index']}")
    state, text = wait_verdict(browser, "log-verdict")
    assert state == "pass" and "VERIFIED checkpoint" in text and "witness quorum met" in text, text
    assert network["vkey"] in text
    rows = browser.find_elements(By.CSS_SELECTOR, "#cosignatures tbody tr")
    assert len(rows) >= 2 and all("ago" in r.text for r in rows)  # each witness's cosignature and its age
    state, text = wait_verdict(browser, "entry-verdict", ("pass", "fail"))
    assert state == "pass", text
    assert f"VERIFIED: entry {network['index']}" in text and network["vkey"] in text and "oap.localhost/log" in text
    shot(browser, tmp_path, "log-and-entry")
    # looked up by the receipt itself, hashed in the page (JCS + SHA-256)
    set_text(browser, "entry-index", "")
    set_text(browser, "entry-receipt", (network["dir"] / "receipt.json").read_text())
    browser.find_element(By.CSS_SELECTOR, "#entry-form button").click()
    state, text = wait_verdict(browser, "entry-verdict", ("pass", "fail"))
    assert state == "pass" and f"entry {network['index']}" in text, text
    no_console_errors(browser)


def test_a_wrong_key_or_a_missing_quorum_shows_the_specific_failure(network, browser, tmp_path):
    from selenium.webdriver.common.by import By

    from tlog.formats.keys import CosignatureSigner, Signer

    browser.get(f"{network['log']}/ui/")
    wait_verdict(browser, "log-verdict")
    other = Signer.generate("oap.localhost/log")
    browser.find_element(By.ID, "policy-box").click()
    set_text(browser, "policy", f"log {other.vkey}\nquorum none\n")
    set_text(browser, "entry-index", str(network["index"]))
    browser.find_element(By.CSS_SELECTOR, "#entry-form button").click()
    state, text = wait_verdict(browser, "entry-verdict", ("pass", "fail"))
    assert state == "fail" and "checkpoint is not signed by a log in the policy" in text, text
    shot(browser, tmp_path, "wrong-key")
    stranger = CosignatureSigner("stranger.example", os.urandom(32))
    set_text(browser, "policy", f"log {network['vkey']}\nwitness s {stranger.vkey}\nquorum s\n")
    browser.find_element(By.CSS_SELECTOR, "#entry-form button").click()
    state, text = wait_verdict(browser, "entry-verdict", ("pass", "fail"))
    assert state == "fail" and "witness quorum not met" in text, text
    shot(browser, tmp_path, "quorum-not-met")
    no_console_errors(browser)


def test_bundle_check_gives_oap_log_verify_verdicts(network, browser, tmp_path):
    from selenium.webdriver.common.by import By

    bundle = (network["dir"] / "receipt.json.tlog-proof").read_text()
    browser.get(f"{network['log']}/ui/?view=bundle#bundle")
    wait_verdict(browser, "log-verdict")
    set_text(browser, "bundle-text", bundle)
    set_text(browser, "bundle-receipt", (network["dir"] / "receipt.json").read_text())
    browser.find_element(By.ID, "bundle-check").click()
    state, text = wait_verdict(browser, "bundle-verdict", ("pass", "fail"))
    assert state == "pass" and text.startswith(f"OK: index {network['index']} in oap.localhost/log"), text
    assert "anchors the receipt given" in text
    lines = bundle.split("\n")
    assert lines[2].startswith("index ") and lines[3]
    lines[3] = ("A" if lines[3][0] != "A" else "B") + lines[3][1:]  # one proof hash changed
    set_text(browser, "bundle-text", "\n".join(lines))
    browser.find_element(By.ID, "bundle-check").click()
    state, text = wait_verdict(browser, "bundle-verdict", ("pass", "fail"))
    assert state == "fail" and "inclusion proof" in text, text
    set_text(browser, "bundle-text", bundle)
    set_text(browser, "bundle-receipt", '{"receipt_id": "urn:oap:receipt:other"}')
    browser.find_element(By.ID, "bundle-check").click()
    state, text = wait_verdict(browser, "bundle-verdict", ("pass", "fail"))
    assert state == "fail" and "anchors a different receipt" in text, text
    shot(browser, tmp_path, "bundle")
    no_console_errors(browser)


def test_registry_status_and_commit_anchors_verify_in_the_page(network, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{network['registry']}/ui/?log={network['log']}#registry")
    wait_verdict(browser, "log-verdict")
    set_text(browser, "status-id", network["agent"])
    browser.find_element(By.CSS_SELECTOR, "#registry-form button").click()
    state, text = wait_verdict(browser, "status-verdict")
    for _ in range(20):  # the revocation shows once a status epoch covers its commit
        if state == "revoked":
            break
        browser.find_element(By.CSS_SELECTOR, "#registry-form button").click()
        state, text = wait_verdict(browser, "status-verdict")
    assert state == "revoked" and "REVOKED (verified)" in text and "log anchors verified" in text, text
    assert "fresh until" in text
    records = browser.find_element(By.ID, "principal-records").text
    assert "revocation key" in records and "verified" in records and network["agent"] in records, records
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#commits tbody tr"))
    rows = browser.find_elements(By.CSS_SELECTOR, "#commits tbody tr")
    assert rows and all("verified in the log" in r.text for r in rows), [r.text for r in rows]
    shot(browser, tmp_path, "registry")
    no_console_errors(browser)


def test_witness_view_shows_its_logs_and_refusals(network, browser, tmp_path):
    import urllib.request

    from selenium.webdriver.common.by import By

    # a refused add-checkpoint (a log this witness does not follow) to show
    req = urllib.request.Request(f"{network['witness']}/add-checkpoint", method="POST",
                                 data=b"old 0\n\nnot.followed/log\n1\nAAAA\n\n")
    try:
        urllib.request.urlopen(req, timeout=10)
    except urllib.error.HTTPError as e:
        assert e.code in (400, 403, 404)
    browser.get(f"{network['witness']}/ui/#witness")
    state, text = wait_verdict(browser, "witness-verdict")
    assert state == "pass" and "1 log(s) followed" in text, text
    logs = browser.find_element(By.ID, "witness-logs").text
    assert "oap.localhost/log" in logs and "ago" in logs
    refusals = browser.find_element(By.ID, "witness-refusals").text
    assert "not.followed/log" in refusals
    shot(browser, tmp_path, "witness")
    no_console_errors(browser)
