"""The browser decides every registry status answer as registry/statusverify.py does: the
same verdict, or the same error type and reason (tests/ui/jsrun.py runs them in Node, else
in Chromium). The answers come from a real registry anchoring in two real logs (k = 2) on
127.0.0.1, for the sequences of docs/architecture.md §6.1: rotation (superseded, linked by
the previous rotation), kill switch, recovery and kill again (reinstated), suspension and
recovery, automatic suspension (loss_of_key, with and without a rotation), a did:web
principal (DID documents in the answer), expired receipts in both forms, a receipt suspended
and then revoked with its subject (`via`), credentials; then
each answer is checked under several trust policies and tampered with (and signed again
with the registry's key, so that the deeper checks run)."""
from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest

from registry.client import make_key_event, make_kill_switch, make_revocation
from registry.keyrotation import chain_of_document
from registry.status import sign_object
from registry.statusverify import verify_status
from tlog.client.verifier import TrustPolicy
from tlog.errors import OAPError
from tlog.formats import ed25519
from tlog.formats.anchors import parse_anchors
from tlog.formats.conformance import add_proof, to_vc
from tlog.formats.ed25519 import generate_seed
from tlog.formats.encoding import b64enc
from tlog.formats.keys import Signer
from tlog.formats.times import format_utc, parse_utc

from tests.support.conformance import WebSubject, web_receipt
from tests.support.didhosts import DidHosts
from tests.support.registry import Running, conformance_doc, did, receipt, start_registry, wait_epoch_after
from tests.support.services import ServerProcess
from tests.ui.jsrun import run_js

pytestmark = pytest.mark.slow
ORIGINS = ("log-a.diff.test", "log-b.diff.test")


def _normal(v: dict[str, Any]) -> dict[str, Any]:
    """pydid words the reasons of DID documents it finds invalid; the browser has no pydid."""
    if not v.get("ok") and "is not valid:" in v.get("message", ""):
        return {**v, "message": v["message"].split("is not valid:")[0] + "is not valid:"}
    return v


def compare(cases: list[dict[str, Any]], python: Callable[[dict[str, Any]], dict[str, Any]]) -> list[dict[str, Any]]:
    """Python's and the browser's verdict of every case: equal, or the first five that differ."""
    want = [_normal(python(c)) for c in cases]
    got = [_normal(g) for g in run_js(cases)]
    crashes = [(c, g) for c, g in zip(cases, got) if g.get("error") == "CRASH"]
    assert not crashes, crashes[:3]
    diffs = [(c.get("name"), w, g) for c, w, g in zip(cases, want, got, strict=True) if w != g]
    assert not diffs, "\n".join(f"{n}\n  python: {w}\n  js:     {g}" for n, w, g in diffs[:5])
    return want


