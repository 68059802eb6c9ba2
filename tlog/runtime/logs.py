"""Logging setup: human text or one JSON object per line (for log shippers).

Malformed requests are logged by aiohttp with a full traceback each; a client
that sends them in a loop would fill the disk through the log. `MalformedRequests`
keeps the first one of each client in full and turns the rest into one count a
minute.
"""
from __future__ import annotations

import json
import logging
import sys
import time
from collections import OrderedDict


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
               "level": record.levelname.lower(), "logger": record.name, "msg": record.getMessage()}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


class MalformedRequests(logging.Filter):
    """On aiohttp's "Error handling request from <client>" records: the first of each
    client passes in full; later ones are counted and reported as one line per
    `interval` seconds (and the table of clients seen is bounded)."""

    MESSAGE = "Error handling request from %s"

    def __init__(self, interval: float = 60.0, max_clients: int = 10_000,
                 clock=time.monotonic) -> None:
        super().__init__()
        self.interval, self.max_clients, self.clock = interval, max_clients, clock
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.suppressed = 0
        self.clients: set[str] = set()
        self.since = clock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != self.MESSAGE:
            return True
        client = str(record.args[0]) if isinstance(record.args, tuple) and record.args else "unknown"
        now = self.clock()
        if client not in self.seen:
            self.seen[client] = None
            if len(self.seen) > self.max_clients:
                self.seen.popitem(last=False)
            return True
        self.suppressed += 1
        if len(self.clients) < 1000:
            self.clients.add(client)
        if now - self.since < self.interval:
            return False
        # Turn this record into the summary of what was held back.
        record.msg = "%d more malformed requests from %d clients in the last %.0f s (the first of each was logged)"
        record.args = (self.suppressed, len(self.clients), now - self.since)
        record.exc_info = record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        self.suppressed, self.clients, self.since = 0, set(), now
        return True


def setup_logging(fmt: str = "text", level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json"
                         else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    server = logging.getLogger("aiohttp.server")
    server.filters[:] = [f for f in server.filters if not isinstance(f, MalformedRequests)]
    server.addFilter(MalformedRequests())
