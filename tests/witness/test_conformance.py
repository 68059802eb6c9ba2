"""POST /v1/conformance/witness: peer-witnessing of conformance receipts (OAP-CORE-1.0 §31,
§22.1; docs/architecture.md §4).

The witness is a participant (did:web:witness.example) whose own L4 receipt is registered
in a real registry (an `oap-registry serve` process anchoring in an `oap-log serve`
process, one pair per module), and which consults that registry before it signs."""
from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from registry.client import make_revocation
from tlog.cli import didhost
from tlog.formats import ed25519
from tlog.formats.conformance import sign_conformance, validate_conformance, witness_signature
from tlog.formats.did import did_key_from_public
from tlog.formats.diddoc import lookup_from
from tlog.formats.entries import canonical_entry
from tlog.formats.hashing import leaf_hash
from tlog.formats.keys import Signer
from tlog.formats.proofbundle import ProofBundle
from tlog.merkle.tree import memory_view
from tlog.runtime.keyfiles import write_private_key
from witness.keyfiles import identity_key_name

from tests.support.conformance import WebSubject, audit_for
from tests.support.ladder import (
    registry_key,
    registry_process,
    revocation_of,
    submit,
    suspension_of,
    wait_status,
)
from tests.support.services import ServerProcess
from tests.support.witness import V8_NAME, MemLog, running_witness, witness_config

IDENTITY = bytes([41]) * 32  # the witness's identity key
SUBJECT = bytes([42]) * 32  # the implementation asking to be witnessed
PEERS = [bytes([50 + i]) * 32 for i in range(3)]  # other witnesses (did:key)
AUDITOR = bytes([60]) * 32
# Participants are did:web publishers (§31 L3+), their documents pinned in the witness's and
# the registry's did_documents_dir as a resolver would fetch them.
WEB = WebSubject("did:web:impl.example", SUBJECT)
WITNESS = WebSubject("did:web:witness.example", IDENTITY)
REVOKED = WebSubject("did:web:revoked.example", bytes([43]) * 32)  # its DID revoked (key_compromise)
SUSPENDED = WebSubject("did:web:suspended.example", bytes([44]) * 32)  # suspended (§5.3)
STRANGER = WebSubject("did:web:stranger.example", bytes([45]) * 32)  # never registered: `unknown`
FALLEN = WebSubject("did:web:fallen.example", bytes([46]) * 32)  # a witness whose own L4 receipt is revoked
UNREGISTERED = WebSubject("did:web:unregistered.example", bytes([47]) * 32)  # a witness whose L4 is not registered
STOLEN = WebSubject("did:web:stolen.example", bytes([48]) * 32)  # a witness whose identity key was compromised
PARTICIPANTS = {s.seed: s for s in (WEB, WITNESS, REVOKED, SUSPENDED, STRANGER, FALLEN, UNREGISTERED, STOLEN)}
LOOKUP = lookup_from([(s.did, s.document) for s in PARTICIPANTS.values()])


def did(seed: bytes) -> str:
    if seed in PARTICIPANTS:
        return PARTICIPANTS[seed].did
    return did_key_from_public(ed25519.public_from_seed(seed))


def ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def receipt(subject: bytes, level: str, peers: list[bytes], *, days: tuple[int, int] = (-1, 60),
            rid: str = "urn:oap:conformance:test-1", audit: bool = True, as_did_key: bool = False) -> dict[str, Any]:
    now = datetime.now(UTC).replace(microsecond=0)
    web = subject in PARTICIPANTS and not as_did_key
    body = {
        "id": rid, "subject": did(subject) if web else did_key_from_public(ed25519.public_from_seed(subject)),
        "level": level, "profile": "commercial",
        "suite": {"name": "oap-suite", "version": "1.0.0"}, "results_digest": "sha256:" + "cd" * 32,
        "issued_at": ts(now + timedelta(days=days[0])), "expires_at": ts(now + timedelta(days=days[1])),
    }
    if level == "L5" and audit:
        body["audit"] = audit_for(did(subject), AUDITOR)
    r = sign_conformance(body, subject, by=PARTICIPANTS[subject].key_id if web else None)
    for p in peers:
        r["signatures"].append(witness_signature(r, p, PARTICIPANTS[p].key_id if p in PARTICIPANTS else None))
    return r


