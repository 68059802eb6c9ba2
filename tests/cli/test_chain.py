"""The receipt hash chain (OAP-CORE-1.0 §19.2): a lost, altered, forked or reordered
receipt breaks it, and the report says where; `oap-log chain` runs it on files."""
from __future__ import annotations

import json
import random

from click.testing import CliRunner

from tlog.client.chain import verify_chain
from tlog.formats.entries import receipt_hash
from tlog.formats.hashing import format_sha256
from tlog.server.cli import main

ALICE = "did:web:alice.example"


def chain(n: int, *, start: bytes | None = None) -> list[dict]:
    out: list[dict] = []
    prev = start
    for i in range(n):
        r = {"receipt_id": f"urn:oap:receipt:{i}", "type": "invocation", "principal_did": ALICE,
             "timestamp": f"2026-05-02T10:00:{i:02d}Z", "input_hash": "sha256:" + f"{i:064x}"}
        if prev is not None:
            r["previous_receipt_hash"] = format_sha256(prev)
        out.append(r)
        prev = receipt_hash(r)
    return out


def test_an_intact_chain_in_any_order_verifies_to_its_head():
    rs = chain(12)
    shuffled = rs[:]
    random.Random(7).shuffle(shuffled)
    report = verify_chain([*shuffled, rs[3]], principal=ALICE)  # a duplicate copy is not a fork
    assert report.ok, report.problems
    assert report.chain == tuple(receipt_hash(r) for r in rs) and report.head == receipt_hash(rs[-1])
    # continued from a hash checked before
    more = chain(3, start=report.head)
    assert verify_chain(more, after=report.head).ok


def test_loss_alteration_fork_and_time_travel_are_each_reported():
    rs = chain(6)
    lost = verify_chain(rs[:2] + rs[3:])
    assert not lost.ok and len(lost.chain) == 2
    assert any("is not among the receipts" in p for p in lost.problems)
    altered = [dict(r) for r in rs]
    altered[2]["input_hash"] = "sha256:" + "ff" * 32
    report = verify_chain(altered)
    assert not report.ok and len(report.chain) == 3 and any("missing or was altered" in p for p in report.problems)
    fork = dict(rs[3], receipt_id="urn:oap:receipt:evil")
    report = verify_chain([*rs, fork])
    assert any(p.startswith("fork:") for p in report.problems)
    back = chain(3)
    back[2]["timestamp"] = "2026-05-01T00:00:00Z"
    assert any("timestamped before" in p for p in verify_chain(back).problems)
    two_starts = verify_chain([*chain(2), {"receipt_id": "urn:oap:receipt:other"}])
    assert any("fork at the start" in p for p in two_starts.problems)
    assert any("names principal" in p for p in verify_chain(chain(2), principal="did:web:bob.example").problems)
    assert "no start" in verify_chain(rs[1:]).problems[0]


def test_cli_chain_reports_and_exits_non_zero_on_a_break(tmp_path):
    rs = chain(4)
    paths = []
    for i, r in enumerate(rs):
        p = tmp_path / f"r{i}.json"
        p.write_text(json.dumps(r))
        paths.append(str(p))
    ok = CliRunner().invoke(main, ["chain", *paths])
    assert ok.exit_code == 0 and "4 receipts" in ok.output and format_sha256(receipt_hash(rs[-1])) in ok.output
    js = CliRunner().invoke(main, ["chain", *paths, "--json"])
    assert json.loads(js.output)["head"] == format_sha256(receipt_hash(rs[-1]))
    bad = CliRunner().invoke(main, ["chain", paths[0], paths[1], paths[3]])
    assert bad.exit_code == 1 and "missing or was altered" in bad.output
