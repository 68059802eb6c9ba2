"""Key rotation, end to end with real processes on 127.0.0.1 (docs/architecture.md §3.9,
ops/runbooks/key-rotation.md): a running log moves from key A to key B through an overlap in
which every checkpoint carries both signatures, while a witness and a mirror follow the new key
on SIGHUP (no restart) and cosign every checkpoint; and a witness moves from its key W1 to W2
while the log's quorum counts it throughout. `.tlog-proof` bundles made before, during and
after each overlap are verified offline by `oap-log verify` against old and new policies.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import aiohttp
import pytest

from tlog.formats.checkpoint import parse_checkpoint
from tlog.formats.keys import CosignatureSigner, Signer
from tlog.formats.note import parse_note, sign_note
from tlog.formats.proofbundle import parse_proof_bundle

from tests.support.alertsinks import free_port
from tests.support.mirror import mirror_service
from tests.support.services import BIN, ORIGIN, Service, witness_service
from tests.support.waiting import until

pytestmark = pytest.mark.slow


def cli(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([str(BIN / args[0]), *args[1:]], capture_output=True, text=True, timeout=120)
    if ok:
        assert p.returncode == 0, f"{args}: {p.stdout}{p.stderr}"
    return p


def log_keygen(path: Path) -> str:
    cli("oap-log", "keygen", "--name", ORIGIN, "--out", str(path))
    return Path(f"{path}.vkey").read_text().strip()


class RotatingLog:
    """`oap-log serve` from a TOML file the test rewrites between restarts (same data directory)."""

    def __init__(self, tmp: Path, policy: Path) -> None:
        self.tmp, self.policy, self.data = tmp, policy, tmp / "log-data"
        self.svc: Service | None = None
        self.bundles = 0

    def start(self, key: Path, *extra: Path) -> Service:
        if self.svc is not None:
            assert self.svc.stop() == 0, self.svc.log_text
        cfg = self.tmp / "log.toml"
        cfg.write_text(f'[log]\norigin = "{ORIGIN}"\nkey_file = "{key}"\nextra_key_files = {json.dumps([str(k) for k in extra])}\n'
                       f'witness_policy = "{self.policy}"\nwitness_timeout = 30\nbatch_interval_ms = 5\n')
        self.svc = Service("log", [str(BIN / "oap-log"), "serve", "--config", str(cfg), "--data", str(self.data),
                                   "--port", "0"]).start()
        return self.svc

    def anchor(self) -> Path:
        """One entry anchored with `oap-log add` (the log answers once its quorum cosigned)."""
        self.bundles += 1
        out = self.tmp / f"b{self.bundles}.tlog-proof"
        cli("oap-log", "add", "--commitment", "--hash", "sha256:" + os.urandom(32).hex(), "--url", self.svc.url, "--out", str(out))
        return out


def verifies(bundle: Path, policy: Path) -> bool:
    p = cli("oap-log", "verify", "--policy", str(policy), str(bundle), ok=False)
    assert p.returncode in (0, 1), p.stdout + p.stderr  # 1: a bundle that does not verify; else a usage error
    return p.returncode == 0


def signers_of(bundle: Path) -> set[str]:
    """The key IDs (hex) of the signatures a bundle's checkpoint carries."""
    return {s.key_id.hex() for s in parse_note(parse_proof_bundle(bundle.read_text()).checkpoint).signatures}


def key_id(vkey: str) -> str:
    return vkey.split("+")[1]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


async def info(url: str) -> dict:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/v1/info") as r:
        assert r.status == 200
        return await r.json()


def reload(svc: Service, config: Path, old: str, new: str) -> None:
    """Edit a witness's or mirror's configuration file and send it SIGHUP: no restart."""
    config.write_text(config.read_text().replace(old, new))
    os.kill(svc.pid, signal.SIGHUP)


