"""The registry's key rotation statements and key chains (registry.keyrotation)."""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from registry.keyrotation import KeyChain, RotationError, chain_of_document, key_chain, make_rotation, parse_rotation
from registry.layout import classify, rotation_path
from tlog.formats.canonical import jcs
from tlog.formats.ed25519 import generate_seed

from tests.support.registry import did

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def chain_of_three():
    a, b, c = generate_seed(), generate_seed(), generate_seed()
    r1 = make_rotation(registry=did(a), number=1, old=a, new=b, seq=5, epoch=3, issued_at=T0)
    r2 = make_rotation(registry=did(a), number=2, old=b, new=c, seq=9, epoch=7, issued_at=T0 + timedelta(days=10))
    return (a, b, c), [r1, r2]


def test_a_chain_names_the_key_of_every_commit_and_who_may_sign_when():
    (a, b, c), statements = chain_of_three()
    chain = key_chain(did(a), statements)
    assert chain.keys == (did(a), did(b), did(c)) and chain.current == did(c)
    assert [chain.at(s) for s in (0, 4, 5, 8, 9, 100)] == [did(a), did(a), did(b), did(b), did(c), did(c)]
    # A pin to A follows to B and C; each old key signs only the epochs before its retirement.
    assert chain.may_sign(did(a), 2, did(a)) and not chain.may_sign(did(a), 3, did(a))
    assert chain.may_sign(did(b), 6, did(a)) and not chain.may_sign(did(b), 7, did(a))
    assert chain.may_sign(did(c), 500, did(a)) and chain.may_sign(did(c), 1, did(a))
    # A pin to B trusts C after it, never A before it.
    assert chain.may_sign(did(c), 9, did(b)) and not chain.may_sign(did(a), 1, did(b))
    # A key outside the chain never signs.
    assert not chain.may_sign(did(generate_seed()), 1, did(a))
    doc = {"registry": did(a), "rotations": [json.loads(s) for s in statements]}
    assert chain_of_document(doc).keys == chain.keys


def test_a_hand_over_not_signed_by_the_key_in_force_is_refused():
    a, b, x = generate_seed(), generate_seed(), generate_seed()
    by_thief = make_rotation(registry=did(a), number=1, old=x, new=b, seq=3, epoch=1, issued_at=T0)  # self-consistent
    with pytest.raises(RotationError, match="hands over from"):
        key_chain(did(a), [by_thief])
    good = json.loads(make_rotation(registry=did(a), number=1, old=a, new=b, seq=3, epoch=1, issued_at=T0))
    for field, seed in (("signature", x), ("countersignature", x)):
        forged = dict(good)
        forged[field] = json.loads(make_rotation(registry=did(a), number=1, old=seed, new=b, seq=3,
                                                 epoch=1, issued_at=T0))["signature"]
        with pytest.raises(RotationError, match=f"the {field} is not by"):
            parse_rotation(jcs(forged))


def test_rotations_in_order_only():
    (a, _, _), (r1, r2) = chain_of_three()
    with pytest.raises(RotationError, match="out of order"):
        key_chain(did(a), [r2])
    with pytest.raises(RotationError, match="out of order"):
        key_chain(did(a), [r1, r1])
    with pytest.raises(RotationError, match="names commit 5, but commit 6"):
        KeyChain(did(a)).then(parse_rotation(r1), 6)
    with pytest.raises(RotationError, match="not of"):
        key_chain(did(generate_seed()), [r1])


def test_rotation_paths():
    assert rotation_path(3) == "key-rotations/3.json"
    info = classify("key-rotations/3.json")
    assert (info.what, info.seq) == ("key_rotation", 3)
    for bad in ("key-rotations/0.json", "key-rotations/01.json", "key-rotations/x.json"):
        with pytest.raises(Exception, match="not a path"):
            classify(bad)
