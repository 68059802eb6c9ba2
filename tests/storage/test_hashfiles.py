"""Every fast path of issue 7 against the plain reference on random trees.

The references: the RFC 9162 recursion (`ref_inclusion`, `ref_consistency`,
`mth`), `TreeView` over an in-memory tree, `tlog.merkle.verify`, pymerkle, json and
cbor2. No timing here: the benchmarks measure speed, these tests pin down
that the fast code computes the same bytes.
"""
from __future__ import annotations

import base64
import json
import random
import shutil

import cbor2
import numpy as np
import pytest
from pymerkle import InmemoryTree

from tlog.errors import InclusionProofError, InvalidInput, VerificationError
from tlog.formats import hashing
from tlog.formats.hashing import EMPTY_ROOT, leaf_hash, leaf_hashes, node_hash, node_hashes
from tlog.merkle.batchverify import flatten_proofs, verify_inclusion_batch
from tlog.merkle.proofs import ProofBatch, b64_rows, cbor_map, consistency_levels, inclusion_levels
from tlog.merkle.tree import TreeView, build_levels, memory_view, mth, ref_consistency, ref_inclusion
from tlog.merkle.verify import verify_consistency, verify_inclusion
from tlog.storage import hashfiles as hashfiles_mod
from tlog.storage.hashfiles import HashFiles

from tests.support.procmem import mapped_kb

SIZES = [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 100, 255, 256, 257, 511, 777, 1000, 1025]


def leaves_for(n: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed * 7919 + n)
    return [leaf_hash(rng.randbytes(rng.randrange(0, 24)) + i.to_bytes(4, "big")) for i in range(n)]


def filled(tmp_path, leaves: list[bytes], seed: int = 0, **kw) -> HashFiles:
    """Hash files filled by appends of random sizes (the writer's real pattern)."""
    hf = HashFiles(tmp_path / f"h{seed}-{len(leaves)}", **kw)
    rng = random.Random(seed)
    i = 0
    while i < len(leaves):
        k = rng.choice([1, 2, 3, 5, 64, 255, 256, 257, 1000])
        if rng.random() < 0.5:
            hf.append(i, leaves[i : i + k])
        else:
            hf.append(i, np.frombuffer(b"".join(leaves[i : i + k]), dtype=np.uint8).reshape(-1, 32))
        i += len(leaves[i : i + k])
    return hf


# --- hashing -------------------------------------------------------------------------


@pytest.fixture(params=["native", "hashlib"])
def hash_impl(request, monkeypatch):
    """Run a test through the C batch hashing and again through hashlib alone."""
    if request.param == "hashlib":
        monkeypatch.setattr(hashing, "native", None)
    elif hashing.native is None:
        pytest.skip("tlog._native is not built here")
    return request.param


def test_node_hashes_matches_node_hash(monkeypatch, hash_impl):
    monkeypatch.setattr(hashing, "_CHUNK", 7)  # exercise the chunk boundaries
    rng = np.random.default_rng(1)
    for m in (0, 1, 6, 7, 8, 50, 1000):
        left = rng.integers(0, 256, (m, 32), dtype=np.uint8)
        right = rng.integers(0, 256, (m, 32), dtype=np.uint8)
        want = [node_hash(a.tobytes(), b.tobytes()) for a, b in zip(left, right)]
        got = node_hashes(left, right)
        assert got.shape == (m, 32)
        assert [r.tobytes() for r in got] == want
        pairs = np.concatenate([left, right], axis=1)
        assert [r.tobytes() for r in hashing.node_hashes_of_pairs(pairs)] == want
        # a strided (non-contiguous) view of the same pairs
        wide = np.zeros((m, 128), dtype=np.uint8)
        wide[:, :64] = pairs
        assert [r.tobytes() for r in hashing.node_hashes_of_pairs(wide[:, :64])] == want
    entries = [bytes([i % 256]) * i for i in range(300)]
    assert [r.tobytes() for r in leaf_hashes(entries)] == [leaf_hash(e) for e in entries]
    assert leaf_hashes([]).shape == (0, 32)


def test_native_hashing_is_built_where_it_can_be():
    """`make` builds tlog._native wherever gcc and OpenSSL's headers exist; a silent
    fallback to hashlib would cost 4x on every batch path."""
    import shutil
    from pathlib import Path

    if not (shutil.which("gcc") and Path("/usr/include/openssl/sha.h").exists()):
        pytest.skip("no C compiler or OpenSSL headers: hashlib fallback expected")
    assert hashing.native is not None


