"""The monitor's parts that need no network: who an entry names (the fast path against the
strict decoder), the anchoring journal, split-view evidence, the tree cursor, the configuration,
the state's delivery queue and the file sink's one-line-per-alert promise."""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.config import MonitorConfig
from monitor.state import NewAlert, State
from monitor.tree import TreeCursor
from tlog.client.splitview import SplitView, SplitViewError, check_split_view, parse_split_view
from tlog.client.verifier import TrustPolicy
from tlog.errors import ConfigError
from tlog.formats import ed25519
from tlog.formats.canonical import dcbor
from tlog.formats.checkpoint import Checkpoint
from tlog.formats.did import did_key_from_public
from tlog.formats.encoding import b64enc
from tlog.formats.entries import canonical_entry, commitment_entry, receipt_entry, registry_entry, signer_name
from tlog.formats.hashing import leaf_hash
from tlog.formats.journal import anchored_key, journal_line, journal_line_for, parse_journal
from tlog.formats.keys import CosignatureSigner, Signer
from tlog.formats.note import NoteSignature, add_signatures, sign_note
from tlog.formats.parties import Parties, parties, parties_of
from tlog.formats.strict import loads_cbor
from tlog.merkle.tree import hash_entries, memory_view, root_of_leaves
from tlog.runtime.config import load

SEEDS = [bytes([i]) * 32 for i in range(1, 6)]
DIDS = [did_key_from_public(ed25519.public_from_seed(s)) for s in SEEDS]


# --- who an entry names -------------------------------------------------------------------------


def reference(data: bytes) -> Parties:
    """What the strict decoder says an entry is, signer and DIDs in their one spelling."""
    try:
        obj = loads_cbor(data)
    except Exception:  # noqa: BLE001 - anything the strict decoder refuses is no OAP entry
        return Parties("opaque")
    if not isinstance(obj, dict) or obj.get("type") not in ("receipt", "commitment", "conformance", "registry"):
        return Parties("opaque")
    if obj["type"] == "commitment":
        return Parties("commitment")
    if obj["type"] in ("receipt", "registry"):
        return Parties(obj["type"], signer_name(obj["signer"]))
    r = obj["receipt"]
    # a subject that is no DID names no signer; every DID the receipt holds anywhere is named
    # (a monitor errs on the side of telling a watched DID), whatever key it sits under
    subject = signer_name(r["subject"]) if r["subject"].startswith("did:") else None
    names: list[str] = []

    def walk(v: object) -> None:
        if isinstance(v, str) and v.startswith("did:"):
            n = signer_name(v)
            if n != subject and n not in names:
                names.append(n)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(r)
    return Parties("conformance", subject, tuple(names))


def entries() -> list[bytes]:
    digest = hashlib.sha256(b"a receipt").digest()
    out = [canonical_entry(receipt_entry(digest, SEEDS[0])),
           canonical_entry(receipt_entry(digest, SEEDS[1], "urn:oap:receipt:1", "2026-05-02T10:00:00Z")),
           canonical_entry(commitment_entry(digest)),
           canonical_entry(registry_entry("a" * 40, "b" * 40, 7, SEEDS[2]))]
    raw = ed25519.public_from_seed(SEEDS[3])
    ed = receipt_entry(digest, SEEDS[3])
    out.append(dcbor({**ed, "signer": "ed25519:" + b64enc(raw)}))  # the raw-key spelling: one name with did:key
    out.append(dcbor({**ed, "signer": "did:web:agent.example#key-1", "did_document": {"id": "did:web:agent.example"}}))
    out.append(dcbor({"type": "conformance", "receipt": {
        "id": "urn:oap:conformance:1", "subject": DIDS[4], "level": "L4",
        "signatures": [{"by": DIDS[4], "alg": "EdDSA", "value": "x"}, {"by": DIDS[0] + "#" + DIDS[0][8:],
                                                                       "alg": "EdDSA", "value": "y"}]}}))
    return out


