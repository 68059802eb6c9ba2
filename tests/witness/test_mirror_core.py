"""The mirror's protocol core (witness.mirror.core) against C2SP tlog-mirror, status by status,
on a real store in a temporary directory: bodies are streamed in small chunks."""
from __future__ import annotations

import asyncio
import sqlite3

import pytest

from tlog.errors import Forbidden, InvalidInput, NotFound, VerificationError
from tlog.formats.checkpoint import parse_checkpoint
from tlog.formats.keys import Signer
from tlog.formats.mirror import add_checkpoint_body, encode_header, encode_package, parse_mirror_info
from tlog.formats.note import Note, open_note, parse_note, parse_signature_lines
from tlog.formats.tiles import encode_entry_bundle
from witness.core import SizeConflict
from witness.mirror.core import MirrorConflict, NoPending

from tests.support.mirror import EntryLog, chunks, cosigner_key, make_mirror


@pytest.fixture
def lg() -> EntryLog:
    return EntryLog().grow(1000)


@pytest.fixture
def mirror(tmp_path, lg):
    m = make_mirror(tmp_path / "m", [lg.config], clock=lambda: 1_700_000_000)
    yield m
    m.close()


async def upload(m, body: bytes, size: int = 997):
    return await m.add_entries(chunks(body, size))


def cosigned(lg: EntryLog, size: int, lines: bytes) -> int:
    """Check that `lines` are the mirror's cosignature of lg's checkpoint of `size`; its timestamp."""
    note = parse_note(lg.checkpoint(size))
    full = Note(note.text, note.signatures + parse_signature_lines(lines.decode()))
    _, verified = open_note(full, [cosigner_key()])
    return verified[0].timestamp


# --- add-checkpoint ---------------------------------------------------------------------


async def test_add_checkpoint_moves_the_pending_checkpoint_and_signs_nothing(mirror, lg):
    cp = await mirror.add_checkpoint(lg.add_checkpoint(0, 300))
    assert (cp.size, cp.root) == (300, lg.root(300))
    rec = mirror.store.record(lg.origin)
    assert rec.pending.size == 300 and rec.mirror is None and rec.next_entry == 0
    open_note(rec.pending.note, [lg.signer.verifier])  # the log's signature is retained
    assert len(parse_note(rec.pending.note).signatures) == 1  # and nothing of the mirror's
    await mirror.add_checkpoint(lg.add_checkpoint(300, 700))
    assert mirror.store.record(lg.origin).pending.size == 700


async def test_add_checkpoint_statuses_are_the_witness_ones(mirror, lg):
    with pytest.raises(NotFound):  # 404
        await mirror.add_checkpoint(EntryLog(origin="other.example/log").grow(3).add_checkpoint(0, 3))
    stranger = EntryLog(seed=bytes(32)).grow(3)
    with pytest.raises(Forbidden):  # 403: not signed by the configured key
        await mirror.add_checkpoint(stranger.add_checkpoint(0, 3))
    with pytest.raises(InvalidInput):  # 400: old > size
        await mirror.add_checkpoint(add_checkpoint_body(5, [], lg.checkpoint(3)))
    await mirror.add_checkpoint(lg.add_checkpoint(0, 300))
    with pytest.raises(SizeConflict) as e:  # 409: old is not the pending size
        await mirror.add_checkpoint(lg.add_checkpoint(0, 400))
    assert e.value.known_size == 300
    fork = lg.fork(200, b"fork").grow(300)
    with pytest.raises(VerificationError):  # 422: inconsistent with the pending checkpoint
        await mirror.add_checkpoint(fork.add_checkpoint(300, 500))
    with pytest.raises(VerificationError):  # 422: same size, another root
        await mirror.add_checkpoint(add_checkpoint_body(300, [], fork.checkpoint(300)))
    assert mirror.store.record(lg.origin).pending.root == lg.root(300)


# --- add-entries ---------------------------------------------------------------------------


async def test_upload_in_one_request_then_the_mirror_cosigns(mirror, lg):
    await mirror.add_checkpoint(lg.add_checkpoint(0, 700))
    up = await upload(mirror, lg.body(0, 700))
    assert (up.status, up.stored, up.received) == (200, 700, 700)
    assert cosigned(lg, 700, up.body) == 1_700_000_000
    rec = mirror.store.record(lg.origin)
    assert (rec.mirror.size, rec.next_entry) == (700, 700)
    open_note(rec.mirror.note, [lg.signer.verifier])
    open_note(rec.mirror.note, [cosigner_key()])
    # the copy is the log: bundles and hashes
    assert mirror.store.bundle(lg.origin, 1, 256) == encode_entry_bundle(lg.entries[256:512])
    assert mirror.store.bundle(lg.origin, 2, 188) == encode_entry_bundle(lg.entries[512:700])
    assert mirror.store.tile(lg.origin, 0, 1, 256) == b"".join(lg.levels[0][256:512])
    assert mirror.store.tile(lg.origin, 1, 0, 2) == lg.levels[8][0] + lg.levels[8][1]
    assert mirror.store.root(lg.origin, 700) == lg.root(700)


