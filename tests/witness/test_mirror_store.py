"""The contract of the mirror's store (witness.mirror.store), kept by the embedded store:
appends in order within a bundle, checkpoints that never fork or go back, reads of stored
entries only, and hash files that are recomputed when they do not match the entries."""
from __future__ import annotations

import os

import pytest

from tlog.errors import ForkError
from tlog.formats.hashing import leaf_hash
from tlog.formats.tiles import encode_entry_bundle
from witness.mirror.embedded import EmbeddedStore
from witness.mirror.store import Checkpointed

from tests.support.mirror import EntryLog

O = "log.test.example/mirrored"


def fill(store: EmbeddedStore, lg: EntryLog, upto: int, start: int = 0) -> None:
    pos = start
    while pos < upto:
        n = min(256 - pos % 256, upto - pos, 97)
        ents = lg.entries[pos:pos + n]
        store.append(O, pos, encode_entry_bundle(ents), b"".join(leaf_hash(e) for e in ents))
        pos += n


@pytest.fixture
def lg() -> EntryLog:
    return EntryLog().grow(1000)


def test_appends_in_order_within_a_bundle(tmp_path, lg):
    s = EmbeddedStore(tmp_path)
    try:
        with pytest.raises(ValueError):  # not the next entry
            s.append(O, 5, encode_entry_bundle(lg.entries[5:6]), leaf_hash(lg.entries[5]))
        with pytest.raises(ValueError):  # across a bundle boundary
            s.append(O, 0, encode_entry_bundle(lg.entries[:300]), b"".join(map(leaf_hash, lg.entries[:300])))
        fill(s, lg, 700)
        assert s.record(O).next_entry == 700
        assert s.bundle(O, 1, 256) == encode_entry_bundle(lg.entries[256:512])
        assert s.bundle(O, 2, 100) == encode_entry_bundle(lg.entries[512:612])
        assert s.bundle(O, 2, 189) is None and s.tile(O, 0, 2, 189) is None  # not stored
        assert s.tile(O, 0, 2, 188) == b"".join(lg.levels[0][512:700])
        assert s.entries(O, 600, 5) == lg.entries[600:605]
        assert s.root(O, 700) == lg.root(700) and s.root(O, 333) == lg.root(333)
    finally:
        s.close()


def test_checkpoints_never_fork_or_go_back(tmp_path, lg):
    s = EmbeddedStore(tmp_path)
    try:
        fill(s, lg, 600)
        s.set_pending(O, Checkpointed(600, lg.root(600), "pending"))
        with pytest.raises(ForkError):
            s.set_pending(O, Checkpointed(600, bytes(32), "other"))
        with pytest.raises(ValueError):  # not every entry stored
            s.commit(O, Checkpointed(700, lg.root(700), "n"))
        s.commit(O, Checkpointed(500, lg.root(500), "n", 1))
        s.commit(O, Checkpointed(600, lg.root(600), "n", 2))
        with pytest.raises(ValueError):
            s.commit(O, Checkpointed(500, lg.root(500), "n", 3))
        with pytest.raises(ForkError):
            s.commit(O, Checkpointed(600, bytes(32), "n", 3))
        assert [(z, t) for z, _, t in s.cosigned(O)] == [(500, 1), (600, 2)]
        assert s.record(O).mirror == Checkpointed(600, lg.root(600), "n", 2)
    finally:
        s.close()
    s = EmbeddedStore(tmp_path)  # and all of it is what a restart finds
    try:
        rec = s.record(O)
        assert (rec.pending.size, rec.mirror.size, rec.next_entry) == (600, 600, 600)
        assert s.pending_at(O, 600).root == lg.root(600)
    finally:
        s.close()


def test_hash_files_that_do_not_match_the_entries_are_recomputed(tmp_path, lg):
    s = EmbeddedStore(tmp_path, hash_sync_interval=3600)
    fill(s, lg, 1000)
    s.sync_hashes()
    s.close()
    level0 = next((tmp_path / "hashes").iterdir()) / "level-00"
    for level, at in ((0, 900), (9, 0)):  # a stale hash file: garbage where hashes should be
        with open(level0.with_name(f"level-{level:02d}"), "r+b") as f:
            f.seek(32 * at)
            f.write(os.urandom(32))
    # the hashes were synced for all 1,000 entries, so only a rebuild can catch this: the
    # mirror's commit check compares roots and rebuilds (witness.mirror.core._commit)
    s = EmbeddedStore(tmp_path)
    try:
        assert s.root(O, 1000) != lg.root(1000)
        s.rebuild_hashes(O)
        assert s.root(O, 1000) == lg.root(1000)
        assert s.tile(O, 0, 3, 232) == b"".join(lg.levels[0][768:1000])
    finally:
        s.close()
    with open(level0, "r+b") as f:  # a hash file cut short (a crash before it was synced)
        f.truncate(32 * 700)
    s = EmbeddedStore(tmp_path)
    try:
        assert s.root(O, 1000) == lg.root(1000)
        assert s.tile(O, 0, 3, 232) == b"".join(lg.levels[0][768:1000])
    finally:
        s.close()


def test_one_process_per_data_directory(tmp_path):
    from tlog.errors import ConfigError

    s = EmbeddedStore(tmp_path)
    try:
        with pytest.raises(ConfigError):
            EmbeddedStore(tmp_path)
    finally:
        s.close()


def test_a_rebuild_of_the_hashes_leaves_a_reader_its_maps(tmp_path, lg):
    """The mirror's commit check found a stale hash and rebuilds its hash files: a reader in
    another process that mapped them keeps reading its maps whole, and its next reads are
    the rebuilt files."""
    from tests.support.mapped import MappedReader, digest

    s = EmbeddedStore(tmp_path)
    try:
        fill(s, lg, 1000)
        s.sync_hashes()
        hashes = next((tmp_path / "hashes").iterdir())
        with open(hashes / "level-09", "r+b") as f:  # node (9, 0), on the path of every root from 512 on
            f.write(os.urandom(32))
        assert s.root(O, 1000) != lg.root(1000)
        reader = MappedReader(hashes, [0, 9])
        try:
            s.rebuild_hashes(O)
            assert s.root(O, 1000) == lg.root(1000)
            died, old, seen = reader.check({0: 1000, 9: 1})
            assert died is None, f"the reader died with {died}"  # -7: SIGBUS
            assert old == reader.mapped
            assert seen == {0: digest(b"".join(lg.levels[0][:1000])), 9: digest(lg.levels[9][0])}
            assert reader.close() == 0
        finally:
            reader.kill()
    finally:
        s.close()