async def test_a_running_log_moves_from_key_a_to_key_b_witnessed_and_mirrored_throughout(tmp_path):
    a, b = tmp_path / "a.key", tmp_path / "b.key"
    va, vb = log_keygen(a), log_keygen(b)
    w = witness_service(tmp_path / "w", va).start()
    m = mirror_service(tmp_path / "m", [(ORIGIN, va, "")]).start()
    cosigners = (f"witness w {w.vkey} {w.url}\nmirror m {m.vkey} {m.url}\ngroup both all w m\nquorum both\n")
    log = RotatingLog(tmp_path, write(tmp_path / "witnesses.policy", cosigners))
    old = write(tmp_path / "old.policy", f"log {va}\n{cosigners}")  # what clients held before the rotation
    both = write(tmp_path / "both.policy", f"log {va}\nlog {vb}\n{cosigners}")
    new = write(tmp_path / "new.policy", f"log {vb}\n{cosigners}")
    # Go's note.Verifiers, and ours, look a signature up by (name, key ID): two log lines of one
    # origin are one log, so `logs 2` cannot be met by its two keys
    assert "lists only 1 log" in cli("oap-log", "verify", "--policy", str(write(
        tmp_path / "two.policy", f"log {va}\nlog {vb}\nlogs 2\nquorum none\n")), str(old), ok=False).stderr

    try:
        # before: key A alone
        log.start(a)
        before = log.anchor()
        assert signers_of(before) >= {key_id(va)} and key_id(vb) not in signers_of(before)

        # the overlap, step 1: A signs first, B too; the witness and mirror know only A yet
        svc = log.start(a, b)
        assert f"also signing: {vb}" in svc.log_text
        during_a = log.anchor()
        assert {key_id(va), key_id(vb)} <= signers_of(during_a)
        async with aiohttp.ClientSession() as s, s.get(f"{svc.url}/v1/policy") as r:
            published = await r.text()
        assert f"log {va}" in published and f"log {vb}" in published  # clients fetch both keys
        assert (await info(svc.url))["verifier_keys"] == [va, vb]
        # the witness and the mirror learn key B from their operators: a config edit and SIGHUP
        reload(w, tmp_path / "w" / "witness.toml", f'vkey = "{va}"', f'vkey = ["{va}", "{vb}"]')
        reload(m, tmp_path / "m" / "mirror.toml", f'vkey = "{va}"', f'vkey = ["{va}", "{vb}"]')
        assert await until(lambda: _has_keys(w.url, [va, vb]), 30, "the witness to follow key B")
        assert await until(lambda: _has_keys(m.url, [va, vb]), 30, "the mirror to follow key B")
        # a broken file on SIGHUP changes nothing: the witness says so and keeps both keys
        wcfg = tmp_path / "w" / "witness.toml"
        good = wcfg.read_text()
        wcfg.write_text(good.replace(f'"{vb}"]', '"not a vkey"]'))
        os.kill(w.pid, signal.SIGHUP)
        await until(lambda: "was not reloaded" in w.log_text, 30, "the witness to refuse the broken file")
        assert w.alive() and await _has_keys(w.url, [va, vb])
        wcfg.write_text(good)

        # the overlap, step 2: B is the log's key now, A still signs
        svc = log.start(b, a)
        during_b = log.anchor()
        assert {key_id(va), key_id(vb)} <= signers_of(during_b)
        assert (tmp_path / "log-data" / "log.vkey").read_text().strip() == vb

        # after: B alone; the witness and mirror drop A, again without a restart
        log.start(b)
        reload(w, tmp_path / "w" / "witness.toml", f'vkey = ["{va}", "{vb}"]', f'vkey = "{vb}"')
        reload(m, tmp_path / "m" / "mirror.toml", f'vkey = ["{va}", "{vb}"]', f'vkey = "{vb}"')
        assert await until(lambda: _has_keys(w.url, [vb]), 30, "the witness to drop key A")
        assert await until(lambda: _has_keys(m.url, [vb]), 30, "the mirror to drop key A")
        after = log.anchor()
        assert key_id(va) not in signers_of(after) and key_id(vb) in signers_of(after)
        assert w.alive() and m.alive(), "the witness and the mirror were never restarted"

        # every bundle verifies offline wherever its keys allow, cosigned by the witness and the mirror
        for bundle in (before, during_a, during_b, after):
            assert verifies(bundle, both), bundle
        for bundle in (before, during_a, during_b):
            assert verifies(bundle, old), bundle
        assert not verifies(after, old)  # a client still on key A alone: the overlap ended without it
        for bundle in (during_a, during_b, after):
            assert verifies(bundle, new), bundle
        assert not verifies(before, new)  # made before B existed: verify it with a policy that lists A

        # never two roots for one size, under either key: every checkpoint the witness and the
        # bundles saw grows one tree
        roots: dict[int, bytes] = {}
        for bundle in (before, during_a, during_b, after):
            cp = parse_checkpoint(parse_note(parse_proof_bundle(bundle.read_text()).checkpoint).text)
            assert roots.setdefault(cp.size, cp.root) == cp.root
        assert sorted(roots) == sorted(set(roots)) and len(roots) == 4

        # the witness now refuses what key A alone signs (a stolen old key cannot be witnessed)
        size = max(roots)
        forged = sign_note(f"{ORIGIN}\n{size + 1}\n{'A' * 43}=\n", [Signer.from_skey(a.read_text().strip())])
        body = f"old 0\n\n{forged}".encode()
        async with aiohttp.ClientSession() as s, s.post(f"{w.url}/add-checkpoint", data=body) as r:
            assert r.status == 403, await r.text()
    finally:
        for svc in (log.svc, w, m):
            if svc is not None:
                svc.stop()


