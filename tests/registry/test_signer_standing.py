"""The standing of every signer of a conformance receipt at the time it signed (OAP-CORE-1.0
§31, §28.5; docs/architecture.md §6.1 "Witnesses and auditors"), at a running registry
anchoring in a real log, its did:web implementations served over HTTPS by
tests/support/didhosts.py, every answer checked with the CLI online and offline and by a
mirror replaying the history:

- a receipt whose witnesses (or auditor) were revoked for compromise before they signed is
  refused at submission with a 403 naming the signer and the reason: an L4 with its only
  witness compromised, an L5 whose three bootstrap witnesses were;
- a compromise found later and dated at or before the receipt's commit time (the latest time
  the witness can have signed) turns the receipt's answer from `good` to `revoked`, reason
  `witness_invalid`, from its issued_at, with the witness's revocation as evidence;
- a compromise dated after the commit leaves the receipt `good` (the anchored commit proves
  the signature older than the suspected compromise, §28.5).
"""
from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from registry.client import make_revocation
from tlog.client.client import LogClient

from tests.support.conformance import WebSubject, audit_entry, audit_for, web_receipt
from tests.support.didhosts import DidHosts
from tests.support.registry import (
    answer,
    cli_status,
    conformance_doc,
    did,
    mirror_verdicts,
    now_utc,
    post,
    raw,
    start_registry,
    utc,
)
from tests.support.waiting import until

pytestmark = pytest.mark.slow

SUBJECT, B1, B2, B3, AUDITOR = (bytes([140 + i]) * 32 for i in range(5))
"""The implementation's key, the registry's three bootstrap witnesses, an auditor."""


@pytest.fixture
async def net(tmp_path, log_server):
    hosts = await DidHosts().start(tmp_path / "tls")
    reg = await start_registry(tmp_path / "registry", log_server, did_ca_file=hosts.ca_file,
                               did_allow_private_networks=True, did_cache_seconds=0, epoch_seconds=3600,
                               bootstrap_witnesses=",".join(did(s) for s in (B1, B2, B3)))
    try:
        yield hosts, reg
    finally:
        await reg.stop()
        await hosts.close()


def implementation(hosts: DidHosts) -> WebSubject:
    impl = WebSubject(":".join(["did:web", hosts.host, f"impl-{uuid.uuid4().hex[:8]}"]), SUBJECT)
    hosts.publish_web(impl.did, impl.document)
    return impl


def compromise(seed: bytes, at: datetime) -> dict:
    """The witness's owner revokes its key for compromise, from `at` (§28.5)."""
    return make_revocation(seed, kind="key", subject=did(seed), reason="key_compromise", effective_at=utc(at))


async def test_a_witness_compromised_before_it_signed_does_not_count_at_submission(net):
    hosts, reg = net
    impl = implementation(hosts)
    stolen, fine = bytes([150]) * 32, bytes([151]) * 32
    yesterday = now_utc() - timedelta(days=1)
    await post(reg, compromise(stolen, yesterday))
    st, body = await reg.post(conformance_doc(web_receipt(impl, "L4", witnesses=(stolen,))))
    assert st == 403 and body["error"] == "policy_block", body
    assert body["witness"] == did(stolen) and body["reason"] == "key_compromise", body
    assert f"witness {did(stolen)} is revoked (key_compromise) since {utc(yesterday)}" in body["message"], body
    assert "its signature does not count" in body["message"], body
    # another witness that counts makes the level: L4 needs one independent witness
    body = await post(reg, conformance_doc(web_receipt(impl, "L4", witnesses=(stolen, fine))))
    assert (await answer(reg, body["id"]))[1][0] == "good"


async def test_an_l5_whose_bootstrap_witnesses_were_all_compromised_before_signing_is_refused(net, log_server):
    hosts, reg = net
    impl = implementation(hosts)
    async with LogClient(log_server.url) as log:
        anchor = (await log.anchor(audit_entry(AUDITOR))).bundle
    audit = audit_for(impl.did, AUDITOR, anchor=anchor)
    yesterday = now_utc() - timedelta(days=1)
    for seed in (B1, B2, B3):
        await post(reg, compromise(seed, yesterday))
    st, body = await reg.post(conformance_doc(web_receipt(impl, "L5", witnesses=(B1, B2, B3), audit=audit)))
    assert st == 403 and body["witness"] == did(B1) and body["reason"] == "key_compromise", body
    # ...and an auditor whose key was compromised before it signed does not count either
    other = implementation(hosts)
    await post(reg, compromise(AUDITOR, yesterday))
    st, body = await reg.post(conformance_doc(web_receipt(other, "L4", witnesses=(bytes([152]) * 32,),
                                                          audit=audit_for(other.did, AUDITOR, anchor=anchor))))
    assert st == 403 and body["auditor"] == did(AUDITOR) and body["reason"] == "key_compromise", body
    assert "its audit attestation does not count" in body["message"], body