def anchored(log: MemLog, rec: dict[str, Any], *, others: int = 4, lookup=LOOKUP) -> str:
    """A .tlog-proof for the conformance entry of `rec` at index 2 of a small in-memory log."""
    entry = canonical_entry({"type": "conformance", "receipt": rec}, lookup=lookup)
    entries = [bytes([i]) * 8 for i in range(2)] + [entry] + [bytes([9, i]) for i in range(others)]
    log.leaves = [leaf_hash(e) for e in entries]
    size = len(entries)
    proof = tuple(memory_view(log.leaves).inclusion_proof(2))
    return ProofBundle(index=2, proof=proof, checkpoint=log.checkpoint(size), extra=entry).to_text()


class Net:
    """The module's registry (and the log it anchors in), its pinned documents and DID host."""

    def __init__(self, root: Path) -> None:
        self.pinned = root / "dids"
        self.pinned.mkdir(parents=True)
        for s in PARTICIPANTS.values():
            (self.pinned / f"{s.did.split(':')[2]}.json").write_text(json.dumps(s.document))
        self.host = didhost.serve(root / "did-web")  # did:web on HTTPS for subjects made by a test
        self.log = ServerProcess(root / "log", "--batch-interval-ms", "5").start()
        self.registry = registry_process(root / "registry", [self.log.url], did_documents_dir=self.pinned,
                                         did_ca_file=self.host.did_host.ca_file,
                                         did_allow_private_networks=True).start()
        self.url = self.registry.url
        self.key = registry_key(root / "registry")
        self.receipts: dict[str, dict[str, Any]] = {}
        asyncio.run(self._populate())

    async def _populate(self) -> None:
        """The registry's records: the witness's own L4 (witnessed by a did:key peer: §31 asks
        no level of an L4 witness), the subjects' L3s, a revoked DID, a suspended one, and a
        witness whose own L4 receipt was revoked."""
        own = receipt(IDENTITY, "L4", PEERS[:1], rid="urn:oap:conformance:witness-own")
        fallen = receipt(FALLEN.seed, "L4", PEERS[:1], rid="urn:oap:conformance:fallen-own")
        stolen = receipt(STOLEN.seed, "L4", PEERS[:1], rid="urn:oap:conformance:stolen-own")
        self.receipts = {"own": own, "fallen": fallen, "stolen": stolen}
        await asyncio.gather(*(submit(self.url, {"type": "conformance", "receipt": r}) for r in (
            own, fallen, stolen, *(receipt(s.seed, "L3", [], rid=f"urn:oap:conformance:{s.did.split(':')[2]}-l3")
                           for s in (WEB, REVOKED, SUSPENDED)))))
        await asyncio.gather(submit(self.url, revocation_of(REVOKED.did, REVOKED.seed)),
                             submit(self.url, suspension_of(SUSPENDED.did, SUSPENDED.seed)),
                             submit(self.url, revocation_of(FALLEN.did, FALLEN.seed, kind="conformance",
                                                            subject=fallen["id"], reason="privilege_withdrawn")),
                             # §28.5: a did:web participant revokes its compromised key, its DID lives on
                             submit(self.url, make_revocation(STOLEN.seed, kind="key", subject=did_key(STOLEN.seed),
                                                              reason="key_compromise")))
        for status_id, want in ((WEB.did, "good"), (own["id"], "good"), (REVOKED.did, "revoked"),
                                (SUSPENDED.did, "suspended"), (fallen["id"], "revoked"),
                                (did_key(STOLEN.seed), "revoked"), (STOLEN.did, "good")):
            await wait_status(self.url, status_id, want)

    def close(self) -> None:
        self.registry.kill()
        self.log.kill()
        self.host.stop()


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    n = Net(tmp_path_factory.mktemp("net"))
    yield n
    n.close()


