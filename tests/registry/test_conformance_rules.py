"""The §31 level rules at a running registry (OAP-CORE-1.0 §31, §5.2; docs/architecture.md §5):
records submitted over HTTP as a client would, to a registry anchoring in a real log, its
did:web principals served over HTTPS by tests/support/didhosts.py.

- L4 independence: a receipt witnessed only by the subject's own key, a controller, a key
  its DID document lists, or a did:web on its host is refused with the witness and the rule;
  an independent witness passes.
- L3 publisher check: a did:key subject is refused; a did:web whose document lists the key passes.
- L5 audit attestation: missing, badly signed, or anchored in a log the registry does not
  trust is refused; an auditor-signed reference anchored in the registry's log passes.
- W3C VC 2.0 with eddsa-jcs-2022 proofs is accepted, a tampered one refused; the compact
  form still is.
"""
from __future__ import annotations

import copy
import uuid

import pytest

from registry.client import make_key_event
from registry.records import signing_bytes as record_signing_bytes
from tlog.client.client import LogClient
from tlog.formats.conformance import add_proof, claims_of, to_vc, validate_conformance
from tlog.formats.ed25519 import sign
from tlog.formats.encoding import b64enc

from tests.support.conformance import WebSubject, audit_entry, audit_for, multikey, web_receipt
from tests.support.didhosts import DidHosts
from tests.support.registry import conformance_doc, did, now_utc, receipt, start_registry
from tests.support.witness import MemLog

pytestmark = pytest.mark.slow

SUBJECT_SEED, OTHER_KEY, WITNESS, W2, W3, AUDITOR, CONTROLLER = (bytes([90 + i]) * 32 for i in range(7))


@pytest.fixture
async def net(tmp_path, log_server):
    """DID hosts and a registry that resolves did:web from them (bootstrap witnesses for L5)."""
    hosts = await DidHosts().start(tmp_path / "tls")
    reg = await start_registry(tmp_path / "registry", log_server, did_ca_file=hosts.ca_file,
                               did_allow_private_networks=True, did_cache_seconds=0,
                               bootstrap_witnesses=",".join(did(s) for s in (WITNESS, W2, W3)))
    try:
        yield hosts, reg
    finally:
        await reg.stop()
        await hosts.close()


def publish(hosts: DidHosts, path: str, seed: bytes, *, host: str | None = None, **doc_kw) -> WebSubject:
    web_did = ":".join(["did:web", host or hosts.host, path])
    subject = WebSubject(web_did, seed, **doc_kw)
    hosts.publish_web(subject.did, subject.document)
    return subject


async def refused(reg, doc, status: int, *fragments: str) -> dict:
    st, body = await reg.post(doc)
    assert st == status, body
    for f in fragments:
        assert f in body["message"], body
    return body


async def test_l4_witnessed_only_by_the_subjects_own_keys_is_refused_and_says_why(net):
    hosts, reg = net
    impl = publish(hosts, f"impl-{uuid.uuid4().hex[:8]}", SUBJECT_SEED)
    # 1. its own key under its did:key name
    body = await refused(reg, conformance_doc(web_receipt(impl, "L4", witnesses=(SUBJECT_SEED,))), 403,
                         f"witness {did(SUBJECT_SEED)} is not independent of the subject {impl.did}",
                         "holds a key that the subject's DID document lists")
    assert body["error"] == "policy_block" and body["witness"] == did(SUBJECT_SEED)
    # 2. another key its DID document lists (a second verification method)
    impl.document["verificationMethod"].append({"id": f"{impl.did}#ops", "type": "Multikey", "controller": impl.did,
                                                "publicKeyMultibase": multikey(OTHER_KEY)})
    hosts.publish_web(impl.did, impl.document)
    await refused(reg, conformance_doc(web_receipt(impl, "L4", witnesses=(OTHER_KEY,))), 403,
                  f"witness {did(OTHER_KEY)} is not independent", "the subject's DID document lists")
    # 3. a controller that a registry key event added (the did:web subject's #k key signs it)
    ctl_impl = publish(hosts, f"ctl-{uuid.uuid4().hex[:8]}", CONTROLLER)
    web_event = {k: v for k, v in make_key_event(CONTROLLER, subject=ctl_impl.did, key=did(W3)).items()
                 if k != "signature"}
    web_event["issued_by"] = ctl_impl.did
    web_event["signature"] = b64enc(sign(CONTROLLER, record_signing_bytes(web_event)))
    st, body = await reg.post(web_event)
    assert st == 200, body
    await refused(reg, conformance_doc(web_receipt(ctl_impl, "L4", witnesses=(W3,))), 403,
                  f"witness {did(W3)} is not independent of the subject {ctl_impl.did}",
                  "it is a controller of the subject (a registry key event names it)")
    # 4. a did:web on the subject's own host
    sibling = publish(hosts, f"team-{uuid.uuid4().hex[:8]}", W2)
    await refused(reg, conformance_doc(web_receipt(impl, "L4", witnesses=(sibling,))), 403,
                  f"witness {sibling.did} is not independent", "it is a did:web on the subject's host localhost")
    # An independent witness passes: a did:key, and a did:web on another host.
    st, body = await reg.post(conformance_doc(web_receipt(impl, "L4", witnesses=(WITNESS,))))
    assert st == 200 and not body["duplicate"], body
    elsewhere = publish(hosts, f"peer-{uuid.uuid4().hex[:8]}", W2, host=f"127.0.0.1%3A{hosts.web_port}")
    st, body = await reg.post(conformance_doc(web_receipt(impl, "L4", witnesses=(elsewhere,))))
    assert st == 200, body


