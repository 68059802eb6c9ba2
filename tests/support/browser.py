"""Headless Chromium under chromedriver (selenium), for the explorer's tests: both die
with the test process (chromedriver is its child; Chromium, started by chromedriver,
runs through a wrapper that ties it to chromedriver)."""
from __future__ import annotations

import signal
from pathlib import Path

from tlog.runtime import children

from tests.support.tools import need


def start_browser(workdir: Path, *, window: str = "1280,2200", timeout: float = 60):
    """A selenium Chrome driver; `workdir` holds the Chromium wrapper. Call it on the main thread.
    Skipped, or failed under OAP_REQUIRE_ALL_TOOLS, without Chromium (tests.support.tools)."""
    chromium, chromedriver = need("chromium")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(children.write_wrapper(workdir / "chromium", chromium))
    for arg in (f"--window-size={window}", "--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--disable-gpu", "--no-first-run", "--disable-extensions", "--disable-background-networking"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    popen_kw = {"preexec_fn": pre} if (pre := children.preexec(signal.SIGTERM)) else {}
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver, popen_kw=popen_kw), options=opts)
    driver.set_page_load_timeout(timeout)
    driver.set_script_timeout(timeout)
    return driver
