"""Every signature a receipt carries (OAP-CORE-1.0 §19.1), each a row of the page's checklist
with the verdicts of `oap-log verify` (OK / INCOMPLETE / FAILED, exit 0 / 3 / 1): receipts
anchored in the network's real log, checked in the Bundle check and Entry views of headless
Chromium; and an entry signed by a did:web principal, verified with the DID document the log
kept in the entry after the did:web host is stopped."""
from __future__ import annotations

import asyncio
import json
import threading
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from tlog.formats.diddoc import P256
from tlog.formats.encoding import b64enc
from tlog.formats.entries import receipt_entry, receipt_hash
from tlog.formats.hashing import format_sha256

from tests.support.didhosts import DidHosts, Key, did_key, document, invocation_receipt, sign_receipt
from tests.support.services import ServerProcess
from tests.ui.browser import (
    WAIT,
    axe_clean,
    fetch_json,
    fresh,
    no_console_errors,
    rerun,
    set_text,
    shot,
    text,
    wait_for,
    wait_verdict,
)

pytestmark = [pytest.mark.slow, pytest.mark.needs("chromium")]


def anchor(log: str, receipt: dict, seed: bytes = bytes([5]) * 32) -> str:
    """Anchor `receipt` in the log as a client does (a did:key signed `receipt` entry of its
    hash); the .tlog-proof the log hands back."""
    entry = receipt_entry(receipt_hash(receipt), seed, receipt_id=receipt["receipt_id"])
    req = urllib.request.Request(f"{log}/v1/entries", data=json.dumps(entry).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=WAIT) as r:
        return json.loads(r.read())["bundle"]


def signature_rows(driver, card: str = "#bundle-results") -> list[tuple[str, str]]:
    """(state, text) of each receipt-signature row of the checklist shown, in the receipt's
    order (the checklist shows failures first); a missing signature comes last."""
    rows = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0] + ' li[data-check=\"receipt-signature\"]')]"
        ".map(li => [li.dataset.state, li.textContent]);", card)

    def position(row: list) -> int:
        for i in range(64):
            if f"receipt signature {i} " in row[1]:
                return i
        return 64
    return sorted(rows, key=position)


def check_bundle(driver, bundle: str, receipt: dict, dids: str = "") -> tuple[str, str]:
    set_text(driver, "bundle-text", bundle)
    set_text(driver, "bundle-receipt", json.dumps(receipt))
    set_text(driver, "bundle-dids", dids)
    return rerun(driver, "bundle-verdict", "#bundle-check")


def test_each_receipt_signature_is_a_row_ok_incomplete_or_failed(network, browser, tmp_path):
    agent, tool, mallory = Key(), Key(), Key()
    body = invocation_receipt(did_key(agent), did_key(tool), 11)
    good = sign_receipt(body, (did_key(agent), agent), (did_key(tool), tool))
    forged = sign_receipt({**body, "receipt_id": "urn:oap:receipt:forged"}, (did_key(agent), agent),
                          (did_key(tool), mallory))  # the tool's name, another key
    missing = sign_receipt({**body, "receipt_id": "urn:oap:receipt:missing"}, (did_key(agent), agent))
    web, web_key = "did:web:weatherpro.example", Key(P256)
    incomplete = sign_receipt(invocation_receipt(did_key(agent), web, 12), (did_key(agent), agent),
                              (f"{web}#key-1", web_key))
    fresh(browser, f"{network['log']}/ui/?view=bundle")
    # agent and tool both signed: OK, one verified row each, naming the key and where it came from
    state, said = check_bundle(browser, anchor(network["log"], good), good)
    assert state == "pass" and "1 verified, 0 failed" in said, said
    rows = signature_rows(browser)
    assert [s for s, _ in rows] == ["pass", "pass"], rows
    assert "receipt signature 0 (agent): verified EdDSA" in rows[0][1] and "from the did:key itself" in rows[0][1], rows
    assert "receipt signature 1 (tool): verified EdDSA" in rows[1][1], rows
    assert "receipt signatures: all verified" in text(browser, "bundle-results")
    shot(browser, tmp_path, "receipt-signatures-ok-1400")
    # a forged tool signature: FAILED, and the row says which and why
    state, said = check_bundle(browser, anchor(network["log"], forged), forged)
    assert state == "fail" and "0 verified, 1 failed" in said, said
    rows = signature_rows(browser)
    assert rows[0][0] == "pass" and rows[1][0] == "fail", rows
    assert "receipt signature 1 (tool): FAILED EdDSA" in rows[1][1] and "does not verify with the EdDSA key(s)" in rows[1][1]
    shot(browser, tmp_path, "receipt-signatures-forged-1400")
    # the tool's signature missing: FAILED (§19.1 asks for both)
    state, said = check_bundle(browser, anchor(network["log"], missing), missing)
    assert state == "fail", said
    rows = signature_rows(browser)
    assert rows[-1][0] == "fail" and "(tool): MISSING" in rows[-1][1] and did_key(tool) in rows[-1][1], rows
    # a did:web tool with no DID document at hand: INCOMPLETE (not green, not failed) ...
    bundle = anchor(network["log"], incomplete)
    state, said = check_bundle(browser, bundle, incomplete)
    assert state == "incomplete" and "0 verified, 0 failed, 1 not fully checked" in said, said
    rows = signature_rows(browser)
    assert rows[1][0] == "warn" and "not checked" in rows[1][1] and "no DID document of did:web:weatherpro.example" in rows[1][1]
    assert "INCOMPLETE" in text(browser, "bundle-results")
    shot(browser, tmp_path, "receipt-signatures-incomplete-1400")
    axe_clean(browser)
    # ... and OK once its document is pinned (as `oap-log verify --did-document`)
    state, said = check_bundle(browser, bundle, incomplete, json.dumps(document(web, {"key-1": web_key})))
    assert state == "pass", said
    rows = signature_rows(browser)
    assert "(tool): verified ES256" in rows[1][1] and "from a DID document you pinned" in rows[1][1], rows
    # the same verdicts from the Entry view, for a receipt pasted there
    browser.get(f"{network['log']}/ui/?view=entry")
    wait_for(browser, lambda d: d.find_element("tag name", "body").get_attribute("data-ready") == "1", "ready")
    set_text(browser, "entry-receipt", json.dumps(forged))
    state, said = rerun(browser, "entry-verdict", "#entry-form button[type=submit]")
    assert state == "fail" and "receipt signature 1 (tool): FAILED" in said, said
    assert "receipt_hash=sha256" in browser.current_url
    no_console_errors(browser)


