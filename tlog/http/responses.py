"""Answers: the one encoder per format, and errors turned into responses in one place.

An `OAPError` becomes its status with `{"error": <App. B code>, "message": ...}`
(OAP-CORE-1.0 App. B) in the media type the request asked for, as every answer
(`error_answer`); aiohttp's own 4xx get OAP codes too (`_CODES`).
JSON answers are compact; CBOR answers deterministic (RFC 8949 §4.2.1).
"""
from __future__ import annotations

import json
import logging
import re
from functools import lru_cache
from typing import Any

import cbor2
from aiohttp import web

from tlog.errors import OAPError
from tlog.http.reply import Reply

log = logging.getLogger("oap.http")

JSON_TYPES = ("application/oap+json", "application/json")

CBOR_TYPES = ("application/oap+cbor", "application/cbor")

# App. B codes for aiohttp's own refusals; statuses App. B has no row for (405, 408,
# 411, 413-415, 431) take the code of input that cannot be served as sent.
_CODES = {400: "invalid_input", 401: "auth_required", 403: "policy_block", 404: "not_found",
          405: "invalid_input", 408: "invalid_input", 409: "conflict", 411: "invalid_input", 413: "invalid_input",
          414: "invalid_input", 415: "invalid_input", 429: "rate_limited", 431: "invalid_input",
          502: "upstream_error", 503: "maintenance", 504: "timeout"}



def error_answer(status: int, code: str, message: str, extra: dict[str, Any], accept: str) -> Reply:
    """The one error answer of every service: `{"error": <App. B code>, "message": ...}` in
    the media type the client asked for (OAP-CORE-1.0 App. D: application/oap+json, or
    application/oap+cbor; application/json when it asked for neither), like any answer."""
    body, ctype = encode_document({"error": code, "message": message, **extra}, accepts_cbor(accept), accept)
    headers = [("Content-Type", ctype), ("Vary", "Accept")]
    if status in (429, 503) and "retry_after" in extra:
        headers.append(("Retry-After", str(extra["retry_after"])))
    return Reply(body, tuple(headers), status)


def error_response(request: web.Request, status: int, code: str, message: str, **extra: Any) -> web.Response:
    """`error_answer` for an aiohttp request (the error middleware's answers)."""
    return error_answer(status, code, message, extra, request.headers.get("Accept", "")).response()


def error_reply(exc: BaseException, accept: str = "") -> tuple[int, Reply]:
    """The answer the error middleware gives for `exc`, for the fast path's POSTs."""
    if isinstance(exc, OAPError):
        reply = error_answer(exc.status, exc.code, exc.message, exc.data, accept)
    else:
        log.error("unhandled error on the fast path", exc_info=exc)
        reply = error_answer(500, "internal_error", "internal error", {}, accept)
    return reply.status, reply


JSON, OAP_JSON, CBOR = 0, 1, 2
"""The answer formats, as `reply_format` picks them from Accept."""
CONTENT_TYPES = ("application/json", "application/oap+json", "application/oap+cbor")

_NAMES = (("application/json",), ("application/oap+json",), CBOR_TYPES)
"""The media types that ask for each format: application/cbor is answered as OAP's CBOR."""

_RANGE = re.compile(r"([!#$%&'*+\-.^_`|~0-9a-z]+)/([!#$%&'*+\-.^_`|~0-9a-z]+)", re.ASCII)
_QVALUE = re.compile(r"q=(0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?)", re.ASCII)
_MAX_RANGES = 64  # a longer Accept is read as far as this: no client lists more


_ALL = (JSON, OAP_JSON, CBOR)
_JSONS = (JSON, OAP_JSON)


def reply_format(accept: str, offered: tuple[int, ...] = _ALL) -> int:
    """The format an Accept header asks for among `offered` (`_negotiate`): the common short
    headers are remembered, as the fast path asks on every request."""
    return _cached_format(accept, offered) if len(accept) <= 200 else _negotiate(accept, offered)


def _negotiate(accept: str, offered: tuple[int, ...] = _ALL) -> int:
    """The format an Accept header asks for (RFC 9110 §12.5.1): each format takes the
    q-value of the most specific media range that matches one of its types (exact, then
    type/*, then */*; case-insensitive; parameters other than q ignored), q=0 is "not
    acceptable", and the highest q wins. At equal q an exact range wins over a wildcard;
    among exact ones CBOR, then application/oap+json (a client that names them wants them),
    among wildcards application/json. No Accept, an empty one, or one nothing offered
    satisfies gets application/json (§12.5.1 lets a server disregard the header, and an
    error must still be readable)."""
    if not accept:
        return JSON
    ranges: list[tuple[str, str, float]] = []
    for item in accept.lower().split(",", _MAX_RANGES)[:_MAX_RANGES]:
        media, *params = item.split(";")
        m = _RANGE.fullmatch(media.strip())
        if m is None or (m.group(1) == "*" and m.group(2) != "*"):
            continue  # not a media range: ignored, as a malformed element
        q = 1.0
        for param in params:
            param = param.strip()
            if param.startswith("q="):
                qm = _QVALUE.fullmatch(param)
                q = float(qm.group(1)) if qm else -1.0
                break  # parameters after q are accept-ext, not the range's
        if q >= 0:
            ranges.append((m.group(1), m.group(2), q))
    best, best_key = JSON, (0.0, 0, 0)
    for fmt, names in enumerate(_NAMES):
        if fmt not in offered:
            continue
        for name in names:
            kind, sub = name.split("/")
            match = max(((3 if (t, st) == (kind, sub) else 2 if (t == kind and st == "*") else 1, q)
                         for t, st, q in ranges if (t, st) in ((kind, sub), (kind, "*"), ("*", "*"))), default=None)
            if match is None or match[1] <= 0:
                continue
            specificity, q = match
            key = (q, specificity, fmt if specificity == 3 else -fmt)
            if key > best_key:
                best, best_key = fmt, key
    return best


_cached_format = lru_cache(maxsize=256)(_negotiate)


def json_type(accept: str) -> str:
    """application/oap+json to a client that asked for it (App. D), else application/json."""
    return CONTENT_TYPES[OAP_JSON] if reply_format(accept, _JSONS) == OAP_JSON else CONTENT_TYPES[JSON]


def encode_document(obj: Any, cbor: bool, accept: str = "") -> tuple[bytes, str]:
    """(body, Content-Type): JSON by default, deterministic CBOR on request."""
    if cbor:
        return cbor2.dumps(obj, canonical=True), "application/oap+cbor"
    return json.dumps(obj, separators=(",", ":")).encode(), json_type(accept)


def wants_cbor(request: web.Request) -> bool:
    return accepts_cbor(request.headers.get("Accept", ""))


def accepts_cbor(accept: str) -> bool:
    return reply_format(accept) == CBOR


def respond(request: web.Request, obj: Any, *, status: int = 200,
            headers: dict[str, str] | None = None) -> web.Response:
    """JSON by default; CBOR when the client asks for application/oap+cbor. The answer's
    type follows Accept, so caches key on it."""
    accept = request.headers.get("Accept", "")
    body, ctype = encode_document(obj, accepts_cbor(accept), accept)
    resp = web.Response(body=body, status=status, content_type=ctype, headers=headers)
    resp.headers["Vary"] = "Accept"
    return resp