def setup(tmp: Path, net: Net, *, own: dict | str | None = "registered", trusted: list[str] | None = None,
          identity: WebSubject | None = WITNESS, **kw):
    tmp.mkdir(parents=True, exist_ok=True)
    ident = tmp / "identity.key"
    seed = identity.seed if identity is not None else IDENTITY
    if not ident.exists():
        write_private_key(ident, Signer(identity_key_name(V8_NAME), seed).to_skey())
    own_path = tmp / "own.json"
    if own == "registered":
        own = net.receipts["own"]
    elif isinstance(own, str):
        own = receipt(seed, own, PEERS[:1 if own == "L4" else 3 if own == "L5" else 0],
                      rid="urn:oap:conformance:witness-own-2")
    if own is not None:
        own_path.write_text(json.dumps(own))
    log = MemLog(origin="conformance.example/log", seed=bytes([3]) * 32)
    kw.setdefault("did_documents_dir", net.pinned)
    kw.setdefault("registry_url", net.url)
    kw.setdefault("registry_key", net.key)
    cfg = witness_config(tmp, [], own_receipt=own_path, identity_did=identity.key_id if identity else "",
                         trusted_logs=tuple(trusted if trusted is not None else [log.vkey]),
                         registry_logs=(net.log.vkey,), **kw)
    return cfg, log


async def ask(session, url: str, body: Any, *, ctype: str = "application/json") -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with session.post(url + "/v1/conformance/witness", data=data, headers={"Content-Type": ctype}) as r:
        return r.status, await r.json()


async def test_happy_path_signature_in_receipt_form(tmp_path, net):
    cfg, log = setup(tmp_path, net)
    rec = receipt(SUBJECT, "L4", PEERS[1:2])
    bundle = anchored(log, rec)
    async with running_witness(cfg) as (svc, url, session):
        assert svc.peer.did == WITNESS.did
        status, out = await ask(session, url, {"receipt": rec, "bundle": bundle})
        assert status == 200, out
        sig = out["signature"]
        assert set(sig) == {"by", "alg", "value"} and sig["by"] == WITNESS.key_id and sig["alg"] == "EdDSA"
        assert sig == witness_signature(rec, IDENTITY, WITNESS.key_id)
        checked = validate_conformance(out["receipt"], now=datetime.now(UTC), lookup=LOOKUP)
        assert WITNESS.did in checked.witnesses and len(checked.witnesses) == 2
        assert out["inclusion"] == {"origin": log.origin, "index": 2, "tree_size": 7}
        assert out["witness_receipt"] == net.receipts["own"]
        # what the registry said, in answers it verified (§22.1)
        assert out["standing"]["registry"] == net.key
        assert out["standing"]["subject"] == {"id": WEB.did, "status": "good"}
        assert out["standing"]["witness"] == {"id": net.receipts["own"]["id"], "status": "good"}
        # Asking again gives the same signature and does not add it twice.
        status, again = await ask(session, url, {"receipt": out["receipt"], "bundle": anchored(log, out["receipt"])})
        assert status == 200 and again["signature"] == sig
        assert again["receipt"]["signatures"].count(sig) == 1
        async with session.get(url + "/metrics") as r:
            assert 'oap_witness_conformance_requests_total{status="200"} 2.0' in await r.text()
        async with session.get(url + "/v1/info") as r:
            info = await r.json()
        assert (info["identity"], info["signs_as"], info["registry"]) == (WITNESS.did, WITNESS.key_id, net.url)


async def test_gives_the_first_signature_of_an_l4_and_the_first_three_of_an_l5(tmp_path, net):
    """The level's witness minimum is the registry's to enforce: a peer witness signs an L4
    receipt that has no witness yet, and an L5 one with none, one or two."""
    cfg, log = setup(tmp_path, net)
    async with running_witness(cfg) as (_svc, url, session):
        first = receipt(SUBJECT, "L4", [])
        status, out = await ask(session, url, {"receipt": first, "bundle": anchored(log, first)})
        assert status == 200, out
        assert validate_conformance(out["receipt"], now=datetime.now(UTC), lookup=LOOKUP).witnesses == (WITNESS.did,)
        for n in range(3):
            l5 = receipt(SUBJECT, "L5", PEERS[:n])
            status, out = await ask(session, url, {"receipt": l5, "bundle": anchored(log, l5)})
            assert status == 200, (n, out)
            assert len(out["receipt"]["signatures"]) == n + 2  # the self signature, n peers and ours
        # An L5 receipt still needs its audit attestation (§31), whatever its witnesses.
        bare = receipt(SUBJECT, "L5", [], audit=False)
        status, out = await ask(session, url, {"receipt": bare, "bundle": "checked after the receipt\n"})
        assert status == 400 and "needs an audit attestation" in out["message"], out


