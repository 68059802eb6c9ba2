"""The polling loop of the witness feeder and the mirror follower: a round, a pause, again.

One loop so that both stop the same way (at once when told, after `rounds` for `--once`)
and report failure the same way (for exit codes)."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

R = TypeVar("R")


async def run_rounds(one_round: Callable[[], Awaitable[R]], succeeded: Callable[[R], bool], *, interval: float,
                     rounds: int | None = None, stop: asyncio.Event | None = None,
                     on_round: Callable[[R], None] | None = None) -> bool:
    """`one_round` every `interval` seconds until `stop` is set or `rounds` are done; False
    if any round did not succeed."""
    ok, done = True, 0
    stop = stop or asyncio.Event()
    while not stop.is_set() and (rounds is None or done < rounds):
        result = await one_round()
        ok = succeeded(result) and ok
        if on_round is not None:
            on_round(result)
        done += 1
        if rounds is not None and done >= rounds:
            break
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval)
        except TimeoutError:
            pass
    return ok