# --- a did:web signed entry, verified with the document the log kept --------------------------


@contextmanager
def did_hosts(directory: Path):
    """tests/support/didhosts.DidHosts (an HTTPS did:web host) on its own event loop thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    hosts = asyncio.run_coroutine_threadsafe(DidHosts().start(directory), loop).result(WAIT)
    stopped = [False]

    def stop() -> None:
        if not stopped[0]:
            stopped[0] = True
            asyncio.run_coroutine_threadsafe(hosts.close(), loop).result(WAIT)
    try:
        yield hosts, stop
    finally:
        stop()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT)
        loop.close()


def test_a_did_web_entry_verifies_with_the_document_kept_in_it_with_the_host_stopped(network, browser, tmp_path):
    with did_hosts(tmp_path / "tls") as (hosts, stop_hosts):
        cfg = tmp_path / "log.toml"
        cfg.write_text(f'[log]\ndid_ca_file = "{hosts.ca_file}"\ndid_allow_private_networks = true\n')
        log = ServerProcess(tmp_path / "log", "--origin", "didweb.ui.test/log", "--config", str(cfg)).start()
        try:
            tool, agent = Key(P256), Key()
            web = hosts.web_did("weatherpro")
            hosts.publish_web(web, document(web, {"key-1": tool}))
            receipt = sign_receipt(invocation_receipt(did_key(agent), web, 21), (did_key(agent), agent),
                                   (f"{web}#key-1", tool))
            rh = receipt_hash(receipt)
            entry = {"type": "receipt", "receipt_hash": format_sha256(rh), "signer": f"{web}#key-1",
                     "signature": b64enc(tool.sign(rh))}
            req = urllib.request.Request(f"{log.url}/v1/entries", data=json.dumps(entry).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=WAIT) as r:
                body = json.loads(r.read())
            stop_hosts()  # from here on no did:web host answers: what verifies, verifies offline
            index = body["index"]
            wait_for(browser, lambda d: fetch_json(f"{log.url}/v1/info").get("tree_size", 0) > index, "published")
            fresh(browser, f"{network['log']}/ui/?log={urllib.parse.quote(log.url)}&view=entry&index={index}")
            state, said = wait_verdict(browser, "entry-verdict")
            assert state == "unpinned", said  # this log is nobody's pin; the signature still verifies
            row = browser.execute_script("return document.querySelector('#entry-verdict li[data-check=\"entry-signature\"]')"
                                         ".textContent;")
            assert "entry signature: verified" in row and "from the DID document kept in the log entry" in row, row
            assert web in text(browser, "entry-json") and '"did_document"' in text(browser, "entry-json")
            shot(browser, tmp_path, "did-web-entry-1400")
            # the receipt in the Bundle check: the tool's signature too, with the kept document
            browser.get(f"{network['log']}/ui/?log={urllib.parse.quote(log.url)}&view=bundle")
            wait_for(browser, lambda d: d.find_element("tag name", "body").get_attribute("data-ready") == "1", "ready")
            state, said = check_bundle(browser, body["bundle"], receipt)
            assert state == "unpinned" and "1 verified, 0 failed" in said, said
            rows = signature_rows(browser)
            assert "(tool): verified ES256" in rows[1][1] and "the DID document kept in the log entry" in rows[1][1], rows
            no_console_errors(browser)
            browser.get("about:blank")
        finally:
            log.stop()
