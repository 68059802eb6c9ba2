"""The registry's signed log list (tlog.formats.shardlist): signed by registry.status's
`sign_object`, verified offline against the pinned key; malformed or unsigned lists are
refused whole; a client walks successors to the shard that takes entries now."""
from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest

from registry.status import sign_object
from tlog.errors import FormatError, SignatureError
from tlog.formats.did import did_key_from_public
from tlog.formats.keys import ed25519_signer
from tlog.formats.shardlist import check_log_list_body, unsigned_log_list, verify_log_list, writable_log

from tests.support.signers import make_signer

SEED = b"\x07" * 32
REGISTRY = did_key_from_public(ed25519_signer(SEED).public)
A, B, C = (make_signer(f"shards.test/{y}") for y in (2025, 2026, 2027))


def body() -> dict:
    return {"logs": [
        {"origin": A.name, "url": "https://a.example", "vkey": A.vkey, "state": "frozen", "successor": B.name},
        {"origin": B.name, "url": "https://b.example", "vkey": B.vkey, "state": "active",
         "accept_from": "2026-01-01T00:00:00Z", "accept_until": "2027-01-01T00:00:00Z", "successor": C.name},
        {"origin": C.name, "url": "https://c.example", "vkey": C.vkey, "state": "active",
         "accept_from": "2027-01-01T00:00:00Z"}]}


def signed() -> dict:
    return sign_object(unsigned_log_list(REGISTRY, "2026-06-01T00:00:00Z", body()), SEED)


def test_a_signed_list_verifies_against_the_pinned_key_and_walks_to_the_open_shard():
    lst = verify_log_list(signed(), REGISTRY)
    assert [log.state for log in lst.logs] == ["frozen", "active", "active"]
    at = datetime(2026, 6, 1, tzinfo=UTC)
    assert writable_log(lst, at, start=A.name).origin == B.name  # frozen -> its successor, open now
    assert writable_log(lst, datetime(2027, 3, 1, tzinfo=UTC), start=A.name).origin == C.name  # two hops
    assert writable_log(lst, datetime(2025, 3, 1, tzinfo=UTC), start=A.name) is None  # nothing open then
    assert lst.by_url("https://b.example/").origin == B.name


@pytest.mark.parametrize("change", ["signature", "logs", "registry", "issued_at"])
def test_a_changed_or_foreign_list_is_refused(change):
    doc = signed()
    if change == "signature":
        doc["signature"] = signed()["signature"][:-4] + "AAA="
    elif change == "logs":
        doc["logs"][0]["state"] = "active"
    elif change == "registry":
        doc["registry"] = did_key_from_public(ed25519_signer(b"\x08" * 32).public)
    else:
        doc["issued_at"] = "2030-01-01T00:00:00Z"
    with pytest.raises(SignatureError):
        verify_log_list(doc, REGISTRY)


@pytest.mark.parametrize("fault", ["successor", "self", "vkey", "state", "window", "dup", "member", "url"])
def test_a_malformed_list_is_refused_whole(fault):
    doc = copy.deepcopy(body())
    log = doc["logs"][1]
    if fault == "successor":
        log["successor"] = "nowhere.example/log"
    elif fault == "self":
        log["successor"] = B.name
    elif fault == "vkey":
        log["vkey"] = A.vkey  # another log's key
    elif fault == "state":
        log["state"] = "retired"
    elif fault == "window":
        log["accept_until"] = "2025-01-01T00:00:00Z"
    elif fault == "dup":
        doc["logs"].append(dict(doc["logs"][0]))
    elif fault == "member":
        log["note"] = "x"
    else:
        log["url"] = "https://b.example/"
    with pytest.raises(FormatError):
        check_log_list_body(doc)
