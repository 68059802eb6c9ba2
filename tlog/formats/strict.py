"""Strict, bounded parsers for untrusted bodies (`application/oap+json`,
`application/oap+cbor`, OAP-CORE-1.0 App. D).

Whatever the input, the parsers return a value of the entry data model
(`tlog.formats.canonical.check_json_value`) or raise `InvalidInput` (HTTP 400, App. B
`invalid_input`), never another exception that a service would turn into a 500.

Every parse is bounded before a decoder allocates anything: a structural scan
counts the body's data items (every value, and every map key) against an item
budget and refuses nesting deeper than a depth limit. A hostile body therefore
costs at most what an honest body of the same route costs: a 256 KiB CBOR array
of empty arrays is 262,144 items and is refused after the route's budget
(`MAX_DOCUMENT_ITEMS` for one document), not decoded into 262,144 lists.

The scan runs in C (`tlog._native.scan`, GIL released, a few ns a byte) when the
extension is built, else in Python (`_PyScan`, the same rules, ~0.4 us an item).
A batch (`loads_member_array`) is decoded a bounded group of elements at a time,
so no single decoder call holds the interpreter for more than ~1 ms.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, NoReturn

import cbor2
import numpy as np

from tlog.errors import InvalidInput, TooLarge
from tlog.formats.canonical import DEFAULT_MAX_DEPTH, check_json_value

try:  # the optional C extension (setup.py)
    from tlog._native import scan as _native_scan
except ImportError:  # pragma: no cover - exercised where the extension is not built
    _native_scan = None

DEFAULT_MAX_ITEMS = 65_536
"""Items in a document read with no route-specific budget (local files, mirrored records)."""
MAX_DOCUMENT_ITEMS = 4_096
"""Items in one submitted document: an entry, a record, a conformance receipt. The
largest OAP document, a conformance receipt with its witness signatures, has a
few hundred."""
ITEMS_PER_ENTRY = 32
"""Average items per entry that a batch's budget allows (an entry has 5-15)."""
GROUP_ITEMS = 8_192
"""A batch is decoded in groups of elements of about this many items (~1 ms each)."""

_SCAN_ERRORS = {  # tlog._native's codes; the Python scanner raises the same messages
    1: "truncated {kind}",
    2: "indefinite-length CBOR items are not allowed",
    3: "malformed CBOR: reserved additional information",
    4: "malformed CBOR: unexpected break",
    5: "CBOR byte strings are not allowed",
    6: "CBOR tags are not allowed",
    7: "floating-point numbers are not allowed",
    8: "CBOR undefined is not allowed",
    9: "CBOR simple values other than false/true/null are not allowed",
    10: "CBOR map keys must be text strings",
    11: "{kind} nested deeper than {depth} levels",
    12: "{kind} body has more than {items} items (values and keys)",
    13: "malformed JSON",
    14: "expected an array",
    15: "out of memory scanning the body",
}
_E_TRUNCATED, _E_SYNTAX, _E_ITEMS = 1, 13, 12


@dataclass(frozen=True)
class Scan:
    """Where one item ends, how many items it holds, and (split) per element of the
    array it is, each element's end and the running item count after it."""

    end: int
    items: int
    ends: np.ndarray | None = None
    cum: np.ndarray | None = None


class _ScanError(Exception):
    def __init__(self, code: int, pos: int) -> None:
        super().__init__(code, pos)
        self.code, self.pos = code, pos


