"""A sorted Merkle tree of the status ids that are not plainly good: membership and non-membership proofs.

The leaves are the revoked or suspended ids of one status epoch, sorted by the bytes of
their UTF-8 key, hashed as RFC 9162 leaves (`tlog.formats.hashing.leaf_hash`) into an
RFC 9162 tree (`tlog.merkle.tree.memory_view`). An id is proven revoked by its leaf
and inclusion proof; an id is proven *not* revoked by the two adjacent leaves
that bracket it (index i and i+1, keys below and above it), or by the first
or last leaf alone when it sorts outside the tree, or by an empty tree.
Adjacency is checkable because the tree size is part of the signed epoch
statement. The tree being sorted is what the registry's signature asserts,
and anyone with a mirror can rebuild it from the add-only history
(`registry.standing.standings`) and compare roots.

Leaf bytes are the JCS of the leaf objects `registry.status` documents. This module
only builds proofs; `registry.statusverify` checks them and shares no code.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from tlog.formats.encoding import b64enc
from tlog.formats.hashing import leaf_hash
from tlog.merkle.tree import memory_view


@dataclass(frozen=True)
class Leaf:
    key: str
    data: bytes  # canonical leaf bytes, the id inside them equals `key`


class SortedTree:
    def __init__(self, leaves: list[Leaf]) -> None:
        self.leaves = sorted(leaves, key=lambda leaf: leaf.key.encode("utf-8"))
        self.keys = [leaf.key.encode("utf-8") for leaf in self.leaves]
        if any(a == b for a, b in zip(self.keys, self.keys[1:])):
            raise ValueError("duplicate key in a sorted tree")
        self.view = memory_view([leaf_hash(leaf.data) for leaf in self.leaves])

    @property
    def size(self) -> int:
        return len(self.leaves)

    @property
    def root(self) -> bytes:
        return self.view.root

    def find(self, key: str) -> int | None:
        k = key.encode("utf-8")
        i = bisect.bisect_left(self.keys, k)
        return i if i < len(self.keys) and self.keys[i] == k else None

    def _leaf(self, i: int) -> dict[str, Any]:
        return {"index": i, "leaf": b64enc(self.leaves[i].data),
                "inclusion_proof": [b64enc(h) for h in self.view.inclusion_proof(i)]}

    def membership(self, key: str) -> dict[str, Any]:
        i = self.find(key)
        if i is None:
            raise KeyError(key)
        return {"type": "sorted-merkle-membership", **self._leaf(i)}

    def absence(self, key: str) -> dict[str, Any]:
        """The bracketing leaves of a key that is not in the tree."""
        k = key.encode("utf-8")
        i = bisect.bisect_left(self.keys, k)
        if i < len(self.keys) and self.keys[i] == k:
            raise KeyError(f"{key} is in the tree")
        return {"type": "sorted-merkle-absence",
                "left": self._leaf(i - 1) if i > 0 else None,
                "right": self._leaf(i) if i < len(self.keys) else None}
