"""Answers: the one encoder per format, and errors turned into responses in one place.

An `OAPError` becomes its status with `{"error": <App. B code>, "message": ...}`
(OAP-CORE-1.0 App. B) in the media type the request asked for, as every answer
(`error_answer`); aiohttp's own 4xx get OAP codes too (`_CODES`).
JSON answers are compact; CBOR answers deterministic (RFC 8949 §4.2.1).
"""
from __future__ import annotations

import json
import logging
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


def reply_format(accept: str) -> int:
    return CBOR if accepts_cbor(accept) else OAP_JSON if "application/oap+json" in accept else JSON


def json_type(accept: str) -> str:
    """application/oap+json to a client that asked for it (App. D), else application/json."""
    return "application/oap+json" if "application/oap+json" in accept else "application/json"


def encode_document(obj: Any, cbor: bool, accept: str = "") -> tuple[bytes, str]:
    """(body, Content-Type): JSON by default, deterministic CBOR on request."""
    if cbor:
        return cbor2.dumps(obj, canonical=True), "application/oap+cbor"
    return json.dumps(obj, separators=(",", ":")).encode(), json_type(accept)


def wants_cbor(request: web.Request) -> bool:
    return accepts_cbor(request.headers.get("Accept", ""))


def accepts_cbor(accept: str) -> bool:
    return bool(accept) and any(t in accept for t in CBOR_TYPES)


def respond(request: web.Request, obj: Any, *, status: int = 200,
            headers: dict[str, str] | None = None) -> web.Response:
    """JSON by default; CBOR when the client asks for application/oap+cbor. The answer's
    type follows Accept, so caches key on it."""
    accept = request.headers.get("Accept", "")
    body, ctype = encode_document(obj, accepts_cbor(accept), accept)
    resp = web.Response(body=body, status=status, content_type=ctype, headers=headers)
    resp.headers["Vary"] = "Accept"
    return resp
