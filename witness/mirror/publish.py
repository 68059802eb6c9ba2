"""Publishing a mirror's copies to an S3-compatible bucket (`bucket_url`), so that any static
host or CDN serves the monitoring prefix with no mirror process in the path.

Under `<hex SHA-256 of the origin>/` the bucket gets what the mirror serves itself, as
C2SP tlog-tiles: full tiles and entry bundles, written create-only (`tlog.storage.bucket`:
the same key always holds the same bytes; other bytes there are a fork and nothing is
written), the partial tiles of each cosigned size, then the `checkpoint` object, the only
one overwritten. So a reader of the bucket never sees a checkpoint whose tiles are
missing.

The local store stays the truth, and what the mirror cosigns is what it stored (that is
the cosignature's meaning): publication follows each cosigned checkpoint in its own
thread, coalesced to the latest one, and a failed write is retried with the next. After a
restart it resumes from the size of the bucket's checkpoint object.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from tlog.formats.checkpoint import parse_checkpoint
from tlog.formats.note import parse_note
from tlog.formats.tiles import TILE_WIDTH, entries_path, tile_path
from tlog.storage.bucket import Bucket, changed_tiles, partial_tiles, put_checkpoint

from ..core import origin_path
from .store import MirrorStore

log = logging.getLogger("oap.mirror.publish")


class BucketPublisher:
    def __init__(self, bucket: Bucket, store: MirrorStore) -> None:
        self.bucket, self.store = bucket, store
        self.errors = 0  # failed publications (a metric)
        self._published: dict[str, int] = {}  # origin -> size of the bucket's checkpoint object
        self._latest: dict[str, tuple[str, int]] = {}  # origin -> (note, size) to publish next
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oap-mirror-publish")

    def submit(self, origin: str, note: str, size: int) -> None:
        """Publish `note` (of a tree of `size`) soon; a later call for the same log replaces it."""
        with self._lock:
            queued = origin in self._latest
            self._latest[origin] = (note, size)
        if not queued:
            self._pool.submit(self._run, origin)

    def _run(self, origin: str) -> None:
        with self._lock:
            note, size = self._latest.pop(origin)
        try:
            self.publish(origin, note, size)
        except Exception as e:  # noqa: BLE001 - retried with the next cosigned checkpoint
            self.errors += 1
            log.error("%s: publishing size %d to the bucket failed: %s", origin, size, e)

    def _start(self, origin: str) -> int:
        size = self._published.get(origin)
        if size is None:
            raw = self.bucket.get(origin_path(origin) + "/checkpoint")
            size = parse_checkpoint(parse_note(raw).text).size if raw else 0
            self._published[origin] = size
        return size

    def publish(self, origin: str, note: str, size: int) -> None:
        """Write the tiles and bundles a tree of `size` has and the bucket's last one had not,
        its partial tiles, then `note` as the checkpoint object."""
        old = self._start(origin)
        if size < old:
            return
        prefix = origin_path(origin) + "/"
        wanted = [t for t in changed_tiles(old, size) if t[2] == TILE_WIDTH] + partial_tiles(size)
        for level, index, width in wanted:
            if level < 0:
                data, path = self.store.bundle(origin, index, width), entries_path(index, width)
            else:
                data, path = self.store.tile(origin, level, index, width), tile_path(level, index, width)
            if data is None:
                raise RuntimeError(f"{origin}: {path} is not stored")
            put = self.bucket.put_bundle if level < 0 else self.bucket.put_create_only  # bundles gzip where it pays
            put(prefix + path, data)
        put_checkpoint(self.bucket, prefix + "checkpoint", note, size)  # never a smaller tree
        self._published[origin] = size

    def close(self) -> None:
        self._pool.shutdown(wait=True)
