"""The explorer (/ui/) in a real browser: headless Chromium from the system packages,
driven by selenium, against a real local network (`oap-localnet`: a log, three
witnesses with quorum 2, a registry, each shipping the network's policy with its
explorer) and against single logs the tests start, on 127.0.0.1. The verdicts come from
the page's own verification (WebCrypto): a green result means the math held in the
browser against a pinned policy; the failures are the specific reasons the verifiers
give. Every test also reads the browser's console: no SEVERE entry is allowed.

Screenshots of each view at 1400 and 360 px are written under pytest's tmp dir, and
copied to $OAP_UI_SHOTS when it is set (for review)."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler
from typing import ClassVar

import pytest

from tests.ui.browser import (
    AXE,
    AXE_SHA256,
    BIN,
    FINAL,
    STATIC,
    audit,
    click,
    fetch_json,
    fresh,
    http_server,
    keys_named,
    no_console_errors,
    no_green,
    open_page,
    rerun,
    set_text,
    shot,
    single_log,
    stale,
    state_of,
    text,
    wait_for,
    wait_verdict,
)

pytestmark = [pytest.mark.slow, pytest.mark.needs("chromium")]


def reply(handler: BaseHTTPRequestHandler, status: int, body: bytes, ctype: str = "") -> None:
    """Answer with `body`, readable by any page (CORS), as the test hosts here do."""
    handler.send_response(status)
    if ctype:
        handler.send_header("Content-Type", ctype)
    handler.send_header("Content-Length", str(len(body)))
    handler.send_header("Access-Control-Allow-Origin", "*")
    handler.end_headers()
    handler.wfile.write(body)


def lying_log(upstream: str):
    """A proxy in front of the log that changes one hash of every inclusion proof it serves."""

    class Proxy(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's name
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
            reply(self, status, body, ctype)

        def log_message(self, *args) -> None:
            pass

    return Proxy


def mirror_of(upstream: dict):
    """A read-only copy of a log: its checkpoint and tiles, as a tlog-mirror serves them
    (here passed through from `upstream["url"]`, set once that log is up)."""

    class Mirror(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's name
            if self.path != "/checkpoint" and not self.path.startswith("/tile/"):
                self.send_error(404)
                return
            try:
                with urllib.request.urlopen(upstream["url"] + self.path, timeout=10) as r:
                    status, body = r.status, r.read()
            except urllib.error.HTTPError as e:
                status, body = e.code, e.read()
            reply(self, status, body)

        def log_message(self, *args) -> None:
            pass

    return Mirror


def serving(files: dict[str, str]):
    """A static host of text files (policies) that any page may read (CORS)."""

    class Files(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's name
            if self.path not in files:
                self.send_error(404)
                return
            reply(self, 200, files[self.path].encode(), "text/plain")

        def log_message(self, *args) -> None:
            pass

    return Files


ROOT = STATIC.parents[2]
LIB_CSP = ("default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src data:; "
           "base-uri 'none'; form-action 'none'; require-trusted-types-for 'script'; trusted-types 'none'")
NO_SHIPPED_POLICY = "trust.policy - Failed to load resource"  # a static host without one answers 404


class LibChecks(SimpleHTTPRequestHandler):
    """tests/ui/js (the checks and their fixtures), the W3C vectors of tests/formats/vectors and the
    verifiers they import, under a strict CSP."""

    extensions_map: ClassVar[dict[str, str]] = {**SimpleHTTPRequestHandler.extensions_map, ".js": "text/javascript", ".mjs": "text/javascript"}

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, directory=str(ROOT), **kwargs)

    def send_head(self):
        if not self.path.startswith(("/tests/ui/js/", "/tlog/ui/static/lib/", "/tests/formats/vectors/")) \
                or ".." in self.path:
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

    extensions_map: ClassVar[dict[str, str]] = {**SimpleHTTPRequestHandler.extensions_map, ".js": "text/javascript"}

    def log_message(self, *args) -> None:
        pass


def views(net: dict) -> dict[str, tuple[str, str]]:
    """Every view of the network's explorer: (query, the verdict element it ends in)."""
    q = urllib.parse.quote
    return {
        "log": ("view=log", "log-verdict"),
        "entries": ("view=entries", "entries-verdict"),
        "entry": (f"view=entry&index={net['index']}", "entry-verdict"),
        "search": (f"view=search&q={q(net['signer'])}", "search-verdict"),
        "bundle": ("view=bundle", "bundle-verdict"),
        "registry": ("view=registry&before=4", "registry-verdict"),
        "principal": (f"view=principal&id={q(net['agent'])}", "status-verdict"),
        "commit": ("view=commit&seq=1", "commit-verdict"),
        "witness": (f"view=witness&w={q(net['witness'])}", "witness-verdict"),
        "trust": ("view=trust", "trust-state"),
    }


# --- trust ------------------------------------------------------------------------------------

