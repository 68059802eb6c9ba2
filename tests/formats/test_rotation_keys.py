"""A log's key rotation, in the pure parts (docs/architecture.md §3.9): one checkpoint signed by
two keys of one origin, policies listing either or both keys, and `logs <k>` counting a log
once whichever of its keys signed."""
from __future__ import annotations

import pytest

from tlog.client.verifier import TrustPolicy
from tlog.errors import FormatError, PolicyError
from tlog.formats.anchors import anchors_text
from tlog.formats.checkpoint import Checkpoint
from tlog.formats.hashing import leaf_hash
from tlog.formats.keys import Signer
from tlog.formats.note import parse_note, sign_note
from tlog.formats.policy import parse_policy
from tlog.formats.proofbundle import ProofBundle

ORIGIN = "log.example/rotating"
A, B = Signer.generate(ORIGIN), Signer.generate(ORIGIN)
OTHER = Signer.generate("other.example/log")
ENTRY = b"an entry"


def bundle(*signers: Signer) -> str:
    """A one-entry log's bundle, its checkpoint signed by `signers` (in order)."""
    cp = Checkpoint(signers[0].name, 1, leaf_hash(ENTRY)).to_text()
    return ProofBundle(0, (), sign_note(cp, signers), ENTRY).to_text()


def policy(*signers: Signer, k: int = 1) -> TrustPolicy:
    return TrustPolicy.for_logs([s.vkey for s in signers], k)


def test_both_keys_sign_one_text_and_any_trusted_key_verifies_it():
    text = bundle(A, B).split("\n\n", 1)[1]  # the checkpoint, after the bundle's blank line
    note = parse_note(text)
    assert [s.key_id for s in note.signatures] == [A.key_id, B.key_id] and len({A.key_id, B.key_id}) == 2
    assert text.count(f"\u2014 {ORIGIN} ") == 2  # one origin, two signature lines
    for trusted in ((A,), (B,), (A, B), (B, A)):
        assert policy(*trusted).verify_bundle(bundle(A, B)).index == 0


def test_bundles_before_and_after_the_overlap_need_a_policy_listing_their_key():
    before, after = bundle(A), bundle(B)
    assert policy(A).verify_bundle(before) and policy(A, B).verify_bundle(before)
    assert policy(B).verify_bundle(after) and policy(A, B).verify_bundle(after)
    with pytest.raises(PolicyError, match="not signed by a log in the policy"):
        policy(B).verify_bundle(before)
    with pytest.raises(PolicyError, match="not signed by a log in the policy"):
        policy(A).verify_bundle(after)


def test_a_trusted_keys_bad_signature_rejects_the_note_even_if_the_other_key_verifies():
    good = bundle(A, B)
    sig_b = good.rsplit("\n", 2)[-2]
    forged = good.replace(sig_b, sig_b[:-6] + ("AAAAA=" if not sig_b.endswith("AAAAA=") else "BBBBB="))
    assert policy(A).verify_bundle(forged)  # B unknown to this verifier: ignored
    with pytest.raises(PolicyError, match="does not verify"):
        policy(A, B).verify_bundle(forged)


def test_two_keys_of_one_log_count_once_toward_logs_k():
    with pytest.raises(FormatError, match="lists only 1 log"):
        parse_policy(f"log {A.vkey}\nlog {B.vkey}\nlogs 2\n")
    assert parse_policy(f"log {A.vkey}\nlog {B.vkey}\nlog {OTHER.vkey}\nlogs 2\n").log_count == 2
    with pytest.raises(PolicyError, match="lists 1 log"):
        policy(A, B).requiring(2)
    # the same entry in one log, once under each key, is one log, not two
    two = policy(A, B, OTHER, k=2)
    with pytest.raises(PolicyError, match="anchored in 1 log"):
        two.verify_anchored(anchors_text([bundle(A), bundle(B)]))
    assert two.verify_anchored(anchors_text([bundle(A), bundle(OTHER)])).logs == (ORIGIN, OTHER.name)
