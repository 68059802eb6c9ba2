"""The mirror service: its key, ticket key, store, mirror core, bucket publisher and metrics,
opened from a `MirrorConfig` and closed on shutdown. The HTTP API over it is `witness.mirror.api`."""
from __future__ import annotations

from dataclasses import dataclass

from tlog.runtime.keyfiles import bucket_credentials

from .config import MirrorConfig
from .core import Cosigner, Mirror
from .embedded import EmbeddedStore
from .keys import load_or_create_keys
from .metrics import MirrorMetrics
from .publish import BucketPublisher
from .tickets import TicketKey


@dataclass
class MirrorService:
    config: MirrorConfig
    signers: tuple[Cosigner, ...]  # Ed25519 and/or ML-DSA-44, one name (`cosigners`)
    mirror: Mirror
    metrics: MirrorMetrics
    publisher: BucketPublisher | None = None

    @classmethod
    def open(cls, config: MirrorConfig) -> MirrorService:
        config.data_dir.mkdir(parents=True, exist_ok=True)
        signers = load_or_create_keys(config)
        tickets = TicketKey.load_or_create(config.ticket_key_path)
        store = EmbeddedStore(config.data_dir, hash_sync_interval=config.hash_sync_interval)
        metrics = MirrorMetrics()

        def observe(origin: str, received: int, stored: int) -> None:
            metrics.entries_received.labels(origin).inc(received)
            metrics.entries_stored.labels(origin).inc(stored)

        publisher = None
        if config.bucket_url:
            from tlog.storage.bucket import Bucket

            key_id, secret = bucket_credentials(config.bucket_credentials_file)
            ca = config.outbound_ca_file
            publisher = BucketPublisher(Bucket.from_config(config.bucket_url, key_id=key_id, secret=secret,
                                                           region=config.bucket_region,
                                                           ca_pem=ca.read_bytes() if ca else None), store)
        publish = (lambda origin, cp: publisher.submit(origin, cp.note, cp.size)) if publisher else None
        mirror = Mirror(signers, config.logs, store, tickets, max_excess=config.max_excess,
                        upload_timeout=config.upload_timeout, observe=observe, on_commit=publish)
        svc = cls(config, signers, mirror, metrics, publisher)
        svc.refresh_gauges()
        return svc

    def refresh_gauges(self) -> None:
        m = self.metrics
        for lg in self.config.logs:
            rec = self.mirror.store.record(lg.origin)
            m.pending_size.labels(lg.origin).set(rec.pending.size if rec.pending else 0)
            m.next_entry.labels(lg.origin).set(rec.next_entry)
            m.mirror_size.labels(lg.origin).set(rec.mirror.size if rec.mirror else 0)

    def close(self) -> None:
        if self.publisher is not None:
            self.publisher.close()
        self.mirror.close()
