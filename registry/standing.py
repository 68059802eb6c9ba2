"""Who speaks for a principal, and the standing of each status id, at a given time.

The meaning of the registry's records for relying parties (OAP-CORE-1.0 §5.3, §22.3,
§28.5; docs/architecture.md §6.1 says what each answer lets a relying party conclude):

- A **revocation** ends a DID, key, conformance receipt or credential for good from its
  `effective_at`; the earliest one in force decides.
- A **rotation** (`rotate` key event) retires the subject's previous key — the subject
  itself when it is a did:key, else the key of the previous rotation — from its
  `effective_at`, everywhere: a retired key answers `revoked` with reason `superseded`,
  signs no registry record (but its own revocation and the revocation of credentials it
  issued) and is nobody's controller any more.
- A **kill switch** revokes the principal's four token classes (`<principal>#<class>`) for
  good: every token active at the kill (and every one issued while it is in force) stays
  revoked. A later **recovery** (a `rotate` or `resume` of the principal, committed after
  the kill switch and effective after it) opens a new token epoch: tokens issued from then
  on carry the status id `<principal>#<class>@<recovery id>`, which the kill switches it
  recovered from do not touch (a token issued before the recovery cannot name it).
- A principal is **suspended** (§5.3) from a signed `suspend` key event until a recovery,
  and automatically while its primary key (its latest rotation key, else itself) has a
  `loss_of_key` revocation in force and no controller is left that could sign a recovery.
  A suspension covers the principal's DID and its token classes.
- A principal is **dead** while its primary key has a revocation in force for a cause (not
  `superseded`, not `loss_of_key`) and no controller is left: its tokens answer `revoked`
  from that revocation, in every epoch.
- A **credential** (`vc <issuer> <id>`) falls with its issuer as the issuer's status lists
  do: revoked from the issuer's revocation for a reason other than `superseded`, suspended
  while the issuer is.
- A record that **enables** (`add_controller`, `rotate`, `resume`: it gives authority,
  ends a suspension or reinstates tokens) counts only when its signer could sign it at
  its commit time, the latest time it can have been signed (its commit's log anchor
  proves it): the signer had no revocation in force then for a reason other than
  `superseded` — also one committed later and dated back — and, unless it is the subject
  itself, an earlier-committed key event of the subject that counts had made it a
  controller by then. A record that does not count has no effect at all (a void rotation
  retires no key). Revocations, kill switches and `suspend` events count whoever signed
  them: they only take trust away.
- A **conformance receipt** shares its subject's standing: it is revoked from the
  subject's `revoked_at` (whatever the reason, `superseded` included) and suspended while
  the subject is, besides its own revocations and expiry. Its level holds only while its
  signers count (§31, §28.5): a witness or auditor counts if its DID and the key its
  signature verified with (`Record.signing_key`) were valid at the receipt's commit time,
  the latest time it can have signed (an L5 witness: holding a valid L4/L5 then), whatever
  its `issued_at` says; when too few count, the receipt is revoked from its `issued_at`
  (`witness_invalid`, `auditor_invalid`, `witness_unqualified`). A compromise dated after
  the commit leaves the signature standing.

Pure functions over the registry's state (`records.RegistryState`, which `index.Index`
implements); `records.check_rules` and `status` both read them, so the registry's rules
and its answers never disagree. They never raise on well-formed state.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from tlog.formats.conformance import MAX_CLOCK_SKEW, MIN_WITNESSES, claims_of
from tlog.formats.independence import Principal, parties, principal

KILL_SWITCH_CLASSES = ("subscription_tokens", "oauth_grants", "trust_tokens", "webhook_subscriptions")
"""What a kill switch revokes (§22.3); each is a status id `<principal>#<class>`."""
RECOVERY_EVENTS = frozenset({"rotate", "resume"})
"""Key events that recover a principal from a kill switch or a suspension. `add_controller`
does not: whoever holds a key the principal lost could add a controller of their own."""
ENABLING_EVENTS = frozenset({"add_controller", "rotate", "resume"})
"""Key events that give authority or lift a restriction: they count only when their signer
could sign them at their commit time (`counting`)."""
CONFORMANCE_PREFIX = "urn:oap:conformance:"
HIGH_LEVELS = frozenset({"L4", "L5"})
QUALIFIED_LEVELS = frozenset({"L5"})
"""§31: L5 needs three witnesses that hold a valid L4 or L5 receipt themselves; L4 needs one
independent peer witness, with no level asked of it."""
EPOCH_PREFIX = "urn:oap:key-event:"
"""A token epoch is named by the id of the recovery (a key event) that opened it."""


class Rec(Protocol):
    """The parts of a `records.Record` read here."""

    @property
    def type(self) -> str: ...
    @property
    def id(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def subject(self) -> str: ...
    @property
    def effective_at(self) -> datetime: ...
    @property
    def expires_at(self) -> datetime | None: ...
    @property
    def key(self) -> str | None: ...
    @property
    def issued_by(self) -> str: ...
    @property
    def body(self) -> dict[str, Any]: ...
    @property
    def content(self) -> bytes: ...
    @property
    def level(self) -> str | None: ...
    @property
    def witnesses(self) -> tuple[str, ...]: ...
    def status_keys(self) -> tuple[str, ...]: ...
    def signing_key(self, signer: str) -> str | None: ...


class State(Protocol):
    """What these functions read from a registry (`records.RegistryState`)."""

    @property
    def bootstrap_witnesses(self) -> frozenset[str]: ...
    def conformance(self, receipt_id: str) -> Rec | None: ...
    def receipts_of(self, did: str) -> Iterable[Rec]: ...
    def did_documents_of(self, did: str) -> Iterable[object]: ...
    def revocations_of(self, status_key: str) -> Iterable[Rec]: ...
    def key_events_of(self, subject: str) -> Iterable[Rec]: ...
    def key_events_naming(self, key: str) -> Iterable[Rec]: ...
    def position(self, path: str) -> int: ...
    def committed_at(self, path: str) -> datetime | None: ...
    def memo(self) -> dict[Any, Any]: ...


class Indexed(State, Protocol):
    def all_records(self) -> Iterator[Rec]: ...


def token_id(key: str) -> tuple[str, str, str | None] | None:
    """(principal, class, epoch) when `key` is a token status id, else None: `<principal>#<class>`
    (epoch None: the tokens the principal issued before its first recovery) or
    `<principal>#<class>@<recovery id>` (the tokens issued since that recovery, a `rotate` or
    `resume` key event of the principal named by its record id). A DID holds no `#`, so the
    first one ends the principal; the record id may hold anything printable."""
    principal, sep, rest = key.partition("#")
    cls, at, epoch = rest.partition("@")
    if not sep or cls not in KILL_SWITCH_CLASSES or not principal.startswith("did:"):
        return None
    if at and (not epoch.startswith(EPOCH_PREFIX) or len(epoch) == len(EPOCH_PREFIX)):
        return None
    return principal, cls, (epoch if at else None)


def epoch_id(principal: str, cls: str, recovery: Rec | None) -> str:
    """The status id of the tokens of class `cls` that `principal` issued since `recovery`."""
    return f"{principal}#{cls}" if recovery is None else f"{principal}#{cls}@{recovery.id}"


def epoch_record(state: State, principal: str, rid: str) -> Rec | None:
    """The `rotate` or `resume` key event of `principal` whose id is `rid` (a token epoch), or None;
    None too for one that does not count (`counting`): a void record has no effect, it opens no
    epoch (its id answers `unknown`, never `good`)."""
    return next((e for e in counting(state, principal) if e.id == rid and e.body["event"] in RECOVERY_EVENTS),
                None)


def _is_did(key: str) -> bool:
    return key.startswith("did:") and "#" not in key


# --- revocation and retirement ------------------------------------------------------------


def revoked_at(state: State, key: str, at: datetime) -> datetime | None:
    """Earliest effective time of a revocation of status id `key` that is in force at `at`."""
    times = [r.effective_at for r in state.revocations_of(key) if r.effective_at <= at]
    return min(times) if times else None


def revoked_for_cause(state: State, key: str, at: datetime | None) -> Rec | None:
    """The earliest revocation of `key` in force at `at` for a reason other than `superseded`
    (a compromise, a loss...); `at` None: any such revocation, whenever effective."""
    found = [r for r in state.revocations_of(key) if r.type == "revocation" and r.body["reason"] != "superseded"
             and (at is None or r.effective_at <= at)]
    return min(found, key=lambda r: r.effective_at) if found else None


def counting(state: State, subject: str) -> tuple[Rec, ...]:
    """`subject`'s key events that count, in commit order. An enabling event counts when,
    at its commit time, its signer had no revocation for a reason other than `superseded`
    in force (known now: a compromise dated back voids what the thief signed since) and,
    unless it is the subject itself, an earlier-committed `add_controller` / `rotate` of the
    subject that counts had made it a controller by then. `suspend` always counts.

    A `superseded` revocation or a rotation does not void what the key signed: it replaces
    a key, it does not say the key was stolen (a rotation signed by the key it retires must
    count). An unknown commit time (an index fed without one) is never proven before
    anything: any revocation of the signer voids the event.

    Kept in the state's memo (it is asked for many times per epoch): one pass over the
    subject's events, with the earliest grant of each key in a dict."""
    memo = state.memo()
    got = memo.get(("counting", subject))
    if got is not None:
        return got
    events = sorted(state.key_events_of(subject), key=lambda e: state.position(e.path))
    out: list[Rec] = []
    granted: dict[str, datetime] = {}  # key -> earliest effective time of a counting grant to it
    for e in events:
        if e.body["event"] in ENABLING_EVENTS:
            committed = state.committed_at(e.path)
            if revoked_for_cause(state, e.issued_by, committed) is not None:
                continue
            if e.issued_by != subject:
                since = granted.get(e.issued_by)
                if since is None or (committed is not None and since > committed):
                    continue
        out.append(e)
        if e.key and e.body["event"] in ("add_controller", "rotate"):
            granted[e.key] = min(e.effective_at, granted.get(e.key, e.effective_at))
    memo[("counting", subject)] = result = tuple(out)
    return result


