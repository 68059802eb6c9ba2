"""Feeder (pull) mode: follow a log that does not push (docs/architecture.md §4).

For each configured log with a `url`, a round is:

1. GET <url>/checkpoint (bounded size) and verify the log's signature;
2. if it is larger than the size this witness last cosigned, fetch the hash
   tiles (tlog-tiles) needed for the new tree, recompute its root from them
   (`tlog.client.tilereader.TileTree` + `tlog.merkle.tree.TreeView`) and refuse tiles whose
   root is not the checkpoint's — tile data is untrusted until then;
3. build the consistency proof from the old size with the same view, and
   hand it to the same `Witness.add_checkpoint` the HTTP server uses, so the
   state CAS and every check of C2SP tlog-witness apply (a fork is a 422, never a
   cosignature).

The cosigned checkpoint is published by storing it in the shared state
database (served by `oap-witness serve` at /<hex sha256(origin)>/checkpoint)
and, with `publish_dir`, as a static file at the same relative path.
Every loop is bounded: HTTP timeouts, a tile budget per round, a retry budget
on a concurrent update, and an optional number of rounds.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from tlog.client.tilereader import TileTree, view, with_tiles
from tlog.errors import (
    NotFound,
    OAPError,
    SignatureError,
    TooLarge,
    Unavailable,
    UnknownKeyError,
    VerificationError,
)
from tlog.formats.checkpoint import parse_checkpoint
from tlog.formats.note import MAX_NOTE_SIZE, open_note, parse_note
from tlog.formats.tiles import TILE_WIDTH
from tlog.runtime.rounds import run_rounds
from tlog.storage.durable import write_atomic
from tlog.transport import Outbound, read_capped

from .config import WitnessedLog
from .core import AddCheckpoint, SizeConflict, Witness, origin_path

log = logging.getLogger("oap.witness.feeder")

MAX_TILE_BYTES = TILE_WIDTH * 32


class FetchError(Unavailable):
    """The log did not answer as a tlog-tiles log should (network, status, size); retried next round."""


@dataclass(frozen=True)
class FeedResult:
    origin: str
    action: str  # "cosigned", "unchanged", "behind", "refused", "error"
    size: int
    detail: str = ""


class Feeder:
    def __init__(self, witness: Witness, logs: Iterable[WitnessedLog], *, timeout: float = 10.0,
                 publish_dir: Path | None = None, session: aiohttp.ClientSession | None = None,
                 outbound: Outbound | None = None) -> None:
        """`session`: a caller's HTTP session; by default the feeder makes its own under
        `outbound` (tlog.transport)."""
        self.witness = witness
        self.logs = [log_ for log_ in logs if log_.url]
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.publish_dir = publish_dir
        self._session = session
        self._own_session = session is None
        self.outbound = outbound or Outbound()

    async def __aenter__(self) -> Feeder:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = self.outbound.session(timeout=self.timeout)
        return self._session

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def _get(self, url: str, cap: int) -> bytes:
        try:
            async with self.session.get(url, allow_redirects=False) as resp:
                if resp.status == 404:
                    raise NotFound(f"{url}: 404")
                if resp.status != 200:
                    raise FetchError(f"{url}: HTTP {resp.status}")
                return await read_capped(resp, cap)
        except (TimeoutError, aiohttp.ClientError) as e:
            raise FetchError(f"{url}: {type(e).__name__}: {e}") from None
        except TooLarge as e:
            raise FetchError(str(e)) from None

    async def poll(self, wlog: WitnessedLog) -> FeedResult:
        """One round for one log; never raises for what the log did (see FeedResult.action)."""
        origin = wlog.origin
        try:
            return await self._poll(wlog)
        except VerificationError as e:  # includes a fork: the log's new tree is not consistent
            log.error("%s: refused to cosign: %s", origin, e.message)
            return FeedResult(origin, "refused", 0, e.message)
        except OAPError as e:
            log.warning("%s: %s", origin, e.message)
            return FeedResult(origin, "error", 0, e.message)

    async def _poll(self, wlog: WitnessedLog) -> FeedResult:
        base = wlog.url.rstrip("/")  # type: ignore[union-attr]
        note = parse_note(await self._get(base + "/checkpoint", MAX_NOTE_SIZE))
        cp = parse_checkpoint(note.text)
        if cp.origin != wlog.origin:
            raise VerificationError(f"log at {base} serves origin {cp.origin!r}, configured {wlog.origin!r}")
        try:
            open_note(note, wlog.verifiers)  # before spending tile fetches on it
        except (UnknownKeyError, SignatureError):
            raise VerificationError("checkpoint is not validly signed by the configured log key") from None

        async def fetch(path: str) -> bytes:
            return await self._get(f"{base}/{path}", MAX_TILE_BYTES)

        for _ in range(3):  # a push through `serve` may move the state under us
            rec = await self.witness.latest(wlog.origin)
            old = rec.size if rec is not None else 0
            if cp.size < old:
                return FeedResult(wlog.origin, "behind", cp.size, f"log serves size {cp.size}, witness is at {old}")
            if rec is not None and cp.size == old and cp.root == rec.root:
                return FeedResult(wlog.origin, "unchanged", old)
            if cp.size == old:
                proof: list[bytes] = []  # same size, another root: the core refuses it (422)
            else:
                def compute(tree: TileTree, old: int = old) -> tuple[bytes, list[bytes]]:
                    v = view(tree)
                    return v.root, v.consistency_proof(old)

                try:
                    root, proof = await with_tiles(TileTree(cp.size), fetch, compute)
                except (ValueError, RuntimeError) as e:  # wrong tile length, tile budget
                    raise FetchError(f"bad tiles from {base}: {e}") from None
                if root != cp.root:
                    raise VerificationError(f"tiles from {base} do not hash to the checkpoint root")
            try:
                c = await self.witness.add_checkpoint(AddCheckpoint(old, tuple(proof), note, cp))
            except SizeConflict:
                continue
            self._publish(c.origin, c.note)
            log.info("%s: cosigned size %d", c.origin, c.size)
            return FeedResult(c.origin, "cosigned", c.size)
        raise FetchError("the witness state kept changing; will retry next round")

    def _publish(self, origin: str, note: str) -> None:
        if self.publish_dir is None:
            return
        path = self.publish_dir / origin_path(origin) / "checkpoint"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, note)  # readers see the old or the new file, never half of one

    async def round(self) -> list[FeedResult]:
        return list(await asyncio.gather(*(self.poll(w) for w in self.logs)))

    async def run(self, *, interval: float, rounds: int | None = None, stop: asyncio.Event | None = None,
                  on_round: Callable[[list[FeedResult]], None] | None = None) -> bool:
        """Poll every `interval` seconds until `stop` is set or `rounds` are done.

        Returns False if any poll was refused or failed (for `--once` exit codes).
        """
        return await run_rounds(self.round, lambda results: all(r.action in ("cosigned", "unchanged") for r in results),
                                interval=interval, rounds=rounds, stop=stop, on_round=on_round)
