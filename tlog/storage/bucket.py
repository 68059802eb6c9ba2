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
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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
    def from_config(cls, url: str, *, region: str = "us-east-1", credentials_file: Path | None = None) -> Bucket:
        """`url` is http(s)://host[:port]/bucket. Credentials come from `credentials_file`
        ("<access key> <secret key>", mode 0600, never logged) or from AWS_ACCESS_KEY_ID and
        AWS_SECRET_ACCESS_KEY."""
        import os
        from urllib.parse import urlsplit

        from obstore.store import S3Store

        parts = urlsplit(url)
        bucket = parts.path.strip("/")
        if not parts.netloc or not bucket or "/" in bucket:
            raise ConfigError(f"bucket_url must be http(s)://host[:port]/bucket, not {url!r}")
        if credentials_file is not None:
            from tlog.service.keyfiles import read_private_key

            try:
                key_id, secret = read_private_key(credentials_file).split()
            except ValueError:
                raise ConfigError(f"{credentials_file}: expected '<access key> <secret key>'") from None
        else:
            key_id, secret = os.environ.get("AWS_ACCESS_KEY_ID", ""), os.environ.get("AWS_SECRET_ACCESS_KEY", "")
            if not key_id or not secret:
                raise ConfigError("bucket credentials: set bucket_credentials_file, or AWS_ACCESS_KEY_ID and "
                                  "AWS_SECRET_ACCESS_KEY")
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
        except NotFoundError:
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


class TilePublisher:
    """Publishes a log's tiles, entry bundles and checkpoint to a `Bucket`."""

    def __init__(self, bucket: Bucket, *, checkpoint_interval: float = 1.0, workers: int = 8) -> None:
        self.bucket, self.interval = bucket, checkpoint_interval
        self.errors = 0  # failed bucket writes (a metric)
        self.written = 0  # objects created
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="oap-bucket")
        self._partials: dict[tuple[int, int], str] = {}  # (level, index) -> the partial tile last written
        self._obsolete: list[str] = []
        self._pending: str | None = None
        self._last = 0.0
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def stage(self, hashes: HashReader, read_entries: Callable[[int, int], list[bytes]], old: int, new: int) -> None:
        """Write every tile and entry bundle of the tree of `new` leaves that the tree of
        `old` leaves did not have (create-only), before the checkpoint for `new` is signed."""
        work = []
        for level, index, width in changed_tiles(old, new):
            if level < 0:
                data = encode_entry_bundle(read_entries(index * TILE_WIDTH, width))
            else:
                data = hashes.read_range(level * TILE_HEIGHT, index * TILE_WIDTH, width)
            work.append((level, index, width, data))
        futures = [self._pool.submit(self.bucket.put_create_only, _path(lv, ix, w), d) for lv, ix, w, d in work]
        try:
            for f in futures:
                if f.result():
                    self.written += 1
        except Exception:
            self.errors += 1
            raise
        for level, index, width, _ in work:
            previous = self._partials.pop((level, index), None)
            if previous is not None:
                self._obsolete.append(previous)  # superseded by a wider or a full tile
            if width < TILE_WIDTH:
                self._partials[(level, index)] = _path(level, index, width)

    def publish_checkpoint(self, note: str) -> None:
        """Overwrite the checkpoint object, at most once per interval (the latest note wins),
        then delete the partial tiles this checkpoint no longer needs."""
        with self._lock:
            self._pending = note
            wait = self._last + self.interval - time.monotonic()
            if wait > 0:
                if self._timer is None:
                    self._timer = threading.Timer(wait, self._flush)
                    self._timer.daemon = True
                    self._timer.start()
                return
        self._flush()

    def _flush(self) -> None:
        with self._lock:
            note, self._pending, self._timer = self._pending, None, None
            obsolete, self._obsolete = self._obsolete, []
            self._last = time.monotonic()
        if note is None:
            return
        try:
            self.bucket.put(CHECKPOINT_KEY, note.encode())
            self.bucket.delete(obsolete)
        except Exception as e:  # noqa: BLE001 - retried with the next checkpoint
            self.errors += 1
            log.warning("publishing the checkpoint object failed (retried with the next one): %s", e)
            with self._lock:
                if self._pending is None:
                    self._pending = note
                self._obsolete.extend(obsolete)

    def flush(self) -> None:
        """Write a pending checkpoint now (at shutdown)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
        self._flush()

    def sweep(self, old: int, new: int) -> int:
        """Delete the partial tiles made obsolete by the tiles that became full between trees
        of `old` and `new` leaves (those a crash left behind); returns how many."""
        gone = []
        for level, index, width in changed_tiles(old, new):
            if width == TILE_WIDTH:
                prefix = _path(level, index, width) + ".p/"
                gone += self.bucket.list(prefix)
        self.bucket.delete(gone)
        return len(gone)

    def close(self) -> None:
        self.flush()
        self._pool.shutdown(wait=True)
