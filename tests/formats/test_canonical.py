"""tlog.formats.canonical (JCS, deterministic CBOR, strict parsers) and tlog.formats.did (did:key)."""
from __future__ import annotations

import json

import base58
import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlog.errors import InvalidInput
from tlog.formats import ed25519
from tlog.formats.canonical import INT_MAX, INT_MIN, check_json_value, dcbor, jcs
from tlog.formats.did import did_key_from_public, parse_signer, public_from_did_key
from tlog.formats.encoding import b64enc
from tlog.formats.strict import loads_cbor, loads_json

# --- deterministic CBOR: RFC 8949 Appendix A vectors ------------------------------

RFC8949_VECTORS = [
    (0, "00"),
    (1, "01"),
    (10, "0a"),
    (23, "17"),
    (24, "1818"),
    (25, "1819"),
    (100, "1864"),
    (1000, "1903e8"),
    (1000000, "1a000f4240"),
    (1000000000000, "1b000000e8d4a51000"),
    (-1, "20"),
    (-10, "29"),
    (-100, "3863"),
    (-1000, "3903e7"),
    (False, "f4"),
    (True, "f5"),
    (None, "f6"),
    ("", "60"),
    ("a", "6161"),
    ("IETF", "6449455446"),
    ('"\\', "62225c"),
    ("\u00fc", "62c3bc"),
    ("\u6c34", "63e6b0b4"),
    ("\U00010151", "64f0908591"),
    ([], "80"),
    ([1, 2, 3], "83010203"),
    ([1, [2, 3], [4, 5]], "8301820203820405"),
    (list(range(1, 26)), "98190102030405060708090a0b0c0d0e0f101112131415161718181819"),
    ({}, "a0"),
    ({"a": 1, "b": [2, 3]}, "a26161016162820203"),
    (["a", {"b": "c"}], "826161a161626163"),
    ({"a": "A", "b": "B", "c": "C", "d": "D", "e": "E"}, "a56161614161626142616361436164614461656145"),
    # int64 boundaries of the data model
    (INT_MAX, "1b7fffffffffffffff"),
    (INT_MIN, "3b7fffffffffffffff"),
]


@pytest.mark.parametrize("value,hexbytes", RFC8949_VECTORS)
def test_dcbor_rfc8949_vectors(value: object, hexbytes: str) -> None:
    assert dcbor(value) == bytes.fromhex(hexbytes)
    assert loads_cbor(bytes.fromhex(hexbytes)) == value


def test_dcbor_reorders_map_keys() -> None:
    assert dcbor({"e": "E", "a": "A", "c": "C", "b": "B", "d": "D"}) == bytes.fromhex(
        "a56161614161626142616361436164614461656145"
    )


def _map_head(n: int) -> bytes:
    if n < 24:
        return bytes([0xA0 + n])
    if n < 256:
        return bytes([0xB8, n])
    return bytes([0xB9]) + n.to_bytes(2, "big")


def _bytewise_sorted_map(d: dict[str, int]) -> bytes:
    """RFC 8949 §4.2.1 reference: sort entries by the bytes of their encoded keys."""
    items = sorted((cbor2.dumps(k), cbor2.dumps(v)) for k, v in d.items())
    return _map_head(len(d)) + b"".join(k + v for k, v in items)


def test_dcbor_key_order_is_bytewise_across_length_classes() -> None:
    # Lengths straddle every text-header size change (23/24, 255/256) and
    # include multi-byte UTF-8, where character count != encoded length.
    keys = ["b", "aa", "a", "\u00e9", "z" * 23, "y" * 24, "x" * 255, "w" * 256, "\u00e9" * 12, "B", ""]
    d = {k: i for i, k in enumerate(keys)}
    assert dcbor(d) == _bytewise_sorted_map(d)
    order = list(cbor2.loads(dcbor(d)))
    assert order == sorted(keys, key=lambda k: cbor2.dumps(k))
    assert order[:4] == ["", "B", "a", "b"]  # shortest first, then bytewise


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=300), st.integers(-1000, 1000), max_size=30))
def test_dcbor_key_order_matches_reference(d: dict[str, int]) -> None:
    assert dcbor(d) == _bytewise_sorted_map(d)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(INT_MIN, INT_MAX) | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_roundtrip_and_cross_format_identity(value: object) -> None:
    encoded = dcbor(value)
    assert loads_cbor(encoded) == value
    assert dcbor(loads_cbor(encoded)) == encoded
    # the JSON twin of a value decodes to the same deterministic CBOR
    assert dcbor(loads_json(json.dumps(value).encode())) == encoded
    # non-canonical CBOR (insertion-order keys) is accepted and canonicalized
    assert dcbor(loads_cbor(cbor2.dumps(value))) == encoded


