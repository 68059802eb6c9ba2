"""witness.core + witness.api: tlog-witness add-checkpoint exactly as C2SP tlog-witness (V4, V8)."""
from __future__ import annotations

import asyncio

import pytest

from tlog.errors import (
    ConsistencyProofError,
    Forbidden,
    ForkError,
    FormatError,
    InvalidInput,
    NotFound,
    TooLarge,
    VerificationError,
)
from tlog.formats.checkpoint import Checkpoint
from tlog.formats.encoding import b64enc
from tlog.formats.hashing import EMPTY_ROOT
from tlog.formats.keys import CosignatureSigner, cosigner_verifier, parse_vkey
from tlog.formats.mirror import add_checkpoint_body
from tlog.formats.note import NoteSignature, add_signatures, open_note, sign_note
from witness.config import WitnessedLog
from witness.core import MAX_PROOF_LINES, SizeConflict, Witness, parse_add_checkpoint
from witness.state import Record, WitnessState

from tests.support.witness import (
    V4_ORIGIN,
    V4_PROOFS,
    V4_SIGS,
    V4_VKEY,
    V8_LINE,
    V8_NAME,
    V8_SEED,
    V8_TS,
    V8_VKEY,
    MemLog,
    post,
    running_witness,
    v4_body,
    v4_checkpoint,
    witness_config,
)

