"""A mirror in a trust policy: the `mirror` line (an OAP extension of tlog-policy) counts in the
quorum as a witness line does, and `oap-log verify` and `oap-log audit` name it as a mirror."""
from __future__ import annotations

import json
import subprocess

import pytest

from tlog.client.verifier import TrustPolicy
from tlog.errors import FormatError, PolicyError
from tlog.formats.keys import CosignatureSigner
from tlog.formats.note import Note, NoteSignature, parse_note
from tlog.formats.policy import parse_policy
from tlog.formats.proofbundle import ProofBundle

from tests.support.mirror import BIN, EntryLog, cosigner, http, mirror_service, origin_hash

OCTETS = {"Content-Type": "application/octet-stream"}


def test_a_mirror_line_is_a_cosigner_that_is_labelled_a_mirror():
    lg = EntryLog()
    w = CosignatureSigner("witness.example/w1", bytes(range(50, 82)))
    text = (f"log {lg.vkey}\nwitness w1 {w.vkey}\nmirror m1 {cosigner().vkey} https://mirror.example\n"
            "group both all w1 m1\nquorum both\n")
    p = parse_policy(text)
    assert p.witnesses["m1"].mirror and not p.witnesses["w1"].mirror
    assert p.witnesses["m1"].url == "https://mirror.example"
    assert parse_policy(p.to_text()) == p and "mirror m1 " in p.to_text()
    assert p.quorum_met({"w1", "m1"}) and not p.quorum_met({"w1"})
    with pytest.raises(FormatError):  # one namespace with witnesses
        parse_policy(f"log {lg.vkey}\nwitness m1 {w.vkey}\nmirror m1 {cosigner().vkey}\nquorum m1\n")
    with pytest.raises(FormatError):  # one key is one cosigner, whatever the line calls it
        parse_policy(f"log {lg.vkey}\nwitness w1 {cosigner().vkey}\nmirror m1 {cosigner().vkey}\nquorum m1\n")
    with pytest.raises(FormatError):
        parse_policy(f"log {lg.vkey}\nmirror m1\nquorum none\n")


def _bundle(lg: EntryLog, index: int, size: int, note: str) -> str:
    return ProofBundle(index, tuple(lg.view(size).inclusion_proof(index)), note, lg.entries[index]).to_text()


def test_verify_counts_and_names_the_mirror_cosignature(tmp_path):
    lg = EntryLog().grow(20)
    note = parse_note(lg.checkpoint(20))
    m = cosigner()
    sig = NoteSignature(m.name, m.key_id, m.cosign(note.text, 1_700_000_000))
    cosigned = str(Note(note.text, (*note.signatures, sig)))
    policy = f"log {lg.vkey}\nmirror m1 {m.vkey}\nquorum m1\n"
    tp = TrustPolicy.from_text(policy)
    v = tp.verify_bundle(_bundle(lg, 3, 20, cosigned))
    assert v.checkpoint.witnesses == {"m1"} and tp.mirrors(v.checkpoint.witnesses) == ["m1"]
    with pytest.raises(PolicyError):  # without the mirror's cosignature the quorum is not met
        tp.verify_bundle(_bundle(lg, 3, 20, str(note)))
    (tmp_path / "p.policy").write_text(policy)
    (tmp_path / "b.tlog-proof").write_text(_bundle(lg, 3, 20, cosigned))
    out = subprocess.run([str(BIN / "oap-log"), "verify", str(tmp_path / "b.tlog-proof"), "--policy",
                          str(tmp_path / "p.policy")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "(witnesses: m1; mirrors among them: m1)" in out.stdout, out.stdout + out.stderr
    out = subprocess.run([str(BIN / "oap-log"), "verify", "--json", str(tmp_path / "b.tlog-proof"), "--policy",
                          str(tmp_path / "p.policy")], capture_output=True, text=True, timeout=60)
    assert json.loads(out.stdout.splitlines()[0])["logs"][0]["mirrors"] == ["m1"]


@pytest.mark.slow
def test_audit_a_mirror_copy_against_a_policy_that_requires_the_mirror(tmp_path, started):
    lg = EntryLog().grow(600)
    mirror = started(mirror_service(tmp_path / "m", [(lg.origin, lg.vkey, "")]))
    assert http(mirror.url + "/add-checkpoint", lg.add_checkpoint(0, 600))[0] == 200
    assert http(mirror.url + "/add-entries", lg.body(0, 600), OCTETS)[0] == 200
    (tmp_path / "p.policy").write_text(f"log {lg.vkey}\nmirror m1 {cosigner().vkey} {mirror.url}\nquorum m1\n")
    out = subprocess.run([str(BIN / "oap-log"), "audit", f"{mirror.url}/{origin_hash(lg.origin)}", "--policy",
                          str(tmp_path / "p.policy")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "at size 600: " in out.stdout and "mirrors among them: m1" in out.stdout
