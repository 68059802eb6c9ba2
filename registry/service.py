"""A running registry (primary or mirror): open, serve reads, produce status epochs, close.

Primary: owns the repository, accepts records (`Batcher` -> `RegistryWriter`),
anchors every commit in the log. Mirror (`upstream` set): follows an upstream
registry with `Mirror.sync` every `mirror_interval` seconds, read-only.
Either runs the OCSP-style status service when it has a key and a log to
anchor its epochs in (a mirror signs with its own key: anyone may run a
Revocation Service, OAP-CORE-1.0 §22.1).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar, TypeVarTuple

import aiohttp

from tlog.client.client import LogClient, token_from
from tlog.client.verifier import TrustPolicy
from tlog.didresolver import DidResolver
from tlog.errors import ConfigError, NotFound, Unavailable, UpstreamError
from tlog.formats import keys
from tlog.formats.did import did_key_from_public
from tlog.formats.hashing import sha256
from tlog.service import keyfiles
from tlog.storage.files import lock_dir

from .anchoring import Anchorer, Genesis, genesis_bytes
from .batcher import Batcher
from .config import RegistryConfig
from .history import Replayer, replay
from .index import CommitInfo, Index
from .metrics import RegistryMetrics
from .mirror import Mirror, SyncResult
from .records import Record
from .status import Epoch, Produced, StatusProducer
from .statuslist import status_list_credential
from .store import MAIN, ReadGate, RegistryRepo
from .writer import RegistryWriter, write_durably

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

log = logging.getLogger("oap.registry")
KEY_NAME = "oap-registry"


def load_or_create_key(path: Path) -> bytes:
    """The registry's Ed25519 key (tlog signer-key format, 0600), created on first use."""
    if not path.exists():
        signer = keys.Signer.generate(KEY_NAME)
        keyfiles.write_private_key(path, signer.to_skey())
        log.info("generated a new registry key in %s", path)
    signer = keys.Signer.from_skey(keyfiles.read_private_key(path))
    did = did_key_from_public(signer.public)
    did_path = path.with_suffix(".did")
    if not did_path.exists():
        did_path.write_text(did + "\n")
    return signer.export_seed()  # the record helpers sign with the raw seed, as tlog.cli.main does


def _read_only_dir(path: Path) -> bool:
    return not os.access(path, os.W_OK) or bool(os.statvfs(path).f_flag & os.ST_RDONLY)


def lock_data_dir(data_dir: Path) -> int:
    """One process per data directory: the writer assumes it alone moves the refs."""
    try:
        return lock_dir(data_dir, "registry.lock", "registry")
    except OSError as e:
        raise ConfigError(f"cannot use {data_dir} ({e.strerror}); a read-only registry can still be served "
                          "by mirrors (oap-registry serve --upstream) or read with git clone") from None


