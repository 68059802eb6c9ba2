"""The standalone follower: copy any tlog-tiles log into a mirror (C2SP tlog-mirror's client side).

`oap-mirror follow <log URL> --mirror <mirror URL>` runs rounds; a round is

1. GET <log>/checkpoint; the tiles it needs must hash to the checkpoint's root (tile data
   is untrusted until then), and with `--log-key` the log's signature must verify (the
   mirror verifies it in any case);
2. add-checkpoint to the mirror with a consistency proof built from those tiles, from the
   size the mirror's pending checkpoint has (a 409 names it);
3. add-entries from the mirror's next entry (a request for the empty range at the end
   gives it, in a 409), streamed and gzip-compressed, at most 32 packages per request
   (C2SP tlog-mirror asks clients to stay under 8,192 entries a request). Each package
   carries the entries read from the log's entry bundles and a subtree consistency proof
   built from its hash tiles, and is checked here against the checkpoint before it is
   sent: a log whose bundles do not match its tiles is refused, nothing sent;
4. 202 resumes from the advertised next entry, 409 follows the mirror-info, 200 ends the
   round with the mirror's cosignature (verified with `--mirror-key`).

Steps 2 to 4 are the mirror client the log's own push uses too
(`tlog.http.mirrorclient`); this module is the source: the log's tiles and bundles over
HTTP, checked before anything is sent. An interrupted follower resumes from the mirror's
next entry: nothing the mirror has stored is sent again. Every loop is bounded (requests
per round, HTTP timeouts).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass

import aiohttp

from tlog.client.tilereader import TileTree, with_tiles
from tlog.errors import ConsistencyProofError, FormatError, OAPError, VerificationError
from tlog.formats.checkpoint import Checkpoint, parse_checkpoint
from tlog.formats.hashing import leaf_hashes
from tlog.formats.keys import Verifier
from tlog.formats.mirror import encode_package
from tlog.formats.note import MAX_NOTE_SIZE, Note, open_note, parse_note, parse_signature_lines
from tlog.formats.tiles import CLIENT_ACCEPT_ENCODING, TILE_WIDTH, entries_path, parse_entry_bundle
from tlog.http.mirrorclient import PACKAGES_PER_REQUEST, FetchError, MirrorClient, Refused, prefetched, read_capped
from tlog.merkle.subtrees import subtree_consistency_proof, subtree_root, verify_subtree_consistency
from tlog.merkle.tree import TreeView, root_of_leaves
from tlog.runtime.rounds import run_rounds
from tlog.transport import Outbound

log = logging.getLogger("oap.mirror.follow")

MAX_BUNDLE = TILE_WIDTH * (2 + 0xFFFF)
MAX_TILE = TILE_WIDTH * 32

__all__ = ["FetchError", "Follower", "Refused", "Round"]


@dataclass(frozen=True)
class Round:
    origin: str
    action: str  # "cosigned", "behind", "refused", "error"
    size: int
    sent: int = 0  # entries sent this round
    detail: str = ""
    cosignatures: str = ""


class _Tiles:
    """The log's hash tiles for one tree size, fetched on demand; complete nodes above the
    leaves memoized (a few hundred kB per million entries)."""

    def __init__(self, size: int, fetch: Callable) -> None:
        self.tree = TileTree(size)
        self.fetch = fetch
        self.nodes: dict[tuple[int, int], bytes] = {}

    def complete(self, level: int, index: int) -> bytes:
        h = self.nodes.get((level, index))
        if h is None:
            h = self.tree.complete(level, index)
            if level:
                self.nodes[(level, index)] = h
        return h

    async def run(self, compute):
        return await with_tiles(self.tree, self.fetch, lambda _tree: compute())

    def mth(self, lo: int, hi: int) -> bytes:
        return subtree_root(lo, hi, self.complete)


class _TileSource:
    """A log's checkpoint, tiles and bundles over HTTP as a `PushSource`: every package is
    checked against the checkpoint before it is sent (a log whose bundles do not match its
    tiles is refused; what verified before the lie was sent)."""

    def __init__(self, follower: Follower, note: Note, cp: Checkpoint, tiles: _Tiles) -> None:
        self.f, self.cp, self.tiles = follower, cp, tiles
        self.origin, self.size, self.note = cp.origin, cp.size, str(note)

    async def consistency_proof(self, old: int) -> Sequence[bytes]:
        return await self.tiles.run(lambda: TreeView(self.size, self.tiles.complete).consistency_proof(old))

    async def packages(self, ranges: list[tuple[int, int, int]]) -> AsyncGenerator[bytes, None]:
        cp, tiles = self.cp, self.tiles

        def fetch(i: int):
            sub = ranges[i][0]
            return self.f._bundle(sub // TILE_WIDTH, min(TILE_WIDTH, cp.size - sub))

        bundles = prefetched(len(ranges), fetch)
        try:
            i = 0
            async for bundle in bundles:
                sub, first, stop = ranges[i]
                i += 1
                entries = bundle[:stop - sub]
                proof = await tiles.run(lambda sub=sub, stop=stop: subtree_consistency_proof(
                    sub, stop, cp.size, tiles.mth))
                try:  # the check the mirror will make: the log's bundles must match its checkpoint
                    verify_subtree_consistency(sub, stop, cp.size, proof, root_of_leaves(leaf_hashes(entries)),
                                               cp.root)
                except ConsistencyProofError:
                    raise Refused(f"entries [{sub}, {stop}) of the log do not match its checkpoint") from None
                yield encode_package(entries[first - sub:], proof)
        finally:
            await bundles.aclose()


class Follower:
    """Feeds one mirror from one log; keep it across rounds (it remembers its hints)."""

    def __init__(self, log_url: str, mirror_url: str, *, log_key: Verifier | None = None,
                 mirror_keys: Sequence[Verifier] = (), timeout: float = 60.0,
                 session: aiohttp.ClientSession | None = None, packages_per_request: int = PACKAGES_PER_REQUEST,
                 compress_level: int = 1, outbound: Outbound | None = None) -> None:
        """`session`: a caller's HTTP session; by default the follower makes its own under
        `outbound` (tlog.transport), shared with its mirror client."""
        self.log_url = log_url.rstrip("/")
        self.log_key, self.mirror_keys = log_key, tuple(mirror_keys)
        self.timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
        self._session, self._own = session, session is None
        self.outbound = outbound or Outbound()
        self.client = MirrorClient(mirror_url, session=lambda: self.session, timeout=timeout,
                                   packages_per_request=packages_per_request, compress_level=compress_level)

    @property
    def mirror_url(self) -> str:
        return self.client.url

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = self.outbound.session(timeout=self.timeout,
                                                  headers={"Accept-Encoding": CLIENT_ACCEPT_ENCODING})
        return self._session

    @property
    def sent_total(self) -> int:
        return self.client.sent_total

    async def close(self) -> None:
        if self._own and self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> Follower:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _get(self, url: str, cap: int, *, missing_ok: bool = False) -> bytes | None:
        try:
            async with self.session.get(url, allow_redirects=False) as r:
                if r.status == 404 and missing_ok:
                    return None
                if r.status != 200:
                    raise FetchError(f"{url}: HTTP {r.status}")
                return await read_capped(r, cap, url)
        except (TimeoutError, aiohttp.ClientError) as e:
            raise FetchError(f"{url}: {type(e).__name__}: {e}") from None

    # --- a round ------------------------------------------------------------------------

    async def sync(self) -> Round:
        """One round; never raises for what the log or the mirror did (see Round.action)."""
        origin = ""
        try:
            note, cp = await self._checkpoint()
            origin = cp.origin
            return await self._sync(note, cp)
        except VerificationError as e:
            log.error("%s: %s", origin or self.log_url, e.message)
            return Round(origin, "refused", 0, detail=e.message)
        except OAPError as e:
            log.warning("%s: %s", origin or self.log_url, e.message)
            return Round(origin, "error", 0, detail=e.message)

    async def _checkpoint(self) -> tuple[Note, Checkpoint]:
        raw = await self._get(f"{self.log_url}/checkpoint", MAX_NOTE_SIZE)
        assert raw is not None
        note = parse_note(raw)
        cp = parse_checkpoint(note.text)
        if self.log_key is not None:
            try:
                open_note(note, [self.log_key])
            except OAPError:
                raise Refused("the log's checkpoint is not validly signed by --log-key") from None
        return note, cp

    async def _sync(self, note: Note, cp: Checkpoint) -> Round:
        tiles = _Tiles(cp.size, self._tile)
        root = await tiles.run(lambda: TreeView(cp.size, tiles.complete).root) if cp.size else cp.root
        if root != cp.root:
            raise Refused(f"the log's tiles do not hash to the root of its checkpoint of size {cp.size}")
        pushed = await self.client.push(_TileSource(self, note, cp, tiles))
        if pushed.action != "cosigned":
            return Round(cp.origin, pushed.action, cp.size, pushed.sent, detail=pushed.detail)
        self._check_cosignatures(note, pushed.lines)
        log.debug("%s: the mirror cosigned size %d (%d entries sent)", cp.origin, pushed.size, pushed.sent)
        return Round(cp.origin, "cosigned", pushed.size, pushed.sent, cosignatures=pushed.lines)

    def _check_cosignatures(self, note: Note, lines: str) -> None:
        if not self.mirror_keys:
            return
        try:
            sigs = parse_signature_lines(lines)
            open_note(Note(note.text, tuple(note.signatures) + sigs), self.mirror_keys)
        except (FormatError, OAPError) as e:
            raise Refused(f"the mirror's cosignature does not verify with --mirror-key: "
                          f"{getattr(e, 'message', e)}") from None

    # --- the log's tiles and bundles -------------------------------------------------------

    async def _tile(self, path: str) -> bytes:
        """A hash tile; a partial one the log no longer serves is cut from the full tile."""
        data = await self._get(f"{self.log_url}/{path}", MAX_TILE, missing_ok=".p/" in path)
        if data is None:
            base, width = path.split(".p/")
            full = await self._get(f"{self.log_url}/{base}", MAX_TILE)
            assert full is not None
            data = full[:int(width) * 32]
        return data

    async def _bundle(self, index: int, width: int) -> list[bytes]:
        data = await self._get(f"{self.log_url}/{entries_path(index, width)}", MAX_BUNDLE,
                               missing_ok=width < TILE_WIDTH)
        if data is None:  # the partial bundle is gone: the full one has those entries first
            data = await self._get(f"{self.log_url}/{entries_path(index)}", MAX_BUNDLE)
            assert data is not None
        try:
            got = parse_entry_bundle(data, width)
        except FormatError:
            raise Refused(f"entry bundle {index} from the log is malformed") from None
        if len(got) < width:
            raise Refused(f"entry bundle {index} from the log holds {len(got)} entries, not {width}")
        return got

    # --- rounds ---------------------------------------------------------------------------

    async def run(self, *, interval: float, rounds: int | None = None, stop: asyncio.Event | None = None,
                  on_round: Callable[[Round], None] | None = None) -> bool:
        """A round every `interval` seconds until `stop` is set or `rounds` are done; False if
        any round was refused or failed (for `--once`)."""
        return await run_rounds(self.sync, lambda r: r.action in ("cosigned", "behind"), interval=interval,
                                rounds=rounds, stop=stop, on_round=on_round)
