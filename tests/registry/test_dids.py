"""Registry principals named by did:web and did:plc (OAP-CORE-1.0 §5.1): conformance
subjects and witnesses, revocation issuers. The documents the registry checked
signatures with are stored in Git beside the records; a mirror replays history
from Git alone (the DID hosts gone), and status answers carry the documents so a
verifier needs no network either."""
from __future__ import annotations

import copy
import json
import uuid
from datetime import timedelta
from urllib.parse import quote

import pytest

from registry.records import signing_bytes as record_signing_bytes
from registry.statusverify import verify_status
from tlog.errors import OAPError
from tlog.formats.diddoc import ED25519, P256, SECP256K1
from tlog.formats.encoding import b64enc

from tests.support.didhosts import PLC_WITNESS, DidHosts, Key, did_receipt, document
from tests.support.registry import BIN, conformance_doc, git, now_utc, run, start_registry, utc, wait_epoch_after

pytestmark = pytest.mark.slow

def did_revocation(issuer: str, key: Key, *, subject: str) -> dict:
    body = {"type": "revocation", "id": f"urn:oap:revocation:{uuid.uuid4()}", "kind": "did", "subject": subject,
            "reason": "key_compromise", "effective_at": utc(now_utc() - timedelta(minutes=1)),
            "issued_at": utc(now_utc()), "issued_by": issuer}
    return {**body, "signature": b64enc(key.sign(record_signing_bytes(body)))}


@pytest.fixture
async def hosts(tmp_path):
    h = await DidHosts().start(tmp_path / "tls")
    yield h
    await h.close()


async def test_did_web_principals_are_checked_stored_in_git_and_replayed_offline(tmp_path, hosts, log_server):
    alice_key, witness_key = Key(P256), Key(SECP256K1)
    alice = hosts.web_did("alice")
    hosts.publish_web(alice, document(alice, {"k": alice_key}))
    hosts.publish_plc(PLC_WITNESS, document(PLC_WITNESS, {"atproto": witness_key}))
    reg = await start_registry(tmp_path / "primary", log_server, did_ca_file=hosts.ca_file,
                               did_allow_private_networks=True, did_plc_directory=hosts.plc_url,
                               did_cache_seconds=0)
    try:
        # a conformance receipt by a did:web subject (ES256), witnessed by a did:plc (ES256K)
        st, conf = await reg.post(conformance_doc(did_receipt(alice, alice_key,
                                                              witnesses=((PLC_WITNESS, witness_key),))))
        assert st == 200, conf
        # a forged self signature is refused, naming the DID
        forged = did_receipt(alice, Key(P256))
        st, body = await reg.post(conformance_doc(forged))
        assert st == 400 and "does not verify" in body["message"]
        # alice rotates her did:web key at her host; the registry sees the new document
        new_key = Key(ED25519)
        hosts.publish_web(alice, document(alice, {"k": new_key}))
        st, rev = await reg.post(did_revocation(alice, new_key, subject=alice))
        assert st == 200, rev
        await wait_epoch_after(reg, rev["seq"])

        # both document versions are in Git, at the layout's paths, byte for byte what was served
        clone = tmp_path / "clone"
        await git("clone", "-q", f"{reg.url}/registry.git", str(clone))
        stored = sorted(p for p in (clone / "dids").rglob("*.json"))
        docs = [json.loads(p.read_text()) for p in stored]
        assert sorted(d["id"] for d in docs) == sorted([alice, alice, PLC_WITNESS])

        # the status answer carries the documents and verifies with no network
        st, resp, _ = await reg.get("/v1/status/" + quote(alice, safe=":"))  # %3A stays in the DID
        assert st == 200 and resp["status"] == "revoked"
        assert {d["document"]["id"] for d in resp["revocation"]["did_documents"]} == {alice}
        v = verify_status(resp, registry=reg.svc.registry, status_id=alice, policy=reg.policy)
        assert v.status == "revoked"
        tampered = copy.deepcopy(resp)
        tampered["revocation"]["did_documents"][0]["document"]["verificationMethod"][0]["publicKeyMultibase"] = \
            Key().multibase
        with pytest.raises(OAPError):
            verify_status(tampered, registry=reg.svc.registry, status_id=alice, policy=reg.policy)

        # the DID hosts go away: a mirror still verifies every commit from Git alone
        await hosts.close()
        code, out, err = await run(str(BIN / "oap-registry"), "mirror", "--upstream", reg.url,
                                   "--data", str(tmp_path / "mirror"), "--registry-key", reg.svc.registry,
                                   "--log-vkey", reg.log.vkey)
        assert code == 0, out + err
        assert f"verified {reg.svc.index.head.seq + 1} commit(s)" in out
        code, out, err = await run(str(BIN / "oap-registry"), "verify", str(clone),
                                   "--registry-key", reg.svc.registry, "--log-vkey", reg.log.vkey)
        assert code == 0, out + err
    finally:
        await reg.stop()


async def test_a_mirror_refuses_a_record_whose_stored_document_was_swapped(tmp_path, hosts, log_server):
    key = Key(P256)
    alice = hosts.web_did("alice")
    hosts.publish_web(alice, document(alice, {"k": key}))
    reg = await start_registry(tmp_path / "primary", log_server, did_ca_file=hosts.ca_file,
                               did_allow_private_networks=True, did_plc_directory=hosts.plc_url)
    try:
        st, body = await reg.post(conformance_doc(did_receipt(alice, key)))
        assert st == 200, body
        clone = tmp_path / "clone"
        await git("clone", "-q", f"{reg.url}/registry.git", str(clone))
        (doc_path,) = list((clone / "dids").rglob("*.json"))
        doc_path.write_text(json.dumps(document(alice, {"k": Key(P256)})))  # another key, same path
        await git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qam", "swap", cwd=clone,
                  date=reg.svc.index.head.time + 1)
        code, out, _ = await run(str(BIN / "oap-registry"), "verify", str(clone),
                                 "--registry-key", reg.svc.registry, "--log-vkey", reg.log.vkey)
        assert code == 1 and "not add-only: modify dids/" in out
    finally:
        await reg.stop()