async def test_signs_as_its_participant_did_web_which_registers_at_l4(tmp_path, net):
    """A peer witness is a participant: its signature names its did:web key, and its own L4
    receipt is registered like anyone's (the module's registry accepted it and answers
    `good`); a did:key names no publisher, so a witness that signs as one cannot hold L4."""
    cfg, log = setup(tmp_path, net)
    rec = receipt(SUBJECT, "L4", [])
    async with running_witness(cfg) as (_svc, url, session):
        status, out = await ask(session, url, {"receipt": rec, "bundle": anchored(log, rec)})
    assert status == 200 and out["signature"]["by"] == WITNESS.key_id, out
    # the receipt it made verifies with the witness's DID document, and the registry counts it
    assert validate_conformance(out["receipt"], now=datetime.now(UTC), lookup=LOOKUP).witnesses == (WITNESS.did,)
    witnessed = receipt(SUBJECT, "L4", [IDENTITY], rid="urn:oap:conformance:impl-l4")
    assert (await submit(net.url, {"type": "conformance", "receipt": witnessed}))["id"] == witnessed["id"]

    # the same witness as a did:key: its L4 receipt fails the publisher check, in the
    # registry and in the witness itself, which therefore refuses to witness
    as_key = receipt(IDENTITY, "L4", PEERS[:1], rid="urn:oap:conformance:witness-as-did-key", as_did_key=True)
    assert as_key["subject"] == did_key_from_public(ed25519.public_from_seed(IDENTITY))
    cfg2, log2 = setup(tmp_path / "did-key", net, own=as_key, identity=None)
    async with running_witness(cfg2) as (svc, url, session):
        assert svc.peer.did == as_key["subject"]
        status, out = await ask(session, url, {"receipt": rec, "bundle": anchored(log2, rec)})
    assert status == 403 and "names no publisher" in out["message"], out


@pytest.mark.parametrize("who,status_word", [(REVOKED, "revoked since"), (SUSPENDED, "suspended since"),
                                             (STRANGER, "knows nothing of the subject")])
async def test_refuses_a_subject_the_registry_does_not_answer_good_about(tmp_path, net, who, status_word):
    """§22.1: the witness consults the registry about the subject before it vouches for it."""
    cfg, log = setup(tmp_path, net)
    rec = receipt(who.seed, "L4", [])
    async with running_witness(cfg) as (_svc, url, session):
        status, out = await ask(session, url, {"receipt": rec, "bundle": anchored(log, rec)})
    assert status == 403 and out["error"] == "policy_block", out
    assert status_word in out["message"] and who.did in out["message"], out
    if who is REVOKED:
        assert "(reason key_compromise)" in out["message"]


@pytest.mark.parametrize("case", ["revoked", "unregistered"])
async def test_refuses_when_the_registry_does_not_answer_good_about_its_own_receipt(tmp_path, net, case):
    if case == "revoked":
        cfg, log = setup(tmp_path, net, own=net.receipts["fallen"], identity=FALLEN)
        want = f"own conformance receipt {net.receipts['fallen']['id']} is revoked since"
    else:
        cfg, log = setup(tmp_path, net, own=receipt(UNREGISTERED.seed, "L4", PEERS[:1]), identity=UNREGISTERED)
        want = "is not in the registry"
    rec = receipt(SUBJECT, "L4", [])
    async with running_witness(cfg) as (_svc, url, session):
        status, out = await ask(session, url, {"receipt": rec, "bundle": anchored(log, rec)})
    assert status == 403 and want in out["message"], out


