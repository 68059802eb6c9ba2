"""tlog.formats.strict: the bounded parsers. The C scanner and the Python one must agree on
every input (items, depth, spans, refusals), and a batch decoded in groups must equal
the same body decoded whole."""
from __future__ import annotations

import json

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlog.errors import InvalidInput, TooLarge
from tlog.formats import strict
from tlog.formats.strict import GROUP_ITEMS, _PyScan, loads_cbor, loads_json, loads_member_array, scan

from tests.support.tools import need

native = pytest.mark.needs("native")


@pytest.fixture(params=["native", "python"])
def scanner(request, monkeypatch):
    if request.param == "native":
        need("native")
    else:
        monkeypatch.setattr(strict, "_native_scan", None)
    return request.param


def _py(data: bytes, pos: int, cbor: bool, depth: int, items: int, split: bool):
    try:
        s = _PyScan(data, items, split).run(pos, depth, cbor)
    except strict._ScanError as e:
        return ("err", e.code, e.pos)
    return (s.end, s.items, None if s.ends is None else s.ends.tolist(), None if s.cum is None else s.cum.tolist())


def _c(data: bytes, pos: int, cbor: bool, depth: int, items: int, split: bool):
    try:
        end, n, ends, cum = strict._native_scan(data, pos, 0 if cbor else 1, depth, items, split)
    except ValueError as e:
        return ("err", *e.args)
    import numpy as np

    return (end, n, None if ends is None else np.frombuffer(ends, dtype=np.int64).tolist(),
            None if cum is None else np.frombuffer(cum, dtype=np.int64).tolist())


values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=3), inner, max_size=4)),
    max_leaves=25)


@native
@settings(max_examples=1500, deadline=None)
@given(values, st.data())
def test_the_c_and_python_scanners_agree_on_mutated_documents(value, data):
    for cbor in (True, False):
        raw = bytearray(cbor2.dumps(value) if cbor else json.dumps(value).encode())
        if raw and data.draw(st.booleans()):
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.sampled_from(
                [0x80, 0x9F, 0x5B, 0xC1, 0xFB, 0xF7, ord("["), ord("]"), ord('"'), ord("\\"), ord(","), ord("{")]))
        raw = bytes(raw[:data.draw(st.integers(0, len(raw)))])
        depth, items = data.draw(st.integers(0, 6)), data.draw(st.integers(0, 40))
        split = data.draw(st.booleans())
        assert _c(raw, 0, cbor, depth, items, split) == _py(raw, 0, cbor, depth, items, split)


@native
@settings(max_examples=1500, deadline=None)
@given(st.binary(max_size=80), st.booleans(), st.booleans())
def test_the_c_and_python_scanners_agree_on_arbitrary_bytes(raw, cbor, split):
    assert _c(raw, 0, cbor, 8, 60, split) == _py(raw, 0, cbor, 8, 60, split)


def test_a_bomb_is_refused_after_the_budget_not_after_the_body(scanner):
    bomb = b"\x9a" + (1 << 20).to_bytes(4, "big") + b"\x80" * (1 << 20)
    with pytest.raises(TooLarge, match="more than 4096 items"):
        loads_cbor(bomb, max_items=4096)
    try:
        scan(bomb, cbor=True, max_depth=16, max_items=4096)
    except TooLarge:
        pass
    with pytest.raises(strict._ScanError) as e:
        _PyScan(bomb, 4096, False).run(0, 16, True)
    assert e.value.pos <= 4096 + 5  # stopped at the budget, not at the end of the body
    jbomb = b"[" + b"[]," * (1 << 18) + b"[]]"
    with pytest.raises(TooLarge):
        loads_json(jbomb, max_items=4096)


def test_items_count_values_and_keys(scanner):
    assert scan(json.dumps({"a": [1, 2], "b": None}).encode(), cbor=False, max_depth=4, max_items=99).items == 7
    assert scan(cbor2.dumps({"a": [1, 2], "b": None}), cbor=True, max_depth=4, max_items=99).items == 7
    loads_json(b'{"a":[1,2],"b":null}', max_items=7)  # the map, 2 keys, the array, 1, 2, null
    with pytest.raises(TooLarge):
        loads_json(b'{"a":[1,2],"b":null}', max_items=6)


@pytest.mark.parametrize("body,message", [
    (b'{"a": 1,}', "malformed JSON"), (b'{"a" 1}', "malformed JSON"), (b"[1 2]", "malformed JSON"),
    (b'{"a": "x', "malformed JSON"), (b"[1] x", "malformed JSON"), (b"", "malformed JSON"),
    (b'{"a": 1.5}', "floating-point"), (b'{"a": 1, "a": 2}', "duplicate key"), (b"\xff", "UTF-8"),
])
def test_json_refusals_name_the_problem(scanner, body, message):
    with pytest.raises(InvalidInput, match=message):
        loads_json(body)


def _batch(n: int, cbor: bool, **extra) -> bytes:
    doc = {"entries": [{"type": "commitment", "commitment": f"sha256:{i:064x}", **extra} for i in range(n)]}
    return cbor2.dumps(doc) if cbor else json.dumps(doc, indent=1).encode()


@pytest.mark.parametrize("cbor", [False, True])
def test_a_batch_decoded_in_groups_equals_the_whole_decode(scanner, cbor):
    for n in (0, 1, 2, GROUP_ITEMS // 5 - 1, GROUP_ITEMS // 5 + 1, 3 * GROUP_ITEMS // 5 + 7):
        body = _batch(n, cbor)
        want = (cbor2.loads(body) if cbor else json.loads(body))["entries"]
        assert loads_member_array(body, cbor=cbor, key="entries", max_elements=10_000, max_items=10**6) == want


@pytest.mark.parametrize("cbor", [False, True])
def test_a_batch_envelope_is_exact(scanner, cbor):
    enc = cbor2.dumps if cbor else (lambda d: json.dumps(d).encode())
    for bad in ({"entries": 7}, {"entries": [], "x": 1}, {"entriez": []}, [1], {"entries": {"a": 1}}):
        with pytest.raises(InvalidInput, match="body must be"):
            loads_member_array(enc(bad), cbor=cbor, key="entries", max_elements=9, max_items=99)
    with pytest.raises(TooLarge, match="at most 3 entries"):
        loads_member_array(enc({"entries": [1, 2, 3, 4]}), cbor=cbor, key="entries", max_elements=3, max_items=99)
    with pytest.raises(TooLarge, match=r"entries\[1\] has more than 4 items"):
        loads_member_array(enc({"entries": [1, [1, 2, 3, 4]]}), cbor=cbor, key="entries", max_elements=9,
                           max_items=99, max_element_items=4)
    with pytest.raises(InvalidInput, match=r"entries\[0\].*floating|floating"):
        loads_member_array(enc({"entries": [1.5]}), cbor=cbor, key="entries", max_elements=9, max_items=99)
    if cbor:
        with pytest.raises(InvalidInput, match="trailing"):
            loads_member_array(enc({"entries": []}) + b"\x00", cbor=True, key="entries", max_elements=9,
                               max_items=99)
    else:
        assert loads_member_array(b' \n{ "entries" :[ 1 , 2 ] }\n', cbor=False, key="entries",
                                  max_elements=9, max_items=99) == [1, 2]
        with pytest.raises(InvalidInput):
            loads_member_array(b'{"entries":[1]} x', cbor=False, key="entries", max_elements=9, max_items=99)
