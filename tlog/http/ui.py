"""Serving the explorer (`tlog/ui/static`) under /ui/, and CORS on public reads.

The files are package data, read once; each answer carries a strict Content-Security-
Policy (scripts and styles from this origin only, no inline code, no eval; network
reads to any origin, since a page may point at another service with `?log=`), and
`nosniff`. GET answers of the API carry `Access-Control-Allow-Origin: *` so that the
same pages work from a static host or a CDN that points at a service's URL; writes get
no CORS headers (browsers then refuse cross-origin writes).

`/ui/trust.policy` is the operator's pin (`ui_trust_policy`): a tlog-policy the pages
verify against, as a static host ships one beside the files. It is worth exactly as much
as the page's own code, which comes from the same server; users pin their own in the page.
"""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from aiohttp import web

from tlog.errors import NotFound
from tlog.runtime.config import read_ui_trust_policy

__all__ = ["CORS", "CSP", "add_ui"]

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src *; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'; "
       "require-trusted-types-for 'script'; trusted-types 'none'")
CORS = ("Access-Control-Allow-Origin", "*")
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}


def _load() -> dict[str, bytes]:
    root = files("tlog.ui").joinpath("static")
    out: dict[str, bytes] = {}
    stack = [("", root)]
    while stack:
        prefix, node = stack.pop()
        for child in node.iterdir():
            name = prefix + child.name
            if child.is_dir():
                stack.append((name + "/", child))
            elif any(name.endswith(ext) for ext in _TYPES):
                out[name] = child.read_bytes()
    return out


_FILES: dict[str, bytes] | None = None


def _files() -> dict[str, bytes]:
    global _FILES
    if _FILES is None:
        _FILES = _load()
    return _FILES


def _answer(name: str) -> web.Response:
    body = _files().get(name)
    if body is None:
        raise NotFound(f"no explorer file /ui/{name}")
    ext = name[name.rfind("."):]
    return web.Response(body=body, headers={
        "Content-Type": _TYPES[ext], "Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"})


async def _index(request: web.Request) -> web.Response:
    return _answer("index.html")


async def _static(request: web.Request) -> web.Response:
    return _answer(request.match_info["name"])


async def _to_index(request: web.Request) -> web.Response:
    raise web.HTTPFound("/ui/")


def _trust_policy(text: str | None):
    async def handler(request: web.Request) -> web.Response:
        if text is None:  # nothing shipped: the pages verify against what their users pin
            return web.Response(status=204, headers={"Cache-Control": "no-cache"})
        return web.Response(text=text, headers={
            "Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff",
            "Cache-Control": "no-cache"})
    return handler


async def _cors(request: web.Request, response: web.StreamResponse) -> None:
    if request.method in ("GET", "HEAD") and not request.path.startswith("/ui"):
        response.headers.setdefault(*CORS)


def add_ui(app: web.Application, trust_policy: Path | None = None) -> None:
    """/ui/ and its files (with the operator's `trust_policy`, if any), and CORS on the
    service's GET answers."""
    text = read_ui_trust_policy(trust_policy) if trust_policy is not None else None
    app.router.add_get("/ui", _to_index)
    app.router.add_get("/ui/", _index)
    app.router.add_get("/ui/trust.policy", _trust_policy(text))
    app.router.add_get("/ui/{name:[A-Za-z0-9_-]+(/[A-Za-z0-9_-]+)*\\.[a-z]+}", _static)
    app.on_response_prepare.append(_cors)
