"""A running log: its key, storage driver, appender, entry reader, witnesses and metrics.

`LogService.open` is the whole start of a log; the HTTP layer (`tlog.server.api`) is
built on top of it, and tests drive it directly.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from tlog.didresolver import DidResolver
from tlog.errors import ConfigError, Unavailable
from tlog.formats import keys
from tlog.formats.checkpoint import Checkpoint
from tlog.formats.note import sign_note
from tlog.formats.policy import parse_policy
from tlog.merkle.tree import TreeView
from tlog.runtime import keyfiles
from tlog.server.appender import Appender, Cosigner
from tlog.server.config import LogConfig
from tlog.server.metrics import LogMetrics
from tlog.server.mirroring import MirrorSet
from tlog.server.publication import BucketTarget, Target
from tlog.server.witnessing import WitnessOutcome, WitnessSet, policy_text
from tlog.storage.embedded import EmbeddedStorage
from tlog.storage.interface import Driver, EntryReader, Fault, HashReader, LogState, Signer
from tlog.storage.transfer import Snapshot, refuse_unfinished_import
from tlog.transport import Outbound

if TYPE_CHECKING:
    from tlog.storage.bucket import Bucket

log = logging.getLogger("oap.tlog.server")


def load_or_create_key(data_dir: Path, origin: str, key_file: Path | None = None, *,
                       also: Sequence[str] = ()) -> keys.Signer:
    """The log key: generated on first start (0600, never printed), reused after; or an
    encrypted key file, or a key in a PKCS#11 token (`keyfiles.open_key`), never generated.

    A key is bound to its origin (key name = origin); a new origin needs a new
    key and a new data directory, so a mismatch is refused, not papered over.
    The verifier key and a client trust policy are written beside it. A token key carries
    no name: it is the origin's, and must be the key data/log.vkey names when that exists
    (moving a log's key into a token keeps the key: `oap-log keygen --import`), or one of
    `also`, the vkeys of the log's other keys: a rotation makes one of them the key, and
    data/log.vkey then names the new one.
    """
    path = key_file or data_dir / "log.key"
    created = not keyfiles.key_exists(path)
    opened = keyfiles.open_key(path, what=f"log key for origin {origin}",
                               make=lambda: keys.Signer.generate(origin).to_skey())
    if opened.name is not None and opened.name != origin:
        raise ConfigError(
            f"{path} is the key of origin {opened.name!r}, but origin {origin!r} is configured; "
            "a new origin needs a new key and a new data directory"
        )
    signer = keys.Signer(origin, opened.key)
    vkey_path = data_dir / "log.vkey"
    named = vkey_path.read_text().strip() if vkey_path.exists() else None
    if not signer.in_process and named is not None and named != signer.vkey and named not in also:
        raise ConfigError(f"{opened.source} is not this log's key ({vkey_path} names another); a log's key "
                          "moves into a token unchanged (oap-log keygen --import)")
    data_dir.mkdir(parents=True, exist_ok=True)
    if created or named is None or (named != signer.vkey and named in also):
        vkey_path.write_text(signer.vkey + "\n")
    if created or (not signer.in_process and not (data_dir / "log.policy").exists()):
        (data_dir / "log.policy").write_text(f"# tlog-policy for {origin}\nlog {signer.vkey}\nquorum none\n")
    return signer


def load_signers(config: LogConfig) -> tuple[keys.Signer, ...]:
    """The keys that sign the log's checkpoints: its key, then `extra_key_files` (a rotation's
    overlap, docs/architecture.md §3.9), each of the configured origin and each once. A key
    given by a token carries no name, so it is taken as the origin's."""
    extra: list[keys.Signer] = []
    for ref in config.extra_key_files:
        opened = keyfiles.open_key(ref, what=f"extra log key for origin {config.origin}")
        if opened.name is not None and opened.name != config.origin:
            raise ConfigError(f"extra key {ref} is the key of origin {opened.name!r}, not of {config.origin!r}: "
                              "every key of a log carries its origin as the key name")
        extra.append(keys.Signer(config.origin, opened.key))
    signer = load_or_create_key(config.data_dir, config.origin, config.key_file, also=[s.vkey for s in extra])
    signers = (signer, *extra)
    if len({s.vkey for s in signers}) != len(signers):
        raise ConfigError("extra_key_files names the log's key (or one key twice): each key signs once")
    return signers


def _with_log_lines(text: str, vkeys: Sequence[str]) -> str:
    """A policy text with a `log` line for each of `vkeys` it does not hold yet, in front."""
    missing = "".join(f"log {v}\n" for v in vkeys if f"log {v}" not in text)
    return missing + text


