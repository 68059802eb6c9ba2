"""The explorer as a new reader meets it on `make run` (headless Chromium against the network's
real log, witnesses, mirror and registry): the mirror's copy is judged by the mirror's line of
the pinned policy, not by the witnesses' quorum; the mirror's own page shows what it copies;
the registry's status key is green only when a pinned policy names it, as `oap-registry status`
says it; the Trust page shows the pinned policy whole; a search by a DID a receipt names says
why the log cannot find it; and a mistake in the input is said as one, never as a failed proof."""
from __future__ import annotations

import urllib.parse

import pytest

from tests.ui.browser import (
    FINAL,
    click,
    fresh,
    keys_named,
    no_console_errors,
    open_page,
    rerun,
    set_text,
    shot,
    state_of,
    text,
    wait_for,
    wait_verdict,
)

pytestmark = [pytest.mark.slow, pytest.mark.needs("chromium")]
q = urllib.parse.quote


def mirror_cell(driver):
    """The Neighbours row of the mirror, once its check is done: (state, text)."""
    cells = driver.find_elements("css selector", "#neighbours .verdict.compact")
    if len(cells) != 1 or cells[0].get_attribute("data-state") not in FINAL:
        return None
    return cells[0].get_attribute("data-state"), cells[0].get_attribute("textContent")


def test_the_mirrors_copy_on_the_home_page_is_judged_by_the_mirror_line_not_the_witness_quorum(network, browser, tmp_path):
    """make run's log names its mirror; the mirror serves the log's checkpoint with its own
    cosignature only. Checked against the operator's policy it is VERIFIED: the log's key and
    mirror m1's cosignature, and consistent with the log (not "1 of 5: quorum NOT met")."""
    fresh(browser, f"{network['log']}/ui/")
    assert wait_verdict(browser, "log-verdict")[0] == "pass"
    state, said = wait_for(browser, mirror_cell, "the mirror's check")
    assert state == "pass" and "VERIFIED" in said, said
    assert "cosignatures 1 of 1 (m1)" in said and "quorum m1 met" in said and "NOT met" not in said, said
    assert "a mirror's copy: its log key and the cosignature of mirror m1" in said, said
    assert "consistent with the log" in said, said
    shot(browser, tmp_path, "home-mirror-1400")
    no_console_errors(browser)


def test_the_mirrors_own_page_shows_the_log_it_copies_and_its_copy_checked(network, browser, tmp_path):
    """:8084/ui/ (the address in make run's banner): the mirror says what it is, the page finds
    the log it copies, and both are checked against the policy the mirror ships (pinned)."""
    fresh(browser, f"{network['mirror']}/ui/")
    state, said = wait_verdict(browser, "witness-verdict")
    assert state == "pass" and "mirror mirror.localhost: 1 log(s) copied" in said, said
    assert "which the pinned policy names (mirror m1 for oap.localhost/log)" in said, said
    assert text(browser, "witness-name") == f"Mirror at {network['mirror']}"
    assert state_of(browser, "trust-bar") == "pass"  # the operator's policy, shipped by the mirror too
    copy = wait_for(browser, lambda d: d.find_element("css selector", "#witness-logs .verdict.compact")
                    .get_attribute("data-state") in FINAL and d.find_element("css selector", "#witness-logs .verdict.compact"),
                    "the copy checked")
    assert copy.get_attribute("data-state") == "pass", copy.get_attribute("textContent")
    assert browser.find_element("id", "witness-refusals-box").get_attribute("hidden") is not None
    assert "mirror m1" in text(browser, "witness-list")
    shot(browser, tmp_path, "mirror-page-1400")
    click(browser, "#nav-log")  # the log it copies, found from the mirror, verified and pinned
    state, said = wait_verdict(browser, "log-verdict")
    assert state == "pass" and "VERIFIED checkpoint of oap.localhost/log" in said, said
    assert wait_for(browser, mirror_cell, "the mirror's check")[0] == "pass"
    no_console_errors(browser)