async def test_bytes_after_the_last_package_are_discarded(mirror, lg):
    """tlog-mirror: "The mirror discards any partial bytes after the last successfully
    authenticated entry package": a complete upload followed by anything commits (200)."""
    await mirror.add_checkpoint(lg.add_checkpoint(0, 300))
    up = await upload(mirror, lg.body(0, 300) + b"\x00\x05extra bytes that are no package")
    assert (up.status, up.stored) == (200, 300)
    cosigned(lg, 300, up.body)
    assert mirror.store.record(lg.origin).mirror.size == 300


async def test_a_prefix_of_packages_gets_202_and_resumes_from_the_next_entry(mirror, lg):
    await mirror.add_checkpoint(lg.add_checkpoint(0, 1000))
    up = await upload(mirror, lg.body(0, 1000, packages=2))  # a deliberate prefix
    assert up.status == 202
    info = parse_mirror_info(up.body)
    assert (info.size, info.next_entry) == (1000, 512) and info.ticket
    up = await upload(mirror, lg.body(512, 1000, info.ticket, packages=1))
    assert (up.status, parse_mirror_info(up.body).next_entry) == (202, 768)
    up = await upload(mirror, lg.body(768, 1000))
    assert up.status == 200 and up.stored == 232
    cosigned(lg, 1000, up.body)


async def test_a_body_cut_inside_a_package_keeps_the_whole_packages_before_it(mirror, lg):
    await mirror.add_checkpoint(lg.add_checkpoint(0, 1000))
    body = lg.body(0, 1000)
    up = await upload(mirror, body[:len(lg.body(0, 1000, packages=3)) + 50])
    assert up.status == 202 and parse_mirror_info(up.body).next_entry == 768
    assert mirror.store.record(lg.origin).next_entry == 768


async def test_unaligned_uploads_complete_bundles_from_stored_entries(mirror, lg):
    for size in (1, 255, 300, 511, 513, 1000):
        rec = mirror.store.record(lg.origin)
        await mirror.add_checkpoint(lg.add_checkpoint(rec.pending.size if rec.pending else 0, size))
        up = await upload(mirror, lg.body(rec.next_entry, size), size=333)
        assert up.status == 200 and up.stored == size - rec.next_entry
        cosigned(lg, size, up.body)
    assert mirror.store.root(lg.origin, 1000) == lg.root(1000)
    assert mirror.store.bundle(lg.origin, 1, 256) == encode_entry_bundle(lg.entries[256:512])


async def test_add_entries_statuses(tmp_path, lg):
    mirror = make_mirror(tmp_path / "m", [lg.config], clock=lambda: 1_700_000_000, max_excess=512)
    try:
        await _add_entries_statuses(mirror, lg)
    finally:
        mirror.close()


async def _add_entries_statuses(mirror, lg):
    with pytest.raises(NotFound):  # 404: unknown origin
        await upload(mirror, lg.body(0, 10, origin="other.example/log"))
    with pytest.raises(NoPending):  # 422: no pending checkpoint yet
        await upload(mirror, lg.body(0, 10))
    await mirror.add_checkpoint(lg.add_checkpoint(0, 600))
    with pytest.raises(InvalidInput):  # 400: header cut short
        await upload(mirror, lg.body(0, 600)[:10])
    with pytest.raises(InvalidInput):  # 400: first package cut short
        await upload(mirror, lg.body(0, 600)[:200])
    with pytest.raises(MirrorConflict) as e:  # 409: upload_end is no pending checkpoint
        await upload(mirror, lg.body(0, 599))
    assert e.value.info.size == 600 and e.value.info.next_entry == 0
    with pytest.raises(MirrorConflict) as e:  # 409: upload_start past the next entry
        await upload(mirror, lg.body(256, 600))
    assert (e.value.info.size, e.value.info.next_entry) == (600, 0)
    up = await upload(mirror, lg.body(0, 600))
    assert up.status == 200
    await mirror.add_checkpoint(lg.add_checkpoint(600, 1000))
    with pytest.raises(MirrorConflict) as e:  # 409: more than max_excess entries already stored
        await upload(mirror, lg.body(0, 1000))
    assert (e.value.info.size, e.value.info.next_entry) == (1000, 600)
    up = await upload(mirror, lg.body(256, 1000, packages=2))  # 344 resent: within the limit, skipped
    assert (up.status, up.stored, up.received) == (202, 168, 512)  # only 600..768 were new
    up = await upload(mirror, lg.body(600, 1000) + b"x")  # bytes after the last package: discarded
    assert (up.status, up.stored) == (200, 232)
    assert mirror.store.record(lg.origin).next_entry == 1000