def test_native_hashing_rejects_bad_buffers():
    if hashing.native is None:
        pytest.skip("tlog._native is not built here")
    from tlog import _native

    with pytest.raises(ValueError):
        _native.node_hashes_into(bytes(65), bytearray(32))
    with pytest.raises(ValueError):
        _native.node_hashes_into(bytes(64), bytearray(64))
    with pytest.raises(TypeError):
        _native.node_hashes_into(bytes(64), bytes(32))  # not writable
    with pytest.raises(TypeError):
        _native.leaf_hashes([b"ok", "not bytes"])
    with pytest.raises(TypeError):
        _native.leaf_hashes(5)


# --- hash files ----------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 255, 256, 257, 1000, 1500])
def test_vectorized_append_writes_every_complete_node(tmp_path, n, hash_impl):
    leaves = leaves_for(n)
    hf = filled(tmp_path, leaves, seed=n)
    levels = build_levels(leaves)
    for k, nodes in enumerate(levels):
        if not nodes:
            break
        assert hf.read_range(k, 0, len(nodes)) == b"".join(nodes)
        j = random.Random(k).randrange(len(nodes))
        assert hf.read(k, j) == nodes[j]
        idx = np.array([random.Random(k + i).randrange(len(nodes)) for i in range(20)])
        assert [r.tobytes() for r in hf.gather(k, idx)] == [nodes[i] for i in idx]
    assert TreeView(n, hf.read).root == mth(leaves)
    assert hf.intact_size(n) == n


@pytest.mark.parametrize("mask_windows", [64, 2])
def test_windowed_reads_equal_mapped_reads(tmp_path, monkeypatch, mask_windows):
    """The bounded-memory default (levels over the window read window by window
    through the map, each window unmapped after its rows are taken; single nodes
    and ranges by pread) reads the same bytes as the plain maps, whether a gather
    picks each window's rows by a mask or (over many windows) by sorting."""
    monkeypatch.setattr(hashfiles_mod, "_MASK_WINDOWS", mask_windows)
    n = 3000
    leaves = leaves_for(n, 3)
    plain = filled(tmp_path, leaves, seed=1, window=0)  # no limit: the plain maps
    windowed = HashFiles(plain.dir, window=4096)  # 128 nodes per window
    rng = np.random.default_rng(5)
    for k in range(4):
        rows = (n >> k)
        for idx in (rng.integers(0, rows, 500), np.arange(rows)[::-1], np.array([rows - 1]),
                    np.array([0, rows - 1, 127, 128, 129, 0])):  # any order, window edges, repeats
            assert np.array_equal(windowed.gather(k, idx), plain.gather(k, idx))
        assert windowed._maps[k].windowed == (rows * 32 > 4096)
        assert windowed.read(k, rows - 1) == plain.read(k, rows - 1)
        assert windowed.read_range(k, 3, 200) == plain.read_range(k, 3, 200)
    view = TreeView(n, windowed.read)
    idx = rng.integers(0, n, 300)
    assert inclusion_levels(view, windowed, idx).split(text=False) == [view.inclusion_proof(int(i)) for i in idx]


def test_windowed_gathers_keep_at_most_a_window_mapped(tmp_path):
    """What bounds the RSS: after gathers over every window of a 1 MiB level, at most
    one window (plus the kernel's 64 KiB fault-around at its edge) is still mapped,
    where the plain maps keep the whole level."""
    n = 1 << 15  # level 0: 1 MiB
    leaves = leaves_for(n, 4)
    plain = filled(tmp_path, leaves, seed=1, window=0)
    windowed = HashFiles(shutil.copytree(plain.dir, tmp_path / "copy"), window=64 << 10)  # own files for smaps
    idx = np.random.default_rng(6).integers(0, n, 20_000)
    for _ in range(3):
        assert np.array_equal(windowed.gather(0, idx), plain.gather(0, idx))
    assert mapped_kb(plain.dir / "level-00") == 1024
    assert mapped_kb(windowed.dir / "level-00") <= 128
    view, ref = TreeView(n, windowed.read), memory_view(leaves)
    assert inclusion_levels(view, windowed, idx[:500]).split(text=False) == [ref.inclusion_proof(int(i)) for i in idx[:500]]
    assert mapped_kb(windowed.dir / "level-00") <= 128


