"""Writes fixtures/mldsa.json: the Python verdicts the explorer's ML-DSA-44 verifier
(tlog/ui/static/lib/mldsa.js, note.js type 0x06, policy.js one-vote rule) must reproduce,
and the NIST ACVP ML-DSA-44 sigVer vectors for the vendored @noble/post-quantum.

    .venv/bin/python tests/ui/js/make_mldsa_fixture.py

Deterministic keys; ML-DSA-44 signing is hedged, so signatures change on each run (the
verdicts do not). Run from the repository root.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tlog.errors import OAPError
from tlog.formats.checkpoint import Checkpoint, subtree_message
from tlog.formats.encoding import b64dec, b64enc
from tlog.formats.keys import CosignatureSigner, MLDSACosigner, Signer, parse_vkey
from tlog.formats.note import NoteSignature, open_note, parse_note, sign_note
from tlog.formats.policy import parse_policy

HERE = Path(__file__).resolve().parent
ACVP = HERE.parents[1] / "formats" / "testdata" / "mldsa44-acvp.json"
NAME = "witness-1.localhost"


def verdict(fn):
    try:
        return {"ok": True, "result": fn()}
    except OAPError as e:
        return {"ok": False, "error": type(e).__name__, "message": e.message}


def main() -> None:
    log = Signer("oap.localhost/log", bytes(range(32)))
    ed = CosignatureSigner(NAME, bytes([7]) * 32)
    pq = MLDSACosigner(NAME, bytes([9]) * 32)
    root = hashlib.sha256(b"root").digest()
    text = Checkpoint(log.name, 5, root, ("extension",)).to_text()
    note = sign_note(text, [log])
    ts = 1_780_000_000
    pq_line = NoteSignature(pq.name, pq.key_id, pq.cosign(text, ts)).line()
    ed_line = NoteSignature(ed.name, ed.key_id, ed.cosign(text, ts)).line()
    cosigned = note + ed_line + pq_line
    blob = parse_note(cosigned).signatures[2].blob
    flipped = bytearray(blob)
    flipped[600] ^= 1
    keys = [log.vkey, ed.vkey, pq.vkey]
    renamed = MLDSACosigner("witness-2.localhost", bytes([9]) * 32)

    def open_case(n: str, vkeys: list[str]):
        return verdict(lambda: [v.timestamp for v in open_note(n, [parse_vkey(k) for k in vkeys])[1]])

    notes = {
        "log, Ed25519 and ML-DSA-44": (cosigned, keys),
        "extension line changed (not covered by ML-DSA-44)": (cosigned.replace("extension", "other"), [pq.vkey]),
        "size changed": (cosigned.replace("\n5\n", "\n6\n"), [pq.vkey]),
        "origin changed": (cosigned.replace("oap.localhost/log\n", "oap.localhost/lug\n"), [pq.vkey]),
        "signature bit flipped": (note + NoteSignature(pq.name, pq.key_id, bytes(flipped)).line(), [pq.vkey]),
        "timestamp changed": (note + NoteSignature(pq.name, pq.key_id, (ts + 1).to_bytes(8, "big") + blob[8:]).line(),
                              [pq.vkey]),
        "truncated blob": (note + NoteSignature(pq.name, pq.key_id, blob[:-1]).line(), [pq.vkey]),
        "another cosigner name, same key": (note + NoteSignature(renamed.name, renamed.key_id, blob).line(),
                                            [renamed.vkey]),
        "not a checkpoint": ("hello\n\n" + NoteSignature(pq.name, pq.key_id, blob).line(), [pq.vkey]),
        "unknown key": (cosigned, [renamed.vkey]),
    }
    sub_root = hashlib.sha256(b"subtree").digest()
    sub_blob = pq.cosign_subtree(log.name, 8, 13, sub_root)
    subtrees = [
        {"what": "valid", "args": [log.name, 8, 13, b64enc(sub_root), b64enc(sub_blob)]},
        {"what": "other end", "args": [log.name, 8, 14, b64enc(sub_root), b64enc(sub_blob)]},
        {"what": "other hash", "args": [log.name, 8, 13, b64enc(root), b64enc(sub_blob)]},
        {"what": "timestamp set", "args": [log.name, 8, 13, b64enc(sub_root), b64enc(b"\x00" * 7 + b"\x01" + sub_blob[8:])]},
    ]
    for s in subtrees:
        a = s["args"]
        s["expect"] = verdict(lambda a=a: pq.verifier.verify_subtree(a[0], a[1], a[2], b64dec(a[3]), b64dec(a[4])))
    messages = [
        {"args": [NAME, ts, log.name, 0, 5, b64enc(root)]},
        {"args": [NAME, 0, log.name, 8, 13, b64enc(sub_root)]},
        {"args": [NAME, 5, log.name, 8, 13, b64enc(sub_root)]},
        {"args": ["n" * 256, 0, log.name, 0, 1, b64enc(root)]},
    ]
    for m in messages:
        a = m["args"]
        m["expect"] = verdict(lambda a=a: subtree_message(a[0], a[1], a[2], a[3], a[4], b64dec(a[5])).hex())
    other = Signer("witness-2.localhost", bytes([3]) * 32)
    p_bad = f"log {log.vkey}\nwitness a {ed.vkey}\nwitness b {pq.vkey}\nwitness c {other.vkey}\ngroup g 2 a b c\nquorum g\n"
    p_good = (f"log {log.vkey}\nwitness a {ed.vkey}\nwitness b {pq.vkey}\nwitness c {other.vkey}\n"
              "group w1 any a b\ngroup g 2 w1 c\nquorum g\n")
    p_nested = (f"log {log.vkey}\nwitness a {ed.vkey}\nwitness b {pq.vkey}\nwitness c {other.vkey}\n"
                "group x any a c\ngroup y any b c\ngroup g all x y\nquorum g\n")
    policies = [{"text": t, "expect": verdict(lambda t=t: parse_policy(t).to_text())} for t in (p_bad, p_good, p_nested)]
    acvp = json.loads(ACVP.read_text())["sigVer"]
    out = {
        "vkey": pq.vkey, "public": pq.public.hex(), "key_id": pq.key_id.hex(),
        "notes": [{"what": k, "note": n, "vkeys": v, "expect": open_case(n, v)} for k, (n, v) in notes.items()],
        "subtrees": subtrees, "messages": messages, "policies": policies,
        "acvp_sigver": [{"pk": g["pk"], "tests": [{k: t[k] for k in ("tcId", "testPassed", "message", "signature")}
                                                   for t in g["tests"]]} for g in acvp],
    }
    (HERE / "fixtures" / "mldsa.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
