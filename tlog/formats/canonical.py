"""Canonical encodings: the one place the project turns values into signed or hashed bytes.

Two encodings, each with a single job:

- `jcs`: RFC 8785 JSON Canonicalization Scheme. OAP signs and hashes JSON
  objects in this form (OAP-CORE-1.0 §19.1 receipt hashes, §31 conformance
  receipt signatures), so every signer and verifier must produce the same bytes.
- `dcbor`: deterministic CBOR (RFC 8949 §4.2.1). Log entries are stored and
  hashed in this form (docs/architecture.md §3.1): `leaf_hash = SHA-256(0x00 || dcbor(entry))`,
  so a JSON and a CBOR submission of the same entry must become the same bytes.

Both are only defined on a small data model (`check_json_value`): maps with text
keys, arrays, text, integers, booleans and null. Floats are excluded because
they have no single deterministic form across JSON and CBOR; byte strings, tags
and `undefined` because JSON cannot carry them, so a CBOR submission using them
could never have a JSON twin with the same entry bytes.

The strict parsers that read untrusted bodies into this data model are in
`tlog.formats.strict`.
"""
from __future__ import annotations

import json
from typing import Any

import cbor2
import rfc8785

from tlog.errors import InvalidInput

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


Path = str | tuple  # "$", or (parent path, key or index): formatted only for a message


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
    with its length. tests/formats/test_canonical.py checks this.) The value is checked
    against the data model first, so nothing without a JSON twin gets encoded.
    """
    check_json_value(obj, max_depth=max_depth)
    return cbor2.dumps(obj, canonical=True)
