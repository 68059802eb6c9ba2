"""Canonical encodings: the one place the project turns values into signed or hashed bytes.

Two encodings, each with a single job:

- `jcs`: RFC 8785 JSON Canonicalization Scheme. OAP signs and hashes JSON
  objects in this form (OAP-CORE-1.0 §19.1 receipt hashes, §31 conformance
  receipt signatures), so every signer and verifier must produce the same bytes.
- `dcbor`: deterministic CBOR (RFC 8949 §4.2.1). Log entries are stored and
  hashed in this form (DESIGN §3.1): `leaf_hash = SHA-256(0x00 || dcbor(entry))`,
  so a JSON and a CBOR submission of the same entry must become the same bytes.

Both are only defined on a small data model (`check_json_value`): maps with text
keys, arrays, text, integers, booleans and null. Floats are excluded because
they have no single deterministic form across JSON and CBOR; byte strings, tags
and `undefined` because JSON cannot carry them, so a CBOR submission using them
could never have a JSON twin with the same entry bytes.

The strict parsers (`loads_json`, `loads_cbor`) read untrusted request bodies
(`application/oap+json`, `application/oap+cbor`, OAP-CORE-1.0 App. D). Whatever
the input, they return a value of the data model or raise `InvalidInput`
(HTTP 400, App. B `invalid_input`) — never another exception, which the
service would have to turn into a 500.
"""
from __future__ import annotations

import json
from typing import Any, NoReturn, Union

import cbor2
import rfc8785

from .errors import InvalidInput

DEFAULT_MAX_DEPTH = 16
"""Containers nested deeper than this are refused: no OAP entry needs more, and
a cap keeps recursive decoders and validators away from Python's stack limit."""

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
"""Integers must fit a signed 64-bit integer, the range every CBOR and JSON
implementation we interoperate with handles. (JCS-signed objects are further
limited by RFC 8785 to ±(2**53 - 1); `jcs` reports that as InvalidInput.)"""


# --- the data model ------------------------------------------------------------