async def test_a_compromise_found_later_revokes_the_receipts_the_witness_may_have_signed_since(net, tmp_path):
    hosts, reg = net
    impl = implementation(hosts)
    early, late = bytes([153]) * 32, bytes([154]) * 32
    before = await post(reg, conformance_doc(web_receipt(impl, "L4", witnesses=(early,))))
    after = await post(reg, conformance_doc(web_receipt(impl, "L4", witnesses=(late,))))
    assert (await answer(reg, before["id"]))[1][0] == (await answer(reg, after["id"]))[1][0] == "good"
    committed = datetime.fromtimestamp(reg.svc.index.commits[after["seq"]].time, UTC)

    # found now, suspected from an hour ago: before either receipt was committed
    suspected = now_utc() - timedelta(hours=1)
    await post(reg, compromise(early, suspected))
    resp, verdict = await answer(reg, before["id"])
    issued = resp["revocation"]["via"]["record"]["issued_at"]
    assert verdict == ("revoked", issued, "witness_invalid", None), verdict
    block = resp["revocation"]
    assert block["record"]["subject"] == did(early) and block["record"]["reason"] == "key_compromise"
    assert block["signer"] == {"id": did(early), "status": "revoked", "since": utc(suspected),
                               "reason": "key_compromise"}
    assert "commit_object" in block["via"]  # the commit whose time bounds the signing
    code, js = await cli_status(reg, before["id"], tmp_path)
    assert code == 3 and js["reason"] == "witness_invalid" and js["signer"]["id"] == did(early), js

    # suspected from after the receipt's commit: its witness signed before, and it stays good (§28.5)
    suspected = committed + timedelta(seconds=2)
    await post(reg, compromise(late, suspected))
    await until(lambda: now_utc() > suspected, 30, "the compromise time to pass")
    await until(lambda: status_of(reg, did(late), "revoked"), 60, "an epoch with the compromise in force")
    assert (await answer(reg, did(late)))[1] == ("revoked", utc(suspected), "key_compromise", None)
    assert (await answer(reg, after["id"]))[1][0] == "good"
    code, js = await cli_status(reg, after["id"], tmp_path)
    assert code == 0 and js["status"] == "good"
    keys = [before["id"], after["id"]]
    assert await mirror_verdicts(reg, keys, tmp_path) == {k: (await answer(reg, k))[1] for k in keys}


async def status_of(reg, key: str, status: str) -> bool:
    return (await raw(reg, key))["status"] == status


async def test_a_did_web_witness_whose_key_is_compromised_voids_its_signatures_through_its_key(net, tmp_path):
    """§28.5 for a participant named by a did:web: it revokes the compromised key (`kind=key`, the
    key's did:key) and its DID lives on. The signatures that key made as the did:web no longer count:
    refused at submission, and a receipt committed before the compromise was found answers `revoked`
    (`witness_invalid`) with the key's revocation as evidence, which a verifier checks offline against
    the key the receipt's signature verified with (a mirror derives the same from the stored documents)."""
    hosts, reg = net
    impl = implementation(hosts)
    k = bytes([155]) * 32
    witness = WebSubject(f"did:web:127.0.0.1%3A{hosts.web_port}:witness-{uuid.uuid4().hex[:8]}", k)  # another host
    hosts.publish_web(witness.did, witness.document)
    before = await post(reg, conformance_doc(web_receipt(impl, "L4", witnesses=(witness,))))
    assert (await answer(reg, before["id"]))[1][0] == "good"

    suspected = now_utc() - timedelta(hours=1)
    await post(reg, compromise(k, suspected))
    resp, verdict = await answer(reg, before["id"])
    assert verdict == ("revoked", resp["revocation"]["via"]["record"]["issued_at"], "witness_invalid", None)
    block = resp["revocation"]
    assert block["record"]["subject"] == did(k) and block["record"]["kind"] == "key"
    assert block["signer"] == {"id": witness.did, "key": did(k), "status": "revoked", "since": utc(suspected),
                               "reason": "key_compromise"}
    assert (await answer(reg, witness.did))[1][0] == "good"  # the DID itself stands: it rotates to a new key
    code, js = await cli_status(reg, before["id"], tmp_path)
    assert code == 3 and js["reason"] == "witness_invalid" and js["signer"]["id"] == witness.did, js

    st, body = await reg.post(conformance_doc(web_receipt(impl, "L4", witnesses=(witness,))))
    assert st == 403 and body["witness"] == witness.did and body["key"] == did(k), body
    assert await mirror_verdicts(reg, [before["id"]], tmp_path) == {before["id"]: verdict}


async def test_a_did_web_subject_whose_key_is_compromised_loses_the_receipts_that_key_signed_since(net, tmp_path):
    """The subject's own signature is judged as a witness's: a did:web implementation that revokes
    its compromised key (§28.5) keeps its DID; its receipt committed after the suspected compromise
    answers `revoked` (`subject_invalid`, `signer.key`), checked offline and by a mirror."""
    hosts, reg = net
    k = bytes([156]) * 32
    impl = WebSubject(":".join(["did:web", hosts.host, f"impl-{uuid.uuid4().hex[:8]}"]), k)
    hosts.publish_web(impl.did, impl.document)
    rec = await post(reg, conformance_doc(web_receipt(impl, "L3")))
    suspected = now_utc() - timedelta(hours=1)
    await post(reg, compromise(k, suspected))
    resp, verdict = await answer(reg, rec["id"])
    assert verdict == ("revoked", resp["revocation"]["via"]["record"]["issued_at"], "subject_invalid", None)
    assert resp["revocation"]["signer"] == {"id": impl.did, "key": did(k), "status": "revoked",
                                            "since": utc(suspected), "reason": "key_compromise"}
    assert (await answer(reg, impl.did))[1][0] == "good"
    code, js = await cli_status(reg, rec["id"], tmp_path)
    assert code == 3 and js["reason"] == "subject_invalid", js
    st, body = await reg.post(conformance_doc(web_receipt(impl, "L3")))
    assert st == 403 and body["subject"] == impl.did and body["key"] == did(k), body
    assert await mirror_verdicts(reg, [rec["id"]], tmp_path) == {rec["id"]: verdict}
