"""Where a monitor's alerts go, for real, on 127.0.0.1: a webhook receiver (aiohttp) that can be
taken down and brought back, and an SMTP server (aiosmtpd). Each runs in its own thread with
its own event loop, so that a test can start `oap-monitor` processes and wait for what arrives."""
from __future__ import annotations

import asyncio
import email
import json
import socket
import threading
from typing import Any

from aiohttp import web


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThreadedApp:
    """An aiohttp application on 127.0.0.1 (a free port) in its own thread and event loop, so
    that a test can run processes against it and look at what it saw. Subclasses add routes."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: self.loop.run_until_complete(self._serve()), daemon=True)
        self.port = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def __enter__(self):
        self._thread.start()
        assert self._ready.wait(30), f"{type(self).__name__} did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        app = web.Application()
        self.routes(app)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self.port = runner.addresses[0][1]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()


class WebhookReceiver(ThreadedApp):
    """POSTed alert documents, in arrival order. `down = True` answers 503 (a sink that is down:
    the monitor must keep the alert and try again); every request is counted either way."""

    def __init__(self) -> None:
        super().__init__()
        self.received: list[dict[str, Any]] = []
        self.refused = 0
        self.down = False
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"{self.base}/hook"

    def routes(self, app: web.Application) -> None:
        async def hook(request: web.Request) -> web.Response:
            body = await request.read()
            with self._lock:
                if self.down:
                    self.refused += 1
                    return web.Response(status=503, text="down for maintenance")
                self.received.append(json.loads(body))
                self.headers.append(dict(request.headers))
            return web.Response(text="ok")

        app.router.add_post("/hook", hook)

    def ids(self) -> list[str]:
        with self._lock:
            return [d["id"] for d in self.received]


class SMTPReceiver:
    """An SMTP server (aiosmtpd) on 127.0.0.1 keeping every message it accepts."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.messages: list[email.message.Message] = []
        self.port = free_port()
        receiver = self

        class Handler:
            async def handle_DATA(self, server, session, envelope) -> str:
                receiver.messages.append(email.message_from_bytes(envelope.content))
                return "250 OK"

        self._controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> SMTPReceiver:
        self._controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._controller.stop()

    def alerts(self) -> list[dict[str, Any]]:
        """The alert document of each message (its body after the summary)."""
        out = []
        for m in self.messages:
            body = m.get_payload(decode=True).decode()
            out.append(json.loads(body[body.index("{"):]))
        return out