@pytest.mark.parametrize("n", [129, 200, 1000, 1023, 1029, 3001])
def test_bounded_mode_proofs_at_every_size(tmp_path, n):
    """Windowed gathers give the RFC 9162 proofs at the full size and at older sizes
    (whose right edge cuts a window), with the indices in any order."""
    leaves = leaves_for(n, 11)
    windowed = filled(tmp_path, leaves, seed=2, window=4096)  # levels over 128 nodes are windowed
    rng = random.Random(n)
    for size in sorted({n, max(1, n - rng.randrange(0, 12)), n // 2 + 3, 17, 16, 15, 9, 8, 7, 1}):
        if size > n:
            continue
        view = TreeView(size, windowed.read)
        idx = [rng.randrange(size) for _ in range(40)] + [0, size - 1] + list(range(max(0, size - 9), size))
        rng.shuffle(idx)
        got = inclusion_levels(view, windowed, np.array(idx)).split(text=False)
        assert got == [ref_inclusion(i, leaves[:size]) for i in idx]


def test_windows_in_small_pages_are_dropped_once_to_come_back_huge(tmp_path):
    """Pages our own appends write are small, and re-mapping them on every gather costs
    ~5x the gather: a window whose take faults more than 2 MiB pages would is dropped
    from the page cache (posix_fadvise) so the next fault reads it back as huge pages,
    at most once a minute per window. The rows read are the same either way."""
    n = 1 << 17  # level 0: 4 MiB, two 2 MiB windows, written by small appends (small pages)
    leaves = leaves_for(n, 6)
    hf = filled(tmp_path, leaves, seed=4, window=2 << 20)
    idx = np.random.default_rng(7).integers(0, n, 20_000)
    want = b"".join(leaves[i] for i in idx.tolist())
    assert hf.gather(0, idx).tobytes() == want
    assert hf.regrown == 2  # both windows took one fault per 64 KiB, not one per 2 MiB
    assert hf.gather(0, idx).tobytes() == want  # read back in (as huge pages where the kernel can)
    assert hf.regrown == 2  # not again within the minute
    assert hf.gather(1, np.arange(10)).tobytes() == b"".join(leaves_for_level(leaves, 1)[:10])


def test_only_the_maps_faults_count_towards_dropping_a_window(tmp_path, monkeypatch):
    """A large gather from a few pages faults many anonymous pages for its own buffers;
    those must not make a window look small (the first version counted them, and then
    dropped windows already in huge pages and re-read them every minute). And a window
    that is found small again waits twice as long each time before the next drop."""
    n = 1 << 17
    leaves = leaves_for(n, 8)
    hf = filled(tmp_path, leaves, seed=5, window=2 << 20)
    for few in (np.arange(300_000) % 500, np.r_[np.arange(200_000) % 500, (1 << 16) + np.arange(200_000) % 500]):
        assert hf.gather(0, few).tobytes() == b"".join(leaves[i] for i in few[:600].tolist()) + \
            b"".join(leaves[i] for i in few[600:].tolist())
    assert hf.regrown == 0  # two windows, a few 64 KiB blocks each: small pages, but few faults
    m = hf._maps[0]
    clock = [1000.0]
    monkeypatch.setattr(hashfiles_mod.time, "monotonic", lambda: clock[0])
    drops = []
    for step in (0, 30, 59, 60, 121, 179, 180, 419, 420):  # seconds since the first drop
        clock[0] = 1000.0 + step
        before = hf.regrown
        hf._regrow(0, m, 0)
        drops.append(hf.regrown - before)
    assert drops == [1, 0, 0, 1, 0, 0, 1, 0, 1]  # waits of 60, then 120, then 240 s


def leaves_for_level(leaves: list[bytes], k: int) -> list[bytes]:
    """Complete nodes of level k (k >= 0) of the tree over `leaves`."""
    level = leaves
    for _ in range(k):
        level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
    return level


def test_map_window_is_checked_and_huge_pages_are_only_a_hint(tmp_path, monkeypatch):
    """A window the kernel could not unmap by (not whole pages) is refused; a kernel that
    refuses the huge-page advice (EINVAL without transparent huge pages) still serves."""
    for bad in (-4096, 100, 4097):
        with pytest.raises(ValueError):
            HashFiles(tmp_path / "bad", window=bad)
    leaves = leaves_for(300, 5)
    hf = filled(tmp_path, leaves, seed=3, window=4096)
    monkeypatch.setattr(hashfiles_mod, "_HUGEPAGE", 0x7FFF)  # an advice no kernel knows: EINVAL
    fresh = HashFiles(hf.dir, window=4096)
    assert fresh.gather(0, np.array([299, 0, 150])).tobytes() == leaves[299] + leaves[0] + leaves[150]


def test_map_window_setting(tmp_path, monkeypatch):
    """Bounded memory is the default (16 MiB per level); map_window_mb = 0 lifts the limit."""
    from tlog.errors import ConfigError
    from tlog.server.config import LogConfig
    from tlog.service.config import load
    from tlog.storage.embedded import EmbeddedStorage

    assert LogConfig().map_window_mb == hashfiles_mod.DEFAULT_MAP_WINDOW_MB == 16
    assert HashFiles(tmp_path / "a").window == EmbeddedStorage(tmp_path / "b").hashes.window == 16 << 20
    monkeypatch.setenv("OAP_LOG_MAP_WINDOW_MB", "0")
    assert load(LogConfig, section="log", env_prefix="OAP_LOG_").map_window_mb == 0
    with pytest.raises(ConfigError):
        LogConfig(map_window_mb=-1).validate()


# --- batched inclusion proofs ------------------------------------------------------


@pytest.mark.parametrize("n", SIZES)
def test_inclusion_levels_match_rfc_reference(tmp_path, n):
    leaves = leaves_for(n)
    hf = filled(tmp_path, leaves, seed=n)
    rng = random.Random(n)
    # Read the proofs at the full size and at an older size from the same files.
    for size in {n, max(1, n - rng.randrange(0, n)), 1}:
        view = TreeView(size, hf.read)
        idx = [rng.randrange(size) for _ in range(30)] + [0, size - 1] + list(range(max(0, size - 5), size))
        pb = inclusion_levels(view, hf, np.array(idx))
        want = [ref_inclusion(i, leaves[:size]) for i in idx]
        assert pb.split(text=False) == want
        b64 = [[base64.b64encode(h).decode() for h in p] for p in want]
        assert pb.split(text=True) == b64
        assert json.loads(pb.json()) == b64
        doc = pb.json_document(b'{"tree_size":%d,"proofs":' % size, b"}").tobytes()
        assert doc == b'{"tree_size":%d,"proofs":' % size + pb.json() + b"}"
        assert json.loads(doc) == {"tree_size": size, "proofs": b64}
        assert [json.loads(x) for x in pb.json_items()] == b64
        assert pb.cbor() == cbor2.dumps(want, canonical=True)


def test_inclusion_levels_against_pymerkle_and_verifier(tmp_path):
    n = 700
    rng = random.Random(11)
    data = [rng.randbytes(rng.randrange(0, 40)) for _ in range(n)]
    tree = InmemoryTree(algorithm="sha256")
    for d in data:
        tree.append_entry(d)
    leaves = [leaf_hash(d) for d in data]
    hf = filled(tmp_path, leaves, seed=2)
    for size in (n, 513, 64, 3):
        view = TreeView(size, hf.read)
        assert view.root == tree.get_root(size)
        idx = [rng.randrange(size) for _ in range(25)]
        for i, proof in zip(idx, inclusion_levels(view, hf, np.array(idx)).split(text=False)):
            theirs = [bytes.fromhex(h) for h in tree.prove_inclusion(i + 1, size).serialize()["path"]]
            assert proof == theirs[1:]
            verify_inclusion(i, size, leaves[i], proof, view.root)


def test_inclusion_levels_rejects_bad_indices(tmp_path):
    hf = filled(tmp_path, leaves_for(10))
    view = TreeView(10, hf.read)
    for bad in ([10], [-1], [[1, 2]]):
        with pytest.raises(InvalidInput):
            inclusion_levels(view, hf, np.array(bad))
    assert inclusion_levels(view, hf, np.array([], dtype=np.int64)).split(text=False) == []


def test_encoders_edge_cases():
    empty = ProofBatch(np.empty((0, 3, 32), dtype=np.uint8), None)  # tree of size 1: every proof empty
    assert json.loads(empty.json()) == [[], [], []]
    assert empty.cbor() == cbor2.dumps([[], [], []], canonical=True)
    assert empty.json_items() == [b"[]"] * 3
    rng = np.random.default_rng(3)
    for h in (2, 23, 24, 25, 30):  # CBOR array heads change at 24 items
        nodes = rng.integers(0, 256, (h, 4, 32), dtype=np.uint8)
        mask = np.ones((h, 4), dtype=bool)
        mask[h - 1, 1] = False
        pb = ProofBatch(nodes, mask)
        assert cbor2.loads(pb.cbor()) == pb.split(text=False)
        assert pb.cbor() == cbor2.dumps(pb.split(text=False), canonical=True)
    for h in (1, 5, 23, 24, 25):  # no mask; a mask dropping the same level everywhere; random masks
        nodes = rng.integers(0, 256, (h, 7, 32), dtype=np.uint8)
        same = np.ones((h, 7), dtype=bool)
        same[h // 2] = False
        for mask in (None, same, rng.random((h, 7)) < 0.7, np.zeros((h, 7), dtype=bool)):
            pb = ProofBatch(nodes, mask)
            want = [[nodes[k, j].tobytes() for k in range(h) if mask is None or mask[k, j]] for j in range(7)]
            assert pb.split(text=False) == want
            assert pb.cbor() == cbor2.dumps(want, canonical=True)
    rows = rng.integers(0, 256, (50, 32), dtype=np.uint8)
    assert [bytes(r) for r in b64_rows(rows)] == [base64.b64encode(r.tobytes()) for r in rows]


def test_cbor_document_equals_cbor_map_of_the_parts():
    from tlog.merkle.proofs import cbor_map_parts

    rng = np.random.default_rng(9)
    for h, mask in ((20, None), (24, None), (5, rng.random((5, 9)) < 0.6), (3, np.zeros((3, 9), dtype=bool))):
        pb = ProofBatch(rng.integers(0, 256, (h, 9, 32), dtype=np.uint8), mask)
        for note in ("a checkpoint\n", None):
            items = {"tree_size": cbor2.dumps(77), "checkpoint": cbor2.dumps(note)}
            prefix, suffix = cbor_map_parts(items, "proofs")
            doc = pb.cbor_document(prefix, suffix)
            assert doc.tobytes() == cbor_map({**items, "proofs": pb.cbor()})
            assert cbor2.loads(doc.tobytes()) == {"tree_size": 77, "checkpoint": note, "proofs": pb.split(text=False)}
    empty = ProofBatch(np.empty((4, 0, 32), dtype=np.uint8), None)
    assert empty.cbor_document(b"x", b"y").tobytes() == b"x\x80y"


def test_cbor_map_is_cbor2_canonical():
    note = "origin\n5\nabc=\n\n— sig\n"
    for doc in ({"tree_size": 5, "checkpoint": note, "proofs": [[b"x" * 32]]},
                {"tree_size": 2**40, "checkpoint": None, "proofs": []},
                {"b": 1, "aa": 2, "a": 3, "ccc": [1, 2]}):
        got = cbor_map({k: cbor2.dumps(v, canonical=True) for k, v in doc.items()})
        assert got == cbor2.dumps(doc, canonical=True)


# --- batched consistency proofs -------------------------------------------------------


def test_consistency_levels_match_reference(tmp_path, hash_impl):
    n = 1100
    leaves = leaves_for(n, 4)
    hf = filled(tmp_path, leaves, seed=4)
    rng = random.Random(4)
    pairs = [(o, w) for w in range(0, 34) for o in range(0, w + 1)]
    pairs += [(rng.randrange(0, w + 1), w) for w in (rng.randrange(1, n + 1) for _ in range(400))]
    pairs += [(1, n), (n - 1, n), (n, n), (512, 1024), (511, 1025)]
    pb = consistency_levels(hf, np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]))
    for (old, new), proof in zip(pairs, pb.split(text=False)):
        assert proof == TreeView(new, hf.read).consistency_proof(old), (old, new)
        if new <= 300:
            assert proof == ref_consistency(old, leaves[:new])
        old_root = mth(leaves[:old]) if old else EMPTY_ROOT
        verify_consistency(old, new, old_root, mth(leaves[:new]), proof)
    with pytest.raises(InvalidInput):
        consistency_levels(hf, np.array([5]), np.array([4]))


# --- batched verification -----------------------------------------------------------


def _batch(n: int, b: int, seed: int):
    leaves = leaves_for(n, seed)
    view = memory_view(leaves)
    rng = random.Random(seed)
    idx = [rng.randrange(n) for _ in range(b)]
    if b > 3:
        idx[1] = idx[0]  # the same leaf twice
    return leaves, view, idx, [view.inclusion_proof(i) for i in idx]


@pytest.mark.parametrize("n", SIZES)
def test_verify_batch_accepts_valid_proofs(n, hash_impl):
    leaves, view, idx, proofs = _batch(n, 40, n)
    verify_inclusion_batch(idx, n, [leaves[i] for i in idx], proofs, view.root)
    rows, counts = flatten_proofs(proofs)
    verify_inclusion_batch(np.array(idx), n, np.frombuffer(b"".join(leaves[i] for i in idx), dtype=np.uint8)
                           .reshape(-1, 32), (rows, counts), view.root)


def _reference_failures(idx, n, leaves, proofs, root) -> list[int]:
    bad = []
    for pos, (i, leaf, proof) in enumerate(zip(idx, leaves, proofs)):
        try:
            verify_inclusion(i, n, leaf, proof, root)
        except VerificationError:
            bad.append(pos)
    return bad


@pytest.mark.parametrize("seed", range(40))
def test_verify_batch_rejects_exactly_what_the_reference_rejects(seed, hash_impl):
    rng = random.Random(seed)
    n = rng.choice([2, 3, 5, 16, 17, 100, 257, 1000])
    leaves, view, idx, proofs = _batch(n, rng.randrange(1, 30), seed)
    lv = [leaves[i] for i in idx]
    root = view.root
    proofs = [list(p) for p in proofs]
    for _ in range(rng.randrange(1, 4)):
        pos = rng.randrange(len(idx))
        kind = rng.choice(["flip", "drop", "extra", "index", "leaf", "swap", "root", "size"])
        if kind == "flip" and proofs[pos]:
            k = rng.randrange(len(proofs[pos]))
            proofs[pos][k] = bytes([proofs[pos][k][0] ^ 1]) + proofs[pos][k][1:]
        elif kind == "drop" and proofs[pos]:
            proofs[pos].pop()
        elif kind == "extra":
            proofs[pos].append(b"\x00" * 32)
        elif kind == "index":
            idx[pos] = (idx[pos] + 1) % n
        elif kind == "leaf":
            lv[pos] = leaf_hash(b"forged")
        elif kind == "swap" and len(proofs[pos]) > 1:
            proofs[pos][0], proofs[pos][1] = proofs[pos][1], proofs[pos][0]
        elif kind == "root":
            root = leaf_hash(b"other root")
    want = _reference_failures(idx, n, lv, proofs, root)
    if not want:
        verify_inclusion_batch(idx, n, lv, proofs, root)
        return
    with pytest.raises(InclusionProofError) as e:
        verify_inclusion_batch(idx, n, lv, proofs, root)
    assert e.value.data["failed"] == want


def test_verify_batch_conflicting_claims_and_bad_sizes():
    leaves, view, idx, proofs = _batch(64, 10, 9)
    idx = [5, 4]  # siblings: each proof's first hash is the other's leaf
    proofs = [view.inclusion_proof(5), view.inclusion_proof(4)]
    lv = [leaves[5], leaves[4]]
    verify_inclusion_batch(idx, 64, lv, proofs, view.root)
    lv2 = [leaves[5], leaf_hash(b"x")]  # proof 1's leaf contradicts proof 0's sibling claim
    with pytest.raises(InclusionProofError) as e:
        verify_inclusion_batch(idx, 64, lv2, proofs, view.root)
    assert e.value.data["failed"] == [1]
    with pytest.raises(InclusionProofError):
        verify_inclusion_batch([64], 64, [leaves[0]], [view.inclusion_proof(0)], view.root)
    with pytest.raises(InclusionProofError):
        verify_inclusion_batch([0], 64, [leaves[0]], [[b"short"]], view.root)
    verify_inclusion_batch([], 64, [], [], view.root)


def test_readers_never_create_or_write_files(tmp_path):
    """Reads use read-only descriptors: a read-only data directory still serves."""
    leaves = leaves_for(20)
    filled(tmp_path, leaves).close()
    reader = HashFiles(tmp_path / "h0-20")
    before = sorted(p.name for p in reader.dir.iterdir())
    with pytest.raises(IndexError):
        reader.read(9, 0)
    with pytest.raises(IndexError):
        reader.gather(9, np.array([0]))
    assert reader.read(0, 19) == leaves[19]
    assert sorted(p.name for p in reader.dir.iterdir()) == before
    assert not reader._fds  # no read-write descriptor was opened
