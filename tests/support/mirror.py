"""Shared helpers for the mirror tests: an in-memory log of real entries that signs checkpoints
and builds add-checkpoint and add-entries bodies (with forks and lies), a mirror core on a
temporary store, and an `oap-mirror serve` process on 127.0.0.1."""
from __future__ import annotations

import asyncio
import hashlib
import json
import re
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from tlog.client.tilereader import TileTree, view, with_tiles
from tlog.formats.checkpoint import Checkpoint
from tlog.formats.hashing import leaf_hash
from tlog.formats.keys import CosignatureSigner, Signer, cosigner_verifier
from tlog.formats.mirror import add_checkpoint_body, encode_header, encode_package, package_ranges
from tlog.formats.note import Note, open_note, parse_note, parse_signature_lines, sign_note
from tlog.merkle.subtrees import subtree_consistency_proof
from tlog.merkle.tree import TreeView, build_levels
from witness.mirror.config import MirroredLog
from witness.mirror.core import Mirror
from witness.mirror.embedded import EmbeddedStore
from witness.mirror.tickets import TicketKey

from tests.support.services import Service

BIN = Path(sys.executable).parent
MIRROR_NAME = "mirror.test.example/m1"
MIRROR_SEED = bytes(range(100, 132))


@dataclass
class EntryLog:
    """A log of real entries (bytes) in memory; `fork(at, tag)` shares the first `at` entries."""

    origin: str = "log.test.example/mirrored"
    seed: bytes = bytes(range(32))
    entries: list[bytes] = field(default_factory=list)
    tag: bytes = b"a"

    @property
    def signer(self) -> Signer:
        return Signer(self.origin, self.seed)

    @property
    def vkey(self) -> str:
        return self.signer.vkey

    @property
    def config(self) -> MirroredLog:
        return MirroredLog(self.origin, self.vkey)

    def grow(self, n: int) -> EntryLog:
        start = len(self.entries)
        self.entries += [b"entry %d %s " % (i, self.tag) + bytes(i % 7) for i in range(start, start + n)]
        self.__dict__.pop("levels", None)
        return self

    def fork(self, at: int, tag: bytes) -> EntryLog:
        return EntryLog(self.origin, self.seed, list(self.entries[:at]), tag)

    @cached_property
    def levels(self) -> list[list[bytes]]:
        return build_levels([leaf_hash(e) for e in self.entries])

    def _complete(self, level: int, index: int) -> bytes:
        return self.levels[level][index]

    def view(self, size: int) -> TreeView:
        return TreeView(size, self._complete)

    def root(self, size: int) -> bytes:
        return self.view(size).root

    def checkpoint(self, size: int) -> str:
        return sign_note(Checkpoint(self.origin, size, self.root(size)).to_text(), [self.signer])

    def add_checkpoint(self, old: int, size: int) -> bytes:
        proof = self.view(size).consistency_proof(old) if 0 < old < size else []
        return add_checkpoint_body(old, proof, self.checkpoint(size))

    def mth(self, lo: int, hi: int) -> bytes:
        level = (hi - lo - 1).bit_length()
        return self.view(hi).node(level, lo >> level)

    def package(self, sub: int, start: int, end: int, size: int) -> bytes:
        return encode_package(self.entries[start:end], subtree_consistency_proof(sub, end, size, self.mth))

    def body(self, start: int, end: int, ticket: bytes = b"", *, packages: int | None = None,
             origin: str | None = None) -> bytes:
        """An add-entries body for [start, end) (the first `packages` packages, or all)."""
        parts = [encode_header(origin or self.origin, start, end, ticket)]
        for i, (sub, first, stop) in enumerate(package_ranges(start, end)):
            if packages is not None and i == packages:
                break
            parts.append(self.package(sub, first, stop, end))
        return b"".join(parts)


def cosigner() -> CosignatureSigner:
    return CosignatureSigner(MIRROR_NAME, MIRROR_SEED)


def cosigner_key():
    return cosigner_verifier(cosigner().verifier)


def make_mirror(tmp: Path, logs: list[MirroredLog], **kw) -> Mirror:
    store = EmbeddedStore(tmp, hash_sync_interval=kw.pop("hash_sync_interval", 10.0))
    return Mirror([cosigner()], logs, store, TicketKey(bytes(32)), **kw)


def chunks(body: bytes, size: int = 1000):
    """A body reader for `Mirror.add_entries` that hands `body` over `size` bytes at a time."""
    pos = 0

    async def read() -> bytes:
        nonlocal pos
        out = body[pos:pos + size]
        pos += len(out)
        return out

    return read


def origin_hash(origin: str) -> str:
    return hashlib.sha256(origin.encode()).hexdigest()


def mirror_service(data: Path, logs: list[tuple[str, str, str]], *extra: str, name: str = MIRROR_NAME,
                   settings: str = "", env: dict | None = None) -> Service:
    """`oap-mirror serve` for logs (origin, vkey, url) with its key made from MIRROR_SEED."""
    from tlog.runtime.keyfiles import write_private_key

    data.mkdir(parents=True, exist_ok=True)
    key = data / "mirror.key"
    if not key.exists():
        write_private_key(key, CosignatureSigner(name, MIRROR_SEED).to_skey())
    cfg = data / "mirror.toml"
    rows = "".join(f'\n[[mirror.logs]]\norigin = "{o}"\nvkey = "{v}"\n' + (f'url = "{u}"\n' if u else "")
                   for o, v, u in logs)
    cfg.write_text(f'[mirror]\nname = "{name}"\nport = 0\nrate_limit = 0\n{settings}\n{rows}')
    return Service("mirror", [str(BIN / "oap-mirror"), "serve", "--config", str(cfg), "--data", str(data), *extra],
                   env)


def metric(text: str, name: str, origin: str | None = None) -> float:
    """The value of a Prometheus sample in `text` (0 when absent)."""
    label = f'{{origin="{origin}"}}' if origin else ""
    m = re.search(rf"^{re.escape(name)}{re.escape(label)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def http(url: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, dict, bytes]:
    """(status, headers, body) of a GET, or of a POST of `body`."""
    req = urllib.request.Request(url, data=body, headers=headers or {}, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def info_row(url: str) -> dict:
    """The one log's row of a mirror's /v1/info (size, next_entry, ...)."""
    (row,) = json.loads(http(url + "/v1/info")[2])["logs"]
    return row


def check_cosigned(checkpoint: str, lines: str) -> None:
    """The cosignature lines a mirror answered verify over `checkpoint` with the mirror's key."""
    open_note(Note(parse_note(checkpoint).text, parse_signature_lines(lines)), [cosigner_key()])


def wait_for(what: str, cond, timeout: float = 180.0, every: float = 0.02):
    """Poll `cond` until it returns something true (returned), for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def served_root(prefix: str, size: int) -> bytes:
    """The root of the tree of `size` computed from the tiles under `prefix` alone."""

    async def fetch(path: str) -> bytes:
        status, _, data = http(f"{prefix}/{path}")
        assert status == 200, path
        return data

    return asyncio.run(with_tiles(TileTree(size), fetch, lambda t: view(t).root))