def _py_verdict(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return {"ok": True, "result": fn()}
    except OAPError as e:
        return {"ok": False, "error": type(e).__name__, "message": e.message}


# --- the registry and its answers -------------------------------------------------------------


class Sequence:
    """A registry in two logs, the records of each §6.1 sequence, and every answer seen."""

    def __init__(self, reg: Running, hosts: DidHosts) -> None:
        self.reg, self.hosts = reg, hosts
        self.answers: list[tuple[str, str]] = []  # (name, the answer's JSON text)

    async def post(self, doc: dict) -> dict:
        st, body = await self.reg.post(doc)
        assert st == 200, body
        await wait_epoch_after(self.reg, body["seq"], timeout=60)
        return body

    async def answer(self, name: str, key: str, want: str | None = None, issuer: str | None = None) -> dict:
        query = f"?issuer={quote(issuer, safe=':')}" if issuer else ""
        st, raw, _ = await self.reg.get("/v1/status/" + quote(key, safe=":") + query)
        assert st == 200, raw
        assert isinstance(raw, dict)
        if want is not None:
            assert raw["status"] == want, (name, raw["status"])
        self.answers.append((name, json.dumps(raw)))
        return raw

    async def run(self) -> None:
        p, a, b = generate_seed(), generate_seed(), generate_seed()
        # rotation: P -> A -> B; P and then A answer revoked/superseded (A linked by the rotation to it)
        await self.post(make_revocation(p, kind="vc", subject="urn:uuid:cred-1", status_list_index=1))
        await self.answer("good principal", did(p), "good")
        await self.answer("vc revoked", "urn:uuid:cred-1", "revoked", issuer=did(p))
        await self.post(make_key_event(p, subject=did(p), key=did(a), event="rotate", effective_at=_ago(120)))
        await self.answer("superseded", did(p), "revoked")
        await self.post(make_key_event(a, subject=did(p), key=did(b), event="rotate", effective_at=_ago(60)))
        await self.answer("superseded, linked by the rotation", did(a), "revoked")
        await self.answer("rotated to, good", did(b), "good")
        # kill switch, recovery, kill switch again
        q, c = generate_seed(), generate_seed()
        grants = f"{did(q)}#oauth_grants"
        await self.post(make_key_event(q, subject=did(q), key=did(c)))
        await self.post(make_kill_switch(q, effective_at=_ago(180)))
        await self.answer("kill switch", grants, "revoked")
        resume = make_key_event(c, subject=did(q), event="resume", effective_at=_ago(120))
        await self.post(resume)
        await self.answer("kill switch, reinstated", grants, "revoked")
        await self.answer("token epoch opened by the recovery", f"{grants}@{resume['id']}", "good")
        await self.post(make_kill_switch(c, principal=did(q), effective_at=_ago(60)))
        await self.answer("killed again", grants, "revoked")
        await self.answer("token epoch killed", f"{grants}@{resume['id']}", "revoked")
        again = make_key_event(c, subject=did(q), event="resume", effective_at=_ago(0))
        await self.post(again)
        await self.answer("token epoch killed, next epoch opened", f"{grants}@{resume['id']}", "revoked")
        # suspension and recovery
        r, d = generate_seed(), generate_seed()
        await self.post(make_key_event(r, subject=did(r), key=did(d)))
        await self.post(make_key_event(r, subject=did(r), event="suspend", reason="loss_of_key", effective_at=_ago(120)))
        await self.answer("suspended", did(r), "suspended")
        await self.answer("suspended token class", f"{did(r)}#trust_tokens", "suspended")
        await self.post(make_key_event(d, subject=did(r), event="resume", effective_at=_ago(60)))
        await self.answer("resumed", did(r), "good")
        # automatic suspension: a lost key and no controller left (with and without a rotation)
        t = generate_seed()
        await self.post(make_revocation(t, kind="key", subject=did(t), reason="loss_of_key"))
        await self.answer("lost key, revoked", did(t), "revoked")
        await self.answer("lost key, suspended token class", f"{did(t)}#oauth_grants", "suspended")
        u, v = generate_seed(), generate_seed()
        await self.post(make_key_event(u, subject=did(u), key=did(v), event="rotate", effective_at=_ago(60)))
        await self.post(make_revocation(v, kind="key", subject=did(v), reason="loss_of_key"))
        await self.answer("lost rotated key, suspended token class", f"{did(u)}#subscription_tokens", "suspended")
        # a did:web principal: its records' signatures checked with the documents in the answer
        w = WebSubject(self.hosts.web_did(f"w-{uuid.uuid4().hex[:8]}"), generate_seed())
        self.hosts.publish_web(w.did, w.document)
        await self.post(_signed_by(w, make_kill_switch(generate_seed(), principal=w.did)))
        await self.answer("did:web kill switch", f"{w.did}#webhook_subscriptions", "revoked")
        await self.post(_signed_by(w, make_revocation(generate_seed(), kind="vc", subject="urn:uuid:w-1",
                                                      status_list_index=7)))
        await self.answer("did:web credential revoked", "urn:uuid:w-1", "revoked", issuer=w.did)
        # a receipt falls with its subject: suspended, then revoked (its answer carries `via`)
        s = generate_seed()
        held = receipt(s, "L1")
        await self.post(conformance_doc(held))
        await self.post(make_key_event(s, subject=did(s), event="suspend", effective_at=_ago(120)))
        await self.answer("receipt suspended with its subject", held["id"], "suspended")
        await self.post(make_revocation(s, kind="key", subject=did(s), reason="key_compromise", effective_at=_ago(180)))
        await self.answer("receipt revoked with its subject", held["id"], "revoked")
        # a receipt whose only witness is found compromised from before the receipt was committed
        impl = WebSubject(self.hosts.web_did(f"impl-{uuid.uuid4().hex[:8]}"), generate_seed())
        self.hosts.publish_web(impl.did, impl.document)
        witness = generate_seed()
        witnessed = web_receipt(impl, "L4", witnesses=(witness,))
        await self.post(conformance_doc(witnessed))
        await self.answer("receipt witnessed, good", witnessed["id"], "good")
        await self.post(make_revocation(witness, kind="key", subject=did(witness), reason="key_compromise",
                                        effective_at=_ago(3600)))
        await self.answer("receipt whose witness was compromised before its commit", witnessed["id"], "revoked")
        # the same with a did:web witness whose key (not its DID) was compromised: `signer.key`
        keyed = WebSubject(f"did:web:127.0.0.1%3A{self.hosts.web_port}:wk-{uuid.uuid4().hex[:8]}", generate_seed())
        self.hosts.publish_web(keyed.did, keyed.document)
        by_key = web_receipt(impl, "L4", witnesses=(keyed,))
        await self.post(conformance_doc(by_key))
        await self.post(make_revocation(keyed.seed, kind="key", subject=did(keyed.seed), reason="key_compromise",
                                        effective_at=_ago(3600)))
        await self.answer("receipt whose did:web witness's key was compromised", by_key["id"], "revoked")
        # a did:web subject whose own key was compromised before its receipt was committed
        keyed2 = WebSubject(f"did:web:127.0.0.1%3A{self.hosts.web_port}:sk-{uuid.uuid4().hex[:8]}", generate_seed())
        self.hosts.publish_web(keyed2.did, keyed2.document)
        signed_by_key = web_receipt(keyed2, "L3")
        await self.post(conformance_doc(signed_by_key))
        await self.post(make_revocation(keyed2.seed, kind="key", subject=did(keyed2.seed), reason="key_compromise",
                                        effective_at=_ago(3600)))
        await self.answer("receipt whose did:web subject's key was compromised", signed_by_key["id"], "revoked")
        # a credential falls with its issuer; a principal with no key left loses its tokens
        i = generate_seed()
        await self.post(make_revocation(i, kind="vc", subject="urn:uuid:cred-later", status_list_index=9,
                                        effective_at=format_utc(datetime.now(UTC).replace(microsecond=0)
                                                                + timedelta(days=30))))
        await self.answer("credential good", "urn:uuid:cred-later", "good", issuer=did(i))
        await self.post(make_revocation(i, kind="did", subject=did(i), reason="key_compromise", effective_at=_ago(60)))
        await self.answer("credential revoked with its issuer", "urn:uuid:cred-later", "revoked", issuer=did(i))
        await self.answer("tokens of a principal with no key left", f"{did(i)}#trust_tokens", "revoked")
        # conformance receipts: revoked, and expired in both forms
        e1, e2, e3 = generate_seed(), generate_seed(), generate_seed()
        revoked = receipt(e1, "L2")
        await self.post(conformance_doc(revoked))
        await self.post(make_revocation(e1, kind="conformance", subject=revoked["id"]))
        await self.answer("receipt revoked", revoked["id"], "revoked")
        short = receipt(e2, "L1", valid=timedelta(seconds=4))
        await self.post(conformance_doc(short))
        await self.answer("receipt good", short["id"], "good")
        vc = _vc_receipt(e3, valid=timedelta(seconds=4))
        await self.post(conformance_doc(vc))
        await self.answer("vc receipt good", vc["id"], "good")
        until = max(parse_utc(short["expires_at"], "x"), parse_utc(vc["validUntil"], "x"))
        while datetime.now(UTC) < until + timedelta(seconds=1):
            await asyncio.sleep(0.2)
        for name, rid in (("receipt expired", short["id"]), ("vc receipt expired", vc["id"])):
            for _ in range(300):  # the epoch at the expiry (next_update is no later than it)
                _st, raw, _ = await self.reg.get("/v1/status/" + quote(rid, safe=":"))
                if raw["status"] == "revoked":
                    break
                await asyncio.sleep(0.1)
            await self.answer(name, rid, "revoked")
        await self.answer("unknown", did(generate_seed()), "unknown")


def _ago(seconds: int) -> str:
    return format_utc(datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=seconds))


def _signed_by(w: WebSubject, body: dict) -> dict:
    """A record signed by the did:web `w` (issued_by the DID; its document lists the key)."""
    unsigned = {k: v for k, v in body.items() if k not in ("signature", "issued_by")} | {"issued_by": w.did}
    from registry.records import signing_bytes

    return unsigned | {"signature": b64enc(ed25519.sign(w.seed, signing_bytes(unsigned)))}