async def test_refuses_when_the_key_it_signs_with_is_revoked_though_its_did_stands(tmp_path, net):
    """§28.5: its did:web and its own receipt answer `good`, but the identity key it would sign
    with is revoked for compromise: a signature made with it would not count, so it does not sign."""
    cfg, log = setup(tmp_path, net, own=net.receipts["stolen"], identity=STOLEN)
    rec = receipt(SUBJECT, "L4", [])
    async with running_witness(cfg) as (_svc, url, session):
        status, out = await ask(session, url, {"receipt": rec, "bundle": anchored(log, rec)})
    assert status == 403 and out["key"] == did_key(STOLEN.seed), out
    assert f"identity key {did_key(STOLEN.seed)} is revoked since" in out["message"], out
    assert "(reason key_compromise)" in out["message"], out


def did_key(seed: bytes) -> str:
    return did_key_from_public(ed25519.public_from_seed(seed))


async def test_without_a_registry_it_does_not_sign_and_says_why(tmp_path, net):
    rec = receipt(SUBJECT, "L4", [])
    # none configured: refused (fail safe)
    cfg, log = setup(tmp_path / "none", net, registry_url="", registry_key="")
    async with running_witness(cfg) as (_svc, url, session):
        status, out = await ask(session, url, {"receipt": rec, "bundle": anchored(log, rec)})
    assert status == 403 and "consults no registry" in out["message"], out
    # down: 502 naming it
    cfg, log = setup(tmp_path / "down", net, registry_url="http://127.0.0.1:9", registry_key=net.key)
    async with running_witness(cfg) as (_svc, url, session):
        status, out = await ask(session, url, {"receipt": rec, "bundle": anchored(log, rec)})
    assert status == 502 and out["error"] == "upstream_error" and "127.0.0.1:9" in out["message"], out
    # answers signed by another key than the one pinned: not believed
    other = did_key_from_public(ed25519.public_from_seed(bytes([99]) * 32))
    cfg, log = setup(tmp_path / "key", net, registry_key=other)
    async with running_witness(cfg) as (_svc, url, session):
        status, out = await ask(session, url, {"receipt": rec, "bundle": anchored(log, rec)})
    assert status == 502 and "not signed by the registry key" in out["message"], out


@pytest.mark.parametrize("own,why", [
    (None, "missing"),
    ("L3", "level L3"),
    ("expired", "expired"),
    ("other", "about"),
    ("tampered", "does not verify"),
    ("L4-no-peer", "needs at least 1 witness"),
])
async def test_refuses_without_its_own_valid_l4_receipt(tmp_path, net, own, why):
    if own == "expired":
        own = receipt(IDENTITY, "L4", PEERS[:1], days=(-100, -10))
    elif own == "other":
        own = receipt(SUBJECT, "L4", PEERS[:1])
    elif own == "tampered":
        own = receipt(IDENTITY, "L4", PEERS[:1])
        own["profile"] = "standard"  # any edit after signing
    elif own == "L4-no-peer":
        own = receipt(IDENTITY, "L4", [])
    cfg, log = setup(tmp_path, net, own=own)
    rec = receipt(SUBJECT, "L4", PEERS[1:2])
    async with running_witness(cfg) as (_svc, url, session):
        status, out = await ask(session, url, {"receipt": rec, "bundle": anchored(log, rec)})
    assert status == 403 and out["error"] == "policy_block"
    assert why in out["message"] and "own conformance receipt" in out["message"]


async def test_own_level_l5_required_when_configured(tmp_path, net):
    cfg, log = setup(tmp_path, net, require_own_level="L5")
    rec = receipt(SUBJECT, "L4", PEERS[1:2])
    async with running_witness(cfg) as (_svc, url, session):
        status, out = await ask(session, url, {"receipt": rec, "bundle": anchored(log, rec)})
    assert status == 403 and "L5" in out["message"]