def client_policy(config: LogConfig, signers: keys.Signer | Sequence[keys.Signer]) -> str:
    """The tlog-policy clients verify this log's checkpoints with: its keys (all of them during
    a rotation's overlap: a checkpoint verifies with either), and the witnesses, mirrors and
    quorum it publishes with (none configured: the keys alone, `quorum none`)."""
    signers = (signers,) if isinstance(signers, keys.Signer) else tuple(signers)
    vkeys = [s.vkey for s in signers]
    if config.witness_policy is not None:
        return _with_log_lines(Path(config.witness_policy).read_text(), vkeys)
    if config.witnesses or config.mirrors:
        return _with_log_lines(policy_text(vkeys[0], config.witnesses, config.witness_quorum, config.mirrors),
                               vkeys)
    return "".join(f"log {v}\n" for v in vkeys) + "quorum none\n"


def cosigners(config: LogConfig, signers: Sequence[keys.Signer],
              storage: Driver) -> tuple[WitnessSet | None, MirrorSet | None]:
    """Witnesses and mirrors from the config (the witnesses with the mirrors the quorum counts,
    None when there are none); also (re)writes data/log.policy for clients."""
    if config.witness_policy is None and not config.witnesses and not config.mirrors:
        return None, None
    text = client_policy(config, signers)
    outbound = Outbound.from_config(config)
    mirrors = MirrorSet.from_policy(parse_policy(text), signers[0].name, entries=storage.entries,
                                    hashes=lambda: storage.hashes, timeout=config.mirror_timeout, outbound=outbound)
    ws = WitnessSet.from_policy(text, timeout=config.witness_timeout, mirrors=mirrors, outbound=outbound)
    try:
        (config.data_dir / "log.policy").write_text(text)
    except OSError as e:  # read-only data directory: clients keep the policy they have
        log.warning("could not write %s: %s", config.data_dir / "log.policy", e)
    if not ws.endpoints and (mirrors is None or not mirrors.gating):
        return None, mirrors  # nothing to wait for before publishing
    return ws, mirrors


def _refresh_policy_file(config: LogConfig, signers: Sequence[keys.Signer]) -> None:
    """Rewrite data/log.policy when its log keys are not the ones the log signs with (a
    rotation's steps change them); a policy that names them is left as it is."""
    path = config.data_dir / "log.policy"
    try:
        have = {line.split()[1] for line in path.read_text().splitlines() if line.startswith("log ")}
    except (OSError, IndexError):
        have = set()
    if have != {s.vkey for s in signers}:
        try:
            path.write_text(f"# tlog-policy for {config.origin}\n" + client_policy(config, signers))
        except OSError as e:  # read-only data directory: clients keep the policy they have
            log.warning("could not write %s: %s", path, e)


def checkpoint_signer(signers: keys.Signer | Sequence[keys.Signer]) -> Signer:
    """Sign a checkpoint with every key of the log, the log's key first: during a rotation's
    overlap the note carries one signature per key (C2SP signed-note), over one text, so no
    key ever signs a root the others did not."""
    signers = (signers,) if isinstance(signers, keys.Signer) else tuple(signers)
    origin = signers[0].name

    def sign(size: int, root: bytes) -> str:
        return sign_note(Checkpoint(origin, size, root).to_text(), signers)

    return sign


def open_storage(config: LogConfig, *, faults: Fault | None = None) -> Driver:
    """The storage driver the configuration names (`tlog.storage.interface`); `faults` is a
    test hook (None in production). A PostgreSQL frontend reads the hash tiles it has not
    cached from the log's bucket (`tlog.storage.lazyhashes`)."""
    if config.storage == "postgres":
        from tlog.storage.postgres import PostgresStorage

        bucket = _bucket(config)
        return PostgresStorage(config.postgres_dsn, config.data_dir / "cache", map_window=config.map_window_mb << 20,
                               tiles=None if bucket is None else bucket.get, faults=faults)
    return EmbeddedStorage(config.data_dir, hash_sync_interval=config.hash_sync_interval,
                           map_window=config.map_window_mb << 20, faults=faults)


def _bucket(config: LogConfig) -> Bucket | None:
    """A client of the bucket the log is published to, if one is configured."""
    if not config.bucket_url:
        return None
    from tlog.storage.bucket import Bucket

    key_id, secret = keyfiles.bucket_credentials(config.bucket_credentials_file)
    ca = config.outbound_ca_file
    return Bucket.from_config(config.bucket_url, key_id=key_id, secret=secret, region=config.bucket_region,
                              ca_pem=ca.read_bytes() if ca is not None else None)


def open_bucket(config: LogConfig) -> BucketTarget | None:
    """The bucket the log is published to, if one is configured: a target that follows the
    published head (`tlog.server.publication`)."""
    bucket = _bucket(config)
    if bucket is None:
        return None
    from tlog.storage.bucket import TilePublisher

    return BucketTarget(TilePublisher(bucket), interval=config.checkpoint_publish_interval)


def open_snapshot(config: LogConfig) -> Snapshot:
    """The configured log's latest committed checkpoint and its entries, read-only."""
    if config.storage == "postgres":
        from tlog.storage import postgres

        return postgres.snapshot(config.postgres_dsn)
    from tlog.storage import embedded

    return embedded.snapshot(config.data_dir)


