"""A log published to an S3-compatible bucket under the C2SP tlog-tiles paths: the `Publisher`
of `tlog.storage.interface`.

Tiles and entry bundles are create-only (`If-None-Match: *`): a path always holds the same
bytes, so a write that finds an object already there succeeds if the bytes are equal and is
a fork (ForkError) if they differ (as Tessera and Sunlight do). The checkpoint is the one
object that is overwritten, at most once per `checkpoint_interval`, and never with a smaller
tree: the writer reads it, compares sizes (and, at equal size, roots: a different root is a
fork), and replaces it only if it is unchanged since that read (`If-Match` on its ETag), so
two writers racing, one of them a former integrator that has not noticed it lost the role,
can never move it backwards. (The database's epoch fence stops such a writer first; this is
the second wall.) Any static host or CDN in front of the bucket then serves readers,
monitors and witnesses with no log process in the path.

The order that survives a crash at any step (`tlog.server.appender`): stage tiles and
bundles, compare-and-swap the checkpoint in the database, write the checkpoint object. A
tile staged for entries that are already sequenced can only ever have one content, so
staging again after a crash writes the same bytes.

Entry bundles are stored gzip-compressed, with `Content-Encoding: gzip`, where that pays
(`Bucket.put_bundle`): tlog-tiles says bundles SHOULD be compressed and allows gzip with no
negotiation, and a static host serves the object as it is; hash tiles (random bytes) never are.

Obsolete partial tiles (`N.p/W`) are deleted once the full tile `N` exists: right away for
those this process wrote, and on taking the role (`take_over`: `sweep`, and the right-edge
tiles an earlier holder may have written partials of) for any a crash left behind.
"""
from __future__ import annotations

import gzip
import logging
import time
import zlib
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TYPE_CHECKING

from tlog.errors import ConfigError, ForkError, FormatError, Unavailable
from tlog.formats.checkpoint import parse_checkpoint
from tlog.formats.note import parse_note
from tlog.formats.tiles import TILE_HEIGHT, TILE_WIDTH, encode_entry_bundle, entries_path, tile_path
from tlog.storage.interface import TileSource

if TYPE_CHECKING:
    from obstore.store import ClientConfig

log = logging.getLogger("oap.tlog.bucket")

CHECKPOINT_KEY = "checkpoint"
GZIP_SAVES = 8  # an entry bundle is stored gzip-compressed when that saves at least 1/8 of its bytes
BACKFILL_CHUNK = 1 << 16  # entries staged per step when a bucket catches up on an older log


_LOG_EVERY = 10.0
_last_logged = 0.0


def _unreachable(what: str, key: str, e: Exception) -> Unavailable:
    """The 503 for a failed bucket call. A client learns which object and the error's class;
    obstore's own text (the bucket's URL, its retry and debug fields) goes to the operator's
    log, at most once per `_LOG_EVERY` seconds while the bucket stays away."""
    global _last_logged
    now = time.monotonic()
    if now - _last_logged >= _LOG_EVERY:
        _last_logged = now
        log.warning("bucket %s failed at %s: %s: %s", what, key, type(e).__name__, str(e)[:2000])
    return Unavailable(f"bucket {what} failed at {key}: {type(e).__name__}", retry_after=1)