def _rotations(state: State, subject: str, at: datetime) -> tuple[Rec, ...]:
    """`subject`'s rotations that count and are in force at `at`, in the order they take effect
    (commit order breaks ties). Kept in the state's memo, as `counting` is."""
    memo = state.memo()
    got = memo.get(("rotations", subject, at))
    if got is None:
        got = memo[("rotations", subject, at)] = tuple(sorted(
            (e for e in counting(state, subject) if e.body["event"] == "rotate" and e.effective_at <= at),
            key=lambda e: e.effective_at))
    return got


@dataclass(frozen=True)
class Retirement:
    at: datetime
    rotation: Rec  # the rotation that retired the key
    linked_by: Rec | None  # the rotation that had made it the subject's key (None: the did:key subject itself)


def retirement(state: State, key: str, at: datetime) -> Retirement | None:
    """When a rotation retired `key` (§5.3, §28.5), the earliest if several did."""
    found: list[Retirement] = []
    if key.startswith("did:key:"):
        rotations = _rotations(state, key, at)
        if rotations:
            found.append(Retirement(rotations[0].effective_at, rotations[0], None))
    for made in state.key_events_naming(key):
        if made.body["event"] != "rotate" or made.effective_at > at:
            continue
        rotations = _rotations(state, made.subject, at)
        paths = [r.path for r in rotations]
        if made.path not in paths:
            continue  # a void rotation made nobody's key
        later = rotations[paths.index(made.path) + 1:]
        nxt = next((r for r in later if r.key != key), None)
        if nxt is not None:
            found.append(Retirement(nxt.effective_at, nxt, made))
    return min(found, key=lambda r: r.at) if found else None


