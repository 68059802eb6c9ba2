"""ML-DSA-44 (FIPS 204) and its C2SP cosignatures (tlog-cosignature type 0x06, `subtree/v1`).

The primitive comes from pyca/cryptography (tlog.formats.mldsa). It is checked against
NIST ACVP vectors (tests/formats/testdata/mldsa44-acvp.json), the C2SP/CCTV accumulated
ML-DSA-44 test, and two independent pure-Python implementations: Filippo Valsorda's
`mldsa` (a verifier) and `dilithium-py` (keys and deterministic signatures). Sources
and hashes of the vector files: tests/formats/testdata/SOURCE.md.
"""
from __future__ import annotations

import base64
import hashlib
import json
import struct
from pathlib import Path

import mldsa as mldsa_py
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.mldsa import MLDSA44PublicKey
from dilithium_py.ml_dsa import ML_DSA_44

from tlog.errors import FormatError, SignatureError, UnknownKeyError
from tlog.formats import mldsa
from tlog.formats.checkpoint import Checkpoint, parse_checkpoint, subtree_message
from tlog.formats.hashing import EMPTY_ROOT
from tlog.formats.keys import (
    COSIGNATURE_MLDSA44,
    COSIGNATURE_V1,
    CosignatureSigner,
    MLDSACosigner,
    Verifier,
    cosignature_timestamp,
    cosigner_verifier,
    key_id,
    load_cosigner,
    parse_signer_key,
    parse_skey,
    parse_vkey,
)
from tlog.formats.note import NoteSignature, open_note, parse_note, sign_note
from tlog.formats.policy import parse_policy
from tlog.runtime.keyfiles import read_private_key, write_private_key

from tests.support.signers import make_signer

ACVP = json.loads((Path(__file__).parent / "testdata" / "mldsa44-acvp.json").read_text())
SEED = bytes(range(32))
NAME = "witness.example/w1"
ROOT = hashlib.sha256(b"root").digest()


def _py_verify(public: bytes, message: bytes, signature: bytes) -> bool:
    """Filippo Valsorda's pure-Python ML-DSA verifier (independent of OpenSSL)."""
    try:
        mldsa_py.VerificationKey(public, parameters=mldsa_py.ParameterSet.ML_DSA_44).verify(signature, message)
    except mldsa_py.VerificationError:
        return False
    return True


# --- the primitive: NIST ACVP, C2SP/CCTV, second implementations -------------------


@pytest.mark.parametrize("case", ACVP["keyGen"], ids=lambda c: f"tc{c['tcId']}")
def test_acvp_keygen_from_seed(case):
    assert mldsa.public_from_seed(bytes.fromhex(case["seed"])) == bytes.fromhex(case["pk"])


def _acvp_sigver_cases():
    for group in ACVP["sigVer"]:
        for t in group["tests"]:
            yield pytest.param(group["pk"], t, id=f"tc{t['tcId']}-{t['reason'].replace(' ', '-')}")


@pytest.mark.parametrize(("pk", "case"), list(_acvp_sigver_cases()))
def test_acvp_sigver(pk, case):
    """ACVP's ML-DSA sigVer vectors use the internal interface (the message is M'), so the
    verifier is fed mu = SHAKE256(SHAKE256(pk, 64) || M', 64), FIPS 204 Algorithm 8 line 7."""
    public, message, sig = bytes.fromhex(pk), bytes.fromhex(case["message"]), bytes.fromhex(case["signature"])
    mu = hashlib.shake_256(hashlib.shake_256(public).digest(64) + message).digest(64)
    key = MLDSA44PublicKey.from_public_bytes(public)
    try:
        key.verify_mu(sig, mu)
        ok = True
    except InvalidSignature:
        ok = False
    assert ok is case["testPassed"]