jcs_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(jcs_values)
def test_jcs_twin_has_same_dcbor(value: object) -> None:
    assert dcbor(loads_json(jcs(value))) == dcbor(value)
    assert jcs(loads_cbor(dcbor(value))) == jcs(value)


def test_loads_cbor_accepts_non_shortest_forms_and_canonicalizes() -> None:
    # 1 as a two-byte int, "a" with a one-byte length argument
    assert loads_cbor(bytes.fromhex("1801")) == 1
    assert dcbor(loads_cbor(bytes.fromhex("a17801611901f4"))) == dcbor({"a": 500})


# --- loads_cbor rejections -------------------------------------------------------


@pytest.mark.parametrize(
    "hexbytes,reason",
    [
        ("", "empty"),
        ("5f42010243030405ff", "indefinite"),  # indefinite byte string
        ("7f657374726561646d696e67ff", "indefinite"),  # indefinite text
        ("9fff", "indefinite"),
        ("bf61610161629f0203ffff", "indefinite"),
        ("ff", "break"),
        ("40", "byte strings"),
        ("4401020304", "byte strings"),
        ("c074323031332d30332d32315432303a30343a30305a", "tags"),  # tag 0 datetime
        ("c249010000000000000000", "tags"),  # bignum 2**64
        ("d82076687474703a2f2f7777772e6578616d706c652e636f6d", "tags"),
        ("f90000", "floating"),
        ("fa47c35000", "floating"),
        ("fb3ff199999999999a", "floating"),
        ("f7", "undefined"),
        ("f0", "simple"),
        ("f8ff", "simple"),
        ("0102", "trailing"),
        ("a0a0", "trailing"),
        ("a1016161", "keys must be text"),
        ("a1616101616201", "trailing"),
        ("a2616101616102", "malformed"),  # duplicate key "a"
        ("a2616101780161 02".replace(" ", ""), "malformed"),  # duplicate "a", second non-shortest
        ("62c328", "malformed"),  # invalid UTF-8
        ("1c", "reserved"),
        ("19 01".replace(" ", ""), "truncated"),
        ("7a ffffffff 61".replace(" ", ""), "truncated"),  # huge length, tiny body
        ("9b ffffffffffffffff".replace(" ", ""), "truncated"),  # 2**64 - 1 array items
        ("3bffffffffffffffff", "range"),  # -2**64
        ("1bffffffffffffffff", "range"),  # 2**64 - 1
    ],
)
def test_loads_cbor_rejects(hexbytes: str, reason: str) -> None:
    with pytest.raises(InvalidInput, match=reason):
        loads_cbor(bytes.fromhex(hexbytes))


def test_loads_cbor_depth_cap() -> None:
    assert loads_cbor(b"\x81" * 16 + b"\x00") == json.loads("[" * 16 + "0" + "]" * 16)
    with pytest.raises(InvalidInput, match="deep"):
        loads_cbor(b"\x81" * 17 + b"\x00")
    with pytest.raises(InvalidInput, match="deep"):
        loads_cbor(b"\x81" * 100000 + b"\x00")


def test_loads_cbor_rejects_non_bytes() -> None:
    with pytest.raises(InvalidInput):
        loads_cbor("a0")  # type: ignore[arg-type]


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=200))
def test_loads_cbor_arbitrary_bytes_raise_only_invalid_input(data: bytes) -> None:
    try:
        value = loads_cbor(data)
    except InvalidInput:
        return
    assert dcbor(value) == dcbor(loads_cbor(dcbor(value)))


