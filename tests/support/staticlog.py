"""A static tlog-tiles log in a directory (tiles, entry bundles, a signed checkpoint), served by
the standard library's plain file server on 127.0.0.1: the kind of log a mirror follows
with no log process behind it. Used by the mirror's tests and benchmarks."""
from __future__ import annotations

import contextlib
import http.server
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import overload

import numpy as np

from tlog.formats.checkpoint import Checkpoint
from tlog.formats.hashing import leaf_hashes
from tlog.formats.keys import Signer
from tlog.formats.mirror import encode_header, encode_package, package_ranges
from tlog.formats.note import sign_note
from tlog.formats.tiles import TILE_WIDTH, encode_entry_bundle, entries_path, tiles_for_size
from tlog.merkle.subtrees import subtree_consistency_proof
from tlog.merkle.tree import TreeView
from tlog.storage.hashfiles import HashFiles

ORIGIN = "static.oap.localhost/log"
SEED = bytes(range(32))


def entries_for(n: int, size: int = 64) -> list[bytes]:
    """n distinct entries of `size` >= 8 bytes (index || pseudo-random filler)."""
    return LazyEntries(n, size)[0:n]


class LazyEntries(Sequence[bytes]):
    """The entries of `entries_for(n, size)`, each made when asked for: a log of any length
    in a few kB (index or slice)."""

    def __init__(self, n: int, size: int = 64) -> None:
        self.n, self.size = n, size
        self.filler = np.random.default_rng(1).integers(0, 256, size=size * 1024, dtype=np.uint8).tobytes()

    def __len__(self) -> int:
        return self.n

    def _entry(self, i: int) -> bytes:
        off = (i % 1024) * self.size
        return i.to_bytes(8, "big") + self.filler[off:off + self.size - 8]

    @overload
    def __getitem__(self, i: int) -> bytes: ...

    @overload
    def __getitem__(self, i: slice) -> list[bytes]: ...

    def __getitem__(self, i: int | slice) -> bytes | list[bytes]:
        if isinstance(i, slice):
            return [self._entry(k) for k in range(*i.indices(self.n))]
        if not -self.n <= i < self.n:
            raise IndexError(i)
        return self._entry(i % self.n)


class StaticLog:
    """The entries' tree (hash files in `directory/.hashes`), published by `publish(size)`."""

    def __init__(self, directory: Path, entries: Sequence[bytes], *, origin: str = ORIGIN, seed: bytes = SEED) -> None:
        self.dir, self.entries, self.origin = Path(directory), entries, origin
        self.dir.mkdir(parents=True, exist_ok=True)
        self.signer = Signer(origin, seed)
        self.hashes = HashFiles(self.dir / ".hashes")
        for lo in range(0, len(entries), 1 << 16):
            self.hashes.append(lo, leaf_hashes(entries[lo:lo + (1 << 16)]))

    @property
    def vkey(self) -> str:
        return self.signer.vkey

    def root(self, size: int) -> bytes:
        return TreeView(size, self.hashes.read).root

    def note(self, size: int) -> str:
        return sign_note(Checkpoint(self.origin, size, self.root(size)).to_text(), [self.signer])

    def mth(self, lo: int, hi: int) -> bytes:
        level = (hi - lo - 1).bit_length()
        if hi - lo == 1 << level:
            return self.hashes.read(level, lo >> level)
        return TreeView(hi, self.hashes.read).node(level, lo >> level)

    def publish(self, size: int) -> None:
        """Write every tile and bundle of the tree of `size` (as a log that grew there would
        have them), then its checkpoint."""
        for t in tiles_for_size(size):
            p = self.dir / t.path
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(self.hashes.read_range(8 * t.level, t.index * TILE_WIDTH, t.width))
            if t.level == 0:
                p = self.dir / entries_path(t.index, t.width)
                p.parent.mkdir(parents=True, exist_ok=True)
                first = t.index * TILE_WIDTH
                p.write_bytes(encode_entry_bundle(self.entries[first:first + t.width]))
        tmp = self.dir / ".checkpoint"
        tmp.write_text(self.note(size))
        tmp.replace(self.dir / "checkpoint")

    def bodies(self, size: int, *, start: int = 0, per_request: int = 32, level: int = 1) -> list[bytes]:
        """gzip add-entries bodies for [start, size) towards a checkpoint of `size`, `per_request`
        packages each (level 0: not compressed)."""
        out = []
        ranges = list(package_ranges(start, size))
        for i in range(0, len(ranges), per_request):
            group = ranges[i:i + per_request]
            raw = [encode_header(self.origin, group[0][1], size)]
            for sub, first, stop in group:
                proof = subtree_consistency_proof(sub, stop, size, self.mth)
                raw.append(encode_package(self.entries[first:stop], proof))
            out.append(zlib.compress(b"".join(raw), level, wbits=31) if level else b"".join(raw))
        return out


class _Files(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a follower fetches thousands of bundles
    delay = 0.0

    def do_GET(self) -> None:
        if self.delay:
            time.sleep(self.delay)
        super().do_GET()

    def log_message(self, *args: object) -> None:
        pass


class StaticServer(http.server.ThreadingHTTPServer):
    """The standard library's static file server, with a listen backlog deep enough for a
    client's parallel fetches (socketserver's default of 5 drops SYNs: 1 s stalls)."""

    request_queue_size = 128
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """A client that hangs up mid-answer (a follower killed on purpose) is not news."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def serve_directory(directory: Path, *, delay: float = 0.0) -> Iterator[str]:
    """Serve `directory` on 127.0.0.1 (a free port); each GET waits `delay` s first. Yields the URL."""
    handler = type("Files", (_Files,), {"delay": delay})
    httpd = StaticServer(("127.0.0.1", 0), partial(handler, directory=str(directory)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)