def ended_at(state: State, key: str, at: datetime) -> datetime | None:
    """When `key` stopped speaking for anyone: revoked, or retired by a rotation."""
    times = [t for t in (revoked_at(state, key, at), getattr(retirement(state, key, at), "at", None))
             if t is not None]
    return min(times) if times else None


def controllers(state: State, subject: str, at: datetime, *, revoked_too: bool = False) -> set[str]:
    """Who may speak for `subject` at `at`: the subject itself (a did:key with its key,
    another DID with the keys of its document), every key an `add_controller` event
    made its controller, and the key of its latest `rotate` event, which retires the
    subject's did:key and the keys of earlier rotations; minus keys revoked or retired by then.

    `revoked_too`: keep the keys that are revoked (not those a rotation retired), for records
    that only take trust away (a kill switch, a revocation, `suspend`): the owner of a key it
    revoked for compromise may still pull its kill switch (§22.3, §28.5); at worst a thief
    holding the key takes trust away, and the owner recovers through its recovery path."""
    events = sorted((e for e in counting(state, subject) if e.effective_at <= at and e.key),
                    key=lambda e: e.effective_at)  # stable: commit order breaks ties
    rotations = [e.key for e in events if e.body["event"] == "rotate"]
    out = {e.key for e in events if e.body["event"] == "add_controller"}
    if rotations:
        out.add(rotations[-1])
        retired = set(rotations[:-1]) | ({subject} if subject.startswith("did:key:") else set())
        out -= retired - {rotations[-1]}
        if not subject.startswith("did:key:"):
            out.add(subject)
    else:
        out.add(subject)
    if revoked_too:
        return {k for k in out if k is not None and retirement(state, k, at) is None}
    return {k for k in out if k is not None and ended_at(state, k, at) is None}