def scan(data: bytes, pos: int = 0, *, cbor: bool, max_depth: int, max_items: int, split: bool = False) -> Scan:
    """The structure of the one CBOR or JSON item at `pos`, within the budget.

    Raises InvalidInput for a refusal of the data model, the depth or the budget.
    A JSON syntax error is reported by `loads_json`'s decoder, which names it.
    """
    try:
        if _native_scan is not None:
            end, items, ends, cum = _native_scan(data, pos, 0 if cbor else 1, max_depth, max_items, split)
            if split:
                return Scan(end, items, np.frombuffer(ends, dtype=np.int64), np.frombuffer(cum, dtype=np.int64))
            return Scan(end, items)
        return _PyScan(data, max_items, split).run(pos, max_depth, cbor)
    except ValueError as e:
        code, at = e.args if len(e.args) == 2 else (0, 0)
        raise _scan_refusal(code, at, cbor=cbor, max_depth=max_depth, max_items=max_items) from None
    except _ScanError as e:
        raise _scan_refusal(e.code, e.pos, cbor=cbor, max_depth=max_depth, max_items=max_items) from None


class _Syntax(InvalidInput):
    """A JSON syntax error found by the scanner: the decoder words it (see `loads_json`)."""


def _scan_refusal(code: int, pos: int, *, cbor: bool, max_depth: int, max_items: int) -> InvalidInput:
    text = _SCAN_ERRORS.get(code, "malformed body").format(kind="CBOR" if cbor else "JSON", depth=max_depth,
                                                           items=max_items)
    if code == _E_ITEMS:
        return TooLarge(text)
    if not cbor and code in (_E_TRUNCATED, _E_SYNTAX):
        return _Syntax(f"malformed JSON at byte {pos}")
    return InvalidInput(text)


# --- the scanner in Python (without the C extension) ------------------------------

_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_SCALAR = re.compile(rb"[0-9A-Za-z+\-.]+")