@settings(max_examples=1000, deadline=None)
@given(json_values, st.data())
def test_loads_cbor_mutated_raise_only_invalid_input(value: object, data: st.DataObject) -> None:
    raw = bytearray(cbor2.dumps(value))
    pos = data.draw(st.integers(0, len(raw) - 1))
    raw[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    try:
        loads_cbor(bytes(raw[:cut]))
    except InvalidInput:
        pass


# --- loads_json ------------------------------------------------------------------


def test_loads_json_accepts_data_model() -> None:
    body = '{"a": [1, -2, true, false, null, "\u00e9\\u00e9"], "b": {}}'.encode()
    assert loads_json(body) == {"a": [1, -2, True, False, None, "\u00e9\u00e9"], "b": {}}
    assert loads_json(str(INT_MAX).encode()) == INT_MAX
    assert loads_json(str(INT_MIN).encode()) == INT_MIN


@pytest.mark.parametrize(
    "body,reason",
    [
        (b'{"a": 1, "a": 2}', "duplicate key"),
        (b'[{"x": {"a": 1, "a": 1}}]', "duplicate key"),
        (b"NaN", "NaN"),
        (b"[Infinity]", "Infinity"),
        (b"-Infinity", "Infinity"),
        (b"1.0", "floating"),
        (b"1e3", "floating"),
        (b"[0.5]", "floating"),
        (b"9223372036854775808", "range"),
        (b"-9223372036854775809", "range"),
        (b"1" * 5000, "range"),
        (b"\xff", "UTF-8"),
        (b"\xef\xbb\xbf{}", "malformed"),  # BOM
        ('{"a": 1}'.encode("utf-16"), "UTF-8"),
        (b'"\\ud800"', "surrogate"),
        (b'{"\\udfff": 1}', "surrogate"),
        (b'"a\x01"', "malformed"),  # raw control character
        (b"", "malformed"),
        (b"{} {}", "malformed"),
        (b"[1,]", "malformed"),
        (b"{'a': 1}", "malformed"),
        (b"[" * 17 + b"]" * 17, "deeper"),
        (b"[" * 1000000, "deeper"),
    ],
)
def test_loads_json_rejects(body: bytes, reason: str) -> None:
    with pytest.raises(InvalidInput, match=reason):
        loads_json(body)


def test_loads_json_depth_limit_ignores_brackets_in_strings() -> None:
    nested = "[" * 16 + '"[[[[[[[[[[[[[[[[[[[[\\"{{{{{{{{{{{{{{{{{"' + "]" * 16
    assert loads_json(nested.encode()) is not None
    assert loads_json(nested.encode(), max_depth=20) == loads_json(nested.encode())
    with pytest.raises(InvalidInput, match="deeper"):
        loads_json(nested.encode(), max_depth=15)


json_token = st.sampled_from(
    ['{', '}', '[', ']', ',', ':', '"a"', '"\\u', '"', '\\', '1', '-', '0.5', 'e9', 'true',
     'null', 'NaN', 'Infinity', ' ', '"\\ud800"', '99999999999999999999999'])


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=200) | st.lists(json_token, max_size=40).map(lambda t: "".join(t).encode()))
def test_loads_json_arbitrary_input_raises_only_invalid_input(body: bytes) -> None:
    try:
        value = loads_json(body)
    except InvalidInput:
        return
    check_json_value(value)
    assert loads_json(jcs(value)) == value


# --- check_json_value and jcs ----------------------------------------------------


@pytest.mark.parametrize(
    "value,reason",
    [
        (1.5, "floating"),
        ({"a": [0.0]}, "floating"),
        (b"x", "byte strings"),
        (bytearray(b"x"), "byte strings"),
        ((1, 2), "tuple"),
        ({1, 2}, "set"),
        ({1: "a"}, "keys must be text"),
        (cbor2.CBORTag(1, 0), "tags"),
        (cbor2.undefined, "not allowed"),
        (2**63, "range"),
        (-(2**63) - 1, "range"),
        ("\ud800", "surrogate"),
        ({"\udc00": 1}, "surrogate"),
        ([[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]], "deep"),
    ],
)
def test_check_json_value_rejects(value: object, reason: str) -> None:
    with pytest.raises(InvalidInput, match=reason):
        check_json_value(value)
    with pytest.raises(InvalidInput):
        dcbor(value)


def test_check_json_value_depth_parameter() -> None:
    check_json_value([[[0]]], max_depth=3)
    with pytest.raises(InvalidInput):
        check_json_value([[[0]]], max_depth=2)


def test_jcs_rfc8785_key_order_and_escapes() -> None:
    assert jcs({"b": 1, "a": [True, None, "\u00e9"]}) == b'{"a":[true,null,"\xc3\xa9"],"b":1}'
    # RFC 8785 §3.2.3: properties sort by UTF-16 code units, so U+1F600 (D83D DE00)
    # precedes U+FB33 although it is the larger code point.
    keys = ["\u20ac", "\r", "\ufb33", "1", "\U0001f600", "\u0080", "\u00f6"]
    out = json.loads(jcs({k: 0 for k in keys}))
    assert list(out) == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]
    assert jcs("\u2028\x1f") == b'"\xe2\x80\xa8\\u001f"'