def _vc_receipt(seed: bytes, *, valid: timedelta) -> dict:
    """An L2 receipt in W3C VC 2.0 form, self-signed (eddsa-jcs-2022) and by one witness."""
    issued = datetime.now(UTC).replace(microsecond=0)
    claims = {"id": f"urn:oap:conformance:{uuid.uuid4()}", "subject": did(seed), "level": "L2",
              "profile": "standard", "suite": {"name": "oap-test-suite", "version": "1.0.0"},
              "results_digest": "sha256:" + "ab" * 32, "issued_at": format_utc(issued),
              "expires_at": format_utc(issued + valid)}
    return add_proof(add_proof(to_vc(claims), seed), generate_seed())


# --- tampering (then signed again by the registry, so that the deeper checks run) -------------


def _block(d: dict) -> dict | None:
    return d.get("revocation") or d.get("suspension")


def _flip(text: str) -> str:
    return ("B" if text[0] == "A" else "A") + text[1:]


def _anchor_tamper(which: str) -> Callable[[dict], bool]:
    """The deciding record's commit anchor (an anchors file): one log's proof dropped, the
    bundles reordered, or one log's inclusion proof broken (that log does not count)."""
    def apply(d: dict) -> bool:
        b = _block(d)
        if not b or not isinstance(b.get("anchor"), str) or not b["anchor"].lstrip().startswith("{"):
            return False
        doc = json.loads(b["anchor"])
        if which == "drop":
            doc["bundles"], doc["anchored_in"] = doc["bundles"][:1], doc["anchored_in"][:1]
        elif which == "order":
            doc["bundles"] = doc["bundles"][::-1]
        else:
            lines = doc["bundles"][1].split("\n")
            i = next(k for k, line in enumerate(lines) if line.startswith("index ")) + 1
            if not lines[i]:
                return False
            lines[i] = _flip(lines[i])
            doc["bundles"][1] = "\n".join(lines)
        b["anchor"] = json.dumps(doc)
        return True
    return apply


def _set(path: tuple, value: Any, *, only: Callable[[dict], bool] = lambda d: True) -> Callable[[dict], bool]:
    def apply(d: dict) -> bool:
        node: Any = d
        for k in path[:-1]:
            if not isinstance(node, dict) or k not in node:
                return False
            node = node[k]
        if not isinstance(node, dict) or not only(d):
            return False
        node[path[-1]] = value(node.get(path[-1])) if callable(value) else value
        return True
    return apply


