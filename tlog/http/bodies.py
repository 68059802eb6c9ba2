"""Bodies: requests read within a cap and a timeout, decoded by the strict, bounded parsers
(`tlog.formats.strict`), off the event loop when large. (The answers our services read from
other services are read within a cap by `tlog.transport.read_capped`.)"""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from tlog.errors import InvalidInput, RequestTimeout, TooLarge, UnsupportedMediaType
from tlog.formats.canonical import DEFAULT_MAX_DEPTH
from tlog.formats.encoding import MAX_INT63, parse_decimal
from tlog.formats.strict import MAX_DOCUMENT_ITEMS, loads
from tlog.http.responses import CBOR_TYPES, JSON_TYPES

READ_TIMEOUT = 30.0

READ_TIMEOUT_KEY = web.AppKey("read_timeout", float)

LARGE_BODY = 64 * 1024

LARGE_BODIES_KEY = web.AppKey("large_bodies", asyncio.Semaphore)

SMALL_BODY = 4096
"""Bodies up to this size are decoded on the event loop (tens of microseconds); larger
ones on the CPU pool, a bounded group of items per decoder call (`tlog.formats.strict`)."""

_cpu: ThreadPoolExecutor | None = None


async def offload(fn, *args):
    """Run CPU-heavy request work (decoding a large body, checking thousands of
    signatures) on a small thread pool, not on the event loop. The pool is made on
    first use: importing this module starts nothing."""
    global _cpu
    if _cpu is None:
        _cpu = ThreadPoolExecutor(max_workers=2, thread_name_prefix="oap-cpu")
    return await asyncio.get_running_loop().run_in_executor(_cpu, fn, *args)


def large_body_limit(app: web.Application, concurrent: int = 4) -> None:
    """At most `concurrent` bodies over 64 KiB are read and parsed at once (memory bound)."""
    app[LARGE_BODIES_KEY] = asyncio.Semaphore(concurrent)


DECODED_ENCODINGS = ("identity", "gzip", "deflate")
"""The Content-Encodings a body may have: aiohttp decodes gzip and deflate before a handler
reads a byte (and refuses br and zstd itself, without their libraries)."""


def content_encoding(request: web.Request) -> str:
    """The body's Content-Encoding, one of DECODED_ENCODINGS; 415 for any other (aiohttp
    passes a coding it does not know through as if it were the body itself)."""
    codings = request.headers.getall("Content-Encoding", [])
    enc = ", ".join(codings).strip().lower() or "identity"
    if enc not in DECODED_ENCODINGS:
        raise UnsupportedMediaType(f"Content-Encoding {enc[:40]!r} is not supported: send the body as "
                                   f"{', '.join(DECODED_ENCODINGS)}")
    return enc


def payload_error(request: web.Request, e: Exception) -> InvalidInput:
    """What a body that could not be read (aiohttp's RequestPayloadError) was: a broken
    compressed stream names its encoding."""
    enc = content_encoding(request)
    if enc != "identity":
        return InvalidInput(f"the body is not valid {enc} (Content-Encoding: {enc})")
    return InvalidInput(f"the body could not be read: {str(e).strip()[:200]}")


async def read_body(request: web.Request, cap: int, timeout: float | None = None) -> bytes:
    """The request body: 415 for a Content-Encoding not decoded here, 413 as soon as it
    exceeds `cap` bytes, 408 if it is slower than `timeout` seconds (default: the app's
    "read_timeout" or 30 s), 400 for a compressed stream that does not decode."""
    content_encoding(request)
    if request.content_length is not None and request.content_length > cap:
        raise TooLarge(f"request body over {cap} bytes")
    if timeout is None:
        timeout = request.app.get(READ_TIMEOUT_KEY, READ_TIMEOUT)
    chunks, total = [], 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.content.iter_chunked(65536):
                total += len(chunk)
                if total > cap:
                    raise TooLarge(f"request body over {cap} bytes")
                chunks.append(chunk)
    except TimeoutError:
        raise RequestTimeout(f"request body not received within {timeout:g} s") from None
    except web.RequestPayloadError as e:
        raise payload_error(request, e) from None
    return b"".join(chunks)


_BODY_TYPES = JSON_TYPES + CBOR_TYPES


def _media(content_type: str) -> str:
    return content_type.split(";")[0].strip().lower()


def body_is_cbor(content_type: str | None) -> bool:
    """True for CBOR, False for JSON; 415 for anything else (checked before the body is read)."""
    media = _media(content_type or "")
    if media not in _BODY_TYPES:
        raise UnsupportedMediaType(f"Content-Type must be one of {', '.join(_BODY_TYPES)}, not {media or 'none'!r}")
    return media in CBOR_TYPES


async def read_bounded(request: web.Request, cap: int) -> bytes:
    """The body within `cap` (`read_body`), read under the app's large-body semaphore when
    it may exceed 64 KiB."""
    sem = request.app.get(LARGE_BODIES_KEY)
    if sem is not None and cap > LARGE_BODY and (request.content_length or LARGE_BODY + 1) > LARGE_BODY:
        async with sem:
            return await read_body(request, cap)
    return await read_body(request, cap)


async def read_document(request: web.Request, cap: int, *, max_items: int = MAX_DOCUMENT_ITEMS,
                        max_depth: int = DEFAULT_MAX_DEPTH) -> object:
    """Decode a JSON or CBOR body (by Content-Type) with the strict, bounded parsers.

    The media type is checked before a byte is read; the decode runs off the loop
    for bodies over SMALL_BODY.
    """
    cbor = body_is_cbor(request.headers.get("Content-Type"))
    body = await read_bounded(request, cap)
    return await decode(body, cbor=cbor, max_items=max_items, max_depth=max_depth)


async def decode(body: bytes, *, cbor: bool, max_items: int = MAX_DOCUMENT_ITEMS,
                 max_depth: int = DEFAULT_MAX_DEPTH) -> object:
    """`tlog.formats.strict.loads` on the loop for a small body, on the CPU pool otherwise."""
    if len(body) <= SMALL_BODY:
        return loads(body, cbor=cbor, max_items=max_items, max_depth=max_depth)
    return await offload(lambda: loads(body, cbor=cbor, max_items=max_items, max_depth=max_depth))


# --- sending: bounded memory per connection and in all ---------------------------------


def query_int(request: web.Request, name: str, *, default: int | None = None, minimum: int = 0,
              maximum: int = MAX_INT63) -> int:
    """An integer query parameter, spelled as `parse_decimal` takes it (400 otherwise), and
    never more than storage holds: every route reads its numbers here."""
    raw = request.query.get(name)
    if raw is None:
        if default is None:
            raise InvalidInput(f"query parameter {name!r} is required")
        return default
    return parse_decimal(raw, name, minimum=minimum, maximum=maximum)
