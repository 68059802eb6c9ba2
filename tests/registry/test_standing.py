"""What the registry's records mean for status answers and for its own rules: rotation,
kill switch and recovery, suspension (OAP-CORE-1.0 §5.3, §22.3, §28.5; docs/architecture.md
§6.1). Pure: records are validated and indexed as the writer does, at chosen commit times.

The property test compares the registry core (`registry.standing.standings`, what every
status epoch is built from) with `Reference`, written here from the text of
docs/architecture.md §6.1 and sharing no code with `registry.standing`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.client import make_key_event, make_kill_switch, make_revocation
from registry.index import Index
from registry.records import Record, controllers, validate_submission
from registry.standing import KILL_SWITCH_CLASSES, primary_key, standing, standings, whole_lists
from tlog.errors import Forbidden, InvalidInput, OAPError
from tlog.formats.conformance import claims_of
from tlog.formats.diddoc import KeyLookup, lookup_from
from tlog.formats.ed25519 import generate_seed
from tlog.formats.times import format_utc

from tests.support.conformance import WebSubject, audit_for, web_receipt
from tests.support.registry import conformance_doc, did, now_utc, receipt

MIN = timedelta(minutes=1)


@dataclass
class Registry:
    """An index fed at chosen commit times (never before the real clock, so that the
    records' `issued_at`, stamped now, is never in their commit's future)."""

    start: datetime = field(default_factory=now_utc)
    index: Index = field(default_factory=Index)
    accepted: list[Record] = field(default_factory=list)
    committed: list[datetime] = field(default_factory=list)  # commit time of each accepted record
    clock: datetime | None = None
    lookup: KeyLookup | None = None  # the DID documents of did:web signers

    def __post_init__(self) -> None:
        self.clock = self.start

    def at(self, minutes: float) -> datetime:
        return self.start + minutes * MIN

    def t(self, minutes: float) -> str:
        return format_utc(self.at(minutes))

    def submit(self, doc: dict, minutes: float) -> Record:
        now = self.at(minutes)
        rec, fresh = validate_submission(doc, self.index, now, lookup=self.lookup)
        assert fresh
        self.index.add(rec, len(self.accepted), now)
        self.accepted.append(rec)
        self.committed.append(now)
        return rec

    def status(self, key: str, minutes: float) -> tuple | None:
        s = standing(self.index, key, self.at(minutes))
        if s is None:
            return None
        out = (s.status, round((s.since - self.start) / MIN, 3), s.reason)
        return out + ((round((s.reinstated_at - self.start) / MIN, 3),) if s.reinstated_at else ())


P, C, A, B, X = (generate_seed() for _ in range(5))


def grants(seed: bytes) -> str:
    return f"{did(seed)}#oauth_grants"


# --- rotation -------------------------------------------------------------------------------


def test_a_rotation_retires_the_did_key_subject_and_then_the_previous_rotation_key():
    r = Registry()
    r.submit(make_key_event(P, subject=did(P), key=did(A), event="rotate", effective_at=r.t(10)), 0)
    assert r.status(did(P), 9) is None
    assert r.status(did(P), 10) == ("revoked", 10, "superseded")
    r.submit(make_key_event(A, subject=did(P), key=did(B), event="rotate", effective_at=r.t(30)), 20)
    assert r.status(did(A), 29) is None and r.status(did(A), 30) == ("revoked", 30, "superseded")
    s = standing(r.index, did(A), r.at(31))
    assert s.record.key == did(B) and s.linked_by.key == did(A)  # the rotation away and the one that made A the key
    assert r.status(did(B), 31) is None and controllers(r.index, did(P), r.at(31)) == {did(B)}
    assert r.status(grants(P), 31) is None  # the principal lives on through its new key


def test_a_retired_key_speaks_for_no_one_but_may_revoke_itself_and_its_credentials():
    r = Registry()
    r.submit(make_key_event(X, subject=did(X), key=did(A)), 0)  # A controls X too
    r.submit(make_key_event(P, subject=did(P), key=did(A), event="rotate"), 1)
    r.submit(make_key_event(A, subject=did(P), key=did(B), event="rotate"), 2)  # A retired everywhere
    assert controllers(r.index, did(X), r.at(3)) == {did(X)}
    for doc in (make_kill_switch(A, principal=did(X)), make_key_event(B, subject=did(P), key=did(A))):
        with pytest.raises(Forbidden, match="retired by a rotation"):
            validate_submission(doc, r.index, r.at(3))
    r.submit(make_revocation(A, kind="vc", subject="urn:uuid:1", status_list_index=1), 3)
    r.submit(make_revocation(A, kind="key", subject=did(A), reason="key_compromise", effective_at=r.t(-60)), 4)
    assert r.status(did(A), 5) == ("revoked", -60, "key_compromise")  # the earliest revocation decides


def test_revoke_key_a_rotate_to_b_revoke_b():
    r = Registry()
    r.submit(make_key_event(A, subject=did(A), key=did(C)), 0)  # C added before the suspected compromise
    r.submit(make_revocation(A, kind="key", subject=did(A), reason="key_compromise", effective_at=r.t(0.5)), 1)
    r.submit(make_key_event(C, subject=did(A), key=did(B), event="rotate", effective_at=r.t(10)), 10)
    assert r.status(did(A), 11) == ("revoked", 0.5, "key_compromise")
    assert r.status(did(B), 11) is None
    r.submit(make_revocation(B, kind="key", subject=did(B), reason="key_compromise", effective_at=r.t(20)), 20)
    assert r.status(did(B), 20) == ("revoked", 20, "key_compromise")
    assert r.status(did(A), 21) == ("revoked", 0.5, "key_compromise") and r.status(grants(A), 21) is None


# --- kill switch and recovery ---------------------------------------------------------------------


def test_kill_recover_kill():
    r = Registry()
    r.submit(make_key_event(P, subject=did(P), key=did(C)), 0)
    r.submit(make_kill_switch(P, effective_at=r.t(10)), 1)
    assert r.status(grants(P), 5) is None and r.status(grants(P), 15) == ("revoked", 10, "kill_switch")
    r.submit(make_key_event(C, subject=did(P), event="resume", effective_at=r.t(20)), 16)
    assert r.status(grants(P), 19) == ("revoked", 10, "kill_switch")
    assert r.status(grants(P), 25) == ("revoked", 10, "kill_switch", 20)  # tokens from 20 on are not revoked
    r.submit(make_kill_switch(C, principal=did(P), effective_at=r.t(60)), 30)
    assert r.status(grants(P), 59) == ("revoked", 10, "kill_switch", 20)
    assert r.status(grants(P), 61) == ("revoked", 60, "kill_switch")  # the second kill switch shows
    r.submit(make_key_event(C, subject=did(P), key=did(B), event="rotate", effective_at=r.t(70)), 65)
    assert r.status(grants(P), 71) == ("revoked", 60, "kill_switch", 70)
    assert r.status(did(P), 71) == ("revoked", 70, "superseded")


def test_token_epochs_every_token_active_at_a_kill_stays_revoked_and_those_since_a_recovery_are_good():
    """§22.3 "immediately revokes all active ... tokens": a recovery never revives one. The
    tokens a principal issues after a recovery carry the status id of the epoch it opened,
    `<P>#<class>@<recovery id>`, which a relying party acting only on `good` can use."""
    r = Registry()
    r.submit(make_key_event(P, subject=did(P), key=did(C)), 0)
    assert r.status(grants(P), 1) is None  # a known principal, no kill switch: good
    r.submit(make_kill_switch(P, effective_at=r.t(10)), 1)
    r1 = r.submit(make_key_event(C, subject=did(P), event="resume", effective_at=r.t(20)), 16)
    epoch1 = f"{grants(P)}@{r1.id}"
    assert r.status(epoch1, 19) is None and standing(r.index, epoch1, r.at(19)) is None  # not open yet: unknown
    assert r.status(grants(P), 25) == ("revoked", 10, "kill_switch", 20)  # before the recovery: revoked for good
    assert r.status(epoch1, 25) is None  # since the recovery: good
    r.submit(make_key_event(C, subject=did(P), event="suspend", effective_at=r.t(30)), 30)
    assert r.status(grants(P), 31) == ("revoked", 10, "kill_switch", 20)  # revoked outranks the suspension
    assert r.status(epoch1, 31) == ("suspended", 30, "unspecified")
    r2 = r.submit(make_key_event(C, subject=did(P), event="resume", effective_at=r.t(40)), 40)
    assert r.status(epoch1, 41) is None
    r.submit(make_kill_switch(C, principal=did(P), effective_at=r.t(60)), 50)
    for epoch in (grants(P), epoch1, f"{grants(P)}@{r2.id}"):
        assert r.status(epoch, 61) == ("revoked", 60, "kill_switch"), epoch  # every epoch so far
    r3 = r.submit(make_key_event(C, subject=did(P), key=did(B), event="rotate", effective_at=r.t(70)), 65)
    assert r.status(epoch1, 71) == ("revoked", 60, "kill_switch", 70)  # revoked for good; the next epoch is r3's
    assert r.status(grants(P), 71) == ("revoked", 60, "kill_switch", 70)  # reinstated names the current epoch
    assert r.status(f"{grants(P)}@{r3.id}", 71) is None
    got = standings(r.index, r.at(71))
    assert {k for k in got if k.startswith(grants(P))} == {grants(P), epoch1, f"{grants(P)}@{r2.id}"}
    assert got[epoch1].reinstated_by is r3


def test_a_kill_switch_backdated_before_a_recovery_it_was_committed_after_revokes_that_epoch_too():
    r = Registry()
    r.submit(make_key_event(P, subject=did(P), key=did(C)), 0)
    r1 = r.submit(make_key_event(C, subject=did(P), event="resume", effective_at=r.t(10)), 5)
    r.submit(make_kill_switch(P, effective_at=r.t(-20)), 12)  # committed after r1: r1 recovers nothing from it
    assert r.status(f"{grants(P)}@{r1.id}", 13) == ("revoked", -20, "kill_switch")
    # an id that names no recovery of P is no epoch the registry knows
    other = r.submit(make_key_event(C, subject=did(C), key=did(A)), 14)
    assert standing(r.index, f"{grants(P)}@{other.id}", r.at(15)) is None


def test_a_recovery_must_follow_the_kill_switch_in_commit_order_and_cannot_be_backdated():
    r = Registry()
    r.submit(make_key_event(P, subject=did(P), key=did(C)), 0)
    r.submit(make_key_event(C, subject=did(P), event="resume", effective_at=r.t(10)), 5)
    r.submit(make_kill_switch(P, effective_at=r.t(-20)), 12)  # backdated before the resume
    assert r.status(grants(P), 13) == ("revoked", -20, "kill_switch")
    with pytest.raises(InvalidInput, match="in the past"):
        validate_submission(make_key_event(C, subject=did(P), event="resume", effective_at=r.t(0)), r.index,
                            r.at(14))
    r.submit(make_key_event(C, subject=did(P), event="resume", effective_at=r.t(10)), 14)  # within the skew
    assert r.status(grants(P), 15) == ("revoked", -20, "kill_switch", 10)


def test_add_controller_is_no_recovery():
    r = Registry()
    r.submit(make_kill_switch(P, effective_at=r.t(0)), 0)
    r.submit(make_key_event(P, subject=did(P), key=did(C)), 1)
    assert r.status(grants(P), 2) == ("revoked", 0, "kill_switch")


# --- suspension -------------------------------------------------------------------------------------


def test_suspend_until_a_recovery():
    r = Registry()
    r.submit(make_key_event(P, subject=did(P), key=did(C)), 0)
    r.submit(make_key_event(C, subject=did(P), event="suspend", reason="loss_of_key", effective_at=r.t(5)), 1)
    assert r.status(did(P), 4) is None
    assert r.status(did(P), 6) == r.status(grants(P), 6) == ("suspended", 5, "loss_of_key")
    for doc in (make_key_event(C, subject=did(P), key=did(A)), conformance_doc(receipt(P))):
        with pytest.raises(Forbidden, match="suspended"):
            validate_submission(doc, r.index, r.at(7))
    r.submit(make_key_event(C, subject=did(P), event="resume", effective_at=r.t(10)), 8)
    assert r.status(did(P), 9) == ("suspended", 5, "loss_of_key")
    assert r.status(did(P), 10) is None and r.status(grants(P), 10) is None


def test_a_kill_switch_not_recovered_from_outranks_a_suspension_and_one_recovered_from_does_not():
    r = Registry()
    r.submit(make_key_event(P, subject=did(P), key=did(C)), 0)
    r.submit(make_kill_switch(P, effective_at=r.t(1)), 1)
    r.submit(make_key_event(C, subject=did(P), event="suspend", effective_at=r.t(2)), 2)
    assert r.status(grants(P), 3) == ("revoked", 1, "kill_switch")
    assert r.status(did(P), 3) == ("suspended", 2, "unspecified")
    r.submit(make_key_event(C, subject=did(P), event="resume", effective_at=r.t(5)), 4)  # recovers from both
    assert r.status(grants(P), 6) == ("revoked", 1, "kill_switch", 5) and r.status(did(P), 6) is None


def test_automatic_suspension_of_a_principal_whose_lost_key_leaves_no_recovery_path():
    r = Registry()
    r.submit(make_key_event(P, subject=did(P), key=did(A), event="rotate"), 0)  # P's key is now A
    r.submit(make_key_event(A, subject=did(P), key=did(C)), 1)  # C: a recovery path
    r.submit(make_revocation(A, kind="key", subject=did(A), reason="loss_of_key", effective_at=r.t(5)), 2)
    assert r.status(grants(P), 6) is None  # C can still recover P
    r.submit(make_revocation(C, kind="key", subject=did(C), reason="key_compromise", effective_at=r.t(20)), 10)
    assert r.status(grants(P), 19) is None
    assert r.status(grants(P), 21) == ("suspended", 20, "loss_of_key")  # from when the last path went
    s = standing(r.index, grants(P), r.at(21))
    assert s.record.subject == did(A) and s.linked_by.key == did(A)
    assert r.status(did(P), 21) == ("revoked", 0, "superseded")  # P's own did:key was retired first
    q = Registry()
    q.submit(make_revocation(X, kind="key", subject=did(X), reason="loss_of_key"), 0)
    assert q.status(did(X), 1) == ("revoked", 0, "loss_of_key") and q.status(grants(X), 1) == ("suspended", 0,
                                                                                                "loss_of_key")


# --- records signed after their signer's revocation ----------------------------------------------


def test_a_rotation_by_a_controller_compromised_before_it_was_committed_is_void():
    p, c, t, b = (generate_seed() for _ in range(4))
    r = Registry()
    r.submit(make_key_event(p, subject=did(p), key=did(c)), 0)
    r.submit(make_key_event(c, subject=did(p), key=did(t), event="rotate", effective_at=r.t(10)), 10)  # the thief
    assert controllers(r.index, did(p), r.at(11)) == {did(c), did(t)} and r.status(did(p), 11) == ("revoked", 10,
                                                                                                    "superseded")
    r.submit(make_revocation(c, kind="key", subject=did(c), reason="key_compromise", effective_at=r.t(5)), 20)
    assert controllers(r.index, did(p), r.at(21)) == {did(p)}  # T never was P's key; P's did:key is not retired
    assert primary_key(r.index, did(p), r.at(21))[0] == did(p) and r.status(did(p), 21) is None
    with pytest.raises(Forbidden, match="neither"):
        validate_submission(make_kill_switch(t, principal=did(p)), r.index, r.at(22))
    r.submit(make_key_event(p, subject=did(p), key=did(b), event="rotate", effective_at=r.t(23)), 23)  # recovered
    assert controllers(r.index, did(p), r.at(24)) == {did(b)}


def test_a_rotation_committed_before_its_signers_compromise_time_counts():
    p, c, b = (generate_seed() for _ in range(3))
    r = Registry()
    r.submit(make_key_event(p, subject=did(p), key=did(c)), 0)
    r.submit(make_key_event(c, subject=did(p), key=did(b), event="rotate", effective_at=r.t(10)), 10)
    r.submit(make_revocation(c, kind="key", subject=did(c), reason="key_compromise", effective_at=r.t(15)), 20)
    assert controllers(r.index, did(p), r.at(21)) == {did(b)} and r.status(did(p), 21) == ("revoked", 10,
                                                                                            "superseded")


def test_a_resume_signed_with_a_key_compromised_before_it_reinstates_nothing():
    p, c = generate_seed(), generate_seed()
    r = Registry()
    r.submit(make_key_event(p, subject=did(p), key=did(c)), 0)
    r.submit(make_kill_switch(p, effective_at=r.t(2)), 2)
    r.submit(make_key_event(p, subject=did(p), event="resume", effective_at=r.t(4)), 4)
    assert r.status(grants(p), 5) == ("revoked", 2, "kill_switch", 4)
    r.submit(make_revocation(c, kind="key", subject=did(p), reason="key_compromise", effective_at=r.t(1)), 6)
    assert r.status(grants(p), 7) == ("revoked", 2, "kill_switch")  # every token stays revoked
    r.submit(make_key_event(c, subject=did(p), event="resume", effective_at=r.t(8)), 8)  # the controller recovers P
    assert r.status(grants(p), 9) == ("revoked", 2, "kill_switch", 8)


def test_a_controller_scheduled_with_a_key_lost_before_it_never_takes_effect():
    p, t, x = (generate_seed() for _ in range(3))
    r = Registry()
    r.submit(make_key_event(p, subject=did(p), key=did(t), effective_at=r.t(200)), 1)
    r.submit(make_revocation(p, kind="key", subject=did(p), reason="loss_of_key", effective_at=r.t(0)), 2)
    assert r.status(grants(p), 3) == r.status(grants(p), 201) == ("suspended", 0, "loss_of_key")
    assert controllers(r.index, did(p), r.at(201)) == set()
    with pytest.raises(Forbidden, match="neither"):
        validate_submission(make_key_event(t, subject=did(p), key=did(x), event="rotate", effective_at=r.t(202)),
                            r.index, r.at(202))
    assert primary_key(r.index, did(p), r.at(203))[0] == did(p) and r.status(grants(p), 203)[0] == "suspended"


def test_restrictions_signed_by_a_compromised_key_keep_their_effect():
    p, c = generate_seed(), generate_seed()
    r = Registry()
    r.submit(make_key_event(p, subject=did(p), key=did(c)), 0)
    r.submit(make_key_event(c, subject=did(p), event="suspend", effective_at=r.t(3)), 3)
    r.submit(make_kill_switch(c, principal=did(p), effective_at=r.t(4)), 4)
    r.submit(make_revocation(c, kind="key", subject=did(c), reason="key_compromise", effective_at=r.t(1)), 5)
    assert r.status(did(p), 6) == ("suspended", 3, "unspecified")
    assert r.status(grants(p), 6) == ("revoked", 4, "kill_switch")


def test_commit_times_come_from_the_commits_when_the_index_holds_them():
    """A registry restarting or a mirror replaying rebuilds its index from the commits: a record's
    commit time is its commit's, so both compute the same answers."""
    from registry.index import CommitInfo
    p, c = generate_seed(), generate_seed()
    r = Registry()
    rec = r.submit(make_key_event(p, subject=did(p), key=did(c)), 3)
    idx = Index()
    idx.add(rec, 0)
    assert idx.committed_at(rec.path) is None  # unknown: proven before nothing
    idx.add_commit(CommitInfo(0, "0" * 40, "0" * 40, int(r.at(3).timestamp())))
    assert idx.committed_at(rec.path) == r.at(3).replace(microsecond=0)