async def test_the_mirror_checkpoint_size_and_past_pending_sizes_are_valid_upload_ends(mirror, lg):
    await mirror.add_checkpoint(lg.add_checkpoint(0, 300))
    await mirror.add_checkpoint(lg.add_checkpoint(300, 600))
    up = await upload(mirror, lg.body(0, 300))  # a past pending checkpoint
    assert up.status == 200
    cosigned(lg, 300, up.body)
    await mirror.add_checkpoint(lg.add_checkpoint(600, 900))
    up = await upload(mirror, lg.body(300, 300))  # the mirror checkpoint: a fresh cosignature
    assert up.status == 200 and up.stored == 0
    with pytest.raises(MirrorConflict):  # below the mirror checkpoint
        await upload(mirror, lg.body(0, 0))
    up = await upload(mirror, lg.body(300, 600))
    assert up.status == 200 and mirror.store.record(lg.origin).mirror.size == 600


async def test_a_ticket_names_a_pending_checkpoint_the_mirror_no_longer_keeps(tmp_path, mirror, lg):
    await mirror.add_checkpoint(lg.add_checkpoint(0, 700))
    up = await upload(mirror, lg.body(0, 700, packages=1))
    ticket = parse_mirror_info(up.body).ticket
    await mirror.add_checkpoint(lg.add_checkpoint(700, 900))
    with sqlite3.connect(tmp_path / "m/mirror.db") as db:  # as if 700 had been pruned from the history
        db.execute("DELETE FROM pending_history WHERE size = 700")
    with pytest.raises(MirrorConflict) as e:
        await upload(mirror, lg.body(256, 700))
    assert e.value.info.size == 900  # the current pending checkpoint, with its own ticket
    forged = bytearray(ticket)
    forged[-1] ^= 1
    with pytest.raises(MirrorConflict):
        await upload(mirror, lg.body(256, 700, bytes(forged)))
    up = await upload(mirror, lg.body(256, 700, ticket))
    assert up.status == 200
    cosigned(lg, 700, up.body)


async def test_a_package_that_does_not_verify_is_422_and_stores_nothing(mirror, lg):
    await mirror.add_checkpoint(lg.add_checkpoint(0, 600))
    await upload(mirror, lg.body(0, 600, packages=1))
    good = lg.body(256, 600)
    tampered = bytearray(good)
    tampered[good.index(lg.entries[300])] ^= 1  # one entry changed
    wrong_proof = encode_header(lg.origin, 256, 600) + encode_package(lg.entries[256:512], [bytes(32)] * 3)
    fork = lg.fork(300, b"fork").grow(300)
    other_log = encode_header(lg.origin, 256, 600) + fork.package(256, 256, 512, 600)
    for body in (bytes(tampered), wrong_proof, other_log):
        with pytest.raises(VerificationError):
            await upload(mirror, body)
        assert mirror.store.record(lg.origin).next_entry == 256
    assert mirror.store.bundle(lg.origin, 1, 1) is None
    assert mirror.counters.refused_packages == 3
    assert (await upload(mirror, good)).status == 200


async def test_malformed_later_package_is_202_for_what_came_before(mirror, lg):
    await mirror.add_checkpoint(lg.add_checkpoint(0, 600))
    bad = encode_package(lg.entries[256:512], [])[:-1] + bytes([64]) + bytes(64 * 32)
    up = await upload(mirror, lg.body(0, 600, packages=1) + bad)
    assert up.status == 202 and parse_mirror_info(up.body).next_entry == 256


async def test_concurrent_overlapping_uploads_store_each_entry_once(mirror, lg):
    await mirror.add_checkpoint(lg.add_checkpoint(0, 1000))
    ups = await asyncio.gather(*(upload(mirror, lg.body(0, 1000), size=500 + 97 * i) for i in range(4)),
                               return_exceptions=True)
    ok = [u for u in ups if not isinstance(u, Exception)]
    assert ok and all(u.status == 200 for u in ok)
    assert sum(u.stored for u in ok) == 1000  # every entry stored exactly once
    for u in ups:  # a request that started late may be refused: most of it was stored already
        assert not isinstance(u, Exception) or isinstance(u, MirrorConflict)
    assert mirror.store.root(lg.origin, 1000) == lg.root(1000)
    sizes = [s for s, _, _ in mirror.store.cosigned(lg.origin)]
    assert sizes == [1000]