def test_cctv_accumulated_100():
    """C2SP/CCTV ML-DSA/accumulated: 100 seeds from SHAKE128(""), each public key (ours) and
    the deterministic signature of "" (dilithium-py) absorbed into SHAKE128, which must read
    d51148e1...; each signature must verify with ours too. Pins keygen to the reference."""
    n = 100
    seeds = hashlib.shake_128(b"").digest(32 * n)
    acc = hashlib.shake_128()
    for i in range(n):
        seed = seeds[32 * i: 32 * i + 32]
        public = mldsa.public_from_seed(seed)
        ref_public, secret = ML_DSA_44.key_derive(seed)
        assert public == ref_public
        sig = ML_DSA_44.sign(secret, b"", ctx=b"", deterministic=True)
        mldsa.verify(public, b"", sig)
        acc.update(public)
        acc.update(sig)
    assert acc.hexdigest(32) == "d51148e1f9f4fa1a723a6cf42e25f2a99eb5c1b378b3d2dbbd561b1203beeae4"


def test_our_signatures_verify_with_two_independent_implementations():
    signer = mldsa.Signer(SEED)
    assert signer.public == ML_DSA_44.key_derive(SEED)[0]
    for msg in (b"", b"subtree/v1\n\x00" + bytes(100), bytes(range(256)) * 40):
        sig = signer.sign(msg)
        assert len(sig) == mldsa.SIGNATURE_SIZE
        assert _py_verify(signer.public, msg, sig)
        assert ML_DSA_44.verify(signer.public, msg, sig)
        bad = bytearray(sig)
        bad[100] ^= 1
        assert not _py_verify(signer.public, msg, bytes(bad))
        assert not ML_DSA_44.verify(signer.public, msg, bytes(bad))
        with pytest.raises(SignatureError):
            mldsa.verify(signer.public, msg, bytes(bad))
        with pytest.raises(SignatureError):
            mldsa.verify(signer.public, msg + b"x", sig)
    # and theirs with ours
    ref_public, secret = ML_DSA_44.key_derive(SEED)
    mldsa.verify(ref_public, b"hello", ML_DSA_44.sign(secret, b"hello"))


def test_signing_is_hedged_and_the_wrapper_checks_shapes():
    s = mldsa.Signer(SEED)
    assert s.sign(b"m") != s.sign(b"m")  # fresh randomness per signature (FIPS 204 hedged)
    assert SEED.hex() not in repr(s) and "Signer" in repr(s)
    with pytest.raises(ValueError):
        mldsa.Signer(bytes(31))
    with pytest.raises(SignatureError):
        mldsa.verify(s.public, b"m", bytes(2419))
    with pytest.raises(SignatureError):
        mldsa.verify(s.public[:-1], b"m", s.sign(b"m"))
    with pytest.raises(FormatError):
        mldsa.check_public(bytes(1311))


# --- the cosigned message and key type 0x06 -------------------------------------------


def test_subtree_message_is_the_tls_struct_of_the_spec():
    """Built independently here with struct.pack from the tlog-cosignature definition."""
    msg = subtree_message(NAME, 1700000000, "example.com/log", 0, 20852163, ROOT)
    name, origin = NAME.encode(), b"example.com/log"
    want = (b"subtree/v1\n\x00" + struct.pack(">B", len(name)) + name + struct.pack(">Q", 1700000000)
            + struct.pack(">B", len(origin)) + origin + struct.pack(">QQ", 0, 20852163) + ROOT)
    assert msg == want and msg[:12].hex() == "737562747265652f76310a00"
    assert subtree_message(NAME, 0, "o", 8, 13, ROOT)[-48:-32] == struct.pack(">QQ", 8, 13)


@pytest.mark.parametrize(("args", "why"), [
    ((NAME, 5, "o", 8, 13, ROOT), "timestamp 0"),
    (("", 0, "o", 0, 1, ROOT), "1..255"),
    (("n" * 256, 0, "o", 0, 1, ROOT), "1..255"),
    ((NAME, 0, "o" * 256, 0, 1, ROOT), "1..255"),
    ((NAME, 0, "o", 5, 4, ROOT), "start <= end"),
    ((NAME, 2**63, "o", 0, 4, ROOT), "out of range"),
    ((NAME, 0, "o", 0, 2**64, ROOT), "start <= end"),
    ((NAME, 0, "o", 0, 4, ROOT[:31]), "32 bytes"),
    ((NAME, True, "o", 0, 4, ROOT), "int"),
])
def test_subtree_message_refuses_what_the_spec_forbids(args, why):
    with pytest.raises(FormatError, match=why):
        subtree_message(*args)


