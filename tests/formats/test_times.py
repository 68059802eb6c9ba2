"""Times as OAP writes them (tlog/formats/times.py): every instant the parser accepts is one
the formatter writes in a spelling the parser reads back to the same instant, over the whole
range (years 0001 to 9999), so a time the registry writes is always one it (and a relying
party) can read."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlog.errors import InvalidInput
from tlog.formats.times import format_utc, parse_utc

instants = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59, 999999),
                        timezones=st.just(UTC))
spellings = st.builds(
    lambda y, mo, d, h, mi, s, frac: f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}{frac}Z",
    st.integers(0, 9999), st.integers(0, 13), st.integers(0, 32), st.integers(0, 24), st.integers(0, 60),
    st.integers(0, 60), st.one_of(st.just(""), st.from_regex(r"\.[0-9]{1,6}", fullmatch=True)))


@settings(max_examples=500, deadline=None)
@given(instants)
def test_every_instant_formats_to_a_spelling_that_parses_back_to_it(dt):
    text = format_utc(dt)
    assert parse_utc(text, "t") == dt
    assert format_utc(parse_utc(text, "t")) == text  # the one spelling: formatting it again changes nothing


@settings(max_examples=500, deadline=None)
@given(spellings)
def test_every_accepted_spelling_round_trips_and_every_other_is_refused_as_input(text):
    try:
        dt = parse_utc(text, "t")
    except InvalidInput:
        return  # refused at input (month 13, day 0, year 0, 24:00...): never written either
    assert parse_utc(format_utc(dt), "t") == dt


@pytest.mark.parametrize("dt, text", [
    (datetime(1, 1, 1, tzinfo=UTC), "0001-01-01T00:00:00Z"),
    (datetime(999, 12, 31, 23, 59, 59, 500000, tzinfo=UTC), "0999-12-31T23:59:59.5Z"),
    (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), "9999-12-31T23:59:59.999999Z"),
    (datetime(2026, 1, 2, 3, 4, 5, 250000, tzinfo=UTC), "2026-01-02T03:04:05.25Z"),
])
def test_the_edges_of_the_range_have_four_digit_years(dt, text):
    assert format_utc(dt) == text and parse_utc(text, "t") == dt


def test_times_outside_the_range_are_refused_at_input():
    for text in ("0000-01-01T00:00:00Z", "1-01-01T00:00:00Z", "10000-01-01T00:00:00Z", "2026-02-29T00:00:00Z",
                 "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00.1234567Z"):
        with pytest.raises(InvalidInput):
            parse_utc(text, "t")
    assert format_utc(datetime(2026, 1, 1, 1, tzinfo=UTC) + timedelta(hours=-1)) == "2026-01-01T00:00:00Z"
