"""Signed notes (C2SP signed-note); vectors V1-V6, V8, each named below with its source."""
from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tlog.errors import FormatError, SignatureError, UnknownKeyError
from tlog.formats.checkpoint import Checkpoint, parse_checkpoint
from tlog.formats.keys import CosignatureSigner, MLDSACosigner, Signer, Verifier, cosigner_verifier, parse_vkey
from tlog.formats.note import (
    MAX_NOTE_SIZE,
    MAX_SIGNATURES,
    Note,
    NoteSignature,
    add_signatures,
    check_cosignature_lines,
    open_note,
    parse_note,
    parse_signature_lines,
    sign_note,
)

# --- V1: golang.org/x/mod/sumdb/note ------------------------------------------
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
PETER_SIG = "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
ENOCH_SIG = "— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"

# --- V2, V3 ---------------------------------------------------------------------
V2_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
V2_NOTE = (
    "This is an example message.\n\n"
    "— example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
)
V3_VKEY = "sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8"
V3_NOTE = (
    "go.sum database tree\n35225469\nvt5T6GaLCXvyHFl9VUvvItR43XZxfLgftEcTyO3eJCQ=\n\n"
    "— sum.golang.org Az3grpukl5AXaVfYkLiDGORx/DN2nlcS5kZHR5uYOBV2KA2HgXpD+gu9HHONebHLAyaKbbTM75QTtPydhKCExixSfwQ=\n"
)

