"""Delivering alerts: a queue in the state directory, tried with backoff until each sink has each alert.

Every alert gets a delivery row per sink (and, for a hooks directory, per executable in it)
in the same transaction that raises it, so an alert survives a sink that is down and a
restart of the monitor. One worker per sink sends that sink's due deliveries in the order
the alerts were raised; a failure is tried again after 1, 2, 4, ... seconds, at most
`retry_max_seconds` apart, for as long as it takes. A delivery is marked done once the sink
took it:

- **webhook**: a JSON POST of the alert document (`Content-Type: application/json`,
  `Idempotency-Key: <alert id>`), done on any 2xx answer;
- **hooks_dir**: each executable file of the directory is run with the document on its
  standard input and `OAP_ALERT_ID`, `OAP_ALERT_KIND`, `OAP_ALERT_SUMMARY` and
  `OAP_ALERT_FILE` (the evidence file, if any) in its environment; done when it exits 0
  within the timeout;
- **email**: one message per alert through the configured SMTP server (STARTTLS or TLS by
  default), subject `[oap-monitor] <kind>: <summary>`, the document as the body,
  `Message-ID: <alert id>@oap-monitor`;
- **file**: the document as one JSON line appended to the file, fsynced.

A sink that took an alert just before the monitor died sees it again after the restart
(the network cannot tell us otherwise); every sink can recognise it by its `id`. The file
sink does better: it remembers the file's length before each write, and after a restart it
looks there before writing again, so each alert is in the file once.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import smtplib
import ssl
import subprocess
import time
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import aiohttp

from tlog.runtime import children
from tlog.storage.durable import append_durable
from tlog.transport import Outbound

from .config import Sink
from .fetch import _first_line
from .metrics import MonitorMetrics
from .state import Delivery, State

log = logging.getLogger("oap.monitor.alerts")

HOOK_TIMEOUT = 60.0
MAX_HOOKS = 64


class DeliveryError(Exception):
    pass


def targets(sinks: tuple[Sink, ...]) -> list[tuple[str, str, str]]:
    """(sink, target, kinds) of every delivery an alert raised now gets: one per sink, and for
    a hooks directory one per executable file in it now."""
    out = []
    for s in sinks:
        kinds = ",".join(s.kinds)
        if s.kind == "hooks_dir":
            for hook in hooks_in(Path(s.target)):
                out.append((s.name, hook, kinds))
        else:
            out.append((s.name, "", kinds))
    return out


def hooks_in(directory: Path) -> list[str]:
    try:
        names = sorted(p.name for p in directory.iterdir()
                       if p.is_file() and os.access(p, os.X_OK) and not p.name.startswith("."))
    except OSError:
        return []
    return names[:MAX_HOOKS]


class Deliverer:
    """Sends the queued deliveries of every sink; `wake()` when alerts were raised."""

    def __init__(self, state: State, sinks: tuple[Sink, ...], metrics: MonitorMetrics, session: aiohttp.ClientSession,
                 outbound: Outbound, *, timeout: float, retry_max: float) -> None:
        self.state, self.sinks, self.metrics, self.session = state, {s.name: s for s in sinks}, metrics, session
        self.outbound = outbound
        self.timeout, self.retry_max = timeout, retry_max
        self._wake = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    def refresh_gauges(self) -> None:
        queued = self.state.queued()
        for name in self.sinks:
            self.metrics.queued.labels(name).set(queued.get(name, 0))

    async def deliver_due(self, *, deadline: float | None = None) -> int:
        """Try every due delivery once (per sink in order; a sink that fails is left for later);
        how many are still waiting."""
        await asyncio.gather(*(self._sink_round(name, deadline) for name in self.sinks))
        self.refresh_gauges()
        return sum(self.state.queued().values())

    async def _sink_round(self, name: str, deadline: float | None) -> None:
        while deadline is None or time.monotonic() < deadline:
            due = self.state.due(name, time.time(), limit=16)
            if not due:
                return
            for d in due:
                if not await self._try(d):
                    return  # this sink is failing: the rest waits for its backoff

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop`: deliver what is due, then sleep until the next due try or a wake-up."""
        while not stop.is_set():
            self._wake.clear()
            await self.deliver_due()
            nexts = [t for t in (self.state.next_due(n) for n in self.sinks) if t is not None]
            wait = max(0.05, min(nexts) - time.time()) if nexts else 3600.0
            waker = asyncio.ensure_future(self._wake.wait())
            stopper = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait([waker, stopper], timeout=min(wait, 3600.0), return_when=asyncio.FIRST_COMPLETED)
            finally:
                waker.cancel()
                stopper.cancel()

    async def _try(self, d: Delivery) -> bool:
        sink = self.sinks.get(d.sink)
        if sink is None:
            return True  # a sink no longer configured: left in the queue, untouched
        try:
            await self._send(sink, d)
        except (DeliveryError, OSError, aiohttp.ClientError, TimeoutError, smtplib.SMTPException, ssl.SSLError) as e:
            why = e.args[0] if isinstance(e, DeliveryError) else _first_line(e)
            backoff = min(self.retry_max, 2.0 ** min(d.attempts, 30))
            backoff *= 0.75 + random.random() / 2  # spread the retries of many monitors
            self.state.failed(d, str(why), time.time() + backoff)
            self.metrics.deliveries.labels(d.sink, "failed").inc()
            log.warning("alert %s to %s%s: %s (try %d; next in %.0f s)", d.doc["id"][:12], d.sink,
                        f" ({d.target})" if d.target else "", why, d.attempts + 1, backoff)
            return False
        self.state.delivered(d)
        self.metrics.deliveries.labels(d.sink, "ok").inc()
        return True

    async def _send(self, sink: Sink, d: Delivery) -> None:
        if sink.kind == "webhook":
            await self._webhook(sink, d.doc)
        elif sink.kind == "file":
            line = (json.dumps(d.doc, separators=(",", ":")) + "\n").encode()
            path = Path(sink.target)
            size = path.stat().st_size if path.exists() else 0
            if d.mark is not None and d.mark + len(line) <= size and _read_at(path, d.mark, len(line)) == line:
                return  # written before the monitor stopped, and not yet marked done
            self.state.set_mark(d, size)
            await asyncio.to_thread(append_durable, path, line, mode=0o644)
        elif sink.kind == "hooks_dir":
            await asyncio.to_thread(self._hook, sink, d)
        elif sink.kind == "email":
            await asyncio.to_thread(self._email, sink, d.doc)

    # --- webhook ------------------------------------------------------------------------------

    async def _webhook(self, sink: Sink, doc: dict[str, Any]) -> None:
        headers = {"Content-Type": "application/json", "Idempotency-Key": doc["id"], "User-Agent": "oap-monitor"}
        if sink.webhook_token_file is not None:
            headers["Authorization"] = "Bearer " + _first_line_of(sink.webhook_token_file)
        body = json.dumps(doc, separators=(",", ":")).encode()
        async with asyncio.timeout(self.timeout):
            async with self.session.post(sink.target, data=body, headers=headers, allow_redirects=False) as r:
                await r.content.read(4096)
                if not 200 <= r.status < 300:
                    raise DeliveryError(f"{sink.target}: HTTP {r.status}")

    # --- hooks --------------------------------------------------------------------------------

    def _hook(self, sink: Sink, d: Delivery) -> None:
        path = Path(sink.target) / d.target
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise DeliveryError(f"{path}: not an executable file (any more)")
        ev = d.doc.get("evidence") or {}
        env = {**os.environ, "OAP_ALERT_ID": d.doc["id"], "OAP_ALERT_KIND": d.doc["kind"],
               "OAP_ALERT_SUMMARY": d.doc.get("summary", "")[:4000], "OAP_ALERT_FILE": str(ev.get("file") or "")}
        try:
            r = children.run([str(path)], timeout=HOOK_TIMEOUT, input=json.dumps(d.doc).encode(), env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=str(path.parent))
        except subprocess.TimeoutExpired:
            raise DeliveryError(f"{path}: still running after {HOOK_TIMEOUT:g} s (killed)") from None
        if r.returncode != 0:
            err = (r.stderr or b"").decode("utf-8", "replace").strip().splitlines()
            raise DeliveryError(f"{path}: exit status {r.returncode}" + (f": {err[-1][:200]}" if err else ""))

    # --- email --------------------------------------------------------------------------------

    def _email(self, sink: Sink, doc: dict[str, Any]) -> None:
        msg = EmailMessage()
        msg["Subject"] = f"[oap-monitor] {doc['kind']}: {doc.get('summary', '')}"[:300]
        msg["From"] = sink.smtp_from or "oap-monitor@localhost"
        msg["To"] = sink.target
        msg["Message-ID"] = f"<{doc['id']}@oap-monitor>"
        msg.set_content(f"{doc.get('summary', '')}\n\n{json.dumps(doc, indent=2)}\n")
        host, _, port = sink.smtp.rpartition(":")
        host = host.strip("[]")
        context = self.outbound.ssl_context()  # TLS 1.3, the system's CAs and outbound_ca_file
        if sink.smtp_tls == "tls":
            smtp: smtplib.SMTP = smtplib.SMTP_SSL(host, int(port), timeout=self.timeout, context=context)
        else:
            smtp = smtplib.SMTP(host, int(port), timeout=self.timeout)
        with smtp:
            if sink.smtp_tls == "starttls":
                smtp.starttls(context=context)
            if sink.smtp_user:
                assert sink.smtp_password_file is not None
                smtp.login(sink.smtp_user, _first_line_of(sink.smtp_password_file))
            smtp.send_message(msg)


def _read_at(path: Path, offset: int, n: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(n)


def _first_line_of(path: Path) -> str:
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise DeliveryError(f"{path}: {e.strerror}") from None
    if not lines or not lines[0].strip():
        raise DeliveryError(f"{path} is empty")
    return lines[0].strip()
