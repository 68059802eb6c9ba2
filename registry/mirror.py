"""Verified mirrors of an upstream registry (OAP-CORE-1.0 §32.6, docs/architecture.md §6).

`Mirror.sync()`:
1. fetch the upstream's `refs/heads/main` with dulwich into the local object
   store and record it as `refs/mirror/upstream` (untrusted until checked);
2. require a fast-forward: the local `main` must be an ancestor of it;
3. verify every new commit, oldest first, with a strict `history.Replayer`
   (add-only, layout, record signatures and rules, log anchors) into a copy of
   the index, then the head's anchor fetched from `GET /v1/anchors/<seq>`;
4. only then move the local `main` by compare-and-swap and swap the index in.

When the upstream rewrote history (force-push) or a new commit breaks a rule,
nothing advances: the upstream head is kept under `refs/quarantine/<time>-<reason>`
(so the offending commits stay available as evidence), a JSON report is
written to `<data>/quarantine/`, `oap_registry_mirror_refusals_total{reason}`
is incremented, and `sync` reports the refusal (the CLI exits non-zero).
A mirror's data directory is a complete registry: `oap-registry serve` can
serve it (read-only with `--upstream`, or as the primary with the registry's
key after a rebuild).
"""
from __future__ import annotations

import json
import logging
import time
import urllib.error
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dulwich.client import get_transport_and_path

from tlog.client.verifier import TrustPolicy
from tlog.errors import Conflict, OAPError, TooLarge
from tlog.formats.anchors import MAX_ANCHORS_BYTES
from tlog.transport import Outbound

from .anchoring import Genesis
from .history import HistoryError, Replayer, replay
from .index import Index
from .layout import anchor_path
from .metrics import RegistryMetrics
from .store import MAIN, RegistryRepo

if TYPE_CHECKING:
    from dulwich.objects import ObjectID
    from dulwich.refs import Ref

log = logging.getLogger("oap.registry.mirror")
UPSTREAM_REF = b"refs/mirror/upstream"
QUARANTINE = b"refs/quarantine/"

Progress = Callable[[int], Any]  # factory: total -> context manager with .update(n)


class UpstreamError(OAPError):
    """The upstream could not be reached or answered nonsense (not a verification failure)."""

    status, code = 502, "upstream_error"


@dataclass
class SyncResult:
    before: str | None
    after: str | None
    verified: int = 0
    refused: bool = False
    reason: str | None = None
    message: str = ""
    report: Path | None = None
    details: dict[str, Any] = field(default_factory=dict)


FETCH_TIMEOUT = 30.0  # seconds to connect, and between reads, to the upstream


def fetch_url(url: str, outbound: Outbound, timeout: float = FETCH_TIMEOUT) -> bytes:
    """A small document of the upstream (its /v1/info, an anchors file), at most
    MAX_ANCHORS_BYTES; FileNotFoundError for a 404, UpstreamError for anything else."""
    try:
        return outbound.fetch(url, timeout=timeout, cap=MAX_ANCHORS_BYTES)
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise FileNotFoundError(url) from None
        raise UpstreamError(f"{url}: HTTP {e.code}") from None
    except (urllib.error.URLError, OSError) as e:
        raise UpstreamError(f"{url}: {e}") from None
    except TooLarge as e:
        raise UpstreamError(e.message) from None