def test_jcs_errors_are_invalid_input() -> None:
    assert jcs(2**53 - 1) == b"9007199254740991"
    with pytest.raises(InvalidInput, match="RFC 8785"):
        jcs(2**53)
    with pytest.raises(InvalidInput):
        jcs("\ud800")
    with pytest.raises(InvalidInput):
        jcs(b"bytes")
    with pytest.raises(InvalidInput):
        jcs(float("nan"))


# --- did:key ---------------------------------------------------------------------

ZERO_SEED_DID = "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp"
ZERO_SEED_PUB = bytes.fromhex("3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29")

# (did, publicKeyBase58 of its Ed25519VerificationKey2018) from published did:key documents
DID_DOCUMENT_VECTORS = [
    ("did:key:z6MkmjY8GnV5i9YTDtPETC2uUAW6ejw3nk5mXF5yci5ab7th", "8HH5gYEeNc3z7PYXmd54d4x6qAfCNrqQqEB3nS7Zfu7K"),
    ("did:key:z6Mkgg342Ycpuk263R9d8Aq6MUaxPn1DDeHyGo38EefXmgDL", "3Dn1SJNPaCXcvvJvSbsFWP2xaCjMom3can8CQNhWrTRx"),
]


def test_did_key_known_vector_zero_seed() -> None:
    assert ed25519.public_from_seed(bytes(32)) == ZERO_SEED_PUB
    assert did_key_from_public(ZERO_SEED_PUB) == ZERO_SEED_DID
    assert public_from_did_key(ZERO_SEED_DID) == ZERO_SEED_PUB


@pytest.mark.parametrize("did,key58", DID_DOCUMENT_VECTORS)
def test_did_key_document_vectors(did: str, key58: str) -> None:
    pub = base58.b58decode(key58)
    assert public_from_did_key(did) == pub
    assert did_key_from_public(pub) == did


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=32, max_size=32))
def test_did_key_roundtrip_and_prefix(pub: bytes) -> None:
    did = did_key_from_public(pub)
    assert did.startswith("did:key:z6Mk")
    raw = base58.b58decode(did[len("did:key:z"):])
    assert raw[:2] == b"\xed\x01" and raw[2:] == pub
    assert public_from_did_key(did) == pub
    assert parse_signer(did) == pub
    assert parse_signer("ed25519:" + b64enc(pub)) == pub


@pytest.mark.parametrize(
    "did",
    [
        "did:web:example.com",
        "did:key:z6LShpNhGwSupbB7zjuivH156vhLJBDDzmQtA4BY9S94pe1K",  # X25519 (0xec01)
        "did:key:zTjsVPtY",  # too short
        "did:key:z6MkA9MEcFWsoUVqj2zX6LACFaikLQ28i9WAsJnURDS3HLGKSkUbwUbiLH22ohgZ2BwgpQ6qC3VBTNV3pLhYDTVgR",
        "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooW",  # one char short
        "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWpp",
        "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooW0",  # '0' is not base58
        "did:key:z16MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp",  # leading zero byte
        "did:key:m7QFeX+t2nOd1/gs6+z4Z4O9BzMlAe6u7S2rSWlvrnvA",  # multibase base64
        "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp ",
        "did:key:z",
        "did:key:z\u00e9",
        "",
    ],
)
def test_public_from_did_key_rejects(did: str) -> None:
    with pytest.raises(InvalidInput):
        public_from_did_key(did)
    with pytest.raises(InvalidInput):
        parse_signer(did)


@pytest.mark.parametrize(
    "signer",
    [
        "ed25519:" + b64enc(bytes(31)),
        "ed25519:" + b64enc(bytes(33)),
        "ed25519:" + b64enc(ZERO_SEED_PUB).rstrip("="),
        "ed25519: " + b64enc(ZERO_SEED_PUB),
        "ed25519:" + b64enc(ZERO_SEED_PUB) + "\n",
        "Ed25519:" + b64enc(ZERO_SEED_PUB),
        ZERO_SEED_PUB.hex(),
        None,
        42,
        ["did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp"],
    ],
)
def test_parse_signer_rejects(signer: object) -> None:
    with pytest.raises(InvalidInput):
        parse_signer(signer)


def test_did_key_from_public_rejects_bad_length() -> None:
    with pytest.raises(InvalidInput):
        did_key_from_public(bytes(31))



def test_parse_sha256_rejects_whitespace_that_fromhex_would_skip():
    import pytest

    from tlog.errors import InvalidInput
    from tlog.formats.hashing import parse_sha256

    assert parse_sha256("sha256:" + "AB" * 32) == b"\xab" * 32
    for bad in ("sha256:" + "ab" * 31 + "  ", "sha256:" + "ab" * 31 + " a", "sha256:" + "ab" * 31 + "\n\n"):
        with pytest.raises(InvalidInput):
            parse_sha256(bad)