@dataclass
class LogService:
    """Everything a running log holds; built by `LogService.open`."""

    config: LogConfig
    signer: keys.Signer
    storage: Driver
    appender: Appender  # the log's write loop (tlog.server.appender)
    reader: EntryReader
    metrics: LogMetrics
    witnesses: WitnessSet | None = None
    resolver: DidResolver | None = None  # signers named by did:web, did:plc
    policy: str = ""  # the client policy (`client_policy`), served at GET /v1/policy
    mirrors: MirrorSet | None = None  # the mirrors it pushes to (tlog.server.mirroring)
    extra_signers: tuple[keys.Signer, ...] = ()  # a key rotation's other keys (`load_signers`)

    @classmethod
    async def open(cls, config: LogConfig, *, importing: tuple[int, bytes] | None = None,
                   faults: Fault | None = None) -> LogService:
        """`importing`: (size, root) of an import into this log (`tlog.server.importing`, which
        checks for an unfinished one itself); `faults`: a test hook the storage driver and the
        appender call at their crash points (tests/crashserve.py); None in production."""
        config.data_dir.mkdir(parents=True, exist_ok=True)
        if importing is None:
            refuse_unfinished_import(config.data_dir)
        signer, *extra = signers = load_signers(config)
        storage = open_storage(config, faults=faults)
        metrics = LogMetrics()

        def on_batch(n: int, seconds: float) -> None:
            metrics.batch_size.observe(n)
            metrics.batch_seconds.observe(seconds)

        witnesses, mirrors = cosigners(config, signers, storage)
        if config.witness_policy is None and not config.witnesses and not config.mirrors:
            _refresh_policy_file(config, signers)
        cosign: Cosigner | None = None
        if witnesses is not None:
            async def cosign(state: LogState) -> LogState:
                t0 = time.perf_counter()
                try:
                    published, outcomes = await witnesses.cosign(state)
                finally:
                    metrics.cosign_seconds.observe(time.perf_counter() - t0)
                for o in outcomes:
                    if isinstance(o, WitnessOutcome):
                        metrics.witness_results.labels(o.name, "ok" if o.signature else "failed").inc()
                return published

        # The targets that follow the published head; the appender starts them once the store
        # is open and before it publishes anything (a mirror the quorum counts is waited for by
        # its first publication; a mirror holding a larger tree halts it from the first push).
        targets: list[Target] = [t for t in (open_bucket(config), mirrors) if t is not None]
        appender = Appender(
            storage, checkpoint_signer(signers), targets=targets, cosign=cosign,
            cosigned=witnesses.quorum_met_by if witnesses is not None else None,
            max_batch=config.max_batch, batch_interval=config.batch_interval_ms / 1000,
            max_pending=config.max_pending, on_batch=on_batch, importing=importing, faults=faults,
        )
        metrics.watch(appender)
        metrics.watch_mirrors(mirrors, appender)
        try:
            state = await appender.start()
        except BaseException:
            try:
                await appender.close()
            except Exception as e:  # noqa: BLE001 - the start's own error is the one to report
                log.warning("closing after a failed start: %s: %s", type(e).__name__, e)
            raise
        if importing is None and config.minimum_index > (state.size if state is not None else 0):
            # tlog-tiles: the minimum index MUST be at most the current checkpoint's size
            await appender.close()
            raise ConfigError(f"minimum_index {config.minimum_index} is beyond the log's checkpoint "
                              f"({state.size if state is not None else 0} entries)")
        if state is not None:
            metrics.tree_size.set(state.size)
        reader = storage.entries()
        await reader.open()
        return cls(config, signer, storage, appender, reader, metrics, witnesses, DidResolver.from_config(config),
                   client_policy(config, signers), mirrors, tuple(extra))

    async def close(self) -> None:
        await self.appender.close()  # and its targets, the mirrors among them
        await self.reader.close()
        if self.witnesses is not None:
            await self.witnesses.close()
        if self.resolver is not None:
            await self.resolver.close()

    @property
    def hashes(self) -> HashReader:
        return self.storage.hashes

    def view_at(self, size: int) -> TreeView:
        """The tree of an older committed size (right edge cached for a few sizes)."""
        if size == self.state.size:
            return self.state.view
        return _view_cache(_Hashable(self.storage.hashes), size)

    @property
    def state(self) -> LogState:
        state = self.appender.state
        if state is None:
            raise Unavailable("the log is not open yet", retry_after=1)
        return state

    @property
    def origin(self) -> str:
        return self.signer.name


class _Hashable:
    """A storage's hash reader as a cache key: by identity, as lru_cache hashed it before."""

    __slots__ = ("reader",)

    def __init__(self, reader: HashReader) -> None:
        self.reader = reader

    def __hash__(self) -> int:
        return id(self.reader)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Hashable) and other.reader is self.reader


@lru_cache(maxsize=64)
def _view_cache(key: _Hashable, size: int) -> TreeView:
    hashes = key.reader
    return TreeView(size, hashes.read)