def test_the_fast_paths_name_who_the_strict_decoder_names():
    es = entries()
    got = parties_of(es)
    assert got == [reference(e) for e in es]
    assert [p.kind for p in got] == ["receipt", "receipt", "commitment", "registry", "receipt", "receipt",
                                     "conformance"]
    assert got[4].signer == DIDS[3]  # ed25519:<base64> and did:key: one name
    assert got[5].signer == "did:web:agent.example"
    assert got[6].signer == DIDS[4] and got[6].names == (DIDS[0],)
    assert parties(b"go entry 17\n") == Parties("opaque")


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 6), st.integers(0, 300))
def test_no_bytes_make_it_raise_and_damage_never_invents_a_signer(noise, which, cut):
    """Random bytes, and real entries cut short or with bytes changed, are read without an
    exception; whatever the fast path reads, the strict decoder (where it decodes) agrees."""
    assert parties(noise).kind in ("opaque", "commitment", "receipt", "conformance", "registry")
    e = entries()[which]
    for damaged in (e[:cut], e[:cut] + noise[:8] + e[cut + 8:]):
        p = parties(damaged)
        ref = reference(damaged)
        if ref.kind != "opaque":
            assert p == ref, (damaged, p, ref)


# --- the journal -------------------------------------------------------------------------------


def test_journal_lines_name_the_entry_the_log_stores():
    e = receipt_entry(hashlib.sha256(b"r").digest(), SEEDS[0])
    line = journal_line_for(e, at="2026-05-02T10:00:00Z")
    keys, used, bad = parse_journal(line + b"not json\n" + b'{"type": "other"}\n' + line[:20])
    assert keys == [leaf_hash(canonical_entry(e))] and bad == 2 and used == len(line) + 9 + 18
    # a log that keeps the signer's DID document in the entry stores other bytes: same key
    stored = dcbor({**e, "signer": "did:web:a.example", "did_document": {"id": "did:web:a.example"}})
    sent = dcbor({**e, "signer": "did:web:a.example"})
    assert anchored_key(stored) == anchored_key(sent) == leaf_hash(sent) != leaf_hash(stored)
    assert json.loads(journal_line(sent, entry_type="receipt", signer=None, at="x"))["key"] == leaf_hash(sent).hex()


def test_oap_log_add_writes_the_journal_before_anything_leaves(tmp_path):
    """An unreachable log: the entry could not be anchored, and the journal line is there
    (written first, so no monitor can see the entry before it)."""
    from click.testing import CliRunner

    from tlog.runtime.keyfiles import write_private_key
    from tlog.server.cli import main

    key = tmp_path / "k.key"
    write_private_key(key, Signer.generate("k").to_skey())
    r = CliRunner().invoke(main, ["add", "--hash", "sha256:" + "11" * 32, "--key", str(key), "--url",
                                  "http://127.0.0.1:9", "--journal", str(tmp_path / "j.jsonl"), "--timeout", "2",
                                  "--out", str(tmp_path / "x.tlog-proof")])
    assert r.exit_code == 1
    [doc] = [json.loads(line) for line in (tmp_path / "j.jsonl").read_text().splitlines()]
    assert doc["type"] == "oap-anchored/v1" and doc["entry_type"] == "receipt"
    assert oct((tmp_path / "j.jsonl").stat().st_mode & 0o777) == "0o600"


# --- split views -------------------------------------------------------------------------------

LOG = Signer("split.example/log", bytes(range(32)))
WITNESS = CosignatureSigner("w.example", bytes(range(1, 33)))
POLICY = TrustPolicy.from_text(f"log {LOG.vkey}\nwitness w {WITNESS.vkey}\nquorum w\n")


def note(size: int, root: bytes, *, cosign: bool = True) -> str:
    text = Checkpoint(LOG.name, size, root).to_text()
    n = sign_note(text, [LOG])
    if cosign:
        n = str(add_signatures(n, NoteSignature(WITNESS.name, WITNESS.key_id, WITNESS.cosign(text, 7))))
    return n


def test_split_view_evidence_is_proven_offline_and_nothing_else_is():
    leaves = hash_entries([b"e%d" % i for i in range(10)])
    view = memory_view(leaves)
    other = memory_view(hash_entries([b"e%d" % i for i in range(5)] + [b"forged"]))
    a = note(10, view.root)
    same_size = SplitView(a, note(10, hashlib.sha256(b"x").digest(), cosign=False))
    r = check_split_view(parse_split_view(same_size.to_bytes()), POLICY)
    assert (r.cosigners_a, r.quorum_b) == (frozenset({"w"}), False) and "two roots for size 10" in r.describe()
    proof = tuple(view.consistency_proof(6))
    prefix = SplitView(a, note(6, other.root), proof, memory_view(leaves[:6]).root)
    r = check_split_view(parse_split_view(prefix.to_bytes()), POLICY)
    assert "not a prefix" in r.describe() and "cosigned by both: w" in r.describe()
    refusals = [
        (SplitView(a, a), "same root"),
        (SplitView(a, note(6, memory_view(leaves[:6]).root), proof, memory_view(leaves[:6]).root), "is a prefix"),
        (SplitView(a, note(6, other.root), proof, other.root), "does not show"),  # a made-up root_in_a
        (SplitView(a, note(6, other.root)), "need root_in_a"),
        (SplitView(note(6, other.root), a, proof, other.root), "must be the larger"),
        (SplitView(a, sign_note(Checkpoint(LOG.name, 10, bytes(32)).to_text(), [Signer(LOG.name, bytes(32))])),
         "not signed by a log"),
    ]
    for evidence, why in refusals:
        with pytest.raises(SplitViewError, match=why):
            check_split_view(parse_split_view(evidence.to_bytes()), POLICY)