def primary_key(state: State, principal: str, at: datetime) -> tuple[str, Rec | None]:
    """The key that signs for `principal` at `at` and the rotation that made it so:
    its latest rotation key, else the principal itself."""
    rotations = _rotations(state, principal, at)
    if rotations and rotations[-1].key:
        return rotations[-1].key, rotations[-1]
    return principal, None


# --- recovery, suspension, kill switches ------------------------------------------------------


def recovery(state: State, principal: str, after: Rec, at: datetime) -> Rec | None:
    """The first recovery of `principal` from `after` (a kill switch or a suspension): a
    `rotate` or `resume` that counts, committed after it and effective after it, by `at`. Commit order
    matters: a rotation that was already in the registry cannot undo a kill switch that
    is backdated before it."""
    pos = state.position(after.path)
    found = [e for e in counting(state, principal)
             if e.body["event"] in RECOVERY_EVENTS and after.effective_at < e.effective_at <= at
             and state.position(e.path) > pos]
    return min(found, key=lambda e: e.effective_at) if found else None


@dataclass(frozen=True)
class Suspension:
    since: datetime
    reason: str
    record: Rec  # the `suspend` event, or the loss_of_key revocation of an automatic suspension
    linked_by: Rec | None = None  # automatic: the rotation that made the lost key the principal's


def _lost(state: State, principal: str, at: datetime) -> tuple[Rec, Rec | None] | None:
    key, via = primary_key(state, principal, at)
    losses = [r for r in state.revocations_of(key)
              if r.type == "revocation" and r.body["reason"] == "loss_of_key" and r.effective_at <= at]
    return (min(losses, key=lambda r: r.effective_at), via) if losses else None


def _change_times(state: State, principal: str, at: datetime) -> set[datetime]:
    """Every time by `at` at which the principal's controllers or primary key may have changed."""
    events = list(state.key_events_of(principal))
    times = {e.effective_at for e in events}
    for k in {principal} | {e.key for e in events if e.key}:
        times.update(r.effective_at for r in state.revocations_of(k))
        ret = retirement(state, k, at)
        if ret is not None:
            times.add(ret.at)
    return {t for t in times if t <= at}


def automatic_suspension(state: State, principal: str, at: datetime) -> Suspension | None:
    """§5.3 "loss of a primary key without a documented recovery path triggers automatic
    suspension": the primary key has a `loss_of_key` revocation in force and no controller
    is left that could sign a recovery. `since` is when that last became true."""
    lost = _lost(state, principal, at)
    if lost is None or controllers(state, principal, at):
        return None
    since = at
    for t in sorted(_change_times(state, principal, at), reverse=True):
        earlier = _lost(state, principal, t)
        if earlier is None or controllers(state, principal, t):
            break
        since, lost = t, earlier
    return Suspension(since, "loss_of_key", lost[0], lost[1])


NOT_FOR_CAUSE = frozenset({"superseded", "loss_of_key"})
"""Revocation reasons that do not end a principal: a rotation replaced the key, or a lost key
suspends it (§5.3) until a recovery."""


def dead(state: State, principal: str, at: datetime) -> tuple[Rec, Rec | None] | None:
    """Whether `principal` can never speak again at `at`: its primary key (its latest rotation key,
    else itself) has a revocation in force for a cause (a compromise, cessation... not `superseded`
    nor `loss_of_key`) and no controller is left that could sign a recovery. Then (the earliest
    such revocation, the rotation that made the key primary); its tokens answer `revoked` from
    that revocation's time, for good (fail safe: nobody can pull its kill switch or recover it,
    and the key's thief may have issued them)."""
    key, via = primary_key(state, principal, at)
    causes = [r for r in state.revocations_of(key)
              if r.type == "revocation" and r.body["reason"] not in NOT_FOR_CAUSE and r.effective_at <= at]
    if not causes or controllers(state, principal, at):
        return None
    return min(causes, key=lambda r: r.effective_at), via


def suspension(state: State, principal: str, at: datetime) -> Suspension | None:
    """The principal's suspension in force at `at` (the earliest if several are), or None."""
    found = [Suspension(e.effective_at, e.body.get("reason", "unspecified"), e)
             for e in state.key_events_of(principal)
             if e.body["event"] == "suspend" and e.effective_at <= at and recovery(state, principal, e, at) is None]
    auto = automatic_suspension(state, principal, at)
    if auto is not None:
        found.append(auto)
    return min(found, key=lambda s: s.since) if found else None