# The nine steps of V4 (the litewitness test suite's scenario): (old, proof, checkpoint) -> (status, 409 body).
V4_STEPS = [
    (0, [], v4_checkpoint(1), 200, None),
    (1, V4_PROOFS[(1, 3)], v4_checkpoint(3, sig=V4_SIGS[3][:-2] + "x="), 403, None),
    (1, V4_PROOFS[(1, 3)], v4_checkpoint(3).replace("e562", "e563"), 404, None),
    (1, [], v4_checkpoint(3), 422, None),
    (1, ["KgEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "KgIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAABA="],
     v4_checkpoint(3), 422, None),
    (1, V4_PROOFS[(1, 3)], v4_checkpoint(3), 200, None),
    (1, V4_PROOFS[(1, 5)], v4_checkpoint(5), 409, "3\n"),
    (3, V4_PROOFS[(3, 5)], v4_checkpoint(5), 200, None),
    (0, [], v4_checkpoint(5), 409, "5\n"),
]


def test_v4_step_inputs_are_the_vectors():
    # Step 2 is the size-3 signature with its last character corrupted ("...Vrx6go=" -> "...Vrx6gx="),
    # step 3 changes the origin in line 1 and in the key name.
    assert V4_SIGS[3].endswith("WVrx6go=") and V4_STEPS[1][2].endswith("WVrx6gx=\n")
    assert V4_STEPS[2][2].count("e563") == 2 and "e562" not in V4_STEPS[2][2]


async def test_v4_scenario_through_the_server(tmp_path):
    cfg = witness_config(tmp_path, [WitnessedLog(V4_ORIGIN, V4_VKEY)])
    witness_v = cosigner_verifier(parse_vkey(V8_VKEY))
    log_v = parse_vkey(V4_VKEY)
    async with running_witness(cfg) as (svc, url, session):
        for i, (old, proof, cp, want, want_body) in enumerate(V4_STEPS, start=1):
            status, ctype, text = await post(session, url, v4_body(old, proof, cp))
            assert status == want, f"step {i}: {status} {text!r}"
            if want == 409:
                assert text == want_body, f"step {i}"
                assert ctype == "text/x.tlog.size"
            if want == 200:
                # The answer is a cosignature/v1 line that verifies over the checkpoint.
                _note, verified = open_note(cp.split("\n\n")[0] + "\n\n" + text, [witness_v])
                assert verified[0].timestamp is not None
                assert text.startswith("— " + V8_NAME + " ") and text.endswith("\n")
        rec = svc.state.get_sync(V4_ORIGIN)
        assert (rec.size, b64enc(rec.root)) == (5, "QrtXrQZCCvpIgsSmOsah7HdICzMLLyDfxToMql9WTjY=")
        # The monitoring copy carries the log's signature and ours, and both verify.
        open_note(rec.note, [log_v])
        open_note(rec.note, [witness_v])
        assert [h[0] for h in svc.state.history_sync(V4_ORIGIN)] == [1, 3, 5]


async def test_v8_cosignature_byte_for_byte_through_the_server(tmp_path):
    cfg = witness_config(tmp_path, [WitnessedLog(V4_ORIGIN, V4_VKEY)], seed=V8_SEED, name=V8_NAME)
    async with running_witness(cfg, clock=lambda: V8_TS) as (svc, url, session):
        assert svc.signer.vkey == V8_VKEY
        status, ctype, text = await post(session, url, v4_body(0, [], v4_checkpoint(1)))
    assert status == 200
    assert text == V8_LINE
    assert ctype.startswith("text/plain")


# --- the core alone ------------------------------------------------------------------------


@pytest.fixture
def state(tmp_path):
    s = WitnessState(tmp_path / "w.db")
    yield s
    s.close()


def mem_witness(state, *logs: MemLog, clock=lambda: 1_750_000_000) -> Witness:
    signer = CosignatureSigner("w.example", bytes([7]) * 32)
    return Witness(signer, [WitnessedLog(l.origin, l.vkey) for l in logs], state, clock=clock)


async def test_first_checkpoint_with_old_nonzero_is_a_409_with_size_0(state):
    log = MemLog().grow(4)
    w = mem_witness(state, log)
    with pytest.raises(SizeConflict) as e:
        await w.submit(log.body(2, 4))
    assert e.value.known_size == 0 and e.value.status == 409


async def test_status_table(state):
    """Every status of C2SP tlog-witness from the core, with the typed error that maps to it."""
    log = MemLog().grow(8)
    w = mem_witness(state, log)
    other = MemLog(origin="other.example/log").grow(2)
    stranger = MemLog(seed=bytes([9]) * 32).grow(8)  # same origin, another key
    with pytest.raises(NotFound):
        await w.submit(other.body(0, 2))
    with pytest.raises(Forbidden):
        await w.submit(stranger.body(0, 8))
    with pytest.raises(InvalidInput):  # old > size
        await w.submit(add_checkpoint_body(5, [], log.checkpoint(4)))
    zero_note = sign_note(Checkpoint(log.origin, 0, bytes(32)).to_text(), [log.signer])
    with pytest.raises(VerificationError) as e0:  # size 0 whose root is not SHA-256("")
        await w.submit(add_checkpoint_body(0, [], zero_note))
    assert e0.value.status == 422
    with pytest.raises(ConsistencyProofError):  # old 0 with a proof
        await w.submit(add_checkpoint_body(0, log.proof(2, 8), log.checkpoint(8)))
    assert (await w.submit(log.body(0, 4))).size == 4
    with pytest.raises(ConsistencyProofError):  # a proof for another old size
        await w.submit(add_checkpoint_body(4, log.proof(2, 8), log.checkpoint(8)))
    fork = log.fork(2, tag=1).grow(2)
    with pytest.raises(ConsistencyProofError):  # same size, another root
        await w.submit(add_checkpoint_body(4, [], fork.checkpoint(4)))
    c = await w.submit(add_checkpoint_body(4, [], log.checkpoint(4)))  # same checkpoint again: fine
    assert c.size == 4
    assert (await w.submit(log.body(4, 8))).size == 8
    assert state.get_sync(log.origin).size == 8


async def test_size_zero_empty_root_is_cosigned(state):
    log = MemLog()
    w = mem_witness(state, log)
    c = await w.submit(log.body(0, 0))
    assert (c.size, c.root) == (0, EMPTY_ROOT)
    log.grow(3)
    assert (await w.submit(log.body(0, 3))).size == 3


async def test_cosignature_timestamps_never_decrease(state):
    now = [2_000_000_000.0]
    log = MemLog().grow(6)
    w = mem_witness(state, log, clock=lambda: now[0])
    a = await w.submit(log.body(0, 2))
    now[0] -= 3600  # the clock steps back an hour
    b = await w.submit(log.body(2, 6))
    assert a.timestamp == 2_000_000_000 and b.timestamp == a.timestamp


async def test_unknown_log_signature_alongside_the_real_one_is_ignored(state):
    log = MemLog().grow(3)
    w = mem_witness(state, log)
    extra = NoteSignature("someone.else", b"\x01\x02\x03\x04", bytes(64))
    note = str(add_signatures(log.checkpoint(3), extra))
    c = await w.submit(add_checkpoint_body(0, [], note))
    # The stored monitoring copy holds only signatures we verified, plus ours.
    assert "someone.else" not in c.note and c.note.count("\n— ") == 2


# --- parsing -------------------------------------------------------------------------------


def test_parse_round_trip():
    log = MemLog().grow(9)
    req = parse_add_checkpoint(log.body(3, 9))
    assert req.old == 3 and list(req.proof) == log.proof(3, 9) and req.checkpoint.size == 9


@pytest.mark.parametrize("mutate", [
    lambda b: b.replace(b"\n", b"\r\n"),                   # CRLF
    lambda b: b.replace(b"old 3\n", b"old 03\n"),          # leading zero
    lambda b: b.replace(b"old 3\n", b"old  3\n"),
    lambda b: b.replace(b"old 3\n", b"Old 3\n"),
    lambda b: b.replace(b"old 3\n", b"old -3\n"),
    lambda b: b.replace(b"old 3\n", b"old 3"),             # no newline at all after old
    lambda b: b[: b.index(b"\n\n")],                       # truncated before the empty line
    lambda b: b.replace(b"=\n", b"\n", 1),                 # unpadded base64
    lambda b: b.replace(b"old 3\n", b"old 3\nAAAA\n"),     # a 3-byte "hash"
    lambda b: b.replace(b"old 3\n", b"old 3\n" + b"!" * 44 + b"\n"),
    lambda b: b + b"trailing\n",                           # not a signature line
    lambda b: b"\xff" + b,                                  # not UTF-8
    lambda b: b.replace(b"old 3\n", b"old 3\n\x00\n"),
    lambda b: b.replace(b"old 3\n", b"old 3\n" + b"".join([b64enc(bytes(32)).encode() + b"\n"] * 64)),
])
def test_malformed_bodies_are_format_errors(mutate):
    body = MemLog().grow(9).body(3, 9)
    with pytest.raises(FormatError):
        parse_add_checkpoint(mutate(body))


def test_proof_line_cap_is_63():
    log = MemLog().grow(2)
    lines = [bytes([i]) * 32 for i in range(MAX_PROOF_LINES)]
    assert len(parse_add_checkpoint(add_checkpoint_body(1, lines, log.checkpoint(2))).proof) == 63
    with pytest.raises(FormatError):
        parse_add_checkpoint(add_checkpoint_body(1, [*lines, bytes(32)], log.checkpoint(2)))


def test_body_cap():
    log = MemLog().grow(2)
    body = log.body(0, 2)
    with pytest.raises(TooLarge):
        parse_add_checkpoint(body, max_body=len(body) - 1)
    assert parse_add_checkpoint(body, max_body=len(body)).old == 0


# --- state: the compare-and-swap ---------------------------------------------------------


def test_cas_refuses_a_stale_expectation_and_a_second_root(state):
    r1 = Record("o", 1, b"\x01" * 32, "n1\n", 10)
    r3 = Record("o", 3, b"\x03" * 32, "n3\n", 11)
    r3b = Record("o", 3, b"\x33" * 32, "n3b\n", 12)
    assert state.swap_sync(None, r1)
    assert not state.swap_sync(None, r1)  # the INSERT only works once
    assert state.swap_sync(r1, r3)
    assert not state.swap_sync(r1, r3b)  # expected (1, r1) is gone
    assert state.get_sync("o") == r3
    with pytest.raises(ValueError):
        state.swap_sync(r3, r1)  # backwards
    # Even a caller that gets past the CAS cannot record a second root for a size.
    r4 = Record("o", 4, b"\x04" * 32, "n4\n", 13)
    assert state.swap_sync(r3, r4)
    state._db.execute("UPDATE checkpoints SET size = 3, root = ? WHERE origin = 'o'", (r3b.root,))
    with pytest.raises(ForkError):
        state.swap_sync(Record("o", 3, r3b.root, "", 0), Record("o", 3, r3b.root, "x\n", 14))
    assert state.history_sync("o") == [(1, r1.root), (3, r3.root), (4, r4.root)]


async def test_stall_hook_race_two_roots_for_one_size(tmp_path):
    """Two requests read the same state, both verify, both stall before the swap: one wins."""
    log = MemLog().grow(2)
    fork = log.fork(2, tag=9).grow(2)
    log.grow(2)
    both_read = asyncio.Event()
    arrived: list[str] = []

    async def stall(origin: str) -> None:
        arrived.append(origin)
        if len(arrived) == 3:  # the first swap (size 2) passes; the next two meet here
            both_read.set()
        if len(arrived) > 1:
            await both_read.wait()

    st = WitnessState(tmp_path / "w.db", stall=stall)
    try:
        w = mem_witness(st, log)
        await w.submit(log.body(0, 2))
        results = await asyncio.gather(w.submit(log.body(2, 4)), w.submit(fork.body(2, 4)),
                                       return_exceptions=True)
    finally:
        st.close()
    wins = [r for r in results if not isinstance(r, Exception)]
    losses = [r for r in results if isinstance(r, Exception)]
    # The fork is signed by the same key: only the CAS decides which one the witness takes.
    assert len(wins) == 1 and len(losses) == 1
    assert isinstance(losses[0], (SizeConflict, ConsistencyProofError))
    st2 = WitnessState(tmp_path / "w.db")
    try:
        assert [s for s, _ in st2.history_sync(log.origin)] == [2, 4]
        assert st2.get_sync(log.origin).root == wins[0].root
    finally:
        st2.close()



def test_origin_path_is_hex_sha256_of_the_origin():
    import hashlib

    from witness.core import origin_path

    assert origin_path(V4_ORIGIN) == hashlib.sha256(V4_ORIGIN.encode()).hexdigest()
    assert len(origin_path("é")) == 64