def test_key_id_vkey_and_key_file_of_an_mldsa_cosigner(tmp_path):
    c = MLDSACosigner(NAME, SEED)
    public = ML_DSA_44.key_derive(SEED)[0]
    assert c.public == public
    assert c.key_id == hashlib.sha256(NAME.encode() + b"\n\x06" + public).digest()[:4]
    name, hex8, b64 = c.vkey.split("+", 2)
    assert (name, hex8) == (NAME, c.key_id.hex()) and base64.b64decode(b64) == b"\x06" + public
    v = parse_vkey(c.vkey)
    assert (v.key_type, v.public, v.key_id) == (COSIGNATURE_MLDSA44, public, c.key_id)
    assert cosigner_verifier(v) is v
    # transparency-dev/formats' GenerateMLDSAKey form: PRIVATE+KEY+name+hex8(0x06 key ID)+base64(0x06||seed)
    skey = c.to_skey()
    key_b64 = base64.b64encode(b"\x06" + SEED).decode()
    assert skey == f"PRIVATE+KEY+{NAME}+{c.key_id.hex()}+{key_b64}"
    assert parse_signer_key(skey) == (NAME, COSIGNATURE_MLDSA44, SEED)
    assert isinstance(load_cosigner(skey), MLDSACosigner)
    with pytest.raises(FormatError):
        parse_skey(skey)  # the Ed25519-only reader refuses it
    wrong = skey.replace(c.key_id.hex(), "00000000")
    with pytest.raises(FormatError, match="key ID"):
        parse_signer_key(wrong)
    path = tmp_path / "mldsa.key"
    write_private_key(path, skey)
    assert path.stat().st_mode & 0o777 == 0o600
    assert MLDSACosigner.from_skey(read_private_key(path)).vkey == c.vkey
    assert SEED.hex() not in repr(c) and base64.b64encode(SEED).decode() not in repr(c)
    with pytest.raises(TypeError):
        import pickle
        pickle.dumps(c)
    # Ed25519 key files still load as 0x04 cosigners through the same entry point
    ed = CosignatureSigner(NAME, SEED)
    assert isinstance(load_cosigner(ed.to_skey()), CosignatureSigner)


def test_vkey_with_a_key_id_that_does_not_match_is_refused():
    """transparency-dev/formats' test vkey "test+5893dc2c+Bt..." carries a key ID that is not
    SHA-256("test\\n" || 0x06 || pk)[:4] (its verifier ignores the ID); signed-note says the ID
    MUST match, so it is refused here, and accepted with the ID the spec defines."""
    public = mldsa.public_from_seed(SEED)
    good = Verifier.from_public("test", COSIGNATURE_MLDSA44, public).vkey
    bad = "test+5893dc2c+" + good.split("+", 2)[2]
    with pytest.raises(FormatError, match="key ID"):
        parse_vkey(bad)
    assert parse_vkey(good).key_id == key_id("test", COSIGNATURE_MLDSA44, public)


def _checkpoint(size=5, root=ROOT, ext=()):
    log = make_signer("example.com/log")
    return log, sign_note(Checkpoint(log.name, size, root, tuple(ext)).to_text(), [log])