@dataclass(frozen=True)
class KillState:
    kill: Rec
    reinstated_by: Rec | None  # the recovery; None: every token of the principal is revoked


def recovers(state: State, recovery_event: Rec, kill: Rec) -> bool:
    """`recovery_event` recovers the principal from `kill`: it counts, it was committed after
    the kill switch and it takes effect after it."""
    return recovery_event.effective_at > kill.effective_at \
        and state.position(recovery_event.path) > state.position(kill.path) \
        and any(e.path == recovery_event.path for e in counting(state, recovery_event.subject))


def kill_state(state: State, principal: str, at: datetime, epoch: Rec | None = None) -> KillState | None:
    """The principal's kill switches at `at` (§22.3) that revoke the tokens of `epoch` (None:
    the tokens issued before any recovery, whom every kill switch revokes; a recovery: the
    tokens issued since it, whom the kill switches it recovered from do not revoke): the
    earliest one not recovered from, or when all were, the one with the latest recovery
    (which opened the next epoch; ties: the latest kill switch, then the first committed)."""
    kills = [r for r in state.revocations_of(f"{principal}#{KILL_SWITCH_CLASSES[0]}")
             if r.type == "kill_switch" and r.effective_at <= at]
    if epoch is not None:
        kills = [k for k in kills if not recovers(state, epoch, k)]
    if not kills:
        return None
    states = [KillState(k, recovery(state, principal, k, at)) for k in kills]
    open_ = [s for s in states if s.reinstated_by is None]
    if open_:
        return min(open_, key=lambda s: s.kill.effective_at)
    return max(states, key=lambda s: (s.reinstated_by.effective_at if s.reinstated_by else s.kill.effective_at,
                                      s.kill.effective_at))


# --- the standing of one status id ----------------------------------------------------------


@dataclass(frozen=True)
class Standing:
    """What the registry answers for a status id that is not plainly `good` at a time.

    `status` is `revoked` or `suspended`; `since` is `revoked_at` / `suspended_at`;
    `record` decided it (a revocation, kill switch, rotation, `suspend` event, a
    loss_of_key revocation, or an expired conformance receipt), `linked_by` the rotation
    that made the key it names the principal's key. A revoked token class whose principal
    recovered carries `reinstated_at` / `reinstated_by`: the recovery that opened the next
    token epoch (tokens issued since carry `epoch_id(..., reinstated_by)`); every token of
    this id stays revoked. A conformance receipt revoked or suspended through its
    subject carries its subject's standing (`record`, `linked_by`, `reason`, `since`) and
    `via`, the receipt, which names the subject.
    """

    key: str
    status: str
    since: datetime
    reason: str
    record: Rec
    linked_by: Rec | None = None
    reinstated_at: datetime | None = None
    reinstated_by: Rec | None = None
    via: Rec | None = None  # a conformance receipt answering with its subject's standing: the receipt
    signer: str | None = None  # a receipt whose level does not hold: the witness or auditor that does not count
    signer_standing: Standing | None = None  # ... and its standing when it signed

    def records(self) -> tuple[Rec, ...]:
        return tuple(r for r in (self.record, self.linked_by, self.reinstated_by, self.via) if r is not None)