def test_make_run_pages_find_every_service_and_a_shared_entry_link_verifies_pinned(network, browser, tmp_path):
    """The done criterion: /ui/ on the log shows the log, its witnesses and its registry with no
    URL typed, and a shared link to the tour's entry opens verified against a pinned policy
    (the one the operator shipped with the page)."""
    from selenium.webdriver.common.by import By

    fresh(browser, f"{network['log']}/ui/")
    state, said = wait_verdict(browser, "log-verdict")
    assert state == "pass" and "VERIFIED" in said and network["vkey"] in keys_named(browser, "log-verdict"), said
    assert "the policy shipped with this page by its operator" in said
    assert "cosignatures" in said and "quorum local-witnesses met" in said, said
    assert state_of(browser, "trust-bar") == "pass"
    neighbours = text(browser, "neighbours")
    assert network["registry"] in neighbours and network["witness"] in neighbours, neighbours
    assert neighbours.count("cosigned this checkpoint") >= 2, neighbours
    rows = browser.find_elements(By.CSS_SELECTOR, "#cosignatures tbody tr")
    # one row per witness key (witness 1 also cosigns with ML-DSA-44, verified in the browser)
    # and one for the mirror the log pushes to, marked as a mirror's
    assert len(rows) == 5 and sum(r.get_attribute("data-state") == "pass" for r in rows) >= 3
    assert [r.get_attribute("data-kind") for r in rows].count("mirror") == 1
    assert [r.get_attribute("data-kind") for r in rows].count("witness") == 4
    # the registry and witness tabs are filled from what the log names
    click(browser, "#nav-registry")
    state, said = wait_verdict(browser, "registry-verdict")
    assert state == "pass" and "anchor(s) verified" in said, said
    click(browser, "#nav-witness")
    state, said = wait_verdict(browser, "witness-verdict")
    assert state == "pass" and "the pinned policy names (witness w1" in said, said
    # the shared link, in a browser that has never seen this log
    link = f"{network['log']}/ui/?view=entry&index={network['index']}"
    fresh(browser, link)
    state, said = wait_verdict(browser, "entry-verdict")
    assert state == "pass" and f"entry {network['index']} is in oap.localhost/log" in said, said
    assert "inclusion proof" in said and "entry signature" in said and network["signer"][:16] in said, said
    facts = text(browser, "entry-facts")
    assert "logged at" in facts and "claimed time2026-05-02T10:00:00.215Z" in facts, facts
    assert text(browser, "entry-proof").startswith("c2sp.org/tlog-proof@v1")
    no_console_errors(browser)


def test_the_mirrors_cosignature_shows_as_a_mirrors(network, browser, tmp_path):
    """make run's log pushes to its mirror; the shipped policy lists it on a `mirror` line, and
    the log's checkpoint, once the mirror stored its entries, carries its cosignature: the
    page verifies it and shows it as a mirror's (outside the quorum)."""
    from selenium.webdriver.common.by import By

    assert "\nmirror m1 mirror.localhost+" in network["policy"]

    def mirror_row(b):
        fresh(b, f"{network['log']}/ui/")
        state, said = wait_verdict(b, "log-verdict")
        row = b.find_element(By.CSS_SELECTOR, '#cosignatures tbody tr[data-kind="mirror"]')
        return (state, said, row.text) if row.get_attribute("data-state") == "pass" else None

    state, said, row = wait_for(browser, mirror_row, "the mirror's cosignature verified on the log's checkpoint")
    assert state == "pass" and "mirror m1 ✓" in said and "quorum local-witnesses met" in said, said
    assert row.startswith("mirror m1") and "verified (stored the entries)" in row, row
    shot(browser, tmp_path, "mirror-cosignature-1400")
    no_console_errors(browser)


def test_an_unpinned_log_never_shows_green_until_trusted_on_first_use(network, browser, tmp_path):
    """The same files from a static host that ships no policy: every view says what the log
    says about itself, nothing is green; trusting the log's key on first use pins it."""
    q = urllib.parse.quote
    with http_server(partial(StaticHost, directory=str(STATIC))) as host:
        base = f"{host}/index.html?log={q(network['log'])}"
        fresh(browser, base)
        for name, (query, verdict) in views(network).items():
            open_page(browser, f"{base}&{query}")
            state, said = wait_verdict(browser, verdict, (*FINAL, "idle"))
            assert state != "pass", (name, said)
            no_green(browser)
            if name in ("log", "entry", "entries", "registry", "commit"):
                assert state == "unpinned" and "not checked against a key you trust" in said, (name, said)
            if name == "principal":
                assert state == "revoked" and "NOT PINNED" in said, said  # revoked, and said to be unpinned
        assert state_of(browser, "trust-bar") == "unpinned"
        shot(browser, tmp_path, "unpinned-1400")
        open_page(browser, f"{base}&view=log")
        stale(browser, "log-verdict")
        click(browser, "#tofu")  # trust on first use: the log's own policy, remembered
        state, said = wait_verdict(browser, "log-verdict")
        assert state == "pass" and "trusted on first use" in said, said
        open_page(browser, f"{base}&view=entry&index={network['index']}")  # remembered across visits
        assert wait_verdict(browser, "entry-verdict")[0] == "pass"
        assert state_of(browser, "trust-bar") == "pass"
    no_console_errors(browser, allowed=(NO_SHIPPED_POLICY,))


def test_a_changed_key_for_a_known_origin_is_flagged(network, browser, tmp_path):
    """Two logs with one origin and two keys: the second is refused against the key trusted on
    first use, and the page says loudly that the key changed (also when nothing was pinned)."""
    with single_log(tmp_path / "c", "keys.test/log", 3) as c, single_log(tmp_path / "d", "keys.test/log", 3) as d:
        assert c.vkey != d.vkey
        page = f"{network['log']}/ui/"
        fresh(browser, f"{page}?log={c.url}")
        assert wait_verdict(browser, "log-verdict")[0] == "unpinned"
        # unpinned, but seen: another key for the same origin is flagged
        open_page(browser, f"{page}?log={d.url}")
        state, said = wait_verdict(browser, "log-verdict")
        assert state == "fail" and "log key changed" in said, said
        alarm = wait_for(browser, lambda b: b.find_element("css selector", "#alarms [data-kind='key-changed']"), "an alarm")
        assert "KEY CHANGED for keys.test/log" in alarm.text and c.vkey in alarm.text and d.vkey in alarm.text
        shot(browser, tmp_path, "key-changed-unpinned-1400")
        # pinned on first use: the other key is refused outright
        fresh(browser, f"{page}?log={c.url}")
        stale(browser, "log-verdict")
        click(browser, "#tofu")
        assert wait_verdict(browser, "log-verdict")[0] == "pass"
        open_page(browser, f"{page}?log={d.url}")
        state, said = wait_verdict(browser, "log-verdict")
        assert state == "fail" and "not signed by a log key of the policy" in said, said
        assert c.vkey in keys_named(browser, "log-verdict")  # the key it was checked against
        alarm = wait_for(browser, lambda b: b.find_element("css selector", "#alarms [data-kind='key-changed']"), "an alarm")
        assert "trusted on first use names" in alarm.text and d.vkey in alarm.text, alarm.text
        assert browser.find_element("id", "alarms").get_attribute("role") == "alert"
        shot(browser, tmp_path, "key-changed-pinned-1400")
        no_console_errors(browser)
        browser.get("about:blank")  # before the logs stop: the page polls them


