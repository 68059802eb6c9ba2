"""Build a persisted log of 2^k leaves, fast, in the real on-disk format.

The result is an ordinary data directory that `oap-log serve --data DIR
--origin ORIGIN` opens: the log key (tlog.server.api.load_or_create_key),
SQLite with the real schema (tlog.storage.embedded.SCHEMA) holding every entry in runs,
the per-level hash files written by tlog.storage.hashfiles.HashFiles.append, and one
checkpoint signed by the log key over the root. Two shortcuts, both only
about speed: rows are bulk-inserted (synchronous=OFF), and a child process
generates and hashes entries and writes the hash files while the parent
inserts rows. At the end tlog.storage.embedded.EmbeddedStorage.open re-opens the directory the
way the server does: it checks the runs against the signed checkpoint and the
root of the hash files against the signed root, and builds the leaf-hash
index (tlog.storage.leafindex) from the hash files.

Entries are real commitment entries (~100 bytes of deterministic CBOR).
A finished directory is cached (bench-tree.json records what it holds).
"""
from __future__ import annotations

import json
import multiprocessing as mp
import shutil
import signal
import sqlite3
import time
from pathlib import Path

from common import ORIGIN, entry_bytes

from tlog.formats.hashing import leaf_hashes
from tlog.merkle.tree import TreeView
from tlog.runtime import children
from tlog.server.service import checkpoint_signer, load_or_create_key
from tlog.storage.embedded import SCHEMA, EmbeddedStorage, entry_runs
from tlog.storage.hashfiles import HashFiles

VERSION = 2  # 2: entries stored in runs (tlog.storage.embedded.RUN_ENTRIES)
CHUNK = 1 << 18


def _hasher(hash_dir: str, n: int, q: mp.Queue) -> None:
    children.die_with_parent(signal.SIGKILL)
    hashes = HashFiles(Path(hash_dir))
    for start in range(0, n, CHUNK):
        count = min(CHUNK, n - start)
        datas = [entry_bytes(i) for i in range(start, start + count)]
        lh = leaf_hashes(datas)
        hashes.append(start, lh)
        q.put((start, datas, lh.tobytes()))
    hashes.sync()
    hashes.close()
    q.put(None)


def build_log(data_dir: Path, log2: int, *, fresh: bool = False) -> dict:
    n = 1 << log2
    marker = data_dir / "bench-tree.json"
    if not fresh and marker.exists():
        info = json.loads(marker.read_text())
        if info.get("leaves") == n and info.get("version") == VERSION:
            return info | {"cached": True}
    if data_dir.exists():
        shutil.rmtree(data_dir)
    data_dir.mkdir(parents=True)
    t0 = time.perf_counter()
    signer = load_or_create_key(data_dir, ORIGIN)
    sign = checkpoint_signer(signer)
    conn = sqlite3.connect(data_dir / "log.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=OFF")  # bulk load; WAL (what the server uses) at the end
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA cache_size=-262144")
    conn.executescript(SCHEMA)
    q: mp.Queue = mp.get_context("fork").Queue(maxsize=4)
    child = mp.get_context("fork").Process(target=_hasher, args=(str(data_dir / "hashes"), n, q))
    child.start()
    conn.execute("BEGIN")
    while (item := q.get()) is not None:
        start, datas, _lh = item
        conn.executemany("INSERT INTO runs (first, count, data) VALUES (?, ?, ?)",
                         entry_runs([(start + i, None, d) for i, d in enumerate(datas)]))
    conn.execute("COMMIT")
    child.join()
    if child.exitcode != 0:
        raise RuntimeError("hash file builder failed")
    t_rows = time.perf_counter() - t0
    hashes = HashFiles(data_dir / "hashes")
    view = TreeView(n, hashes.read)
    note = sign(n, view.root)
    conn.execute("INSERT INTO checkpoints (size, root, note, signed_at) VALUES (?, ?, ?, ?)",
                 (n, view.root, note, time.time()))
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('hashes_synced', ?)", (n,))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    hashes.close()
    store = EmbeddedStorage(data_dir)  # the server's own open: runs, signed root, hash files, leaf index
    state = store.open().signed
    store.close()
    t_index = time.perf_counter() - t0 - t_rows
    if state is None or state.size != n or state.root != view.root:
        raise RuntimeError("the built log does not re-open to its signed root")
    info = {"version": VERSION, "leaves": n, "root": view.root.hex(), "vkey": signer.vkey,
            "build_seconds": round(time.perf_counter() - t0, 1), "rows_seconds": round(t_rows, 1),
            "index_seconds": round(t_index, 1)}
    marker.write_text(json.dumps(info))
    return info | {"cached": False}
