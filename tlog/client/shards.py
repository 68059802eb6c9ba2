"""Following a registry's signed log list (docs/architecture.md §6.2): when a log answers
that it takes no more entries (frozen, or a temporal shard whose window closed: 410
`deprecated`), a client with a pinned registry (`registry <did:key> <url>` in its
tlog-policy) fetches the list, verifies it offline against that key, and anchors in the
log the list names as the successor that takes entries now. The successor's key comes
from the verified list, so nothing in the client's configuration changes.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from tlog.client.client import LogAnchor, anchor_in_logs, oap_request
from tlog.client.verifier import TrustPolicy
from tlog.errors import OAPError, VerificationError
from tlog.formats.keys import parse_vkey
from tlog.formats.policy import PolicyLog
from tlog.formats.shardlist import ListedLog, LogList, verify_log_list, writable_log
from tlog.transport import Outbound

MOVED = "deprecated"
"""The OAP error code of a log that takes no more entries (frozen, or its window closed)."""


async def fetch_log_list(policy: TrustPolicy, outbound: Outbound | None = None,
                         timeout: float = 30.0) -> LogList:
    """The log list of the first registry the policy pins with a URL, verified against its
    key (VerificationError if the policy pins none with a URL, or nothing verifies)."""
    outbound = outbound or Outbound()
    pinned = [r for r in policy.policy.registries if r.url]
    if not pinned:
        raise VerificationError("the policy pins no registry with a URL (registry <did:key> <url>): "
                                "no log list to follow")
    errors = []
    async with outbound.session(timeout=timeout) as session:
        for r in pinned:
            try:
                data, _ = await oap_request(session, "GET", f"{r.url}/v1/log-list")
                return verify_log_list(json.loads(data), r.did)
            except (OAPError, ValueError) as e:
                errors.append(f"{r.url}: {getattr(e, 'message', e)}")
    raise VerificationError("no verified log list: " + "; ".join(errors))


def with_log(policy: TrustPolicy, log: ListedLog) -> TrustPolicy:
    """`policy` trusting one more log, `log` (its key from a verified list), with the same
    witnesses and quorum."""
    if any(entry.vkey == log.vkey for entry in policy.policy.logs):
        return policy
    inner = dataclasses.replace(policy.policy, logs=(*policy.policy.logs, PolicyLog(log.vkey, log.url)))
    return TrustPolicy(inner, [*policy.logs, parse_vkey(log.vkey)], policy.witnesses)


async def anchor_following_list(entry: dict, urls: Sequence[str], *, policy: TrustPolicy | None,
                                timeout: float = 30.0, token: str | None = None, outbound: Outbound | None = None,
                                tell: Callable[[str], None] = lambda _: None,
                                now: datetime | None = None) -> tuple[list[LogAnchor], TrustPolicy | None]:
    """`anchor_in_logs`, then, for each log that answered `deprecated`, once: the successor
    the registry's verified log list names that takes entries now, anchored in instead
    (`tell` says so). The results in the order of `urls` (a moved log's result is its
    successor's) and the policy the bundles verify against (the successors' keys added)."""
    results = await anchor_in_logs(entry, urls, policy=policy, timeout=timeout, token=token, outbound=outbound)
    moved = [i for i, r in enumerate(results) if r.anchored is None and r.code == MOVED]
    if not moved or policy is None or not policy.policy.registries:
        return results, policy
    try:
        lst = await fetch_log_list(policy, outbound, timeout)
    except OAPError as e:
        tell(f"cannot follow the registry's log list: {e.message}")
        return results, policy
    at = now or datetime.now(UTC)
    targets: dict[int, ListedLog] = {}
    for i in moved:
        listed = lst.by_url(results[i].url)
        if listed is None:  # only a log the list names hands over: never a jump to some other log
            tell(f"{results[i].url} takes no more entries, and the registry's log list does not name it")
            continue
        nxt = writable_log(lst, at, start=listed.origin)
        if nxt is None or nxt.url in urls or nxt.url in {t.url for t in targets.values()}:
            tell(f"{results[i].url} takes no more entries, and the registry's log list names no other log "
                 "that takes them now")
            continue
        targets[i] = nxt
        policy = with_log(policy, nxt)
    if not targets:
        return results, policy
    again = await anchor_in_logs(entry, [t.url for t in targets.values()], policy=policy, timeout=timeout,
                                 token=token, outbound=outbound)
    for (i, nxt), r in zip(targets.items(), again):
        tell(f"{results[i].url} takes no more entries ({results[i].error}); the registry's signed log list "
             f"({lst.registry}, issued {lst.issued_at:%Y-%m-%dT%H:%M:%SZ}) names {nxt.url} ({nxt.origin}): "
             + ("anchored there" if r.anchored is not None else f"that failed too: {r.error}"))
        results[i] = r
    return results, policy