def test_the_status_key_is_green_only_when_a_pinned_policy_names_it(network, browser, tmp_path):
    """As `oap-registry status` says it: the operator's policy pins the registry's key (a
    `registry` line), so the answer is green; a pinned policy without the line leaves the key
    the registry names itself, which is never green; one naming another registry refuses it."""
    from tlog.formats.did import did_key_from_public

    status = f"{network['log']}/ui/?view=principal&id={q(network['owner'])}"
    fresh(browser, status)
    state, said = wait_verdict(browser, "status-verdict")
    assert state == "pass" and "signature by the pinned status key did:key:" in said, said
    assert "(the policy shipped with this page by its operator)" in said, said
    registry_line = next(line for line in network["policy"].splitlines() if line.startswith("registry "))
    without = network["policy"].replace(registry_line + "\n", "")
    for policy, want, says in ((without, "unpinned", "NOT PINNED (a registry line in a pinned policy pins it"),
                               (network["policy"].replace(registry_line.split()[1], did_key_from_public(bytes(32))),
                                "fail", "which the pinned policy does not pin")):
        open_page(browser, f"{network['log']}/ui/?view=trust")
        set_text(browser, "policy", policy)
        click(browser, "#policy-pin")
        wait_for(browser, lambda d: "Pinned for" in text(d, "policy-said"), "the pin")
        open_page(browser, status)
        state, said = wait_verdict(browser, "status-verdict")
        assert state == want and says in said, (want, said)
    shot(browser, tmp_path, "status-key-not-pinned-1400")
    open_page(browser, f"{network['log']}/ui/?view=registry")
    wait_verdict(browser, "registry-verdict")
    assert "(NOT the key the pinned policy pins)" in text(browser, "registry-facts")
    no_console_errors(browser)


def test_the_trust_page_shows_the_pinned_policys_witnesses_quorum_mirror_and_registry(network, browser, tmp_path):
    fresh(browser, f"{network['log']}/ui/?view=trust")
    state, said = wait_verdict(browser, "trust-state")
    assert state == "pass" and "PINNED: oap.localhost/log" in said, said
    for row in ("witness w1", "witness w1-mldsa44", "witness w2", "witness w3", "mirror m1",
                "group w1-any any of w1, w1-mldsa44", "group local-witnesses 2 of w1-any, w2, w3",
                "quorum local-witnesses: a checkpoint is accepted only when it is met", "registry key"):
        assert row in said, (row, said)
    named = keys_named(browser, "trust-state")
    policy = [line.split() for line in network["policy"].splitlines()]
    keys = [p[2] for p in policy if p[0] in ("witness", "mirror")] + [p[1] for p in policy if p[0] in ("log", "registry")]
    assert set(keys) <= set(named), (keys, named)
    shot(browser, tmp_path, "trust-policy-1400")
    no_console_errors(browser)


def test_a_search_by_a_did_the_receipt_names_says_the_log_only_knows_the_anchoring_key(network, browser, tmp_path):
    """The tour's receipt names its agent and tool; the log holds only its hash and the key
    that anchored it (the did:key `oap-log keygen` printed): the search says so and how to find it."""
    from tests.support.didhosts import did_key

    assert network["keygen"].startswith(f"did:key:      {network['signer']} "), network["keygen"]
    agent = did_key(network["keys"]["agent"])
    fresh(browser, f"{network['log']}/ui/?view=search&q={q(agent)}")
    state, said = wait_verdict(browser, "search-verdict")
    assert state == "unknown" and "nothing found" in said, said
    hint = browser.find_element("css selector", "#search-verdict [data-hint='signer']").text
    assert "only by its hash and by the key that anchored it" in hint and "agent_did and tool_did" in hint, hint
    click(browser, "#search-verdict [data-hint='signer'] a")
    wait_for(browser, lambda d: d.execute_script("return document.body.dataset.view") == "entry", "the Entry view")
    # pasted there, the receipt finds its entry, and each of its signatures is checked
    set_text(browser, "entry-receipt", (network["dir"] / "receipt.json").read_text())
    state, said = rerun(browser, "entry-verdict", "#entry-form button[type=submit]")
    assert state == "pass" and f"entry {network['index']} is in" in said and "signature 0" in said, said
    no_console_errors(browser)


