"""RFC 9162 §2.1 Merkle trees addressed by (level, index) nodes.

The tree of size n is the RFC 9162 tree: node (k, j) covers leaves
[j*2^k, min((j+1)*2^k, n)). A node whose range is full is *complete* and never
changes once it exists, so a store keeps every complete node on disk (one file
per level) and a proof is a lookup. The at most one incomplete node per level
lies on the right edge; its hash is derived from complete nodes and depends on
n, so `TreeView` computes the right edge once per size.

This module is pure: storage comes in as a `complete(level, index) -> bytes`
callable. Verifiers live in `tlog.merkle.verify` and share no code with these builders.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from tlog.formats.hashing import EMPTY_ROOT, leaf_hash, node_hash, node_hashes

CompleteNode = Callable[[int, int], bytes]


@runtime_checkable
class HashReader(Protocol):
    """Stored complete-node hashes of the committed tree (RFC 9162 §2.1), by level and
    index at that level: `tlog.HashReader` of Go's sumdb, batched for numpy.

    Only nodes of a committed tree are asked for. `gather` is the batched-proof hot
    path: one call per tree level for a whole batch of proofs.
    """

    def read(self, level: int, index: int) -> bytes:
        """One node's 32 bytes."""
        ...

    def gather(self, level: int, indices: np.ndarray, *, need: int | None = None) -> np.ndarray:
        """Nodes `indices` of `level` as an (n, 32) uint8 array; `need` is how many nodes
        the level holds at the size served (a hint for the backend's maps)."""
        ...

    def read_range(self, level: int, start: int, count: int) -> bytes:
        """`count` consecutive nodes from `start` (a hash tile's bytes)."""
        ...


def height(size: int) -> int:
    """Number of levels above the leaves: ceil(log2(size)), 0 for size <= 1."""
    return (size - 1).bit_length() if size > 1 else 0


class TreeView:
    """The RFC 9162 tree of one `size` over complete nodes from `complete`.

    `edge[k]` is the hash of the incomplete node at level k (index size >> k),
    present only when size is not a multiple of 2^k.
    """

    __slots__ = ("complete", "edge", "root", "size")

    def __init__(self, size: int, complete: CompleteNode) -> None:
        if size < 0:
            raise ValueError("negative tree size")
        self.size = size
        self.complete = complete
        self.edge: dict[int, bytes] = {}
        for k in range(1, height(size) + 1):
            if size % (1 << k) == 0:
                continue
            j = size >> k
            rest = size - (j << k)  # leaves of the incomplete node at level k
            half = 1 << (k - 1)
            if rest <= half:
                # Only a left child: RFC 9162 promotes it unchanged.
                self.edge[k] = self.edge[k - 1] if rest < half else complete(k - 1, 2 * j)
            else:
                self.edge[k] = node_hash(complete(k - 1, 2 * j), self.edge[k - 1])
        if size == 0:
            self.root = EMPTY_ROOT
        elif size & (size - 1) == 0:
            self.root = complete(height(size), 0)
        else:
            self.root = self.edge[height(size)]

    def node(self, level: int, index: int) -> bytes:
        """Hash of node (level, index); it must start inside the tree."""
        start = index << level
        if start >= self.size:
            raise IndexError(f"node ({level}, {index}) is outside a tree of size {self.size}")
        if start + (1 << level) <= self.size:
            return self.complete(level, index)
        return self.edge[level]

    def path(self, level: int, index: int) -> list[bytes]:
        """Sibling hashes from node (level, index) up to the root (RFC 9162 order)."""
        out: list[bytes] = []
        k, j, n = level, index, self.size
        while (1 << k) < n:
            s = j ^ 1
            if (s << k) < n:
                out.append(self.node(k, s))
            k += 1
            j >>= 1
        return out

    def inclusion_proof(self, index: int) -> list[bytes]:
        """RFC 9162 §2.1.3.1 PATH(index, D[0:size])."""
        if not 0 <= index < self.size:
            raise IndexError(f"index {index} is not in a tree of size {self.size}")
        return self.path(0, index)

    def consistency_proof(self, old: int) -> list[bytes]:
        """RFC 9162 §2.1.4.1 PROOF(old, D[0:size]).

        The proof is the largest complete subtree ending at `old` (omitted when
        old is a power of two: the verifier knows it as the old root) followed
        by that subtree's path to the new root.
        """
        if not 0 <= old <= self.size:
            raise IndexError(f"old size {old} is not within 0..{self.size}")
        if old == 0 or old == self.size:
            return []
        level = (old & -old).bit_length() - 1
        index = (old - 1) >> level
        p = self.path(level, index)
        return p if index == 0 else [self.node(level, index), *p]