# --- conformance receipts fall with their subject ------------------------------------------------


def test_a_receipt_is_suspended_with_its_subject_and_revoked_with_it():
    p, c = generate_seed(), generate_seed()
    r = Registry()
    rc = r.submit(conformance_doc(receipt(p, "L1")), 0)
    r.submit(make_key_event(p, subject=did(p), key=did(c)), 1)
    r.submit(make_key_event(c, subject=did(p), event="suspend", effective_at=r.t(2)), 2)
    assert r.status(rc.id, 3) == ("suspended", 2, "unspecified")
    s = standing(r.index, rc.id, r.at(3))
    assert s.record.body["event"] == "suspend" and s.via is rc
    r.submit(make_revocation(c, kind="did", subject=did(p), reason="key_compromise", effective_at=r.t(-10)), 4)
    assert r.status(did(p), 5) == r.status(rc.id, 5) == ("revoked", -10, "key_compromise")
    assert standings(r.index, r.at(5))[rc.id].record.subject == did(p)


def test_a_receipt_of_a_rotated_away_did_key_answers_revoked_superseded():
    p, a = generate_seed(), generate_seed()
    r = Registry()
    rc = r.submit(conformance_doc(receipt(p, "L1")), 0)
    r.submit(make_key_event(p, subject=did(p), key=did(a), event="rotate", effective_at=r.t(5)), 1)
    assert r.status(rc.id, 4) is None and r.status(rc.id, 6) == ("revoked", 5, "superseded")
    assert r.status(rc.id, 10_000) == ("revoked", 5, "superseded")  # before its expiry: the earliest decides


