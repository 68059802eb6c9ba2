"""Signed-note keys (C2SP signed-note, tlog-cosignature; vectors V1, V5, V6, V7, V8) and private-key files."""
from __future__ import annotations

import base64
import os
import pickle
import stat

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given
from hypothesis import strategies as st

from tlog.errors import ConfigError, Forbidden, FormatError, SignatureError
from tlog.formats.checkpoint import cosignature_message, parse_checkpoint
from tlog.formats.keys import (
    COSIGNATURE_V1,
    ECDSA,
    ED25519,
    CosignatureSigner,
    Signer,
    Verifier,
    check_key_name,
    cosignature_timestamp,
    cosigner_verifier,
    format_vkey,
    key_id,
    parse_vkey,
)
from tlog.runtime.keyfiles import bucket_credentials, read_private_key, write_private_key, write_secret

PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER_SEED = bytes.fromhex("810a1402d5146c8d84f2443330f54080ebf98ee17d9c74f6252fc5d5c7283173")
PETER_PUB = bytes.fromhex("1a5cd907143c384c41e830c5bce12aa8817ec5649aaabf2c31388b35b2d744d6")
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
WITNESS_SEED = bytes.fromhex("31ffc2116ecbe003acaa800ab70757bd7d53206e3febef6a6d0796d95530b34f")
WITNESS_PUB = bytes.fromhex("64848ad8abed6e85981b3b3875b252b8767ebb4b02f703aca3b1e71bbd6a8e50")
WITNESS_VKEY = "example.com/witness+10a1c019+BGSEitir7W6FmBs7OHWyUrh2frtLAvcDrKOx5xu9ao5Q"
PIXEL_VKEY = (
    "pixel_transparency_log+72c878db+AjBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABFPN7lzVIk2BOd3Nk33Vpqq"
    "VttGwV8uChH+RX/HVfBiypVQFyh8o8Ny6fSdxNMgkSf9/VynrgADBeys0r4Q9uPA="
)
V4_CP1 = (
    "sigsum.org/v1/tree/4d6d8825a6bb689d459628312889dfbb0bcd41b5211d9e1ce768b0ff0309e562\n1\n"
    "KgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"
)
V8_LINE_B64 = (
    "EKHAGQAAAABlU/EAx63UqrTpgWwhS2mgX9uIuoao54YP2S3rcDOnUVGFRU5HhEqQQyy+1buBh+kBUoIQpxQbasasirZm28WyE3HDDQ=="
)


# --- key IDs and names ------------------------------------------------------


def test_key_id_vectors() -> None:
    assert key_id("PeterNeumann", ED25519, PETER_PUB).hex() == "c74f20a3"
    assert key_id("example.com/witness", COSIGNATURE_V1, WITNESS_PUB).hex() == "10a1c019"
    der = base64.b64decode(PIXEL_VKEY.split("+", 2)[2])[1:]
    assert key_id("pixel_transparency_log", ECDSA, der).hex() == "72c878db"
    # The name is not hashed for ECDSA (SHA-256 of the SPKI only).
    assert key_id("other", ECDSA, der) == key_id("pixel_transparency_log", ECDSA, der)


@pytest.mark.parametrize("name", ["", "a b", "a+b", "a\u00a0b", "a\u2003b", "a\u3000b", "a\tb", "a\x01b", "a\nb"])
def test_bad_key_names(name: str) -> None:
    with pytest.raises(FormatError):
        check_key_name(name)


@pytest.mark.parametrize("name", ["example.com/log", "PeterNeumann", "ünïcödé—name", "a/b?c=d"])
def test_good_key_names(name: str) -> None:
    assert check_key_name(name) is None


# --- vkeys ------------------------------------------------------------------


@pytest.mark.parametrize(
    "vkey,key_type",
    [
        (PETER_VKEY, ED25519),
        (ENOCH_VKEY, ED25519),
        ("example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k", ED25519),
        ("sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8", ED25519),
        ("TEST+7997405c+AQcC+FTVKf0jlTdHDY3rbevmnKxxPjigCXlVtGe6RIr6", ED25519),
        ("remora.n621.de+da77ade7+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2", COSIGNATURE_V1),
        (WITNESS_VKEY, COSIGNATURE_V1),
        (PIXEL_VKEY, ECDSA),
    ],
)
def test_valid_vkeys_round_trip(vkey: str, key_type: int) -> None:
    v = parse_vkey(vkey)
    assert v.key_type == key_type
    assert v.key_id.hex() == vkey.split("+")[1]
    assert v.vkey == vkey == format_vkey(v.name, v.key_type, v.public)


def test_peter_vkey_fields() -> None:
    v = parse_vkey(PETER_VKEY)
    assert (v.name, v.public) == ("PeterNeumann", PETER_PUB)