def check_json_value(obj: object, *, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
    """Raise InvalidInput unless `obj` is in the entry data model.

    Allowed: `dict` with `str` keys, `list`, `str` (valid Unicode, i.e. no lone
    surrogates, so it has a UTF-8 form), `int` within [INT_MIN, INT_MAX],
    `bool`, `None`; at most `max_depth` nested containers. Everything else —
    floats, bytes, tuples, sets, CBOR tags, `undefined` — is refused, because
    it would not have one deterministic encoding in both JSON and CBOR (§3.1).
    """
    _check(obj, max_depth, "$")


Path = Union[str, tuple]  # "$", or (parent path, key or index): formatted only for a message


def _where(path: Path) -> str:
    parts = []
    while isinstance(path, tuple):
        path, k = path
        parts.append(f"[{k}]" if isinstance(k, int) else f".{k}")
    return path + "".join(reversed(parts))


def _check(obj: object, depth_left: int, path: Path) -> None:
    # Paths are built as tuples and formatted only for the error message; lists of
    # plain ints or strings (index batches, string arrays) are checked by C-level passes.
    if obj is None or isinstance(obj, bool):
        return
    if isinstance(obj, str):
        _check_text(obj, path)
        return
    if isinstance(obj, int):
        if not INT_MIN <= obj <= INT_MAX:
            raise InvalidInput(f"{_where(path)}: integer out of the signed 64-bit range")
        return
    if isinstance(obj, (dict, list)):
        if depth_left <= 0:
            raise InvalidInput(f"{_where(path)}: nested deeper than allowed")
        if isinstance(obj, dict):
            for key, value in obj.items():
                if not isinstance(key, str):
                    raise InvalidInput(f"{_where(path)}: map keys must be text strings")
                _check_text(key, path)
                if value is None or type(value) in _PLAIN_SCALARS:
                    if type(value) is int and not INT_MIN <= value <= INT_MAX:
                        raise InvalidInput(f"{_where((path, key))}: integer out of the signed 64-bit range")
                    if type(value) is str:
                        _check_text(value, (path, key))
                    continue
                _check(value, depth_left - 1, (path, key))
        elif obj:
            kinds = set(map(type, obj))
            if kinds == {int}:
                if min(obj) < INT_MIN or max(obj) > INT_MAX:
                    raise InvalidInput(f"{_where(path)}: integer out of the signed 64-bit range")
                return
            if kinds == {str}:
                try:
                    "".join(obj).encode("utf-8")
                    return
                except UnicodeEncodeError:
                    pass  # find and name the bad one below
            for i, value in enumerate(obj):
                _check(value, depth_left - 1, (path, i))
        return
    where = _where(path)
    if isinstance(obj, float):
        raise InvalidInput(f"{where}: floating-point numbers are not allowed")
    if isinstance(obj, (bytes, bytearray, memoryview)):
        raise InvalidInput(f"{where}: byte strings are not allowed")
    if isinstance(obj, cbor2.CBORTag):
        raise InvalidInput(f"{where}: CBOR tags are not allowed")
    raise InvalidInput(f"{where}: values of type {type(obj).__name__} are not allowed")


_PLAIN_SCALARS = (str, int, bool)  # exact types: subclasses take the full path


def _check_text(text: str, path: Path) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{_where(path)}: text is not valid Unicode (lone surrogate)") from None


# --- encoders ------------------------------------------------------------------


def jcs(obj: Any) -> bytes:
    """RFC 8785 canonical JSON of `obj` (via the `rfc8785` package).

    This is a general JCS encoder (it accepts what RFC 8785 accepts, floats
    included), because OAP receipts hashed by clients (§19.1) are arbitrary
    JSON. Values JCS cannot represent — integers beyond ±(2**53 - 1), lone
    surrogates, non-JSON types — raise InvalidInput, since they always come
    from a submitted object.
    """
    if _jcs_plain(obj, DEFAULT_MAX_DEPTH):
        try:
            return json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            pass  # a lone surrogate: rfc8785 words the refusal
    try:
        return rfc8785.dumps(obj)
    except rfc8785.IntegerDomainError:
        raise InvalidInput("integer outside the RFC 8785 (I-JSON) range ±(2**53 - 1)") from None
    except rfc8785.CanonicalizationError as e:
        raise InvalidInput(f"value has no RFC 8785 canonical form: {e}") from None
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidInput(f"value has no RFC 8785 canonical form: {e}") from None


_JCS_INT = 2**53 - 1


def _jcs_plain(obj: Any, depth: int) -> bool:
    """True when json.dumps(sort_keys=True) writes exactly RFC 8785's bytes for `obj`.

    That holds for dicts with ASCII keys (code-point order is then UTF-16 order),
    lists, strings (both escape the same characters, the same way), I-JSON
    integers, bools and None. Floats (ES6 number formatting) and anything else
    go to rfc8785. rfc8785 is pure Python at ~50 us per small object; signed
    status responses and registry records are JCS-encoded on every request.
    """
    if depth < 0:
        return False
    t = type(obj)
    if t is str or t is bool or obj is None:
        return True
    if t is int:
        return -_JCS_INT <= obj <= _JCS_INT
    if t is dict:
        for k, v in obj.items():
            if type(k) is not str or not k.isascii():
                return False
            tv = type(v)
            if tv is str or tv is bool or v is None:
                continue
            if not _jcs_plain(v, depth - 1):
                return False
        return True
    if t is list:
        return all(_jcs_plain(v, depth - 1) for v in obj)
    return False


def dcbor(obj: Any, *, max_depth: int = DEFAULT_MAX_DEPTH) -> bytes:
    """Deterministic CBOR (RFC 8949 §4.2.1) of a value of the data model.

    cbor2's `canonical=True` gives the core deterministic rules: integers and
    lengths in their shortest form, definite lengths only, and map keys sorted
    by the bytewise order of their encodings. (cbor2 sorts length-first, the
    RFC 7049 rule; for keys that are all text strings — the only keys the data
    model allows — that is the same order, because a text string's header grows
    with its length. tests/test_canonical.py checks this.) The value is checked
    against the data model first, so nothing without a JSON twin gets encoded.
    """
    check_json_value(obj, max_depth=max_depth)
    return cbor2.dumps(obj, canonical=True)


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


def loads_json(body: bytes, *, max_depth: int = DEFAULT_MAX_DEPTH) -> object:
    """Parse an `application/oap+json` body strictly; raise only InvalidInput.

    Refused: non-UTF-8 bytes (no UTF-16/32 sniffing, no BOM), duplicate object
    keys (RFC 8259 leaves their meaning open, so two parsers could disagree on
    what was signed), NaN/Infinity, any number with a fraction or exponent, and
    nesting deeper than `max_depth` (checked on the parsed value: brackets inside strings
    do not count). The result is checked by `check_json_value`.
    """
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise InvalidInput("JSON body must be bytes")
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("JSON body is not valid UTF-8") from None
    try:
        value = json.loads(
            text,
            parse_float=_reject_float,
            # Integers are parsed in C; Python's int_max_str_digits (4300) bounds the cost of a
            # huge literal, and check_json_value below refuses anything outside 64 bits.
            parse_constant=_reject_constant,
            object_pairs_hook=_object_no_duplicates,
        )
    except InvalidInput:
        raise
    except RecursionError:
        # The C scanner counts its nesting against the recursion limit (~1,000 levels, a
        # few hundred KiB of C stack even on a worker thread's) and stops there; anything
        # deeper than max_depth but shallower is refused by check_json_value below.
        raise InvalidInput(f"JSON nested deeper than {max_depth} levels") from None
    except ValueError as e:  # JSONDecodeError is a ValueError
        if "integer string conversion" in str(e):  # past int_max_str_digits: far past 64 bits
            raise InvalidInput("integer out of the signed 64-bit range") from None
        raise InvalidInput(f"malformed JSON: {e}") from None
    check_json_value(value, max_depth=max_depth)
    return value


# --- strict CBOR ---------------------------------------------------------------


def loads_cbor(body: bytes, *, max_depth: int = DEFAULT_MAX_DEPTH) -> object:
    """Parse an `application/oap+cbor` body strictly; raise only InvalidInput.

    A structural pre-scan (`_scan_cbor`) admits only the data model's major
    types with definite lengths, no tags, no byte strings, no floats, no simple
    values but false/true/null, text map keys only, bounded depth, and no
    trailing bytes (cbor2 would silently ignore them, so two different bodies
    would decode to the same entry). Lengths are checked against the bytes
    actually present, so a forged header cannot make the decoder allocate.
    cbor2 then decodes with duplicate keys refused. Non-shortest integer or
    length encodings are accepted: the server re-encodes with `dcbor` anyway.
    """
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise InvalidInput("CBOR body must be bytes")
    data = bytes(body)
    if not data:
        raise InvalidInput("empty CBOR body")
    end = _scan_cbor(data, 0, max_depth)
    if end != len(data):
        raise InvalidInput(f"trailing bytes after the CBOR item ({len(data) - end} bytes)")
    try:
        value = cbor2.loads(
            data,
            allow_indefinite=False,
            allow_duplicate_keys=False,
            strict_hashable_types=True,
            max_depth=max_depth + 4,
        )
    except cbor2.CBORDecodeError as e:
        raise InvalidInput(f"malformed CBOR: {e}") from None
    except (ValueError, TypeError, UnicodeDecodeError, RecursionError) as e:
        raise InvalidInput(f"malformed CBOR: {e}") from None
    check_json_value(value, max_depth=max_depth)
    return value


def _cbor_head(data: bytes, pos: int) -> tuple[int, int, int]:
    """Read one CBOR head at `pos` -> (major type, argument, next position)."""
    if pos >= len(data):
        raise InvalidInput("truncated CBOR")
    initial = data[pos]
    major, info = initial >> 5, initial & 0x1F
    pos += 1
    if info < 24:
        return major, info, pos
    if info == 31:
        if major == 7:
            raise InvalidInput("malformed CBOR: unexpected break")
        raise InvalidInput("indefinite-length CBOR items are not allowed")
    if info > 27:
        raise InvalidInput("malformed CBOR: reserved additional information")
    size = 1 << (info - 24)
    if pos + size > len(data):
        raise InvalidInput("truncated CBOR")
    return major, int.from_bytes(data[pos : pos + size], "big"), pos + size


def _scan_cbor(data: bytes, pos: int, depth_left: int) -> int:
    """Check one CBOR data item at `pos` against the data model; return its end."""
    start = pos
    major, arg, pos = _cbor_head(data, pos)
    if major in (0, 1):
        return pos
    if major == 3:
        if arg > len(data) - pos:
            raise InvalidInput("truncated CBOR text string")
        return pos + arg
    if major in (4, 5):
        if depth_left <= 0:
            raise InvalidInput("CBOR nested too deeply")
        items = arg * 2 if major == 5 else arg
        if items > len(data) - pos:  # every item takes at least one byte
            raise InvalidInput("truncated CBOR container")
        for i in range(items):
            if major == 5 and i % 2 == 0 and pos < len(data) and data[pos] >> 5 != 3:
                raise InvalidInput("CBOR map keys must be text strings")
            pos = _scan_cbor(data, pos, depth_left - 1)
        return pos
    if major == 2:
        raise InvalidInput("CBOR byte strings are not allowed")
    if major == 6:
        raise InvalidInput("CBOR tags are not allowed")
    # major 7: only false (20), true (21), null (22) in their one-byte form
    if data[start] in (0xF4, 0xF5, 0xF6):
        return pos
    if data[start] in (0xF9, 0xFA, 0xFB):
        raise InvalidInput("floating-point numbers are not allowed")
    if data[start] == 0xF7:
        raise InvalidInput("CBOR undefined is not allowed")
    raise InvalidInput("CBOR simple values other than false/true/null are not allowed")