@dataclass
class RegistryService:
    config: RegistryConfig
    repo: RegistryRepo
    index: Index
    metrics: RegistryMetrics
    executor: ThreadPoolExecutor
    lock_fd: int | None
    seed: bytes | None = None
    read_only: bool = False  # a read-only data directory: history served, writes answer 503
    registry: str = ""  # the registry key (did:key) whose history this is
    genesis: Genesis | None = None
    anchorer: Anchorer | None = None  # primary: commits + epochs; mirror: epochs only
    writer: RegistryWriter | None = None
    batcher: Batcher | None = None
    mirror: Mirror | None = None
    producer: StatusProducer | None = None
    epoch: Epoch | None = None
    resolver: DidResolver | None = None  # signers named by did:web, did:plc
    gate: ReadGate = field(default_factory=ReadGate)
    _tasks: list[asyncio.Task] = field(default_factory=list)
    _dirty: asyncio.Event = field(default_factory=asyncio.Event)
    _status_counters: dict = field(default_factory=dict)  # labelled children, looked up once
    _closing: bool = False
    _epoch_future: asyncio.Future | None = None  # resolved when a new epoch is published (push streams)
    watchers: int = 0  # open push streams
    _watching: bool = True

    @property
    def data_dir(self) -> Path:
        return self.config.data_dir

    async def in_thread(self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    # --- open / close ------------------------------------------------------------------

    @classmethod
    async def open(cls, config: RegistryConfig) -> RegistryService:
        config.data_dir.mkdir(parents=True, exist_ok=True)
        read_only = _read_only_dir(config.data_dir) and (config.data_dir / "registry.git" / "HEAD").exists()
        fd = None if read_only else lock_data_dir(config.data_dir)
        repo = RegistryRepo(config.data_dir / "registry.git")
        svc = cls(config, repo, Index(), RegistryMetrics(), ThreadPoolExecutor(1, thread_name_prefix="registry"), fd,
                  read_only=read_only)
        try:
            if read_only:
                await svc._open_read_only()
                return svc
            if config.mirror:
                await svc._open_mirror()
            else:
                await svc._open_primary()
            if svc.seed is not None and svc.anchorer is not None:
                svc.producer = StatusProducer(svc.seed, svc.repo, svc.index, svc.data_dir / "anchors",
                                              history=svc.registry)
                svc._tasks.append(asyncio.create_task(svc._epochs(), name="registry-epochs"))
        except BaseException:
            await svc.close()
            raise
        return svc

    async def _open_read_only(self) -> None:
        """Serve the committed history (records, files, git clone) from a read-only
        directory, e.g. a disk remounted ro after errors; submissions answer 503."""
        replayer = Replayer(self.repo, self.index, strict=False, anchors_dir=None)
        await self.in_thread(replay, self.repo, self.index, self.repo.ref(MAIN), replayer)
        self.genesis = replayer.genesis
        self.registry = replayer.genesis.registry if replayer.genesis else ""
        self.metrics.head_seq.set(self.index.head.seq if self.index.head else 0)
        log.error("data directory %s is read-only: serving the registry's history, refusing writes", self.data_dir)

    def _policy(self) -> TrustPolicy | None:
        path = self.config.log_policy
        return TrustPolicy.from_text(Path(path).read_text()) if path else None

    async def _open_primary(self) -> None:
        cfg = self.config
        self.seed = load_or_create_key(cfg.key_file or cfg.data_dir / "registry.key")
        me = did_key_from_public(keys.Signer(KEY_NAME, self.seed).public)
        replayer = Replayer(self.repo, self.index, strict=False, anchors_dir=self.data_dir / "anchors")
        await self.in_thread(replay, self.repo, self.index, self.repo.ref(MAIN), replayer)
        policy = self._policy()
        info = await self._log_info()
        if replayer.genesis is None:
            policy = policy or TrustPolicy.for_log(info["verifier_key"])
            genesis = genesis_bytes(me, cfg.name, info["origin"], info["verifier_key"], cfg.bootstrap,
                                    datetime.now(UTC))
        else:
            genesis = None
            if replayer.genesis.registry != me:
                raise ConfigError(f"this repository is registry {replayer.genesis.registry}; the key given is {me}. "
                                  "Use that registry's key, or serve it read-only with --upstream")
            if info["verifier_key"] != replayer.genesis.log_vkey and self.config.log_policy is None:
                raise ConfigError(f"the log at {cfg.log_url} has key {info['verifier_key']}, but this registry "
                                  f"anchors in {replayer.genesis.log_vkey}")
            policy = policy or TrustPolicy.for_log(replayer.genesis.log_vkey)
        self.anchorer = Anchorer(cfg.log_url, self.seed, policy, token=self._log_token())
        self.registry = me
        self.writer = RegistryWriter(self.repo, self.index, self.anchorer, self.data_dir, self.executor, replayer,
                                     strict_l4=cfg.l4_witnesses_hold_level, policy=policy)
        self.resolver = DidResolver.from_config(cfg)
        self.writer.on_commit = self._on_commit
        self.writer.gate, self.writer.max_packs = self.gate, cfg.max_packs
        if genesis is not None:
            await self.writer.create_genesis(genesis)
        await self.writer.recover()
        self.genesis = replayer.genesis
        self.metrics.head_seq.set(self.index.head.seq if self.index.head else 0)
        self.batcher = Batcher(self.writer, max_batch=cfg.max_batch, batch_interval=cfg.batch_interval_ms / 1000,
                               idle=cfg.anchor_idle_seconds)
        self.batcher.start()

    async def _log_info(self) -> dict[str, Any]:
        """The log's origin and key, waiting up to `log_wait_seconds` for it to come up
        (a local network may start the log and the registry together)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.log_wait_seconds
        async with LogClient(self.config.log_url, timeout=10) as client:
            while True:
                try:
                    return await client.info()
                except (TimeoutError, OSError, aiohttp.ClientError, UpstreamError) as e:
                    if loop.time() >= deadline:
                        raise ConfigError(f"the log at {self.config.log_url} is not reachable: {e}") from None
                    await asyncio.sleep(0.5)

    def _log_token(self) -> str | None:
        path = self.config.log_token_file
        return token_from(path) if path is not None else None

    async def _open_mirror(self) -> None:
        cfg = self.config
        self.mirror = Mirror(self.data_dir, cfg.upstream, repo=self.repo, index=self.index,
                             registry=cfg.registry_key or None, policy=self._policy(), metrics=self.metrics)
        await self.in_thread(self.mirror.load)
        self.registry = self.mirror.registry or ""
        if cfg.log_url:
            self.seed = load_or_create_key(cfg.key_file or cfg.data_dir / "registry.key")
            self.anchorer = Anchorer(cfg.log_url, self.seed, None, token=self._log_token())
        self._tasks.append(asyncio.create_task(self._follow(), name="registry-mirror"))

    @property
    def watching(self) -> bool:
        return self._watching

    def stop_watchers(self) -> None:
        """End the push streams (the server is shutting down; clients reconnect elsewhere)."""
        self._watching = False
        self._wake_watchers()

    async def close(self) -> None:
        self._closing = True
        self.stop_watchers()
        self._dirty.set()
        if self.batcher is not None:
            await self.batcher.close()
        if self.resolver is not None:
            await self.resolver.close()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        if self.anchorer is not None:
            await self.anchorer.close()
        self.executor.shutdown(wait=True)
        self.repo.close()
        if self.lock_fd is not None:
            os.close(self.lock_fd)

    # --- mirror loop --------------------------------------------------------------------

    async def sync_once(self) -> SyncResult:
        assert self.mirror is not None
        result = await self.in_thread(self.mirror.sync)
        if await self.in_thread(self.repo.pack_count) > self.config.max_packs:
            async with self.gate.write():
                await self.in_thread(self.repo.compact)
        if not result.refused:
            self.index = self.mirror.index
            self.registry = self.mirror.registry or ""
            if self.producer is not None:
                self.producer.index, self.producer.history = self.index, self.registry
            if result.verified:
                self._dirty.set()
        return result

    async def _follow(self) -> None:
        while not self._closing:
            try:
                result = await self.sync_once()
                if result.refused:
                    log.error("mirror refused the upstream: %s (report %s)", result.message, result.report)
            except Exception as e:  # the upstream being down is not fatal
                log.warning("mirror sync failed: %s", e)
            await asyncio.sleep(self.config.mirror_interval)

    # --- status epochs ------------------------------------------------------------------

    def _on_commit(self, info: CommitInfo, records: list[Record]) -> None:
        self.metrics.commits.inc()
        self.metrics.head_seq.set(info.seq)
        self.metrics.batch_size.observe(len(records))
        for rec in records:
            self.metrics.records.labels(rec.type).inc()
        if records:
            self._dirty.set()

    @property
    def _epoch_file(self) -> Path:
        return self.data_dir / "status-epoch.json"

    async def new_epoch(self) -> Epoch:
        assert self.producer is not None and self.anchorer is not None
        last = json.loads(self._epoch_file.read_text())["epoch"] if self._epoch_file.exists() else 0
        at = datetime.now(UTC).replace(microsecond=0)
        epoch = self.producer.prepare(last + 1, at, timedelta(seconds=self.config.epoch_seconds))
        epoch.anchor = await self.anchorer.anchor_statement(epoch.statement_hash, epoch.statement_id)
        await self.in_thread(self.producer.preproduce, epoch)
        write_durably(self._epoch_file, json.dumps({"epoch": epoch.number}).encode())
        self.epoch = epoch
        self._wake_watchers()
        self.metrics.epoch.set(epoch.number)
        self.metrics.revoked.set(epoch.tree.size)
        return epoch

    async def _epochs(self) -> None:
        loop = asyncio.get_running_loop()
        last_build = 0.0
        while not self._closing:
            if self.index.head is None:
                await asyncio.sleep(0.5)
                continue
            wait = max(0.0, self.config.min_epoch_interval - (loop.time() - last_build))
            if wait:
                await asyncio.sleep(wait)
            self._dirty.clear()
            try:
                epoch = await self.new_epoch()
            except Exception as e:
                log.warning("status epoch failed (keeping the previous one): %s", e)
                await asyncio.sleep(1.0)
                continue
            last_build = loop.time()
            validity = (epoch.next_update - epoch.this_update).total_seconds()
            full = validity >= self.config.epoch_seconds
            refresh = epoch.this_update + timedelta(seconds=validity * (0.75 if full else 1.0))
            timeout = max(0.0, (refresh - datetime.now(UTC)).total_seconds())
            try:
                await asyncio.wait_for(self._dirty.wait(), timeout)
            except TimeoutError:
                pass

    def status_now(self, key: str) -> tuple[Epoch, Produced] | None:
        """The answer for `key` without leaving the event loop; None when it needs Git
        (a `revoked` or `suspended` answer not produced yet: see `status`)."""
        producer = self.producer
        if producer is None and self.read_only:
            raise Unavailable("the data directory is read-only: no status epoch can be signed and anchored "
                              "until this clears; ask a mirror", retry_after=60)
        if producer is None:
            raise NotFound("this registry runs no status service (it needs a key and --log-url)")
        epoch = self.epoch
        if epoch is None:
            raise Unavailable("no status epoch has been produced yet; retry shortly", retry_after=1)
        got = producer.cached(epoch, key)
        if got is None:
            if key in epoch.standing:
                return None
            got = producer.produce(epoch, key)
            producer.remember(epoch, key, got)
        self._count_status(got.body["status"])
        return epoch, got

    def _count_status(self, status: str) -> None:
        child = self._status_counters.get(status)
        if child is None:
            child = self._status_counters[status] = self.metrics.status_responses.labels(status)
        child.inc()

    async def status(self, key: str) -> tuple[Epoch, Produced]:
        now = self.status_now(key)
        if now is not None:
            return now
        producer, epoch = self.producer, self.epoch  # status_now checked both, with no await since
        assert producer is not None and epoch is not None
        got = await self.in_thread(producer.produce_standing, epoch, key)
        producer.remember(epoch, key, got)
        self._count_status(got.body["status"])
        return epoch, got

    def status_list(self, issuer: str, number: int, url: str, purpose: str = "revocation") -> tuple[Epoch, Produced]:
        """The issuer's list `number` for `purpose` (registry.statuslist says what sets its bits)."""
        if self.producer is None or self.seed is None:
            raise NotFound("this registry runs no status service")
        epoch = self.epoch
        if epoch is None:
            raise Unavailable("no status epoch has been produced yet; retry shortly", retry_after=1)
        cache_key = (issuer, number, url, purpose)
        got = epoch.list_cache.get(cache_key)
        if got is None:
            ttl_ms = max(1000, int((epoch.next_update - epoch.this_update).total_seconds() * 1000))
            whole = epoch.issuer_standing(issuer)
            if purpose == "revocation":
                indices, fill = epoch.lists.get((issuer, number), []), whole == "revoked"
            else:
                indices, fill = [], whole == "suspended"
            cred = status_list_credential(url=url, registry=self.producer.registry, seed=self.seed,
                                          indices=indices, this_update=epoch.this_update,
                                          next_update=epoch.next_update, ttl_ms=ttl_ms, purpose=purpose, fill=fill)
            data = json.dumps(cred, separators=(",", ":"), sort_keys=True).encode()
            got = Produced(cred, data, '"' + sha256(data).hex()[:32] + '"')
            if len(epoch.list_cache) < 10_000:
                epoch.list_cache[cache_key] = got
        return epoch, got

    # --- push: new answers as epochs change ------------------------------------------------

    async def next_epoch(self, after: int | None, timeout: float) -> Epoch | None:
        """The first epoch newer than number `after`, waiting up to `timeout` seconds;
        None on timeout or when the service is closing."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._watching:
            epoch = self.epoch
            if epoch is not None and (after is None or epoch.number > after):
                return epoch
            left = deadline - loop.time()
            if left <= 0:
                return None
            try:
                await asyncio.wait_for(asyncio.shield(self._epoch_changed()), left)
            except TimeoutError:
                return None
        return None

    def _epoch_changed(self) -> asyncio.Future:
        if self._epoch_future is None or self._epoch_future.done():
            self._epoch_future = asyncio.get_running_loop().create_future()
        return self._epoch_future

    def _wake_watchers(self) -> None:
        if self._epoch_future is not None and not self._epoch_future.done():
            self._epoch_future.set_result(None)

    # --- reads ------------------------------------------------------------------------

    def anchor_text(self, seq: int) -> str:
        head = self.index.head
        if head is None or not 0 <= seq <= head.seq:
            raise NotFound(f"no commit with seq {seq}")
        path = self.data_dir / "anchors" / f"{seq}.tlog-proof"
        try:
            return path.read_text()
        except FileNotFoundError:
            raise NotFound(f"the anchor of commit {seq} is not available yet") from None

    def info(self) -> dict[str, Any]:
        head = self.index.head
        g = self.genesis or (self.mirror.genesis if self.mirror else None)
        out: dict[str, Any] = {
            "name": self.config.name, "registry": self.registry, "mode": "mirror" if self.mirror else "primary",
            "head": {"seq": head.seq, "commit": head.commit, "tree": head.tree} if head else None,
            "records": len(self.index.records), "git": f"/{self.config.name}.git",
            "status_service": self.producer.registry if self.producer else None,
            "epoch": self.epoch.number if self.epoch else None,
        }
        if g is not None:
            out["log"] = {"origin": g.log_origin, "vkey": g.log_vkey, "url": self.config.log_url or None}
        if self.mirror is not None:
            out["upstream"] = self.mirror.upstream
        return out