@pytest.mark.parametrize(
    "vkey",
    [
        # V1: wrong key length, unknown algorithm; V7: bad reserved type 0x03 key
        "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",
        "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "rekor.sigstore.dev+12345678+AwEB",
        "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # hash mismatch
        "PeterNeumann+C74F20A3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # not lowercase
        "PeterNeumann+c74f20a+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a3",
        "PeterNeumann",
        "",
        "+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10T",  # base64 length
        "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW ",
        "PeterNeumann+c74f20a3+",
        "PeterNeumann+c74f20a3+AQ==",  # type only, no key
        # ECDSA SPKI with a trailing byte (non-canonical DER, would change the key ID)
        "pixel_transparency_log+00000000+" + base64.b64encode(
            base64.b64decode(PIXEL_VKEY.split("+", 2)[2]) + b"\0"
        ).decode(),
    ],
)
def test_invalid_vkeys(vkey: str) -> None:
    with pytest.raises(FormatError):
        parse_vkey(vkey)


def test_ecdsa_other_curve_refused() -> None:
    der = ec.generate_private_key(ec.SECP384R1()).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(FormatError):
        format_vkey("x", ECDSA, der)


def test_verifier_constructor_checks_key_id() -> None:
    with pytest.raises(FormatError):
        Verifier("PeterNeumann", b"\0\0\0\0", ED25519, PETER_PUB)
    with pytest.raises(FormatError):
        Verifier("PeterNeumann", key_id("PeterNeumann", 0x05, PETER_PUB), 0x05, PETER_PUB)


# --- cosigner keys (C2SP tlog-cosignature; V5, V6, V7) ------------------------


@pytest.mark.parametrize(
    "vkey01,vkey04",
    [
        (
            "ArmoredWitness-weathered-rain+ea3d386d+AWLblKp5JuiyrgRh6ev2nNJ5XAd+sc/mM2D2HW/b4d5S",
            "ArmoredWitness-weathered-rain+0a78df20+BGLblKp5JuiyrgRh6ev2nNJ5XAd+sc/mM2D2HW/b4d5S",
        ),
        (
            "ArmoredWitness-floral-sky+504ec40f+AekCmTmKTTnQMNqIigkj7PFnhogawSJD23PJ8M8qLYDm",
            "ArmoredWitness-floral-sky+c7cf0b6d+BOkCmTmKTTnQMNqIigkj7PFnhogawSJD23PJ8M8qLYDm",
        ),
    ],
)
def test_cosigner_verifier_v5(vkey01: str, vkey04: str) -> None:
    v = cosigner_verifier(parse_vkey(vkey01))
    assert v == parse_vkey(vkey04)
    assert v.vkey == vkey04
    assert cosigner_verifier(v) is v  # already 0x04


@pytest.mark.parametrize(
    "vkey,cosig_id",
    [
        ("ArmoredWitness-small-breeze+7b3ada3a+AQAWYpUjfGGPQiWOgt6sLWap0P9rVOe+Ofu2uNZbO4FD", "9d1ab951"),
        ("ArmoredWitness-autumn-wood+863571a5+AesIVCbad7gbU07JnA6YfZD0qg4B1c8xF4ISdnt9vjip", "a996f95d"),
    ],
)
def test_cosigner_key_ids_v6(vkey: str, cosig_id: str) -> None:
    assert cosigner_verifier(parse_vkey(vkey)).key_id.hex() == cosig_id


def test_cosigner_verifier_refuses_ecdsa() -> None:
    with pytest.raises(FormatError):
        cosigner_verifier(parse_vkey(PIXEL_VKEY))


def test_v7_blob_timestamp() -> None:
    raw = base64.b64decode(
        "ZGhGuQAAAABm/qTPeyKXD+R2rzyQsxPiP8mXum7qq/iF0u4vanlqJyocWODBt97w9uL+8qT7S5gxEHWWOworDcFiEBYJXORmnFBOBA=="
    )
    assert len(raw) == 76
    assert cosignature_timestamp(raw[4:]) == 1727964367
    with pytest.raises(FormatError):
        cosignature_timestamp(raw)


# --- signers ----------------------------------------------------------------


def test_signer_from_go_skey() -> None:
    s = Signer.from_skey(PETER_SKEY)  # base64 part contains "+": split at most 4 times
    assert (s.name, s.public, s.key_id.hex()) == ("PeterNeumann", PETER_PUB, "c74f20a3")
    assert s.vkey == PETER_VKEY
    assert s.verifier == parse_vkey(PETER_VKEY)
    assert s.to_skey() == PETER_SKEY
    assert Signer("PeterNeumann", PETER_SEED).to_skey() == PETER_SKEY