# --- status lists follow every standing of the issuer, not only the earliest -------------------------


def test_an_issuers_lists_are_filled_by_a_compromise_after_a_rotation_and_by_a_suspension_after_one():
    p, a, b, c = (generate_seed() for _ in range(4))
    r = Registry()
    r.submit(make_key_event(p, subject=did(p), key=did(a), event="rotate", effective_at=r.t(0)), 0)
    r.submit(make_key_event(a, subject=did(p), key=did(b), event="rotate", effective_at=r.t(10)), 10)
    assert whole_lists(r.index, did(a), r.at(11)) == frozenset()  # superseded keeps what it issued
    r.submit(make_revocation(a, kind="key", subject=did(a), reason="key_compromise", effective_at=r.t(50)), 60)
    assert r.status(did(a), 61) == ("revoked", 10, "superseded")  # the earliest standing...
    assert whole_lists(r.index, did(a), r.at(61)) == {"revocation"}  # ...does not hide the compromise
    q = Registry()
    q.submit(make_key_event(c, subject=did(c), key=did(p)), 0)  # p controls c
    q.submit(make_key_event(p, subject=did(c), key=did(a), event="rotate", effective_at=q.t(1)), 1)
    q.submit(make_key_event(p, subject=did(c), event="suspend", effective_at=q.t(2)), 2)
    assert q.status(did(c), 3) == ("revoked", 1, "superseded") and q.status(grants(c), 3)[0] == "suspended"
    assert whole_lists(q.index, did(c), q.at(3)) == {"suspension"}
    q.submit(make_revocation(p, kind="did", subject=did(c), reason="key_compromise", effective_at=q.t(3)), 3)
    assert whole_lists(q.index, did(c), q.at(4)) == {"revocation", "suspension"}