async def test_refusals_of_the_request(tmp_path, net):
    cfg, log = setup(tmp_path, net)
    rec = receipt(SUBJECT, "L4", PEERS[1:2])
    good = anchored(log, rec)
    async with running_witness(cfg) as (_svc, url, session):
        async def expect(body, status, code, fragment="", **kw):
            got, out = await ask(session, url, body, **kw)
            assert (got, out["error"]) == (status, code), out
            assert fragment in out["message"], out

        # Not the shape asked for.
        await expect(b"{not json", 400, "invalid_input")
        await expect({"receipt": rec}, 400, "invalid_input", "bundle")
        await expect({"receipt": rec, "bundle": 5}, 400, "invalid_input")
        await expect({"receipt": rec, "bundle": good}, 415, "invalid_input", ctype="text/plain")
        # The receipt itself.
        bad_sig = dict(rec, profile="standard")  # any edit after signing
        await expect({"receipt": bad_sig, "bundle": good}, 400, "invalid_input", "does not verify")
        old = receipt(SUBJECT, "L4", PEERS[1:2], days=(-100, -10))
        await expect({"receipt": old, "bundle": anchored(log, rec)}, 400, "invalid_input", "expired")
        mine = receipt(IDENTITY, "L3", PEERS[1:2])
        await expect({"receipt": mine, "bundle": anchored(log, mine)}, 403, "policy_block", "own")
        # Its inclusion.
        other_rec = receipt(SUBJECT, "L4", PEERS[1:2], rid="urn:oap:conformance:test-2")
        await expect({"receipt": rec, "bundle": anchored(MemLog(origin=log.origin, seed=log.seed), other_rec)},
                     422, "output_unverifiable", "differs")
        stranger = MemLog(origin="evil.example/log", seed=bytes([4]) * 32)
        await expect({"receipt": rec, "bundle": anchored(stranger, rec)}, 422, "output_unverifiable", "not signed")
        lines = good.split("\n")
        lines[3] = lines[4]  # a wrong inclusion-proof hash
        await expect({"receipt": rec, "bundle": "\n".join(lines)}, 422, "output_unverifiable", "inclusion")
        await expect({"receipt": rec, "bundle": "not a bundle\n"}, 400, "invalid_input")
        # And the good request still works.
        assert (await ask(session, url, {"receipt": rec, "bundle": good}))[0] == 200


async def test_refuses_when_no_log_is_trusted(tmp_path, net):
    cfg, log = setup(tmp_path, net, trusted=[])
    rec = receipt(SUBJECT, "L4", PEERS[1:2])
    async with running_witness(cfg) as (_svc, url, session):
        status, out = await ask(session, url, {"receipt": rec, "bundle": anchored(log, rec)})
    assert status == 403 and "trusts no log" in out["message"]


async def test_own_receipt_check_can_be_disabled(tmp_path, net):
    """With require_own_level "none" (a network's first witnesses, before anyone holds L4)
    it needs no receipt of its own, and still consults the registry about the subject."""
    cfg, log = setup(tmp_path, net, own=None, require_own_level="none")
    rec = receipt(SUBJECT, "L3", [])
    async with running_witness(cfg) as (_svc, url, session):
        status, out = await ask(session, url, {"receipt": rec, "bundle": anchored(log, rec)})
        assert status == 200 and "witness_receipt" not in out, out
        assert out["standing"]["witness"] == {"id": WITNESS.did, "status": "good"}
        revoked = receipt(REVOKED.seed, "L3", [])
        status, out = await ask(session, url, {"receipt": revoked, "bundle": anchored(log, revoked)})
        assert status == 403 and "revoked since" in out["message"], out