# --- naive reference (tests and tiny trees): the RFC 9162 recursion verbatim --


def _split(n: int) -> int:
    k = 1
    while k << 1 < n:
        k <<= 1
    return k


def mth(leaves: Sequence[bytes]) -> bytes:
    """RFC 9162 §2.1.1 MTH over leaf *hashes*."""
    n = len(leaves)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return leaves[0]
    k = _split(n)
    return node_hash(mth(leaves[:k]), mth(leaves[k:]))


def ref_inclusion(m: int, leaves: Sequence[bytes]) -> list[bytes]:
    """RFC 9162 §2.1.3.1 PATH(m, D[n]) over leaf hashes."""
    n = len(leaves)
    if n <= 1:
        return []
    k = _split(n)
    if m < k:
        return [*ref_inclusion(m, leaves[:k]), mth(leaves[k:])]
    return [*ref_inclusion(m - k, leaves[k:]), mth(leaves[:k])]


def ref_consistency(m: int, leaves: Sequence[bytes]) -> list[bytes]:
    """RFC 9162 §2.1.4.1 PROOF(m, D[n]) over leaf hashes."""

    def subproof(m: int, d: Sequence[bytes], b: bool) -> list[bytes]:
        n = len(d)
        if m == n:
            return [] if b else [mth(d)]
        k = _split(n)
        if m <= k:
            return [*subproof(m, d[:k], b), mth(d[k:])]
        return [*subproof(m - k, d[k:], False), mth(d[:k])]

    if m == 0 or m == len(leaves):
        return []
    return subproof(m, leaves, True)


def build_levels(leaves: Sequence[bytes]) -> list[list[bytes]]:
    """All complete nodes, level by level, for an in-memory tree (tests, clients)."""
    levels = [list(leaves)]
    while len(levels[-1]) >= 2:
        prev = levels[-1]
        levels.append([node_hash(prev[2 * i], prev[2 * i + 1]) for i in range(len(prev) // 2)])
    return levels


def memory_view(leaves: Sequence[bytes]) -> TreeView:
    """A TreeView over an in-memory list of leaf hashes."""
    levels = build_levels(leaves)
    return TreeView(len(leaves), lambda k, j: levels[k][j])


def hash_entries(entries: Sequence[bytes]) -> list[bytes]:
    return [leaf_hash(e) for e in entries]


def root_of_leaves(leaves: np.ndarray) -> bytes:
    """RFC 9162 MTH of an (n, 32) array of leaf hashes, one batched hashing pass per level.

    Pairing adjacent nodes and carrying an odd last node up unchanged gives the same
    root as the RFC's split at the largest power of two below n.
    """
    level = np.ascontiguousarray(leaves, dtype=np.uint8).reshape(-1, 32)
    if level.shape[0] == 0:
        return EMPTY_ROOT
    while level.shape[0] > 1:
        even = level.shape[0] & ~1
        paired = node_hashes(level[0:even:2], level[1:even:2])
        level = np.concatenate([paired, level[even:]]) if even < level.shape[0] else paired
    return level[0].tobytes()


class StreamingRoot:
    """The RFC 9162 root of leaf hashes given in order, a chunk at a time, in O(log n)
    memory: the perfect subtrees that make up the leaves so far, largest first (the same
    decomposition as the right edge of `TreeView`). For checking a stream of entries, such
    as a backup, against a checkpoint before any of it is written anywhere."""

    def __init__(self) -> None:
        self.size = 0
        self._stack: list[tuple[int, bytes]] = []  # (leaves, hash) of each perfect subtree

    def add(self, leaves: np.ndarray) -> None:
        """Append an (m, 32) array of leaf hashes."""
        leaves = np.ascontiguousarray(leaves, dtype=np.uint8).reshape(-1, 32)
        i, n = 0, leaves.shape[0]
        while i < n:
            # the largest piece that is a perfect subtree where it starts and fits in what is left
            align = self.size & -self.size if self.size else 1 << 62
            k = min(align, 1 << ((n - i).bit_length() - 1))
            self._push(k, root_of_leaves(leaves[i : i + k]))
            i += k

    def _push(self, k: int, h: bytes) -> None:
        self.size += k
        while self._stack and self._stack[-1][0] == k:
            left = self._stack.pop()[1]
            h, k = node_hash(left, h), 2 * k
        self._stack.append((k, h))

    def root(self) -> bytes:
        if not self._stack:
            return EMPTY_ROOT
        h = self._stack[-1][1]
        for _, left in reversed(self._stack[:-1]):
            h = node_hash(left, h)
        return h