# --- the fast paths of check_json_value / loads_json against a plain reference -----------


def _reference_ok(obj: object, depth_left: int = 64) -> bool:
    """The data-model check written the slow, obvious way."""
    if obj is None or isinstance(obj, bool):
        return True
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
            return True
        except UnicodeEncodeError:
            return False
    if isinstance(obj, int):
        return INT_MIN <= obj <= INT_MAX
    if isinstance(obj, (dict, list)):
        if depth_left <= 0:
            return False
        if isinstance(obj, dict):
            return all(isinstance(k, str) and _reference_ok(k) and _reference_ok(v, depth_left - 1)
                       for k, v in obj.items())
        return all(_reference_ok(v, depth_left - 1) for v in obj)
    return False


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=INT_MIN - 2, max_value=INT_MAX + 2),
    st.sampled_from([INT_MIN, INT_MAX, INT_MIN - 1, INT_MAX + 1, 2**70]),
    st.text(max_size=4), st.sampled_from(["\ud800", "ok\udfff"]), st.floats(allow_nan=False), st.binary(max_size=2),
)
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=6), st.lists(st.integers(min_value=INT_MIN - 1, max_value=INT_MAX + 1), max_size=6),
    st.lists(st.sampled_from(["a", "b", "\ud800"]), max_size=5),
    st.dictionaries(st.sampled_from(["a", "b", "c", "\udc00"]), inner, max_size=4)), max_leaves=30)


@settings(max_examples=600, deadline=None)
@given(_values, st.integers(min_value=1, max_value=5))
def test_check_json_value_accepts_exactly_what_the_reference_accepts(value, depth):
    want = _reference_ok(value, depth)
    try:
        check_json_value(value, max_depth=depth)
        got = True
    except InvalidInput:
        got = False
    assert got == want


def test_fast_paths_name_the_bad_element():
    with pytest.raises(InvalidInput, match=r"\$\.xs: integer out of"):
        check_json_value({"xs": [1, 2, INT_MAX + 1]})
    with pytest.raises(InvalidInput, match=r"\$\.xs\[2\]: text is not valid Unicode"):
        check_json_value({"xs": ["a", "b", "\ud800"]})
    with pytest.raises(InvalidInput, match=r"\$\.n: integer out of"):
        check_json_value({"n": INT_MIN - 1})
    with pytest.raises(InvalidInput, match=r"\$\.s: text is not valid Unicode"):
        check_json_value({"s": "\udfff"})
    with pytest.raises(InvalidInput, match="floating-point"):
        check_json_value([1, 2, 3.0])
    check_json_value([True, 1, False])  # bools are not ints here, and are allowed


def test_deep_nesting_is_refused_without_exhausting_the_stack():
    """The scan refuses nesting past the limit before any recursive decoder runs, so even a
    thread with a small stack (musl's is 128 KiB) is safe."""
    import threading

    results = []

    def parse(body: bytes) -> None:
        try:
            loads_json(body)
            results.append("accepted")
        except InvalidInput as e:
            results.append(e.message)

    old = threading.stack_size(256 * 1024)
    try:
        for depth in (65, 900, 5000, 1_000_000):
            body = b"[" * depth + b"]" * depth
            t = threading.Thread(target=parse, args=(body,))
            t.start()
            t.join()
    finally:
        threading.stack_size(old)
    assert len(results) == 4 and all("nested" in r for r in results), results


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.binary(max_size=70),
                 st.text(alphabet="ABCDEFGHabcdefgh0123456789+/=-_ \n\x00é", max_size=48).map(lambda t: t.encode()),
                 st.sampled_from([b"////", b"//==", b"/w==", b"/x==", b"AAA=", b"AAB=", b"====", b"A===", b"AA=A"])))
def test_base64_codec_agrees_with_the_standard_library(data):
    """tlog.formats.encoding uses pybase64; it must accept, refuse and produce exactly what
    the standard library does (validate=True)."""
    import base64
    import binascii

    from tlog.formats.encoding import b64decode_noncanonical, b64encode_bytes

    assert b64encode_bytes(data) == base64.b64encode(data)
    if len(data) % 4:
        return  # every caller refuses such lengths first (pybase64 and binascii differ on "////=")
    try:
        want = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        want = None
    try:
        got = b64decode_noncanonical(data)
    except (binascii.Error, ValueError):
        got = None
    assert got == want
