"""The registry's answers in the page (docs/architecture.md §6.1), in headless Chromium against
the network's real registry and log: a rotated-away key answers revoked/superseded with its
successor; kill switch → recovery → kill switch, each seen through the push stream and verified
before it is shown; suspend → resume; the issuer's status lists; a conformance receipt in W3C
VC 2.0 form with an audit attestation anchored in the log, suspended with its subject; and a registry anchored in two real
logs, k = 2, checked log by log."""
from __future__ import annotations

import json
import urllib.parse
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from registry.client import make_key_event, make_kill_switch, make_revocation
from tlog.formats.audit import sign_audit
from tlog.formats.conformance import add_proof, to_vc
from tlog.formats.did import did_key_from_public
from tlog.formats.ed25519 import generate_seed, public_from_seed
from tlog.formats.entries import receipt_entry
from tlog.formats.hashing import format_sha256, sha256
from tlog.formats.keys import Signer
from tlog.formats.times import format_utc

from tests.support.services import ServerProcess, registry_service
from tests.ui.browser import (
    WAIT,
    axe_clean,
    click,
    fetch_json,
    fresh,
    keys_named,
    no_console_errors,
    open_page,
    set_text,
    shot,
    stale,
    text,
    wait_for,
    wait_verdict,
)

pytestmark = [pytest.mark.slow, pytest.mark.needs("chromium")]
q = urllib.parse.quote


def did(seed: bytes) -> str:
    return did_key_from_public(public_from_seed(seed))


def ago(seconds: int) -> str:
    return format_utc(datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=seconds))


def post(url: str, doc: dict, path: str = "/v1/records") -> dict:
    req = urllib.request.Request(url + path, data=json.dumps(doc).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=WAIT) as r:
        return json.loads(r.read())


def answer_of(registry: str, key: str) -> dict:
    return fetch_json(f"{registry}/v1/status/{q(key, safe=':')}")


def wait_answer(browser, registry: str, key: str, test) -> dict:
    """The registry's answer for `key` once `test(answer)` holds (a new epoch follows each commit
    within seconds): a bounded wait, polled through the browser's wait loop."""
    got: dict = {}

    def ready(_) -> bool:
        got["a"] = answer_of(registry, key)
        return bool(test(got["a"]))
    wait_for(browser, ready, f"the registry's answer for {key}")
    return got["a"]


def verdict_says(browser, element_id: str, *words: str, state: str | None = None) -> str:
    """Wait until the verdict shows every one of `words` (and `state`): for changes the page
    learns of by itself (the push stream), with no reload."""
    def shown(d):
        el = d.find_element("id", element_id)
        said = el.get_attribute("textContent")
        ok = all(w in said for w in words) and (state is None or el.get_attribute("data-state") == state)
        return said if ok else None
    return wait_for(browser, shown, f"#{element_id} to say {words}")


def live(browser) -> str:
    return text(browser, "status-live")


def test_a_rotated_away_key_is_revoked_superseded_and_names_its_successor(network, browser, tmp_path):
    p, a = generate_seed(), generate_seed()
    post(network["registry"], make_revocation(p, kind="vc", subject=f"urn:uuid:{uuid.uuid4()}", status_list_index=3))
    post(network["registry"], make_key_event(p, subject=did(p), key=did(a), event="rotate", effective_at=ago(60)))
    wait_answer(browser, network["registry"], did(p), lambda x: x["status"] == "revoked")
    fresh(browser, f"{network['registry']}/ui/?view=principal&id={q(did(p))}")
    state, said = wait_verdict(browser, "status-verdict")
    assert state == "revoked" and "REVOKED: superseded at" in said and "a rotation retired this key" in said, said
    assert "deciding record" in said and "key event rotate" in said and "anchored in the log" in said, said
    facts = text(browser, "status-facts")
    assert "successor key" in facts and "superseded" in facts, facts
    assert did(a) in keys_named(browser, "status-facts")
    lists = text(browser, "status-lists")  # a retired key keeps the credentials it issued before
    assert "1 of 131072" in lists and "1 credential(s) it issued are revoked" in lists and "no bit set" in lists, lists
    assert "Caveat (signed in the epoch statement)" in text(browser, "status-caveat")
    assert "push stream" in text(browser, "status-links")
    shot(browser, tmp_path, "status-superseded-1400")
    # the successor is a link to its own (good) answer
    browser.find_element("css selector", f"#status-facts a[title='{did(a)}']").click()
    state, said = wait_verdict(browser, "status-verdict", ("pass", "unpinned", "fail"))
    assert state == "pass" and "GOOD (verified)" in said, said
    no_console_errors(browser)