def test_an_inconsistent_pair_of_checkpoints_is_the_loudest_thing_on_the_page(network, browser, tmp_path):
    """Two logs with one origin and one key but different entries (a fork): the second
    checkpoint cannot extend the first (the consistency proof from its tiles fails), the page
    says so above everything and keeps the evidence across visits until dismissed."""
    with single_log(tmp_path / "a", "fork.test/log", 3) as a, \
            single_log(tmp_path / "b", "fork.test/log", 5, key_from=tmp_path / "a", salt=b"fork") as b:
        assert a.vkey == b.vkey
        page = f"{network['log']}/ui/"
        fresh(browser, f"{page}?log={a.url}")
        assert wait_verdict(browser, "log-verdict")[0] == "unpinned"
        open_page(browser, f"{page}?log={b.url}")
        state, said = wait_verdict(browser, "log-verdict")
        assert state == "fail" and "INCONSISTENT" in said and "two different histories" in said, said
        alarm = wait_for(browser, lambda d: d.find_element("css selector", "#alarms [data-kind='inconsistent']"), "an alarm")
        assert "INCONSISTENT: fork.test/log has shown two different histories" in alarm.text
        assert alarm.find_element("css selector", "button.download").text == "download the evidence"
        # the loudest: first in the page, above the trust line and every view
        first = browser.execute_script("return document.querySelector('header .alarm, main .verdict, #trust-bar').className")
        assert first == "alarm", first
        shot(browser, tmp_path, "inconsistent-1400")
        browser.set_window_size(360, 1600)
        shot(browser, tmp_path, "inconsistent-360")
        browser.set_window_size(1400, 1600)
        open_page(browser, f"{page}?view=entries")  # kept across visits, on every view
        assert browser.find_elements("css selector", "#alarms [data-kind='inconsistent']")
        browser.find_element("css selector", "#alarms [data-kind='inconsistent'] button.small").click()  # dismiss
        wait_for(browser, lambda d: not d.find_elements("css selector", "#alarms [data-kind='inconsistent']"), "dismissed")
        no_console_errors(browser)
        browser.get("about:blank")


def test_a_logs_mirrors_are_shown_and_checked_against_it(network, browser, tmp_path):
    """A log names its mirrors: the page checks each mirror's checkpoint as the log's (same
    pin) and proves the two consistent; a mirror serving another history under the log's key
    fails, and is the alarm."""
    from selenium.webdriver.common.by import By

    honest_up, forked_up = {}, {}
    with http_server(mirror_of(honest_up)) as honest, http_server(mirror_of(forked_up)) as forked, \
            single_log(tmp_path / "m", "mirrored.test/log", 4, mirrors=(honest, forked)) as log, \
            single_log(tmp_path / "f", "mirrored.test/log", 6, key_from=tmp_path / "m", salt=b"f") as fork:
        honest_up["url"], forked_up["url"] = log.url, fork.url
        fresh(browser, f"{network['log']}/ui/?log={log.url}")
        click(browser, "#tofu")
        assert wait_verdict(browser, "log-verdict", ("pass", "fail"))[0] == "pass"

        def mirrors(b):
            cells = b.find_elements(By.CSS_SELECTOR, "#neighbours .verdict.compact")
            states = [c.get_attribute("data-state") for c in cells]
            return cells if len(cells) == 2 and all(st in FINAL for st in states) else None

        cells = wait_for(browser, mirrors, "both mirrors checked")
        got = {c.get_attribute("data-state"): c.text for c in cells}
        assert set(got) == {"pass", "fail"}, got
        assert "the mirror and the log disagree" in got["fail"] or "INCONSISTENT" in got["fail"], got
        rows = {r.find_elements(By.CSS_SELECTOR, "td")[1].text: r.text for r in browser.find_elements(By.CSS_SELECTOR, "#neighbours tbody tr")
                if "mirror" in r.text}
        assert set(rows) == {honest, forked} and "VERIFIED" in rows[honest] and "FAILED" in rows[forked], rows
        wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#alarms [data-kind='inconsistent']"), "the alarm")
        shot(browser, tmp_path, "mirrors-1400")
        no_console_errors(browser)
        browser.get("about:blank")


