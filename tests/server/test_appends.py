"""Single-append answers built per batch (tlog.server.appends) against the plain document.

Every answer `SingleAppends` renders must be byte-identical to
`encode_document(added_document(...))` with the proof from the RFC 9162
reference (`TreeView.inclusion_proof`), checked again by the RFC verifier, on trees of random
sizes, with duplicates, first entries, and both encodings.
"""
from __future__ import annotations

import asyncio
import json
import random

import cbor2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tlog.errors import Unavailable
from tlog.formats.entries import canonical_entry, commitment_json_entry
from tlog.formats.hashing import leaf_hash
from tlog.formats.proofbundle import parse_proof_bundle
from tlog.formats.strict import loads_json
from tlog.http.responses import CBOR, CONTENT_TYPES, JSON, OAP_JSON, encode_document
from tlog.merkle.verify import verify_inclusion
from tlog.server.appends import SingleAppends, added_document
from tlog.server.config import LogConfig
from tlog.server.service import LogService


def commitment(i: int, salt: int = 0) -> bytes:
    return canonical_entry({"type": "commitment", "commitment": "sha256:%064x" % (salt << 64 | i)})


async def open_log(tmp_path, interval_ms: int = 5) -> LogService:
    cfg = LogConfig(data_dir=tmp_path / "data", port=0, batch_interval_ms=interval_ms)
    return await LogService.open(cfg)


def reference(svc: LogService, reply_state_size: int, index: int, entry: bytes, fresh: bool, cbor: bool) -> bytes:
    state = svc.state
    assert state.size == reply_state_size
    proof = state.view.inclusion_proof(index)
    body, _ = encode_document(added_document(state, index, leaf_hash(entry), fresh, proof, entry), cbor)
    return body


async def _append_rounds(svc: LogService, rounds: list[list[tuple[int, bool]]]) -> None:
    appends = SingleAppends(svc.appender, svc.hashes, svc.metrics)
    seen: set[int] = set()
    for batch in rounds:
        entries = [(commitment(i), fmt) for i, fmt in batch]
        futures = [appends.submit(e, fmt, 0.0) for e, fmt in entries]
        replies = await asyncio.gather(*futures)
        for (i, fmt), (e, _), reply in zip(batch, entries, replies):
            cbor = fmt == CBOR
            doc = cbor2.loads(reply.body) if cbor else json.loads(reply.body)
            fresh = i not in seen  # entries commit in submission order: the first of equal ones is new
            seen.add(i)
            assert doc["duplicate"] is (not fresh)
            assert reply.body == reference(svc, doc["tree_size"], doc["index"], e, fresh, cbor)
            assert dict(reply.headers)["Content-Type"] == CONTENT_TYPES[fmt]  # what Accept asked for
            bundle = parse_proof_bundle(doc["bundle"])
            assert bundle.extra == e and bundle.index == doc["index"]
            verify_inclusion(doc["index"], svc.state.size, leaf_hash(e), list(bundle.proof), svc.state.root)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.tuples(st.integers(0, 40), st.sampled_from([JSON, OAP_JSON, CBOR])), min_size=1,
                                  max_size=30),
                min_size=1, max_size=5))
def test_batch_answers_match_the_plain_document(tmp_path_factory, rounds):
    async def main():
        svc = await open_log(tmp_path_factory.mktemp("log"))
        try:
            await _append_rounds(svc, rounds)
        finally:
            await svc.close()

    asyncio.run(main())


async def test_first_entry_and_a_larger_tree(tmp_path):
    """Tree size 1 (an empty proof, no proof lines in the bundle) and then a few hundred more."""
    svc = await open_log(tmp_path)
    try:
        await _append_rounds(svc, [[(0, JSON)], [(i, CBOR if i % 7 == 0 else i % 2) for i in range(1, 300)], [(5, JSON)]])
    finally:
        await svc.close()


async def test_refused_batch_fails_every_answer(tmp_path):
    svc = await open_log(tmp_path)
    appends = SingleAppends(svc.appender, svc.hashes, svc.metrics)
    await svc.appender.close()
    with pytest.raises(Unavailable):
        await appends.submit(commitment(1), False, 0.0)
    await svc.reader.close()


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=32, max_size=32), st.sampled_from(["lower", "upper", "mixed"]))
def test_commitment_json_entry_equals_the_general_path(digest, case):
    hexd = digest.hex()
    hexd = {"lower": hexd, "upper": hexd.upper(), "mixed": "".join(
        c.upper() if k % 2 else c for k, c in enumerate(hexd))}[case]
    body = b'{"type":"commitment","commitment":"sha256:%s"}' % hexd.encode()
    assert commitment_json_entry(body) == canonical_entry(loads_json(body))


@pytest.mark.parametrize("body", [
    b'{"type": "commitment","commitment":"sha256:' + b"0" * 64 + b'"}',  # spacing
    b'{"commitment":"sha256:' + b"0" * 64 + b'","type":"commitment"}',  # key order
    b'{"type":"commitment","commitment":"sha256:' + b"0" * 63 + b'"}',  # short
    b'{"type":"commitment","commitment":"sha256:' + b"0" * 64 + b'"}\n',  # trailing byte
    b'{"type":"commitment","commitment":"sha256:' + b"0" * 64 + b'","x":1}',  # another field
    b'{"type":"commitment","commitment":"sha256:' + b"g" * 64 + b'"}',  # not hex
    b'{"type":"commitment","commitment":"sha256:' + b"0" * 64 + b'","type":"commitment"}',  # duplicate key
])
def test_commitment_json_entry_leaves_other_bodies_to_the_parser(body):
    assert commitment_json_entry(body) is None


def test_random_bodies_agree_with_the_parser():
    """One byte of a valid body changed at random: whatever the regex still accepts, the
    strict parser accepts and encodes the same way (both outcomes occur)."""
    rng = random.Random(7)
    accepted = refused = 0
    for _ in range(500):
        body = bytearray(b'{"type":"commitment","commitment":"sha256:' + b"%064x" % rng.getrandbits(256) + b'"}')
        body[rng.randrange(len(body))] = rng.randrange(256)
        fast = commitment_json_entry(bytes(body))
        if fast is not None:
            accepted += 1
            assert fast == canonical_entry(loads_json(bytes(body)))
        else:
            refused += 1
    assert accepted and refused


class _FailingHashes:
    """A hash reader whose every read fails, as a hash file with a bad sector does."""

    def gather(self, level, indices, need=None):
        raise OSError(5, "Input/output error")


async def test_waiters_get_an_error_when_building_the_answers_fails(tmp_path):
    """Found in review: an exception while rendering a batch's answers (EIO reading a hash
    file) left every waiter pending forever; each now gets the error (a 500)."""
    svc = await open_log(tmp_path)
    try:
        appends = SingleAppends(svc.appender, _FailingHashes(), svc.metrics)
        futs = [appends.submit(commitment(i), False, 0.0) for i in range(3)]
        done, pending = await asyncio.wait(futs, timeout=60)
        assert not pending
        assert all(isinstance(f.exception(), OSError) for f in done)
        assert svc.state.size == 3  # durable all the same: a retry finds them as duplicates
    finally:
        await svc.close()