class Bucket:
    """The few object operations publication needs, over obstore's S3 client."""

    def __init__(self, store) -> None:
        self.store = store

    @classmethod
    def from_config(cls, url: str, *, key_id: str, secret: str, region: str = "us-east-1",
                    ca_pem: bytes | None = None) -> Bucket:
        """`url` is http(s)://host[:port]/bucket; the access key and secret come from the
        caller (a 0600 file or the environment: `tlog.runtime.keyfiles.bucket_credentials`);
        `ca_pem`, CA certificates trusted besides the system's (the service's
        `outbound_ca_file`). obstore's client sets no minimum TLS version: TLS 1.2 is
        accepted here, unlike in `tlog.transport` (docs/architecture.md §7).

        Timeouts and retries are short: a bucket that is down makes writes fail (503) within
        a few seconds, and the appender retries, rather than holding every write meanwhile."""
        from urllib.parse import urlsplit

        from obstore.store import S3Store

        parts = urlsplit(url)
        bucket = parts.path.strip("/")
        if not parts.netloc or not bucket or "/" in bucket:
            raise ConfigError(f"bucket_url must be http(s)://host[:port]/bucket, not {url!r}")
        options: ClientConfig = {"allow_http": parts.scheme == "http", "timeout": "10s", "connect_timeout": "2s"}
        if ca_pem is not None:
            options["root_certificate"] = ca_pem
        store = S3Store(bucket, endpoint=f"{parts.scheme}://{parts.netloc}", region=region,
                        access_key_id=key_id, secret_access_key=secret, virtual_hosted_style_request=False,
                        client_options=options,
                        retry_config={"max_retries": 2, "retry_timeout": timedelta(seconds=3),
                                      "backoff": {"init_backoff": timedelta(milliseconds=100),
                                                  "max_backoff": timedelta(seconds=1), "base": 2}})
        return cls(store)

    def put_create_only(self, key: str, data: bytes) -> bool:
        """Create `key` holding `data`: True if created, False if it already held exactly
        `data`; ForkError if it holds anything else."""
        if self.put_if(key, data, None):
            return True
        if self.get(key) != data:
            raise ForkError(f"the bucket already holds different bytes at {key}")
        return False

    def put_bundle(self, key: str, raw: bytes) -> bool:
        """Create the entry bundle `raw` at `key`, gzip-compressed (`Content-Encoding: gzip`,
        which C2SP tlog-tiles allows "with no negotiation") when that saves at least
        1/GZIP_SAVES of its bytes, else as it is. True if created; False if `key` already held
        these entries (compressed or not, by any writer: another zlib may give other gzip
        bytes); ForkError if it holds other entries."""
        packed = gzip.compress(raw, 6, mtime=0)
        if len(packed) <= len(raw) - len(raw) // GZIP_SAVES:
            data, attributes = packed, {"Content-Encoding": "gzip"}
        else:
            data, attributes = raw, None
        if self.put_if(key, data, None, attributes=attributes):
            return True
        held = self.get(key)
        if held is not None and (held == data or held == raw or _gunzipped(held) == raw):
            return False
        raise ForkError(f"the bucket already holds different entries at {key}")

    def put_if(self, key: str, data: bytes, etag: str | None, *, attributes: dict[str, str] | None = None) -> bool:
        """Write `key` if it is unchanged: absent (`etag` None) or still at `etag`. False if
        the condition failed (another writer got there first)."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            obstore.put(self.store, key, data, mode="create" if etag is None else {"e_tag": etag},
                        attributes=attributes)
            return True
        except (AlreadyExistsError, PreconditionError):
            return False
        except Exception as e:  # noqa: BLE001 - any transport or service error
            raise _unreachable("write", key, e) from None

    def get(self, key: str) -> bytes | None:
        got = self.get_versioned(key)
        return None if got is None else got[0]

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        """(bytes, ETag) of `key`, or None if there is no such object."""
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            got = obstore.get(self.store, key)
            return bytes(got.bytes()), str(got.meta["e_tag"])
        except (NotFoundError, FileNotFoundError):  # obstore raises the latter for a missing object
            return None
        except Exception as e:  # noqa: BLE001 - any transport or service error
            raise _unreachable("read", key, e) from None

    def delete(self, keys: Iterable[str]) -> None:
        import obstore

        keys = list(keys)
        if keys:
            obstore.delete(self.store, keys)

    def list(self, prefix: str) -> list[str]:
        import obstore

        return [meta["path"] for batch in obstore.list(self.store, prefix=prefix) for meta in batch]


def _gunzipped(data: bytes) -> bytes | None:
    """`data` decompressed if it is one gzip member, else None."""
    if data[:2] != b"\x1f\x8b":
        return None
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error):
        return None


def changed_tiles(old: int, new: int) -> list[tuple[int, int, int]]:
    """(tile level, index, width) of every hash tile of a tree of `new` leaves that differs
    from the tree of `old` leaves; tile level -1 is the entry bundles."""
    out = []
    level = -1
    while True:
        shift = 0 if level < 0 else TILE_HEIGHT * level
        n_old, n_new = old >> shift, new >> shift
        if n_new == 0:
            break
        if n_new != n_old:
            for index in range(n_old // TILE_WIDTH, (n_new - 1) // TILE_WIDTH + 1):
                width = min(TILE_WIDTH, n_new - index * TILE_WIDTH)
                out.append((level, index, width))
        level += 1
    return out


def _path(level: int, index: int, width: int) -> str:
    return entries_path(index, width) if level < 0 else tile_path(level, index, width)


def partial_tiles(size: int) -> list[tuple[int, int, int]]:
    """(tile level, index, width) of the partial tiles of a tree of `size` leaves: at most
    one per level, the right edge; tile level -1 is the entry bundles."""
    out = []
    level = -1
    while True:
        count = size >> (0 if level < 0 else TILE_HEIGHT * level)
        if count == 0:
            break
        if count % TILE_WIDTH:
            out.append((level, count // TILE_WIDTH, count % TILE_WIDTH))
        level += 1
    return out


class TilePublisher:
    """Publishes a log's tiles, entry bundles and checkpoint to a `Bucket` (the `Publisher`).

    Full tiles and bundles are written as the tree grows (`stage`, before each signature);
    partial ones only for the sizes whose checkpoint object is written, at most once per
    interval (`write_checkpoint`): a reader of the bucket needs the partial tiles of the
    checkpoint it reads, and no others. Called on the appender's driver thread.
    """

    def __init__(self, bucket: Bucket, *, checkpoint_interval: float = 1.0, workers: int = 8) -> None:
        self.bucket, self.interval = bucket, checkpoint_interval
        self.errors = 0  # failed bucket writes (a metric)
        self.written = 0  # objects created
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="oap-bucket")
        self._partials: dict[tuple[int, int], str] = {}  # (level, index) -> the partial tile last written
        self._obsolete: list[str] = []
        self._suspects: set[tuple[int, int]] = set()  # right-edge tiles an earlier holder may have left partials of
        self._last = -float("inf")  # monotonic time of the last checkpoint write

    def _put_all(self, work: list[tuple[int, int, int, bytes]]) -> None:
        futures = [self._pool.submit(self.bucket.put_bundle if lv < 0 else self.bucket.put_create_only,
                                     _path(lv, ix, w), d) for lv, ix, w, d in work]
        try:
            for f in futures:
                if f.result():
                    self.written += 1
        except Exception:
            self.errors += 1
            raise

    @staticmethod
    def _tiles(source: TileSource, wanted: list[tuple[int, int, int]]) -> list[tuple[int, int, int, bytes]]:
        work = []
        bundles = [(ix, w) for lv, ix, w in wanted if lv < 0]
        first = 0
        data: list[bytes] = []
        if bundles:  # one read of the entries for all the bundles
            first = bundles[0][0] * TILE_WIDTH
            data = source.read_entries(first, bundles[-1][0] * TILE_WIDTH + bundles[-1][1] - first)
        for level, index, width in wanted:
            if level < 0:
                at = index * TILE_WIDTH - first
                work.append((level, index, width, encode_entry_bundle(data[at:at + width])))
            else:
                work.append((level, index, width,
                             source.hashes.read_range(level * TILE_HEIGHT, index * TILE_WIDTH, width)))
        return work

    def stage(self, source: TileSource, old: int, new: int) -> None:
        """Write every full tile and entry bundle that the tree of `new` leaves has and the tree
        of `old` leaves had not (create-only), before the checkpoint for `new` is signed."""
        full = [t for t in changed_tiles(old, new) if t[2] == TILE_WIDTH]
        if not full:
            return
        self._put_all(self._tiles(source, full))
        for level, index, width in full:
            previous = self._partials.pop((level, index), None)
            if previous is not None:
                self._obsolete.append(previous)
            if (level, index) in self._suspects:
                self._suspects.discard((level, index))
                try:
                    self._obsolete += self.bucket.list(_path(level, index, width) + ".p/")
                except Exception as e:  # noqa: BLE001 - garbage only: listed again at the next takeover
                    log.warning("listing partial tiles of %s failed: %s", _path(level, index, width), e)

    def due(self) -> bool:
        return self.seconds_until_due() <= 0

    def seconds_until_due(self) -> float:
        return max(0.0, self._last + self.interval - time.monotonic())

    def write_checkpoint(self, source: TileSource, note: str, size: int) -> None:
        """Write the checkpoint for `size`: its partial tiles first (create-only), then the
        checkpoint object (never replacing a larger tree), then delete the partial tiles
        that full ones replaced. The interval restarts whether or not the write happened."""
        try:
            partial = [t for t in partial_tiles(size) if self._partials.get((t[0], t[1])) != _path(*t)]
            self._put_all(self._tiles(source, partial))
            for level, index, width in partial:
                previous = self._partials.get((level, index))
                if previous is not None:
                    self._obsolete.append(previous)
                self._partials[(level, index)] = _path(level, index, width)
            self._put_checkpoint(note, size)
        except Exception:
            self.errors += 1
            raise
        self._last = time.monotonic()
        obsolete, self._obsolete = self._obsolete, []
        try:
            self.bucket.delete(obsolete)
        except Exception as e:  # noqa: BLE001 - garbage only: swept at the next takeover
            log.warning("deleting %d obsolete partial tiles failed: %s", len(obsolete), e)

    def _put_checkpoint(self, note: str, size: int) -> bool:
        return put_checkpoint(self.bucket, CHECKPOINT_KEY, note, size)

    def checkpoint_size(self) -> int:
        """The size of the tree the bucket's checkpoint object shows (0 if there is none)."""
        try:
            current = self.bucket.get(CHECKPOINT_KEY)
        except Unavailable:
            self.errors += 1
            raise
        if current is None:
            return 0
        try:
            return _parsed(current.decode())[1]
        except (FormatError, UnicodeDecodeError):
            return 0

    def take_over(self, source: TileSource, start: int, size: int) -> None:
        """On taking the role: stage every full tile and bundle from `start` (the size of the
        bucket's checkpoint: everything below it is there) to `size` (the signed head), in
        steps, so that a bucket configured for a log that already had entries catches up;
        delete the partial tiles of tiles that became full meanwhile (`sweep`), and watch the
        right-edge tiles, whose partials an earlier holder may have written, until they fill."""
        self._partials.clear()
        self._obsolete = []
        for lo in range(start - start % BACKFILL_CHUNK, size, BACKFILL_CHUNK):
            self.stage(source, max(lo, start), min(size, lo + BACKFILL_CHUNK))
        self.sweep(start, size)
        self._suspects = {(level, index) for level, index, _ in partial_tiles(size)}
        self._last = -float("inf")

    def sweep(self, old: int, new: int) -> int:
        """Delete the partial tiles made obsolete by the tiles that became full between trees
        of `old` and `new` leaves (those a crash left behind); returns how many."""
        full: dict[int, set[str]] = {}
        for level, index, width in changed_tiles(old, new):
            if width == TILE_WIDTH:
                full.setdefault(level, set()).add(_path(level, index, width))
        gone = []
        try:
            for level, paths in full.items():
                if len(paths) <= 64:  # a few tiles: list each one's partials
                    for path in paths:
                        gone += self.bucket.list(path + ".p/")
                else:  # many (a bucket catching up): one listing of the level
                    prefix = _path(level, 0, TILE_WIDTH).rsplit("/", 1)[0] + "/"
                    gone += [n for n in self.bucket.list(prefix) if n.partition(".p/")[0] in paths and ".p/" in n]
            self.bucket.delete(gone)
        except Exception as e:  # noqa: BLE001 - garbage only: swept again at the next takeover
            log.warning("sweeping partial tiles failed: %s", e)
            return 0
        return len(gone)

    def close(self) -> None:
        """Nothing is flushed here: a checkpoint is written only by the role's holder, fenced
        (the appender does it before it gives the role up)."""
        self._pool.shutdown(wait=True)


