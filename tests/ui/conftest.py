"""The explorer's browser tests share one network and one browser (package scope): starting
`oap-localnet` and Chromium once keeps `make test` within its budget."""
from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from tests.support.didhosts import Key, did_key, invocation_receipt, sign_receipt
from tests.support.localnet import localnet
from tests.support.tools import need
from tests.ui.browser import BIN, WAIT, fetch_json, status_of


@pytest.fixture(scope="package")
def network(tmp_path_factory):
    """oap-localnet on free ports, with the README tour's entries (a receipt signed by its
    agent and its tool, OAP-CORE-1.0 §19.1, anchored by a did:key; its salted commitment), a
    revoked agent key and a principal with a key event."""
    tmp = tmp_path_factory.mktemp("net")
    with localnet(tmp / "data", cwd=tmp) as net:
        log, registry, witness = net.log, net.registry, net.witness
        env = {**os.environ, "OAP_LOG_URL": log, "OAP_REGISTRY_URL": registry}

        def cli(*args: str) -> str:
            r = subprocess.run([str(BIN / args[0]), *args[1:]], cwd=tmp, env=env, capture_output=True, text=True,
                               timeout=120)
            assert r.returncode == 0, r.stderr
            return r.stdout.strip()

        keygen = cli("oap-log", "keygen", "--name", "ui.test", "--out", "me.key")
        agent, tool = Key(), Key()
        body = invocation_receipt(did_key(agent), did_key(tool))
        body.update(receipt_id="urn:oap:receipt:ui", timestamp="2026-05-02T10:00:00.215Z")
        (tmp / "receipt.json").write_text(json.dumps(sign_receipt(body, (did_key(agent), agent), (did_key(tool), tool))))
        index = json.loads(cli("oap-log", "add", "receipt.json", "--key", "me.key"))["index"]
        second = sign_receipt({**body, "receipt_id": "urn:oap:receipt:ui2"}, (did_key(agent), agent), (did_key(tool), tool))
        (tmp / "second.json").write_text(json.dumps(second))
        second = json.loads(cli("oap-log", "add", "second.json", "--key", "me.key"))["index"]
        cli("oap-log", "add", "receipt.json", "--commitment", "--out", "privileged.tlog-proof")
        agent_did = cli("oap-registry", "keygen", "--out", "agent.key")
        cli("oap-registry", "revoke", "--key", "agent.key", "--kind", "key", "--reason", "key_compromise")
        owner, controller = cli("oap-registry", "keygen", "--out", "owner.key"), cli("oap-registry", "keygen", "--out", "c.key")
        cli("oap-registry", "key-event", "--key", "owner.key", "--subject", owner, "--controller", controller)
        # status answers show a record once a status epoch covers its commit: wait for it here
        deadline = time.monotonic() + 90
        for who, want in ((agent_did, "revoked"), (owner, "good")):
            while status_of(registry, who) != want:
                assert time.monotonic() < deadline, f"{who} never became {want} in the registry's answers"
                time.sleep(0.2)
        signer = fetch_json(f"{log}/v1/entries/{index}")["entry"]["signer"]
        yield {"log": log, "registry": registry, "witness": witness, "mirror": net.mirror, "keygen": keygen,
               "index": index, "second": second,
               "signer": signer, "agent": agent_did, "owner": owner, "dir": tmp, "keys": {"agent": agent, "tool": tool},
               "policy": (tmp / "data" / "log" / "log.policy").read_text(),
               "vkey": (tmp / "data" / "log" / "log.vkey").read_text().strip()}



@pytest.fixture(scope="package")
def browser(tmp_path_factory):
    need("chromium")
    from tests.support.browser import start_browser

    driver = start_browser(tmp_path_factory.mktemp("chromium"), window="1400,1600", timeout=WAIT)
    yield driver
    driver.quit()


