"""tlog.formats.age (C2SP age, scrypt recipient: encrypted key files) against rage (pyrage), an
independent implementation, both ways; and what it refuses. Work factors are small here: the
format, not the cost, is under test."""
from __future__ import annotations

import base64
import os

import pyrage
import pytest

from tlog.errors import FormatError
from tlog.formats import age

KEY_TEXT = b"PRIVATE+KEY+log.example/log+01234567+AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n"


@pytest.mark.parametrize("armor", [True, False])
@pytest.mark.parametrize("size", [0, 86, 64 * 1024, 64 * 1024 + 1, 3 * 64 * 1024])
def test_rage_decrypts_ours(armor, size):
    plain = KEY_TEXT if size == 86 else os.urandom(size)
    ours = age.encrypt(plain, b"pass phrase", log_n=10, armor=armor)
    assert age.is_encrypted(ours) and ours.startswith(age.ARMOR_BEGIN if armor else age.VERSION_LINE)
    assert pyrage.passphrase.decrypt(ours, "pass phrase") == plain


def test_we_decrypt_rages():
    """rage picks its own work factor (about a second of scrypt, each way): two files only."""
    for plain, armor in ((KEY_TEXT, True), (os.urandom(2 * 64 * 1024 + 5), False)):
        theirs = pyrage.passphrase.encrypt(plain, "pass phrase", armored=armor)
        assert age.decrypt(theirs, b"pass phrase") == plain


def test_wrong_passphrase_tampering_and_excess_work_are_refused():
    data = age.encrypt(KEY_TEXT, b"right", log_n=10, armor=False)
    with pytest.raises(FormatError, match="wrong passphrase"):
        age.decrypt(data, b"wrong")
    header_end = data.index(b"\n---")
    salt_at = data.index(b"scrypt ") + 7
    flipped = data[:salt_at] + (b"B" if data[salt_at:salt_at + 1] != b"B" else b"C") + data[salt_at + 1:]
    with pytest.raises(FormatError):  # another salt: another scrypt key, the file key does not open
        age.decrypt(flipped, b"right")
    mac_line_end = data.index(b"\n", header_end + 4)
    payload = bytearray(data)
    payload[mac_line_end + 1 + 16] ^= 1
    with pytest.raises(FormatError, match="payload does not authenticate"):
        age.decrypt(bytes(payload), b"right")
    with pytest.raises(FormatError, match="truncated payload"):
        age.decrypt(data[:mac_line_end + 1 + 20], b"right")
    heavy = data.replace(b" 10\n", b" 23\n", 1)
    with pytest.raises(FormatError, match=r"work factor 2\^23 is above 2\^22"):
        age.decrypt(heavy, b"right")
    start = header_end + 5  # after "\n--- "
    mac = bytearray(base64.b64decode(data[start:mac_line_end] + b"="))
    mac[0] ^= 1
    with pytest.raises(FormatError, match="the header MAC does not verify"):
        age.decrypt(data[:start] + base64.b64encode(bytes(mac)).rstrip(b"=") + data[mac_line_end:], b"right")


def test_only_one_scrypt_stanza_and_canonical_encodings_are_read():
    x25519 = pyrage.x25519.Identity.generate()
    with pytest.raises(FormatError, match="not encrypted with a passphrase"):
        age.decrypt(pyrage.encrypt(KEY_TEXT, [x25519.to_public()]), b"x")
    data = age.encrypt(KEY_TEXT, b"p", log_n=10, armor=False)
    first = data.index(b"-> ")
    two = data[:first] + b"-> x25519 AAAA\nAAAA\n" + data[first:]
    with pytest.raises(FormatError, match="exactly one recipient stanza"):
        age.decrypt(two, b"p")
    with pytest.raises(FormatError, match="malformed scrypt stanza"):
        age.decrypt(data.replace(b" 10\n", b" 010\n", 1), b"p")
    with pytest.raises(FormatError, match=r"not an age-encryption\.org/v1 file|malformed armor"):
        age.decrypt(b"PRIVATE+KEY+x", b"p")
    with pytest.raises(FormatError, match="an empty passphrase"):
        age.encrypt(KEY_TEXT, b"")