def test_an_mldsa_cosignature_on_a_checkpoint_note_verifies_and_binds_what_it_should():
    log, note = _checkpoint(ext=("extension line",))
    c = MLDSACosigner(NAME, SEED)
    text = parse_note(note).text
    blob = c.cosign(text, 1700000000)
    assert len(blob) == 8 + 2420 and cosignature_timestamp(blob) == 1700000000
    # independent check of the whole construction: pure-Python verify of the spec's message
    cp = Checkpoint("example.com/log", 5, ROOT)
    assert _py_verify(c.public, subtree_message(NAME, 1700000000, cp.origin, 0, cp.size, cp.root), blob[8:])
    cosigned = note + NoteSignature(c.name, c.key_id, blob).line()
    _, verified = open_note(cosigned, [log.verifier, c.verifier])
    assert [v.timestamp for v in verified] == [None, 1700000000]
    # extension lines are not covered by an ML-DSA cosignature (tlog-cosignature)
    other = cosigned.replace("extension line", "another line")
    open_note(other, [c.verifier])
    # but origin, size, root and the cosigner's name are
    for tampered in (cosigned.replace("\n5\n", "\n6\n"), cosigned.replace("example.com/log\n", "example.com/lug\n")):
        with pytest.raises(SignatureError):
            open_note(tampered, [c.verifier])
    renamed = Verifier.from_public("witness.example/w2", COSIGNATURE_MLDSA44, c.public)
    line = NoteSignature(renamed.name, renamed.key_id, blob).line()
    with pytest.raises(SignatureError):
        open_note(note + line, [renamed])
    # a timestamp changed after signing breaks it
    with pytest.raises(SignatureError):
        open_note(note + NoteSignature(c.name, c.key_id, (1700000001).to_bytes(8, "big") + blob[8:]).line(),
                  [c.verifier])
    # a witness signs the checkpoint it already parsed: the same message, checked independently
    parsed = c.cosign_checkpoint(parse_checkpoint(text), 1700000002)
    assert parsed[:8] == (1700000002).to_bytes(8, "big")
    assert _py_verify(c.public, subtree_message(NAME, 1700000002, cp.origin, 0, cp.size, cp.root), parsed[8:])
    open_note(note + NoteSignature(c.name, c.key_id, parsed).line(), [c.verifier])
    for bad_ts in (-1, 2**63, True):
        with pytest.raises(ValueError):
            c.cosign_checkpoint(cp, bad_ts)


def test_an_mldsa_key_only_signs_checkpoints_and_subtrees():
    c = MLDSACosigner(NAME, SEED)
    assert not hasattr(c, "sign")
    with pytest.raises(FormatError):
        c.cosign("not a checkpoint\n", 1)
    v = c.verifier
    blob = c.cosign_subtree("example.com/log", 8, 13, ROOT)
    assert blob[:8] == bytes(8)
    assert v.verify_subtree("example.com/log", 8, 13, ROOT, blob) == 0
    for args in (("example.com/log", 8, 14, ROOT), ("example.com/log", 8, 13, EMPTY_ROOT),
                 ("example.com/lug", 8, 13, ROOT)):
        with pytest.raises(SignatureError):
            v.verify_subtree(*args, blob)
    # a note signature over a non-checkpoint text never verifies as a cosignature
    with pytest.raises(SignatureError):
        v.verify(b"hello\n", blob)
    # an Ed25519 cosigner key cannot verify subtrees
    ed = CosignatureSigner(NAME, SEED).verifier
    assert ed.key_type == COSIGNATURE_V1
    with pytest.raises(SignatureError):
        ed.verify_subtree("example.com/log", 8, 13, ROOT, blob)


def test_an_unknown_cosigner_is_ignored_and_a_policy_takes_mldsa_witness_lines():
    log, note = _checkpoint()
    c = MLDSACosigner(NAME, SEED)
    cosigned = note + NoteSignature(c.name, c.key_id, c.cosign(parse_note(note).text, 7)).line()
    other = MLDSACosigner("other.example/w", bytes(32))
    with pytest.raises(UnknownKeyError):
        open_note(cosigned, [other.verifier])
    policy = parse_policy(f"log {log.vkey}\nwitness w1 {c.vkey}\nquorum w1\n")
    assert policy.witnesses["w1"].vkey == c.vkey
