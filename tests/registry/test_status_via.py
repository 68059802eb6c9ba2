"""A conformance receipt answers `suspended` / `revoked` with its subject (docs/architecture.md
§6.1): its answer's block carries `via`, the receipt itself with its evidence of registration,
and the deciding record is its subject's. Both offline verifiers check `via`: it must be this
receipt, proven as any deciding record is, and the deciding record must decide the standing of
the subject the receipt names.

A real log process and registry on 127.0.0.1; answers come from the registry's own code. The
forgeries are built by that code too, from a standing the registry does not hold (a registry
that lies, signing and anchoring what it forged), so every refusal is of a well-formed answer
whose leaf, tree, statement and anchors verify.
"""
from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from registry.client import RegistryClient, make_key_event, make_revocation
from registry.standing import Standing
from registry.status import Epoch, build_tree, sign_object
from registry.statusverify import StatusVerificationError, verify_status
from tlog.formats.ed25519 import generate_seed
from tlog.formats.hashing import format_sha256

from tests.support.registry import (
    Running,
    answer,
    cli_status,
    conformance_doc,
    did,
    mirror_verdicts,
    now_utc,
    post,
    raw,
    receipt,
    utc,
)

pytestmark = pytest.mark.slow


def verify(reg: Running, resp: dict[str, Any], key: str):
    return verify_status(resp, registry=reg.svc.registry, status_id=key, policy=reg.policy)


async def test_a_receipt_is_suspended_then_revoked_with_its_subject_and_every_client_says_so(reg, tmp_path):
    p = generate_seed()
    rc = receipt(p)
    await post(reg, conformance_doc(rc))
    rid = rc["id"]
    assert (await answer(reg, rid))[1] == ("good", None, None, None)

    suspend = make_key_event(p, subject=did(p), event="suspend", reason="loss_of_key")
    await post(reg, suspend)
    resp, verdict = await answer(reg, rid)  # verified offline against the registry key and the log
    assert verdict == ("suspended", suspend["effective_at"], "loss_of_key", None)
    assert resp["suspension"]["via"]["record"] == rc and resp["suspension"]["record"] == suspend
    assert verify(reg, resp, rid).subject == did(p)
    code, js = await cli_status(reg, rid, tmp_path)  # online, then --offline on the saved answer
    assert code == 5 and js["status"] == "suspended" and js["subject"] == did(p), js
    assert js["suspended_at"] == suspend["effective_at"] and js["reason"] == "loss_of_key", js
    async with RegistryClient(reg.url) as c:
        got = await c.status(rid)
    v = verify(reg, got, rid)
    assert (v.status, v.subject, v.reason) == ("suspended", did(p), "loss_of_key")

    compromised = utc(now_utc() - timedelta(minutes=5))  # before the suspension: revoked from then
    revocation = make_revocation(p, kind="key", subject=did(p), reason="key_compromise", effective_at=compromised)
    await post(reg, revocation)
    resp, verdict = await answer(reg, rid)
    assert verdict == ("revoked", compromised, "key_compromise", None)
    assert resp["revocation"]["via"]["record"] == rc and resp["revocation"]["record"] == revocation
    assert (await answer(reg, did(p)))[1] == verdict  # the subject's own answer: the same standing
    code, js = await cli_status(reg, rid, tmp_path)
    assert code == 3 and js["status"] == "revoked" and js["subject"] == did(p), js
    assert js["revoked_at"] == compromised and js["reason"] == "key_compromise" and js["by"] == did(p), js
    async with RegistryClient(reg.url) as c:
        got = await c.status(rid)
    v = verify(reg, got, rid)
    assert (v.status, v.subject, utc(v.revoked_at)) == ("revoked", did(p), compromised)
    # a verifying mirror replays the history and answers (signed with its own key) alike
    keys = [rid, did(p)]
    assert await mirror_verdicts(reg, keys, tmp_path) == {k: (await answer(reg, k))[1] for k in keys}


# --- refusals -----------------------------------------------------------------------------------


async def forge(reg: Running, key: str, standing: Standing) -> dict[str, Any]:
    """The answer a lying registry would sign for `key` with this standing: built, signed and
    anchored in the log by the registry's own code, in an epoch of its own."""
    svc = reg.svc
    assert svc.epoch is not None and svc.seed is not None and svc.producer is not None and svc.anchorer is not None
    now = svc.epoch
    found = {**now.standing, key: standing}
    tree = build_tree(found)
    number = now.number + 1000
    statement = sign_object({**now.statement, "epoch": number, "revoked_size": tree.size,
                             "revoked_root": format_sha256(tree.root)}, svc.seed)
    epoch = Epoch(number, now.this_update, now.next_update, now.head, statement, tree, found, known=now.known,
                  located=dict(now.located))
    for rec in standing.records():
        epoch.located[rec.path] = svc.index.commits[svc.index.seq_of[rec.path]]
    epoch.anchor = (await svc.anchorer.anchor_statement(epoch.statement_hash, epoch.statement_id)).text
    return svc.producer.produce_standing(epoch, key).body


