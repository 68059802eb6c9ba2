"""Hostile input to the registry's parsers: arbitrary JSON-shaped
records, status ids and saved status responses raise only typed 4xx errors."""
from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.api import _status_key
from registry.records import check_record, parse_submission
from registry.statusverify import verify_status
from tlog.errors import OAPError
from tlog.formats.did import did_key_from_public
from tlog.formats.ed25519 import generate_seed, public_from_seed

NOW = datetime(2026, 11, 23, tzinfo=UTC)
REGISTRY = did_key_from_public(public_from_seed(generate_seed()))
KEYS = ["type", "id", "kind", "subject", "reason", "effective_at", "issued_at", "issued_by", "signature",
        "principal", "event", "key", "receipt", "status_list_index", "status_list", "status", "epoch", "proof",
        "this_update", "next_update", "record", "anchor", "statement"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.sampled_from(["revocation", "kill_switch", "key_event", "conformance", "key", "did", "vc",
                                     "good", "revoked", "unknown", "2026-11-20T09:00:00Z", REGISTRY, "urn:oap:x",
                                     "A" * 86 + "=="]),
                    st.text(max_size=40))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) |
                           st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=8),
                           max_leaves=30)
records = st.dictionaries(st.sampled_from(KEYS), json_values, max_size=12)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(records, json_values))
def test_record_parsers_raise_only_client_errors(doc):
    try:
        check_record(parse_submission(doc), now=NOW)
    except OAPError as e:
        assert 400 <= e.status < 500, e


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.none() | st.text(max_size=80) | st.just(REGISTRY))
def test_status_ids_raise_only_client_errors(raw, issuer):
    try:
        key = _status_key(raw, issuer)
        assert isinstance(key, str) and key
    except OAPError as e:
        assert e.status == 400


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(records, json_values))
def test_saved_status_responses_never_verify_by_accident(resp):
    try:
        verify_status(resp, registry=REGISTRY, status_id=None, now=NOW)
    except OAPError as e:
        assert e.status in (400, 422), e
    else:
        raise AssertionError("an arbitrary document verified as a signed status response")
