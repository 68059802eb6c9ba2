#!/usr/bin/env python3
"""How the log behaves as it grows: `python benchmarks/growth.py [--quick] [--sizes 20,22]
[--backends embedded,postgres]` (`make bench-growth`).

For each backend and size 2^k it builds a log of 2^k real commitment entries (or reuses
one from benchmarks/.cache/), then measures, each in a fresh process so that sizes do not
share memory:

- start-up: the server's own `open_storage(LogConfig)` and `open`, and its interpreter
  settings (`tune_for_serving`), up to the first inclusion proof; embedded also with the
  data directory evicted from the page cache, PostgreSQL also for a new frontend (an empty
  hash cache, rebuilt from the database, after the appends);
- proofs/s: batches of 100,000 random indices through `inclusion_levels` (what
  `POST /v1/proof/inclusion:batch` and `make bench`'s `proofs_batched` call), warm: the
  median of 5 batches after a first pass over them, and the slowest of the 5;
- appends/s: durable 256-entry batches through the appender (`tlog.server.appender`), for a bounded
  time and count; the first batch is reported apart (at exactly 2^k entries the
  embedded leaf-hash index doubles on it);
- peak RSS (`VmHWM`) of that process, per phase (reset through /proc/self/clear_refs);
- disk bytes per entry, before the appends.

Embedded logs come from build.py's bulk builder, cached, and are put back to exactly 2^k
entries after the measured appends. The PostgreSQL log is grown through
the appender itself (65,536-entry batches), in one database from size to size, then
vacuumed and checkpointed (PgLog.settle) before it is measured, the appends first;
PostgreSQL and SeaweedFS are started here (tlog.cli.engines), PostgreSQL with the
scale-out runbook's buffer pool (a quarter of the memory), with their data in
benchmarks/.cache/growth-pg, removed at the end.

Writes benchmarks/results/growth.json (`_meta` from common.meta(): the commit and the machine)
and growth.md (the same in a line, then the table), prints the JSON on stdout and the table on
stderr. See benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from common import ORIGIN, SyncAppender, describe_meta, entry_bytes  # noqa: E402
from common import meta as results_meta  # noqa: E402

from tlog.runtime import children  # noqa: E402

CACHE = HERE / ".cache"
RESULTS = HERE / "results"
DEFAULT_SIZES = {"embedded": [20, 22, 24, 26], "postgres": [20, 22, 24]}
QUICK_SIZES = [16, 18]
PROOF_BATCH = 100_000
PROOF_REPS = 5
APPEND_BATCH = 256
# What a measuring process reports that goes into the results, per backend and size.
MEASURED = ("startup_s", "proofs_per_s", "proofs_slowest_per_s", "proofs_first_pass_per_s", "first_append_s",
            "appends_per_s", "append_batches",
            "append_batch_ms_p50", "append_batch_ms_p99", "appended", "append_pause_max_ms",
            "append_pauses_top", "append_swap_batch", "index_resized", "rss_mb",
            "end", "process_seconds")
RESIZE_WAIT_S = 600.0  # at most this long appending after the timed phase, for the index's swap
RSS_TARGET_MB = 300
FILL_BATCH = 65_536  # PostgreSQL: entries per `append` while the log is grown to the next size
# Disk needed per entry while a size is built and measured (bytes): embedded ~200 B/entry, plus
# the leaf-hash index doubling (64 B/entry) while appends run; PostgreSQL + bucket + a frontend's
# hash cache ~700 B/entry (estimated; measured figures are in the results), a second hash
# cache for the new-frontend start, and PostgreSQL's WAL (max_wal_size = 4 GB).
DISK_PER_ENTRY = {"embedded": 300, "postgres": 800}
DISK_FIXED = {"embedded": 2 << 30, "postgres": 6 << 30}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --- in the measuring process --------------------------------------------------------------

def _hwm_mb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) // 1024
    return 0


def _reset_hwm() -> None:
    """Set VmHWM to the current RSS, so the next reading is the peak of what follows."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _status_mb() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(line.split()[1]) // 1024
    return out