async def test_l3_needs_a_passing_publisher_check(net):
    hosts, reg = net
    await refused(reg, conformance_doc(receipt(SUBJECT_SEED, "L3")), 403, "level L3 needs the publisher check",
                  f"the subject {did(SUBJECT_SEED)} is a did:key")
    impl = publish(hosts, f"pub-{uuid.uuid4().hex[:8]}", SUBJECT_SEED)
    st, body = await reg.post(conformance_doc(web_receipt(impl, "L3")))
    assert st == 200, body
    # The document no longer lists the key: the self signature (and so the check) fails.
    stale = publish(hosts, f"stale-{uuid.uuid4().hex[:8]}", OTHER_KEY)
    forged = web_receipt(WebSubject(stale.did, SUBJECT_SEED), "L3")
    await refused(reg, conformance_doc(forged), 400, "self signature does not verify")
    # A did:web whose document does not resolve fails the check too.
    ghost = WebSubject(":".join(["did:web", hosts.host, "ghost"]), SUBJECT_SEED)
    await refused(reg, conformance_doc(web_receipt(ghost, "L3")), 400, "does not resolve")


async def test_l5_audit_attestation_missing_bad_or_good(net, log_server):
    hosts, reg = net
    impl = publish(hosts, f"l5-{uuid.uuid4().hex[:8]}", SUBJECT_SEED)
    peers = (WITNESS, W2, W3)  # the registry's bootstrap witnesses
    await refused(reg, conformance_doc(web_receipt(impl, "L5", witnesses=peers)), 400,
                  "level L5 needs an audit attestation")
    # The auditor anchors the attestation document's hash in the registry's log, as a client would.
    async with LogClient(log_server.url) as log:
        anchor = (await log.anchor(audit_entry(AUDITOR))).bundle
    good = audit_for(impl.did, AUDITOR, anchor=anchor)
    # Signed for another subject: refused.
    other = audit_for("did:web:someone.else", AUDITOR, anchor=anchor)
    await refused(reg, conformance_doc(web_receipt(impl, "L5", witnesses=peers, audit=other)), 400,
                  "the auditor's signature", "does not verify")
    # Digest changed after signing: refused.
    bad = dict(good, digest="sha256:" + "00" * 32)
    await refused(reg, conformance_doc(web_receipt(impl, "L5", witnesses=peers, audit=bad)), 400, "does not verify")
    # Anchored in a log the registry does not trust: refused.
    stranger = audit_for(impl.did, AUDITOR, log=MemLog(origin="untrusted.example/log", seed=bytes([5]) * 32))
    await refused(reg, conformance_doc(web_receipt(impl, "L5", witnesses=peers, audit=stranger)), 403,
                  "audit attestation's anchor is not proven in a log this registry trusts")
    # The subject auditing itself: refused as not independent.
    own = audit_for(impl.did, SUBJECT_SEED)
    await refused(reg, conformance_doc(web_receipt(impl, "L5", witnesses=peers, audit=own)), 403,
                  f"auditor {did(SUBJECT_SEED)} is not independent")
    st, body = await reg.post(conformance_doc(web_receipt(impl, "L5", witnesses=peers, audit=good)))
    assert st == 200, body
    st, rec, _ = await reg.get(f"/v1/records/{body['id']}")
    assert st == 200 and rec["record"]["audit"]["auditor"] == did(AUDITOR)


async def test_vc_receipts_with_eddsa_jcs_2022_are_accepted_and_tampering_refused(net):
    hosts, reg = net
    impl = publish(hosts, f"vc-{uuid.uuid4().hex[:8]}", SUBJECT_SEED)
    compact = web_receipt(impl, "L4", witnesses=(WITNESS,))
    vc = add_proof(to_vc(claims_of(compact)), SUBJECT_SEED, impl.key_id)
    vc = add_proof(vc, WITNESS)  # the witness's proof joins the proof set
    assert isinstance(vc["proof"], list) and len(vc["proof"]) == 2
    st, body = await reg.post(conformance_doc(vc))
    assert st == 200 and body["type"] == "conformance" and body["id"] == compact["id"], body
    st, rec, _ = await reg.get(f"/v1/records/{body['id']}")
    assert rec["record"] == vc  # stored verbatim: the proofs cover it exactly
    # Tampered: the level raised after signing.
    tampered = copy.deepcopy(vc)
    tampered["id"] = compact["id"] + "-2"
    await refused(reg, conformance_doc(tampered), 400, "proof[0]: self signature does not verify")
    tampered = copy.deepcopy(add_proof(to_vc(claims_of(web_receipt(impl, "L3"))), SUBJECT_SEED, impl.key_id))
    tampered["credentialSubject"]["level"] = "L4"
    await refused(reg, conformance_doc(tampered), 400, "does not verify")
    # A VC witnessed only by the subject's own key is refused like the compact form.
    own = add_proof(add_proof(to_vc(claims_of(web_receipt(impl, "L4"))), SUBJECT_SEED, impl.key_id), SUBJECT_SEED)
    await refused(reg, conformance_doc(own), 403, f"witness {did(SUBJECT_SEED)} is not independent")
    # The compact form is still accepted.
    st, body = await reg.post(conformance_doc(web_receipt(impl, "L4", witnesses=(W2,))))
    assert st == 200, body
    assert validate_conformance(vc, now=now_utc(), lookup=impl.lookup()).form == "vc"
