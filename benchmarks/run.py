#!/usr/bin/env python3
"""The benchmarks behind the figures: `python benchmarks/run.py [--quick] [--only a,b] [--fresh]`.

Writes benchmarks/results/latest.json (and full.json or quick.json: the last
complete run of that mode), each benchmark name -> {"value",
"unit", "params", and where measured "baseline", "ratio"}; "_meta" holds the
machine and the command) and prints a table. See benchmarks/README.md for
what each number means, what limits it, and the profiles behind it.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402
from build import build_log  # noqa: E402
from common import ORIGIN, Result, best_of, entry_bytes, entry_json, median, meta, round_stats  # noqa: E402
from httpload import (  # noqa: E402
    LUA_APPEND_SINGLE,
    LUA_BODIES,
    LUA_STATUS,
    LUA_TILES,
    BareServer,
    RegistryServer,
    Server,
    WitnessServer,
    get,
    have_wrk,
    post,
    run_pyload,
    run_wrk,
)

from tlog.formats.hashing import leaf_hash, node_hash, node_hashes  # noqa: E402
from tlog.merkle.batchverify import verify_inclusion_batch  # noqa: E402
from tlog.merkle.proofs import ProofBatch, consistency_levels, inclusion_levels  # noqa: E402
from tlog.merkle.tree import TreeView  # noqa: E402
from tlog.merkle.verify import verify_consistency, verify_inclusion  # noqa: E402
from tlog.server.appender import Appender  # noqa: E402
from tlog.server.service import checkpoint_signer, load_or_create_key  # noqa: E402
from tlog.storage import hashfiles as hashfiles_mod  # noqa: E402
from tlog.storage.embedded import EmbeddedStorage  # noqa: E402
from tlog.storage.interface import LogState  # noqa: E402

CACHE = HERE / ".cache"
# http_append_single: the server's batch interval (p99 target = this + 50 ms). 200 clients that
# each wait for their answer get at most 200 answers per cycle (interval + commit + answers),
# so the interval bounds the rate: 5 ms, at up to 200 fsyncs/s, leaves room for 8,000/s.
SINGLE_INTERVAL_MS = 5
# tile_reads: extra processes answering tiles (`read_workers`, tlog.server.readworkers). The load
# generator takes ~0.5 of this machine's 2 cores, so one worker uses the rest.
READ_WORKERS = 1
STATUS_POPULATION = 10_000  # status_lookups: ids asked (the epoch caches up to 20,000 answers)
RESULTS = HERE / "results"

QUICK = dict(big_log2=20, pm_log2=18, batch=20_000, pm_subset=5_000, reps=3, append_entries=50_000,
             http_seconds=3, batched_requests=40, single_total=30_000, witness_logs=40, witness_per_log=25,
             scale_log2=18, mirror_ingest=100_000, mirror_catchup=200_000, monitor_catchup=1_000_000)
FULL = dict(big_log2=24, pm_log2=20, batch=100_000, pm_subset=100_000, reps=5, append_entries=300_000,
            http_seconds=10, batched_requests=240, single_total=200_000, witness_logs=100, witness_per_log=100,
            scale_log2=20, mirror_ingest=300_000, mirror_catchup=1_000_000, monitor_catchup=10_000_000)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass
class Opened:
    """A built log's driver and its signed state (what the benchmarks read)."""

    driver: EmbeddedStorage
    state: LogState

    @property
    def hashes(self):
        return self.driver.hashes

    def close(self) -> None:
        self.driver.close()