def _parsed(note: str) -> tuple[str, int, bytes]:
    """(origin, size, root) of a checkpoint note (its signatures are its readers' business)."""
    cp = parse_checkpoint(parse_note(note).text)
    return cp.origin, cp.size, cp.root


def put_checkpoint(bucket: Bucket, key: str, note: str, size: int) -> bool:
    """The checkpoint object at `key` := `note` (of a tree of `size`), unless it holds a
    larger tree (then False): a published checkpoint never goes backwards, whoever writes
    it. Read, compare, write conditionally on the version read; a lost race is read again.
    ForkError for another root at the same size or another log's checkpoint."""
    origin, _, root = _parsed(note)
    for _ in range(5):
        current = bucket.get_versioned(key)
        etag = None
        if current is not None:
            etag = current[1]
            try:
                theirs, have, have_root = _parsed(current[0].decode())
            except (FormatError, UnicodeDecodeError) as e:
                log.error("the bucket's checkpoint object is not a checkpoint (%s); replacing it", e)
                theirs, have, have_root = origin, -1, b""
            if theirs != origin:
                raise ForkError(f"the bucket holds a checkpoint of another log ({theirs!r}, not {origin!r})")
            if have > size:
                log.info("the bucket already holds a checkpoint of size %d; not writing size %d", have, size)
                return False
            if have == size and have_root != root:
                raise ForkError(f"the bucket holds another root for tree size {size}")
            if current[0] == note.encode():
                return False
        if bucket.put_if(key, note.encode(), etag):
            return True
    raise Unavailable("the bucket's checkpoint kept changing under this writer", retry_after=1)
