"""A running registry (primary or mirror): open, serve reads, produce status epochs, close.

Primary: owns the repository, accepts records (`Batcher` -> `RegistryWriter`),
anchors every commit in its logs (k of them; a log that missed commits is
caught up in the background, `registry.anchorer`). Mirror (`upstream` set):
follows an upstream registry with `Mirror.sync` every `mirror_interval` seconds,
read-only. Either runs the OCSP-style status service when it has a key and logs to
anchor its epochs in (a mirror signs with its own key: anyone may run a
Revocation Service, OAP-CORE-1.0 §22.1).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar, TypeVarTuple

import aiohttp

from tlog.client.client import LogClient, token_from
from tlog.client.verifier import TrustPolicy
from tlog.didresolver import DidResolver
from tlog.errors import ConfigError, NotFound, OAPError, Unavailable, UpstreamError
from tlog.formats import keys
from tlog.formats.did import did_key_from_public
from tlog.formats.hashing import sha256
from tlog.formats.keys import Ed25519Key, ed25519_signer
from tlog.runtime import keyfiles
from tlog.storage.durable import lock_dir
from tlog.transport import Outbound

from .anchorer import Anchorer, Backlog, LogLink, anchor_policy, proofs_of
from .anchoring import AnchorLog, Genesis, genesis_bytes
from .batcher import Batcher
from .config import RegistryConfig
from .history import Replayer, replay
from .index import CommitInfo, Index
from .keyrotation import ROTATION_FILE, Rotation, make_rotation, parse_rotation, rotations_document
from .layout import anchor_path
from .metrics import RegistryMetrics
from .mirror import Mirror, SyncResult
from .records import Record
from .shardlist import LogListFile
from .status import Epoch, Produced, StatusProducer
from .statuslist import status_list_credential
from .store import MAIN, ReadGate, RegistryRepo
from .writer import RegistryWriter, write_durably

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

log = logging.getLogger("oap.registry")
KEY_NAME = "oap-registry"


def load_or_create_key(path: Path) -> Ed25519Key:
    """The registry's Ed25519 key (tlog signer-key format, 0600), created on first use; or an
    encrypted key file, or a key in a PKCS#11 token (`keyfiles.open_key`). It signs the
    registry's log entries, its status epochs and status lists."""
    opened = keyfiles.open_key(path, what="registry key", make=lambda: keys.Signer.generate(KEY_NAME).to_skey())
    if keyfiles.is_token_uri(path):
        return opened.key  # its did:key is in /v1/info and the start-up banner
    did = did_key_from_public(ed25519_signer(opened.key).public)
    did_path = path.with_suffix(".did")
    if not did_path.exists():
        did_path.write_text(did + "\n")
    return opened.key


def _read_only_dir(path: Path) -> bool:
    return not os.access(path, os.W_OK) or bool(os.statvfs(path).f_flag & os.ST_RDONLY)


def lock_data_dir(data_dir: Path) -> int:
    """One process per data directory: the writer assumes it alone moves the refs."""
    try:
        return lock_dir(data_dir, "registry.lock", "registry")
    except OSError as e:
        raise ConfigError(f"cannot use {data_dir} ({e.strerror}); a read-only registry can still be served "
                          "by mirrors (oap-registry serve --upstream) or read with git clone") from None