class Bench:
    def __init__(self, cfg: dict, fresh: bool) -> None:
        self.cfg = cfg
        self.fresh = fresh
        self.results: dict[str, Result] = {}
        self.rng = np.random.default_rng(7)
        self._pm = None  # (tree size, pymerkle tree, indices, our proofs...) shared by two benchmarks

    # --- helpers ---------------------------------------------------------------------

    def big_log(self) -> tuple[Path, dict]:
        k = self.cfg["big_log2"]
        path = CACHE / f"log-{k}"
        t = time.perf_counter()
        info = build_log(path, k, fresh=self.fresh)
        if not info["cached"]:
            log(f"  built a persisted log of 2^{k} leaves in {time.perf_counter() - t:.0f} s")
        return path, info

    def open_store(self, path: Path, **kw) -> tuple[Opened, callable]:
        """A built log, opened as the server opens it, read-only from here."""
        sign = checkpoint_signer(load_or_create_key(path, ORIGIN))
        store = EmbeddedStorage(path, **kw)
        signed = store.open().signed
        assert signed is not None, "the built log has a signed checkpoint"
        view = TreeView(signed.size, store.hashes.read)
        return Opened(store, LogState(signed.size, signed.root, signed.note, view)), sign

    def add(self, r: Result) -> None:
        self.results[r.name] = r

    # --- keys in a PKCS#11 token (SoftHSM2 from make tools; tlog.runtime.pkcs11) ---------

    def pkcs11(self) -> None:
        """The log and a witness signing with an Ed25519 key inside SoftHSM2: the signing
        primitive (file key vs token, one thread and two), the log's HTTP appends (checkpoint
        signed in the token per batch) and the witness's cosignatures over HTTP."""
        import threading

        from tlog.formats import keys
        from tlog.runtime import pkcs11

        from tests.support import softhsm

        if softhsm.library() is None or softhsm.util() is None:
            log("  SoftHSM2 is not in .venv/softhsm (make tools): skipped")
            return
        root = Path(tempfile.mkdtemp(dir=CACHE, prefix="softhsm-"))
        try:
            hsm = softhsm.SoftHSM(root, ("bench",))
            log_uri, witness_uri = hsm.uri("bench", "log"), hsm.uri("bench", "witness")
            pkcs11.generate_ed25519(log_uri)
            pkcs11.generate_ed25519(witness_uri)
            token = pkcs11.open_signer(log_uri)
            file_key = keys.ed25519_signer(os.urandom(32))
            msg = bytes(120)  # about a checkpoint's or a cosignature message's size

            def rate(signer, threads: int, n: int) -> float:
                def work() -> None:
                    for _ in range(n // threads):
                        signer.sign(msg)
                t = time.perf_counter()
                pool = [threading.Thread(target=work) for _ in range(threads)]
                for th in pool:
                    th.start()
                for th in pool:
                    th.join()
                return n / (time.perf_counter() - t)

            n = 400 if self.cfg is QUICK else 2000
            one, two = rate(token, 1, n), rate(token, 2, n)
            self.add(Result("pkcs11_sign", round(one), "signatures/s", {
                "what": "Ed25519 (CKM_EDDSA) signatures of a 120-byte message by a key inside SoftHSM2 2.6 "
                        "(python-pkcs11, one logged-in session, the library's lock around each call)",
                "two_threads_per_s": round(two), "file_key_per_s": round(rate(file_key, 1, 20 * n)),
                "signatures": n, "load_average_1m": round(os.getloadavg()[0], 2)}))
            env = {"OAP_LOG_KEY_FILE": log_uri}
            for which in ("batched", "single"):
                d = Path(tempfile.mkdtemp(dir=CACHE, prefix="http-append-pkcs11-"))
                try:
                    if which == "batched":
                        with Server(d, env=env) as srv:
                            self._http_append_batched(srv, "http_append_batched_pkcs11", key="SoftHSM2 token")
                    else:
                        with Server(d, "--batch-interval-ms", str(SINGLE_INTERVAL_MS), env=env) as srv:
                            self._http_append_single(srv, "http_append_single_pkcs11", key="SoftHSM2 token")
                finally:
                    shutil.rmtree(d, ignore_errors=True)
            nlogs, per_log = self.cfg["witness_logs"], self.cfg["witness_per_log"]
            load, _, runs = self._witness_http(("ed25519",), key_file=witness_uri)
            self.add(Result("witness_cosign_pkcs11", round(load.rate), "requests/s", {
                "logs": nlogs, "checkpoints_per_log": per_log, **runs,
                **load.describe(), "key": "Ed25519 in SoftHSM2, signing on the witness's worker threads",
                "what": "as witness_cosign, with the cosigning key in the token"}, target=1000))
        finally:
            shutil.rmtree(root, ignore_errors=True)

    # --- scale-out: PostgreSQL + SeaweedFS + two frontends (benchmarks/scaleout.py) -----

    def scaleout(self) -> None:
        import scaleout

        secs = self.cfg["http_seconds"]
        self.add(scaleout.append_batched(secs))
        self.add(scaleout.append_single(secs))
        tiles = self.results.get("tile_reads")
        for r in scaleout.proofs_and_tiles(1 << self.cfg["scale_log2"], secs, tiles.value if tiles else None):
            self.add(r)

    # --- in-process benchmarks -----------------------------------------------------------

    def sha256_nodes(self) -> None:
        n = 200_000
        a, b = os.urandom(32), os.urandom(32)
        def loop():
            for _ in range(n):
                node_hash(a, b)
        t, times = best_of(loop, 3)
        left = self.rng.integers(0, 256, (n, 32), dtype=np.uint8)
        right = self.rng.integers(0, 256, (n, 32), dtype=np.uint8)
        tb, _ = best_of(lambda: node_hashes(left, right), 3)
        self.add(Result("sha256_nodes", round(n / t), "hashes/s", {
            "what": "RFC 9162 node hashes, hashlib (OpenSSL), one call per node in a Python loop",
            **round_stats([n / x for x in times]), "value_is": "the fastest of the rounds",
            "batched_node_hashes_per_s": round(n / tb), "nodes": n}))

    @staticmethod
    def _warm_rate(store: Opened, batches: list) -> tuple[float, float, ProofBatch, float]:
        """Proofs/s over a first pass over `batches`, the median of a second pass, the
        second pass's last batch of proofs, and the slowest batch of the second pass."""
        view, hashes = store.state.view, store.hashes
        t = time.perf_counter()
        for x in batches:
            inclusion_levels(view, hashes, x)
        first = sum(x.size for x in batches) / (time.perf_counter() - t)
        times = []
        for x in batches:
            t = time.perf_counter()
            pb = inclusion_levels(view, hashes, x)
            times.append(time.perf_counter() - t)
        return first, batches[0].size / median(times), pb, batches[0].size / max(times)

    def proofs_batched(self) -> None:
        path, info = self.big_log()
        n, bsz, reps = info["leaves"], self.cfg["batch"], self.cfg["reps"]
        # Cold: evict the hash files from the page cache, then a fresh store (new maps).
        evicted = _evict(path / "hashes")
        store, _ = self.open_store(path)
        view, hashes = store.state.view, store.hashes
        idx = self.rng.integers(0, n, bsz)
        t = time.perf_counter()
        inclusion_levels(view, hashes, idx)
        cold = time.perf_counter() - t
        t = time.perf_counter()
        inclusion_levels(view, hashes, self.rng.integers(0, n, bsz))
        second = time.perf_counter() - t
        batches = [self.rng.integers(0, n, bsz) for _ in range(reps)]
        # A first pass reads every page once: "warm" is the steady state of a serving process.
        _, rate, pb, slowest = self._warm_rate(store, batches)
        warm = bsz / rate
        # Spot check against the reference builder and verifier.
        for i in random.Random(1).sample(range(bsz), 20):
            ref = view.inclusion_proof(int(batches[-1][i]))
            assert pb.split(text=False)[i] == ref
            verify_inclusion(int(batches[-1][i]), n, hashes.read(0, int(batches[-1][i])), ref, view.root)
        tj, _ = best_of(lambda: pb.json(), 2)
        tc, _ = best_of(lambda: pb.cbor(), 2)
        store.close()
        # The same batches with the page cache in 4 KiB pages (as our own appends leave it),
        # then with no map window (every page the batches touch stays mapped).
        _evict(path / "hashes", small_pages=True)
        store, _ = self.open_store(path)
        small_first, small, _, _ = self._warm_rate(store, batches)
        regrown = store.hashes.regrown
        store.close()
        store, _ = self.open_store(path, map_window=0)
        unbounded = self._warm_rate(store, batches)[1]
        store.close()
        _evict(path / "hashes")  # the next reader's faults bring the pages back in as 2 MiB pages
        self.add(Result("proofs_batched", round(bsz / warm), "proofs/s", {
            "tree_size": n, "batch": bsz, "warm_batches": reps, "warm_seconds_median": round(warm, 4),
            "warm_slowest_proofs_per_s": round(slowest),
            "map_window_mb": hashes.window >> 20,
            "cold_proofs_per_s": round(bsz / cold), "cold_seconds": round(cold, 3), "cold_evicted_pages": evicted,
            "second_batch_proofs_per_s": round(bsz / second),
            "small_pages_first_pass_proofs_per_s": round(small_first), "small_pages_proofs_per_s": round(small),
            "small_pages_windows_regrown": regrown, "no_window_proofs_per_s": round(unbounded),
            "json_encode_per_s": round(bsz / tj),
            "cbor_encode_per_s": round(bsz / tc), "cores": 1,
            "code": "tlog.merkle.proofs.inclusion_levels (what POST /v1/proof/inclusion:batch calls)"}, target=1e6))

    def _pymerkle_setup(self):
        if self._pm is not None:
            return self._pm
        from pymerkle import InmemoryTree

        k = self.cfg["pm_log2"]
        path = CACHE / f"log-{k}"
        info = build_log(path, k, fresh=self.fresh)
        n = info["leaves"]
        t = time.perf_counter()
        tree = InmemoryTree(algorithm="sha256")
        for i in range(n):
            tree.append_entry(entry_bytes(i))
        log(f"  pymerkle InmemoryTree of 2^{k} entries built in {time.perf_counter() - t:.0f} s")
        store, _ = self.open_store(path)
        assert tree.get_root(n) == store.state.root, "pymerkle and tlog disagree on the root"
        idx = self.rng.integers(0, n, self.cfg["batch"])
        self._pm = (n, tree, idx, store)
        return self._pm

    def proofs_batched_vs_pymerkle(self) -> None:
        n, tree, idx, store = self._pymerkle_setup()
        view, hashes = store.state.view, store.hashes
        inclusion_levels(view, hashes, idx)  # map pages once, as in a serving process
        ours, times = best_of(lambda: inclusion_levels(view, hashes, idx), 3)
        sub = idx[: self.cfg["pm_subset"]]
        t = time.perf_counter()
        pm_proofs = [tree.prove_inclusion(int(i) + 1, n) for i in sub]
        theirs = time.perf_counter() - t
        pb = inclusion_levels(view, hashes, sub[:50])
        for i, p in enumerate(pm_proofs[:50]):  # same proofs: pymerkle's path is leaf + ours
            assert [bytes.fromhex(h) for h in p.serialize()["path"]][1:] == pb.split(text=False)[i]
        self._pm_proofs = pm_proofs
        ours_rate, theirs_rate = len(idx) / ours, len(sub) / theirs
        self.add(Result("proofs_batched_vs_pymerkle", round(ours_rate), "proofs/s", {
            "tree_size": n, "batch": len(idx), "pymerkle_proofs_timed": len(sub),
            **round_stats([len(idx) / x for x in times]),
            "value_is": "the fastest of the rounds; pymerkle: one pass over its subset, in the same run",
            "pymerkle": "InmemoryTree.prove_inclusion(i + 1, n), one call per index"},
            baseline={"name": "pymerkle InmemoryTree.prove_inclusion", "value": round(theirs_rate)}, target=100,
        ))
        self.results["proofs_batched_vs_pymerkle"].params["ratio_target"] = ">= 100"

    def verify_batched(self) -> None:
        from pymerkle import verify_inclusion as pm_verify

        n, tree, idx, store = self._pymerkle_setup()
        view, hashes = store.state.view, store.hashes
        pb = inclusion_levels(view, hashes, idx)
        rows, counts = pb.rows(), pb.counts()
        leaves = hashes.gather(0, idx)
        root = view.root
        t_b, times = best_of(lambda: verify_inclusion_batch(idx, n, leaves, (rows, counts), root), 3)
        # The plain reference verifier, one proof at a time (on a subset).
        sub = min(len(idx), 20_000)
        proofs = pb.split(text=False)
        lv = [leaves[i].tobytes() for i in range(sub)]
        t = time.perf_counter()
        for i in range(sub):
            verify_inclusion(int(idx[i]), n, lv[i], proofs[i], root)
        t_ref = time.perf_counter() - t
        # pymerkle's verify_inclusion on its own proofs of the same indices.
        pm_proofs = getattr(self, "_pm_proofs", None) or [tree.prove_inclusion(int(i) + 1, n)
                                                          for i in idx[: self.cfg["pm_subset"]]]
        t = time.perf_counter()
        for i, p in enumerate(pm_proofs):
            pm_verify(lv[i] if i < sub else leaves[i].tobytes(), root, p)
        t_pm = time.perf_counter() - t
        # End to end from .tlog-proof texts: parse each bundle, then one batch.
        from tlog.formats.proofbundle import ProofBundle, parse_proof_bundle

        note = store.state.note
        nb = min(len(idx), 20_000)
        texts = [ProofBundle(index=int(idx[i]), proof=tuple(proofs[i]), checkpoint=note).to_text() for i in range(nb)]
        t = time.perf_counter()
        parsed = [parse_proof_bundle(x) for x in texts]
        flat = [h for p in parsed for h in p.proof]
        verify_inclusion_batch([p.index for p in parsed], n, leaves[:nb],
                               (np.frombuffer(b"".join(flat), dtype=np.uint8).reshape(-1, 32),
                                np.array([len(p.proof) for p in parsed])), root)
        t_e2e = time.perf_counter() - t
        self.add(Result("verify_batched", round(len(idx) / t_b), "proofs/s", {
            "tree_size": n, "proofs": len(idx), "code": "tlog.merkle.batchverify.verify_inclusion_batch",
            **round_stats([len(idx) / x for x in times]),
            "value_is": "the fastest of the rounds; pymerkle: one pass over its proofs, in the same run",
            "reference_verify_inclusion_per_s": round(sub / t_ref),
            "pymerkle_proofs_timed": len(pm_proofs),
            "bundles_parse_and_verify_per_s": round(nb / t_e2e), "cores": 1},
            baseline={"name": "pymerkle verify_inclusion", "value": round(len(pm_proofs) / t_pm)}, target=300_000))

    def consistency_proofs(self) -> None:
        path, info = self.big_log()
        n, bsz = info["leaves"], self.cfg["batch"]
        store, _ = self.open_store(path)
        hashes = store.hashes
        def pairs():
            new = self.rng.integers(2, n + 1, bsz)
            return (self.rng.random(bsz) * (new - 1)).astype(np.int64) + 1, new
        olds, news = pairs()
        consistency_levels(hashes, olds, news)
        times = []
        for _ in range(self.cfg["reps"]):
            o, nw = pairs()
            t = time.perf_counter()
            pb = consistency_levels(hashes, o, nw)
            times.append(time.perf_counter() - t)
        got = pb.split(text=False)
        for i in random.Random(2).sample(range(bsz), 10):  # spot check against the reference
            v_new, v_old = TreeView(int(nw[i]), hashes.read), TreeView(int(o[i]), hashes.read)
            assert got[i] == v_new.consistency_proof(int(o[i]))
            verify_consistency(int(o[i]), int(nw[i]), v_old.root, v_new.root, got[i])
        latest = np.full(bsz, n)
        t_l, _ = best_of(lambda: consistency_levels(hashes, olds, latest), 3)
        store.close()
        self.add(Result("consistency_proofs", round(bsz / median(times)), "proofs/s", {
            "tree_size": n, "batch": bsz, "pairs": "old uniform in 1..new-1, new uniform in 2..n",
            **round_stats([bsz / x for x in times]), "value_is": "the median round",
            "to_latest_per_s": round(bsz / t_l), "cores": 1,
            "code": "tlog.merkle.proofs.consistency_levels"}, target=200_000))

    def append_durable(self) -> None:
        total = self.cfg["append_entries"]
        d = Path(tempfile.mkdtemp(dir=CACHE, prefix="append-"))
        try:
            fsync_ms = _fdatasync_ms(d)
            sign = checkpoint_signer(load_or_create_key(d, ORIGIN))
            batches: list[tuple[int, float]] = []
            store = EmbeddedStorage(d)

            async def main() -> float:
                seq = Appender(store, sign, max_batch=1000, batch_interval=0.05,
                               on_batch=lambda k, s: batches.append((k, s)))
                await seq.start()
                datas = [entry_bytes(i, salt=1) for i in range(total)]
                chunks = [datas[i : i + 1000] for i in range(0, total, 1000)]
                it = iter(chunks)

                async def submitter() -> None:
                    for c in it:
                        await seq.add_many(c)

                t = time.perf_counter()
                await asyncio.gather(*(submitter() for _ in range(4)))
                wall = time.perf_counter() - t
                await seq.close()
                return wall

            wall = asyncio.run(main())
            check = EmbeddedStorage(d)
            st = check.open().signed
            check.close()
            assert st is not None and st.size == total
        finally:
            shutil.rmtree(d, ignore_errors=True)
        commit = [s for _, s in batches]
        self.add(Result("append_durable", round(total / wall), "entries/s", {
            "entries": total, "batches": len(batches), "mean_batch": round(total / len(batches)),
            "commit_ms_median": round(median(commit) * 1000, 2), "commit_ms_max": round(max(commit) * 1000, 2),
            "fdatasync_4k_ms": fsync_ms,
            "submitters": 4, "durability": "SQLite WAL: entries committed with synchronous=NORMAL, the checkpoint "
            "covering them with FULL: one fsync per checkpoint",
            "code": "tlog.server.appender.Appender.add_many -> EmbeddedStorage.sequence, record_checkpoint"},
            target=80_000))

    # --- HTTP ------------------------------------------------------------------------------

    def http_appends(self) -> None:
        for which in ("batched", "single"):
            d = Path(tempfile.mkdtemp(dir=CACHE, prefix="http-append-"))
            try:
                if which == "batched":
                    with Server(d) as srv:
                        self._http_append_batched(srv)
                else:
                    with Server(d, "--batch-interval-ms", str(SINGLE_INTERVAL_MS)) as srv:
                        self._http_append_single(srv)
            finally:
                shutil.rmtree(d, ignore_errors=True)

    def _http_append_batched(self, srv: Server, name: str = "http_append_batched", **extra) -> None:
        nreq = self.cfg["batched_requests"]
        bodies = [("{\"entries\":[" + ",".join(entry_json(r * 1000 + i, 2) for i in range(1000)) + "]}").encode()
                  for r in range(nreq)]
        port = srv.port
        load, first = run_pyload(srv, lambda i: post("/v1/entries:batch", bodies[i], port), connections=4,
                                 total=nreq, seconds=120)
        doc = json.loads(first)
        # The first response to arrive answers one of the first `connections` requests.
        from tlog.formats.encoding import b64dec

        got = b64dec(doc["results"][0]["leaf_hash"])
        which = [r for r in range(4) if leaf_hash(entry_bytes(r * 1000, 2)) == got]
        assert len(which) == 1, "the first response answers none of the first requests"
        _check_batch_response(doc, [entry_bytes(which[0] * 1000 + i, 2) for i in range(1000)])
        self.add(Result(name, round(load.requests * 1000 / load.seconds), "entries/s", {
            "entries_per_request": 1000, "clients": 4, **load.describe(), **extra,
            "server": "oap-log serve, defaults (max_batch 1024, batch_interval_ms 50)",
            "check": "first response parsed; its proofs verified against its checkpoint"}, target=40_000))

    def _append_single_load(self, srv: Server):
        secs = self.cfg["http_seconds"]
        if have_wrk():
            return run_wrk(srv, LUA_APPEND_SINGLE, [str(random.randrange(1, 1 << 30))], connections=200,
                           seconds=secs)
        port = srv.port
        salt = random.randrange(1 << 40)
        return run_pyload(srv, lambda i: post("/v1/entries", entry_json(i, salt).encode(), port),
                          connections=200, total=self.cfg["single_total"], seconds=secs)[0]

    def _http_append_single(self, srv: Server, name: str = "http_append_single", **extra) -> None:
        load = self._append_single_load(srv)
        with BareServer() as bare:
            base = self._append_single_load(bare)
        limit = SINGLE_INTERVAL_MS + 50
        r = Result(name, round(load.rate), "entries/s", {
            "clients": 200, **load.describe(), **extra, "batch_interval_ms": SINGLE_INTERVAL_MS,
            "p99_target_ms": f"< {limit} (batch interval + 50 ms)",
            "p99_meets_target": load.latencies_ms.get("p99_ms", 1e9) < limit,
            "baseline_load": base.describe()},
            baseline={"name": "bare aiohttp handler: parse JSON + SHA-256 (benchmarks/bare.py), same load",
                      "value": round(base.rate)}, target=8000)
        self.add(r)

    def http_reads(self) -> None:
        path, info = self.big_log()
        n = info["leaves"]
        with Server(path) as srv:
            self._http_proofs(srv, n, "cbor")
            self._http_proofs(srv, n, "json")
            one = self._tile_load(srv, n // 256)  # the default: one process
            mem = srv.memory()
        with Server(path, "--read-workers", str(READ_WORKERS)) as srv:
            self._tile_reads(srv, n, one)
        with Server(path, env={"OAP_LOG_MAP_WINDOW_MB": "0"}) as srv:
            unbounded = self._http_proofs(srv, n, "cbor", record=False)
            umem = srv.memory()
        hash_bytes = sum(p.stat().st_size for p in (path / "hashes").iterdir())
        self.add(Result("memory", mem["VmHWM"], "MB", {
            "what": "peak RSS (VmHWM) of oap-log serve (defaults) after the proof and tile benchmarks",
            "tree_size": n, "map_window_mb": hashfiles_mod.DEFAULT_MAP_WINDOW_MB,
            "rss_anon_mb": mem["RssAnon"], "rss_file_mb": mem["RssFile"], "vm_rss_mb": mem["VmRSS"],
            "hash_files_mb": hash_bytes >> 20,
            "no_window": "map_window_mb = 0 (OAP_LOG_MAP_WINDOW_MB=0), the CBOR proof load",
            "no_window_peak_rss_mb": umem["VmHWM"], "no_window_rss_file_mb": umem["RssFile"],
            "no_window_proofs_per_s": unbounded},
            target=300, target_op="<="))

    def _http_proofs(self, srv: Server, n: int, enc: str, *, record: bool = True) -> float:
        per = 10_000
        files = []
        tmp = Path(tempfile.mkdtemp(dir=CACHE, prefix="bodies-"))
        try:
            for k in range(8):
                f = tmp / f"b{k}.json"
                f.write_text(json.dumps({"indices": self.rng.integers(0, n, per).tolist()}))
                files.append(str(f))
            accept = "application/oap+cbor" if enc == "cbor" else "application/json"
            _check_proof_response(srv, n, Path(files[0]), accept)
            secs = self.cfg["http_seconds"]
            if have_wrk():
                load = run_wrk(srv, LUA_BODIES, ["/v1/proof/inclusion:batch", accept, *files], connections=2,
                               seconds=secs, timeout_s=30)
            else:
                bodies = [Path(f).read_bytes() for f in files]
                port = srv.port
                load, _ = run_pyload(srv, lambda i: post("/v1/proof/inclusion:batch", bodies[i % 8], port,
                                                         accept=accept),
                                     connections=2, total=100_000, seconds=secs)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        rate = load.rate * per
        if record:
            name = "http_proofs_batched" if enc == "cbor" else "http_proofs_batched_json"
            self.add(Result(name, round(rate), "proofs/s", {
                "tree_size": n, "indices_per_request": per, "encoding": accept, "clients": 2,
                **load.describe()}, target=300_000 if enc == "cbor" else None))
        return round(rate)

    def _tile_load(self, srv: Server, ntiles: int, seconds: float | None = None):
        secs = seconds or self.cfg["http_seconds"]
        if have_wrk():
            return run_wrk(srv, LUA_TILES, [str(ntiles), str(random.randrange(1 << 20))], connections=64,
                           seconds=secs)
        from tlog.formats.tiles import tile_path

        port = srv.port
        paths = [("/" + tile_path(0, random.randrange(ntiles))) for _ in range(4096)]
        return run_pyload(srv, lambda i: get(paths[i % 4096], port), connections=64, total=400_000,
                          seconds=secs)[0]

    def _tile_reads(self, srv: Server, n: int, one_process) -> None:
        self._tile_load(srv, n // 256, seconds=2)  # warm-up: the worker's page tables and parse caches
        load = self._tile_load(srv, n // 256)
        with BareServer() as bare:
            base = self._tile_load(bare, n // 256)
        self.add(Result("tile_reads", round(load.rate), "requests/s", {
            "tree_size": n, "tiles": "random full level-0 tiles (8 KiB)", "clients": 64, **load.describe(),
            "server": f"oap-log serve --read-workers {READ_WORKERS} (server_cpu_util: the log and its worker)",
            "one_process": round(one_process.rate), "one_process_load": one_process.describe(),
            "baseline_load": base.describe()},
            baseline={"name": "bare aiohttp handler answering 8 KiB (benchmarks/bare.py), same load",
                      "value": round(base.rate)}, target=20_000))

    def _witness_chains(self, d: Path, nlogs: int, per_log: int, cosigners: tuple[str, ...],
                        key_file: str = "") -> list[list[bytes]]:
        """A witness config in d/witness.toml following `nlogs` logs, and each log's chain of
        add-checkpoint bodies (old = previous size, consistency proof, signed note)."""
        from tlog.formats.checkpoint import Checkpoint
        from tlog.formats.encoding import b64enc
        from tlog.formats.keys import Signer
        from tlog.formats.note import sign_note
        from tlog.merkle.tree import build_levels

        logs = [Signer.generate(f"bench-log-{i}.example/log") for i in range(nlogs)]
        toml = [f'[witness]\ndata_dir = "{d / "data"}"\nname = "bench-witness.example"\n'
                f"cosigners = {json.dumps(list(cosigners))}\n"
                + (f"key_file = {json.dumps(key_file)}\n" if key_file else "")]
        for s in logs:
            toml.append(f'[[witness.logs]]\norigin = "{s.name}"\nvkey = "{s.vkey}"\n')
        d.mkdir(parents=True, exist_ok=True)
        (d / "witness.toml").write_text("\n".join(toml))
        chains = []
        for li, signer in enumerate(logs):
            levels = build_levels([leaf_hash(b"%d:%d" % (li, j)) for j in range(per_log)])
            seq = []
            for size in range(1, per_log + 1):
                view = TreeView(size, lambda k, j, levels=levels: levels[k][j])
                proof = view.consistency_proof(size - 1)
                note = sign_note(Checkpoint(signer.name, size, view.root).to_text(), [signer])
                seq.append((f"old {size - 1}\n" + "".join(b64enc(h) + "\n" for h in proof) + "\n" + note).encode())
            chains.append(seq)
        return chains

    def _witness_http(self, cosigners: tuple[str, ...], rounds: int = 3, key_file: str = ""):
        """`rounds` runs of every log's chain against a fresh `oap-witness serve` (empty state
        each time); the run with the median rate, and every run's rate with the slowest run's p99.
        A run is ~5 s of CPU-bound work, so one slow stretch of a shared host moves a single run by
        a fifth either way."""
        nlogs, per_log = self.cfg["witness_logs"], self.cfg["witness_per_log"]
        d = Path(tempfile.mkdtemp(dir=CACHE, prefix="witness-"))
        loads = []
        try:
            chains = self._witness_chains(d, nlogs, per_log, cosigners, key_file)
            sequences = [[post("/add-checkpoint", b, 0, content_type="text/plain") for b in seq] for seq in chains]
            for _ in range(rounds):
                shutil.rmtree(d / "data", ignore_errors=True)
                with WitnessServer(d / "witness.toml") as srv:  # (the requests' Host header says port 0: unused)
                    load, first = run_pyload(srv, None, connections=nlogs, total=0, seconds=120,
                                             sequences=sequences)
                assert first.startswith("\u2014 ".encode()), first[:200]  # a cosignature line
                assert load.requests == nlogs * per_log and load.errors == 0, load.describe()
                loads.append(load)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        loads.sort(key=lambda x: x.rate)
        return loads[len(loads) // 2], first, {**round_stats([x.rate for x in loads]), "value_is": "the median round",
                                               "slowest_round_p99_ms": _ms(loads[0].latencies_ms.get("p99_ms"))}

    def witness_cosign(self) -> None:
        """Durable add-checkpoint requests from many logs at once against `oap-witness serve`."""
        nlogs, per_log = self.cfg["witness_logs"], self.cfg["witness_per_log"]
        load, _, runs = self._witness_http(("ed25519",))
        self.add(Result("witness_cosign", round(load.rate), "requests/s", {
            "logs": nlogs, "checkpoints_per_log": per_log, **runs, **load.describe(),
            "what": "POST /add-checkpoint, each log one connection sending its checkpoints in order "
                    "(old = previous size, consistency proof, signed note); durable before the answer",
            "check": "every answer 200 with a cosignature line (errors count 409/4xx/5xx)"}, target=2000))

    def witness_mldsa(self) -> None:
        """ML-DSA-44 witness cosignatures per second beside Ed25519 ones, measured in the same run:
        the signing primitive, the witness core (verify, CAS, durable group commit, sign) and
        `oap-witness serve` over HTTP."""
        from concurrent.futures import ThreadPoolExecutor

        from tlog.formats import mldsa
        from tlog.runtime.config import load as load_config
        from witness.config import WitnessConfig
        from witness.core import Witness
        from witness.keyfiles import load_or_create_keys
        from witness.state import WitnessState

        # 1. the primitive: pyca/cryptography ML-DSA-44 signatures of a subtree/v1-sized message
        signer, msg = mldsa.Signer(mldsa.generate_seed()), bytes(120)
        n = 2000 if self.cfg is QUICK else 6000
        t0 = time.perf_counter()
        for _ in range(n // 2):
            signer.sign(msg)
        one_core = (n // 2) / (time.perf_counter() - t0)
        threads = max(2, os.cpu_count() or 2)
        with ThreadPoolExecutor(threads) as ex:
            t0 = time.perf_counter()
            list(ex.map(lambda _: signer.sign(msg), range(n)))
            all_cores = n / (time.perf_counter() - t0)
        sig = signer.sign(msg)
        t0 = time.perf_counter()
        for _ in range(n // 2):
            mldsa.verify(signer.public, msg, sig)
        verify_rate = (n // 2) / (time.perf_counter() - t0)

        # 2. the witness core, in process: many logs at once, each its chain in order
        nlogs, per_log = self.cfg["witness_logs"], self.cfg["witness_per_log"]

        def core(cosigners: tuple[str, ...]) -> tuple[float, int, float]:
            d = Path(tempfile.mkdtemp(dir=CACHE, prefix="witness-core-"))
            try:
                chains = self._witness_chains(d, nlogs, per_log, cosigners)
                cfg = load_config(WitnessConfig, section="witness", env_prefix="OAP_BENCH_WITNESS_",
                                  file=d / "witness.toml")
                signers, _ = load_or_create_keys(cfg)
                state = WitnessState(cfg.state_path)
                w = Witness(signers, cfg.logs, state)
                lines = 0

                async def one(chain: list[bytes]) -> int:
                    got = 0
                    for body in chain:
                        got += len((await w.submit(body)).signatures)
                    return got

                async def run() -> tuple[float, float]:
                    nonlocal lines
                    t, cpu = time.perf_counter(), time.process_time()
                    lines = sum(await asyncio.gather(*(one(c) for c in chains)))
                    return time.perf_counter() - t, time.process_time() - cpu

                try:
                    seconds, cpu = asyncio.run(run())
                finally:
                    state.close()
                # CPU seconds of this process (event loop and signing threads) per request: what
                # the rate would be per core if the machine's other load left it the whole core
                return nlogs * per_log / seconds, lines, nlogs * per_log / cpu
            finally:
                shutil.rmtree(d, ignore_errors=True)

        core_ed, _, ed_per_cpu = core(("ed25519",))
        pq_runs = sorted((core(("mldsa44",)) for _ in range(3)), key=lambda r: r[0])  # median of three
        core_pq, pq_lines, pq_per_cpu = pq_runs[1]
        core_both, both_lines, _ = core(("ed25519", "mldsa44"))
        assert pq_lines == nlogs * per_log and both_lines == 2 * nlogs * per_log
        base = {"name": "witness_core_ed25519", "value": round(core_ed)}
        self.add(Result("mldsa44_sign", round(all_cores), "signatures/s", {
            "one_core_per_s": round(one_core), "load_average_1m": round(os.getloadavg()[0], 2), "threads": threads,
            "verify_per_s": round(verify_rate),
            "what": "pyca/cryptography ML-DSA-44 signatures of a 120-byte message (a subtree/v1 cosigned_message), "
                    "on worker threads (it releases the GIL); one core; verification on one core"}))
        self.add(Result("witness_core_mldsa44", round(core_pq), "cosignatures/s", {
            "logs": nlogs, "checkpoints_per_log": per_log, "ed25519_per_s": round(core_ed),
            "ed25519_and_mldsa44_requests_per_s": round(core_both),
            **round_stats([r[0] for r in pq_runs]), "value_is": "the median round",
            "per_cpu_second": round(pq_per_cpu), "ed25519_per_cpu_second": round(ed_per_cpu),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "what": "witness.core.Witness.submit in process, every log's chain at once: parse, log signature, "
                    "consistency proof, ML-DSA-44 cosignature on worker threads, durable group commit (SQLite, "
                    "synchronous=FULL); beside the same run with an Ed25519 key and with both keys"},
            baseline=base, target=1500))
        load, first, runs = self._witness_http(("mldsa44",))
        assert len(first.split(b" ", 2)[2].strip()) > 3000  # an ML-DSA-44 cosignature line (base64 of 2,432 bytes)
        ed = self.results.get("witness_cosign")
        self.add(Result("witness_http_mldsa44", round(load.rate), "cosignatures/s", {
            "logs": nlogs, "checkpoints_per_log": per_log, **runs, **load.describe(),
            "what": "POST /add-checkpoint to `oap-witness serve` with cosigners = [\"mldsa44\"], as witness_cosign: "
                    "one ML-DSA-44 cosignature per answer, durable before the answer",
            "check": "every answer 200 with a cosignature line (errors count 409/4xx/5xx)"},
            baseline={"name": "witness_cosign", "value": ed.value} if ed is not None else None, target=1500))

    def mirror(self) -> None:
        """`oap-mirror serve`: ingest with a cosigned checkpoint per request and with one checkpoint
        for all, and its memory during a catch-up (benchmarks/mirror.py)."""
        import mirror

        for r in mirror.ingest(self.cfg["mirror_ingest"]):
            self.add(r)
        self.add(mirror.catchup_memory(self.cfg["mirror_catchup"]))

    def monitor(self) -> None:
        """`oap-monitor run --once` catching up on a log it has never seen (benchmarks/monitoring.py)."""
        import monitoring

        self.add(monitoring.catchup(self.cfg["monitor_catchup"]))

    def status_lookups(self) -> None:
        """Signed revocation-status responses from `oap-registry serve` (anchoring in a real log)."""
        import urllib.request

        d = Path(tempfile.mkdtemp(dir=CACHE, prefix="registry-"))
        try:
            with Server(d / "log") as log_srv, RegistryServer(d / "registry", log_srv.url) as reg:
                deadline = time.monotonic() + 60
                while True:  # ready = the first status epoch is signed and anchored
                    try:
                        with urllib.request.urlopen(reg.url + "/readyz", timeout=5) as r:
                            if r.status == 200:
                                break
                    except OSError:
                        pass
                    if time.monotonic() > deadline:
                        raise RuntimeError("registry never became ready")
                    time.sleep(0.2)
                with urllib.request.urlopen(reg.url + "/v1/status/urn:oap:bench:1", timeout=10) as r:
                    doc = json.loads(r.read())
                assert doc["type"] == "oap-status-response" and doc["signature"], doc
                secs = self.cfg["http_seconds"]
                # Ids from a population the epoch's cache holds (DESIGN §6: responses are produced once
                # per epoch and cached): a warm-up pass signs each once, the measured pass serves them.
                warm = self._status_load(reg, STATUS_POPULATION, max(3.0, secs / 2), sequential=True)
                load = self._status_load(reg, STATUS_POPULATION, secs)
                # The worst case: every id new, so every answer is signed on request.
                fresh = self._status_load(reg, 10**9, secs / 2)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        self.add(Result("status_lookups", round(load.rate), "responses/s", {
            "what": f"GET /v1/status/<id> for ids from a population of {STATUS_POPULATION:,}: signed "
                    "oap-status-responses (absence proof in the revocation tree) for the current epoch, "
                    "each produced once per epoch (the warm-up) and then served from the epoch's cache",
            "clients": 64, **load.describe(), "revoked_records": 0,
            "warmup_responses_per_s": round(warm.rate), "warmup_requests": warm.requests,
            "warmup_covered_population": warm.requests >= STATUS_POPULATION,
            "unique_ids_per_s": round(fresh.rate), "unique_ids": "every id new: one Ed25519 signature per answer",
            "unique_ids_p99_ms": fresh.latencies_ms.get("p99_ms")}, target=15_000))

    def _status_load(self, reg: Server, population: int, seconds: float, sequential: bool = False):
        if have_wrk():
            return run_wrk(reg, LUA_STATUS, [str(random.randrange(1 << 20)), str(population),
                                             "seq" if sequential else "random"], connections=64, seconds=seconds)
        port = reg.port
        pick = (lambda i: i % population + 1) if sequential else (lambda i: random.randrange(population) + 1)
        return run_pyload(reg, lambda i: get(f"/v1/status/urn:oap:bench:{pick(i)}", port),
                          connections=64, total=400_000, seconds=seconds)[0]


# --- checks and small helpers --------------------------------------------------------------


def _evict(directory: Path, *, small_pages: bool = False) -> int:
    """Drop a directory's files from the page cache (clean pages only; they are synced).
    With `small_pages`, read them back in with readahead off: 4 KiB pages, as a log's own
    appends leave its hash files, where a fault through a map reads them as 2 MiB pages."""
    pages = 0
    for p in directory.iterdir():
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            size = os.fstat(fd).st_size
            pages += size // 4096
            if small_pages:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                for off in range(0, size, 1 << 20):
                    os.pread(fd, 1 << 20, off)
        finally:
            os.close(fd)
    return pages


def _fdatasync_ms(d: Path) -> float:
    fd = os.open(d / "fsync-probe", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        times = []
        for i in range(20):
            os.pwrite(fd, os.urandom(4096), i * 4096)
            t = time.perf_counter()
            os.fdatasync(fd)
            times.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        os.unlink(d / "fsync-probe")
    return round(median(times) * 1000, 3)


def _check_batch_response(doc: dict, entries: list[bytes]) -> None:
    from tlog.formats.checkpoint import parse_checkpoint
    from tlog.formats.encoding import b64dec

    cp = parse_checkpoint(doc["checkpoint"].split("\n\n")[0] + "\n")
    for i in (0, len(entries) // 2, len(entries) - 1):
        r = doc["results"][i]
        assert b64dec(r["leaf_hash"]) == leaf_hash(entries[i])
        verify_inclusion(r["index"], cp.size, leaf_hash(entries[i]), [b64dec(h) for h in r["inclusion_proof"]],
                         cp.root)


def _check_proof_response(srv: Server, n: int, body_file: Path, accept: str) -> None:
    """One request outside the timed run: decode it fully and verify some proofs."""
    import urllib.request

    import cbor2

    from tlog.formats.checkpoint import parse_checkpoint
    from tlog.formats.encoding import b64dec

    body = body_file.read_bytes()
    req = urllib.request.Request(srv.url + "/v1/proof/inclusion:batch", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "Accept": accept})
    with urllib.request.urlopen(req, timeout=60) as resp:
        raw = resp.read()
    doc = cbor2.loads(raw) if "cbor" in accept else json.loads(raw)
    cp = parse_checkpoint(doc["checkpoint"].split("\n\n")[0] + "\n")
    indices = json.loads(body)["indices"]
    sample = random.Random(3).sample(range(len(indices)), 5)
    with urllib.request.urlopen(f"{srv.url}/tile/0/{_tile(indices[sample[0]] // 256)}", timeout=30) as resp:
        tile = resp.read()
    for i in sample[:1]:
        proof = doc["proofs"][i]
        proof = proof if "cbor" in accept else [b64dec(h) for h in proof]
        leaf = tile[(indices[i] % 256) * 32 : (indices[i] % 256) * 32 + 32]
        verify_inclusion(indices[i], cp.size, leaf, proof, cp.root)
    assert cp.size == n and len(doc["proofs"]) == len(indices)


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _tile(i: int) -> str:
    from tlog.formats.tiles import tile_path

    return tile_path(0, i).split("/", 2)[2]


# --- output --------------------------------------------------------------------------------

def table(results: dict[str, Result]) -> str:
    rows = [("benchmark", "value", "unit", "target", "ok", "baseline", "ratio", "notes")]
    for r in results.values():
        j = r.to_json()
        ok = {True: "yes", False: "NO", None: "-"}[r.meets()]
        base = f"{r.baseline['value']:,}" if r.baseline else ""
        ratio = str(j.get("ratio", ""))
        notes = r.skipped or _notes(r)
        val = "skipped" if r.value is None else f"{r.value:,}"
        tgt = f"{r.target_op} {r.target:,.0f}" if r.target is not None else ""
        rows.append((r.name, val, r.unit, tgt, ok, base, ratio, notes))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]) - 1)]
    out = []
    for k, row in enumerate(rows):
        out.append("  ".join(str(c).ljust(w) for c, w in zip(row[:-1], widths)) + "  " + row[-1])
        if k == 0:
            out.append("-" * (sum(widths) + 2 * len(widths) + 20))
    return "\n".join(out)


def _notes(r: Result) -> str:
    p = r.params
    keys = {"proofs_batched": ["warm_slowest_proofs_per_s", "cold_proofs_per_s", "small_pages_first_pass_proofs_per_s",
                               "small_pages_proofs_per_s", "no_window_proofs_per_s"],
            "proofs_batched_vs_pymerkle": ["tree_size", "median_round_per_s", "slowest_round_per_s"],
            "verify_batched": ["median_round_per_s", "slowest_round_per_s", "bundles_parse_and_verify_per_s",
                               "reference_verify_inclusion_per_s"],
            "consistency_proofs": ["slowest_round_per_s", "to_latest_per_s"],
            "append_durable": ["commit_ms_median", "commit_ms_max", "fdatasync_4k_ms"],
            "http_append_single": ["p50_ms", "p99_ms", "server_cpu_util", "client_cpu_util"],
            "http_append_batched": ["p50_ms", "server_cpu_util", "client_cpu_util"],
            "http_proofs_batched": ["server_cpu_util", "client_cpu_util"],
            "http_proofs_batched_json": ["server_cpu_util", "client_cpu_util"],
            "tile_reads": ["p99_ms", "server_cpu_util", "client_cpu_util"],
            "memory": ["rss_anon_mb", "rss_file_mb", "no_window_peak_rss_mb", "no_window_proofs_per_s"],
            "witness_cosign": ["logs", "slowest_round_per_s", "slowest_round_p99_ms", "p50_ms", "p99_ms", "errors",
                               "server_cpu_util", "client_cpu_util"],
            "mldsa44_sign": ["one_core_per_s", "verify_per_s"],
            "witness_core_mldsa44": ["slowest_round_per_s", "ed25519_per_s", "ed25519_and_mldsa44_requests_per_s",
                                     "per_cpu_second", "load_average_1m"],
            "witness_http_mldsa44": ["slowest_round_per_s", "slowest_round_p99_ms", "p50_ms", "p99_ms", "errors",
                                     "server_cpu_util", "client_cpu_util"],
            "mirror_ingest": ["entries", "requests", "mirror_cpu_seconds", "mirror_peak_rss_mb"],
            "mirror_ingest_bulk": ["entries", "requests", "answered_202", "mirror_cpu_seconds"],
            "mirror_catchup_memory": ["entries", "entries_per_s", "seconds"],
            "monitor_catchup": ["entries", "seconds", "peak_rss_mb", "load_average_1m_before"],
            "status_lookups": ["p50_ms", "p99_ms", "errors", "server_cpu_util", "client_cpu_util"],
            "sha256_nodes": ["slowest_round_per_s", "batched_node_hashes_per_s"],
            "scale_append_batched": ["p50_ms", "server_cpu_util", "client_cpu_util"],
            "scale_append_single": ["p50_ms", "p99_ms", "server_cpu_util", "client_cpu_util"],
            "scale_proofs_batched": ["one_frontend_proofs_per_s", "in_process_proofs_per_s",
                                     "in_process_slowest_round_per_s"],
            "scale_tile_reads": ["p99_ms", "log_tile_reads_req_per_s"]}.get(r.name, [])
    return " ".join(f"{k}={p[k]:,}" if isinstance(p.get(k), (int, float)) and not isinstance(p.get(k), bool)
                    else f"{k}={p.get(k)}" for k in keys if k in p)


ORDER = ["sha256_nodes", "proofs_batched", "proofs_batched_vs_pymerkle", "verify_batched", "consistency_proofs",
         "append_durable", "http_appends", "http_reads", "witness_cosign", "witness_mldsa", "mirror", "monitor",
         "status_lookups", "pkcs11", "scaleout"]
GROUP = {"http_append_batched": "http_appends", "http_append_single": "http_appends",
         "http_proofs_batched": "http_reads", "tile_reads": "http_reads", "memory": "http_reads",
         "scale_append_batched": "scaleout", "scale_append_single": "scaleout", "scale_proofs_batched": "scaleout",
         "scale_tile_reads": "scaleout", "mldsa44_sign": "witness_mldsa", "witness_core_mldsa44": "witness_mldsa",
         "witness_http_mldsa44": "witness_mldsa", "mirror_ingest": "mirror", "mirror_ingest_bulk": "mirror",
         "mirror_catchup_memory": "mirror", "monitor_catchup": "monitor", "pkcs11_sign": "pkcs11",
         "http_append_batched_pkcs11": "pkcs11",
         "http_append_single_pkcs11": "pkcs11", "witness_cosign_pkcs11": "pkcs11"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="reduced sizes (under 2 minutes)")
    ap.add_argument("--only", default="", help="comma-separated benchmark names")
    ap.add_argument("--fresh", action="store_true", help="rebuild the cached persisted logs")
    ap.add_argument("--out", default=str(RESULTS / "latest.json"))
    args = ap.parse_args()
    cfg = QUICK if args.quick else FULL
    CACHE.mkdir(exist_ok=True)
    RESULTS.mkdir(exist_ok=True)
    wanted = [x.strip() for x in args.only.split(",") if x.strip()]
    groups = [g for g in ORDER if not wanted or g in wanted or any(GROUP.get(w) == g for w in wanted)]
    bench = Bench(cfg, args.fresh)
    t0 = time.perf_counter()
    log(f"mode: {'quick' if args.quick else 'full'}; load generator: "
        f"{'wrk' if have_wrk() else 'python asyncio (wrk not installed)'}")
    for g in groups:
        t = time.perf_counter()
        log(f"running {g} ...")
        getattr(bench, g)()
        log(f"  {g}: {time.perf_counter() - t:.1f} s")
    if bench._pm is not None:
        bench._pm[3].close()
    info = meta(mode="quick" if args.quick else "full", command=" ".join(["benchmarks/run.py", *sys.argv[1:]]),
                seconds=round(time.perf_counter() - t0), config=cfg, map_window_mb=hashfiles_mod.DEFAULT_MAP_WINDOW_MB)
    out = {"_meta": info} | {name: r.to_json() for name, r in bench.results.items()}
    text = json.dumps(out, indent=2) + "\n"
    Path(args.out).write_text(text)
    if not args.only and Path(args.out) == RESULTS / "latest.json":  # keep the last complete run of each mode
        (RESULTS / f"{info['mode']}.json").write_text(text)
    m = info["machine"]
    print(f"\n{info['mode']} run, {info['seconds']} s, commit {(info['commit'] or 'unknown')[:12]}, "
          f"{m['nproc']} x {m['cpu']}, Python {m['python']}, numpy {m['numpy']}, "
          f"load: {'wrk' if m['wrk'] else 'python asyncio'}\n")
    print(table(bench.results))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