def test_kill_recover_kill_each_pushed_verified_and_said_plainly(network, browser, tmp_path):
    """The page follows the registry's push stream: each change shows within seconds, with no
    reload, and only after the pushed answer verified here."""
    p, c = generate_seed(), generate_seed()
    grants = f"{did(p)}#oauth_grants"
    post(network["registry"], make_key_event(p, subject=did(p), key=did(c)))
    wait_answer(browser, network["registry"], did(p), lambda x: x["status"] == "good")
    fresh(browser, f"{network['registry']}/ui/?view=principal&id={q(grants)}")
    state, said = wait_verdict(browser, "status-verdict")
    assert state in ("unknown", "pass"), said
    wait_for(browser, lambda d: "pushed answer" in live(d), "the first pushed answer")
    post(network["registry"], make_kill_switch(p, effective_at=ago(180)))
    said = verdict_says(browser, "status-verdict", "REVOKED by a kill switch", "every oauth_grants", state="revoked")
    assert "kill switch" in text(browser, "status-facts"), said
    assert "verified here" in live(browser) and "REVOKED by a kill switch" in live(browser)
    shot(browser, tmp_path, "status-killed-1400")
    resume = make_key_event(c, subject=did(p), event="resume", effective_at=ago(120))
    post(network["registry"], resume)
    said = verdict_says(browser, "status-verdict", "REVOKED for good, reinstated at", "stays revoked",
                        "carry the status id of the new epoch", state="revoked")
    assert "reinstated by" in said and "key event resume" in said, said
    epoch = f"{grants}@{resume['id']}"
    assert "reinstated at" in text(browser, "status-facts") and epoch in text(browser, "status-facts")
    shot(browser, tmp_path, "status-reinstated-1400")
    post(network["registry"], make_kill_switch(c, principal=did(p), effective_at=ago(60)))
    said = verdict_says(browser, "status-verdict", "REVOKED by a kill switch", state="revoked")
    assert "reinstated" not in said.split("(verified)")[0], said
    assert "reinstated at" not in text(browser, "status-facts")
    no_console_errors(browser)
    browser.get("about:blank")  # ends the push stream


def test_suspend_then_resume_and_the_suspension_list(network, browser, tmp_path):
    r, d = generate_seed(), generate_seed()
    post(network["registry"], make_key_event(r, subject=did(r), key=did(d)))
    post(network["registry"], make_key_event(r, subject=did(r), event="suspend", reason="loss_of_key", effective_at=ago(120)))
    wait_answer(browser, network["registry"], did(r), lambda x: x["status"] == "suspended")
    fresh(browser, f"{network['registry']}/ui/?view=principal&id={q(did(r))}")
    state, said = wait_verdict(browser, "status-verdict")
    assert state == "suspended" and "SUSPENDED since" in said and "(loss_of_key): refuse until it recovers" in said, said
    assert "by a suspend signed by" in said and "suspension proven" in said, said
    facts = text(browser, "status-facts")
    assert "suspended at" in facts and "suspended by" in facts, facts
    assert did(r) in keys_named(browser, "status-facts")
    lists = text(browser, "status-lists")
    assert "every bit set: the issuer is SUSPENDED" in lists and "no credential it issued is revoked" in lists, lists
    shot(browser, tmp_path, "status-suspended-1400")
    axe_clean(browser)
    browser.set_window_size(360, 1600)
    sizes = browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth];")
    shot(browser, tmp_path, "status-suspended-360")
    browser.set_window_size(1400, 1600)
    assert sizes[0] <= sizes[1], sizes
    wait_for(browser, lambda b: "pushed answer" in live(b), "the push stream")
    post(network["registry"], make_key_event(d, subject=did(r), event="resume", effective_at=ago(60)))
    verdict_says(browser, "status-verdict", "GOOD (verified)", state="pass")
    open_page(browser, f"{network['registry']}/ui/?view=principal&id={q(did(r))}")
    wait_verdict(browser, "status-verdict")
    lists = text(browser, "status-lists")
    assert "no bit set: not suspended" in lists, lists
    no_console_errors(browser)
    browser.get("about:blank")


