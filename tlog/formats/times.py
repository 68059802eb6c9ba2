"""Times as OAP writes them: RFC 3339 in UTC with a "Z", at most microseconds.

One instant has one spelling in signed data: no offsets, and fractions capped at
microseconds so comparisons with `datetime` are exact. Every instant `parse_utc` accepts
(years 0001 to 9999) is one `format_utc` writes and `parse_utc` reads back: the year is
always four digits (strftime's `%Y` writes year 1 as `1`, which no RFC 3339 reader takes).
"""
from __future__ import annotations

import re
from datetime import UTC, datetime

from tlog.errors import InvalidInput

__all__ = ["format_utc", "parse_utc", "relative"]

_RFC3339_UTC = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?Z", re.ASCII)


def parse_utc(value: object, field: str) -> datetime:
    """An RFC 3339 UTC time ("2026-01-02T03:04:05.25Z"); InvalidInput naming `field` otherwise."""
    m = _RFC3339_UTC.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise InvalidInput(f"{field} must be an RFC 3339 UTC time like 2026-01-02T03:04:05Z")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    micro = int((m.group(7) or "0").ljust(6, "0"))
    try:
        return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)
    except ValueError:
        raise InvalidInput(f"{field} is not a valid date and time") from None


def format_utc(dt: datetime) -> str:
    """The one spelling `parse_utc` reads back to the same instant."""
    dt = dt.astimezone(UTC)
    text = f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}"
    if dt.microsecond:
        text += f".{dt.microsecond:06d}".rstrip("0")
    return text + "Z"


def relative(dt: datetime, now: datetime | None = None) -> str:
    """"3 min ago" / "in 2 h": how far `dt` is from now, for people reading a CLI."""
    seconds = ((now or datetime.now(UTC)) - dt).total_seconds()
    n = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if n >= size:
            text = f"{int(n // size)} {unit}"
            break
    else:
        text = f"{int(n)} s"
    return f"{text} ago" if seconds >= 0 else f"in {text}"