async def test_cosignature_timestamps_never_decrease_and_sizes_never_go_back(tmp_path, lg):
    now = [2_000]
    m = make_mirror(tmp_path / "m", [lg.config], clock=lambda: now[0])
    try:
        await m.add_checkpoint(lg.add_checkpoint(0, 300))
        assert cosigned(lg, 300, (await upload(m, lg.body(0, 300))).body) == 2_000
        now[0] = 1_000  # the clock steps back
        await m.add_checkpoint(lg.add_checkpoint(300, 400))
        assert cosigned(lg, 400, (await upload(m, lg.body(300, 400))).body) == 2_000
        assert [(s, t) for s, _, t in m.store.cosigned(lg.origin)] == [(300, 2_000), (400, 2_000)]
    finally:
        m.close()


async def test_state_survives_a_restart(tmp_path, lg):
    m = make_mirror(tmp_path / "m", [lg.config])
    await m.add_checkpoint(lg.add_checkpoint(0, 700))
    await upload(m, lg.body(0, 700, packages=2))
    m.close()
    m = make_mirror(tmp_path / "m", [lg.config])
    try:
        rec = m.store.record(lg.origin)
        assert (rec.pending.size, rec.next_entry, rec.mirror) == (700, 512, None)
        up = await upload(m, lg.body(512, 700))
        assert up.status == 200 and m.store.root(lg.origin, 700) == lg.root(700)
    finally:
        m.close()


async def test_a_log_key_that_is_not_the_origin_name(tmp_path):
    """tlog-checkpoint: the key name need not be the origin (sum.golang.org signs "go.sum database tree")."""
    lg = EntryLog(origin="go.sum database tree").grow(10)
    signer = Signer("sum.golang.org", lg.seed)
    from tlog.formats.checkpoint import Checkpoint
    from tlog.formats.note import sign_note
    from witness.mirror.config import MirroredLog

    m = make_mirror(tmp_path / "m", [MirroredLog(lg.origin, signer.vkey)])
    try:
        note = sign_note(Checkpoint(lg.origin, 10, lg.root(10)).to_text(), [signer])
        await m.add_checkpoint(add_checkpoint_body(0, [], note))
        up = await upload(m, lg.body(0, 10))
        assert up.status == 200
        assert parse_checkpoint(parse_note(m.checkpoint(lg.origin).note).text).size == 10
    finally:
        m.close()


async def test_a_log_that_signs_with_an_ml_dsa_44_key(tmp_path):
    """tlog-checkpoint: "Logs SHOULD use ML-DSA-44 cosignatures to sign the checkpoint"; the
    mirror's add-checkpoint is "handled identically to" a witness's, which takes such logs."""
    from tlog.formats.checkpoint import Checkpoint
    from tlog.formats.keys import MLDSACosigner
    from tlog.formats.note import NoteSignature
    from witness.mirror.config import MirrorConfig, MirroredLog

    lg = EntryLog(origin="pq.example/log").grow(300)
    log_key = MLDSACosigner(lg.origin, bytes(range(32)))
    MirrorConfig(name="mirror.example", logs=(MirroredLog(lg.origin, log_key.vkey),)).validate()

    def note(size: int) -> str:
        text = Checkpoint(lg.origin, size, lg.root(size)).to_text()
        return text + "\n" + NoteSignature(log_key.name, log_key.key_id, log_key.cosign(text, 1_700_000_000)).line()

    m = make_mirror(tmp_path / "m", [MirroredLog(lg.origin, log_key.vkey)])
    try:
        await m.add_checkpoint(add_checkpoint_body(0, [], note(300)))
        up = await upload(m, lg.body(0, 300))
        assert up.status == 200 and up.stored == 300
        stored = m.checkpoint(lg.origin).note
        open_note(stored, [log_key.verifier])  # the log's ML-DSA-44 signature is kept
        open_note(stored, [cosigner_key()])
        forged = note(300).replace(lg.origin + "\n300\n", lg.origin + "\n299\n")
        with pytest.raises(Forbidden):  # 403: the log's signature does not cover size 299
            await m.add_checkpoint(add_checkpoint_body(300, [], forged))
    finally:
        m.close()