def test_repr_never_shows_seed() -> None:
    for key in (Signer("PeterNeumann", PETER_SEED), CosignatureSigner("example.com/witness", WITNESS_SEED)):
        text = repr(key) + str(key)
        assert key.name in text
        for secret in (PETER_SEED, WITNESS_SEED):
            assert secret.hex() not in text
            assert base64.b64encode(secret).decode()[:20] not in text
        with pytest.raises(TypeError):
            pickle.dumps(key)


def test_generate_gives_distinct_working_keys() -> None:
    a, b = Signer.generate("example.com/a"), Signer.generate("example.com/a")
    assert a.public != b.public
    assert Signer.from_skey(a.to_skey()).public == a.public
    a.verifier.verify(b"hello\n", a.sign(b"hello\n"))


def test_signer_refuses_other_types() -> None:
    with pytest.raises(ValueError):
        Signer("x", PETER_SEED, key_type=COSIGNATURE_V1)
    with pytest.raises(ValueError):
        Signer("x", PETER_SEED[:31])
    with pytest.raises(FormatError):
        Signer("bad name", PETER_SEED)


@pytest.mark.parametrize(
    "skey",
    [
        PETER_SKEY.replace("PRIVATE", "PUBLIC"),
        PETER_SKEY.replace("+KEY+", "+KEYS+"),
        PETER_SKEY.replace("c74f20a3", "c74f20a4"),  # key ID mismatch
        PETER_SKEY.replace("+AYEK", "+AoEK"),  # type 0x02
        PETER_SKEY[:-4],
        "PRIVATE+KEY+PeterNeumann+c74f20a3",
        PETER_VKEY,
        "",
    ],
)
def test_bad_skeys(skey: str) -> None:
    with pytest.raises(FormatError):
        Signer.from_skey(skey)


def test_v8_cosignature_byte_for_byte() -> None:
    w = CosignatureSigner("example.com/witness", WITNESS_SEED)
    assert w.public == WITNESS_PUB
    assert w.vkey == WITNESS_VKEY
    blob = w.cosign(V4_CP1, 1700000000)
    assert base64.b64encode(w.key_id + blob).decode() == V8_LINE_B64
    assert w.verifier.verify(V4_CP1.encode(), blob) == 1700000000
    # The 0x01 form of the same key, converted, verifies it too.
    plain = Verifier.from_public("example.com/witness", ED25519, WITNESS_PUB)
    assert cosigner_verifier(plain).verify(V4_CP1.encode(), blob) == 1700000000
    # A cosigner's skey is the ordinary Go 0x01 skey of the same seed.
    assert CosignatureSigner.from_skey(w.to_skey()).key_id == w.key_id
    # A witness signs the checkpoint it parsed: the message covers the very text it was
    # parsed from, extension lines included (checked by the verifier on the original bytes).
    with_ext = V4_CP1 + "extension one\nextension two\n"
    blob = w.cosign_checkpoint(parse_checkpoint(with_ext), 1700000001)
    assert w.verifier.verify(with_ext.encode(), blob) == 1700000001
    with pytest.raises(SignatureError):
        w.verifier.verify(V4_CP1.encode(), blob)


def test_cosign_only_checkpoints_and_valid_timestamps() -> None:
    w = CosignatureSigner("example.com/witness", WITNESS_SEED)
    with pytest.raises(FormatError):
        w.cosign("not a checkpoint\n", 1)
    for ts in (-1, 2**63):
        with pytest.raises(ValueError):
            w.cosign(V4_CP1, ts)
    assert not hasattr(w, "sign")


# --- Verifier.verify ---------------------------------------------------------


def test_ed25519_verify_failures() -> None:
    s = Signer("example.com/log", PETER_SEED)
    sig = s.sign(b"text\n")
    assert s.verifier.verify(b"text\n", sig) is None
    for message, blob in [(b"text!\n", sig), (b"text\n", sig[:-1]), (b"text\n", bytes(64))]:
        with pytest.raises(SignatureError):
            s.verifier.verify(message, blob)


def test_cosignature_verify_failures() -> None:
    w = CosignatureSigner("example.com/witness", WITNESS_SEED)
    blob = w.cosign(V4_CP1, 5)
    v = w.verifier
    with pytest.raises(SignatureError):
        v.verify(V4_CP1.encode(), (6).to_bytes(8, "big") + blob[8:])  # timestamp is signed
    with pytest.raises(SignatureError):
        v.verify(V4_CP1.encode(), blob[:-1])
    with pytest.raises(SignatureError):
        v.verify(V4_CP1.replace("\n1\n", "\n2\n").encode(), blob)
    # A plain 0x01 signature over the message is not a cosignature, and vice versa.
    plain = Signer("example.com/witness", WITNESS_SEED)
    with pytest.raises(SignatureError):
        v.verify(V4_CP1.encode(), (5).to_bytes(8, "big") + plain.sign(V4_CP1.encode()))
    with pytest.raises(SignatureError):
        plain.verifier.verify(cosignature_message(V4_CP1, 5), blob)