def test_a_wrong_key_or_a_missing_quorum_shows_the_specific_failure(network, browser, tmp_path):
    """A policy the user pins wins over the operator's: checked against it, the log fails with
    the specific reason and names the key it was checked against."""
    from tlog.formats.keys import CosignatureSigner, Signer

    fresh(browser, f"{network['log']}/ui/?view=trust")
    other = Signer.generate("oap.localhost/log")
    set_text(browser, "policy", f"log {other.vkey}\nquorum none\n")
    stale(browser, "log-verdict")
    click(browser, "#policy-pin")
    state, said = wait_verdict(browser, "log-verdict")
    assert state == "fail" and "not signed by a log key of the policy" in said, said
    assert other.vkey in keys_named(browser, "log-verdict") and "the policy you pasted" in said
    open_page(browser, f"{network['log']}/ui/?view=entry&index={network['index']}")
    state, said = wait_verdict(browser, "entry-verdict")
    assert state == "fail" and "log signature" in said and other.vkey in keys_named(browser, "entry-verdict"), said
    shot(browser, tmp_path, "wrong-key-1400")
    stranger = CosignatureSigner("stranger.example", os.urandom(32))
    open_page(browser, f"{network['log']}/ui/?view=trust")
    set_text(browser, "policy", network["policy"].replace("quorum local-witnesses", "")
             + f"witness s {stranger.vkey}\ngroup strict all w1 w2 s\nquorum strict\n")
    stale(browser, "log-verdict")
    click(browser, "#policy-pin")
    state, said = wait_verdict(browser, "log-verdict")
    assert state == "fail" and "quorum strict NOT met" in said, said
    open_page(browser, f"{network['log']}/ui/?view=entry&index={network['index']}")
    state, said = wait_verdict(browser, "entry-verdict")
    assert state == "fail" and "quorum strict NOT met" in said, said
    shot(browser, tmp_path, "quorum-not-met-1400")
    no_console_errors(browser)


def test_a_policy_loaded_from_a_file_or_a_url_pins_the_log_and_a_wrong_key_fails(network, browser, tmp_path):
    """A policy loaded from a file (#policy-file) or fetched from a URL (#policy-url) and pinned
    is the one the log and its entries are checked against (the verdict names it, not the
    operator's): the log's own policy verifies, one with another log key fails, with the reason."""
    from selenium.webdriver.common.by import By

    from tlog.formats.keys import Signer

    other = Signer.generate("oap.localhost/log")
    wrong = f"log {other.vkey}\nquorum none\n"
    (tmp_path / "log.policy").write_text(network["policy"])
    (tmp_path / "wrong.policy").write_text(wrong)
    entry = f"{network['log']}/ui/?view=entry&index={network['index']}"
    with http_server(serving({"/log.policy": network["policy"], "/wrong.policy": wrong})) as host:

        def from_file(name: str) -> tuple[str, str]:
            browser.find_element(By.ID, "policy-file").send_keys(str(tmp_path / name))
            wait_for(browser, lambda b: text(b, "policy-said") == f"Loaded {name}: check it, then pin it.", f"{name} loaded")
            return "the policy file you loaded", f"({name})"

        def from_url(name: str) -> tuple[str, str]:
            set_text(browser, "policy-url", f"{host}/{name}")
            click(browser, "#policy-fetch")
            wait_for(browser, lambda b: text(b, "policy-said") == f"Fetched {host}/{name}: check it, then pin it.", f"{name} fetched")
            return "the policy you loaded from a URL", f"({host}/{name})"

        for load in (from_file, from_url):
            fresh(browser, f"{network['log']}/ui/?view=trust")
            source, detail = load("log.policy")
            assert browser.find_element(By.ID, "policy").get_attribute("value") == network["policy"]
            state, said = rerun(browser, "log-verdict", "#policy-pin")
            assert state == "pass" and f"checked against {source}" in said and detail in said, (load.__name__, said)
            assert network["vkey"] in keys_named(browser, "log-verdict")
            open_page(browser, entry)
            state, said = wait_verdict(browser, "entry-verdict")
            assert state == "pass" and source in said and f"entry {network['index']} is in" in said, (load.__name__, said)
            # the same way, a policy naming another key for the log: the pin wins over the operator's
            open_page(browser, f"{network['log']}/ui/?view=trust")
            source, detail = load("wrong.policy")
            state, said = rerun(browser, "log-verdict", "#policy-pin")
            assert state == "fail" and "not signed by a log key of the policy" in said, (load.__name__, said)
            assert source in said and other.vkey in keys_named(browser, "log-verdict"), (load.__name__, said)
            open_page(browser, entry)
            state, said = wait_verdict(browser, "entry-verdict")
            assert state == "fail" and "log signature" in said and other.vkey in keys_named(browser, "entry-verdict"), said
            shot(browser, tmp_path, f"wrong-key-{load.__name__}-1400")
    no_console_errors(browser)


def test_a_tampered_proof_from_a_lying_log_fails_in_the_page(network, browser, tmp_path):
    with http_server(lying_log(network["log"])) as liar:
        fresh(browser, f"{network['log']}/ui/?log={liar}&view=entry&index={network['index']}")
        state, said = wait_verdict(browser, "entry-verdict")
        assert state == "fail" and "FAILED: inclusion proof does not lead to the checkpoint root" in said, said
        assert network["vkey"] in keys_named(browser, "entry-verdict")  # what it was checked against
        assert wait_verdict(browser, "log-verdict")[0] in ("pass", "idle")  # its checkpoint is the real one
        shot(browser, tmp_path, "tampered-proof-1400")
    no_console_errors(browser)


# --- links, search, browsing ------------------------------------------------------------------

