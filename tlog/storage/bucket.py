"""A log published to an S3-compatible bucket under the C2SP tlog-tiles paths.

Tiles and entry bundles are create-only: a path always holds the same bytes, so a
write that finds an object already there succeeds if the bytes are equal and is a
fork (ForkError) if they differ (as Tessera and Sunlight do). The checkpoint is the
one object that is overwritten, at most once per `checkpoint_interval`. Any static
host or CDN in front of the bucket then serves readers, monitors and witnesses with
no log process in the path.

The order that survives a crash at any step (`tlog.storage.postgres`): stage tiles
and bundles, compare-and-swap the checkpoint in the database, publish the
checkpoint object. A tile staged for entries that are already sequenced can only
ever have one content, so staging again after a crash writes the same bytes.

Obsolete partial tiles (`N.p/W`) are deleted once the full tile `N` exists: right
away for those this process wrote, and by `sweep` for any a crash left behind.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from tlog.errors import ConfigError, ForkError, Unavailable
from tlog.formats.tiles import TILE_HEIGHT, TILE_WIDTH, encode_entry_bundle, entries_path, tile_path
from tlog.merkle.tree import HashReader

log = logging.getLogger("oap.tlog.bucket")

CHECKPOINT_KEY = "checkpoint"


class Bucket:
    """The few object operations publication needs, over obstore's S3 client."""

    def __init__(self, store) -> None:
        self.store = store

    @classmethod
    def from_config(cls, url: str, *, key_id: str, secret: str, region: str = "us-east-1") -> Bucket:
        """`url` is http(s)://host[:port]/bucket; the access key and secret come from the
        caller (a 0600 file or the environment: `tlog.server.service.bucket_credentials`)."""
        from urllib.parse import urlsplit

        from obstore.store import S3Store

        parts = urlsplit(url)
        bucket = parts.path.strip("/")
        if not parts.netloc or not bucket or "/" in bucket:
            raise ConfigError(f"bucket_url must be http(s)://host[:port]/bucket, not {url!r}")
        store = S3Store(bucket, endpoint=f"{parts.scheme}://{parts.netloc}", region=region,
                        access_key_id=key_id, secret_access_key=secret, virtual_hosted_style_request=False,
                        client_options={"allow_http": parts.scheme == "http", "timeout": "30s",
                                        "connect_timeout": "5s"})
        return cls(store)

    def put_create_only(self, key: str, data: bytes) -> bool:
        """Create `key` holding `data`: True if created, False if it already held exactly
        `data`; ForkError if it holds anything else."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            obstore.put(self.store, key, data, mode="create")
            return True
        except (AlreadyExistsError, PreconditionError):
            if self.get(key) != data:
                raise ForkError(f"the bucket already holds different bytes at {key}") from None
            return False
        except Exception as e:  # noqa: BLE001 - any transport or service error
            raise Unavailable(f"bucket write failed at {key}: {type(e).__name__}: {e}"[:300], retry_after=1) from None

    def put(self, key: str, data: bytes) -> None:
        import obstore

        try:
            obstore.put(self.store, key, data)
        except Exception as e:  # noqa: BLE001
            raise Unavailable(f"bucket write failed at {key}: {type(e).__name__}: {e}"[:300], retry_after=1) from None

    def get(self, key: str) -> bytes | None:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            return bytes(obstore.get(self.store, key).bytes())
        except (NotFoundError, FileNotFoundError):  # obstore raises the latter for a missing object
            return None

    def delete(self, keys: Iterable[str]) -> None:
        import obstore

        keys = list(keys)
        if keys:
            obstore.delete(self.store, keys)

    def list(self, prefix: str) -> list[str]:
        import obstore

        return [meta["path"] for batch in obstore.list(self.store, prefix=prefix) for meta in batch]


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
    """Publishes a log's tiles, entry bundles and checkpoint to a `Bucket`.

    Full tiles and bundles are written as the tree grows (`stage`, before each signature);
    partial ones only for the sizes whose checkpoint object is written, at most once per
    interval (`publish_checkpoint` then `flush_due`): a reader of the bucket needs the
    partial tiles of the checkpoint it reads, and no others. All on the integrator's thread.
    """

    def __init__(self, bucket: Bucket, *, checkpoint_interval: float = 1.0, workers: int = 8) -> None:
        self.bucket, self.interval = bucket, checkpoint_interval
        self.errors = 0  # failed bucket writes (a metric)
        self.written = 0  # objects created
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="oap-bucket")
        self._partials: dict[tuple[int, int], str] = {}  # (level, index) -> the partial tile last written
        self._obsolete: list[str] = []
        self._pending: tuple[str, int] | None = None  # (note, size) waiting for its turn
        self._last = 0.0
        self._hashes: HashReader | None = None
        self._read_entries: Callable[[int, int], list[bytes]] | None = None

    def _put_all(self, work: list[tuple[int, int, int, bytes]]) -> None:
        futures = [self._pool.submit(self.bucket.put_create_only, _path(lv, ix, w), d) for lv, ix, w, d in work]
        try:
            for f in futures:
                if f.result():
                    self.written += 1
        except Exception:
            self.errors += 1
            raise

    def _tiles(self, wanted: list[tuple[int, int, int]]) -> list[tuple[int, int, int, bytes]]:
        assert self._hashes is not None and self._read_entries is not None
        work = []
        bundles = [(ix, w) for lv, ix, w in wanted if lv < 0]
        if bundles:  # one read of the entries for all the bundles
            first = bundles[0][0] * TILE_WIDTH
            data = self._read_entries(first, bundles[-1][0] * TILE_WIDTH + bundles[-1][1] - first)
        for level, index, width in wanted:
            if level < 0:
                at = index * TILE_WIDTH - first
                work.append((level, index, width, encode_entry_bundle(data[at:at + width])))
            else:
                work.append((level, index, width,
                             self._hashes.read_range(level * TILE_HEIGHT, index * TILE_WIDTH, width)))
        return work

    def stage(self, hashes: HashReader, read_entries: Callable[[int, int], list[bytes]], old: int, new: int) -> None:
        """Write every full tile and entry bundle that the tree of `new` leaves has and the tree
        of `old` leaves had not (create-only), before the checkpoint for `new` is signed."""
        self._hashes, self._read_entries = hashes, read_entries
        full = [t for t in changed_tiles(old, new) if t[2] == TILE_WIDTH]
        self._put_all(self._tiles(full))
        for level, index, _ in full:
            previous = self._partials.pop((level, index), None)
            if previous is not None:
                self._obsolete.append(previous)

    def publish_checkpoint(self, note: str, size: int) -> None:
        """The checkpoint object is to show `note` (of a tree of `size`); written by
        `flush_due` at most once per interval, the latest note winning."""
        self._pending = (note, size)
        self.flush_due()

    def flush_due(self) -> None:
        if self._pending is not None and time.monotonic() - self._last >= self.interval:
            self.flush()

    def flush(self) -> None:
        """Write the pending checkpoint now: its partial tiles first (create-only), then the
        checkpoint object, then delete the partial tiles that full ones replaced."""
        if self._pending is None:
            return
        note, size = self._pending
        try:
            partial = [t for t in partial_tiles(size) if self._partials.get((t[0], t[1])) != _path(*t)]
            self._put_all(self._tiles(partial))
            for level, index, width in partial:
                previous = self._partials.get((level, index))
                if previous is not None:
                    self._obsolete.append(previous)
                self._partials[(level, index)] = _path(level, index, width)
            self.bucket.put(CHECKPOINT_KEY, note.encode())
        except Exception:
            self.errors += 1
            raise
        self._pending, self._last = None, time.monotonic()
        obsolete, self._obsolete = self._obsolete, []
        try:
            self.bucket.delete(obsolete)
        except Exception as e:  # noqa: BLE001 - garbage only: swept later
            log.warning("deleting %d obsolete partial tiles failed: %s", len(obsolete), e)

    def sweep(self, old: int, new: int) -> int:
        """Delete the partial tiles made obsolete by the tiles that became full between trees
        of `old` and `new` leaves (those a crash left behind); returns how many."""
        gone = []
        for level, index, width in changed_tiles(old, new):
            if width == TILE_WIDTH:
                gone += self.bucket.list(_path(level, index, width) + ".p/")
        self.bucket.delete(gone)
        return len(gone)

    def close(self) -> None:
        try:
            self.flush()
        except Exception as e:  # noqa: BLE001 - the next integrator publishes it
            log.warning("the last checkpoint could not be written to the bucket: %s", e)
        self._pool.shutdown(wait=True)