def test_cosignature_timestamp_over_2_63_refused() -> None:
    w = CosignatureSigner("example.com/witness", WITNESS_SEED)
    ts = 2**63
    blob = ts.to_bytes(8, "big") + w._ed.sign(b"cosignature/v1\ntime %d\n" % ts + V4_CP1.encode())
    with pytest.raises(SignatureError):
        w.verifier.verify(V4_CP1.encode(), blob)


def test_ecdsa_verify() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    v = parse_vkey(format_vkey("example.com/ecdsa", ECDSA, der))
    sig = key.sign(b"text\n", ec.ECDSA(hashes.SHA256()))
    assert v.verify(b"text\n", sig) is None
    for message, blob in [(b"text2\n", sig), (b"text\n", b"\x30\x00"), (b"text\n", b"junk")]:
        with pytest.raises(SignatureError):
            v.verify(message, blob)


# --- key files --------------------------------------------------------------


def test_write_private_key_mode_and_no_overwrite(tmp_path) -> None:
    path = tmp_path / "log.key"
    write_private_key(path, PETER_SKEY)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert read_private_key(path) == PETER_SKEY
    with pytest.raises(FileExistsError):
        write_private_key(path, Signer.generate("other").to_skey())
    assert read_private_key(path) == PETER_SKEY  # untouched


def test_write_private_key_refuses_garbage(tmp_path) -> None:
    with pytest.raises(FormatError):
        write_private_key(tmp_path / "k", "not a key")
    assert not (tmp_path / "k").exists()


def test_read_private_key_refuses_group_or_other_access(tmp_path) -> None:
    path = tmp_path / "loose.key"
    path.write_text(PETER_SKEY + "\n")
    for mode in (0o644, 0o640, 0o604, 0o660):
        os.chmod(path, mode)
        with pytest.raises(Forbidden, match="chmod 600"):
            read_private_key(path)
    os.chmod(path, 0o600)
    assert read_private_key(path) == PETER_SKEY


def test_bucket_credentials_from_a_0600_file_or_the_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    creds = tmp_path / "bucket.creds"
    write_secret(creds, "file-id file-secret")
    assert bucket_credentials(creds) == ("file-id", "file-secret")  # the file wins over the environment
    assert bucket_credentials(None) == ("env-id", "env-secret")
    write_secret(tmp_path / "one", "only-an-id")
    with pytest.raises(ConfigError, match="expected '<access key> <secret key>'"):
        bucket_credentials(tmp_path / "one")
    os.chmod(creds, 0o644)
    with pytest.raises(Forbidden, match="chmod 600"):
        bucket_credentials(creds)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(ConfigError, match="AWS_SECRET_ACCESS_KEY"):
        bucket_credentials(None)


# --- properties -------------------------------------------------------------

key_names = st.text(
    st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"), blacklist_characters="+"),
    min_size=1,
    max_size=30,
)


@given(key_names, st.binary(min_size=32, max_size=32), st.sampled_from([ED25519, COSIGNATURE_V1]))
def test_vkey_round_trip(name: str, public: bytes, key_type: int) -> None:
    text = format_vkey(name, key_type, public)
    v = parse_vkey(text)
    assert (v.name, v.key_type, v.public) == (name, key_type, public)
    assert v.vkey == text


@given(key_names, st.binary(min_size=32, max_size=32))
def test_skey_round_trip(name: str, seed: bytes) -> None:
    s = Signer(name, seed)
    t = Signer.from_skey(s.to_skey())
    assert (t.name, t.public, t.key_id) == (s.name, s.public, s.key_id)
    assert seed.hex() not in repr(t)


@given(st.text())
def test_parse_vkey_arbitrary_text_raises_only_format_error(text: str) -> None:
    try:
        parse_vkey(text)
    except FormatError:
        pass


@given(
    st.one_of(key_names, st.text(max_size=10)),
    st.one_of(st.from_regex(r"[0-9a-f]{8}", fullmatch=True), st.text(max_size=9)),
    st.integers(0, 255),
    st.binary(max_size=100),
)
def test_parse_vkey_near_valid_raises_only_format_error(name: str, hex8: str, t: int, key: bytes) -> None:
    text = f"{name}+{hex8}+{base64.b64encode(bytes([t]) + key).decode()}"
    try:
        v = parse_vkey(text)
    except FormatError:
        return
    assert v.vkey == text


@given(st.text(), st.binary(max_size=40))
def test_from_skey_arbitrary_raises_only_format_error(name: str, raw: bytes) -> None:
    for text in (name, f"PRIVATE+KEY+{name}+c74f20a3+{base64.b64encode(raw).decode()}"):
        try:
            Signer.from_skey(text)
        except FormatError:
            pass