def test_a_vc_conformance_receipt_with_an_audit_is_shown_and_checked(network, browser, tmp_path):
    subject, witness, auditor = generate_seed(), generate_seed(), generate_seed()
    report = b'{"report": "SOC 2 Type II", "period": "2026"}'
    bundle = post(network["log"], receipt_entry(sha256(report), auditor), "/v1/entries")["bundle"]
    audit = sign_audit(did(subject), {"standard": "SOC 2 Type II", "uri": "https://auditor.example/reports/impl.json",
                                      "digest": format_sha256(sha256(report)), "anchor": bundle}, auditor)
    issued = datetime.now(UTC).replace(microsecond=0)
    claims = {"id": f"urn:oap:conformance:{uuid.uuid4()}", "subject": did(subject), "level": "L2",
              "profile": "standard", "suite": {"name": "oap-test-suite", "version": "1.0.0"},
              "results_digest": "sha256:" + "ab" * 32, "issued_at": format_utc(issued),
              "expires_at": format_utc(issued + timedelta(days=30)), "audit": audit}
    vc = add_proof(add_proof(to_vc(claims), subject), witness)
    post(network["registry"], {"type": "conformance", "receipt": vc})
    wait_answer(browser, network["registry"], claims["id"], lambda x: x["status"] == "good")
    fresh(browser, f"{network['registry']}/ui/?view=principal&id={q(claims['id'])}")
    state, said = wait_verdict(browser, "status-verdict")
    assert state == "pass", said
    card = wait_for(browser, lambda d: d.find_element("css selector", "#principal-conformance .verdict:not([data-state='running'])"),
                    "the receipt's card")
    said = card.get_attribute("textContent")
    assert card.get_attribute("data-state") == "pass" and "VALID: every signature verified" in said, said
    assert "W3C VC 2.0, eddsa-jcs-2022" in text(browser, "principal-conformance")
    assert "proof 0 (subject): verified EdDSA" in said and "proof 1 (witness): verified EdDSA" in said, said
    assert "audit attestation" in said and "audit anchor" in said and "included in oap.localhost/log" in said, said
    shown = text(browser, "principal-conformance")
    for field in ("issuer", "credentialSubject.level", "L2", "validFrom", "validUntil", "SOC 2 Type II",
                  "https://auditor.example/reports/impl.json", "auditor"):
        assert field in shown, (field, shown)
    keys = keys_named(browser, "principal-conformance")
    assert did(subject) in keys and did(auditor) in keys and format_sha256(sha256(report)) in keys
    shot(browser, tmp_path, "conformance-vc-1400")
    axe_clean(browser)
    # the receipt falls with its subject: suspended, the subject named (the answer's `via`)
    post(network["registry"], make_key_event(subject, subject=did(subject), event="suspend"))
    wait_answer(browser, network["registry"], claims["id"], lambda x: x["status"] == "suspended")
    fresh(browser, f"{network['registry']}/ui/?view=principal&id={q(claims['id'])}")
    state, said = wait_verdict(browser, "status-verdict")
    assert state == "suspended" and "SUSPENDED since" in said and "with its subject" in said, said
    assert "the receipt vouches for" in said and "with its subject" in text(browser, "status-facts"), said
    assert did(subject) in keys_named(browser, "status-verdict") and did(subject) in keys_named(browser, "status-facts")
    no_console_errors(browser)


def test_older_commits_page_back_to_the_genesis_commit_0(network, browser, tmp_path):
    """The registry's commits, newest first, a page of 20 at a time: "Older commits" goes back
    page by page, each page's anchors verified, to commit 0 (the genesis), then stops."""
    from selenium.webdriver.common.by import By

    head = fetch_json(f"{network['registry']}/v1/info")["head"]["seq"]
    while head < 21:  # more than one page of commits: each record posted alone is a commit
        seed = generate_seed()
        head = post(network["registry"], make_revocation(seed, kind="key", subject=did(seed), reason="key_compromise"))["seq"]
    fresh(browser, f"{network['registry']}/ui/?view=registry")
    seen: list[int] = []
    pages = 0
    while True:
        state, said = wait_verdict(browser, "registry-verdict")
        assert state == "pass" and "anchor(s) verified" in said, (seen, said)
        pages += 1
        seqs = [int(c.text) for c in browser.find_elements(By.CSS_SELECTOR, "#commits tbody tr td:first-child")]
        assert 0 < len(seqs) <= 20 and seqs == sorted(seqs, reverse=True), seqs
        assert not seen or seqs[0] == seen[-1] - 1, (seen, seqs)  # each page goes on where the last stopped
        seen += seqs
        older = browser.find_elements(By.CSS_SELECTOR, "#commits-pager a[rel='next']")
        if not older:
            break
        assert pages < 10 and f"before={seqs[-1]}" in older[0].get_attribute("href"), older[0].get_attribute("href")
        stale(browser, "registry-verdict")
        older[0].click()
    assert pages >= 2 and seen[0] >= head and seen == list(range(seen[0], -1, -1)), seen
    last = browser.find_elements(By.CSS_SELECTOR, "#commits tbody tr")[-1].text
    assert last.startswith("0") and "genesis" in last, last
    assert "view=registry&before=" in browser.current_url
    assert browser.find_element(By.CSS_SELECTOR, "#commits-pager a:not(.raw)").text == "« Newest"
    no_console_errors(browser)