# --- V4: litewitness log ------------------------------------------------------------
V4_ORIGIN = "sigsum.org/v1/tree/4d6d8825a6bb689d459628312889dfbb0bcd41b5211d9e1ce768b0ff0309e562"
V4_VKEY = f"{V4_ORIGIN}+5202289b+Af/cLU2Y5BJNP+r3iMDC+av9eWCD0fBJVDfzAux5zxAP"
V4 = {
    1: ("KgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "UgIom7fPZTqpxWWhyjWduBvTvGVqsokMbqTArsQilegKoFBJQjUFAmQ0+YeSPM3wfUQMFSzVnnNuWRTYrajXpNUbIQY="),
    3: ("RcCI1Nk56ZcSmIEfIn0SleqtV7uvrlXNccFx595Iwl0=",
        "UgIom2VbtIcdFbwFAy1n7s6IkAxIY6J/GQOTuZF2ORV39d75cbAj2aQYwyJre36kezNobZs4SUUdrcawfAB8WVrx6go="),
    5: ("QrtXrQZCCvpIgsSmOsah7HdICzMLLyDfxToMql9WTjY=",
        "UgIomw/EOJmWi0i1FQsOj+etB7F8IccFam/jgd6wzRns4QPVmyEZtdvl1U2KEmLOZ/ASRcWJi0tW90dJWAShei7sDww="),
}


def v4_note(size: int, origin: str = V4_ORIGIN, sig: str | None = None) -> str:
    root, good = V4[size]
    return f"{origin}\n{size}\n{root}\n\n— {origin} {sig or good}\n"


# --- V5, V6: real cosigned checkpoints ---------------------------------------------
V5_NOTE = """transparency.dev/armored-witness/firmware_transparency/ci/3
59
kOFMkeamIdrYFLx5zbWFhflak6dlEEDOU++fxYEZMBw=

— transparency.dev-aw-ftlog-ci-3 P2iVIt3Jsaha3E2i0MHdKZ6fgYJTgXO86nUsxKPVq6uTwRSclTSh/ELnDGbNL+XDyD3EkWIdL2AGGNmbN7IN2rB/7gE=
— ArmoredWitness-weathered-rain CnjfIAAAAABnGRrHjQi7IZQqVea4YnU/ADsv844r1ezGjvubUy1MMJm4as9bRiT70xNWQ67RCA76LMy7SdX4qJNIzL3eSS1BGFWqCw==
— ArmoredWitness-floral-sky x88LbQAAAABnGRrDEq4Tfy7IIVPqkdXbcufUkCzRRbE3fABZ/jvtg5aFHVMuMR8cV6dVqECDBiH1zRxhNaCQOXSwNLSeJs+NzWt1BA==
"""
V5_LOG = "transparency.dev-aw-ftlog-ci-3+3f689522+Aa1Eifq6rRC8qiK+bya07yV1fXyP156pEMsX7CFBC6gg"
V5_W01 = [
    "ArmoredWitness-weathered-rain+ea3d386d+AWLblKp5JuiyrgRh6ev2nNJ5XAd+sc/mM2D2HW/b4d5S",
    "ArmoredWitness-floral-sky+504ec40f+AekCmTmKTTnQMNqIigkj7PFnhogawSJD23PJ8M8qLYDm",
]
V5_W04 = [
    "ArmoredWitness-weathered-rain+0a78df20+BGLblKp5JuiyrgRh6ev2nNJ5XAd+sc/mM2D2HW/b4d5S",
    "ArmoredWitness-floral-sky+c7cf0b6d+BOkCmTmKTTnQMNqIigkj7PFnhogawSJD23PJ8M8qLYDm",
]
V6_NOTE = """developers.google.com/android/binary_transparency/0
611
2GZ1zmS5VkfUZmn2ZyR4KZXwHLD+xnwBIWzql/cD50w=

— pixel_transparency_log csh42zBFAiAd3Y1FwqNTt5RglY0uG7heC6Yu1gEbXXPYmZ7LdOILMAIhAIt68PnR/3TADAaC7hvrSHbpziV7TmpIwOUydLmcjyTQ
— ArmoredWitness-small-breeze nRq5UQAAAABnoqrsRIofXn68vTohcAm2KG4ACGyRPNePUk02BSWD0WKV5ElejTk5Z+Tm3GmJ5j/etA+fkL9XuaQsnTyZbr437sF4AQ==
— ArmoredWitness-autumn-wood qZb5XQAAAABnoqrl57G9CblEl3lwwuqzbaJvVMqNiZCbYZseYT1YZHYmls3CmT1wxZ1fNgM4RxHuUxjAwcI2ghTx6R5aCg+L0DGPBA==
"""
V6_LOG = (
    "pixel_transparency_log+72c878db+AjBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABFPN7lzVIk2BOd3Nk33Vpqq"
    "VttGwV8uChH+RX/HVfBiypVQFyh8o8Ny6fSdxNMgkSf9/VynrgADBeys0r4Q9uPA="
)
V6_W01 = [
    "ArmoredWitness-small-breeze+7b3ada3a+AQAWYpUjfGGPQiWOgt6sLWap0P9rVOe+Ofu2uNZbO4FD",
    "ArmoredWitness-autumn-wood+863571a5+AesIVCbad7gbU07JnA6YfZD0qg4B1c8xF4ISdnt9vjip",
]
WITNESS_SEED = bytes.fromhex("31ffc2116ecbe003acaa800ab70757bd7d53206e3febef6a6d0796d95530b34f")
V8_LINE = (
    "— example.com/witness EKHAGQAAAABlU/EAx63UqrTpgWwhS2mgX9uIuoao54YP2S3rcDOnUVGFRU5HhEqQQyy+1buBh+kBUoIQpxQb"
    "asasirZm28WyE3HDDQ==\n"
)


# --- V1 -----------------------------------------------------------------------------


def test_v1_sign_exact() -> None:
    peter = Signer.from_skey(PETER_SKEY)
    assert sign_note(TEXT, [peter]) == TEXT + "\n" + PETER_SIG


def test_v1_open() -> None:
    peter, enoch = parse_vkey(PETER_VKEY), parse_vkey(ENOCH_VKEY)
    note, verified = open_note(TEXT + "\n" + PETER_SIG, [peter])
    assert note.text == TEXT
    assert [(v.verifier, v.timestamp) for v in verified] == [(peter, None)]
    note, verified = open_note((TEXT + "\n" + PETER_SIG + ENOCH_SIG).encode(), [enoch, peter])
    assert [v.verifier.name for v in verified] == ["PeterNeumann", "EnochRoot"]
    assert [s.name for s in note.signatures] == ["PeterNeumann", "EnochRoot"]
    _, verified = open_note(TEXT + "\n" + ENOCH_SIG + PETER_SIG, [enoch])
    assert [v.signature.name for v in verified] == ["EnochRoot"]


def test_v1_round_trip_is_exact() -> None:
    data = TEXT + "\n" + PETER_SIG + ENOCH_SIG
    note = parse_note(data)
    assert str(note) == data
    assert note.to_bytes() == data.encode()
    assert note.signatures[0].line() == PETER_SIG


@pytest.mark.parametrize(
    "data",
    [
        TEXT,
        TEXT + "\n",
        TEXT + "\n" + PETER_SIG[:-1],
        "\x01" + TEXT + "\n" + PETER_SIG,
        b"\xff" + (TEXT + "\n" + PETER_SIG).encode(),
        TEXT + "\n— Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=",
        TEXT + "\n— Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n",
        TEXT + "\n" + PETER_SIG + "Unexpected line.\n",
        TEXT + "\n" + PETER_SIG * 101,
        # more shapes of the same rules
        "",
        "\n\n",
        TEXT + "\n" + PETER_SIG + "\n",  # blank line at the end: no signatures after it
        TEXT + "\n" + PETER_SIG.replace("— ", "-- "),
        TEXT + "\n" + PETER_SIG.replace("— ", "—"),
        TEXT + "\n" + PETER_SIG.replace("— ", "—  "),
        TEXT + "\n" + "— PeterNeumann\n",
        TEXT + "\n" + "— PeterNeumann \n",
        TEXT + "\n" + "— PeterNeumann AAAAAA==\n",  # 4 bytes: key ID only, < 5 bytes
        TEXT + "\n" + "— PeterNeumann x08go/ZJ!uBS9UG\n",
        TEXT + "\n" + "— PeterNeumann x08go/ZJkuBS9UG/S\n",  # bad base64 length
        TEXT + "\n" + "— Peter+Neumann x08go/ZJkuBS9UG/Sff\n",
        TEXT + "\n" + "— Peter\u00a0Neumann x08go/ZJkuBS9UG/Sff\n",
        TEXT + "\n" + PETER_SIG.replace("\n", "\r\n"),
        TEXT.replace("\n", "\t", 1) + "\n" + PETER_SIG,
        b"If you \xed\xa0\x80 think\n\n" + PETER_SIG.encode(),  # UTF-8-encoded surrogate
        "a\ud800\n\n" + PETER_SIG,  # lone surrogate in a str
    ],
)
def test_v1_reject_notes(data: str | bytes) -> None:
    with pytest.raises(FormatError):
        parse_note(data)
    with pytest.raises(FormatError):
        open_note(data, [parse_vkey(PETER_VKEY)])


def test_signature_count_limits() -> None:
    # Up to 100 parse (the spec demands at least 16); 101 is refused before any work.
    unknown = "".join(
        NoteSignature(f"w{i}", i.to_bytes(4, "big"), b"sig").line() for i in range(MAX_SIGNATURES - 1)
    )
    note = parse_note(TEXT + "\n" + PETER_SIG + unknown)
    assert len(note.signatures) == 100
    _, verified = open_note(note.to_bytes(), [parse_vkey(PETER_VKEY)])
    assert len(verified) == 1
    with pytest.raises(FormatError):
        parse_note(TEXT + "\n" + PETER_SIG + unknown + PETER_SIG)


def test_size_limit() -> None:
    filler = ("x" * 1023 + "\n") * 1024  # 1 MiB of text
    with pytest.raises(FormatError):
        parse_note(filler + "\n" + PETER_SIG)
    small = "x" * 1000 + "\n"
    assert parse_note(small + "\n" + PETER_SIG).text == small
    with pytest.raises(FormatError):
        sign_note(filler, [Signer.from_skey(PETER_SKEY)])
    assert len(filler) == MAX_NOTE_SIZE


def test_v1_tampered_signature_from_known_key_is_rejected() -> None:
    bad = TEXT + "\n" + PETER_SIG[:60] + "ABCD" + PETER_SIG[64:]
    with pytest.raises(SignatureError):
        open_note(bad, [parse_vkey(PETER_VKEY)])
    # ... even when another trusted key signed correctly.
    with pytest.raises(SignatureError):
        open_note(TEXT + "\n" + ENOCH_SIG + PETER_SIG[:60] + "ABCD" + PETER_SIG[64:],
                  [parse_vkey(PETER_VKEY), parse_vkey(ENOCH_VKEY)])
    # Text changed under a valid signature.
    with pytest.raises(SignatureError):
        open_note(TEXT.replace("think", "thing") + "\n" + PETER_SIG, [parse_vkey(PETER_VKEY)])


def test_unknown_keys_are_ignored_and_named() -> None:
    with pytest.raises(UnknownKeyError) as e:
        open_note(TEXT + "\n" + PETER_SIG + ENOCH_SIG, [parse_vkey(V2_VKEY)])
    assert "PeterNeumann" in e.value.message and "EnochRoot" in e.value.message
    assert e.value.data["names"] == ["EnochRoot", "PeterNeumann"]
    # Same name, other key (so another key ID): ignored, not a failure.
    other = Signer.generate("PeterNeumann").verifier
    with pytest.raises(UnknownKeyError):
        open_note(TEXT + "\n" + PETER_SIG, [other])
    # Same key ID, other name: ignored too.
    peter = parse_vkey(PETER_VKEY)
    renamed = TEXT + "\n" + PETER_SIG.replace("PeterNeumann", "PeterN")
    with pytest.raises(UnknownKeyError):
        open_note(renamed, [peter])
    # An unknown signature before a good one does not matter.
    _, verified = open_note(TEXT + "\n" + ENOCH_SIG + PETER_SIG, [peter, other])
    assert [v.verifier for v in verified] == [peter]


def test_duplicate_signature_from_known_key_is_malformed() -> None:
    with pytest.raises(FormatError):
        open_note(TEXT + "\n" + PETER_SIG + PETER_SIG, [parse_vkey(PETER_VKEY)])
    # Duplicates from unknown keys are harmless.
    _, verified = open_note(TEXT + "\n" + ENOCH_SIG + ENOCH_SIG + PETER_SIG, [parse_vkey(PETER_VKEY)])
    assert len(verified) == 1


def test_ambiguous_verifiers_are_a_configuration_error() -> None:
    peter = parse_vkey(PETER_VKEY)
    assert open_note(TEXT + "\n" + PETER_SIG, [peter, peter])[1][0].verifier == peter
    impostor = object.__new__(Verifier)
    object.__setattr__(impostor, "name", peter.name)
    object.__setattr__(impostor, "key_id", peter.key_id)
    object.__setattr__(impostor, "key_type", 1)
    object.__setattr__(impostor, "public", bytes(32))
    with pytest.raises(ValueError):
        open_note(TEXT + "\n" + PETER_SIG, [peter, impostor])


# --- V2, V3, V4 -------------------------------------------------------------------------


def test_v2_c2sp_example() -> None:
    note, verified = open_note(V2_NOTE, [parse_vkey(V2_VKEY)])
    assert note.text == "This is an example message.\n"
    assert verified[0].verifier.name == "example.com/foo"


def test_v3_real_sum_golang_org_signature() -> None:
    note, verified = open_note(V3_NOTE, [parse_vkey(V3_VKEY)])
    assert verified[0].signature.key_id.hex() == "033de0ae"
    cp = parse_checkpoint(note.text)
    assert (cp.origin, cp.size) == ("go.sum database tree", 35225469)
    with pytest.raises(SignatureError):
        open_note(V3_NOTE.replace("35225469", "35225470"), [parse_vkey(V3_VKEY)])


@pytest.mark.parametrize("size", [1, 3, 5])
def test_v4_log_signatures(size: int) -> None:
    note, verified = open_note(v4_note(size), [parse_vkey(V4_VKEY)])
    assert parse_checkpoint(note.text).size == size
    assert len(verified) == 1


def test_v4_corrupted_signature_is_a_signature_error_not_a_format_error() -> None:
    # V4 step 2: the last base64 character altered ("6go=" -> "6gx="). Go decodes it
    # (non-zero trailing bits), so the witness must answer 403, not 400.
    bad = V4[3][1][:-2] + "x="
    with pytest.raises(SignatureError):
        open_note(v4_note(3, sig=bad), [parse_vkey(V4_VKEY)])


def test_v4_other_origin_is_unknown() -> None:
    # V4 step 3: origin ...e563 in line 1 and in the key name.
    origin = V4_ORIGIN[:-1] + "3"
    with pytest.raises(UnknownKeyError):
        open_note(v4_note(3, origin=origin), [parse_vkey(V4_VKEY)])


# --- V5, V6, V8: cosignatures -----------------------------------------------------------


@pytest.mark.parametrize("witness_vkeys", ["01", "04"])
def test_v5_real_cosignatures(witness_vkeys: str) -> None:
    if witness_vkeys == "01":
        witnesses = [cosigner_verifier(parse_vkey(w)) for w in V5_W01]
    else:
        witnesses = [parse_vkey(w) for w in V5_W04]
    note, verified = open_note(V5_NOTE, [parse_vkey(V5_LOG), *witnesses])
    got = [(v.verifier.name, v.signature.key_id.hex(), v.timestamp) for v in verified]
    assert got == [
        ("transparency.dev-aw-ftlog-ci-3", "3f689522", None),
        ("ArmoredWitness-weathered-rain", "0a78df20", 1729698503),
        ("ArmoredWitness-floral-sky", "c7cf0b6d", 1729698499),
    ]
    assert parse_checkpoint(note.text).size == 59


def test_v5_plain_0x01_witness_keys_do_not_match_cosignature_lines() -> None:
    # The 0x01 key IDs differ from the ones on the lines: without conversion they are unknown.
    with pytest.raises(UnknownKeyError):
        open_note(V5_NOTE, [parse_vkey(w) for w in V5_W01])


def test_v5_tampered_cosignature_timestamp() -> None:
    raw = bytearray(base64.b64decode("CnjfIAAAAABnGRrHjQi7IZQqVea4YnU/ADsv844r1ezGjvubUy1MMJm4as9bRiT70xNWQ67RCA76LMy7SdX4qJNIzL3eSS1BGFWqCw=="))
    raw[11] ^= 1
    line = "— ArmoredWitness-weathered-rain " + base64.b64encode(bytes(raw)).decode() + "\n"
    lines = V5_NOTE.splitlines(keepends=True)
    tampered = "".join(lines[:5]) + line + lines[6]
    with pytest.raises(SignatureError):
        open_note(tampered, [cosigner_verifier(parse_vkey(V5_W01[0]))])


def test_v6_ecdsa_log_with_cosignatures() -> None:
    log = parse_vkey(V6_LOG)
    witnesses = [cosigner_verifier(parse_vkey(w)) for w in V6_W01]
    _note, verified = open_note(V6_NOTE, [log, *witnesses])
    got = [(v.verifier.key_type, v.signature.key_id.hex(), v.timestamp) for v in verified]
    assert got == [(0x02, "72c878db", None), (0x04, "9d1ab951", 1738713836), (0x04, "a996f95d", 1738713829)]
    # The ECDSA signature alone is enough to open it; a changed text is refused.
    assert len(open_note(V6_NOTE, [log])[1]) == 1
    with pytest.raises(SignatureError):
        open_note(V6_NOTE.replace("\n611\n", "\n612\n"), [log])


def test_v8_cosignature_merged_into_v4_checkpoint() -> None:
    w = CosignatureSigner("example.com/witness", WITNESS_SEED)
    cp_text = parse_note(v4_note(1)).text
    line = NoteSignature(w.name, w.key_id, w.cosign(cp_text, 1700000000)).line()
    assert line == V8_LINE
    merged = add_signatures(v4_note(1), line)
    assert str(merged) == v4_note(1) + V8_LINE  # log signature stays first
    _, verified = open_note(merged.to_bytes(), [parse_vkey(V4_VKEY), w.verifier])
    assert [v.timestamp for v in verified] == [None, 1700000000]


# --- add_signatures ---------------------------------------------------------------------


def test_add_signatures_dedupes_and_keeps_order() -> None:
    base = TEXT + "\n" + PETER_SIG
    merged = add_signatures(base, [ENOCH_SIG + PETER_SIG, ENOCH_SIG.rstrip("\n")])
    assert str(merged) == base + ENOCH_SIG
    # First signature wins for a (name, key ID) already present.
    other = NoteSignature("PeterNeumann", bytes.fromhex("c74f20a3"), b"\x01" * 64)
    assert add_signatures(merged, other) == merged
    assert add_signatures(parse_note(base), []) == parse_note(base)
    with pytest.raises(FormatError):
        add_signatures(base, "not a signature line")
    with pytest.raises(FormatError):
        add_signatures(base, [b"bytes"])  # type: ignore[list-item]


def test_add_signatures_respects_the_limit() -> None:
    many = [NoteSignature(f"w{i}", b"\0\0\0\0", b"s") for i in range(MAX_SIGNATURES)]
    with pytest.raises(FormatError):
        add_signatures(TEXT + "\n" + PETER_SIG, many)


def test_parse_signature_lines_block() -> None:
    sigs = parse_signature_lines(PETER_SIG + ENOCH_SIG)
    assert [s.name for s in sigs] == ["PeterNeumann", "EnochRoot"]
    assert sigs[0].key_id.hex() == "c74f20a3" and len(sigs[0].blob) == 64


# --- check_cosignature_lines (a witness's or mirror's 200 answer) ---------------------------

CP_TEXT = Checkpoint("example.com/log", 7, bytes(range(32))).to_text()


def _line(signer: CosignatureSigner | MLDSACosigner, text: str = CP_TEXT, ts: int = 1700000000) -> str:
    return NoteSignature(signer.name, signer.key_id, signer.cosign(text, ts)).line()


def test_check_cosignature_lines_real_witness_answer() -> None:
    # The ArmoredWitness lines of V5 as their witnesses answered, 0x01 keys listed by policy name.
    cp_text = parse_note(V5_NOTE).text
    answer = "".join(V5_NOTE.splitlines(keepends=True)[5:])  # the two cosignature lines
    keys = [(f"policy-{i}", cosigner_verifier(parse_vkey(w))) for i, w in enumerate(V5_W01)]
    check = check_cosignature_lines(answer, cp_text, reversed(keys))
    assert [(n, s.key_id.hex()) for n, s in check.found] == [("policy-1", "c7cf0b6d"), ("policy-0", "0a78df20")]
    assert not check.malformed and check.failed == ()
    assert check_cosignature_lines(answer, cp_text.replace("\n59\n", "\n60\n"), keys).failed == ("policy-0", "policy-1")


def test_check_cosignature_lines_ed25519_and_mldsa() -> None:
    ed = CosignatureSigner("w.example", WITNESS_SEED)
    pq = MLDSACosigner("w.example-mldsa44", bytes(range(32)))
    keys = [("w-ed", ed.verifier), ("w-pq", pq.verifier)]
    stranger = CosignatureSigner("other.example", bytes(32))
    answer = _line(stranger) + _line(pq) + _line(ed)
    check = check_cosignature_lines(answer, CP_TEXT, keys)
    assert [n for n, _ in check.found] == ["w-ed", "w-pq"]  # key order, the line for another name ignored
    assert [s.key_id for _, s in check.found] == [ed.key_id, pq.key_id]
    assert not check.malformed and check.failed == ()
    # A missing final newline is tolerated.
    assert [n for n, _ in check_cosignature_lines(answer.rstrip("\n"), CP_TEXT, keys).found] == ["w-ed", "w-pq"]
    # Only lines for another name: nothing found, nothing failed.
    assert check_cosignature_lines(_line(stranger), CP_TEXT, keys) == check_cosignature_lines(_line(stranger), CP_TEXT, [])


def test_check_cosignature_lines_wrong_key_and_bad_signatures() -> None:
    ed = CosignatureSigner("w.example", WITNESS_SEED)
    pq = MLDSACosigner("w.example-mldsa44", bytes(range(32)))
    keys = [("w-ed", ed.verifier), ("w-pq", pq.verifier)]
    # Same name, another key: its key ID differs, so the line is not the witness's (ignored).
    impostor = CosignatureSigner("w.example", bytes(32))
    check = check_cosignature_lines(_line(impostor), CP_TEXT, keys)
    assert check.found == () and check.failed == () and not check.malformed
    # The witness's keys over another checkpoint: the lines match by name and key ID but do not verify.
    other = Checkpoint("example.com/log", 8, bytes(range(32))).to_text()
    check = check_cosignature_lines(_line(ed, other) + _line(pq, other), CP_TEXT, keys)
    assert check.found == () and check.failed == ("w-ed", "w-pq")
    # Only the first line of a key counts: a bad one before a good one fails that key.
    check = check_cosignature_lines(_line(ed, other) + _line(ed) + _line(pq), CP_TEXT, keys)
    assert [n for n, _ in check.found] == ["w-pq"] and check.failed == ("w-ed",)


@pytest.mark.parametrize("answer", ["", "\n", "not a signature line\n", "— w.example !!!\n", "— w.example AAAA\n"])
def test_check_cosignature_lines_malformed(answer: str) -> None:
    ed = CosignatureSigner("w.example", WITNESS_SEED)
    check = check_cosignature_lines(answer, CP_TEXT, [("w-ed", ed.verifier)])
    assert check.malformed and check.found == () and check.failed == ()
    # A good line does not save a block with a malformed one in it.
    assert check_cosignature_lines(_line(ed) + answer, CP_TEXT, [("w-ed", ed.verifier)]).malformed == bool(answer)


# --- constructors and sign_note ---------------------------------------------------------


def test_note_and_signature_constructors_validate() -> None:
    sig = parse_signature_lines(PETER_SIG)[0]
    for text in ("no newline", "", "a\x00\n"):
        with pytest.raises(FormatError):
            Note(text, (sig,))
    with pytest.raises(FormatError):
        Note(TEXT, ())
    with pytest.raises(FormatError):
        NoteSignature("bad name", b"\0\0\0\0", b"x")
    with pytest.raises(FormatError):
        NoteSignature("ok", b"\0\0\0", b"x")


def test_sign_note_refuses_bad_text() -> None:
    peter = Signer.from_skey(PETER_SKEY)
    for text in ("no final newline", "", "tab\there\n"):
        with pytest.raises(FormatError):
            sign_note(text, [peter])
    with pytest.raises(FormatError):
        sign_note(TEXT, [])


def test_text_with_blank_lines_round_trips() -> None:
    peter = Signer.from_skey(PETER_SKEY)
    for text in ("\n", "a\n\n", "a\n\n\nb\n", "\n\n\n"):
        note, verified = open_note(sign_note(text, [peter]), [peter.verifier])
        assert note.text == text and len(verified) == 1


# --- properties -------------------------------------------------------------------------

key_names = st.text(
    st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"), blacklist_characters="+"),
    min_size=1,
    max_size=20,
)
note_texts = st.text(
    st.one_of(st.just("\n"), st.characters(blacklist_categories=("Cs", "Cc"))), max_size=200
).map(lambda t: t + "\n")


@given(st.lists(key_names, min_size=1, max_size=4, unique=True), note_texts, st.data())
def test_sign_parse_open_round_trip(names: list[str], text: str, data: st.DataObject) -> None:
    signers = [Signer(n, data.draw(st.binary(min_size=32, max_size=32))) for n in names]
    signed = sign_note(text, signers)
    note = parse_note(signed)
    assert note.text == text and str(note) == signed
    trusted = data.draw(st.sampled_from(signers))
    _, verified = open_note(signed.encode(), [trusted.verifier])
    assert [v.verifier for v in verified] == [trusted.verifier]


@given(
    key_names,
    st.builds(
        Checkpoint,
        origin=key_names,
        size=st.integers(0, 2**64 - 1),
        root=st.binary(min_size=32, max_size=32),
    ),
    st.integers(0, 2**63 - 1),
    st.binary(min_size=32, max_size=32),
)
def test_cosign_round_trip(name: str, cp: Checkpoint, ts: int, seed: bytes) -> None:
    log = Signer(cp.origin, seed)
    w = CosignatureSigner(name, bytes(reversed(seed)))
    signed = sign_note(cp.to_text(), [log])
    merged = add_signatures(signed, NoteSignature(w.name, w.key_id, w.cosign(cp.to_text(), ts)).line())
    witness = cosigner_verifier(Signer(name, bytes(reversed(seed))).verifier)
    note, verified = open_note(str(merged), [log.verifier, witness])
    assert [v.timestamp for v in verified] == [None, ts]
    assert parse_checkpoint(note.text) == cp


@given(st.text())
def test_parse_note_arbitrary_text_raises_only_format_error(text: str) -> None:
    try:
        parse_note(text)
    except FormatError:
        pass


@given(st.binary())
def test_parse_note_arbitrary_bytes_raise_only_format_error(data: bytes) -> None:
    try:
        parse_note(data)
    except FormatError:
        pass


@given(st.integers(0, len(V5_NOTE.encode()) - 1), st.binary(min_size=1, max_size=3), st.booleans())
def test_mutated_notes_fail_only_with_typed_errors(pos: int, junk: bytes, insert: bool) -> None:
    raw = V5_NOTE.encode()
    mutated = raw[:pos] + junk + raw[pos + (0 if insert else len(junk)):]
    verifiers = [parse_vkey(V5_LOG), *(parse_vkey(w) for w in V5_W04)]
    try:
        open_note(mutated, verifiers)
    except (FormatError, SignatureError, UnknownKeyError):
        pass