def standing(state: State, key: str, at: datetime,
             subjects: dict[str, Standing | None] | None = None) -> Standing | None:
    """The standing of status id `key` at `at`; None when it is plainly good (or unknown).

    Precedence, fail safe: a permanent revocation (or, for a token class, a kill switch
    not recovered from) over a suspension over a kill switch recovered from. `subjects`
    caches the standings of receipt subjects across calls at one `at`.
    """
    tc = token_id(key)
    if tc is not None:
        principal, _, rid = tc
        epoch = None if rid is None else epoch_record(state, principal, rid)
        if rid is not None and (epoch is None or epoch.effective_at > at):
            return None  # no such epoch (yet): the registry knows nothing of it
        s = _tokens(state, principal, at, epoch)
        return replace(s, key=key) if s is not None else None
    found = [Standing(key, "revoked", r.effective_at, r.body["reason"], r)
             for r in state.revocations_of(key) if r.type == "revocation" and r.effective_at <= at]
    held: Standing | None = None
    if key.startswith(CONFORMANCE_PREFIX):
        receipt = state.conformance(key)
        if receipt is not None:
            if receipt.expires_at is not None and receipt.expires_at <= at:
                found.append(Standing(key, "revoked", receipt.expires_at, "expired", receipt))
            # its level never held: revoked from its issued_at — judged from the commit time whatever
            # issued_at says (one up to 5 minutes ahead must not skip the check until then)
            why = level_unproven(state, receipt, signed_by(state, receipt, at))
            if why is not None:
                found.append(_unproven_standing(key, receipt, why))
            if subjects is None:
                subjects = {}
            if receipt.subject not in subjects:
                subjects[receipt.subject] = standing(state, receipt.subject, at)
            subj = subjects[receipt.subject]
            if subj is not None:  # the receipt vouches for its subject: it falls with it
                held = replace(subj, key=key, via=receipt)
                if held.status == "revoked":
                    found.append(held)
    elif _is_did(key):
        ret = retirement(state, key, at)
        if ret is not None:
            found.append(Standing(key, "revoked", ret.at, "superseded", ret.rotation, ret.linked_by))
    issuer = vc_issuer(key)
    if issuer is not None:  # a credential falls with its issuer, as the issuer's status lists do
        cause = revoked_for_cause(state, issuer, at)
        if cause is not None:
            found.append(Standing(key, "revoked", cause.effective_at, cause.body["reason"], cause))
    if found:
        return min(found, key=lambda s: s.since)  # ties: revocations (in commit order) first
    sus_of = key if _is_did(key) else issuer if issuer is not None and _is_did(issuer) else None
    if sus_of is not None:
        sus = suspension(state, sus_of, at)
        if sus is not None:
            held = Standing(key, "suspended", sus.since, sus.reason, sus.record, sus.linked_by)
    return held


def vc_issuer(key: str) -> str | None:
    """The issuer of a credential status id `vc <issuer> <id>` (`records.vc_status_key`), else None."""
    kind, _, rest = key.partition(" ")
    issuer, sep, _ = rest.partition(" ")
    return issuer if kind == "vc" and sep and issuer.startswith("did:") else None


# --- the signers of a conformance receipt ------------------------------------------------------


@dataclass(frozen=True)
class Unproven:
    """Why a conformance receipt's level does not hold (§31): the signatures that count are too
    few. `reason` is `witness_invalid` (a witness's key was not valid for its DID when it signed),
    `auditor_invalid` (the auditor's was not) or `witness_unqualified` (an L5 witness held no
    valid L4/L5 receipt then); `signer` and `standing` name the first signer that does not
    count for an invalid key, and that signer's own standing then (its deciding record)."""

    reason: str  # or `subject_invalid`: the key of the subject's own signature was not valid
    signer: str
    standing: Standing | None  # None: witness_unqualified


def principal_in(state: State, did: str, documents: dict[str, Any] | None = None) -> Principal:
    """Everything the registry knows of `did` for the independence rules: every stored
    version of its DID document (and the one resolved for this submission), and every
    DID its key events ever named (added or rotated to, revoked or not: a key that once
    spoke for a subject is never independent of it)."""
    docs = list(state.did_documents_of(did))
    if documents and did in documents:
        docs.append(documents[did])
    named = {e.key for e in state.key_events_of(did) if e.key} | {e.issued_by for e in state.key_events_of(did)}
    return principal(did, documents=docs, controllers=named - {did})


def signed_by(state: State, receipt: Rec, at: datetime) -> datetime:
    """The latest time the signatures on `receipt` can have been made: its commit time, which
    its commit's log anchor proves (a witness signature carries no time of its own, and a time
    a signer writes is its own claim); `at` when the commit time is unknown (never earlier)."""
    committed = state.committed_at(receipt.path)
    return committed if committed is not None and committed <= at else at


def signer_standing(state: State, did: str, at: datetime, key: str | None = None) -> Standing | None:
    """The standing of a witness or auditor `did` when it signed at `at`: revoked (for any
    reason: compromised, lost, its DID revoked), retired by a rotation, or suspended; else,
    when it signed with `key` (the did:key of the key its signature verified with, `Record.
    signing_key`), that key's standing (§28.5: a did:web participant revokes a compromised key
    as `kind=key`; the key's standing then has `key` as its status id). None: both its DID and
    the key it signed with were valid then."""
    memo = state.memo()
    got = memo.get(("signer", did, at, key), memo)
    if got is memo:
        got = standing(state, did, at)
        if got is None and key is not None and key != did:
            got = standing(state, key, at)
        memo[("signer", did, at, key)] = got
    return got