def prepare_rotation(data_dir: Path, old_key: Path | str, new_key: Path | str) -> Rotation:
    """`oap-registry rotate-key`: with the registry stopped (its lock held here), sign the
    statement handing its key over from `old_key` (the key in force) to `new_key`, and leave
    it in the data directory; the registry commits it when it next starts with `new_key`.
    Refused while a commit is pending or the head's anchor is missing or incomplete (those are
    signed by the old key, and only a registry running with it can finish them)."""
    fd = lock_data_dir(data_dir)
    repo = RegistryRepo(data_dir / "registry.git")
    try:
        index = Index()
        replayer = Replayer(repo, index, strict=False)
        replay(repo, index, repo.ref(MAIN), replayer)
        head, g = index.head, replayer.genesis
        if head is None or g is None or index.keys is None:
            raise ConfigError(f"{data_dir} holds no registry history yet: start it with the new key instead")
        old = keyfiles.open_ed25519(old_key, what="registry key")
        new = keyfiles.open_ed25519(new_key, what="new registry key")
        if did_key_from_public(ed25519_signer(old).public) != index.keys.current:
            raise ConfigError(f"{old_key} is not the key in force, {index.keys.current}; a key rotation must be "
                              "signed by it")
        if (data_dir / "pending.json").exists():
            raise ConfigError("a commit is pending: start the registry with its current key once, then stop it")
        anchor = data_dir / "anchors" / Path(anchor_path(head.seq, g.several)).name
        complete = anchor.exists() and (not g.several or len(proofs_of(anchor.read_text())) >= len(g.logs))
        if not complete or Backlog(data_dir / "anchors" / "backlog.json").behind():
            raise ConfigError("the head commit is not anchored in every log yet: start the registry with its "
                              "current key until it is, then stop it")
        epochs = data_dir / "status-epoch.json"  # the last status epoch the old key signed
        last = json.loads(epochs.read_text())["epoch"] if epochs.exists() else 0
        content = make_rotation(registry=g.registry, number=len(index.keys.rotations) + 1, old=old, new=new,
                                seq=head.seq + 1, epoch=last + 1, issued_at=datetime.now(UTC).replace(microsecond=0))
        rotation = parse_rotation(content)
        index.keys.then(rotation, head.seq + 1)
        write_durably(data_dir / ROTATION_FILE, content)
        return rotation
    finally:
        repo.close()
        os.close(fd)