def test_input_mistakes_are_said_as_such_and_failed_evidence_stays_red(network, browser, tmp_path):
    """An index the log does not have, a 10 kB string, two bundles with one receipt, text that
    is no bundle: NOT CHECKED, about the input, with no empty result headings and nothing in
    the page's URL; a bundle whose proof was changed is still FAILED."""
    from selenium.webdriver.common.by import By

    fresh(browser, f"{network['log']}/ui/?view=entry&index=99999")
    state, said = wait_verdict(browser, "entry-verdict", FINAL)
    assert state == "input" and said.startswith("✎NOT CHECKED: the log holds no such entry (no entry 99999 in a tree of size"), said
    assert "HTTP" not in said and not browser.find_element(By.ID, "entry-body").is_displayed()
    open_page(browser, f"{network['log']}/ui/?view=entry&leaf={'ab' * 32}")
    state, said = wait_verdict(browser, "entry-verdict", FINAL)
    assert state == "input" and "the log holds no entry with this leaf hash" in said, said
    long = "did:key:z" + "a" * 10_000
    for view, field, button, verdict, what in (
            ("search", "search-q", "#search-form button", "search-verdict", "the search text is 10,009 characters long"),
            ("entry", "entry-leaf", "#entry-form button[type=submit]", "entry-verdict", "the leaf hash is 10,009 characters long"),
            ("registry", "status-id", "#registry-form button", "registry-verdict", "the id is 10,009 characters long")):
        open_page(browser, f"{network['log']}/ui/?view={view}")
        before = browser.current_url
        set_text(browser, field, long)
        state, said = rerun(browser, verdict, button)
        assert state == "input" and what in said and "at most 1,024" in said, (view, said)
        assert browser.current_url == before, view  # never put in the URL (a service refuses such a request line)
    open_page(browser, f"{network['log']}/ui/?view=search&q=hello")
    state, said = wait_verdict(browser, "search-verdict", FINAL)
    assert state == "input" and "not a DID, hash, index or id" in said, said
    # the bundle check: two bundles and one receipt; a pasted text that is no bundle
    bundle = (network["dir"] / "receipt.json.tlog-proof").read_text()
    (tmp_path / "a.tlog-proof").write_text(bundle)
    (tmp_path / "b.tlog-proof").write_text((network["dir"] / "privileged.tlog-proof").read_text())
    open_page(browser, f"{network['log']}/ui/?view=bundle")
    browser.find_element(By.ID, "bundle-files").send_keys(f"{tmp_path / 'a.tlog-proof'}\n{tmp_path / 'b.tlog-proof'}")
    wait_for(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#bundle-list li")) == 2, "two files listed")
    set_text(browser, "bundle-receipt", (network["dir"] / "receipt.json").read_text())
    state, said = rerun(browser, "bundle-verdict", "#bundle-check")
    assert state == "input" and "a receipt and a salt are checked against one bundle at a time, and 2 are given" in said, said
    assert not browser.find_elements(By.CSS_SELECTOR, "#bundle-results .verdict")
    shot(browser, tmp_path, "input-two-bundles-1400")
    click(browser, "#bundle-clear")
    set_text(browser, "bundle-text", "hello, this is not a proof")
    state, said = rerun(browser, "bundle-verdict", "#bundle-check")
    assert state == "input" and "the pasted text is not a .tlog-proof bundle" in said, said
    # evidence that does not hold is still red
    lines = bundle.split("\n")
    lines[3] = ("A" if lines[3][0] != "A" else "B") + lines[3][1:]
    set_text(browser, "bundle-text", "\n".join(lines))
    state, said = rerun(browser, "bundle-verdict", "#bundle-check")
    assert state == "fail" and "0 verified, 1 failed" in said, said
    card = browser.find_element(By.CSS_SELECTOR, "#bundle-results .verdict")
    assert card.get_attribute("data-state") == "fail" and "✗" in card.text
    no_console_errors(browser, allowed=("/v1/entries/99999", "entries:lookup?leaf_hash="))  # the lookups' 404s


def test_the_input_state_is_readable_in_light_and_dark(network, browser):
    """The input verdict passes axe-core in light and dark (its colours are the page's)."""
    from tests.ui.browser import axe_clean

    fresh(browser, f"{network['log']}/ui/?view=entry&index=99999")
    assert wait_verdict(browser, "entry-verdict", FINAL)[0] == "input"
    axe_clean(browser)
