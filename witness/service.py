"""The witness service: its keys, state database, witness core, peer witnessing and metrics,
opened from a `WitnessConfig` and closed on shutdown. The HTTP API over it is `witness.api`."""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from tlog.client.verifier import TrustPolicy
from tlog.didresolver import DidResolver
from tlog.formats.keys import Cosigner
from tlog.transport import Outbound

from .config import WitnessConfig
from .core import Witness
from .keyfiles import load_or_create_keys
from .metrics import WitnessMetrics
from .network import LogLists
from .peer import PeerWitness, RegistryCheck
from .state import Stall, Trace, WitnessState

log = logging.getLogger("oap.witness")


@dataclass
class WitnessService:
    config: WitnessConfig
    signers: tuple[Cosigner, ...]
    state: WitnessState
    witness: Witness
    peer: PeerWitness
    metrics: WitnessMetrics
    resolver: DidResolver | None = None  # subjects and witnesses named by did:web, did:plc
    lists: LogLists | None = None  # logs/v0 lists (witness networks), when configured

    @property
    def signer(self) -> Cosigner:
        """The first cosigning key (its name is the witness's name)."""
        return self.signers[0]

    @classmethod
    def open(cls, config: WitnessConfig, *, clock: Callable[[], float] = time.time,
             stall: Stall | None = None, trace: Trace | None = None) -> WitnessService:
        """`stall`, `trace`: test hooks for the state database (None in production)."""
        config.data_dir.mkdir(parents=True, exist_ok=True)
        signers, seed = load_or_create_keys(config)
        state = WitnessState(config.state_path, stall=stall, trace=trace)
        witness = Witness(signers, config.logs, state, clock=clock)
        metrics = WitnessMetrics()
        metrics.logs_followed.set(len(config.logs))
        lists = LogLists(config, witness, metrics) if config.log_lists else None
        registry = None
        if config.registry_url:
            text = config.registry_policy_text()
            registry = RegistryCheck(config.registry_url, config.registry_key, timeout=config.registry_timeout,
                                     policy=TrustPolicy.from_text(text) if text is not None else None,
                                     outbound=Outbound.from_config(config))
        peer = PeerWitness(seed, identity=config.identity_did, policy_text=config.trust_policy_text(),
                           own_receipt=config.own_receipt, require_own_level=config.require_own_level,
                           registry=registry, clock=clock)
        configured = {log.origin for log in config.logs}
        for rec in state.all_sync():
            if rec.origin in configured:
                metrics.log_size.labels(rec.origin).set(rec.size)
        return cls(config, signers, state, witness, peer, metrics, DidResolver.from_config(config), lists)

    def reload_logs(self, cfg: WitnessConfig) -> None:
        """Follow the logs of a re-read configuration without a restart (SIGHUP): a log's key
        rotation adds its new key there, and dropping the old one ends it (docs/architecture.md
        §3.9). Only the logs and their keys change; the last cosigned checkpoint of each origin
        stays in the state database, so a log's new key can never restart its history."""
        self.config = dataclasses.replace(self.config, logs=cfg.logs)
        if self.lists is not None:
            self.lists.cfg = self.config
            self.lists.apply()
        else:
            self.witness.set_logs(cfg.logs)
        self.metrics.logs_followed.set(len(self.witness.logs))
        log.info("reloaded the configuration's logs: %s", ", ".join(
            f"{lg.origin} ({len(lg.extra_vkeys) + 1} key{'s' if lg.extra_vkeys else ''})" for lg in cfg.logs) or "none")

    def close(self) -> None:
        self.state.close()