@dataclass
class RegistryService:
    config: RegistryConfig
    repo: RegistryRepo
    index: Index
    metrics: RegistryMetrics
    executor: ThreadPoolExecutor
    lock_fd: int | None
    seed: Ed25519Key | None = None  # the registry's key: a key file's seed or a token key
    read_only: bool = False  # a read-only data directory: history served, writes answer 503
    registry: str = ""  # the registry key (did:key) whose history this is
    genesis: Genesis | None = None
    anchorer: Anchorer | None = None  # primary: commits + epochs; mirror: epochs only
    writer: RegistryWriter | None = None
    batcher: Batcher | None = None
    mirror: Mirror | None = None
    producer: StatusProducer | None = None
    log_list: LogListFile | None = None  # the signed log list it publishes (log_list)
    epoch: Epoch | None = None
    resolver: DidResolver | None = None  # signers named by did:web, did:plc
    gate: ReadGate = field(default_factory=ReadGate)
    _tasks: list[asyncio.Task] = field(default_factory=list)
    _dirty: asyncio.Event = field(default_factory=asyncio.Event)
    _status_counters: dict = field(default_factory=dict)  # labelled children, looked up once
    _closing: bool = False
    _epoch_future: asyncio.Future | None = None  # resolved when a new epoch is published (push streams)
    watchers: int = 0  # open push streams
    before_publish: Callable[[], Awaitable[None]] | None = None  # test hook, see `open`
    _watching: bool = True

    @property
    def data_dir(self) -> Path:
        return self.config.data_dir

    async def in_thread(self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    # --- open / close ------------------------------------------------------------------

    @classmethod
    async def open(cls, config: RegistryConfig, *,
                   before_publish: Callable[[], Awaitable[None]] | None = None) -> RegistryService:
        """`before_publish`: a test hook the writer awaits between anchoring a batch and moving
        the ref (None in production)."""
        config.data_dir.mkdir(parents=True, exist_ok=True)
        read_only = _read_only_dir(config.data_dir) and (config.data_dir / "registry.git" / "HEAD").exists()
        fd = None if read_only else lock_data_dir(config.data_dir)
        repo = RegistryRepo(config.data_dir / "registry.git")
        if fd is not None:
            for name in repo.clear_stale_locks():
                log.warning("removed %s, left by a writer that was killed while moving a ref", name)
        svc = cls(config, repo, Index(), RegistryMetrics(), ThreadPoolExecutor(1, thread_name_prefix="registry"), fd,
                  read_only=read_only, before_publish=before_publish)
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
        if cfg.log_list is not None:
            self.log_list = LogListFile(cfg.log_list, self.seed)
        me = did_key_from_public(keys.Signer(KEY_NAME, self.seed).public)
        replayer = Replayer(self.repo, self.index, strict=False, anchors_dir=self.data_dir / "anchors")
        await self.in_thread(replay, self.repo, self.index, self.repo.ref(MAIN), replayer)
        g = replayer.genesis
        rotation = self._pending_rotation(replayer.key, me) if g is not None else None
        if g is not None and replayer.key != me and rotation is None:
            raise ConfigError(f"this repository is registry {g.registry}, signing with {replayer.key}; the key given "
                              f"is {me}. Use that key, rotate to this one (oap-registry rotate-key), or serve the "
                              "registry read-only with --upstream")
        links = await self._log_links(g)
        quorum = cfg.quorum if g is None else g.anchor_quorum
        if g is not None and cfg.anchor_quorum and cfg.anchor_quorum != g.anchor_quorum:
            raise ConfigError(f"anchor_quorum is {cfg.anchor_quorum}, but this registry's genesis fixed it at "
                              f"{g.anchor_quorum}")
        genesis = None
        if g is None:
            genesis = genesis_bytes(me, cfg.name, [AnchorLog(link.origin, link.vkey) for link in links], quorum,
                                    cfg.bootstrap, datetime.now(UTC))
        self.anchorer = Anchorer(links, self.seed, quorum=quorum, several=len(links) > 1, timeout=cfg.log_timeout)
        self.registry = g.registry if g is not None else me  # the registry's identity: its genesis key
        # L5 audit attestations must be anchored in a log this registry trusts: the operator's
        # policy, else any one of the logs the registry itself anchors in
        policy = self._policy() or TrustPolicy.for_logs([link.vkey for link in links])
        self.writer = RegistryWriter(self.repo, self.index, self.anchorer, self.data_dir, self.executor, replayer,
                                     strict_l4=cfg.l4_witnesses_hold_level, policy=policy,
                                     before_publish=self.before_publish)
        self.resolver = DidResolver.from_config(cfg)
        self.writer.on_commit = self._on_commit
        self._count_log_failures()
        backlog = self.writer.backlog
        backlog.on_change = lambda origin, pending: self.metrics.log_backlog.labels(origin).set(pending)
        for origin in self.anchorer.origins:
            backlog.on_change(origin, len(backlog.pending(origin)))
        self.writer.gate, self.writer.max_packs = self.gate, cfg.max_packs
        if genesis is not None:
            await self.writer.create_genesis(genesis)
        await self.writer.recover()  # may publish the rotation commit itself, left pending by a crash
        if rotation is not None and self.index.keys is not None and self.index.keys.current != me:
            await self.writer.commit_rotation(rotation)
            log.warning("rotated the registry key to %s (key rotation committed at seq %d)", me,
                        self.index.head.seq if self.index.head else 0)
        self._rotation_file.unlink(missing_ok=True)
        self.genesis = replayer.genesis
        self.metrics.head_seq.set(self.index.head.seq if self.index.head else 0)
        self.batcher = Batcher(self.writer, max_batch=cfg.max_batch, batch_interval=cfg.batch_interval_ms / 1000,
                               idle=cfg.anchor_idle_seconds)
        self.batcher.start()
        if len(links) > 1:
            self._tasks.append(asyncio.create_task(self._catch_up(), name="registry-catch-up"))

    @property
    def _rotation_file(self) -> Path:
        return self.data_dir / ROTATION_FILE

    def _pending_rotation(self, current: str, me: str) -> Rotation | None:
        """The rotation `oap-registry rotate-key` prepared, when it hands over from the key in
        force to `me` at the next commit; a stale one (already committed) is dropped."""
        path = self._rotation_file
        if not path.exists():
            return None
        try:
            rotation = parse_rotation(path.read_bytes())
            head = self.index.head
            if rotation.previous != current or rotation.key != me:
                if current == me:
                    return None  # committed before a restart, or prepared for another key: unused
                raise ConfigError(f"{path} hands over from {rotation.previous} to {rotation.key}, not from the key "
                                  f"in force {current} to {me}")
            if self.index.keys is not None:
                self.index.keys.then(rotation, head.seq + 1 if head else 0)
            if head is None or not (self.data_dir / "anchors" / Path(anchor_path(head.seq, self.index.several_logs))
                                    .name).exists():
                raise ConfigError("the head commit has no anchor yet: start with the old key until it is anchored")
        except OAPError as e:
            raise ConfigError(f"{path}: {e.message}; prepare the rotation again with oap-registry rotate-key") \
                from None
        return rotation

    def key_rotations(self) -> dict[str, Any]:
        keys = self.index.keys
        if keys is None:
            raise NotFound("this registry has no history yet")
        return rotations_document(keys)

    async def _log_infos(self) -> dict[str, dict[str, Any] | None]:
        """Each log's origin and key (its /v1/info), waiting up to `log_wait_seconds` for the
        logs to come up (a local network may start them and the registry together); None
        for a log that did not answer by then."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.log_wait_seconds

        async def one(url: str) -> dict[str, Any] | None:
            async with LogClient(url, timeout=10, outbound=Outbound.from_config(self.config)) as client:
                while True:
                    try:
                        return await client.info()
                    except (TimeoutError, OSError, aiohttp.ClientError, UpstreamError) as e:
                        if loop.time() >= deadline:
                            log.warning("the log at %s is not reachable: %s", url, e)
                            return None
                        await asyncio.sleep(0.5)

        urls = self.config.logs
        return dict(zip(urls, await asyncio.gather(*(one(u) for u in urls))))

    async def _log_links(self, genesis: Genesis | None) -> list[LogLink]:
        """The configured logs, each with its origin and key. A new registry takes them from
        the logs' answers (all must answer) and names them in its genesis; an existing one
        anchors in exactly the logs its genesis names (their URLs may change), and starts
        while k of them answer: one that does not is known by elimination."""
        cfg = self.config
        infos = await self._log_infos()
        found = {url: AnchorLog(info["origin"], info["verifier_key"]) for url, info in infos.items() if info}
        if len(set(found.values())) != len(found) or len({a.origin for a in found.values()}) != len(found):
            raise ConfigError("two of the configured log URLs are the same log (or two logs share an origin): "
                              "anchoring twice in one log proves nothing more")
        if genesis is None:
            down = [url for url in cfg.logs if url not in found]
            if down:
                raise ConfigError(f"the log at {down[0]} is not reachable; a new registry needs every log's key")
            named = [found[url] for url in cfg.logs]
        else:
            if len(cfg.logs) != len(genesis.logs):
                raise ConfigError(
                    f"this registry anchors in the {len(genesis.logs)} log(s) its genesis (registry.json) names "
                    f"({', '.join(a.origin for a in genesis.logs)}), and {len(cfg.logs)} are configured. The logs "
                    "of a registry are fixed at its genesis, so that every mirror checks every commit against the "
                    "same logs: configure exactly those; to anchor in other logs, start a new registry")
            for url, a in found.items():
                if a not in genesis.logs:
                    raise ConfigError(f"the log at {url} is {a.origin} with key {a.vkey}, which this registry's "
                                      f"genesis does not name ({', '.join(x.vkey for x in genesis.logs)})")
            unmatched = [a for a in genesis.logs if a not in found.values()]
            silent = [url for url in cfg.logs if url not in found]
            if len(found) < genesis.anchor_quorum or len(silent) > 1:
                raise ConfigError(f"only {len(found)} of the {len(genesis.logs)} logs answered "
                                  f"(not: {', '.join(silent)}); the registry needs {genesis.anchor_quorum} to "
                                  "anchor and each log's identity to start")
            found.update(zip(silent, unmatched))
            named = [found[url] for url in cfg.logs]
        policy = self._policy()
        if policy is not None:
            unknown = [a.vkey for a in named if a.vkey not in {x.vkey for x in policy.policy.logs}]
            if unknown:
                raise ConfigError(f"log_policy does not list the key {unknown[0]} of a log this registry anchors in")
        token = self._log_token()
        outbound = Outbound.from_config(cfg)
        return [LogLink(url, a.origin, a.vkey, LogClient(url, policy=anchor_policy(policy, a.vkey),
                                                         timeout=cfg.log_timeout, token=token, outbound=outbound))
                for url, a in zip(cfg.logs, named)]

    def _count_log_failures(self) -> None:
        assert self.anchorer is not None
        self.anchorer.on_failure = lambda origin: self.metrics.anchor_failures.labels(origin).inc()

    def _log_token(self) -> str | None:
        path = self.config.log_token_file
        return token_from(path) if path is not None else None

    async def _catch_up(self) -> None:
        """Bring logs that missed commits up to date, every `catch_up_seconds` (registry.anchorer)."""
        assert self.writer is not None
        while not self._closing:
            await asyncio.sleep(self.config.catch_up_seconds)
            if self.writer.backlog.behind() and not self.writer.broken:
                try:
                    await self.writer.catch_up()
                except Exception as e:  # noqa: BLE001 - a disk error: said, and tried again next round
                    log.warning("catching up a log failed: %s", e)

    async def _open_mirror(self) -> None:
        cfg = self.config
        self.mirror = Mirror(self.data_dir, cfg.upstream, repo=self.repo, index=self.index,
                             registry=cfg.registry_key or None, policy=self._policy(), metrics=self.metrics,
                             outbound=Outbound.from_config(cfg))
        await self.in_thread(self.mirror.load)
        self.registry = self.mirror.registry or ""
        if cfg.logs:
            self.seed = load_or_create_key(cfg.key_file or cfg.data_dir / "registry.key")
            links = await self._log_links(None)
            self.anchorer = Anchorer(links, self.seed, quorum=cfg.quorum, several=len(links) > 1,
                                     timeout=cfg.log_timeout)
            self._count_log_failures()
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
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - closing: the tasks log their own failures
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
            except Exception as e:  # noqa: BLE001 - the upstream being down is not fatal
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
        epoch.anchor = (await self.anchorer.anchor_statement(epoch.statement_hash, epoch.statement_id)).text
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
            except Exception as e:  # noqa: BLE001 - a bad epoch build keeps the previous epoch; logged and retried
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
            fill = purpose in epoch.whole_lists(issuer)
            indices = epoch.lists.get((issuer, number), []) if purpose == "revocation" else []
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
        path = self.data_dir / "anchors" / Path(anchor_path(seq, self.index.several_logs)).name
        try:
            return path.read_text()
        except FileNotFoundError:
            raise NotFound(f"the anchor of commit {seq} is not available yet") from None

    def anchor_complete(self, text: str) -> bool:
        """Whether an anchor holds every log's proof (it can change no more: cacheable forever)."""
        g = self.genesis or (self.mirror.genesis if self.mirror else None)
        return g is None or not g.several or len(proofs_of(text)) >= len(g.logs)

    def info(self) -> dict[str, Any]:
        head = self.index.head
        g = self.genesis or (self.mirror.genesis if self.mirror else None)
        out: dict[str, Any] = {
            "name": self.config.name, "registry": self.registry, "mode": "mirror" if self.mirror else "primary",
            "head": {"seq": head.seq, "commit": head.commit, "tree": head.tree} if head else None,
            "records": len(self.index.records), "git": f"/{self.config.name}.git",
            "key": self.index.keys.current if self.index.keys else None,  # signs the anchors (keyrotation)
            "key_rotations": len(self.index.keys.rotations) if self.index.keys else 0,
            "status_service": self.producer.registry if self.producer else None,
            "epoch": self.epoch.number if self.epoch else None,
            "log_list": "/v1/log-list" if self.log_list is not None else None,
        }
        if g is not None:
            urls = {link.origin: link.url for link in self.anchorer.links} if self.anchorer is not None else {}
            logs = [{"origin": a.origin, "vkey": a.vkey, "url": urls.get(a.origin)} for a in g.logs]
            out["log"] = logs[0]  # the first (of one, usually): what one-log clients read
            out["logs"], out["anchor_quorum"] = logs, g.anchor_quorum
        if self.mirror is not None:
            out["upstream"] = self.mirror.upstream
        return out