def qualified(state: State, did: str, at: datetime, before: int | None = None, *, bootstrap: bool = True) -> bool:
    """§31 L5: `did` "holds a valid L4 or L5 Conformance Receipt" at `at` (or is one of the
    registry's bootstrap witnesses), and is itself neither revoked, retired nor suspended then.
    A receipt counts when it was committed before position `before` (None: any in `state`),
    was issued by `at` (5 minutes' skew), had not expired nor been revoked by then, and its own
    level held (its signers counted when they signed). `bootstrap=False`: whether `did` holds
    such a receipt of its own, a bootstrap witness or not."""
    if signer_standing(state, did, at) is not None:
        return False
    if bootstrap and did in state.bootstrap_witnesses:
        return True
    return any(
        r.level in HIGH_LEVELS and r.effective_at <= at + MAX_CLOCK_SKEW and r.expires_at is not None
        and at < r.expires_at and (before is None or state.position(r.path) < before)
        and not any(x.type == "revocation" and x.effective_at <= at for x in state.revocations_of(r.id))
        and level_unproven(state, r, signed_by(state, r, at)) is None
        for r in state.receipts_of(did)
    )


def level_unproven(state: State, receipt: Rec, signed: datetime, *, documents: dict[str, Any] | None = None,
                   strict_l4: bool = False) -> Unproven | None:
    """Whether `receipt`'s level fails to hold because of its signers (§31, docs/architecture.md
    §6.1): each witness and the auditor counts only if its key was valid for its DID at `signed`
    (`signed_by`: the latest time it can have signed; a compromise dated at or before it voids
    the signature, one dated after it does not), an L5 witness only if it was `qualified` then,
    and the witnesses that count must be the level's number of independent parties (L4: one;
    L5: three, and the audit). None: the level holds. `strict_l4`: the registry setting that asks
    L4 witnesses to be qualified too (its submissions only; answers follow §31).

    Kept in the state's memo by receipt (a receipt's standing is asked once per epoch, and
    again for each L5 receipt it qualifies a witness for)."""
    key = ("unproven", receipt.path, signed, strict_l4, documents is None)
    memo = state.memo()
    if documents is None and key in memo:
        return memo[key]
    out = _unproven(state, receipt, signed, documents, strict_l4)
    if documents is None:
        memo[key] = out
    return out


def _unproven(state: State, receipt: Rec, signed: datetime, documents: dict[str, Any] | None,
              strict_l4: bool) -> Unproven | None:
    own = receipt.signing_key(receipt.subject)
    if own is not None and own != receipt.subject:  # a did:web subject's self signature: its key must stand
        s = signer_standing(state, own, signed)  # (the subject's DID: the receipt falls with it, `standing`)
        if s is not None:
            return Unproven("subject_invalid", receipt.subject, s)
    audit = claims_of(receipt.body).get("audit")
    auditor = audit.get("auditor") if isinstance(audit, dict) else None
    if isinstance(auditor, str):  # the receipt states the audit: it holds only with a valid auditor
        s = signer_standing(state, auditor, signed, receipt.signing_key(auditor))
        if s is not None:
            return Unproven("auditor_invalid", auditor, s)
    level = receipt.level or ""
    need = MIN_WITNESSES.get(level, 0)
    if not need:
        return None
    valid, first_invalid = [], None
    for w in receipt.witnesses:
        s = signer_standing(state, w, signed, receipt.signing_key(w))
        if s is None:
            valid.append(w)
        elif first_invalid is None:
            first_invalid = Unproven("witness_invalid", w, s)
    counted = valid
    first_unqualified = None
    if level in QUALIFIED_LEVELS or (strict_l4 and level == "L4"):
        before = None
        try:
            before = state.position(receipt.path)
        except KeyError:
            pass  # a submission not in the registry yet: every receipt in it came before
        counted = [w for w in valid if qualified(state, w, signed, before)]
        missing = [w for w in valid if w not in counted]
        if missing:
            first_unqualified = Unproven("witness_unqualified", missing[0], None)
    if len(counted) == len(receipt.witnesses):
        return None  # every signer counts: the independence the registry judged at acceptance stands
    if need > 1 and counted:
        groups, _ = parties([principal_in(state, w, documents) for w in counted])
        enough = len(groups) >= need
    else:
        enough = len(counted) >= need
    if enough:
        return None
    return first_invalid or first_unqualified


def _unproven_standing(key: str, receipt: Rec, why: Unproven) -> Standing:
    """A receipt whose level does not hold answers `revoked` from its `issued_at` (it never
    proved its level), for `why.reason`; the deciding record is the signer's own (with the
    rotation it is linked by), and `via` the receipt, whose commit time bounds the signing;
    for an unqualified witness, the receipt itself."""
    if why.standing is None:
        return Standing(key, "revoked", receipt.effective_at, why.reason, receipt, signer=why.signer)
    return Standing(key, "revoked", receipt.effective_at, why.reason, why.standing.record, why.standing.linked_by,
                    via=receipt, signer=why.signer, signer_standing=why.standing)