def _drop(path: tuple) -> Callable[[dict], bool]:
    def apply(d: dict) -> bool:
        node: Any = d
        for k in path[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        if not isinstance(node, dict) or path[-1] not in node:
            return False
        del node[path[-1]]
        return True
    return apply


def _rename_status(to: str) -> Callable[[dict], bool]:
    def apply(d: dict) -> bool:
        b = _block(d)
        if b is None or d["status"] == to:
            return False
        was, when = ("revocation", "revoked_at") if d["status"] == "revoked" else ("suspension", "suspended_at")
        new, new_when = ("revocation", "revoked_at") if to == "revoked" else ("suspension", "suspended_at")
        b[new_when] = b.pop(when)
        b.pop("reinstated", None)
        d[new] = d.pop(was)
        d["status"] = to
        return True
    return apply


def _swap_evidence(a: str, b: str) -> Callable[[dict], bool]:
    """Replace the evidence of `a` (linked_by, reinstated, or the block's own) with `b`'s."""
    keys = ("record", "path", "seq", "commit", "tree", "git_path", "anchor", "receipt_anchor", "did_documents")

    def part(block: dict, name: str) -> dict | None:
        return block if name == "block" else block.get(name)

    def apply(d: dict) -> bool:
        block = _block(d)
        if block is None or part(block, a) is None or part(block, b) is None:
            return False
        src = {k: copy.deepcopy(v) for k, v in part(block, b).items() if k in keys}
        dst = part(block, a)
        for k in keys:
            dst.pop(k, None)
        dst.update(src)
        return True
    return apply


def _via_from_block(d: dict) -> bool:
    """An answer without `via` given one: its deciding record's evidence (a receipt's own
    revocation or expiry: the receipt itself, yet its record does not decide its subject)."""
    b = _block(d)
    if b is None or "via" in b:
        return False
    keys = ("record", "path", "seq", "commit", "tree", "git_path", "anchor", "receipt_anchor", "did_documents")
    b["via"] = {k: copy.deepcopy(v) for k, v in b.items() if k in keys}
    return True


def _other_key(_: Any) -> str:
    return did(bytes(32))




def _later(t: Any, by: timedelta = timedelta(seconds=1)) -> Any:
    return format_utc(parse_utc(t, "t") + by) if isinstance(t, str) else t


def _each_doc(d: dict, fn: Callable[[dict], None]) -> bool:
    b = _block(d)
    if not b or not b.get("did_documents"):
        return False
    for item in b["did_documents"]:
        fn(item)
    return True


def _epoch_drop() -> Callable[[dict], bool]:
    def apply(d: dict) -> bool:
        if not isinstance(d.get("epoch_anchor"), str) or not d["epoch_anchor"].startswith("{"):
            return False
        doc = json.loads(d["epoch_anchor"])
        doc["bundles"], doc["anchored_in"] = doc["bundles"][1:], doc["anchored_in"][1:]
        d["epoch_anchor"] = json.dumps(doc)
        return True
    return apply


def _anchors_order() -> Callable[[dict], bool]:
    def apply(d: dict) -> bool:
        if not isinstance(d.get("epoch_anchor"), str) or not d["epoch_anchor"].startswith("{"):
            return False
        doc = json.loads(d["epoch_anchor"])
        doc["bundles"] = doc["bundles"][::-1]
        d["epoch_anchor"] = json.dumps(doc)
        return True
    return apply


def _neighbour(d: dict) -> bool:
    p = d.get("proof", {})
    if p.get("type") != "sorted-merkle-absence" or not p.get("left"):
        return False
    d["proof"]["right"] = p["left"]
    return True


TAMPERS: dict[str, Callable[[dict], bool]] = {
    "revoked answer called suspended": _rename_status("suspended"),
    "suspended answer called revoked": _rename_status("revoked"),
    "good answer called suspended": _set(("status",), "suspended", only=lambda d: d["status"] == "good"),
    "linked_by dropped": _drop(("revocation", "linked_by")),
    "suspension's linked_by dropped": _drop(("suspension", "linked_by")),
    "reinstated dropped": _drop(("revocation", "reinstated")),
    "reinstated_at moved": _set(("revocation", "reinstated", "reinstated_at"), lambda t: _later(t)),
    "reinstated by the kill switch itself": _swap_evidence("reinstated", "block"),
    "reinstated: unknown field": _set(("revocation", "reinstated", "note"), "x"),
    "linked_by is the deciding record": _swap_evidence("linked_by", "block"),
    "deciding record is the linked one": _swap_evidence("block", "linked_by"),
    "revoked_at moved": _set(("revocation", "revoked_at"), lambda t: _later(t)),
    "suspended_at moved": _set(("suspension", "suspended_at"), lambda t: _later(t)),
    "revocation reason changed": _set(("revocation", "reason"), "unspecified"),
    "suspension reason changed": _set(("suspension", "reason"), "key_compromise"),
    "unknown field in the block": _set(("revocation", "note"), "x"),
    "record edited": _set(("revocation", "record", "issued_at"), lambda t: _later(t)),
    "did_documents dropped": _drop(("revocation", "did_documents")),
    "did_documents: document edited": lambda d: _each_doc(d, lambda item: item["document"].update(note="x")),
    "did_documents: Git path reversed": lambda d: _each_doc(d, lambda item: item["git_path"].reverse()),
    "did_documents: extra key": lambda d: _each_doc(d, lambda item: item.update(extra=1)),
    "did_documents: not a list": _set(("revocation", "did_documents"), "x",
                                      only=lambda d: "did_documents" in (_block(d) or {})),
    "kill switch receipt anchor dropped": _drop(("revocation", "receipt_anchor")),
    "statement names another history": _set(("epoch", "history"), _other_key),
    "statement history is not a did:key": _set(("epoch", "history"), "did:web:example.com"),
    "epoch anchor an integer": _set(("epoch_anchor",), 5),
    "epoch anchor in one log only": _epoch_drop(),
    "epoch anchor bundles out of order": _anchors_order(),
    "record anchor in one log only": _anchor_tamper("drop"),
    "record anchor bundles out of order": _anchor_tamper("order"),
    "record anchor: one log's proof broken": _anchor_tamper("break"),
    "via dropped": _drop(("revocation", "via")),
    "suspension's via dropped": _drop(("suspension", "via")),
    "via added: the deciding record's evidence": _via_from_block,
    "via is the deciding record": _swap_evidence("via", "block"),
    "deciding record is the via receipt": _swap_evidence("block", "via"),
    "via: record edited": _set(("revocation", "via", "record", "level"), "L3"),
    "via: Git path reversed": _set(("suspension", "via", "git_path"), lambda g: g[::-1]),
    "via: seq changed": _set(("revocation", "via", "seq"), lambda n: n + 1),
    "via: extra key": _set(("suspension", "via", "note"), "x"),
    "signer dropped": _drop(("revocation", "signer")),
    "signer: another witness": _set(("revocation", "signer", "id"), _other_key),
    "signer: since after the receipt's commit": _set(("revocation", "signer", "since"),
                                                     lambda t: _later(t, timedelta(days=1))),
    "signer: since moved": _set(("revocation", "signer", "since"), lambda t: _later(t)),
    "signer: suspended instead": _set(("revocation", "signer", "status"), "suspended"),
    "signer: reason changed": _set(("revocation", "signer", "reason"), "unspecified"),
    "signer: extra key": _set(("revocation", "signer", "note"), "x"),
    "via: commit_object dropped": _drop(("revocation", "via", "commit_object")),
    "via: commit_object of another commit": _set(("revocation", "via", "commit_object"), lambda c: _flip(c),
                                                 only=lambda d: "commit_object" in d["revocation"]["via"]),
    "via: commit_object not base64": _set(("revocation", "via", "commit_object"), "!",
                                          only=lambda d: "commit_object" in d["revocation"]["via"]),
    "leaf index moved": _set(("proof", "index"), lambda i: i + 1, only=lambda d: "index" in d["proof"]),
    "leaf replaced by the left neighbour": lambda d: _neighbour(d),
}


def tampered(text: str, seed: bytes) -> list[tuple[str, str]]:
    """Every tamper that applies to the answer, each signed again (statement, then answer)."""
    out = []
    for name, fn in TAMPERS.items():
        d = json.loads(text)
        if not fn(d):
            continue
        d["epoch"] = sign_object(d["epoch"], seed)
        out.append((name, json.dumps(sign_object(d, seed))))
    return out


# --- the test ---------------------------------------------------------------------------------


def _status_python(case: dict[str, Any]) -> dict[str, Any]:
    policy = TrustPolicy.from_text(case["policy"]) if case["policy"] is not None else None

    def run() -> dict[str, Any]:
        keys = chain_of_document(case["rotations"]) if case.get("rotations") else None
        v = verify_status(json.loads(case["text"]), registry=case["registry"], status_id=None, policy=policy,
                          now=parse_utc(case["now"], "now"), allow_stale=case["allow_stale"], keys=keys)
        def t(x: datetime | None) -> str | None:
            return format_utc(x) if x is not None else None
        return {"id": v.id, "status": v.status, "epoch": v.epoch, "log_checked": v.log_checked, "reason": v.reason,
                "revoked_at": t(v.revoked_at), "suspended_at": t(v.suspended_at), "reinstated_at": t(v.reinstated_at),
                "reinstated_id": v.reinstated_id, "subject": v.subject, "signer": v.signer}
    return _py_verdict(run)


@pytest.fixture
async def network(tmp_path):
    logs = [ServerProcess(tmp_path / f"log-{i}", "--batch-interval-ms", "5", "--origin", origin).start()
            for i, origin in enumerate(ORIGINS)]
    hosts = await DidHosts().start(tmp_path / "tls")
    reg = None
    try:
        reg = await start_registry(tmp_path / "reg", logs[0], log_url="", log_urls=tuple(p.url for p in logs),
                                   anchor_quorum=2, log_timeout=10, epoch_seconds=3600, did_ca_file=hosts.ca_file,
                                   did_allow_private_networks=True, did_cache_seconds=0)
        yield reg, hosts, logs
    finally:
        if reg is not None:
            await reg.stop()
        await hosts.close()
        for p in logs:
            p.kill()


async def test_registry_status_verdicts_are_the_same_in_the_browser(network):
    reg, hosts, logs = network
    seq = Sequence(reg, hosts)
    await seq.run()
    registry, seed = reg.svc.registry, reg.svc.seed
    assert seed is not None
    both = "".join(f"log {p.vkey}\n" for p in logs) + "quorum none\nlogs 2\n"
    either = "".join(f"log {p.vkey}\n" for p in logs) + "quorum none\n"
    only_a = f"log {logs[0].vkey}\nquorum none\n"
    cases: list[dict[str, Any]] = []
    for name, text in seq.answers:
        d = json.loads(text)
        fresh = format_utc(parse_utc(d["this_update"], "t") + timedelta(seconds=1))
        stale = format_utc(parse_utc(d["next_update"], "t") + timedelta(days=1))
        base = {"kind": "status", "registry": registry, "allow_stale": False, "now": fresh}
        for pname, policy in (("both logs", both), ("either log", either), ("log A only", only_a), ("no policy", None)):
            cases.append({**base, "name": f"{name} ({pname})", "text": text, "policy": policy})
        cases.append({**base, "name": f"{name} (stale)", "text": text, "policy": both, "now": stale})
        cases.append({**base, "name": f"{name} (stale allowed)", "text": text, "policy": both, "now": stale,
                      "allow_stale": True})
        cases.append({**base, "name": f"{name} (another registry)", "text": text, "policy": both,
                      "registry": did(bytes(32))})
        for tname, ttext in tampered(text, seed):
            cases.append({**base, "name": f"{name}: {tname}", "text": ttext, "policy": both})
    want = compare(cases, _status_python)
    # every verdict and reason of §6.1 was exercised, accepted and refused
    seen = {(w["result"]["status"], w["result"]["reason"], w["result"]["reinstated_at"] is not None)
            for w in want if w["ok"]}
    for expect in (("good", None, False), ("unknown", None, False), ("revoked", "superseded", False),
                   ("revoked", "kill_switch", True), ("revoked", "kill_switch", False), ("revoked", "expired", False),
                   ("revoked", "loss_of_key", False), ("revoked", "unspecified", False),
                   ("suspended", "loss_of_key", False)):
        assert expect in seen, (expect, sorted(seen, key=str))
    refused = [w for w in want if not w["ok"]]
    assert 0.3 * len(cases) < len(refused) < len(cases), (len(refused), len(cases))
    reasons = {w["message"].split(":")[0] for w in refused}
    assert len(reasons) > 15, reasons
    # an expired receipt in VC form verifies (its issuing time is validFrom)
    by_name = {c["name"]: w for c, w in zip(cases, want)}
    assert by_name["vc receipt expired (both logs)"]["ok"], by_name["vc receipt expired (both logs)"]
    # a receipt that falls with its subject verifies, names the subject, and no tamper of via passes
    for name, status, reason in (("receipt suspended with its subject", "suspended", "unspecified"),
                                 ("receipt revoked with its subject", "revoked", "key_compromise")):
        got = by_name[f"{name} (both logs)"]
        assert got["ok"] and got["result"]["status"] == status and got["result"]["reason"] == reason, got
        assert got["result"]["subject"] is not None and got["result"]["subject"].startswith("did:key:"), got
        tampers = [w for c, w in zip(cases, want) if c["name"].startswith(f"{name}: ")]
        assert len(tampers) > 10 and not any(w["ok"] for w in tampers), tampers
    # a receipt whose witness was compromised before its commit verifies, names the witness, and no
    # tamper of the signer, its standing or the commit that bounds the signing passes
    name = "receipt whose witness was compromised before its commit"
    got = by_name[f"{name} (both logs)"]
    assert got["ok"] and got["result"]["reason"] == "witness_invalid" and got["result"]["signer"], got
    tampers = {c["name"]: w for c, w in zip(cases, want) if c["name"].startswith(f"{name}: ")}
    assert len(tampers) > 15 and not any(w["ok"] for w in tampers.values()), tampers
    assert tampers[f"{name}: signer: since after the receipt's commit"]["message"].startswith(
        "signer: its standing began after the receipt was committed"), tampers
    # a token epoch: good since the recovery, revoked by the next kill switch, naming the next epoch
    assert by_name["token epoch opened by the recovery (both logs)"]["result"]["status"] == "good"
    nxt = by_name["token epoch killed, next epoch opened (both logs)"]["result"]
    assert nxt["status"] == "revoked" and nxt["reinstated_id"] and "@urn:oap:key-event:" in nxt["reinstated_id"], nxt
    via_refusals = {by_name[n].get("message", "") for n in by_name if ": via" in n}
    assert any(m.startswith("via: only a conformance receipt's answer") for m in via_refusals), via_refusals
    assert any(m.startswith("via: not this conformance receipt") for m in via_refusals), via_refusals


async def test_rotated_registry_verdicts_are_the_same_in_the_browser(tmp_path):
    """A registry whose key was rotated A -> B (registry.keyrotation): answers signed by A before
    and by B after, about records anchored by either key, under pins to A or B, with the
    rotations, without them, with a forged hand-over, and an answer A signed after it retired."""
    from registry.service import prepare_rotation
    from tlog.runtime import keyfiles

    log = ServerProcess(tmp_path / "log", "--batch-interval-ms", "5", "--origin", ORIGINS[0]).start()
    key_a, key_b = tmp_path / "a.key", tmp_path / "b.key"
    for path in (key_a, key_b):
        keyfiles.write_private_key(path, Signer.generate("oap-registry").to_skey())
    s1, s2 = generate_seed(), generate_seed()
    reg = None
    try:
        reg = await start_registry(tmp_path / "reg", log, key_file=key_a, epoch_seconds=3600)
        a = reg.svc.registry
        st, body = await reg.post(make_revocation(s1, kind="did", subject=did(s1)))
        assert st == 200, body
        await wait_epoch_after(reg, body["seq"])
        before = json.dumps((await reg.get(f"/v1/status/{quote(did(s1), safe=':')}"))[1])
        await reg.stop()
        reg = None
        prepare_rotation(tmp_path / "reg", key_a, key_b)
        reg = await start_registry(tmp_path / "reg", log, key_file=key_b, epoch_seconds=3600)
        b = reg.svc.producer.registry if reg.svc.producer else ""
        st, body = await reg.post(make_revocation(s2, kind="did", subject=did(s2)))
        assert st == 200, body
        await wait_epoch_after(reg, body["seq"])
        answers = {"before, by A": before}
        for who, s in (("old record", s1), ("new record", s2), ("good", generate_seed())):
            answers[f"after, by B, {who}"] = json.dumps((await reg.get(f"/v1/status/{quote(did(s), safe=':')}"))[1])
        rotations = (await reg.get("/v1/key-rotations"))[1]
        seed_a = keyfiles.open_ed25519(key_a, what="key")
    finally:
        if reg is not None:
            await reg.stop()
        log.kill()
    # A, retired, signs an answer made after the rotation: refused for a pin that knows the rotation
    late = json.loads(answers["after, by B, new record"])
    late["epoch"]["registry"] = a
    late["epoch"] = sign_object(late["epoch"], seed_a)
    answers["after, by A (retired)"] = json.dumps(sign_object(late, seed_a))
    forged = json.loads(json.dumps(rotations))
    forged["rotations"][0]["signature"] = forged["rotations"][0]["countersignature"]
    policy = f"log {log.vkey}\nquorum none\n"
    cases: list[dict[str, Any]] = []
    for name, text in answers.items():
        now = format_utc(parse_utc(json.loads(text)["this_update"], "t") + timedelta(seconds=1))
        base = {"kind": "status", "allow_stale": False, "now": now, "text": text, "policy": policy}
        for pname, pin, rot in (("pinned A, rotations", a, rotations), ("pinned B, rotations", b, rotations),
                                ("pinned A, no rotations", a, None), ("pinned B, no rotations", b, None),
                                ("pinned A, forged rotations", a, forged),
                                ("another pin, rotations", did(bytes(32)), rotations)):
            cases.append({**base, "name": f"{name} ({pname})", "registry": pin, "rotations": rot})
    want = {c["name"]: w for c, w in zip(cases, compare(cases, _status_python))}
    ok = sorted(n for n, w in want.items() if w["ok"])
    assert ok == sorted([
        "before, by A (pinned A, rotations)", "before, by A (pinned A, no rotations)",
        *(f"after, by B, {w} ({p})" for w in ("old record", "new record", "good")
          for p in ("pinned A, rotations", "pinned B, rotations")),
        "after, by B, good (pinned B, no rotations)", "after, by B, old record (pinned B, no rotations)"]), ok
    assert want["after, by B, new record (pinned A, rotations)"]["result"]["status"] == "revoked"
    assert want["after, by A (retired) (pinned A, rotations)"]["message"].startswith(f"the answer is signed by {a}")
    assert want["before, by A (pinned A, forged rotations)"]["error"] == "RotationError"


def _anchored_python(case: dict[str, Any]) -> dict[str, Any]:
    def run() -> dict[str, Any]:
        v = TrustPolicy.from_text(case["policy"]).verify_anchored(case["text"])
        return {"logs": list(v.logs), "failures": [list(f) for f in v.failures], "index": v.entries[0].index}
    return _py_verdict(run)


async def test_anchors_files_are_verified_alike_k_of_n(network):
    """oap-anchors/v1 files from the registry, whole, with one log's proof broken, one dropped,
    duplicated, reordered or mislabelled: TrustPolicy.verify_anchored's verdict in the browser."""
    reg, _hosts, logs = network
    st, body = await reg.post(make_revocation(generate_seed(), kind="vc", subject="urn:uuid:a-1", status_list_index=1))
    assert st == 200, body
    anchor = body["anchor"]
    bundles = [b.to_text() for b in parse_anchors(anchor)]
    doc = json.loads(anchor)

    def file(bs: list[str], names: list[str] | None = None) -> str:
        return json.dumps({"type": "oap-anchors/v1", "anchored_in": names if names is not None else
                           [doc["anchored_in"][bundles.index(b)] if b in bundles else "x" for b in bs], "bundles": bs})

    broken = bundles[1].split("\n")
    i = next(k for k, line in enumerate(broken) if line.startswith("index ")) + 1
    broken[i] = _flip(broken[i])
    texts = {"whole": anchor, "one tlog-proof": bundles[0], "one bundle": file(bundles[:1]),
             "second broken": file([bundles[0], "\n".join(broken)], doc["anchored_in"]),
             "duplicate": file([bundles[0], bundles[0]]), "reversed": file(bundles[::-1]),
             "mislabelled": file(bundles, doc["anchored_in"][::-1]), "empty": file([], []),
             "not JSON": "{nope", "extra field": json.dumps({**doc, "x": 1}), "wrong type": json.dumps({**doc, "type": "x"})}
    policies = {"k2": "".join(f"log {p.vkey}\n" for p in logs) + "quorum none\nlogs 2\n",
                "k1": "".join(f"log {p.vkey}\n" for p in logs) + "quorum none\n", "a": f"log {logs[0].vkey}\nquorum none\n",
                "b": f"log {logs[1].vkey}\nquorum none\n"}
    cases = [{"kind": "anchored", "name": f"{t} / {p}", "text": text, "policy": pol}
             for t, text in texts.items() for p, pol in policies.items()]
    want = compare(cases, _anchored_python)
    assert any(w["ok"] and w["result"]["failures"] for w in want) and sum(not w["ok"] for w in want) > 10



# --- conformance receipts (both forms) and registry records, offline ----------------------------


def _conformance_cases() -> list[dict[str, Any]]:
    """Receipts at every level in both forms, with their documents, then broken one way each:
    what validate_conformance (and check_record) decide, the browser decides."""
    from tlog.formats.audit import sign_audit
    from tlog.formats.entries import canonical_entry

    from tests.support.conformance import audit_entry, audit_for, memlog_bundle, web_receipt
    from tests.support.witness import MemLog

    seeds = [bytes([60 + i]) * 32 for i in range(10)]
    impl = WebSubject("did:web:impl.example", seeds[0])
    web_w = WebSubject("did:web:witness.example", seeds[1])
    same_host = WebSubject("did:web:impl.example:w", seeds[2])
    sub_host = WebSubject("did:web:a.impl.example", seeds[3])
    w1, w2, w3, auditor = seeds[4], seeds[5], seeds[6], seeds[7]
    # one party under several names: one key as a did:key and two did:web; two names on one host
    one_key_a, one_key_b = WebSubject("did:web:wa.example", seeds[8]), WebSubject("did:web:wb.example", seeds[8])
    host_a, host_b = WebSubject("did:web:w.example", seeds[9]), WebSubject("did:web:w.example:two", seeds[2])
    issued = datetime(2026, 5, 1, tzinfo=UTC)
    now = format_utc(issued + timedelta(days=1))
    audit = audit_for(impl.did, auditor)
    by_other = memlog_bundle(canonical_entry(audit_entry(w1)), MemLog(origin="audit.example/log", seed=bytes([77]) * 32))
    bad_audits = {
        "audit signature broken": {**audit, "signature": _flip(audit["signature"])},
        "audit digest in upper case": sign_audit(impl.did, {**audit, "digest": "sha256:" + audit["digest"][7:].upper()},
                                                 auditor),
        "audit anchor without its entry": sign_audit(impl.did, {**audit, "anchor": "\n".join(
            line for line in audit["anchor"].split("\n") if not line.startswith("extra "))}, auditor),
        "audit anchored by someone else": sign_audit(impl.did, {**audit, "anchor": by_other}, auditor),
        "audit of another subject": audit_for("did:web:other.example", auditor),
    }
    base = {
        "L3 did:web": (web_receipt(impl, "L3", issued=issued), [impl.document]),
        "L4 did:web, witness did:key": (web_receipt(impl, "L4", witnesses=(w1,), issued=issued), [impl.document]),
        "L4, witness did:web": (web_receipt(impl, "L4", witnesses=(web_w,), issued=issued),
                                [impl.document, web_w.document]),
        "L4, witness on the subject's host": (web_receipt(impl, "L4", witnesses=(same_host,), issued=issued),
                                              [impl.document, same_host.document]),
        "L4, witness on a subdomain": (web_receipt(impl, "L4", witnesses=(sub_host,), issued=issued),
                                       [impl.document, sub_host.document]),
        "L4, witness is the subject's own key": (web_receipt(impl, "L4", witnesses=(seeds[0],), issued=issued),
                                                 [impl.document]),
        "L4 valid 100 days": (web_receipt(impl, "L4", witnesses=(w1,), issued=issued, valid=timedelta(days=100)),
                              [impl.document]),
        "L5 with audit": (web_receipt(impl, "L5", witnesses=(w1, w2, w3), audit=audit, issued=issued),
                          [impl.document]),
        "L5 without audit": (web_receipt(impl, "L5", witnesses=(w1, w2, w3), issued=issued), [impl.document]),
        "L5, one witness key under three names": (
            web_receipt(impl, "L5", witnesses=(seeds[8], one_key_a, one_key_b), audit=audit, issued=issued),
            [impl.document, one_key_a.document, one_key_b.document]),
        "L5, two of the witnesses on one host": (
            web_receipt(impl, "L5", witnesses=(w1, host_a, host_b), audit=audit, issued=issued),
            [impl.document, host_a.document, host_b.document]),
        "L5, four witnesses, two of them one party": (
            web_receipt(impl, "L5", witnesses=(w1, w2, host_a, host_b), audit=audit, issued=issued),
            [impl.document, host_a.document, host_b.document]),
        "L5, the auditor a witness": (web_receipt(impl, "L5", witnesses=(w1, w2, auditor), audit=audit, issued=issued),
                                      [impl.document]),
        **{f"L5, {name}": (web_receipt(impl, "L5", witnesses=(w1, w2, w3), audit=bad, issued=issued), [impl.document])
           for name, bad in bad_audits.items()},
        "L3-NC did:web": (web_receipt(impl, "L3-NC", issued=issued), [impl.document]),
        "L3-NC, commercial profile": (_profiled(impl, "L3-NC", "commercial", issued), [impl.document]),
        "L3, non-commercial profile": (_profiled(impl, "L3", "non-commercial", issued), [impl.document]),
        "L3, a misspelled non-commercial profile": (_profiled(impl, "L3", "noncommercial", issued), [impl.document]),
        "L3, commercial profile": (_profiled(impl, "L3", "commercial", issued), [impl.document]),
        "L2 did:key": (receipt(w1, "L2", issued=issued), []),
        "L3 did:key (no publisher)": (receipt(w1, "L3", issued=issued), []),
    }
    forms: dict[str, tuple[dict, list]] = {}
    for name, (r, docs) in base.items():
        forms[f"{name} (compact)"] = (r, docs)
        claims = {k: v for k, v in r.items() if k != "signatures"}
        vc = to_vc(claims)
        self_vm = impl.key_id if r["subject"] == impl.did else None
        vc = add_proof(vc, seeds[0] if r["subject"] == impl.did else w1, self_vm)
        for sig in r["signatures"][1:]:
            if sig["by"].startswith("did:key:"):
                vc = add_proof(vc, next(s for s in seeds if did(s) == sig["by"]))
            else:
                wsub = next(x for x in (web_w, same_host, sub_host, one_key_a, one_key_b, host_a, host_b)
                            if x.key_id == sig["by"])
                vc = add_proof(vc, wsub.seed, wsub.key_id)
        forms[f"{name} (VC)"] = (vc, docs)
    cases = []
    for name, (r, docs) in forms.items():
        for mname, mutate in CONFORMANCE_MUTATIONS.items():
            doc, documents = copy.deepcopy(r), copy.deepcopy(docs)
            when = mutate(doc, documents)
            if when is False:
                continue
            cases.append({"kind": "conformance", "name": f"{name}: {mname}", "text": json.dumps(doc),
                          "documents": documents, "now": when if isinstance(when, str) else now})
    return cases


def _profiled(subject: WebSubject, level: str, profile: str, issued: datetime) -> dict:
    """A receipt with `profile` as given, self-signed after it was set (§31 profile rule)."""
    from tlog.formats.conformance import sign_conformance

    from tests.support.conformance import web_receipt
    body = {k: v for k, v in web_receipt(subject, level, issued=issued).items() if k != "signatures"}
    return sign_conformance({**body, "profile": profile}, subject.seed, by=subject.key_id)


def _first_proof(doc: dict) -> dict:
    p = doc["proof"]
    return p[0] if isinstance(p, list) else p


def _break_self(d: dict) -> bool:
    if "signatures" in d:
        d["signatures"][0]["value"] = _flip(d["signatures"][0]["value"])
    else:
        p = _first_proof(d)
        p["proofValue"] = "z" + _flip(p["proofValue"][1:])
    return True


def _in_proof(**fields: Any) -> Callable[[dict, list], bool]:
    def apply(d: dict, docs: list) -> bool:
        if "proof" not in d:
            return False
        p = _first_proof(d)
        p.update({k: (v(p) if callable(v) else v) for k, v in fields.items()})
        return True
    return apply


def _in_signature(**fields: Any) -> Callable[[dict, list], bool]:
    def apply(d: dict, docs: list) -> bool:
        if "signatures" not in d:
            return False
        s = d["signatures"][0]
        s.update({k: (v(s) if callable(v) else v) for k, v in fields.items()})
        return True
    return apply


def _other_document(d: dict, docs: list) -> bool:
    if not docs:
        return False
    docs[0] = WebSubject(docs[0]["id"], bytes([9]) * 32).document
    return True


CONFORMANCE_MUTATIONS: dict[str, Callable[[dict, list], Any]] = {
    "as made": lambda d, docs: True,
    "no documents": lambda d, docs: bool(docs) and not docs.clear(),
    "another key in the document": _other_document,
    "a week later": lambda d, docs: format_utc(datetime(2026, 5, 8, tzinfo=UTC)),
    "expired": lambda d, docs: format_utc(datetime(2026, 7, 1, tzinfo=UTC)),
    "before it was issued": lambda d, docs: format_utc(datetime(2026, 4, 1, tzinfo=UTC)),
    "self signature broken": lambda d, docs: _break_self(d),
    "unknown field": lambda d, docs: d.update(note="x") is None,
    "a float": lambda d, docs: (d["suite"] if "suite" in d else d["credentialSubject"]["suite"]).update(v=1.5) is None,
    "ES256 named for an Ed25519 key": _in_signature(alg="ES256"),
    "base64url signature": _in_signature(value=lambda s: s["value"].replace("+", "-").replace("/", "_").rstrip("=")),
    "signature twice": lambda d, docs: "signatures" in d and d["signatures"].append(d["signatures"][0]) is None,
    "proof purpose": _in_proof(proofPurpose="authentication"),
    "proof created not a dateTime": _in_proof(created="yesterday"),
    "proof chain": _in_proof(previousProof="urn:x"),
    "proof context other": _in_proof(**{"@context": ["https://www.w3.org/ns/credentials/v2", "https://x.example/"]}),
    "proof cryptosuite other": _in_proof(cryptosuite="ecdsa-jcs-2019"),
    "proof verificationMethod without key": _in_proof(verificationMethod=lambda p: p["verificationMethod"].split("#")[0]),
    "issuer is not the subject": lambda d, docs: "issuer" in d and d.update(issuer="did:web:other.example") is None,
    "VC types": lambda d, docs: "type" in d and d.update(type=["VerifiableCredential"]) is None,
}


def _audit(d: dict) -> dict | None:
    return d.get("audit") or (d.get("credentialSubject") or {}).get("audit")


def _conformance_python(case: dict[str, Any]) -> dict[str, Any]:
    from tlog.formats.conformance import validate_conformance
    from tlog.formats.diddoc import lookup_from

    def run() -> dict[str, Any]:
        lookup = lookup_from([(d["id"], d) for d in case["documents"]]) if case["documents"] else None
        r = validate_conformance(json.loads(case["text"]), now=parse_utc(case["now"], "now"), lookup=lookup)
        return {"id": r.id, "subject": r.subject, "level": r.level, "witnesses": list(r.witnesses), "form": r.form,
                "auditor": r.audit.auditor if r.audit else None}
    return _py_verdict(run)


def test_conformance_receipt_verdicts_are_the_same_in_the_browser():
    cases = _conformance_cases()
    want = compare(cases, _conformance_python)
    forms = {w["result"]["form"] for w in want if w["ok"]}
    assert forms == {"compact", "vc"}, forms
    assert any(w["ok"] and w["result"]["auditor"] for w in want)
    errors = {w["error"] for w in want if not w["ok"]}
    assert {"InvalidInput", "Forbidden"} <= errors, errors
    assert 0.3 * len(cases) < sum(not w["ok"] for w in want) < len(cases)


def _record_cases() -> list[dict[str, Any]]:
    """Registry records of every type and event, signed by did:key and by did:web issuers, and
    broken one way each: what records.check_record(now=None) decides, the browser decides."""
    k1, k2 = bytes([70]) * 32, bytes([71]) * 32
    web = WebSubject("did:web:issuer.example", bytes([72]) * 32)
    bodies = {
        "revocation": make_revocation(k1, kind="key", subject=did(k1), reason="key_compromise"),
        "vc revocation": make_revocation(k1, kind="vc", subject="urn:uuid:c-1", status_list_index=5),
        "kill switch": make_kill_switch(k1, reason="lost laptop"),
        "add_controller": make_key_event(k1, subject=did(k1), key=did(k2)),
        "rotate to a did:web": make_key_event(k1, subject=did(k1), key=web.did, event="rotate"),
        "suspend": make_key_event(k1, subject=did(k1), event="suspend", reason="loss_of_key"),
        "resume": make_key_event(k2, subject=did(k1), event="resume"),
        "did:web kill switch": _signed_by(web, make_kill_switch(k1, principal=web.did)),
        "did:web revocation of a credential": _signed_by(web, make_revocation(
            k1, kind="vc", subject="urn:uuid:w-2", status_list_index=9)),
    }
    mutations: dict[str, Callable[[dict], Any]] = {
        "as made": lambda b: True,
        "signature broken": lambda b: b.update(signature=_flip(b["signature"])) is None,
        "base64url signature": lambda b: b.update(
            signature=b["signature"].replace("+", "-").replace("/", "_").rstrip("=")) is None,
        "resume with a key": lambda b: b.get("event") == "resume" and b.update(key=did(k2)) is None,
        "suspend without reason": lambda b: b.get("event") == "suspend" and b.pop("reason") and True,
        "rotate with a reason": lambda b: b.get("event") == "rotate" and b.update(reason="superseded") is None,
        "suspend with a bad reason": lambda b: b.get("event") == "suspend" and b.update(reason="bored") is None,
        "event unknown": lambda b: "event" in b and b.update(event="pause") is None,
        "issued_by a DID URL": lambda b: b.update(issued_by=b["issued_by"] + "#k") is None,
        "issued_by another": lambda b: b.update(issued_by=did(k2)) is None,
        "effective_at not a time": lambda b: b.update(effective_at="soon") is None,
    }
    cases = []
    for name, body in bodies.items():
        for mname, mutate in mutations.items():
            b = copy.deepcopy(body)
            if mutate(b) is False:
                continue
            for docs_name, docs in (("", []), (" with the document", [web.document])):
                if docs and not any(web.did in json.dumps(v) for v in b.values()):
                    continue
                cases.append({"kind": "record", "name": f"{name}: {mname}{docs_name}", "text": json.dumps(b),
                              "documents": docs})
    return cases


def _record_python(case: dict[str, Any]) -> dict[str, Any]:
    from registry.records import check_record
    from tlog.formats.diddoc import lookup_from

    def run() -> dict[str, Any]:
        lookup = lookup_from([(d["id"], d) for d in case["documents"]]) if case["documents"] else None
        r = check_record(json.loads(case["text"]), now=None, lookup=lookup)
        return {"type": r.type, "id": r.id, "path": r.path, "subject": r.subject, "issued_by": r.issued_by,
                "kind": r.kind, "key": r.key}
    return _py_verdict(run)


def test_registry_record_verdicts_are_the_same_in_the_browser():
    cases = _record_cases()
    want = compare(cases, _record_python)
    assert sum(w["ok"] for w in want) >= 9 and sum(not w["ok"] for w in want) >= 20