class _PyScan:
    """`tlog._native.scan` in Python: the same items, depth, spans and errors."""

    def __init__(self, data: bytes, max_items: int, split: bool) -> None:
        self.data, self.n, self.max_items, self.split = data, len(data), max_items, split
        self.items = 0
        self.ends: list[int] = []
        self.cum: list[int] = []

    def run(self, pos: int, max_depth: int, cbor: bool) -> Scan:
        end = self._cbor(pos, max_depth, self.split) if cbor else self._json(pos, max_depth, self.split)
        if self.split:
            return Scan(end, self.items, np.array(self.ends, dtype=np.int64), np.array(self.cum, dtype=np.int64))
        return Scan(end, self.items)

    def _count(self, pos: int) -> None:
        self.items += 1
        if self.items > self.max_items:
            raise _ScanError(_E_ITEMS, pos)

    def _mark(self, end: int) -> None:
        self.ends.append(end)
        self.cum.append(self.items)

    def _cbor(self, pos: int, depth_left: int, split: bool) -> int:
        data, n, start = self.data, self.n, pos
        self._count(pos)
        if pos >= n:
            raise _ScanError(_E_TRUNCATED, pos)
        major, info = data[pos] >> 5, data[pos] & 0x1F
        pos += 1
        if info < 24:
            arg = info
        elif info == 31:
            raise _ScanError(4 if major == 7 else 2, start)
        elif info > 27:
            raise _ScanError(3, start)
        else:
            size = 1 << (info - 24)
            if size > n - pos:
                raise _ScanError(_E_TRUNCATED, start)
            arg = int.from_bytes(data[pos:pos + size], "big")
            pos += size
        if split and major != 4:
            raise _ScanError(14, start)
        if major in (0, 1):
            return pos
        if major == 3:
            if arg > n - pos:
                raise _ScanError(_E_TRUNCATED, start)
            return pos + arg
        if major in (4, 5):
            if depth_left <= 0:
                raise _ScanError(11, start)
            if arg > n - pos or (major == 5 and arg > (n - pos) // 2):
                raise _ScanError(_E_TRUNCATED, start)
            for i in range(arg * 2 if major == 5 else arg):
                if major == 5 and i % 2 == 0 and pos < n and data[pos] >> 5 != 3:
                    raise _ScanError(10, pos)
                pos = self._cbor(pos, depth_left - 1, False)
                if split:
                    self._mark(pos)
            return pos
        if major == 2:
            raise _ScanError(5, start)
        if major == 6:
            raise _ScanError(6, start)
        first = data[start]
        if first in (0xF4, 0xF5, 0xF6):
            return pos
        raise _ScanError(7 if first in (0xF9, 0xFA, 0xFB) else 8 if first == 0xF7 else 9, start)

    def _ws(self, pos: int) -> int:
        while pos < self.n and self.data[pos] in b" \t\n\r":
            pos += 1
        return pos

    def _string(self, pos: int) -> int:
        m = _JSON_STRING.match(self.data, pos)
        if m is None:
            raise _ScanError(_E_TRUNCATED, pos)
        return m.end()

    def _json(self, pos: int, depth_left: int, split: bool) -> int:
        data, n = self.data, self.n
        pos = self._ws(pos)
        self._count(pos)
        if pos >= n:
            raise _ScanError(_E_TRUNCATED, pos)
        c = data[pos]
        if split and c != 0x5B:
            raise _ScanError(14, pos)
        if c in (0x7B, 0x5B):  # { [
            close = 0x7D if c == 0x7B else 0x5D
            start = pos
            if depth_left <= 0:
                raise _ScanError(11, pos)
            pos = self._ws(pos + 1)
            if pos < n and data[pos] == close:
                return pos + 1
            while True:
                if c == 0x7B:
                    pos = self._ws(pos)
                    if pos >= n or data[pos] != 0x22:
                        raise _ScanError(_E_TRUNCATED if pos >= n else _E_SYNTAX, pos)
                    self._count(pos)
                    pos = self._ws(self._string(pos))
                    if pos >= n or data[pos] != 0x3A:
                        raise _ScanError(_E_TRUNCATED if pos >= n else _E_SYNTAX, pos)
                    pos += 1
                pos = self._json(pos, depth_left - 1, False)
                if split:
                    self._mark(pos)
                pos = self._ws(pos)
                if pos >= n:
                    raise _ScanError(_E_TRUNCATED, start)
                if data[pos] == close:
                    return pos + 1
                if data[pos] != 0x2C:
                    raise _ScanError(_E_SYNTAX, pos)
                pos += 1
        if c == 0x22:
            return self._string(pos)
        m = _JSON_SCALAR.match(data, pos)
        if m is None:
            raise _ScanError(_E_SYNTAX, pos)
        return m.end()


# --- strict JSON ---------------------------------------------------------------


def _reject_float(text: str) -> NoReturn:
    raise InvalidInput(f"floating-point numbers are not allowed: {text[:40]}")


def _reject_constant(text: str) -> NoReturn:
    raise InvalidInput(f"{text} is not valid JSON")


def _object_no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise InvalidInput(f"duplicate key in JSON object: {key!r}")
        out[key] = value
    return out


def _decode_json(data: bytes) -> object:
    """json.loads with the strict hooks; raises only InvalidInput. The caller scanned
    `data` first, so its depth and size are within the budget."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("JSON body is not valid UTF-8") from None
    try:
        return json.loads(text, parse_float=_reject_float, parse_constant=_reject_constant,
                          object_pairs_hook=_object_no_duplicates)
    except InvalidInput:
        raise
    except RecursionError:  # not reached after a scan; kept so no input can become a 500
        raise InvalidInput("JSON nested too deeply") from None
    except ValueError as e:  # JSONDecodeError is a ValueError
        if "integer string conversion" in str(e):  # past int_max_str_digits: far past 64 bits
            raise InvalidInput("integer out of the signed 64-bit range") from None
        raise InvalidInput(f"malformed JSON: {e}") from None


def _as_bytes(body: object, kind: str) -> bytes:
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise InvalidInput(f"{kind} body must be bytes")
    return bytes(body)


def loads_json(body: bytes, *, max_depth: int = DEFAULT_MAX_DEPTH, max_items: int = DEFAULT_MAX_ITEMS) -> object:
    """Parse an `application/oap+json` body strictly; raise only InvalidInput (TooLarge,
    413, when it holds more than `max_items` items).

    Refused: non-UTF-8 bytes (no UTF-16/32 sniffing, no BOM), duplicate object
    keys (RFC 8259 leaves their meaning open, so two parsers could disagree on
    what was signed), NaN/Infinity, any number with a fraction or exponent, and
    nesting deeper than `max_depth` (brackets inside strings do not count).
    """
    data = _as_bytes(body, "JSON")
    try:
        end = scan(data, cbor=False, max_depth=max_depth, max_items=max_items).end
    except _Syntax:
        _decode_json(data)  # words the error; the scan bounded the work up to it
        raise
    if data[end:].strip(b" \t\n\r"):
        _decode_json(data)  # "Extra data": worded by the decoder
        raise InvalidInput("malformed JSON: extra data")
    value = _decode_json(data)
    check_json_value(value, max_depth=max_depth)
    return value


# --- strict CBOR ---------------------------------------------------------------

_CBOR_OPTIONS = dict(allow_indefinite=False, allow_duplicate_keys=False, strict_hashable_types=True)


def _decode_cbor(data: bytes, max_depth: int) -> object:
    try:
        return cbor2.loads(data, max_depth=max_depth + 4, **_CBOR_OPTIONS)  # type: ignore[arg-type]
    except (cbor2.CBORDecodeError, ValueError, TypeError, UnicodeDecodeError, RecursionError) as e:
        raise InvalidInput(f"malformed CBOR: {e}") from None


def loads_cbor(body: bytes, *, max_depth: int = DEFAULT_MAX_DEPTH, max_items: int = DEFAULT_MAX_ITEMS) -> object:
    """Parse an `application/oap+cbor` body strictly; raise only InvalidInput.

    The scan admits only the data model's major types with definite lengths: no
    tags, no byte strings, no floats, no simple values but false/true/null, text
    map keys only, bounded depth and items, and no trailing bytes (cbor2 would
    silently ignore them, so two different bodies would decode to the same entry).
    Lengths are checked against the bytes actually present, so a forged header
    cannot make the decoder allocate. cbor2 then decodes with duplicate keys
    refused. Non-shortest integer or length encodings are accepted: the server
    re-encodes with `dcbor` anyway.
    """
    data = _as_bytes(body, "CBOR")
    if not data:
        raise InvalidInput("empty CBOR body")
    end = scan(data, cbor=True, max_depth=max_depth, max_items=max_items).end
    if end != len(data):
        raise InvalidInput(f"trailing bytes after the CBOR item ({len(data) - end} bytes)")
    value = _decode_cbor(data, max_depth)
    check_json_value(value, max_depth=max_depth)
    return value


def loads(body: bytes, *, cbor: bool, max_depth: int = DEFAULT_MAX_DEPTH,
          max_items: int = DEFAULT_MAX_ITEMS) -> object:
    if not body:
        raise InvalidInput("empty body")
    return (loads_cbor if cbor else loads_json)(body, max_depth=max_depth, max_items=max_items)


# --- batches -------------------------------------------------------------------


def loads_member_array(body: bytes, *, cbor: bool, key: str, max_elements: int, max_items: int,
                       max_element_items: int = MAX_DOCUMENT_ITEMS, max_depth: int = DEFAULT_MAX_DEPTH) -> list:
    """The elements of a body that must be exactly `{key: [element, ...]}`.

    The envelope is read by hand, the array scanned once within `max_items` (and
    each element within `max_element_items`), then decoded `GROUP_ITEMS` at a time:
    a 16 MiB batch never becomes one decoder call that holds the interpreter.
    More than `max_elements` elements is TooLarge (413).
    """
    data = _as_bytes(body, "CBOR" if cbor else "JSON")
    shape = InvalidInput(f'body must be {{"{key}": [...]}}')
    if not data:
        raise InvalidInput("empty body")
    start = _cbor_envelope(data, key, shape) if cbor else _json_envelope(data, key, shape)
    try:
        s = scan(data, start, cbor=cbor, max_depth=max_depth - 1, max_items=max_items, split=True)
    except _Syntax:
        _decode_json(data)
        raise
    except InvalidInput as e:
        if e.message == _SCAN_ERRORS[14]:
            raise shape from None
        raise
    assert s.ends is not None and s.cum is not None
    if cbor:
        if s.end != len(data):
            raise InvalidInput(f"trailing bytes after the CBOR item ({len(data) - s.end} bytes)")
    elif not _json_close(data, s.end):
        raise shape
    count = len(s.ends)
    if count > max_elements:
        raise TooLarge(f"at most {max_elements} {key} per request")
    per = np.diff(s.cum, prepend=1) if count else s.cum  # items of each element (the array itself is 1)
    if count and int(per.max()) > max_element_items:
        i = int(per.argmax())
        raise TooLarge(f"{key}[{i}] has more than {max_element_items} items")
    starts = np.concatenate(([_first_element(data, start, cbor)], s.ends[:-1])) if count else s.ends
    out: list = []
    i = 0
    while i < count:  # groups of elements of about GROUP_ITEMS items
        j = max(i + 1, int(np.searchsorted(s.cum, s.cum[i] - per[i] + GROUP_ITEMS, side="right")))
        j = min(j, count)
        a, b = int(starts[i]), int(s.ends[j - 1])
        if cbor:
            group = _decode_cbor(_cbor_head_bytes(4, j - i) + data[a:b], max_depth - 2)
        else:
            group = _decode_json(b"[" + data[a:b].lstrip(b", \t\n\r") + b"]")
        if not isinstance(group, list) or len(group) != j - i:
            raise InvalidInput(f"malformed {key}")
        for k, value in enumerate(group):
            try:
                check_json_value(value, max_depth=max_depth - 2)
            except InvalidInput as e:
                raise InvalidInput(f"{key}[{i + k}]: {e.message}") from None
        out.extend(group)
        i = j
    return out


def _cbor_head_bytes(major: int, n: int) -> bytes:
    if n < 24:
        return bytes([major << 5 | n])
    for info, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * size):
            return bytes([major << 5 | info]) + n.to_bytes(size, "big")
    raise ValueError("too large")


def _cbor_envelope(data: bytes, key: str, shape: InvalidInput) -> int:
    """Position of the value of the one-key map `{key: ...}` at the start of `data`."""
    if data[0] >> 5 != 5:
        raise shape
    pos, count = _cbor_arg(data, 0, shape)
    if count != 1 or pos >= len(data) or data[pos] >> 5 != 3:
        raise shape
    text_at, length = _cbor_arg(data, pos, shape)
    if data[text_at:text_at + length] != key.encode():
        raise shape
    return text_at + length


def _cbor_arg(data: bytes, pos: int, shape: InvalidInput) -> tuple[int, int]:
    info = data[pos] & 0x1F
    if info < 24:
        return pos + 1, info
    if info > 27:
        raise shape
    size = 1 << (info - 24)
    if pos + 1 + size > len(data):
        raise InvalidInput("truncated CBOR")
    return pos + 1 + size, int.from_bytes(data[pos + 1:pos + 1 + size], "big")


_WS = b" \t\n\r"
_JSON_HEAD = re.compile(rb'[ \t\n\r]*\{[ \t\n\r]*("(?:[^"\\]|\\.){0,64}")[ \t\n\r]*:', re.DOTALL)


def _json_envelope(data: bytes, key: str, shape: InvalidInput) -> int:
    m = _JSON_HEAD.match(data)
    if m is None:
        raise shape
    if _decode_json(m.group(1)) != key:
        raise shape
    return m.end()


def _json_close(data: bytes, pos: int) -> bool:
    rest = data[pos:].strip(_WS)
    return rest == b"}"


def _first_element(data: bytes, array_at: int, cbor: bool) -> int:
    if cbor:
        return _cbor_arg(data, array_at, InvalidInput("malformed CBOR"))[0]
    return data.index(b"[", array_at) + 1