# --- the tree cursor -----------------------------------------------------------------------------


def test_the_cursor_keeps_the_right_edge_and_hands_back_each_full_tile():
    rng = np.random.default_rng(5)
    for n in (1, 255, 256, 257, 65_536, 65_537, 70_001):
        leaves = rng.integers(0, 256, (n, 32), dtype=np.uint8)
        c, done, i = TreeCursor(), [], 0
        while i < n:
            k = min(256 - c.size % 256, int(rng.integers(1, 300)), n - i)
            done += c.add(leaves[i:i + k].tobytes())
            i += k
            if rng.random() < 0.1:
                c = TreeCursor(c.size, c.partial_bytes())  # saved and resumed
        assert c.root() == root_of_leaves(leaves)
        assert len(c.partial_bytes()) <= 32 * 255 * 3
        assert [(lv, ix) for lv, ix, _ in done if lv == 0] == [(0, j) for j in range(n // 256)]
        for lv, ix, data in done:
            if lv == 0:
                assert data == leaves[ix * 256:(ix + 1) * 256].tobytes()
    with pytest.raises(ValueError):
        TreeCursor(3, b"\0" * 32)


# --- configuration -------------------------------------------------------------------------------


def cfg(tmp_path: Path, text: str) -> MonitorConfig:
    (tmp_path / "m.toml").write_text(text)
    return load(MonitorConfig, section="monitor", env_prefix="OAP_MONITOR_TEST_", file=tmp_path / "m.toml")


LOGS = '[[logs]]\nurl = "https://log.example"\npolicy = "log.policy"\n'


def test_the_configuration_refuses_what_it_cannot_mean(tmp_path):
    ok = cfg(tmp_path, f'metrics = "127.0.0.1:9466"\n{LOGS}[[watch]]\nsigner = "ed25519:{b64enc(bytes(32))}"\n'
                       f'[[alerts]]\nfile = "a.jsonl"\n[[alerts]]\nwebhook = "https://hooks.example/x"\n')
    assert (ok.host, ok.port) == ("127.0.0.1", 9466) and ok.watch[0].did == did_key_from_public(bytes(32))
    assert [s.name for s in ok.alerts] == ["file:a.jsonl", "webhook:https://hooks.example/x"]
    resolved = ok.resolve_paths(tmp_path)
    assert resolved.logs[0].policy == tmp_path / "log.policy" and resolved.alerts[0].target == str(tmp_path / "a.jsonl")
    bad = [
        ("", "nothing to monitor"),
        (f'bogus = 1\n{LOGS}', "unknown setting 'bogus'"),
        (f'{LOGS}bogus = 1\n', "unknown key\\(s\\) bogus"),
        ('[[logs]]\nurl = "https://l.example"\n', "url and policy"),
        (f'{LOGS}[[watch]]\nsigner = "not a did"\n', "not a DID"),
        (f'{LOGS}[[alerts]]\nfile = "a"\nwebhook = "https://x.example"\n', "exactly one of"),
        (f'{LOGS}[[alerts]]\nwebhook = "http://hooks.example/x"\n', "plain http:// beyond loopback"),
        (f'{LOGS}[[alerts]]\nemail = "a@b.example"\nsmtp = "mail.example:25"\nsmtp_tls = "none"\n', "in the clear"),
        (f'{LOGS}[[alerts]]\nfile = "a"\nkinds = ["nope"]\n', "unknown kind"),
        (f'{LOGS}[registry]\nurl = "https://r.example"\nkey = "did:web:r.example"\n', "did:key"),
        (f'poll_seconds = 0\n{LOGS}', "poll_seconds"),
    ]
    for text, why in bad:
        with pytest.raises(ConfigError, match=why):
            cfg(tmp_path, text)


def test_the_watch_file_is_read_every_time_and_its_bad_lines_skipped(tmp_path):
    (tmp_path / "watch.txt").write_text(f"# comment\n{DIDS[0]}  the agent\nnonsense\n\n{DIDS[1]}#key-1\n")
    with pytest.raises(ConfigError, match="at the top of the file"):
        cfg(tmp_path, f'{LOGS}watch_files = ["{tmp_path / "watch.txt"}"]\n')
    c = cfg(tmp_path, f'watch_files = ["{tmp_path / "watch.txt"}"]\n{LOGS}')
    assert c.load_watch_files() == {DIDS[0], DIDS[1]}
    (tmp_path / "watch.txt").unlink()
    assert c.load_watch_files() == frozenset()


# --- state and deliveries --------------------------------------------------------------------------


def alert(n: int) -> NewAlert:
    return NewAlert({"id": f"{n:064x}", "kind": "log_invalid", "summary": f"alert {n}", "evidence": {}})


def test_an_alert_is_raised_once_and_a_sink_gets_them_in_order(tmp_path):
    s = State(tmp_path / "state")
    try:
        targets = [("file:x", "", ""), ("hooks", "a", "split_view")]
        assert s.raise_alerts([alert(1), alert(2)], targets) == [f"{1:064x}", f"{2:064x}"]
        assert s.raise_alerts([alert(1)], targets) == []  # a stable id is raised once
        assert s.queued() == {"file:x": 2}  # the hooks sink takes only split views
        [d1, d2] = s.due("file:x", now=1e12)
        s.failed(d1, "down", next_at=1e12 + 10)
        assert s.due("file:x", now=1e12) == []  # the newer alert waits behind the one in backoff
        assert s.next_due("file:x") == 1e12 + 10
        s.delivered(s.due("file:x", now=1e12 + 10)[0])
        assert [d.doc["id"] for d in s.due("file:x", now=1e12 + 10)] == [d2.doc["id"]]
    finally:
        s.close()
    with pytest.raises(ConfigError, match="in use"):
        s2 = State(tmp_path / "state")
        State(tmp_path / "state")
    s2.close()


def test_the_file_sink_writes_each_alert_once_across_a_crash(tmp_path):
    """The line was written, then the monitor died before it marked the delivery done: after
    the restart the sink finds the line where it was written and does not write it again."""
    from monitor.config import Sink
    from monitor.metrics import MonitorMetrics
    from monitor.sinks import Deliverer
    from tlog.transport import Outbound

    out = tmp_path / "alerts.jsonl"
    sink = Sink("file", str(out), "f")
    s = State(tmp_path / "state")
    try:
        s.raise_alerts([alert(1), alert(2)], [("f", "", "")])
        d = s.due("f", now=1e12)[0]
        line = json.dumps(d.doc, separators=(",", ":")) + "\n"
        out.write_text(line)
        s.set_mark(d, 0)  # what the sink records before it writes

        async def go() -> int:
            import aiohttp

            async with aiohttp.ClientSession() as session:
                return await Deliverer(s, (sink,), MonitorMetrics(), session, Outbound(), timeout=5,
                                       retry_max=1).deliver_due()

        assert asyncio.run(go()) == 0
    finally:
        s.close()
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == [f"{1:064x}", f"{2:064x}"]
    assert os.stat(out).st_size == 2 * len(line)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 6), st.binary(max_size=120)), min_size=1, max_size=40),
       st.integers(0, 5), st.booleans())
def test_reading_a_bundle_in_c_gives_what_the_python_reading_gives(picks, cut, exact):
    """`read_bundle` through tlog._native and through parse_entry_bundle + leaf_hashes + parties_of:
    the same leaf hashes, the same parties, the same entries, the same refusals."""
    from tlog.errors import FormatError
    from tlog.formats import parties as P
    from tlog.formats.hashing import native
    from tlog.formats.tiles import encode_entry_bundle

    from tests.support.tools import need

    need("native")
    assert native is not None
    es = [entries()[x] if isinstance(x, int) else x for x in picks]
    data = encode_entry_bundle(es)
    data = data[:len(data) - cut] if cut else data + b"\0" * (1 - exact)
    width = len(es)
    results = []
    for read in (P.read_bundle, P._read_bundle_py):
        try:
            if read is P.read_bundle:
                r = read(data, width, exact=exact)
            else:
                r = read(data, width, exact)
        except FormatError:
            results.append(None)
            continue
        results.append((r.leaves, r.named, [r.entry(k) for k in range(width)]))
    assert results[0] == results[1]
    if results[0] is not None:
        assert results[0][2] == es and results[0][0] == b"".join(leaf_hash(e) for e in es)
