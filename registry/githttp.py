"""Read-only Git smart HTTP over the registry's bare repository (dulwich server).

`GET /<name>.git/info/refs?service=git-upload-pack` and
`POST /<name>.git/git-upload-pack` are served by dulwich's `UploadPackHandler`
in stateless-RPC mode, so a real `git clone http://host:port/<name>.git` works.
`git-receive-pack` (push) is refused with 403: records enter only through the
validating API, which is what keeps the history add-only. The dumb protocol is
not served. Each request opens its own `Repo` in a worker thread: dulwich
objects are not shared across threads.
"""
from __future__ import annotations

import asyncio
from io import BytesIO
from pathlib import Path

from aiohttp import web
from dulwich.errors import GitProtocolError
from dulwich.protocol import ReceivableProtocol
from dulwich.repo import Repo
from dulwich.server import DictBackend, UploadPackHandler

from tlog.errors import Forbidden, InvalidInput
from tlog.http import read_body

from .store import ReadGate

PACKS_AT_ONCE = 2  # concurrent upload-pack responses (each is built in memory)

NO_CACHE = {"Cache-Control": "no-cache, max-age=0, must-revalidate", "Expires": "Fri, 01 Jan 1980 00:00:00 GMT",
            "Pragma": "no-cache"}
PUSH_REFUSED = ("this registry is read-only over Git: records are submitted through POST /v1/records, "
                "validated and anchored, never pushed")


class GitReadOnly:
    def __init__(self, repo_path: Path, *, max_body: int, gate: ReadGate) -> None:
        self.repo_path = str(repo_path)
        self.max_body = max_body
        self.gate = gate

    def _run(self, body: bytes, *, advertise: bool) -> bytes:
        repo = Repo(self.repo_path)
        try:
            out = BytesIO()
            proto = ReceivableProtocol(BytesIO(body).read, out.write)
            handler = UploadPackHandler(DictBackend({b".": repo}), [b"."], proto,  # type: ignore[list-item]
                                        stateless_rpc=True, advertise_refs=advertise)
            if advertise:
                handler.proto.write_pkt_line(b"# service=git-upload-pack\n")
                handler.proto.write_pkt_line(None)
            try:
                handler.handle()
            except (GitProtocolError, KeyError, ValueError) as e:  # a malformed or impossible request
                raise InvalidInput(f"bad git-upload-pack request: {type(e).__name__}: {e}"[:300]) from None
            return out.getvalue()
        finally:
            repo.close()

    async def info_refs(self, request: web.Request) -> web.Response:
        service = request.query.get("service")
        if service == "git-receive-pack":
            raise Forbidden(PUSH_REFUSED)
        if service != "git-upload-pack":
            raise Forbidden("only the smart HTTP protocol (service=git-upload-pack) is served")
        async with self.gate.read():
            body = await asyncio.to_thread(self._run, b"", advertise=True)
        return web.Response(body=body, headers={**NO_CACHE,
                                                "Content-Type": "application/x-git-upload-pack-advertisement"})

    async def upload_pack(self, request: web.Request) -> web.Response:
        body = await read_body(request, self.max_body)
        # Each pack is built in memory: at most PACKS_AT_ONCE at a time keeps memory
        # bounded however many clients clone at once (the others wait their turn).
        async with self._packs, self.gate.read():
            out = await asyncio.to_thread(self._run, body, advertise=False)
        return web.Response(body=out, headers={**NO_CACHE, "Content-Type": "application/x-git-upload-pack-result"})

    async def receive_pack(self, request: web.Request) -> web.Response:
        raise Forbidden(PUSH_REFUSED)

    @property
    def _packs(self) -> asyncio.Semaphore:
        sem = getattr(self, "_packs_sem", None)
        if sem is None:
            sem = self._packs_sem = asyncio.Semaphore(PACKS_AT_ONCE)
        return sem

    def routes(self, app: web.Application, name: str) -> None:
        base = f"/{name}.git"
        app.router.add_get(f"{base}/info/refs", self.info_refs)
        app.router.add_post(f"{base}/git-upload-pack", self.upload_pack)
        app.router.add_post(f"{base}/git-receive-pack", self.receive_pack)