# --- a registry anchored in two logs ---------------------------------------------------------


def test_a_registry_in_two_logs_is_checked_log_by_log_k_of_n(network, browser, tmp_path):
    logs = [ServerProcess(tmp_path / f"log-{i}", "--origin", f"log-{'ab'[i]}.ui.test", "--batch-interval-ms", "5").start()
            for i in range(2)]
    reg = None
    try:
        reg = registry_service(tmp_path / "reg", logs[0].url, "--log-url", logs[1].url, "--anchor-quorum", "2",
                               "--epoch-seconds", "3600").start()
        agent = generate_seed()
        post(reg.url, make_revocation(agent, kind="key", subject=did(agent), reason="key_compromise"))
        wait_answer(browser, reg.url, did(agent), lambda x: x["status"] == "revoked")
        both = f"log {logs[0].vkey}\nlog {logs[1].vkey}\nquorum none\nlogs 2\n"
        fresh(browser, f"{reg.url}/ui/?view=trust")
        set_text(browser, "policy", both)
        click(browser, "#policy-pin")
        wait_for(browser, lambda d: "pinned" in text(d, "policy-said").lower(), "the pin")
        open_page(browser, f"{reg.url}/ui/?view=registry")
        state, said = wait_verdict(browser, "registry-verdict")
        assert state == "pass" and "log-a.ui.test and log-b.ui.test" in said, said
        facts = text(browser, "registry-facts")
        assert "log-a.ui.test" in facts and "log-b.ui.test" in facts and "once 2 of 2 log(s) hold it" in facts, facts
        assert "oap-registry/2: 2 log(s), k = 2, as /v1/info says" in facts, facts
        cells = [r.text for r in browser.find_elements("css selector", "#commits tbody tr")]
        anchored = [c for c in cells if "in 2 of 2 logs" in c]
        assert anchored and all("✓ log-a.ui.test #" in c and "✓ log-b.ui.test #" in c for c in anchored), cells
        shot(browser, tmp_path, "registry-two-logs-1400")
        # one commit: one row per log, k of N
        stale(browser, "commit-verdict")
        browser.find_element("css selector", "#commits tbody tr:last-child a[href*='view=commit']").click()
        state, said = wait_verdict(browser, "commit-verdict")
        assert state == "pass" and "anchored in 2 of 2 logs (2 required)" in said and "anchors this commit" in said, said
        assert "log 1 of 2: log-a.ui.test" in said and "log 2 of 2: log-b.ui.test" in said, said
        shot(browser, tmp_path, "commit-two-logs-1400")
        axe_clean(browser)
        # a status answer: its epoch anchored in both
        open_page(browser, f"{reg.url}/ui/?view=principal&id={q(did(agent))}")
        state, said = wait_verdict(browser, "status-verdict")
        assert state == "revoked" and "anchored in 2 of 2 logs" in said, said
        assert "anchored in log-a.ui.test" in said and "anchored in log-b.ui.test" in said, said
        # with another key pinned for log B, only log A counts, and the genesis asks for 2
        wrong = both.replace(logs[1].vkey, Signer.generate("log-b.ui.test").vkey)
        open_page(browser, f"{reg.url}/ui/?view=trust")
        set_text(browser, "policy", wrong)
        click(browser, "#policy-pin")
        wait_for(browser, lambda d: "pinned" in text(d, "policy-said").lower(), "the pin")
        open_page(browser, f"{reg.url}/ui/?view=registry")
        state, said = wait_verdict(browser, "registry-verdict")
        assert state == "fail" and "anchored in 1 log(s) of the policy, and it requires 2" in text(browser, "commits"), said
        open_page(browser, f"{reg.url}/ui/?view=principal&id={q(did(agent))}")
        state, said = wait_verdict(browser, "status-verdict")
        assert state == "fail" and "anchored in 1 log(s) of the policy, and it requires 2" in said, said
        assert "bundle 1: the log's signature on the checkpoint does not verify" in said \
            or "bundle 1: checkpoint is not signed by a log in the policy" in said, said
        shot(browser, tmp_path, "registry-two-logs-one-wrong-1400")
        no_console_errors(browser)
        browser.get("about:blank")
    finally:
        if reg is not None:
            reg.stop()
        for p in logs:
            p.stop()
