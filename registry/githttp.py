"""Read-only Git smart HTTP over the registry's bare repository (dulwich server).

`GET /<name>.git/info/refs?service=git-upload-pack` and
`POST /<name>.git/git-upload-pack` are served by dulwich's `UploadPackHandler`
in stateless-RPC mode, so a real `git clone http://host:port/<name>.git` works.
`git-receive-pack` (push) is refused with 403: records enter only through the
validating API, which is what keeps the history add-only. The dumb protocol is
not served. Each request opens its own `Repo` in a worker thread: dulwich
objects are not shared across threads.

A pack is streamed as dulwich writes it: the worker thread hands each piece to
the connection and waits until the socket took it, so a clone of any size holds
about one piece in memory, and a client that stops reading is dropped after the
send timeout (which also stops the worker).
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from io import BytesIO
from pathlib import Path

from aiohttp import web
from dulwich.errors import GitProtocolError
from dulwich.protocol import ReceivableProtocol
from dulwich.repo import Repo
from dulwich.server import BackendRepo, DictBackend, UploadPackHandler

from tlog.errors import Forbidden, InvalidInput
from tlog.http.bodies import read_body
from tlog.http.sending import SEND_TIMEOUT, SEND_TIMEOUT_KEY, stream

from .store import ReadGate

PACKS_AT_ONCE = 2  # concurrent upload-pack responses (each holds a repository open and a CPU)
PIECE = 256 * 1024  # bytes of pack handed to the connection at a time

NO_CACHE = {"Cache-Control": "no-cache, max-age=0, must-revalidate", "Expires": "Fri, 01 Jan 1980 00:00:00 GMT",
            "Pragma": "no-cache"}
PUSH_REFUSED = ("this registry is read-only over Git: records are submitted through POST /v1/records, "
                "validated and anchored, never pushed")


class GitReadOnly:
    def __init__(self, repo_path: Path, *, max_body: int, gate: ReadGate) -> None:
        self.repo_path = str(repo_path)
        self.max_body = max_body
        self.gate = gate

    def _run(self, body: bytes, *, advertise: bool, write: Callable[[bytes], int | None] | None = None) -> bytes:
        """Answer one upload-pack request; the output goes to `write` as it is made (or is returned)."""
        repo = Repo(self.repo_path)
        try:
            out = BytesIO()
            proto = ReceivableProtocol(BytesIO(body).read, write or out.write)
            repos: dict[bytes, BackendRepo] = {b".": repo}
            # dulwich types the path argument as str; it is the repos key, bytes here
            handler = UploadPackHandler(DictBackend(repos), [b"."], proto,  # type: ignore[list-item]
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

    async def upload_pack(self, request: web.Request) -> web.StreamResponse:
        body = await read_body(request, self.max_body)
        async with self._packs, self.gate.read():
            return await self._stream_pack(request, body)

    async def _stream_pack(self, request: web.Request, body: bytes) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue(maxsize=2)
        timeout = request.app.get(SEND_TIMEOUT_KEY, SEND_TIMEOUT)
        pending = bytearray()

        def put(item: bytes | BaseException | None) -> None:  # worker thread: waits for room
            asyncio.run_coroutine_threadsafe(pieces.put(item), loop).result(timeout)

        def write(data: bytes) -> None:
            pending.extend(data)
            if len(pending) >= PIECE:
                put(bytes(pending))
                pending.clear()

        def produce() -> None:
            try:
                self._run(body, advertise=False, write=write)
                if pending:
                    put(bytes(pending))
                put(None)
            except BaseException as e:  # noqa: BLE001 - handed to the loop, which answers or drops
                try:
                    put(e)
                except BaseException:  # noqa: BLE001 - the connection is gone and nobody reads: just stop
                    pass

        worker = loop.run_in_executor(None, produce)
        first = await pieces.get()
        if isinstance(first, BaseException):
            await worker
            raise first  # a refused request (InvalidInput) is answered before anything was sent

        async def rest() -> AsyncIterator[bytes]:
            item: bytes | BaseException | None = first
            while item is not None:
                if isinstance(item, BaseException):
                    raise RuntimeError(f"git-upload-pack failed mid-pack: {item}") from item
                yield item
                item = await pieces.get()

        try:
            return await stream(request, rest(), content_type="application/x-git-upload-pack-result",
                                reserve=3 * PIECE, headers=NO_CACHE)
        finally:
            while not worker.done():  # unblock the worker if the answer was cut short
                try:
                    pieces.get_nowait()
                except asyncio.QueueEmpty:
                    await asyncio.sleep(0.01)
            await asyncio.gather(worker, return_exceptions=True)

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