@pytest.mark.parametrize("doc, message", [
    (lambda: make_key_event(P, subject=did(P), key=did(A), event="suspend"), "takes no key"),
    (lambda: make_key_event(P, subject=did(P), event="rotate"), "needs key"),
    (lambda: make_key_event(P, subject=did(P), key=did(A), event="rotate", reason="loss_of_key"), "only suspend"),
    (lambda: make_key_event(P, subject=did(P), event="suspend", reason="lost"), "only suspend takes a reason, one of"),
])
def test_key_event_schema(doc, message):
    with pytest.raises(InvalidInput, match=message):
        validate_submission(doc(), Index(), now_utc())


# --- property: the registry core against a reference written from docs/architecture.md §6.1 --------


def T(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Reference:
    """docs/architecture.md §6.1, read literally, over the accepted records in commit order."""

    def __init__(self, records: list[Record], committed: list[datetime], bootstrap: frozenset[str]) -> None:
        self.pos = {r.path: i for i, r in enumerate(records)}
        self.commit_time = {r.path: when for r, when in zip(records, committed)}
        self.bootstrap = bootstrap
        self.times = sorted({t for r in records for t in (r.effective_at, r.expires_at) if t is not None})
        # "An add_controller, rotate or resume counts only when, at its commit time, its signer had
        # no revocation in force for a reason other than superseded, and — unless the signer is the
        # subject — an earlier-committed add_controller or rotate of the subject that counts had
        # made it a controller by then. A record that does not count has no effect at all."
        self.recs: list[Record] = []
        for r, when in zip(records, committed):
            if r.type == "key_event" and r.body["event"] in ("add_controller", "rotate", "resume"):
                signer = r.body["issued_by"]
                if any(x.type == "revocation" and x.body["kind"] in ("did", "key") and x.body["subject"] == signer
                       and x.body["reason"] != "superseded" and T(x.body["effective_at"]) <= when for x in records):
                    continue
                if signer != r.body["subject"] and not any(
                        x.type == "key_event" and x.body["subject"] == r.body["subject"]
                        and x.body["event"] in ("add_controller", "rotate") and x.body["key"] == signer
                        and T(x.body["effective_at"]) <= when for x in self.recs):
                    continue
            self.recs.append(r)
        self.all = records  # every accepted record, counting or not (independence reads them all)

    # records in force at t
    def events(self, subject: str, t: datetime, *kinds: str) -> list[Record]:
        return [r for r in self.recs if r.type == "key_event" and r.body["subject"] == subject
                and r.body["event"] in kinds and T(r.body["effective_at"]) <= t]

    def revocations(self, subject: str, t: datetime, kinds=("did", "key")) -> list[Record]:
        return [r for r in self.recs if r.type == "revocation" and r.body["kind"] in kinds
                and r.body["subject"] == subject and T(r.body["effective_at"]) <= t]

    # "From a rotate event's effective time the subject's previous key (the subject itself when
    # it is a did:key, else the key of its previous rotation) is retired everywhere"
    def retired(self, key: str, t: datetime) -> tuple[datetime, Record, Record | None] | None:
        found = []
        for subject in {r.body["subject"] for r in self.recs if r.type == "key_event"}:
            rotations = sorted(self.events(subject, t, "rotate"), key=lambda r: T(r.body["effective_at"]))
            current, made = (subject if subject.startswith("did:key:") else None), None
            for rot in rotations:
                if rot.body["key"] == current:
                    continue
                if current == key:
                    found.append((T(rot.body["effective_at"]), rot, made))
                current, made = rot.body["key"], rot
        return min(found, key=lambda f: f[0]) if found else None

    def ended(self, key: str, t: datetime) -> bool:
        return bool(self.revocations(key, t)) or self.retired(key, t) is not None

    # controllers: the principal, keys added, the latest rotation key; a rotation drops the key
    # it replaces (the principal stays when it is not a did:key); revoked or retired keys drop out
    def controllers(self, p: str, t: datetime) -> set[str]:
        held, primary = {p}, p
        for e in sorted(self.events(p, t, "add_controller", "rotate"), key=lambda r: T(r.body["effective_at"])):
            if e.body["event"] == "rotate":
                if primary != p or p.startswith("did:key:"):
                    held.discard(primary)
                primary = e.body["key"]
            held.add(e.body["key"])
        return {k for k in held if not self.ended(k, t)}

    def primary(self, p: str, t: datetime) -> str:
        rotations = sorted(self.events(p, t, "rotate"), key=lambda r: T(r.body["effective_at"]))
        return rotations[-1].body["key"] if rotations else p

    # "Recovery ... a rotate or a resume, committed after the kill switch or suspend it recovers
    # from, and effective after it"
    def recovery(self, p: str, after: Record, t: datetime) -> Record | None:
        found = [e for e in self.events(p, t, "rotate", "resume") if self.pos[e.path] > self.pos[after.path]
                 and T(e.body["effective_at"]) > T(after.body["effective_at"])]
        return min(found, key=lambda e: T(e.body["effective_at"])) if found else None

    def lost_without_path(self, p: str, t: datetime) -> Record | None:
        losses = [r for r in self.revocations(self.primary(p, t), t) if r.body["reason"] == "loss_of_key"]
        if not losses or self.controllers(p, t):
            return None
        return min(losses, key=lambda r: T(r.body["effective_at"]))

    # "A principal whose primary key has a revocation in force for a reason other than superseded
    # or loss_of_key, with no controller left, is dead: its tokens answer revoked from that
    # revocation's time, for good."
    def dead(self, p: str, t: datetime) -> Record | None:
        causes = [r for r in self.revocations(self.primary(p, t), t)
                  if r.body["reason"] not in ("superseded", "loss_of_key")]
        if not causes or self.controllers(p, t):
            return None
        return min(causes, key=lambda r: T(r.body["effective_at"]))

    def suspended(self, p: str, t: datetime) -> tuple[datetime, str, Record] | None:
        found = [(T(s.body["effective_at"]), s.body.get("reason", "unspecified"), s)
                 for s in self.events(p, t, "suspend") if self.recovery(p, s, t) is None]
        lost = self.lost_without_path(p, t)
        if lost is not None:  # automatic: since the condition last became true
            since = t
            for u in reversed([u for u in self.times if u <= t]):
                again = self.lost_without_path(p, u)
                if again is None:
                    break
                since, lost = u, again
            found.append((since, "loss_of_key", lost))
        return min(found, key=lambda f: f[0]) if found else None

    # "Token classes ... P#<class> are the tokens P issued before its first recovery; a recovery R
    # opens the epoch P#<class>@<R's id>: the tokens issued since R. A kill switch revokes every
    # epoch it is not recovered from by that epoch's own recovery, for good (also once recovered
    # from: a recovery never revives a token active at the kill); such a revocation outranks a
    # suspension, which covers every epoch until P recovers." A recovery that does not count
    # opens no epoch; a dead principal's tokens are revoked in every epoch.
    def tokens(self, principal: str, rid: str | None, t: datetime) -> tuple | None:
        opened = None
        if rid is not None:
            opened = next((e for e in self.recs if e.type == "key_event" and e.id == rid
                           and e.body["subject"] == principal and e.body["event"] in ("rotate", "resume")), None)
            if opened is None or T(opened.body["effective_at"]) > t:
                return None  # no such epoch (yet)
        kills = [r for r in self.recs if r.type == "kill_switch" and r.body["principal"] == principal
                 and T(r.body["effective_at"]) <= t]
        if opened is not None and opened in self.recs:  # a recovery that does not count recovers nothing
            kills = [k for k in kills if not (self.pos[opened.path] > self.pos[k.path]
                                              and T(opened.body["effective_at"]) > T(k.body["effective_at"]))]
        open_ = [k for k in kills if self.recovery(principal, k, t) is None]
        ended = [("revoked", T(d.body["effective_at"]), d.body["reason"], d.path)
                 for d in (self.dead(principal, t),) if d is not None]
        if open_:
            k = min(open_, key=lambda k: T(k.body["effective_at"]))
            ended.append(("revoked", T(k.body["effective_at"]), "kill_switch", k.path))
        if ended:
            return min(ended, key=lambda e: e[1])
        if kills:
            best = max(kills, key=lambda k: (T(self.recovery(principal, k, t).body["effective_at"]),
                                             T(k.body["effective_at"])))
            rec = self.recovery(principal, best, t)
            return ("revoked", T(best.body["effective_at"]), "kill_switch", best.path,
                    T(rec.body["effective_at"]), rec.path)
        s = self.suspended(principal, t)
        return ("suspended", s[0], s[1], s[2].path) if s is not None else None

    # "A witness or auditor signature counts only if, at the receipt's commit time (the latest
    # time it can have been signed), its signer was not revoked, not retired by a rotation and
    # not suspended; an L5 witness must moreover hold then a valid L4/L5 receipt committed
    # before this one (issued by then, unexpired, not revoked then, its own level holding) or
    # be a bootstrap witness. The auditor of a receipt with an audit must count; L4 needs one
    # witness that counts, L5 three, independent parties; when every witness counts, the
    # independence judged at acceptance stands."
    def named(self, did: str) -> set[str]:
        """Rule 2: whom the key events of `did` name (their key and their signer)."""
        out = set()
        for e in self.all:
            if e.type == "key_event" and e.body["subject"] == did:
                out.update(x for x in (e.body.get("key"), e.body["issued_by"]) if x)
        return out - {did}

    def parties(self, dids: list[str]) -> int:
        groups: list[set[str]] = []
        for d in dids:
            joined = [g for g in groups if any(d in self.named(x) or x in self.named(d)
                                               or self.named(d) & self.named(x) or d == x for x in g)]
            merged = {d}.union(*joined)
            groups = [g for g in groups if g not in joined] + [merged]
        return len(groups)

    def holds(self, did: str, t: datetime, before: int) -> bool:
        return any(r.type == "conformance" and r.subject == did and r.level in ("L4", "L5")
                   and self.pos[r.path] < before and r.effective_at <= t + timedelta(minutes=5) and t < r.expires_at
                   and not self.revocations(r.id, t, ("conformance",)) and self.level_fails(r, t) is None
                   for r in self.recs)

    def level_fails(self, rc: Record, t: datetime) -> tuple | None:
        signed = min(self.commit_time[rc.path], t)  # the latest time its signers can have signed, by t
        # "A signature counts only if both the signer's DID and the key it was made with were valid"
        # — the subject's own signature too, by a key other than its DID
        own = rc.signing_key(rc.subject)
        if own is not None and own != rc.subject and self.answer(own, signed) is not None:
            return ("subject_invalid", rc.subject, self.answer(own, signed))
        audit = claims_of(rc.body).get("audit")
        if audit is not None and self.answer(audit["auditor"], signed) is not None:
            return ("auditor_invalid", audit["auditor"], self.answer(audit["auditor"], signed))
        need = {"L4": 1, "L5": 3}.get(rc.level or "", 0)
        if not need:
            return None
        bad = [(w, self.answer(w, signed)) for w in rc.witnesses if self.answer(w, signed) is not None]
        counted = [w for w in rc.witnesses if self.answer(w, signed) is None]
        if rc.level == "L5":
            unqualified = [w for w in counted if w not in self.bootstrap and not self.holds(w, signed, self.pos[rc.path])]
            counted = [w for w in counted if w not in unqualified]
        else:
            unqualified = []
        if len(counted) == len(rc.witnesses) or (self.parties(counted) if need > 1 else len(counted)) >= need:
            return None
        return ("witness_invalid", *bad[0]) if bad else ("witness_unqualified", unqualified[0], None)

    def answer(self, key: str, t: datetime) -> tuple | None:
        principal, sep, rest = key.partition("#")
        cls, at, rid = rest.partition("@")
        if sep and cls in KILL_SWITCH_CLASSES:
            return self.tokens(principal, rid if at else None, t)
        found = [(T(r.body["effective_at"]), r.body["reason"], r.path)
                 for r in self.revocations(key, t, ("did", "key", "conformance"))]
        if key.startswith("urn:oap:conformance:"):
            rc = next(r for r in self.recs if r.type == "conformance" and r.id == key)
            if rc.expires_at <= t:
                found.append((rc.expires_at, "expired", rc.path))
            # "A receipt whose level does not hold answers revoked from its issued_at, for
            # witness_invalid / auditor_invalid (the signer's deciding record) or
            # witness_unqualified (the receipt itself)." Judged from its commit time, also before
            # an issued_at a little ahead of it.
            fails = self.level_fails(rc, t)
            if fails is not None:
                reason, signer, of_signer = fails
                found.append((rc.effective_at, reason, of_signer[3] if of_signer else rc.path, signer))
            # "A conformance receipt is revoked from its subject's revoked_at, with the subject's
            # reason and deciding record, and suspended while its subject is suspended."
            of_subject = self.answer(rc.subject, t)
            if of_subject is not None and of_subject[0] == "revoked":
                found.append(of_subject[1:4])
            elif of_subject is not None and not found:
                return of_subject
        elif key.startswith("did:"):
            ret = self.retired(key, t)
            if ret is not None:
                found.append((ret[0], "superseded", ret[1].path))
        if found:
            return ("revoked", *min(found, key=lambda f: f[0]))
        s = self.suspended(key, t) if key.startswith("did:") else None
        return ("suspended", s[0], s[1], s[2].path) if s else None


SEEDS = [generate_seed() for _ in range(3)]
WEB = [WebSubject(f"did:web:{host}.example", generate_seed()) for host in ("alpha", "beta")]
"""did:web implementations whose L4/L5 receipts the seeds witness and audit (L3 and up need a publisher)."""
BOOTSTRAP = frozenset(did(s) for s in SEEDS)
LOOKUP = lookup_from([(w.did, w.document) for w in WEB])
DELTAS = [-25, -5, 0, 3, 12, 40]  # minutes from the commit time
REASONS = ["key_compromise", "loss_of_key", "superseded", "unspecified"]
ops = st.lists(st.tuples(st.sampled_from(["conformance", "revoke", "revoke_receipt", "kill", "rotate",
                                          "add_controller", "suspend", "resume",
                                          *["l4", "l5", "compromise"] * 2]),  # more signer standing to judge
                         st.booleans(), st.integers(0, 2), st.integers(0, 2), st.sampled_from(DELTAS),
                         st.sampled_from(REASONS)), min_size=1, max_size=14)
"""(what, signed by the subject itself or by `other`, subject, other, effective minus commit time, reason)"""


def _doc(r: Registry, op: tuple, minutes: int, receipts: list[str]) -> dict | None:
    kind, by_self, subject, other, delta, reason = op
    s, subj, eff = SEEDS[subject if by_self else other], did(SEEDS[subject]), r.t(minutes + delta)
    if kind == "conformance":
        return conformance_doc(receipt(SEEDS[subject], issued=r.at(minutes), valid=(20 + 7 * other) * MIN))
    if kind in ("l4", "l5"):  # a did:web implementation, witnessed (and audited) by the seeds
        impl = WEB[subject % 2]
        if kind == "l4":
            witnesses: tuple = (SEEDS[other], *((SEEDS[(other + 1) % 3],) if by_self else ()))
        else:  # the three seeds (bootstrap witnesses), or two of them and the other implementation
            witnesses = tuple(SEEDS) if by_self else (*(w for i, w in enumerate(SEEDS) if i != other),
                                                      WEB[(subject + 1) % 2])
        audit = audit_for(impl.did, SEEDS[(other + 2) % 3]) if kind == "l5" or reason == "loss_of_key" else None
        return conformance_doc(web_receipt(impl, kind.upper(), witnesses=witnesses, audit=audit, issued=r.at(minutes),
                                           valid=(20 + 7 * other) * MIN))
    if kind == "revoke":
        return make_revocation(s, kind="key" if other % 2 else "did", subject=subj, reason=reason, effective_at=eff)
    if kind == "compromise":  # found later, dated back (often before receipts it witnessed were committed)
        return make_revocation(SEEDS[subject], kind="key", subject=subj, reason=reason,
                               effective_at=r.t(minutes + delta - 20))
    if kind == "revoke_receipt":
        return make_revocation(s, kind="conformance", subject=receipts[other % len(receipts)],
                               effective_at=eff) if receipts else None
    if kind == "kill":
        return make_kill_switch(s, principal=subj, effective_at=eff)
    if kind in ("rotate", "add_controller"):
        key = SEEDS[(other + 1) % len(SEEDS)] if by_self else SEEDS[other]
        return make_key_event(s, subject=subj, key=did(key), event=kind, effective_at=eff)
    return make_key_event(s, subject=subj, event=kind, effective_at=eff,
                          reason=reason if kind == "suspend" and other % 2 else None)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_status_equals_the_reference_reading_of_the_spec(sequence):
    r = Registry(index=Index(BOOTSTRAP), lookup=LOOKUP)
    receipts: list[str] = []
    for i, op in enumerate(sequence):
        doc = _doc(r, op, 10 * i, receipts)
        if doc is None:
            continue
        try:
            rec = r.submit(doc, 10 * i)
        except OAPError:
            continue  # refused by the registry's rules: not part of the history
        if rec.type == "conformance":
            receipts.append(rec.id)
    ref = Reference(r.accepted, r.committed, BOOTSTRAP)
    epochs = [f"{grants(seed)}@{e.id}" for seed in SEEDS for e in r.accepted
              if e.type == "key_event" and e.subject == did(seed) and e.body["event"] in ("rotate", "resume")]
    ids = [k for seed in SEEDS for k in (did(seed), grants(seed))] + epochs + receipts
    for minutes in range(-30, 10 * len(sequence) + 60, 4):
        at = r.at(minutes)
        epoch = standings(r.index, at)  # what a status epoch is built from
        for key in ids:
            got = epoch.get(key)
            mine = None if got is None else (got.status, got.since, got.reason, got.record.path) + (
                (got.reinstated_at, got.reinstated_by.path) if got.reinstated_by else ()) + (
                (got.signer,) if got.signer else ())
            assert mine == ref.answer(key, at), (key, minutes, [x.body for x in r.accepted])


def test_the_reference_and_the_registry_agree_on_a_compromise_dated_back_under_two_receipts():
    """A history the property test's generator can make, run through the same steps: an L4
    receipt of one implementation witnessed by S0, an L5 receipt of another that the first
    witnesses (qualified by that L4), then S0's key revoked for compromise from before both
    were committed: the L4 loses its only witness, the L5 that witness and the qualification
    of another, and both answer revoked from their issued_at, as the reference reads §6.1."""
    r = Registry(index=Index(BOOTSTRAP), lookup=LOOKUP)
    l4 = r.submit(_doc(r, ("l4", False, 1, 0, 0, "unspecified"), 0, []), 0)
    l5 = r.submit(_doc(r, ("l5", False, 0, 2, 0, "unspecified"), 10, []), 10)
    assert l5.witnesses == (did(SEEDS[0]), did(SEEDS[1]), WEB[1].did)
    ref = Reference(r.accepted, r.committed, BOOTSTRAP)
    assert ref.level_fails(l4, r.at(15)) is None and ref.level_fails(l5, r.at(15)) is None
    assert r.status(l4.id, 15) is None and r.status(l5.id, 15) is None
    r.submit(_doc(r, ("revoke", True, 0, 1, -25, "key_compromise"), 20, []), 20)  # effective at -5
    got = standings(r.index, r.at(21))
    assert (got[l4.id].reason, got[l4.id].signer, got[l4.id].since) == ("witness_invalid", did(SEEDS[0]), r.at(0))
    assert (got[l5.id].reason, got[l5.id].signer, got[l5.id].since) == ("witness_invalid", did(SEEDS[0]), r.at(10))
    ref = Reference(r.accepted, r.committed, BOOTSTRAP)
    for rc in (l4, l5):
        s = got[rc.id]
        assert ref.answer(rc.id, r.at(21)) == (s.status, s.since, s.reason, s.record.path, s.signer)
    # The same with the L4's witness outside the L5: the L5's own witnesses stay valid, but the
    # implementation witnessing it held no valid L4 when it signed: witness_unqualified.
    q = Registry(index=Index(BOOTSTRAP), lookup=LOOKUP)
    q.submit(_doc(q, ("l4", False, 1, 2, 0, "unspecified"), 0, []), 0)  # witnessed by S2
    l5 = q.submit(_doc(q, ("l5", False, 0, 2, 0, "unspecified"), 10, []), 10)  # S0, S1 and WEB[1]
    q.submit(_doc(q, ("compromise", True, 2, 0, 0, "key_compromise"), 20, []), 20)  # S2 from 0
    s = standings(q.index, q.at(21))[l5.id]
    assert (s.reason, s.signer, s.record is l5) == ("witness_unqualified", WEB[1].did, True)
    ref = Reference(q.accepted, q.committed, BOOTSTRAP)
    assert ref.answer(l5.id, q.at(21)) == (s.status, s.since, s.reason, s.record.path, s.signer)


def test_an_epoch_reads_a_principals_key_events_once_however_long_its_rotation_chain():
    """Which of a principal's key events count is worked out once per epoch (kept in the
    index's memo until the next record): a chain of rotations, each retiring the key before
    it, used to re-derive it for every retired key (cubic in the chain's length)."""
    from collections import Counter

    class CountingIndex(Index):  # the real index, counting what standings() asks of it
        def __init__(self) -> None:
            super().__init__()
            self.calls: Counter[str] = Counter()

        def key_events_of(self, subject: str) -> list[Record]:
            self.calls[subject] += 1
            return super().key_events_of(subject)

    start = now_utc() + timedelta(seconds=5)
    idx = CountingIndex()
    p = generate_seed()
    cur = p
    keys = []
    for i in range(60):
        nxt = generate_seed()
        at = start + timedelta(seconds=i + 1)
        rec, _ = validate_submission(make_key_event(cur, subject=did(p), key=did(nxt), event="rotate",
                                                    effective_at=format_utc(at)), idx, at)
        idx.add(rec, i, at)
        keys.append(did(nxt))
        cur = nxt
    idx.calls.clear()
    got = standings(idx, start + timedelta(seconds=62))
    assert idx.calls[did(p)] == 1
    # and the answers are the chain's: every key but the last retired by the next rotation
    assert got[did(p)].reason == "superseded" and all(got[k].reason == "superseded" for k in keys[:-1])
    assert keys[-1] not in got
    # the memo is dropped when a record is added
    rec, _ = validate_submission(make_kill_switch(cur, effective_at=format_utc(start + timedelta(seconds=61))),
                                 idx, start + timedelta(seconds=61))
    idx.add(rec, 60, start + timedelta(seconds=61))
    assert standings(idx, start + timedelta(seconds=62))[f"{keys[-1]}#oauth_grants"].reason == "kill_switch"
