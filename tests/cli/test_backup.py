"""Back up a running log, destroy it, restore, and continue consistently (ops runbook)."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat

import pytest
from click.testing import CliRunner

from tlog.client.client import LogClient
from tlog.client.verifier import TrustPolicy
from tlog.formats.ed25519 import generate_seed
from tlog.formats.entries import receipt_entry
from tlog.formats.hashing import leaf_hash
from tlog.merkle.verify import verify_consistency
from tlog.server.cli import main

pytestmark = pytest.mark.slow
SEED = generate_seed()


def logged_at(data) -> dict[int, float]:
    """index -> when the log logged that receipt, from a stopped log's database."""
    import sqlite3

    with sqlite3.connect(data / "log.db") as db:
        return dict(db.execute("SELECT idx, logged_at FROM receipts"))


async def test_backup_destroy_restore_continue(server, tmp_path):
    data = tmp_path / "data"
    srv = server(data=data)
    policy = TrustPolicy.for_log(srv.vkey)
    async with LogClient(srv.url, policy=policy) as c:
        anchored = await c.anchor_many([receipt_entry(leaf_hash(i.to_bytes(4, "big")), SEED) for i in range(300)])
        at_backup = policy.verify_checkpoint(await c.checkpoint()).checkpoint
        # (the CLI runs its own event loop: off this test's loop)
        r = await asyncio.to_thread(CliRunner().invoke, main, ["backup", "--data", str(data), "--out",
                                                                str(tmp_path / "bk")])
        assert r.exit_code == 0, r.output
        assert json.loads(r.output)["tree_size"] == 300
    assert stat.S_IMODE(os.stat(tmp_path / "bk" / "log.key").st_mode) == 0o600
    srv.kill()
    logged = logged_at(data)
    assert len(logged) == 300
    shutil.rmtree(data)  # destroy
    r = await asyncio.to_thread(CliRunner().invoke, main, ["restore", "--from", str(tmp_path / "bk"), "--data",
                                                            str(data)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output.strip().splitlines()[-1])["tree_size"] == 300
    assert logged_at(data) == logged  # when the log first logged each receipt, kept exactly
    # a backup from before `logged_at` was kept restores all the same (its receipts logged now)
    old = tmp_path / "old-bk"
    shutil.copytree(tmp_path / "bk", old)
    (old / "logged_at").unlink()
    r = await asyncio.to_thread(CliRunner().invoke, main, ["restore", "--from", str(old), "--data",
                                                            str(tmp_path / "from-old")])
    assert r.exit_code == 0, r.output
    relogged = logged_at(tmp_path / "from-old")
    assert relogged.keys() == logged.keys() and min(relogged.values()) > max(logged.values())
    srv2 = server(data=data)
    assert srv2.vkey == srv.vkey
    async with LogClient(srv2.url, policy=policy) as c:
        restored = policy.verify_checkpoint(await c.checkpoint()).checkpoint
        assert (restored.size, restored.root) == (at_backup.size, at_backup.root)
        for a in anchored[:20]:
            policy.verify_bundle(await c.bundle_for(a.index))
        more = await c.anchor(receipt_entry(leaf_hash(b"after restore"), SEED))
        assert more.index == 300
        new = policy.verify_checkpoint(more.checkpoint).checkpoint
        verify_consistency(at_backup.size, new.size, at_backup.root, new.root,
                           await c.consistency(at_backup.size, new.size))
        assert await c.root_from_tiles(new.size) == new.root


def test_a_backup_without_its_checkpoint_or_into_a_used_log_is_refused(server, tmp_path):
    from tlog.client.client import SyncLogClient

    data = tmp_path / "data"
    srv = server(data=data)
    with SyncLogClient(srv.url) as c:
        c.anchor(receipt_entry(leaf_hash(b"one"), SEED))
    r = CliRunner().invoke(main, ["backup", "--data", str(data), "--out", str(tmp_path / "bk")])
    assert r.exit_code == 0, r.output
    srv.kill()
    r = CliRunner().invoke(main, ["restore", "--from", str(tmp_path / "bk"), "--data", str(data)])
    assert r.exit_code != 0 and "not empty" in r.output  # data still holds the log (and its empty tree)
    (tmp_path / "bk" / "checkpoint").unlink()
    r = CliRunner().invoke(main, ["restore", "--from", str(tmp_path / "bk"), "--data", str(tmp_path / "new")])
    assert r.exit_code != 0 and "no checkpoint" in r.output


def test_a_damaged_or_foreign_backup_is_refused_before_anything_is_written(server, tmp_path):
    """A backup whose entries do not make its checkpoint's tree, or whose checkpoint another
    key signed, is refused with the target still empty: entries left in it would be signed by
    the log's next start, under the log's own key (a second root for the same size)."""
    from tlog.client.client import SyncLogClient
    from tlog.formats.keys import Signer
    from tlog.formats.note import parse_note, sign_note
    from tlog.storage.embedded import EmbeddedStorage

    data = tmp_path / "data"
    srv = server(data=data)
    with SyncLogClient(srv.url) as c:
        c.anchor_many([receipt_entry(leaf_hash(i.to_bytes(4, "big")), SEED) for i in range(50)])
    bk = tmp_path / "bk"
    r = CliRunner().invoke(main, ["backup", "--data", str(data), "--out", str(bk)])
    assert r.exit_code == 0, r.output
    srv.kill()

    def empty(target) -> bool:
        s = EmbeddedStorage(target)
        try:
            return s.open().sequenced == 0
        finally:
            s.close()

    # one byte of one entry changed (same length: the file still parses)
    damaged = tmp_path / "damaged"
    shutil.copytree(bk, damaged)
    raw = bytearray((damaged / "entries").read_bytes())
    raw[2 + int.from_bytes(raw[:2], "big") // 2] ^= 0x01  # inside the first entry
    (damaged / "entries").write_bytes(bytes(raw))
    r = CliRunner().invoke(main, ["restore", "--from", str(damaged), "--data", str(tmp_path / "t1")])
    assert r.exit_code != 0 and "do not make the checkpoint's tree" in r.output, r.output
    assert empty(tmp_path / "t1")
    # entries missing at the end, or one too many
    for name, cut in (("short", -1), ("long", +1)):
        d = tmp_path / name
        shutil.copytree(bk, d)
        raw = (d / "entries").read_bytes()
        if cut < 0:
            n = int.from_bytes(raw[:2], "big")
            raw = raw[2 + n:]  # drop the first entry: one entry short, every later one shifted
        else:
            raw += (5).to_bytes(2, "big") + b"extra"
        (d / "entries").write_bytes(raw)
        r = CliRunner().invoke(main, ["restore", "--from", str(d), "--data", str(tmp_path / f"t-{name}")])
        said = "do not make the checkpoint's tree" if name == "short" else "more than the checkpoint's 50 entries"
        assert r.exit_code != 0 and said in r.output and "nothing was imported" in r.output, (name, r.output)
        assert empty(tmp_path / f"t-{name}")
    # a checkpoint of the same entries signed by another key of the same name
    foreign = tmp_path / "foreign"
    shutil.copytree(bk, foreign)
    text = parse_note((bk / "checkpoint").read_text()).text
    other = Signer(text.splitlines()[0], os.urandom(32))
    (foreign / "checkpoint").write_text(sign_note(text, [other]))
    r = CliRunner().invoke(main, ["restore", "--from", str(foreign), "--data", str(tmp_path / "t2")])
    assert r.exit_code != 0 and "not signed by this log's key" in r.output, r.output
    assert empty(tmp_path / "t2")
    # the backup itself still restores
    r = CliRunner().invoke(main, ["restore", "--from", str(bk), "--data", str(tmp_path / "t3")])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output.strip().splitlines()[-1])["tree_size"] == 50


def test_an_import_that_stops_after_writing_leaves_a_log_that_will_not_start(tmp_path):
    """Past its first check an import marks the target; if it then fails (here: the source
    reads differently the second time, longer and changed) the target holds at most the
    checkpoint's size of entries, the log's appender signs nothing (the entries do not make
    the checkpoint's root), and neither the log nor another import starts on it until it is
    emptied: its first integration would sign a tree the source never had."""
    from tlog.errors import ConfigError, VerificationError
    from tlog.formats.checkpoint import Checkpoint
    from tlog.formats.keys import Signer
    from tlog.formats.note import sign_note
    from tlog.merkle.tree import memory_view
    from tlog.runtime.keyfiles import write_private_key
    from tlog.server.config import LogConfig
    from tlog.server.importing import import_log
    from tlog.server.service import LogService
    from tlog.storage.embedded import EmbeddedStorage
    from tlog.storage.transfer import UNFINISHED_IMPORT

    signer = Signer("example.com/log", os.urandom(32))
    good = [f"entry {i}".encode() for i in range(5000)]
    root = memory_view([leaf_hash(e) for e in good]).root
    note = sign_note(Checkpoint(signer.name, len(good), root).to_text(), [signer])
    readings = iter([good, [*good[:4000], b"changed", *good[4001:], b"one more", b"and another"]])

    async def source():
        for data in next(readings):
            yield data

    data = tmp_path / "data"
    data.mkdir()
    write_private_key(data / "log.key", signer.to_skey())
    config = LogConfig(data_dir=data, port=0, origin=signer.name)
    with pytest.raises(VerificationError, match=r"imported entries make the root .* nothing was signed"):
        asyncio.run(import_log(config, note, source))
    store = EmbeddedStorage(data)
    try:
        head = store.open()
        assert head.sequenced == 5000 and head.signed is None  # cut at the checkpoint's size; nothing signed
    finally:
        store.close()
    assert (data / UNFINISHED_IMPORT).read_text() == note
    with pytest.raises(ConfigError, match="did not finish"):
        asyncio.run(LogService.open(LogConfig(data_dir=data, port=0, origin=signer.name)))
    bk = tmp_path / "bk"
    bk.mkdir()
    (bk / "checkpoint").write_text(note)
    (bk / "entries").write_bytes(b"".join(len(e).to_bytes(2, "big") + e for e in good))
    r = CliRunner().invoke(main, ["restore", "--from", str(bk), "--data", str(data)])
    assert r.exit_code != 0 and "did not finish" in r.output, r.output


def test_a_restore_without_the_logs_key_is_refused_and_makes_none(server, tmp_path):
    """A restore signs with the log's own key; without it (a backup taken without log.key, no
    key_file) it stops instead of making a new key, which would overwrite the copied log.vkey
    and sign the log under another identity."""
    from tlog.client.client import SyncLogClient

    data = tmp_path / "data"
    srv = server(data=data)
    with SyncLogClient(srv.url) as c:
        c.anchor(receipt_entry(leaf_hash(b"one"), SEED))
    bk = tmp_path / "bk"
    r = CliRunner().invoke(main, ["backup", "--data", str(data), "--out", str(bk)])
    assert r.exit_code == 0, r.output
    srv.kill()
    (bk / "log.key").unlink()
    target = tmp_path / "target"
    r = CliRunner().invoke(main, ["restore", "--from", str(bk), "--data", str(target)])
    assert r.exit_code != 0 and "no log key" in r.output, r.output
    assert not (target / "log.key").exists()
    assert (target / "log.vkey").read_text() == (bk / "log.vkey").read_text()
