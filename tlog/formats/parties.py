"""Who signed a log entry and whom it names: what a monitor reads from every entry it sees.

OAP-CORE-1.0 §28.5: the owner of a key must be able to learn of every receipt signed with
it. A monitor therefore reads every entry of a log once and asks two questions of it: who
signed it (a `receipt` or `registry` entry's `signer`, the subject of a conformance receipt)
and which DIDs it names (a conformance receipt's subject, witnesses and auditor). The answer
is a `Parties`, with every signer and DID in its one spelling (`entries.signer_name`: the
did:key of an Ed25519 key however written, any other DID without its fragment), so that a
watch list can be matched with a set lookup.

A log holds millions of entries, so the two shapes that make nearly all of them are read
without a CBOR decoder: a Privileged Mode commitment (a fixed template: it names no one)
and a receipt entry, whose deterministic CBOR (RFC 8949 §4.2.1, length-first key order)
always starts with the map head, "type": "receipt" and "signer": <text>. The templates come
from `dcbor` itself, as `entries` builds its own fast path. Everything else (conformance
receipts, registry entries, receipts spelled otherwise) goes through the strict, bounded
decoder (`tlog.formats.strict.loads_cbor`). A foreign log's entries (Go's checksum
database, a Certificate Transparency log) are not OAP entries at all: they are `opaque`,
never an error. Nothing here verifies a signature: a monitor reports what an entry claims,
and a relying party checks it with `oap-log verify`.

Reading only the head of a receipt is sound for a monitor: an entry whose head names signer
S and that any verifier decodes (the strict decoder refuses duplicate keys) is signed, if at
all, by S; an entry no verifier can decode proves nothing for anyone.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tlog.errors import FormatError, InvalidInput
from tlog.formats.canonical import dcbor
from tlog.formats.entries import _COMMITMENT_PREFIX, signer_name
from tlog.formats.hashing import leaf_hashes, native
from tlog.formats.strict import loads_cbor
from tlog.formats.tiles import parse_entry_bundle

COMMITMENT = "commitment"
RECEIPT = "receipt"
CONFORMANCE = "conformance"
REGISTRY = "registry"
OPAQUE = "opaque"
KINDS = (COMMITMENT, RECEIPT, CONFORMANCE, REGISTRY, OPAQUE)
"""Every kind a `Parties` can have: the four OAP entry types, and anything else."""

_COMMITMENT_LEN = len(_COMMITMENT_PREFIX) + 64
_HEX64 = re.compile(rb"[0-9a-f]{64}")
# A receipt entry's dCBOR after its map head: "type": "receipt", then "signer" (the keys
# "type" and "signer" sort first among a receipt's keys: four and six bytes long).
_RECEIPT_HEAD = dcbor({"type": "receipt", "signer": ""})[1:-1]
_RECEIPT_MAPS = frozenset(range(0xA4, 0xA8))  # 4 to 7 keys: the receipt's fields, optional ones included
_MAX_NAMES = 64
"""DIDs kept per entry: a conformance receipt names its subject, its witnesses (L5: three
or more) and an auditor; a hostile entry naming thousands is cut, not stored."""


@dataclass(frozen=True, slots=True)
class Parties:
    kind: str  # one of KINDS
    signer: str | None = None  # who signed it, in its one spelling
    names: tuple[str, ...] = ()  # every other DID it names, in its one spelling, without the signer

    @property
    def everyone(self) -> tuple[str, ...]:
        return ((self.signer,) if self.signer else ()) + self.names


_NOBODY = {k: Parties(k) for k in KINDS}


def _name(text: str) -> str:
    # a signer is at most a few hundred characters; a longer one is named as given, uncached,
    # so that a hostile log cannot fill the cache with 64 KiB strings
    return _cached_name(text) if len(text) <= 512 else signer_name(text)


@lru_cache(maxsize=4096)
def _cached_name(text: str) -> str:
    return signer_name(text)


def parties(data: bytes) -> Parties:
    """Who signed the entry `data` (its stored bytes) and whom it names; never raises."""
    return parties_of([data])[0]


def parties_of(entries: Sequence[bytes]) -> list[Parties]:
    """`parties` of each entry (an entry bundle's at once: the fast paths run in one loop)."""
    out: list[Parties] = []
    append = out.append
    commitment, receipt_head, skip = _NOBODY[COMMITMENT], _RECEIPT_HEAD, 1 + len(_RECEIPT_HEAD)
    for data in entries:
        if len(data) == _COMMITMENT_LEN and data.startswith(_COMMITMENT_PREFIX) \
                and _HEX64.fullmatch(data, _COMMITMENT_LEN - 64):
            append(commitment)
        elif data.startswith(receipt_head, 1) and data[0] in _RECEIPT_MAPS:
            append(_receipt(_text_at(data, skip)) or _slow(data))
        else:
            append(_slow(data))
    return out


@dataclass(frozen=True, slots=True)
class BundleRead:
    """An entry bundle read for a monitor: every entry's leaf hash, and who the entries that
    are not commitments name (commitments name no one: most of a log, left out)."""

    data: bytes
    width: int
    leaves: bytes  # width * 32 bytes
    named: tuple[tuple[int, Parties], ...]  # (position in the bundle, parties) of every other entry
    spans: np.ndarray | None  # (width, 4) int64: start, end of each entry in `data` (native path)
    entries: list[bytes] | None  # the entries themselves (pure Python path)

    def entry(self, k: int) -> bytes:
        if self.entries is not None:
            return self.entries[k]
        assert self.spans is not None
        start, end = self.spans[k, :2].tolist()
        return self.data[start:end]


def read_bundle(data: bytes, width: int, *, exact: bool = True) -> BundleRead:
    """The first `width` entries of a tlog-tiles entry bundle, hashed and read for who they
    name, in one pass (`tlog._native.bundle_entries` where it is built; the same from
    `parse_entry_bundle`, `leaf_hashes` and `parties_of` otherwise). `exact`: the bundle must
    hold nothing else (a partial bundle read from the full one need not). FormatError when it
    holds fewer entries, or more than it may."""
    if native is None:
        return _read_bundle_py(data, width, exact)
    try:
        used, leaves, kinds, spans = native.bundle_entries(data, width, _COMMITMENT_PREFIX, _RECEIPT_HEAD)
    except ValueError:
        raise FormatError(f"the entry bundle holds fewer than {width} entries") from None
    if exact and used != len(data):
        raise FormatError(f"the entry bundle holds more than {width} entries")
    sp = np.frombuffer(spans, dtype=np.int64).reshape(width, 4)
    k = np.frombuffer(kinds, dtype=np.uint8)
    idx = np.flatnonzero(k)
    named = []
    for i, kind, (start, end, s, n) in zip(idx.tolist(), k[idx].tolist(), sp[idx].tolist()):
        p = _receipt(data[s:s + n]) if kind == 1 else None
        named.append((i, p or _slow(data[start:end])))
    return BundleRead(data, width, leaves, tuple(named), sp, None)


def _read_bundle_py(data: bytes, width: int, exact: bool) -> BundleRead:
    entries = parse_entry_bundle(data, None if exact else width)
    if len(entries) != width if exact else len(entries) < width:
        raise FormatError(f"the entry bundle holds {len(entries)} entries, not {width}")
    named = tuple((i, p) for i, p in enumerate(parties_of(entries)) if p.kind != COMMITMENT)
    return BundleRead(data, width, leaf_hashes(entries).tobytes(), named, None, entries)


def _receipt(signer: bytes | None) -> Parties | None:
    if signer is None:
        return None
    p = _RECEIPTS.get(signer)
    if p is None:
        try:
            p = Parties(RECEIPT, _name(signer.decode("utf-8")))
        except UnicodeDecodeError:
            return None
        if len(signer) <= 512:  # a longer one is not cached: a hostile log cannot fill the cache with them
            if len(_RECEIPTS) >= 4096:
                _RECEIPTS.clear()
            _RECEIPTS[signer] = p
    return p


_RECEIPTS: dict[bytes, Parties] = {}  # a signer's raw text -> its Parties (logs have few signers, many receipts)


def _slow(data: bytes) -> Parties:
    if not data or not 0xA0 <= data[0] <= 0xBB:  # not a CBOR map: no OAP entry at all
        return _NOBODY[OPAQUE]
    return _decoded(data)


def _text_at(data: bytes, pos: int) -> bytes | None:
    """The bytes of the definite-length CBOR text string at `pos` (heads of 0 to 2 length
    bytes), or None."""
    if pos >= len(data):
        return None
    head = data[pos]
    if 0x60 <= head <= 0x77:
        k, pos = head - 0x60, pos + 1
    elif head == 0x78 and pos + 1 < len(data):
        k, pos = data[pos + 1], pos + 2
    elif head == 0x79 and pos + 2 < len(data):
        k, pos = (data[pos + 1] << 8) | data[pos + 2], pos + 3
    else:
        return None
    if not k or pos + k > len(data):
        return None
    return data[pos:pos + k]


def _decoded(data: bytes) -> Parties:
    try:
        obj = loads_cbor(data)
    except InvalidInput:
        return _NOBODY[OPAQUE]
    if not isinstance(obj, dict):
        return _NOBODY[OPAQUE]
    kind = obj.get("type")
    if kind == COMMITMENT:
        return _NOBODY[COMMITMENT]
    if kind in (RECEIPT, REGISTRY):
        signer = obj.get("signer")
        return Parties(kind, _name(signer)) if isinstance(signer, str) and signer else _NOBODY[OPAQUE]
    if kind == CONFORMANCE:
        receipt = obj.get("receipt")
        if not isinstance(receipt, dict):
            return _NOBODY[OPAQUE]
        subject = receipt.get("subject", receipt.get("issuer"))
        signer = _name(subject) if isinstance(subject, str) and subject.startswith("did:") else None
        names: dict[str, None] = {}
        _collect(receipt, names)
        names.pop(signer or "", None)
        return Parties(CONFORMANCE, signer, tuple(names)[:_MAX_NAMES])
    return _NOBODY[OPAQUE]


def _collect(value: object, out: dict[str, None]) -> None:
    """Every DID (or DID URL) among the strings of a decoded value, in order of appearance."""
    stack = [value]
    while stack and len(out) < _MAX_NAMES:
        v = stack.pop()
        if isinstance(v, str):
            if v.startswith("did:"):
                out.setdefault(_name(v), None)
        elif isinstance(v, dict):
            stack.extend(reversed(list(v.values())))
        elif isinstance(v, list):
            stack.extend(reversed(v))
