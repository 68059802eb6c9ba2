"""Audit a log from its tlog-tiles alone, as a monitor does: from the log's own URL or
from any static copy of its bucket (a CDN), with no log process in the path.

The checkpoint is verified against a trust policy (log key, witness quorum); every
tile needed for its size is fetched and the root recomputed from them (C2SP
tlog-tiles: tile data is untrusted until it hashes to a verified root); optionally
every entry bundle is fetched and each entry's leaf hash compared with the level-0
tiles; and, given an earlier verified checkpoint, the new one is checked to extend it.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from tlog.client.tilereader import TileTree, view, with_tiles
from tlog.client.verifier import TrustPolicy, VerifiedCheckpoint
from tlog.errors import VerificationError
from tlog.formats.hashing import leaf_hash
from tlog.formats.tiles import TILE_WIDTH, entries_path, parse_entry_bundle
from tlog.merkle.tree import StreamingRoot
from tlog.merkle.verify import verify_consistency

Fetch = Callable[[str], Awaitable[bytes]]


@dataclass(frozen=True)
class Audit:
    checkpoint: VerifiedCheckpoint
    tiles: int  # hash tiles fetched and checked
    entries: int  # entries checked against their leaf hashes


async def audit(fetch: Fetch, policy: TrustPolicy, *, entries: bool = True,
                previous: tuple[int, bytes] | None = None) -> Audit:
    """Verify the log `fetch` reads (paths relative to the log's root: "checkpoint",
    "tile/0/000", ...). Raises VerificationError (or a subclass) on the first problem.

    With `entries`, every level-0 tile and entry bundle is read: each entry must hash to
    its leaf, and all leaves to the root (the whole log, one pass).

    `previous`: a (size, root) the caller verified before; the log must extend it.
    """
    note = (await fetch("checkpoint")).decode("utf-8")
    cp = policy.verify_checkpoint(note)
    size, root = cp.checkpoint.size, cp.checkpoint.root
    tree = TileTree(size)
    got = await with_tiles(tree, fetch, lambda t: view(t).root) if size else root
    if got != root:
        raise VerificationError("the tiles do not hash to the checkpoint's root")
    if previous is not None:
        old, old_root = previous
        if old > size:
            raise VerificationError(f"the log shrank from {old} to {size} entries")
        proof = await with_tiles(tree, fetch, lambda t: view(t).consistency_proof(old))
        verify_consistency(old, size, old_root, root, proof)
    checked = 0
    if entries and size:
        acc = StreamingRoot()  # O(log n) memory, whatever the size of the log
        for n in range((size + TILE_WIDTH - 1) // TILE_WIDTH):
            width = min(TILE_WIDTH, size - n * TILE_WIDTH)
            path = tree.tile_ref(0, n)
            tile = tree.tiles.get(path) or await fetch(path)
            if len(tile) != 32 * width:
                raise VerificationError(f"tile {path} has {len(tile)} bytes, not {32 * width}")
            data = parse_entry_bundle(await fetch(entries_path(n, width)))
            if len(data) != width:
                raise VerificationError(f"entry bundle {n} holds {len(data)} entries, not {width}")
            for k, entry in enumerate(data):
                if leaf_hash(entry) != tile[32 * k:32 * k + 32]:
                    raise VerificationError(f"entry {n * TILE_WIDTH + k} does not hash to its leaf in the tiles")
            acc.add(np.frombuffer(tile, dtype=np.uint8))
            checked += width
        if acc.root() != root:
            raise VerificationError("the entries do not hash to the checkpoint's root")
    return Audit(cp, len(tree.tiles), checked)

