"""Bounded waits for a condition: the tests' one way to wait instead of sleeping and hoping."""
from __future__ import annotations

import asyncio
import selectors
from collections.abc import Awaitable, Callable
from typing import Any


async def until(cond: Callable[[], Any | Awaitable[Any]], seconds: float = 60.0, what: str = "", *,
                every: float = 0.05) -> Any:
    """Poll `cond` (sync or async) every `every` seconds until it returns something true, and
    return that; the bound only keeps a broken build from hanging."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        got = cond()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return got
        assert loop.time() < deadline, f"gave up waiting for {what or cond}"
        await asyncio.sleep(every)


def readable(stream: Any, seconds: float) -> bool:
    """Whether `stream` (a pipe's file object) has something to read within `seconds`. Through
    `selectors` (epoll here), not select(): a test process that holds over 1,024 descriptors
    (servers, browsers, clients of earlier tests) would make select() raise."""
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        return bool(sel.select(seconds))