async def test_a_did_web_subject_with_a_did_plc_peer_is_witnessed(tmp_path, net):
    """Subjects and peers named by did:web / did:plc (OAP-CORE-1.0 §5.1), resolved from
    local hosts: the witness checks their ES256 / ES256K signatures, then adds its own."""
    from tests.support.didhosts import PLC_WITNESS, DidHosts, Key, did_receipt, document

    hosts = await DidHosts().start(tmp_path / "tls")
    try:
        subject_key, peer_key = Key("P-256"), Key("secp256k1")
        subject = f"did:web:p256.localhost%3A{net.host.port}"
        doc = document(subject, {"k": subject_key})
        (net.host.did_host.root / "p256.localhost" / ".well-known").mkdir(parents=True)
        (net.host.did_host.root / "p256.localhost" / ".well-known" / "did.json").write_text(json.dumps(doc))
        hosts.publish_plc(PLC_WITNESS, document(PLC_WITNESS, {"atproto": peer_key}))
        await submit(net.url, {"type": "conformance", "receipt": did_receipt(subject, subject_key)})  # known
        await wait_status(net.url, subject, "good")
        cfg, log = setup(tmp_path / "w", net, did_ca_file=net.host.did_host.ca_file, did_allow_private_networks=True,
                         did_plc_directory=hosts.plc_url)
        rec = did_receipt(subject, subject_key, witnesses=((PLC_WITNESS, peer_key),), level="L4")
        forged = did_receipt(subject, Key("P-256"), level="L4")
        pinned = lookup_from([(subject, doc), (PLC_WITNESS, hosts.docs[f"/{PLC_WITNESS}"])])
        async with running_witness(cfg) as (_svc, url, session):
            status, out = await ask(session, url, {"receipt": rec, "bundle": anchored(log, rec, lookup=pinned)})
            assert status == 200, out
            assert out["signature"] == witness_signature(rec, IDENTITY, WITNESS.key_id)
            status, out = await ask(session, url, {"receipt": forged, "bundle": anchored(log, rec, lookup=pinned)})
            assert status == 400 and "does not verify" in out["message"]
        assert hosts.hits[f"/{PLC_WITNESS}"] == 1
    finally:
        await hosts.close()


async def test_refuses_a_subject_whose_did_document_lists_its_identity_key(tmp_path, net):
    """§31 independence: an implementation that lists the witness's identity key in its own
    DID document is the witness under another name; the witness refuses and says why."""
    related = WebSubject("did:web:impl.example", SUBJECT)
    related.document["verificationMethod"].append(
        {"id": "did:web:impl.example#ops", "type": "Multikey", "controller": "did:web:impl.example",
         "publicKeyMultibase": "z" + __import__("base58").b58encode(
             b"\xed\x01" + ed25519.public_from_seed(IDENTITY)).decode()})
    related.document["assertionMethod"].append("did:web:impl.example#ops")
    pinned = tmp_path / "dids"
    pinned.mkdir()
    for s in (WITNESS, related):
        (pinned / f"{s.did.split(':')[2]}.json").write_text(json.dumps(s.document))
    cfg, log = setup(tmp_path, net, did_documents_dir=pinned)
    rec = receipt(SUBJECT, "L4", PEERS[1:2])
    async with running_witness(cfg) as (_svc, url, session):
        status, out = await ask(session, url,
                                {"receipt": rec, "bundle": anchored(log, rec, lookup=related.lookup(
                                    (WITNESS.did, WITNESS.document)))})
    assert status == 403 and out["error"] == "policy_block", out
    assert f"witness {WITNESS.did} is not independent of the subject did:web:impl.example" in out["message"]
    assert "holds a key that the subject's DID document lists" in out["message"]


async def test_a_vc_receipt_gets_an_eddsa_jcs_2022_proof(tmp_path, net):
    """A receipt in W3C VC 2.0 form is witnessed with a Data Integrity proof added to its
    proof set (docs/architecture.md §5), deterministically, naming the witness's did:web key."""
    from tlog.formats.conformance import add_proof, claims_of, to_vc

    cfg, log = setup(tmp_path, net)
    compact = receipt(SUBJECT, "L4", [])
    vc = add_proof(to_vc(claims_of(compact)), SUBJECT, WEB.key_id)
    vc = add_proof(vc, PEERS[1])
    async with running_witness(cfg) as (_svc, url, session):
        status, out = await ask(session, url, {"receipt": vc, "bundle": anchored(log, vc)})
        assert status == 200, out
        proof = out["signature"]
        assert proof["cryptosuite"] == "eddsa-jcs-2022" and proof["verificationMethod"] == WITNESS.key_id
        assert out["receipt"]["proof"][-1] == proof and len(out["receipt"]["proof"]) == 3
        checked = validate_conformance(out["receipt"], now=datetime.now(UTC), lookup=LOOKUP)
        assert checked.form == "vc" and checked.witnesses == (did(PEERS[1]), WITNESS.did)
        again = await ask(session, url, {"receipt": out["receipt"], "bundle": anchored(log, out["receipt"])})
        assert again[0] == 200 and again[1]["signature"] == proof and len(again[1]["receipt"]["proof"]) == 3