class Mirror:
    def __init__(self, data_dir: Path, upstream: str, *, repo: RegistryRepo, index: Index,
                 registry: str | None = None, policy: TrustPolicy | None = None,
                 metrics: RegistryMetrics | None = None, progress: Progress | None = None,
                 outbound: Outbound | None = None) -> None:
        """`outbound`: how the upstream is reached (tlog.transport; by default TLS 1.3, and
        plain http:// to loopback only)."""
        self.data_dir = Path(data_dir)
        self.outbound = outbound or Outbound()
        self.upstream = upstream.rstrip("/")
        self.repo, self.index = repo, index
        self.registry, self.policy = registry, policy
        self.metrics = metrics or RegistryMetrics()
        self.progress = progress
        self.anchors_dir = self.data_dir / "anchors"
        self.tofu_log = False
        self.genesis: Genesis | None = None

    def load(self) -> None:
        """Rebuild the index from the local (already verified) main."""
        r = Replayer(self.repo, self.index, strict=False, registry=self.registry, anchors_dir=self.anchors_dir)
        replay(self.repo, self.index, self.repo.ref(MAIN), r)
        if r.genesis is not None:
            self.genesis = r.genesis
            self.registry = r.genesis.registry
            self.tofu_log = self.policy is None

    def _strict(self, index: Index) -> Replayer:
        """A verifying replayer: the pinned policy (else the genesis's logs), requiring the genesis's k."""
        policy = self.genesis.pinned(self.policy) if self.genesis is not None else self.policy
        return Replayer(self.repo, index, strict=True, registry=self.registry, policy=policy,
                        anchors_dir=self.anchors_dir)

    def fetch(self) -> tuple[str, str | None]:
        """Fetch the upstream main into the local object store; returns (name, upstream head)."""
        info = json.loads(fetch_url(self.upstream + "/v1/info", self.outbound))
        name = info.get("name") if isinstance(info, dict) else None
        if not isinstance(name, str) or not name:
            raise UpstreamError("upstream /v1/info names no repository")
        client, path = get_transport_and_path(f"{self.upstream}/{name}.git",
                                              pool_manager=self.outbound.pool_manager(timeout=FETCH_TIMEOUT))

        def wants(refs: Mapping[Ref, ObjectID], depth: int | None = None) -> list[ObjectID]:
            head = refs.get(MAIN)
            return [head] if head is not None and head not in self.repo.repo.object_store else []

        try:
            result = client.fetch(path, self.repo.repo, determine_wants=wants)
        except Exception as e:  # noqa: BLE001 - dulwich raises many types for network trouble
            raise UpstreamError(f"git fetch from {self.upstream}: {type(e).__name__}: {e}") from None
        head = result.refs.get(MAIN)
        if head is None:
            return name, None
        head_hex = head.decode() if isinstance(head, bytes) else head
        self.repo.set_ref(UPSTREAM_REF, head_hex)
        return name, head_hex

    def sync(self) -> SyncResult:
        local = self.repo.ref(MAIN)
        _, upstream = self.fetch()
        if upstream is None:
            return SyncResult(local, local, message="upstream has no history yet")
        if upstream == local:
            self._ensure_head_anchor(self.index)
            return SyncResult(local, local, message="up to date")
        try:
            chain = self.repo.chain(upstream, local)
        except Conflict as e:
            return self._refuse("rewrite", e.message, local, upstream, [])
        except OAPError as e:
            return self._refuse("not_linear", e.message, local, upstream, [])
        self.metrics.mirror_lag.set(len(chain))
        work = self.index.copy()
        bar = self.progress(len(chain)) if self.progress else nullcontext()
        try:
            replayer = self._strict(work)
            with bar as b:
                for cid in chain:
                    replayer.apply(cid)
                    if b is not None:
                        b.update(1)
            self._head_anchor(replayer, work)
        except HistoryError as e:
            return self._refuse(e.reason, e.message, local, upstream, chain, offending=e.commit)
        except OAPError as e:
            return self._refuse("bad_anchor", e.message, local, upstream, chain)
        self.repo.cas(MAIN, local, upstream)
        if self.registry is None:
            self.registry = replayer.registry
        self.genesis = self.genesis or replayer.genesis
        self.tofu_log = self.tofu_log or replayer.tofu_log
        self.index = work
        self.metrics.mirror_commits.inc(len(chain))
        self.metrics.mirror_lag.set(0)
        self.metrics.mirror_last_sync.set(time.time())
        self.metrics.head_seq.set(work.head.seq if work.head else 0)
        return SyncResult(local, upstream, verified=len(chain), message=f"verified {len(chain)} commit(s)")

    def _head_anchor(self, replayer: Replayer, index: Index) -> None:
        head = index.head
        assert head is not None
        try:
            text = fetch_url(f"{self.upstream}/v1/anchors/{head.seq}", self.outbound)
        except FileNotFoundError:
            raise HistoryError(f"commit {head.seq}: upstream serves no anchor for its head", reason="missing_anchor",
                               commit=head.commit, seq=head.seq) from None
        try:
            replayer.verify_head_anchor(text)
        except OAPError as e:
            raise HistoryError(f"commit {head.seq}: {e.message}", reason="bad_anchor", commit=head.commit,
                               seq=head.seq) from None

    def _ensure_head_anchor(self, index: Index) -> None:
        head = index.head
        if head is not None and not (self.anchors_dir / Path(anchor_path(head.seq, index.several_logs)).name).exists():
            self._head_anchor(self._strict(index), index)

    def _refuse(self, reason: str, message: str, local: str | None, upstream: str, chain: list[str],
                offending: str | None = None) -> SyncResult:
        self.metrics.mirror_refusals.labels(reason).inc()
        existing = [r for r, v in self.repo.refs_under(QUARANTINE).items() if v == upstream]
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        if existing:
            ref = existing[0]
        else:
            ref = f"{QUARANTINE.decode()}{stamp}-{reason}"
            n = 1
            while self.repo.ref(ref.encode()) is not None:
                n += 1
                ref = f"{QUARANTINE.decode()}{stamp}-{reason}-{n}"
            self.repo.set_ref(ref.encode(), upstream)
        report = {
            "time": stamp, "upstream": self.upstream, "reason": reason, "message": message,
            "local_head": local, "upstream_head": upstream, "quarantine_ref": ref,
            "offending_commit": offending, "new_commits": chain,
        }
        qdir = self.data_dir / "quarantine"
        qdir.mkdir(parents=True, exist_ok=True)
        path = qdir / f"{Path(ref).name}.json"
        path.write_text(json.dumps(report, indent=2) + "\n")
        log.error("mirror refused upstream %s: %s (%s); evidence in %s and %s", upstream, reason, message, ref, path)
        return SyncResult(local, local, refused=True, reason=reason, message=message, report=path, details=report)
