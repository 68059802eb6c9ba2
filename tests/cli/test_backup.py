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
    r = CliRunner().invoke(main, ["restore", "--from", str(tmp_path / "bk"), "--data", str(data)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output.strip().splitlines()[-1])["tree_size"] == 300
    assert logged_at(data) == logged  # when the log first logged each receipt, kept exactly
    # a backup from before `logged_at` was kept restores all the same (its receipts logged now)
    old = tmp_path / "old-bk"
    shutil.copytree(tmp_path / "bk", old)
    (old / "logged_at").unlink()
    r = CliRunner().invoke(main, ["restore", "--from", str(old), "--data", str(tmp_path / "from-old")])
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
