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

An interrupted follower resumes from the mirror's next entry: nothing the mirror has
stored is sent again. Every loop is bounded (requests per round, HTTP timeouts).
"""
from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import aiohttp

from tlog.client.tilereader import TileTree, with_tiles
from tlog.errors import ConsistencyProofError, FormatError, OAPError, Unavailable, VerificationError
from tlog.formats.checkpoint import Checkpoint, parse_checkpoint
from tlog.formats.hashing import leaf_hashes
from tlog.formats.keys import Verifier
from tlog.formats.note import MAX_NOTE_SIZE, Note, open_note, parse_note, parse_signature_lines
from tlog.formats.tiles import TILE_WIDTH, entries_path, parse_entry_bundle
from tlog.merkle.subtrees import subtree_consistency_proof, verify_subtree_consistency
from tlog.merkle.tree import TreeView, root_of_leaves

from ..core import add_checkpoint_body
from .wire import MIRROR_INFO, PACKAGE_SIZE, encode_header, encode_package, package_ranges, parse_mirror_info

log = logging.getLogger("oap.mirror.follow")

PACKAGES_PER_REQUEST = 32
MAX_BUNDLE = TILE_WIDTH * (2 + 0xFFFF)
MAX_TILE = TILE_WIDTH * 32


async def _read_capped(r: aiohttp.ClientResponse, cap: int, url: str) -> bytes:
    """The whole answer (read to its end: one read may return part of it), at most `cap` bytes."""
    chunks, total = [], 0
    async for chunk in r.content.iter_any():
        total += len(chunk)
        if total > cap:
            raise FetchError(f"{url}: answer larger than {cap} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class FetchError(Unavailable):
    """The log or the mirror did not answer as it should (network, status); retried next round."""


class Refused(VerificationError):
    """The log served something that does not match its checkpoint, or the mirror refused it."""


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
        """MTH(D[lo:hi]) of a node of an RFC 9162 tree: complete, or the right edge of the tree of hi."""
        level = (hi - lo - 1).bit_length()
        if (hi - lo) == 1 << level:
            return self.complete(level, lo >> level)
        return TreeView(hi, self.complete).node(level, lo >> level)


class Follower:
    """Feeds one mirror from one log; keep it across rounds (it remembers its hints)."""

    def __init__(self, log_url: str, mirror_url: str, *, log_key: Verifier | None = None,
                 mirror_keys: Sequence[Verifier] = (), timeout: float = 60.0,
                 session: aiohttp.ClientSession | None = None, packages_per_request: int = PACKAGES_PER_REQUEST,
                 compress_level: int = 1) -> None:
        self.log_url, self.mirror_url = log_url.rstrip("/"), mirror_url.rstrip("/")
        self.log_key, self.mirror_keys = log_key, tuple(mirror_keys)
        self.timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
        self.per_request = packages_per_request
        self.level = compress_level
        self._session, self._own = session, session is None
        self.pending_hint = 0  # the mirror's pending size, as last seen
        self.sent_total = 0
        self._failure: OAPError | None = None  # why the body being sent was cut short

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self.timeout, auto_decompress=True)
        return self._session

    async def close(self) -> None:
        if self._own and self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> Follower:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- HTTP ---------------------------------------------------------------------------

    async def _get(self, url: str, cap: int, *, missing_ok: bool = False) -> bytes | None:
        try:
            async with self.session.get(url, allow_redirects=False) as r:
                if r.status == 404 and missing_ok:
                    return None
                if r.status != 200:
                    raise FetchError(f"{url}: HTTP {r.status}")
                return await _read_capped(r, cap, url)
        except (TimeoutError, aiohttp.ClientError) as e:
            raise FetchError(f"{url}: {type(e).__name__}: {e}") from None

    async def _post(self, path: str, data, headers: dict[str, str]) -> tuple[int, str, bytes]:
        url = f"{self.mirror_url}/{path}"
        try:
            async with self.session.post(url, data=data, headers=headers) as r:
                return r.status, r.headers.get("Content-Type", ""), await _read_capped(r, 1 << 20, url)
        except (TimeoutError, aiohttp.ClientError) as e:
            if self._failure is not None:  # the body stopped because the log lied or failed
                raise self._failure from None
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
        if not await self._add_checkpoint(str(note), cp, tiles):
            return Round(cp.origin, "behind", cp.size,
                         detail=f"the mirror's pending checkpoint ({self.pending_hint}) is ahead of the log's")
        start, end, ticket = cp.size, cp.size, b""  # the empty range first: its 409 names the next entry
        sent = 0
        for _ in range(16 + 4 * (-(-cp.size // (PACKAGE_SIZE * self.per_request)))):
            self._failure = None
            status, ctype, body = await self._post(
                "add-entries", self._body(cp, tiles, start, end, ticket),
                {"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"})
            if self._failure is not None:
                raise self._failure
            if status == 200:
                sent += end - start
                self.sent_total += end - start
                lines = body.decode("utf-8", "replace")
                self._check_cosignatures(note, lines)
                log.debug("%s: the mirror cosigned size %d (%d entries sent)", cp.origin, end, sent)
                return Round(cp.origin, "cosigned", end, sent, cosignatures=lines)
            if status in (202, 409) and ctype.split(";")[0].strip() == MIRROR_INFO:
                info = parse_mirror_info(body)
                if status == 202:
                    done = max(0, min(info.next_entry, end) - start)
                    sent += done
                    self.sent_total += done
                if info.size != end:
                    return Round(cp.origin, "behind", cp.size, sent,
                                 detail=f"the mirror now takes uploads up to {info.size}; next round")
                ticket = info.ticket
                if info.next_entry >= end:
                    if start == end:  # even the empty range is refused: the mirror is past this checkpoint
                        return Round(cp.origin, "behind", cp.size, sent,
                                     detail=f"the mirror is at {info.next_entry} entries, past the log's {cp.size}")
                    start = end
                else:
                    start = info.next_entry
                continue
            raise Refused(f"add-entries [{start}, {end}): HTTP {status}: {body[:300].decode('utf-8', 'replace')}")
        raise FetchError("the mirror kept asking for more; will retry next round")

    async def _add_checkpoint(self, note: str, cp: Checkpoint, tiles: _Tiles) -> bool:
        """Move the mirror's pending checkpoint to `cp`; False if the mirror's is already larger."""
        for _ in range(4):
            old = self.pending_hint
            if old > cp.size:
                return False
            proof = await tiles.run(lambda old=old: TreeView(cp.size, tiles.complete).consistency_proof(old)) \
                if 0 < old < cp.size else []
            status, ctype, body = await self._post("add-checkpoint", add_checkpoint_body(old, proof, note),
                                                   {"Content-Type": "text/plain"})
            if status == 200:
                self.pending_hint = cp.size
                return True
            if status == 409 and ctype.startswith("text/x.tlog.size"):
                try:
                    self.pending_hint = int(body.decode("ascii").strip())
                except ValueError:
                    raise FetchError("the mirror's 409 does not carry a size") from None
                continue
            raise Refused(f"add-checkpoint: HTTP {status}: {body[:300].decode('utf-8', 'replace')}")
        raise FetchError("the mirror's pending checkpoint kept moving; will retry next round")

    def _check_cosignatures(self, note: Note, lines: str) -> None:
        if not self.mirror_keys:
            return
        try:
            sigs = parse_signature_lines(lines)
            open_note(Note(note.text, tuple(note.signatures) + sigs), self.mirror_keys)
        except (FormatError, OAPError) as e:
            raise Refused(f"the mirror's cosignature does not verify with --mirror-key: "
                          f"{getattr(e, 'message', e)}") from None

    # --- the request body ------------------------------------------------------------------

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

    async def _body(self, cp: Checkpoint, tiles: _Tiles, start: int, end: int, ticket: bytes) -> AsyncIterator[bytes]:
        """The gzip-compressed body: header and up to `per_request` packages from `start`."""
        z = zlib.compressobj(self.level, zlib.DEFLATED, 31)  # wbits 31: a gzip stream
        yield z.compress(encode_header(cp.origin, start, end, ticket))
        ranges = list(package_ranges(start, end))[:self.per_request]
        window = 8  # bundles fetched ahead of the one being sent
        fetches: dict[int, asyncio.Task] = {}

        def fetch(i: int) -> None:
            if i < len(ranges) and i not in fetches:
                sub = ranges[i][0]
                fetches[i] = asyncio.ensure_future(self._bundle(sub // TILE_WIDTH, min(TILE_WIDTH, cp.size - sub)))

        # On a failure (a lie, an unreachable bundle) the body ends after the packages sent so
        # far, which the mirror keeps (they verified), and the round fails once it answered.
        try:
            for i, (sub, first, stop) in enumerate(ranges):
                for j in range(i, i + window):
                    fetch(j)
                try:
                    entries = (await fetches.pop(i))[:stop - sub]
                    proof = await tiles.run(lambda sub=sub, stop=stop: subtree_consistency_proof(
                        sub, stop, cp.size, tiles.mth))
                    try:  # the check the mirror will make: the log's bundles must match its checkpoint
                        verify_subtree_consistency(sub, stop, cp.size, proof, root_of_leaves(leaf_hashes(entries)),
                                                   cp.root)
                    except ConsistencyProofError:
                        raise Refused(f"entries [{sub}, {stop}) of the log do not match its checkpoint") from None
                except OAPError as e:
                    self._failure = e
                    break
                chunk = z.compress(encode_package(entries[first - sub:], proof))
                if chunk:
                    yield chunk
            yield z.flush()
        finally:
            for t in fetches.values():
                t.cancel()

    # --- rounds ---------------------------------------------------------------------------

    async def run(self, *, interval: float, rounds: int | None = None, stop: asyncio.Event | None = None,
                  on_round: Callable[[Round], None] | None = None) -> bool:
        """A round every `interval` seconds until `stop` is set or `rounds` are done; False if
        any round was refused or failed (for `--once`)."""
        ok, done = True, 0
        stop = stop or asyncio.Event()
        while not stop.is_set() and (rounds is None or done < rounds):
            r = await self.sync()
            ok = ok and r.action in ("cosigned", "behind")
            if on_round is not None:
                on_round(r)
            done += 1
            if rounds is not None and done >= rounds:
                break
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval)
            except TimeoutError:
                pass
        return ok
