"""Anchoring one receipt in several logs (OAP-CORE-1.0 §19.3) with real `oap-log serve`
processes: one anchors file with every log's proof, a policy's `logs <k>`, and a log
that is down costing only its timeout."""
from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner

from tlog.client.client import anchor_in_logs
from tlog.client.verifier import TrustPolicy
from tlog.errors import FormatError, PolicyError
from tlog.formats.anchors import parse_anchors
from tlog.formats.entries import commitment_entry
from tlog.formats.hashing import sha256
from tlog.server.cli import main

from tests.support.didhosts import Key, did_key, invocation_receipt, sign_receipt

DOWN = "http://127.0.0.1:9"  # nothing listens on the discard port


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_add_to_two_logs_verifies_against_logs_2_and_survives_a_down_log(server, tmp_path):
    a = server("--origin", "a.test/log", data=tmp_path / "a")
    b = server("--origin", "b.test/log", data=tmp_path / "b")
    two = tmp_path / "two.policy"
    two.write_text(f"log {a.vkey} {a.url}\nlog {b.vkey} {b.url}\nlogs 2\n")
    one_of_two = tmp_path / "one.policy"
    one_of_two.write_text(f"log {a.vkey}\nlog {b.vkey}\n")
    key = tmp_path / "me.key"
    run("keygen", "--name", "me", "--out", str(key))
    receipt = tmp_path / "receipt.json"
    agent, tool = Key(), Key()
    receipt.write_text(json.dumps(sign_receipt(invocation_receipt(did_key(agent), did_key(tool)),
                                               (did_key(agent), agent), (did_key(tool), tool))))

    # the URLs come from the policy; a third, down, log is only a warning
    r = CliRunner().invoke(main, ["add", str(receipt), "--key", str(key), "--policy", str(two),
                                  "--url", a.url, "--url", b.url, "--url", DOWN, "--timeout", "5"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert sorted(x["url"] for x in out["anchored_in"]) == sorted([a.url, b.url])
    assert out["failed"][0]["url"] == DOWN and "cannot reach" in out["failed"][0]["error"]
    anchors = tmp_path / "receipt.json.anchors.json"
    assert out["bundle"] == str(anchors)
    doc = json.loads(anchors.read_text())
    assert doc["anchored_in"] == ["a.test/log", "b.test/log"] and len(parse_anchors(anchors.read_bytes())) == 2

    ok = run("verify", str(anchors), "--policy", str(two), "--receipt", str(receipt))
    assert ok.exit_code == 0 and "in a.test/log" in ok.output and "in b.test/log" in ok.output, ok.output
    js = run("verify", str(anchors), "--policy", str(two), "--json")
    first = json.loads(js.output.splitlines()[0])
    assert first["ok"] and [x["origin"] for x in first["logs"]] == ["a.test/log", "b.test/log"]
    assert first["signature_checked"] is True

    # one log's bundle alone does not meet `logs 2`; it does meet a policy without it
    single = tmp_path / "a.tlog-proof"
    single.write_text(doc["bundles"][0])
    bad = run("verify", str(single), "--policy", str(two))
    assert bad.exit_code == 1 and "anchored in 1 log(s) of the policy, and it requires 2" in bad.output
    assert run("verify", str(single), "--policy", str(one_of_two)).exit_code == 0

    # a tampered bundle does not count, and says why
    tampered = dict(doc)
    lines = doc["bundles"][1].split("\n")
    assert lines[2] == "index 0"
    lines[2] = "index 1"  # another leaf's place: the inclusion proof fails
    tampered["bundles"] = [doc["bundles"][0], "\n".join(lines)]
    (tmp_path / "t.anchors.json").write_text(json.dumps(tampered))
    bad = run("verify", str(tmp_path / "t.anchors.json"), "--policy", str(two))
    assert bad.exit_code == 1 and "requires 2" in bad.output and "bundle 1" in bad.output
    ok = run("verify", str(tmp_path / "t.anchors.json"), "--policy", str(one_of_two))
    assert ok.exit_code == 0 and "does not count" in ok.output

    # two of two required and one log down: no file, an error, exit 1
    r = CliRunner().invoke(main, ["add", "--hash", "sha256:" + "cd" * 32, "--key", str(key), "--policy", str(two),
                                  "--url", a.url, "--url", DOWN, "--out", str(tmp_path / "x.anchors.json")])
    assert r.exit_code == 1 and "anchored in 1 of 2 log(s); 2 required" in r.output
    assert not (tmp_path / "x.anchors.json").exists()


def test_anchor_in_logs_keeps_the_answers_of_the_logs_that_answer(server, tmp_path):
    a = server("--origin", "a.test/log", data=tmp_path / "a")
    policy = TrustPolicy.from_text(f"log {a.vkey}\n")
    entry = commitment_entry(sha256(b"one entry, two logs"))
    got = asyncio.run(anchor_in_logs(entry, [a.url, DOWN], policy=policy, timeout=60))
    assert got[0].anchored is not None and got[0].error is None
    assert got[1].anchored is None and "cannot reach http://127.0.0.1:9" in got[1].error
    with pytest.raises(FormatError, match="neither a tlog-proof nor an anchors file"):
        TrustPolicy.from_text(f"log {a.vkey}\n").verify_anchored("not a bundle")
    assert isinstance(PolicyError("x"), Exception)


def test_client_errors_are_one_line_and_out_is_checked_before_anchoring(server, tmp_path):
    key = tmp_path / "k.key"
    run("keygen", "--name", "k", "--out", str(key))
    # a log that is down: 1; a URL that cannot be one: 2, a usage error, before any traffic
    for url, what, code in ((DOWN, "cannot reach http://127.0.0.1:9", 1),
                            ("127.0.0.1:8080", "must be an http:// or https://", 2)):
        r = CliRunner().invoke(main, ["info", "--url", url])
        assert r.exit_code == code and r.output.count("\n") == 1 and what in r.output, r.output
        assert "Traceback" not in r.output
        r = CliRunner().invoke(main, ["add", "--hash", "sha256:" + "ab" * 32, "--key", str(key), "--url", url])
        assert r.exit_code == code and what in r.output and "Traceback" not in r.output
    srv = server()
    r = CliRunner().invoke(main, ["add", "--hash", "sha256:" + "ab" * 32, "--key", str(key), "--url", srv.url,
                                  "--out", str(tmp_path / "missing" / "x.tlog-proof")])
    assert r.exit_code == 1 and "does not exist" in r.output
    info = json.loads(run("info", "--url", srv.url).output)
    assert info["tree_size"] == 0  # nothing was anchored


def test_tokens_from_a_file_or_oap_token_reach_a_log_that_requires_them(tmp_path, monkeypatch):
    import os
    import re

    from tests.support.services import log_service

    made = run("token", "--label", "ci")
    token = re.search(r"token:\s+(\S+)", made.output).group(1)
    line = re.search(r"tokens_file line:\s+(.+)", made.output).group(1)
    tokens = tmp_path / "tokens"
    tokens.write_text(line + "\n")
    env = dict(os.environ) | {"OAP_LOG_AUTH_REQUIRED_FOR": "*", "OAP_LOG_TOKENS_FILE": str(tokens)}
    log = log_service(tmp_path / "log", env=env).start()
    try:
        h = "sha256:" + "ef" * 32
        monkeypatch.delenv("OAP_TOKEN", raising=False)
        r = CliRunner().invoke(main, ["add", "--hash", h, "--commitment", "--url", log.url,
                                      "--out", str(tmp_path / "a.tlog-proof")])
        assert r.exit_code == 1 and "401" in r.output and "auth_required" in r.output
        token_file = tmp_path / "token"
        token_file.write_text(token + "\n")
        r = CliRunner().invoke(main, ["add", "--hash", h, "--commitment", "--url", log.url, "--token-file",
                                      str(token_file), "--out", str(tmp_path / "b.tlog-proof")])
        assert r.exit_code == 0, r.output
        monkeypatch.setenv("OAP_TOKEN", token)
        r = CliRunner().invoke(main, ["add", "--hash", h, "--commitment", "--url", log.url,
                                      "--out", str(tmp_path / "c.tlog-proof")])
        assert r.exit_code == 0, r.output
    finally:
        log.kill()