def whole_lists(state: State, issuer: str, at: datetime) -> frozenset[str]:
    """Which of an issuer's status lists have every bit set at `at`: `revocation` once it is
    revoked for a reason other than `superseded` (its credentials cannot be told apart from
    ones a thief issued; a rotated-away key keeps what it issued before), `suspension` while
    it is suspended. Both may hold; the earliest standing alone would hide one."""
    out = set()
    if revoked_for_cause(state, issuer, at) is not None:
        out.add("revocation")
    if _is_did(issuer) and suspension(state, issuer, at) is not None:
        out.add("suspension")
    return frozenset(out)


def _tokens(state: State, principal: str, at: datetime, epoch: Rec | None = None) -> Standing | None:
    """The standing shared by the principal's four token classes in one token epoch (`key` is
    the principal). A kill switch that revokes the epoch's tokens revokes them for good, also
    once recovered from (§22.3: a recovery never revives a token active at the kill): it
    outranks a suspension, which covers every epoch until the principal recovers."""
    ks = kill_state(state, principal, at, epoch)
    gone = dead(state, principal, at)
    ended = [Standing(principal, "revoked", gone[0].effective_at, gone[0].body["reason"], gone[0], gone[1])
             if gone is not None else None,
             Standing(principal, "revoked", ks.kill.effective_at, "kill_switch", ks.kill)
             if ks is not None and ks.reinstated_by is None else None]
    found = [s for s in ended if s is not None]
    if found:  # for good, with no epoch to move to: the earliest decides (a dead principal first on a tie)
        return min(found, key=lambda s: s.since)
    if ks is not None and ks.reinstated_by is not None:
        return Standing(principal, "revoked", ks.kill.effective_at, "kill_switch", ks.kill,
                        reinstated_at=ks.reinstated_by.effective_at, reinstated_by=ks.reinstated_by)
    s = suspension(state, principal, at)
    if s is not None:
        return Standing(principal, "suspended", s.since, s.reason, s.record, s.linked_by)
    return None


def token_epochs(state: State, principal: str, at: datetime) -> list[Rec]:
    """The recoveries (`rotate`, `resume`) of `principal` that count and are in force at `at`:
    each names a token epoch, `<principal>#<class>@<its id>`."""
    return [e for e in counting(state, principal) if e.body["event"] in RECOVERY_EVENTS and e.effective_at <= at]


def standings(index: Indexed, at: datetime) -> dict[str, Standing]:
    """Every status id that is not plainly good at `at`, with its standing."""
    ids: set[str] = set()
    principals: set[str] = set()  # whose token classes may be revoked or suspended
    for rec in index.all_records():
        if rec.type == "conformance":
            ids.add(rec.id)
        elif rec.type == "kill_switch":
            principals.add(rec.subject)
        elif rec.type == "revocation":
            ids.update(rec.status_keys())
            # whose primary key may this be (a suspended or dead principal)?
            if rec.body["kind"] in ("did", "key") and rec.body["reason"] != "superseded":
                principals.add(rec.subject)
                principals.update(e.subject for e in index.key_events_naming(rec.subject)
                                  if e.body["event"] == "rotate")
        elif rec.body["event"] == "rotate":
            ids.update(k for k in (rec.subject, rec.key) if k and k.startswith("did:"))
        elif rec.body["event"] == "suspend":
            principals.add(rec.subject)
    ids.update(principals)
    out = {}
    subjects: dict[str, Standing | None] = {}
    for key in ids:
        s = standing(index, key, at, subjects)
        if s is not None:
            out[key] = s
    for p in principals:
        for epoch in (None, *token_epochs(index, p, at)):
            s = _tokens(index, p, at, epoch)
            if s is not None:
                out.update((k, replace(s, key=k)) for k in (epoch_id(p, c, epoch) for c in KILL_SWITCH_CLASSES))
    return out


def next_change(index: Indexed, at: datetime) -> datetime | None:
    """The first time after `at` at which a standing may change: a scheduled revocation,
    kill switch or key event taking effect, or a receipt issued (its level judged from then)
    or expiring."""
    times = [t for rec in index.all_records()
             for t in ((rec.expires_at, rec.effective_at) if rec.type == "conformance" else (rec.effective_at,))
             if t is not None and t > at]
    return min(times) if times else None
