"""`oap-registry did-document` and `oap-registry conformance`: what a participant runs to
climb the §31 ladder (the whole climb against real services: tests/system/test_ladder.py)."""
from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from registry.cli import main
from registry.receipts import check_answer
from tlog.errors import VerificationError
from tlog.formats import ed25519
from tlog.formats.conformance import add_witness_signature, validate_conformance
from tlog.formats.diddoc import keys_from_document, lookup_from
from tlog.formats.hashing import format_sha256, sha256
from tlog.formats.keys import Signer
from tlog.runtime.keyfiles import read_seed, write_private_key

WEB = "did:web:impl.example"


@pytest.fixture
def key(tmp_path):
    path = tmp_path / "impl.key"
    write_private_key(path, Signer.generate("impl").to_skey())
    return path


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def test_did_document_lists_the_key_for_assertions(key):
    r = invoke("did-document", "--key", str(key), "--did", WEB)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    keys = keys_from_document(WEB, doc)
    assert [(k.id, k.public) for k in keys] == [(f"{WEB}#key-1", ed25519.public_from_seed(read_seed(key)))]
    assert doc["assertionMethod"] == [f"{WEB}#key-1"]
    for bad in (["--did", "not-a-did"], ["--did", WEB + "#k"], ["--did", WEB, "--fragment", "a#b"]):
        r = invoke("did-document", "--key", str(key), *bad)
        assert r.exit_code == 2 and "error:" in r.stderr, bad


def test_make_signs_a_receipt_over_the_results_with_the_did_web_key(key, tmp_path):
    results = tmp_path / "results.json"
    results.write_text('{"passed": 412}\n')
    out = tmp_path / "L3.json"
    r = invoke("conformance", "make", "--key", str(key), "--subject", WEB, "--level", "L3", "--suite-version", "1.0.0",
               "--results", str(results), "--days", "30", "--out", str(out))
    assert r.exit_code == 0, r.output
    receipt = json.loads(out.read_text())
    assert json.loads(r.stdout) == {"id": receipt["id"], "subject": WEB, "level": "L3",
                                    "expires_at": receipt["expires_at"], "receipt": str(out)}
    assert receipt["results_digest"] == format_sha256(sha256(results.read_bytes()))
    assert receipt["profile"] == "standard" and receipt["suite"] == {"name": "oap-test-suite", "version": "1.0.0"}
    assert [s["by"] for s in receipt["signatures"]] == [f"{WEB}#key-1"]
    doc = json.loads(invoke("did-document", "--key", str(key), "--did", WEB).stdout)
    checked = validate_conformance(receipt, now=datetime.now(UTC), lookup=lookup_from([(WEB, doc)]))
    assert (checked.subject, checked.level, (checked.expires_at - checked.issued_at).days) == (WEB, "L3", 30)
    # a did:key subject by default; the Non-Commercial levels take the non-commercial profile
    r = invoke("conformance", "make", "--key", str(key), "--level", "L1-NC", "--suite-version", "1",
               "--results-digest", "sha256:" + "ab" * 32, "--out", str(tmp_path / "nc.json"))
    assert r.exit_code == 0, r.output
    nc = json.loads((tmp_path / "nc.json").read_text())
    assert nc["subject"].startswith("did:key:") and nc["profile"] == "non-commercial"


@pytest.mark.parametrize("args,fragment", [
    (["--level", "L9"], "L9"),
    (["--level", "L3"], "--results"),  # neither results nor a digest
    (["--level", "L3", "--results-digest", "sha256:00"], "--results-digest must be"),
    (["--level", "L3", "--results-digest", "sha256:" + "ab" * 32, "--days", "91"], "91"),
    (["--level", "L5", "--results-digest", "sha256:" + "ab" * 32], "audit attestation"),
])
def test_make_refuses_what_no_registry_would_accept(key, tmp_path, args, fragment):
    r = invoke("conformance", "make", "--key", str(key), "--subject", WEB, "--suite-version", "1",
               "--out", str(tmp_path / "r.json"), *args)
    assert r.exit_code == 2 and fragment in r.output, r.output
    assert not (tmp_path / "r.json").exists()


def test_a_witness_answer_counts_only_as_one_more_signature_of_the_receipt_sent(key, tmp_path):
    invoke("conformance", "make", "--key", str(key), "--subject", WEB, "--level", "L4", "--suite-version", "1",
           "--results-digest", "sha256:" + "ab" * 32, "--out", str(tmp_path / "L4.json"))
    receipt = json.loads((tmp_path / "L4.json").read_text())
    sig, signed = add_witness_signature(receipt, bytes([7]) * 32, "did:web:w.example#key-1")
    assert check_answer(receipt, {"signature": sig, "receipt": signed}) == (sig, "did:web:w.example#key-1")
    tampered = {**signed, "level": "L5"}
    own, by_self = add_witness_signature(receipt, read_seed(key), f"{WEB}#other")
    for answer in ({"signature": sig, "receipt": tampered}, {"signature": sig, "receipt": receipt},
                   {"signature": own, "receipt": by_self}, {"receipt": signed}, "no"):
        with pytest.raises(VerificationError):
            check_answer(receipt, answer)


def test_request_witness_says_which_witness_refused_and_keeps_the_receipt(key, tmp_path):
    invoke("conformance", "make", "--key", str(key), "--subject", WEB, "--level", "L4", "--suite-version", "1",
           "--results-digest", "sha256:" + "ab" * 32, "--out", str(tmp_path / "L4.json"))
    before = (tmp_path / "L4.json").read_text()
    (tmp_path / "bundle").write_text("anchored already\n")
    r = invoke("conformance", "request-witness", str(tmp_path / "L4.json"), "--witness", "http://127.0.0.1:9",
               "--bundle", str(tmp_path / "bundle"))
    assert r.exit_code == 1 and "http://127.0.0.1:9 refused: cannot reach" in r.stderr, r.output
    assert (tmp_path / "L4.json").read_text() == before
    r = invoke("conformance", "request-witness", str(tmp_path / "L4.json"), "--witness", "https://w.example",
               "--witness", "https://w.example")
    assert r.exit_code == 2 and "twice" in r.stderr