def test_every_view_reopened_from_its_url_shows_the_same_result(network, browser, tmp_path):
    """Each view is a URL: opened twice (the second time from the address bar, a fresh load),
    it gives the same verdict about the same things."""
    probes = {
        "entries": "[...document.querySelectorAll('#entries-table tbody tr td:first-child')].map(e => e.textContent).join(',')",
        "entry": "document.getElementById('entry-facts').textContent.replace(/\\(.*? ago\\)/g, '')",
        "search": "[...document.querySelectorAll('#search-results tbody tr td:first-child')].map(e => e.textContent).join(',')",
        "principal": "document.querySelector('#status-verdict .headline').textContent",
        "commit": "document.getElementById('commit-facts').textContent.replace(/\\(.*? ago\\)/g, '')",
        "witness": "document.querySelector('#witness-verdict .headline').textContent",
        "registry": "[...document.querySelectorAll('#commits tbody tr td:first-child')].map(e => e.textContent).join(',')",
    }
    size = fetch_json(f"{network['log']}/v1/info")["tree_size"]
    every = {**views(network), "entries": (f"view=entries&before={size}", "entries-verdict")}
    fresh(browser, f"{network['log']}/ui/")
    for name, (query, verdict) in every.items():
        url = f"{network['log']}/ui/?{query}"
        seen = []
        for _ in range(2):
            open_page(browser, url)
            state, _ = wait_verdict(browser, verdict, (*FINAL, "idle"))
            probe = browser.execute_script(f"return {probes[name]};") if name in probes else ""
            seen.append((state, probe, browser.execute_script("return document.body.dataset.view")))
        assert seen[0] == seen[1], (name, seen)
        assert seen[0][2] == name and seen[0][0] != "fail", (name, seen)
    # and the links between them: an entry's signer opens the search for it, its index the entry
    open_page(browser, f"{network['log']}/ui/?view=entry&index={network['index']}")
    wait_verdict(browser, "entry-verdict")
    stale(browser, "search-verdict")
    browser.find_element("css selector", "#entry-facts a[href*='view=search']").click()
    state, said = wait_verdict(browser, "search-verdict")
    assert "view=search" in browser.current_url and str(network["index"]) in text(browser, "search-results")
    stale(browser, "entry-verdict")
    browser.find_element("css selector", f"#search-results a[href$='index={network['second']}']").click()
    state, said = wait_verdict(browser, "entry-verdict")
    assert state == "pass" and f"entry {network['second']} is in" in said, said
    browser.back()  # history works: the search again, from its URL
    state, _ = wait_verdict(browser, "search-verdict")
    assert browser.execute_script("return document.body.dataset.view") == "search"
    no_console_errors(browser)


def test_search_by_signer_finds_the_tours_receipts(network, browser, tmp_path):
    q = urllib.parse.quote
    fresh(browser, f"{network['log']}/ui/?view=search&q={q(network['signer'])}")
    state, said = wait_verdict(browser, "search-verdict")
    assert state == "info" and "2 receipt(s) signed by" in said, said
    results = text(browser, "search-results")
    assert str(network["index"]) in results and str(network["second"]) in results, results
    assert "2026-05-02T10:00:00.215Z" in results  # the receipt's claimed time, beside the log's
    shot(browser, tmp_path, "search-1400")
    # a time range: nothing was logged before 2000
    open_page(browser, f"{network['log']}/ui/?view=search&q={q(network['signer'])}&until=2000-01-01T00:00:00Z")
    state, said = wait_verdict(browser, "search-verdict")
    assert state == "unknown" and "nothing found" in said, said
    # the receipt's hash and id find its entry too
    rh = fetch_json(f"{network['log']}/v1/entries/{network['index']}")["entry"]["receipt_hash"]
    for query in (rh, "urn:oap:receipt:ui", str(network["index"])):
        open_page(browser, f"{network['log']}/ui/?view=search&q={q(query)}")
        wait_verdict(browser, "search-verdict")
        assert f"index={network['index']}" in browser.execute_script(
            "return [...document.querySelectorAll('#search-results a')].map(a => a.href).join(' ')"), query
    no_console_errors(browser)


def test_a_leaf_hash_finds_its_entry_which_verifies_and_its_raw_links_are_the_services_json(network, browser, tmp_path):
    """The entry's leaf hash (base64 or hex) finds it, from the entry form's field and from the
    search; the entry verifies; its raw links are the log's JSON for what the page shows."""
    from selenium.webdriver.common.by import By

    q = urllib.parse.quote
    leaf = fetch_json(f"{network['log']}/v1/entries/{network['index']}")["leaf_hash"]
    hexleaf = base64.b64decode(leaf).hex()
    fresh(browser, f"{network['log']}/ui/?view=entry&leaf={q(leaf, safe='')}")
    state, said = wait_verdict(browser, "entry-verdict")
    assert state == "pass" and f"entry {network['index']} is in oap.localhost/log" in said, said
    assert leaf in keys_named(browser, "entry-facts")  # the leaf hash recomputed here is the one looked up
    # the raw links: the log's own answers for this entry and its proof
    raw = {a.text: a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "#entry-links a.raw")}
    assert set(raw) == {"raw entry", "raw proof"}, raw
    served = fetch_json(raw["raw entry"])
    facts = text(browser, "entry-facts")
    assert served["index"] == network["index"] and f"index{network['index']}" in facts, (served["index"], facts)
    assert served["leaf_hash"] == leaf and served["entry"]["signer"] == network["signer"]
    assert network["signer"] in keys_named(browser, "entry-facts")
    assert json.loads(text(browser, "entry-json")) == served["entry"]
    proof = fetch_json(raw["raw proof"])
    bundle = text(browser, "entry-proof")
    assert f"\nindex {network['index']}\n" in bundle and proof["inclusion_proof"], bundle
    assert all(f"\n{h}\n" in bundle for h in proof["inclusion_proof"]), (proof, bundle)
    # the search takes either form; its result links to the entry, which verifies
    for query in (hexleaf, leaf):
        open_page(browser, f"{network['log']}/ui/?view=search&q={q(query, safe='')}")
        state, said = wait_verdict(browser, "search-verdict")
        assert state == "info" and "1 entry has this leaf hash" in said, (query, said)
        listed = fetch_json(browser.find_element(By.CSS_SELECTOR, "#search-verdict a.raw").get_attribute("href"))
        assert listed == {"index": network["index"], "leaf_hash": leaf}, listed
    stale(browser, "entry-verdict")
    click(browser, f"#search-results a[href$='index={network['index']}']")
    state, said = wait_verdict(browser, "entry-verdict")
    assert state == "pass" and f"entry {network['index']} is in" in said, said
    # a leaf hash the log does not hold is said so, not an error
    open_page(browser, f"{network['log']}/ui/?view=search&q={'ab' * 32}")
    state, said = wait_verdict(browser, "search-verdict")
    assert state == "unknown" and "no entry has this leaf hash" in said, said
    no_console_errors(browser, allowed=("entries:lookup?leaf_hash=",))  # the 404 of the last lookup