def resigned(reg: Running, resp: dict[str, Any], change) -> dict[str, Any]:
    """The answer changed, then signed again by the registry key (so that the deeper checks run)."""
    d = copy.deepcopy(resp)
    change(d["revocation"])
    assert reg.svc.seed is not None
    return sign_object(d, reg.svc.seed)


async def test_via_is_refused_unless_it_is_this_receipt_proven_and_naming_the_deciding_records_subject(reg):
    p, q = generate_seed(), generate_seed()
    rp, rp2, rq = receipt(p), receipt(p), receipt(q)
    for r in (rp, rp2, rq):
        await post(reg, conformance_doc(r))
    # P is revoked after its receipts were committed: their via and the revocation are in other commits
    await post(reg, make_revocation(p, kind="key", subject=did(p), reason="key_compromise"))
    await post(reg, make_revocation(q, kind="key", subject=did(q), reason="unspecified"))
    standing = reg.svc.epoch.standing
    held = standing[rp["id"]]
    assert held.via is not None and held.via.body == rp and held.record.body["subject"] == did(p)
    genuine = await raw(reg, rp["id"])
    v = verify(reg, genuine, rp["id"])
    assert (v.status, v.reason, v.subject) == ("revoked", "key_compromise", did(p))
    # the forging machinery makes answers that verify: each refusal below is the change's
    assert verify(reg, await forge(reg, rp["id"], held), rp["id"]).subject == did(p)

    def refused(resp: dict[str, Any], key: str, reason: str) -> None:
        with pytest.raises(StatusVerificationError, match=reason):
            verify(reg, resp, key)

    # via.record is another receipt (of the same subject)
    other = replace(held, via=standing[rp2["id"]].via)
    refused(await forge(reg, rp["id"], other), rp["id"], "^via: not this conformance receipt$")
    # via on a DID's answer (the DID's own standing, with its receipt as via)
    on_did = replace(standing[did(p)], via=held.via)
    refused(await forge(reg, did(p), on_did), did(p), "^via: only a conformance receipt's answer")
    # via.record names P, the deciding record is Q's revocation (its own time and reason)
    q_held = standing[rq["id"]]
    crossed = replace(held, record=q_held.record, since=q_held.since, reason=q_held.reason)
    refused(await forge(reg, rp["id"], crossed), rp["id"], "^the record does not revoke this id")
    # a receipt's answer without via, its deciding record the subject's: refused as before
    refused(await forge(reg, rp["id"], replace(held, via=None)), rp["id"], "^the record does not revoke this id")
    refused(resigned(reg, genuine, lambda b: b.pop("via")), rp["id"], "^the record does not revoke this id")

    # via's evidence altered (then the answer signed again)
    def edit(change):
        return lambda b: change(b["via"])
    deciding = genuine["revocation"]
    assert deciding["via"]["seq"] != deciding["seq"]  # the receipt and the revocation are in other commits
    another = (await raw(reg, rp2["id"]))["revocation"]["via"]
    for change, reason in (
        (edit(lambda e: e["record"].update(level="L3")), "^via: "),  # its signature no longer holds
        (edit(lambda e: e["git_path"].reverse()), "^Git path proof"),
        (edit(lambda e: e.update(anchor=deciding["anchor"])), "^anchor of commit"),
        (edit(lambda e: e.update(seq=e["seq"] + 1)), "^anchor of commit"),
        (edit(lambda e: e.update(path=deciding["path"])), "^via: path is not the record's$"),
        (edit(lambda e: e.update(note="x")), "^via: evidence malformed$"),
        (lambda b: b.update(via="x"), "^via: evidence malformed$"),
        (lambda b: b.update(via=another), "^via: not this conformance receipt$"),
    ):
        refused(resigned(reg, genuine, change), rp["id"], reason)
    # linked_by must be evidence alone too (a block's other fields are not evidence)
    refused(resigned(reg, genuine, lambda b: b.update(linked_by={**b["via"], "via": b["via"]})), rp["id"],
            "^linked_by: evidence malformed$")