def measure(spec: dict) -> dict:
    """Start-up, then (unless spec['only'] == 'startup') proofs and appends, in this process."""
    import numpy as np

    from tlog.http.serve import tune_for_serving
    from tlog.merkle.proofs import inclusion_levels
    from tlog.merkle.verify import verify_inclusion
    from tlog.server.config import LogConfig
    from tlog.server.service import checkpoint_signer, load_or_create_key, open_publisher, open_storage

    n = 1 << spec["log2"]
    rng = np.random.default_rng(spec["log2"])
    out: dict = {"rss_mb": {}}
    rss = out["rss_mb"]
    rss["imported"] = _hwm_mb()
    kw = {"data_dir": Path(spec["data_dir"]), "origin": ORIGIN, "storage": spec["backend"]}
    if spec["backend"] == "postgres":
        kw |= {"postgres_dsn": spec["dsn"], "bucket_url": spec["bucket_url"],
               "bucket_credentials_file": Path(spec["credentials"]), "key_file": Path(spec["key_file"])}
    config = LogConfig(**kw)
    config.validate()

    _reset_hwm()
    t0 = time.perf_counter()  # from here as tlog.server.service.LogService.open
    config.data_dir.mkdir(parents=True, exist_ok=True)
    signer = load_or_create_key(config.data_dir, config.origin, config.key_file)
    sign = checkpoint_signer(signer)
    store = SyncAppender(open_storage(config), sign, publisher=open_publisher(config))  # the service's own start
    # and its interpreter settings, made once it is open (`oap-log serve` before its banner):
    # without gc.freeze(), the collector's first full pass over start-up's objects (30-40 ms
    # here) could land inside whichever measured append met it
    tune_for_serving()
    state = store.state
    assert state is not None
    first = inclusion_levels(state.view, store.driver.hashes, np.array([n // 3]))
    out["startup_s"] = round(time.perf_counter() - t0, 3)
    rss["startup"] = _hwm_mb()
    try:
        if state.size < n:
            raise RuntimeError(f"the log has {state.size} entries, expected at least {n}")
        verify_inclusion(n // 3, state.size, store.driver.hashes.read(0, n // 3), first.split(text=False)[0],
                         state.root)
        out["size_at_start"] = state.size
        if spec.get("only") == "startup":
            return out

        # Proofs: as make bench's proofs_batched (a first pass over the batches, then the median).
        _reset_hwm()
        view, hashes = state.view, store.driver.hashes
        batches = [rng.integers(0, state.size, PROOF_BATCH) for _ in range(PROOF_REPS)]
        t = time.perf_counter()
        for x in batches:
            inclusion_levels(view, hashes, x)
        out["proofs_first_pass_per_s"] = round(PROOF_BATCH * PROOF_REPS / (time.perf_counter() - t))
        times = []
        for x in batches:  # one batch's proofs alive at a time, as in a server answering one request
            t = time.perf_counter()
            pb = inclusion_levels(view, hashes, x)
            times.append(time.perf_counter() - t)
            del pb
        out["proofs_per_s"] = round(PROOF_BATCH / float(np.median(times)))
        out["proofs_slowest_per_s"] = round(PROOF_BATCH / max(times))
        rss["proofs"] = _hwm_mb()
        check = batches[-1][:5]  # spot check, outside the measured phase: these are real proofs
        for j, proof in zip(check.tolist(), inclusion_levels(view, hashes, check).split(text=False)):
            verify_inclusion(j, state.size, hashes.read(0, j), proof, state.root)
        del batches

        # Appends: durable batches through the appender (a new frontend first takes the role).
        salt = spec["salt"]
        store.wait_integrating()
        _reset_hwm()
        out["first_append_at"] = time.time()
        t = time.perf_counter()
        r = store.append([entry_bytes(i, salt) for i in range(APPEND_BATCH)])
        out["first_append_s"] = round(time.perf_counter() - t, 3)
        assert all(r.fresh) and r.state.size == state.size + APPEND_BATCH
        rss["first_append"] = _hwm_mb()
        _reset_hwm()
        done, deadline = APPEND_BATCH, time.monotonic() + spec["append_seconds"]
        lat = []
        t = time.perf_counter()
        while done < spec["append_max"] and time.monotonic() < deadline:
            b = time.perf_counter()
            r = store.append([entry_bytes(i, salt) for i in range(done, done + APPEND_BATCH)])
            lat.append(time.perf_counter() - b)
            done += APPEND_BATCH
        wall = time.perf_counter() - t
        assert r.state.size == state.size + done
        out["appends_per_s"] = round((done - APPEND_BATCH) / wall)
        out["append_batches"] = len(lat)
        out["append_batch_ms_p50"] = round(float(np.percentile(lat, 50)) * 1000, 2)
        out["append_batch_ms_p99"] = round(float(np.percentile(lat, 99)) * 1000, 2)
        # The leaf-hash index of a 2^k log is exactly half full, so the first append started
        # its growth in the background: go on appending (bounded) until the grown table is
        # swapped in, so that the longest pause includes the swap.
        from tlog.storage.embedded import EmbeddedStorage

        index = store.driver.leaves if isinstance(store.driver, EmbeddedStorage) else None  # (PostgreSQL has none)
        deadline = time.monotonic() + RESIZE_WAIT_S
        timed = len(lat)
        while index is not None and index.resizing and time.monotonic() < deadline:
            b = time.perf_counter()
            r = store.append([entry_bytes(i, salt) for i in range(done, done + APPEND_BATCH)])
            lat.append(time.perf_counter() - b)
            done += APPEND_BATCH
        out["index_resized"] = index is None or not index.resizing
        # The five longest appends (batch number, ms), and which batch swapped the table in.
        longest = sorted(range(len(lat)), key=lambda i: -lat[i])[:5]
        out["append_pauses_top"] = [[i, round(lat[i] * 1000, 1)] for i in longest]
        out["append_swap_batch"] = len(lat) - 1 if len(lat) > timed else None
        out["append_pause_max_ms"] = round(max(out["first_append_s"], max(lat)) * 1000, 1)
        out["appended"] = done
        rss["appends"] = _hwm_mb()
        out["end"] = _status_mb()
        return out
    finally:
        store.close()


# --- disk ------------------------------------------------------------------------------------

def du(path: Path) -> int:
    """Bytes allocated on disk under `path` (st_blocks, as du counts them)."""
    if not path.exists():
        return 0
    if not path.is_dir():
        return path.lstat().st_blocks * 512
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def sqlite_free_bytes(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("PRAGMA freelist_count").fetchone()[0] * conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()


def evict(path: Path) -> int:
    """Drop a file, or a directory's files, from the page cache (synced first: clean pages
    only); returns the 4 KiB pages they span."""
    if not path.is_dir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            return os.fstat(fd).st_size // 4096
        finally:
            os.close(fd)
    return sum(evict(Path(root) / f) for root, _, files in os.walk(path) for f in files)


def free_bytes() -> int:
    st = os.statvfs(CACHE)
    return st.f_bavail * st.f_frsize


# --- the measuring processes ----------------------------------------------------------------

def run_child(spec: dict, timeout: float) -> dict:
    """`measure(spec)` in a fresh interpreter (nice'd like its parent); its JSON answer."""
    spec_path = CACHE / f"growth-spec-{os.getpid()}.json"
    fd = os.open(spec_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(spec, f)
    env = {**os.environ, "PYTHONPATH": str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t = time.perf_counter()
    try:
        p = children.run([sys.executable, str(Path(__file__).resolve()), "--child", str(spec_path)],
                         capture_output=True, text=True, timeout=timeout, env=env)
    finally:
        spec_path.unlink(missing_ok=True)
    if p.returncode != 0:
        raise RuntimeError(f"measuring process failed ({p.returncode}): {p.stderr[-3000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["process_seconds"] = round(time.perf_counter() - t, 1)
    out["peak_rss_mb"] = max(v for k, v in out["rss_mb"].items() if k != "imported")
    return out


def restore(path: Path, n: int, marker_text: str, saved_index: Path) -> None:
    """Put a cached embedded log back to exactly n entries after measured appends: the
    appended runs and checkpoints deleted, the leaf-hash index as it was before them; the
    store's own open then cuts the hash files back to the synced size and checks the
    signed root. Then the cache marker is written back."""
    from tlog.storage.embedded import EmbeddedStorage

    conn = sqlite3.connect(path / "log.db", isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("DELETE FROM runs WHERE first >= ?", (n,))
    conn.execute("DELETE FROM receipts WHERE idx >= ?", (n,))
    conn.execute("DELETE FROM checkpoints WHERE size > ?", (n,))
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('hashes_synced', ?)", (n,))
    # the published head of the deleted appends goes too (the store republishes the signed
    # head of size n at open, as after a first start), so a rewound log is no "foreign head"
    conn.execute("DELETE FROM meta WHERE key IN ('published_size', 'published_note')")
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    (path / "leafindex.bin.new").unlink(missing_ok=True)
    os.replace(saved_index, path / "leafindex.bin")
    store = EmbeddedStorage(path)
    state = store.open().signed
    store.close()
    if state is None or state.size != n or state.root.hex() != json.loads(marker_text)["root"]:
        raise RuntimeError(f"the cached log {path} did not go back to its signed root; it will be rebuilt")
    evict(path / "leafindex.bin")  # (copied: see embedded_size)
    (path / "bench-tree.json").write_text(marker_text)


# --- embedded -------------------------------------------------------------------------------

def embedded_size(k: int, cfg: dict, fresh: bool) -> dict:
    from build import build_log

    n = 1 << k
    path = CACHE / f"log-{k}"
    t = time.perf_counter()
    info = build_log(path, k, fresh=fresh)
    build_s = round(time.perf_counter() - t, 1)
    log(f"  embedded 2^{k}: {'cached' if info['cached'] else f'built in {build_s} s'}")
    res: dict = {"leaves": n, "cached": info["cached"],
                 "build_seconds": info["build_seconds"] if info["cached"] else build_s}
    # Disk, before anything is appended. Free pages SQLite keeps from an earlier run's
    # rolled-back appends (see restore below) are not counted: a log never deletes.
    total = du(path)
    free = sqlite_free_bytes(path / "log.db")
    parts = {"log_db": du(path / "log.db") + du(path / "log.db-wal") - free, "hash_files": du(path / "hashes"),
             "leaf_index": du(path / "leafindex.bin")}
    res["disk_bytes"] = total - free
    res["disk_bytes_per_entry"] = round((total - free) / n, 1)
    res["disk_parts_bytes_per_entry"] = {k2: round(v / n, 1) for k2, v in parts.items()}
    res["sqlite_free_bytes_not_counted"] = free

    spec = {"backend": "embedded", "data_dir": str(path), "log2": k, "salt": 0x6700 + k,
            "append_seconds": cfg["append_seconds"], "append_max": cfg["append_max"]}
    t = time.perf_counter()
    res["evicted_pages"] = evict(path)
    cold = run_child(spec | {"only": "startup"}, timeout=1800)
    res["startup_cold_s"] = cold["startup_s"]
    res["startup_cold_peak_rss_mb"] = cold["peak_rss_mb"]

    # The appends change the cached log: set it aside so that an interrupted run leaves a
    # log that is rebuilt next time (no marker), and keep the leaf-hash index to put back.
    marker = path / "bench-tree.json"
    marker_text = marker.read_text()
    saved_index = CACHE / f"growth-leafindex-{k}.bin"
    shutil.copyfile(path / "leafindex.bin", saved_index)
    # A copy reads and writes the file in large page-cache folios (read-ahead), which no log
    # process would have: drop both, so the measured process brings in its own pages.
    evict(path / "leafindex.bin")
    evict(saved_index)
    marker.unlink()
    warm = run_child(spec, timeout=1800)
    res["measure_seconds"] = round(time.perf_counter() - t, 1)
    res.update({key: warm[key] for key in MEASURED})
    res["peak_rss_mb"] = max(warm["peak_rss_mb"], cold["peak_rss_mb"])

    t = time.perf_counter()
    restore(path, n, marker_text, saved_index)
    res["restore_seconds"] = round(time.perf_counter() - t, 1)
    return res


# --- PostgreSQL + bucket ----------------------------------------------------------------------

class PgLog:
    """PostgreSQL and SeaweedFS started here (tlog.cli.engines), and a frontend that grows the
    log through `append`. Data in benchmarks/.cache/growth-pg, removed at the end."""

    def __init__(self) -> None:
        from tlog.cli.engines import Postgres, Seaweed, shared_buffers_mb
        from tlog.runtime.keyfiles import write_secret
        from tlog.server.service import checkpoint_signer, load_or_create_key

        self.work = CACHE / "growth-pg"
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        self.work.chmod(0o755)
        t = time.perf_counter()
        # The server has the machine to itself: the runbook's buffer pool (a quarter of the
        # memory), which holds the leaf-hash index that every append reads at random.
        self.pool_mb = shared_buffers_mb(dedicated=True)
        self.pg = Postgres(self.work / "pg", pool_mb=self.pool_mb).start()
        self.weed = Seaweed(self.work / "weed").start()
        self.weed.create_bucket("log")
        self.engines_start_s = round(time.perf_counter() - t, 1)
        self.front = self.work / "front"  # the filler's data directory; the measured restart reuses its cache
        self.front.mkdir()
        self.key_file = self.front / "log.key"
        self.sign = checkpoint_signer(load_or_create_key(self.front, ORIGIN))
        self.creds = self.work / "bucket.credentials"
        write_secret(self.creds, f"{self.weed.access_key} {self.weed.secret_key}")
        self.store = None
        self.fill_seconds = 0.0

    def spec(self, data_dir: Path, k: int) -> dict:
        return {"backend": "postgres", "data_dir": str(data_dir), "log2": k, "dsn": self.pg.dsn,
                "bucket_url": self.weed.bucket_url("log"), "credentials": str(self.creds),
                "key_file": str(self.key_file)}

    def _open(self):
        from tlog.server.config import LogConfig
        from tlog.server.service import open_publisher, open_storage

        if self.store is None:
            s = self.spec(self.front, 0)
            config = LogConfig(data_dir=self.front, origin=ORIGIN, storage="postgres", postgres_dsn=s["dsn"],
                               bucket_url=s["bucket_url"], bucket_credentials_file=self.creds, key_file=self.key_file)
            store = SyncAppender(open_storage(config), self.sign, publisher=open_publisher(config))
            store.wait_integrating()
            self.store = store
        return self.store

    def grow(self, n: int) -> float:
        """Append real entries in FILL_BATCH-entry batches until the log has n; seconds taken."""
        store = self._open()
        t = time.perf_counter()
        size = store.state.size
        while size < n:
            k = min(FILL_BATCH, n - size)
            r = store.append([entry_bytes(i) for i in range(size, size + k)])
            if not all(r.fresh):
                raise RuntimeError("a fill entry was already in the log")
            size = r.state.size
        took = time.perf_counter() - t
        self.fill_seconds += took
        return took

    def settle(self) -> float:
        """VACUUM (ANALYZE) and CHECKPOINT after a fill; seconds taken. A log grown at a
        service's pace has had its autovacuums and checkpoints along the way; a fill of 2^k
        entries in seconds leaves them all to come at once, inside the measured appends: at
        2^20 one append waited 108-134 ms on its commits without this, 60-64 ms with it."""
        import psycopg

        t = time.perf_counter()
        with psycopg.connect(self.pg.dsn, autocommit=True) as c:
            c.execute("VACUUM (ANALYZE)")
            c.execute("CHECKPOINT")
        return round(time.perf_counter() - t, 1)

    def index_reads(self) -> tuple[int, int]:
        """The entries' index pages read into the pool and found in it, so far."""
        import psycopg

        with psycopg.connect(self.pg.dsn, autocommit=True) as c:
            row = c.execute("SELECT coalesce(sum(idx_blks_read), 0), coalesce(sum(idx_blks_hit), 0) "
                            "FROM pg_statio_user_indexes WHERE relname = 'oap_entries'").fetchone()
        return int(row[0]), int(row[1])

    def close_store(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    def disk(self) -> dict:
        import psycopg

        with psycopg.connect(self.pg.dsn, autocommit=True) as c:
            db = c.execute("SELECT pg_database_size(current_database())").fetchone()[0]
            tables = dict(c.execute("SELECT relname, pg_total_relation_size(oid) FROM pg_class "
                                    "WHERE relname LIKE 'oap_%' AND relkind = 'r'").fetchall())
        from tlog.storage.bucket import Bucket

        bucket = Bucket.from_config(self.weed.bucket_url("log"), key_id=self.weed.access_key,
                                    secret=self.weed.secret_key)
        import obstore

        objects, object_bytes = 0, 0
        for batch in obstore.list(bucket.store):
            for meta in batch:
                objects += 1
                object_bytes += meta["size"]
        return {"pg_database_size": db, "pg_tables": tables, "pg_wal": du(self.pg.data / "pg_wal"),
                "bucket_objects": objects, "bucket_object_bytes": object_bytes,
                "seaweedfs_dir": du(self.work / "weed"), "frontend_hash_cache": du(self.front / "cache")}

    def close(self) -> None:
        try:
            self.close_store()
        finally:
            self.weed.stop()
            self.pg.stop()
            shutil.rmtree(self.work, ignore_errors=True)


def postgres_size(pg: PgLog, k: int, cfg: dict) -> dict:
    n = 1 << k
    t = time.perf_counter()
    before = pg._open().state.size
    pg.grow(n)
    filled_at = time.time()
    grow_s = round(time.perf_counter() - t, 1)
    pg.close_store()
    settle_s = pg.settle()
    log(f"  postgres 2^{k}: grown from {before:,} to {n:,} entries in {grow_s} s (vacuum + checkpoint {settle_s} s)")
    res: dict = {"leaves": n, "grown_from": before, "grow_seconds": grow_s, "settle_seconds": settle_s,
                 "grow_entries_per_s": round((n - before) / max(grow_s, 1e-9))}
    d = pg.disk()
    res["disk"] = d
    res["disk_bytes_per_entry"] = round((d["pg_database_size"] + d["bucket_object_bytes"]) / n, 1)
    res["disk_parts_bytes_per_entry"] = {
        "pg_database": round(d["pg_database_size"] / n, 1), "bucket_objects": round(d["bucket_object_bytes"] / n, 1),
        "seaweedfs_on_disk": round(d["seaweedfs_dir"] / n, 1),
        "frontend_hash_cache": round(d["frontend_hash_cache"] / n, 1)}
    t = time.perf_counter()
    # The appends first, as soon as the log has grown, as they follow each other in a log under
    # load; the new frontend's start-up (it reads the whole table through the pool) after them.
    # On a virtual machine, memory left untouched is at times several times slower to touch
    # again (benchmarks/README.md), and the fill was the last to touch most of the leaf-hash
    # index in PostgreSQL's pool. Let the disk finish the fill's writes first (the filler's
    # hash cache), so that the measured commits do not share it with their writeback (as
    # they did with a new frontend's deleted 1 GiB cache at 2^24, when that ran first).
    os.sync()
    before = pg.index_reads()
    warm = run_child(pg.spec(pg.front, k) | {"salt": 0x7000 + k, "append_seconds": cfg["append_seconds"],
                                             "append_max": cfg["append_max"]}, timeout=1800)
    res.update({key: warm[key] for key in MEASURED})
    res["seconds_from_fill_to_first_append"] = round(warm["first_append_at"] - filled_at, 1)
    # pages of the entries' indexes (leaf hash, primary key) the measuring process read into
    # the pool, and found in it; only its appends touch them
    res["index_pages_read"], res["index_pages_hit"] = (a - b for a, b in zip(pg.index_reads(), before))
    newfront = pg.work / "newfront"
    shutil.rmtree(newfront, ignore_errors=True)
    new = run_child(pg.spec(newfront, k) | {"only": "startup"}, timeout=3600)
    shutil.rmtree(newfront, ignore_errors=True)
    res["startup_new_frontend_s"] = new["startup_s"]
    res["startup_new_frontend_peak_rss_mb"] = new["peak_rss_mb"]
    res["measure_seconds"] = round(time.perf_counter() - t, 1)
    res["postgres_pool_mb"] = pg.pool_mb
    res["peak_rss_mb"] = max(warm["peak_rss_mb"], new["peak_rss_mb"])
    return res


# --- output -----------------------------------------------------------------------------------

def table(results: dict) -> str:
    rows = ["| backend | entries | build (s) | start-up (s) | start-up, cold / new frontend (s) "
            "| proofs/s (warm: median, slowest of 5) "
            "| appends/s | first append (s) | longest append (ms) | peak RSS (MB) | disk bytes/entry |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for backend, sizes in results.items():
        if backend.startswith("_"):
            continue
        name = "PostgreSQL + bucket" if backend == "postgres" else backend
        for k, r in sizes.items():
            if "skipped" in r:
                rows.append(f"| {name} | 2^{k} | not measured: {r['skipped']} | | | | | | | | |")
                continue
            if backend == "embedded":
                build = f"{r['build_seconds']:,}" + (" (cached)" if r["cached"] else "")
                other = r["startup_cold_s"]
            else:
                build = f"{r['grow_seconds']:,}" + (f" (from {r['grown_from']:,})" if r["grown_from"] else "")
                other = r["startup_new_frontend_s"]
            over = "" if r["peak_rss_mb"] <= RSS_TARGET_MB else " **over 300**"
            slowest = f", {r['proofs_slowest_per_s']:,}" if "proofs_slowest_per_s" in r else ""
            rows.append(f"| {name} | 2^{k} | {build} | {r['startup_s']} | {other} | {r['proofs_per_s']:,}{slowest} "
                        f"| {r['appends_per_s']:,} | {r['first_append_s']} | {r.get('append_pause_max_ms', '')} "
                        f"| {r['peak_rss_mb']}{over} "
                        f"| {r['disk_bytes_per_entry']:,} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="", help="comma-separated log2 sizes (default: embedded 20,22,24,26; "
                                                 "postgres 20,22,24)")
    ap.add_argument("--backends", default="embedded,postgres")
    ap.add_argument("--quick", action="store_true", help="2^16 and 2^18 only, short append runs (a smoke run)")
    ap.add_argument("--fresh", action="store_true", help="rebuild the cached embedded logs")
    ap.add_argument("--budget-minutes", type=float, default=60.0,
                    help="skip a size whose estimated build and measurement would end past this budget")
    ap.add_argument("--out", default="", help="default benchmarks/results/growth.json (--quick: growth-quick.json)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        spec = json.loads(Path(args.child).read_text())
        print(json.dumps(measure(spec)))
        return

    CACHE.mkdir(exist_ok=True)
    RESULTS.mkdir(exist_ok=True)
    args.out = args.out or str(RESULTS / ("growth-quick.json" if args.quick else "growth.json"))
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for b in backends:
        if b not in DEFAULT_SIZES:
            ap.error(f"unknown backend {b!r}")
    cfg = {"append_seconds": 3.0, "append_max": 20_000} if args.quick else \
        {"append_seconds": 10.0, "append_max": 200_000}
    t0 = time.perf_counter()
    budget = args.budget_minutes * 60
    # Rough costs per entry of what has no cache, refined as sizes finish: build (embedded,
    # bulk) and grow (PostgreSQL, through append) in seconds per entry.
    rate = {"embedded": 3e-6, "postgres": 3e-5}
    results: dict = {}
    for backend in backends:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()] if args.sizes else \
            (QUICK_SIZES if args.quick else DEFAULT_SIZES[backend])
        if backend == "postgres" and args.sizes and 26 in sizes:
            log("note: postgres 2^26 is not in the issue's table; measuring it as asked")
        out = results[backend] = {}
        pg = None
        try:
            for k in sorted(sizes):
                n = 1 << k
                if backend == "embedded":
                    marker = CACHE / f"log-{k}" / "bench-tree.json"
                    todo = 0 if marker.exists() and not args.fresh else n
                else:
                    todo = n - (pg.store.state.size if pg is not None and pg.store is not None else 0)
                # a cached embedded log needs room only for the leaf-hash index's copy and doubling
                per = DISK_PER_ENTRY[backend] if todo or backend == "postgres" else 100
                need = per * n + DISK_FIXED[backend]
                est = todo * rate[backend] + 60 + n * 1e-6
                left = budget - (time.perf_counter() - t0)
                if est > left:
                    out[str(k)] = {"leaves": n, "skipped": f"over the time budget (estimated {est / 60:.0f} min, "
                                                            f"{max(left, 0) / 60:.0f} min left)"}
                    log(f"  {backend} 2^{k}: skipped: {out[str(k)]['skipped']}")
                    continue
                if need > free_bytes():
                    out[str(k)] = {"leaves": n, "skipped": f"not enough disk ({need >> 30} GiB needed, "
                                                            f"{free_bytes() >> 30} GiB free)"}
                    log(f"  {backend} 2^{k}: skipped: {out[str(k)]['skipped']}")
                    continue
                log(f"{backend} 2^{k} ...")
                t = time.perf_counter()
                if backend == "embedded":
                    r = embedded_size(k, cfg, args.fresh)
                    if not r["cached"]:
                        rate["embedded"] = r["build_seconds"] / n
                else:
                    if pg is None:
                        pg = PgLog()
                    r = postgres_size(pg, k, cfg)
                    if todo:
                        rate["postgres"] = r["grow_seconds"] / todo
                r["wall_seconds"] = round(time.perf_counter() - t, 1)
                out[str(k)] = r
                log(f"  {backend} 2^{k}: {r['wall_seconds']} s; start-up {r['startup_s']} s, "
                    f"{r['proofs_per_s']:,} proofs/s, {r['appends_per_s']:,} appends/s, "
                    f"peak RSS {r['peak_rss_mb']} MB, {r['disk_bytes_per_entry']} disk bytes/entry")
        finally:
            if pg is not None:
                pg.close()
    from tlog.storage import hashfiles

    results["_meta"] = results_meta(
        command=" ".join(["benchmarks/growth.py", *sys.argv[1:]]), mode="quick" if args.quick else "full",
        seconds=round(time.perf_counter() - t0), nice=os.nice(0), map_window_mb=hashfiles.DEFAULT_MAP_WINDOW_MB,
        proof_batch=PROOF_BATCH, proof_reps=PROOF_REPS, append_batch=APPEND_BATCH, **cfg,
        rss_target_mb=RSS_TARGET_MB, postgres_fill_batch=FILL_BATCH)
    results = {"_meta": results.pop("_meta"), **results}
    text = json.dumps(results, indent=2) + "\n"
    Path(args.out).write_text(text)
    md = describe_meta(results["_meta"]) + "\n\n" + table(results)
    Path(args.out).with_suffix(".md").write_text(md + "\n")
    print(text)
    log("\n" + md + f"\n\nwrote {args.out} and {Path(args.out).with_suffix('.md')}")


if __name__ == "__main__":
    main()