def test_the_downloaded_proof_bundle_verifies_with_oap_log_and_copy_buttons_copy_the_full_value(network, browser, tmp_path):
    """The entry's "download .tlog-proof" saves the bundle shown, and `oap-log verify` accepts it
    with the log's policy (and refuses it with another key); its copy buttons put the whole
    value on the clipboard, not the shortened one shown."""
    from selenium.webdriver.common.by import By

    from tlog.formats.keys import Signer

    downloads = tmp_path / "downloads"
    downloads.mkdir()
    fresh(browser, f"{network['log']}/ui/?view=entry&index={network['index']}")
    assert wait_verdict(browser, "entry-verdict")[0] == "pass"
    shown = text(browser, "entry-proof")
    name = f"entry-{network['index']}.tlog-proof"
    browser.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    try:
        click(browser, "#entry-proof-actions button.download")
        saved = wait_for(browser, lambda b: (downloads / name).is_file() and not list(downloads.glob("*.crdownload"))
                         and (downloads / name).read_text(), f"{name} downloaded")
    finally:
        browser.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "default"})
    assert saved == shown and saved.startswith("c2sp.org/tlog-proof@v1"), saved
    (tmp_path / "log.policy").write_text(network["policy"])
    (tmp_path / "other.policy").write_text(f"log {Signer.generate('oap.localhost/log').vkey}\nquorum none\n")
    for policy, code in (("log.policy", 0), ("other.policy", 1)):
        r = subprocess.run([str(BIN / "oap-log"), "verify", str(downloads / name), "--policy", str(tmp_path / policy)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == code, (policy, r.stdout, r.stderr)
    # copy: the clipboard (granted to this origin) holds the full value, not the short form shown
    browser.execute_cdp_cmd("Browser.grantPermissions", {"origin": network["log"],
                                                         "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    try:
        values = browser.find_elements(By.CSS_SELECTOR, "#entry-facts .value")
        copied = {}
        for v in values:
            full = v.find_element(By.CSS_SELECTOR, "[title]").get_attribute("title")
            short = v.find_element(By.CSS_SELECTOR, "[title]").text
            button = v.find_element(By.CSS_SELECTOR, "button.copy")
            button.click()
            wait_for(browser, lambda b, button=button: button.get_attribute("data-copied") == "1", "copied")
            copied[full] = (short, clipboard(browser))
        assert network["signer"] in copied and len(copied) >= 3, copied
        assert all(got == full and short != full for full, (short, got) in copied.items()), copied
        click(browser, "#entry-proof-actions button.copy")
        wait_for(browser, lambda b: clipboard(b) == shown, "the proof bundle copied")
    finally:
        browser.execute_cdp_cmd("Browser.resetPermissions", {})
    no_console_errors(browser)


def clipboard(driver) -> str:
    return driver.execute_async_script("const done = arguments[arguments.length - 1];"
                                       "navigator.clipboard.readText().then(done, (e) => done('ERROR ' + e));")


def test_paging_reaches_entry_0_of_a_2000_entry_log(network, browser, tmp_path):
    """Newest first, a page at a time, read from entry bundles and tiles: every page verifies,
    and Older reaches entry 0."""
    from selenium.webdriver.common.by import By

    with single_log(tmp_path / "big", "big.test/log", 2000) as big:
        fresh(browser, f"{network['log']}/ui/?log={big.url}&view=entries")
        click(browser, "#tofu")
        state, said = wait_verdict(browser, "entries-verdict", ("pass", "fail"))
        assert state == "pass" and "entries 1900–1999" in said and "inclusion of 100 of 100 entries" in said, said
        shot(browser, tmp_path, "entries-1400")
        seen = set()
        for _ in range(25):
            first = browser.find_element(By.ID, "entries-table").get_attribute("data-first")
            seen.add(int(first))
            if first == "0":
                break
            stale(browser, "entries-verdict")
            browser.find_element(By.CSS_SELECTOR, "#entries-pager a[rel='next']").click()
            state, said = wait_verdict(browser, "entries-verdict")
            assert state == "pass", said
        assert 0 in seen and len(seen) == 20, sorted(seen)
        rows = browser.find_elements(By.CSS_SELECTOR, "#entries-table tbody tr")
        assert rows[-1].find_element(By.CSS_SELECTOR, "td").text == "0" and len(rows) == 100
        assert "view=entries&before=100" in browser.current_url
        # an index far back is one URL away, and its page verifies
        open_page(browser, f"{network['log']}/ui/?log={big.url}&view=entries&before=1000")
        state, said = wait_verdict(browser, "entries-verdict")
        assert state == "pass" and "entries 900–999" in said, said
        no_console_errors(browser)
        browser.get("about:blank")


# --- verdicts and the other views -------------------------------------------------------------

def test_bundle_check_gives_one_verdict_per_file_and_clears(network, browser, tmp_path):
    from selenium.webdriver.common.by import By

    bundle = (network["dir"] / "receipt.json.tlog-proof").read_text()
    receipt = (network["dir"] / "receipt.json").read_text()
    lines = bundle.split("\n")
    assert lines[2].startswith("index ") and lines[3]
    lines[3] = ("A" if lines[3][0] != "A" else "B") + lines[3][1:]  # one proof hash changed
    good, bad = tmp_path / "good.tlog-proof", tmp_path / "bad.tlog-proof"
    good.write_text(bundle)
    bad.write_text("\n".join(lines))
    fresh(browser, f"{network['log']}/ui/?view=bundle")
    browser.find_element(By.ID, "bundle-files").send_keys(f"{good}\n{bad}")
    wait_for(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#bundle-list li")) == 2, "two files listed")
    state, said = rerun(browser, "bundle-verdict", "#bundle-check")
    assert state == "fail" and "1 verified, 1 failed" in said, said
    cards = {c.get_attribute("data-file"): (c.get_attribute("data-state"), c.text)
             for c in browser.find_elements(By.CSS_SELECTOR, "#bundle-results .verdict")}
    assert cards["good.tlog-proof"][0] == "pass", cards  # a good bundle stays green beside a bad one
    assert cards["bad.tlog-proof"][0] == "fail" and "inclusion proof does not lead to the checkpoint root" in cards["bad.tlog-proof"][1]
    shot(browser, tmp_path, "bundle-1400")
    click(browser, "#bundle-clear")
    assert not browser.find_elements(By.CSS_SELECTOR, "#bundle-list li, #bundle-results .verdict")
    assert state_of(browser, "bundle-verdict") == "idle"
    # pasted, with the receipt it anchors; then the salted commitment with its salt
    set_text(browser, "bundle-text", bundle)
    set_text(browser, "bundle-receipt", receipt)
    state, said = rerun(browser, "bundle-verdict", "#bundle-check")
    assert state == "pass" and "1 verified, 0 failed" in said, said
    card = text(browser, "bundle-results")
    assert "the entry anchors the receipt given" in card and "cosignatures" in card and "entry signature" in card, card
    set_text(browser, "bundle-receipt", '{"receipt_id": "urn:oap:receipt:other"}')
    state, said = rerun(browser, "bundle-verdict", "#bundle-check")
    assert state == "fail" and "the bundle anchors a different receipt" in text(browser, "bundle-results")
    set_text(browser, "bundle-text", (network["dir"] / "privileged.tlog-proof").read_text())
    set_text(browser, "bundle-receipt", receipt)
    set_text(browser, "bundle-salt", (network["dir"] / "privileged.tlog-proof.salt.json").read_text())
    state, said = rerun(browser, "bundle-verdict", "#bundle-check")
    assert state == "pass" and "opens to the receipt given" in text(browser, "bundle-results")
    set_text(browser, "bundle-salt", json.dumps({"salt": "00" * 32}))
    state, said = rerun(browser, "bundle-verdict", "#bundle-check")
    assert state == "fail" and "the commitment does not open to this receipt with this salt" in text(browser, "bundle-results")
    no_console_errors(browser)


def test_registry_status_records_and_commit_anchors_verify_in_the_page(network, browser, tmp_path):
    from selenium.webdriver.common.by import By

    # served by the registry itself: it names its log, whose shipped policy pins it
    fresh(browser, f"{network['registry']}/ui/")
    assert browser.find_element(By.ID, "registry").is_displayed()
    state, said = wait_verdict(browser, "registry-verdict")
    assert state == "pass" and "against the pinned policy for oap.localhost/log" in said, said
    rows = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#commits tbody tr")]
    assert len(rows) >= 3 and all("verified in the log (index" in r for r in rows if "not in the log yet" not in r), rows
    assert any("revocation" in r and "urn:oap:revocation:" in r for r in rows), rows
    for who, want in ((network["agent"], "revoked"), (network["owner"], "pass")):
        open_page(browser, f"{network['registry']}/ui/?view=registry")
        set_text(browser, "status-id", who)
        state, said = rerun(browser, "status-verdict", "#registry-form button")
        assert state == want, said
        assert "signature by the pinned status key did:key:" in said and "anchored in the log" in said, said
        assert "fresh" in said and "for another" in said, said
        # the verdict is set before the principal's records are fetched and checked: wait for them
        records = wait_for(browser, lambda b: "verified" in text(b, "principal-records") and text(b, "principal-records"),
                           "the principal's records, checked")
        assert "verified" in records, records
        assert f"id={urllib.parse.quote(who, safe='')}" in browser.current_url or who in browser.current_url
        shot(browser, tmp_path, f"registry-{'good' if want == 'pass' else want}-1400")
    assert "key_event add_controller" in records, records  # the owner's key event
    # a commit from the list: its anchor checked row by row
    open_page(browser, f"{network['registry']}/ui/?view=registry")
    wait_verdict(browser, "registry-verdict")
    stale(browser, "commit-verdict")
    browser.find_element(By.CSS_SELECTOR, "#commits tbody tr:last-child a[href*='view=commit']").click()
    state, said = wait_verdict(browser, "commit-verdict")
    assert state == "pass" and "anchors this commit" in said and "inclusion proof" in said, said
    no_console_errors(browser)


def test_witness_view_shows_its_logs_and_refusals(network, browser, tmp_path):
    req = urllib.request.Request(f"{network['witness']}/add-checkpoint", method="POST",
                                 data=b"old 0\n\nnot.followed/log\n1\nAAAA\n\n")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=10)
    assert refused.value.code in (400, 403, 404)
    fresh(browser, f"{network['witness']}/ui/")
    state, said = wait_verdict(browser, "witness-verdict")
    assert state == "pass" and "1 log(s) followed" in said, said
    assert wait_verdict(browser, "log-verdict", (*FINAL, "idle"))[0] in ("pass", "idle")
    logs = text(browser, "witness-logs")
    assert "oap.localhost/log" in logs and "ago" in logs
    assert "verified: signed by oap.localhost/log, cosigned by witness-1.localhost" in logs, logs
    refusals = text(browser, "witness-refusals")
    assert "not.followed/log" in refusals and str(refused.value.code) in refusals
    listed = text(browser, "witness-list")
    # every witness key the log names (w1 has two), and the mirror its policy names
    assert listed.count("http://127.0.0.1:") == 5 and "mirror m1" in listed, listed
    shot(browser, tmp_path, "witness-1400")
    no_console_errors(browser)


def test_the_same_files_work_from_a_static_host(network, browser, tmp_path):
    """tlog/ui/static served as plain files from another origin, with the operator's
    trust.policy beside them (no CSP header: the page's own <meta> policy applies)."""
    site = tmp_path / "site"
    shutil.copytree(STATIC, site)
    (site / "trust.policy").write_text(network["policy"])
    with http_server(partial(StaticHost, directory=str(site))) as host:
        fresh(browser, f"{host}/index.html?log={network['log']}&view=entry&index={network['index']}")
        state, said = wait_verdict(browser, "entry-verdict")
        assert state == "pass" and f"entry {network['index']} is in" in said, said
        assert network["vkey"] in keys_named(browser, "entry-verdict")
        open_page(browser, f"{host}/index.html?log={network['log']}&view=registry")
        assert wait_verdict(browser, "registry-verdict")[0] == "pass"  # the registry, found from the log
        shot(browser, tmp_path, "static-host-registry-1400")
    no_console_errors(browser)


# --- layout and accessibility ------------------------------------------------------------------

def test_every_view_fits_360_px_has_a_dark_mode_and_passes_axe(network, browser, tmp_path):
    """At 360 px no page scrolls sideways; prefers-color-scheme: dark changes the colours;
    axe-core finds no serious or critical violation, light or dark. Screenshots of every view
    at 1400 and 360 px."""
    assert hashlib.sha256(AXE.read_bytes()).hexdigest() == AXE_SHA256, "tests/ui/vendor/axe-core/README.md"
    axe = AXE.read_text()
    fresh(browser, f"{network['log']}/ui/")
    try:
        for width in (1400, 360):
            browser.set_window_size(width, 1600)
            for name, (query, verdict) in views(network).items():
                open_page(browser, f"{network['log']}/ui/?{query}")
                wait_verdict(browser, verdict, (*FINAL, "idle"))
                sizes = browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth];")
                assert sizes[0] <= sizes[1], (name, width, sizes)
                shot(browser, tmp_path, f"{name}-{width}")
                if width == 360:
                    continue
                for scheme in ("light", "dark"):
                    browser.execute_cdp_cmd("Emulation.setEmulatedMedia",
                                            {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
                    bad = audit(browser, axe)
                    assert bad == [], (name, scheme, bad)
                browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        # dark mode: the background changes, and the page is drawn in it
        open_page(browser, f"{network['log']}/ui/?view=entry&index={network['index']}")
        wait_verdict(browser, "entry-verdict")
        bg = "return getComputedStyle(document.body).backgroundColor;"
        light = browser.execute_script(bg)
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        dark = browser.execute_script(bg)
        assert light != dark and dark == "rgb(18, 22, 29)", (light, dark)
        shot(browser, tmp_path, "entry-dark-360")
        browser.set_window_size(1400, 1600)
        shot(browser, tmp_path, "entry-dark-1400")
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        browser.set_window_size(1400, 1600)
    # keyboard: the skip link comes first, and every field has a label a screen reader reads
    unlabeled = browser.execute_script(
        "return [...document.querySelectorAll('input, textarea')].filter(e => !e.labels || !e.labels.length).map(e => e.id);")
    assert unlabeled == [], unlabeled
    from selenium.webdriver.common.keys import Keys
    browser.find_element("tag name", "body").send_keys(Keys.TAB)
    assert browser.switch_to.active_element.get_attribute("class") == "skip"
    no_console_errors(browser)


def test_the_verifiers_pass_their_checks_in_chromium(browser):
    """The checks of tests/ui/js (c2sp.md vectors, the Python code's verdicts and reasons,
    mutations, the tile reader) run in Chromium, under a CSP whose probes must all hold (no
    inline script or style, no eval, Trusted Types): WebCrypto Ed25519 and SHA-256 as the
    explorer uses them."""
    with http_server(LibChecks) as host:
        browser.get(f"{host}/tests/ui/js/browser.html")
        wait_for(browser, lambda d: d.title.startswith("DONE"), "the checks to finish", timeout=120)
        summary = text(browser, "summary")
        assert browser.find_element("id", "summary").get_attribute("data-state") == "pass", text(browser, "log")[-3000:]
    passed = int(summary.split()[0])
    assert passed >= 453 and " 0 failed" in summary and "CSP probes ok" in summary, summary
    assert "WebCrypto Ed25519: yes" in text(browser, "env")
    # the only console errors are the CSP refusals of the page's own probes
    severe = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    # (an inline script, an inline style, eval and an innerHTML string, each refused)
    assert len(severe) == 4 and all("violates the following Content Security Policy" in m
                                    or "This document requires 'Trusted" in m for m in severe), severe


def test_the_entry_a_log_served_is_the_one_verified(network):
    """What the page's lookups read: the entry's log time is the receipt index's, and the log's
    info names the neighbours the page shows (the explorer adds nothing the log did not say)."""
    entry = fetch_json(f"{network['log']}/v1/entries/{network['index']}")
    listed = fetch_json(f"{network['log']}/v1/receipts?signer={urllib.parse.quote(network['signer'])}")
    assert entry["logged_at"] == next(r["logged_at"] for r in listed["receipts"] if r["index"] == network["index"])
    info = fetch_json(f"{network['log']}/v1/info")
    assert info["registry_url"] == network["registry"] and info["public_url"] == network["log"]
    assert [w["name"] for w in info["witnesses"]] == ["w1", "w1-mldsa44", "w2", "w3"] and info["witnesses"][0]["url"] == network["witness"]
    with urllib.request.urlopen(f"{network['log']}/ui/trust.policy", timeout=10) as r:
        assert r.read().decode() == network["policy"]
    assert base64.b64decode(entry["leaf_hash"])  # a real leaf hash, as the page recomputes it