async def _has_keys(url: str, vkeys: list[str]) -> bool:
    logs = (await info(url))["logs"]
    return any(lg["origin"] == ORIGIN and lg["vkeys"] == vkeys for lg in logs)


async def test_a_witness_moves_from_key_w1_to_w2_while_the_logs_quorum_counts_it_throughout(tmp_path):
    a = tmp_path / "a.key"
    va = log_keygen(a)
    wdata, port = tmp_path / "w", free_port()

    def witness(**env: str) -> Service:
        return witness_service(wdata, va, "--port", str(port), env={**os.environ, **env}).start()

    w = witness()
    w1 = w.vkey
    url = w.url
    log = RotatingLog(tmp_path, write(tmp_path / "witnesses.policy", f"witness w1 {w1} {url}\nquorum w1\n"))
    try:
        log.start(a)
        before = log.anchor()

        # the overlap, step 1: the witness makes W2 and cosigns with W1 and W2 (its state kept)
        w2 = cli("oap-witness", "keygen", "--name", "witness.test", "--out", str(tmp_path / "w2.key")).stdout.strip()
        w.stop()
        w = witness(OAP_WITNESS_EXTRA_KEY_FILES=str(tmp_path / "w2.key"))
        assert w.url == url
        async with aiohttp.ClientSession() as s, s.get(f"{url}/v1/info") as r:
            assert (await r.json())["verifier_keys"] == [w1, w2]
        during_w1 = log.anchor()  # the log's quorum still names W1 alone: it keeps that cosignature

        # the log's quorum takes either key of this one witness (one witness, one vote)
        group = f"witness w1 {w1} {url}\nwitness w2 {w2} {url}\ngroup w any w1 w2\nquorum w\n"
        write(log.policy, group)
        log.start(a)
        during_both = log.anchor()
        assert {key_id(w1), key_id(w2)} <= signers_of(during_both)

        # after: the witness cosigns with W2 alone
        w.stop()
        w = witness(OAP_WITNESS_KEY_FILE=str(tmp_path / "w2.key"))
        after = log.anchor()
        assert key_id(w1) not in signers_of(after) and key_id(w2) in signers_of(after)

        old = write(tmp_path / "old.policy", f"log {va}\nwitness w1 {w1}\nquorum w1\n")
        both = write(tmp_path / "both.policy", f"log {va}\nwitness w1 {w1}\nwitness w2 {w2}\ngroup w any w1 w2\n"
                                                "quorum w\n")
        new = write(tmp_path / "new.policy", f"log {va}\nwitness w2 {w2}\nquorum w2\n")
        for bundle in (before, during_w1, during_both, after):
            assert verifies(bundle, both), bundle
        for bundle in (before, during_w1, during_both):
            assert verifies(bundle, old), bundle
        assert not verifies(after, old)
        assert verifies(during_both, new) and verifies(after, new)
        assert not verifies(before, new)
        # one witness, one vote: its two keys together do not make a 2-of-2 with another witness
        other = CosignatureSigner.generate("other.witness").vkey
        two = write(tmp_path / "two.policy", f"log {va}\nwitness w1 {w1}\nwitness w2 {w2}\nwitness x {other}\n"
                                               "group w any w1 w2\ngroup q 2 w x\nquorum q\n")
        assert not verifies(during_both, two)
    finally:
        for svc in (log.svc, w):
            if svc is not None:
                svc.stop()
