"""A principal's receipt hash chain (OAP-CORE-1.0 §19.2): every receipt cites the
SHA-256 (RFC 8785 JCS) of the one before it in `previous_receipt_hash`, so a lost,
altered, inserted or forked receipt shows as a break that any verifier finds.

Pure and offline: given the receipts a principal holds (in any order), follow the
links from the first receipt (no `previous_receipt_hash`, or the one citing a known
earlier hash) and report every receipt the walk cannot reach and why. Pair it with
`TrustPolicy.verify_anchored` on the head's anchors: the chain proves nothing was
dropped between receipts, the log that the head existed at a time.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tlog.errors import InvalidInput
from tlog.formats.entries import receipt_hash
from tlog.formats.hashing import format_sha256, parse_sha256
from tlog.formats.times import parse_utc

__all__ = ["ChainReport", "verify_chain"]

MAX_RECEIPTS = 1_000_000


@dataclass(frozen=True)
class ChainReport:
    """`chain` is the receipt hashes in chain order from the first; `problems` says what
    breaks it (empty: every receipt given is on one unbroken chain)."""

    chain: tuple[bytes, ...]
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def head(self) -> bytes | None:
        return self.chain[-1] if self.chain else None


def _previous(receipt: dict[str, Any], i: int) -> bytes | None:
    value = receipt.get("previous_receipt_hash")
    if value is None:
        return None
    try:
        return parse_sha256(value, f"receipt {i}: previous_receipt_hash")
    except InvalidInput as e:
        raise InvalidInput(e.message) from None


def verify_chain(receipts: Sequence[object], *, after: bytes | None = None,
                 principal: str | None = None) -> ChainReport:
    """Check that `receipts` form one chain. It starts at the receipt without
    `previous_receipt_hash`, or, with `after`, at the one citing that hash (a chain
    checked before, continued). With `principal`, every receipt must name it as
    `principal_did`. Receipts with a `timestamp` must not go back in time along the
    chain. InvalidInput for what is not a receipt at all."""
    if len(receipts) > MAX_RECEIPTS:
        raise InvalidInput(f"at most {MAX_RECEIPTS} receipts at a time")
    problems: list[str] = []
    by_hash: dict[bytes, dict[str, Any]] = {}
    cited_by: dict[bytes | None, list[bytes]] = {}
    for i, r in enumerate(receipts):
        if not isinstance(r, dict):
            raise InvalidInput(f"receipt {i} is not a JSON object")
        h = receipt_hash(r)
        if h in by_hash:
            continue  # the same receipt twice (two copies of a file) is not a fork
        by_hash[h] = r
        cited_by.setdefault(_previous(r, i), []).append(h)
        if principal is not None and r.get("principal_did") != principal:
            problems.append(f"{_short(h)} names principal {r.get('principal_did')!r}, not {principal}")
    starts = cited_by.get(after, [])
    if not starts:
        what = f"cites {format_sha256(after)}" if after is not None else "has no previous_receipt_hash"
        problems.append(f"no receipt {what}: the chain has no start among these receipts")
        return ChainReport((), tuple(problems))
    if len(starts) > 1:
        problems.append(f"fork at the start: {', '.join(_short(h) for h in sorted(starts))} all start the chain")
    chain: list[bytes] = []
    seen: set[bytes] = set()
    current: bytes | None = sorted(starts)[0]
    last_time: float | None = None
    while current is not None and current not in seen:
        seen.add(current)
        chain.append(current)
        ts = by_hash[current].get("timestamp")
        if isinstance(ts, str):
            try:
                t = parse_utc(ts, "timestamp").timestamp()
            except InvalidInput:
                problems.append(f"{_short(current)} has a timestamp that is not RFC 3339 UTC")
            else:
                if last_time is not None and t < last_time:
                    problems.append(f"{_short(current)} is timestamped before the receipt it cites")
                last_time = t
        nxt = cited_by.get(current, [])
        if len(nxt) > 1:
            problems.append(f"fork: {', '.join(_short(h) for h in sorted(nxt))} all cite {_short(current)}")
        current = sorted(nxt)[0] if nxt else None
    for h, r in by_hash.items():
        if h in seen:
            continue
        prev = _previous(r, 0)
        if prev is not None and prev != after and prev not in by_hash:
            problems.append(f"{_short(h)} cites {format_sha256(prev)}, which is not among the receipts: "
                            "a receipt is missing or was altered")
        else:
            problems.append(f"{_short(h)} is not on the chain from its start (a fork or a second start)")
    return ChainReport(tuple(chain), tuple(problems))


def _short(h: bytes) -> str:
    return format_sha256(h)[:19]
