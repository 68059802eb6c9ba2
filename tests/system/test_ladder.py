"""The §31 ladder climbed end to end (OAP-CORE-1.0 §31, §22.1, §5.1; docs/architecture.md §4-§6):
five participants, each a did:web on an HTTPS host of its own (localhost names on 127.0.0.1,
`tlog.cli.didhost`, with a test CA every resolver trusts), each running a peer witness
(`oap-witness serve`), and a registry (`oap-registry serve`) anchored in two logs
(`oap-log serve`). The participants become registered L4 participants by witnessing each
other, then a new implementation climbs L0 -> L5 through the CLIs and HTTP APIs alone.
Every process is a real one; the test only writes files a participant's web server and
the test suite would (a DID document, a results file, an audit report)."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote
from urllib.request import urlopen

import pytest

from registry.receipts import register as register_receipt
from registry.receipts import request_witnesses
from registry.statusverify import verify_status
from tlog.cli import didhost
from tlog.client.verifier import TrustPolicy
from tlog.formats import ed25519
from tlog.formats.conformance import new_claims, sign_conformance
from tlog.formats.diddoc import ed25519_document
from tlog.formats.ed25519 import generate_seed
from tlog.formats.keys import Signer
from tlog.runtime import children
from tlog.runtime.keyfiles import write_private_key
from witness.keyfiles import identity_key_name

from tests.support.ladder import registry_key, registry_process
from tests.support.services import BIN, Service

pytestmark = pytest.mark.slow
CLI = str(BIN / "oap-registry")
N = 5
SUITE = {"name": "oap-test-suite", "version": "1.0.0"}
RESULTS = "sha256:" + "ab" * 32


def run(*args: str, env: dict[str, str], ok: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess:
    r = children.run([*args], timeout=120, capture_output=True, text=True, env=env, cwd=cwd)
    if ok:
        assert r.returncode == 0, f"{' '.join(args)}: {r.stdout}{r.stderr}"
    return r


def out_json(r: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


@dataclass
class Participant:
    name: str  # p1.localhost
    did: str
    dir: Path
    seed: bytes
    witness: Service | None = None
    l4_id: str = ""

    @property
    def url(self) -> str:
        assert self.witness is not None
        return self.witness.url

    @property
    def l4(self) -> Path:
        return self.dir / "L4.json"


class Network:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.host = didhost.serve(root / "did-web")
        self.ca = self.host.did_host.ca_file
        dids = {"OAP_LOG_DID_CA_FILE": str(self.ca), "OAP_LOG_DID_ALLOW_PRIVATE_NETWORKS": "true"}
        self.logs = [Service("log", [str(BIN / "oap-log"), "serve", "--data", str(root / f"log-{x}"), "--port", "0",
                                     "--origin", f"log-{x}.localhost/log", "--batch-interval-ms", "5"],
                             {**os.environ, **dids}) for x in "ab"]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda s: s.start(), self.logs))
            self.registry = registry_process(root / "registry", [s.url for s in self.logs], did_ca_file=self.ca,
                                             did_allow_private_networks=True).start()
            self.key = registry_key(root / "registry")
            self.env = {**os.environ, "OAP_REGISTRY_URL": self.registry.url, "OAP_LOG_URL": self.logs[0].url}
            self.people = [self._participant(i) for i in range(1, N + 1)]
            list(pool.map(lambda p: p.witness.start(), self.people))
        asyncio.run(self._bootstrap())

    async def _bootstrap(self) -> None:
        """Each participant registers its L3 receipt and has its L4 receipt witnessed and
        registered, over the services' HTTP APIs (`registry.receipts`, what `oap-registry
        conformance` runs): participant 1 witnesses the others', participant 2, holding L4
        then, witnesses participant 1's. Each receipt is written where its witness reads it."""
        async def climb(p: Participant, by: Participant) -> None:
            now = datetime.now(UTC)
            l3 = sign_conformance(new_claims(p.did, "L3", results_digest=RESULTS, suite=SUITE, issued_at=now),
                                  p.seed, by=f"{p.did}#key-1")
            await register_receipt(self.registry.url, l3)
            l4 = sign_conformance(new_claims(p.did, "L4", results_digest=RESULTS, suite=SUITE, issued_at=now),
                                  p.seed, by=f"{p.did}#key-1")
            signed, answers = await request_witnesses(l4, [by.url], self.logs[0].url)
            assert answers[0].signature is not None, answers[0].error
            p.l4.write_text(json.dumps(signed))
            ack, status = await register_receipt(self.registry.url, signed)
            assert status == "good", ack
            p.l4_id = l4["id"]

        first, second = self.people[:2]
        await asyncio.gather(*(climb(p, first) for p in self.people[1:]))
        await climb(first, second)

    def _participant(self, i: int) -> Participant:
        """Participant i: its identity key, its DID document on its web host listing it, and
        its peer witness's configuration. Participant 1 bootstraps the network: nobody holds
        L4 yet, so it witnesses without a receipt of its own (require_own_level "none")."""
        name = f"p{i}.localhost"
        did = f"did:web:{name}%3A{self.host.port}"
        d = self.root / name
        d.mkdir()
        seed = generate_seed()
        write_private_key(d / "identity.key", Signer(identity_key_name(name), seed).to_skey())
        (self.root / "did-web" / name / ".well-known").mkdir(parents=True)
        (self.root / "did-web" / name / ".well-known" / "did.json").write_text(
            json.dumps(ed25519_document(did, {"key-1": ed25519.public_from_seed(seed)})))
        p = Participant(name, did, d, seed)
        vkeys = json.dumps([s.vkey for s in self.logs])
        (d / "witness.toml").write_text(
            f'[witness]\nname = "{name}"\nport = 0\nrate_limit = 0\nidentity_did = "{did}#key-1"\n'
            f'own_receipt = "{p.l4}"\nrequire_own_level = "{"none" if i == 1 else "L4"}"\ntrusted_logs = {vkeys}\n'
            f'registry_url = "{self.registry.url}"\nregistry_key = "{self.key}"\n'
            f'did_ca_file = "{self.ca}"\ndid_allow_private_networks = true\n')
        p.witness = Service("witness", [str(BIN / "oap-witness"), "serve", "--config", str(d / "witness.toml"),
                                        "--data", str(d)], self.env)
        return p

    def status(self, status_id: str) -> tuple[int, dict]:
        """`oap-registry status`, verified against the pinned registry key and both logs."""
        r = run(CLI, "status", status_id, "--registry-key", self.key, "--log-vkey", self.logs[0].vkey,
                "--log-vkey", self.logs[1].vkey, "--json", env=self.env, ok=False)
        return r.returncode, json.loads(r.stdout)

    def close(self) -> None:
        for s in [*(p.witness for p in self.people if p.witness), self.registry, *self.logs]:
            s.kill()
        self.host.stop()


@pytest.fixture(scope="module")
def network(tmp_path_factory):
    n = Network(tmp_path_factory.mktemp("ladder"))
    yield n
    n.close()


def make(net: Network, key: Path, subject: str, level: str, out: Path, *extra: str) -> str:
    results = out.parent / "results.json"
    if not results.exists():
        results.write_text('{"suite": "oap-test-suite 1.0.0", "passed": 412, "failed": 0}\n')
    r = run(CLI, "conformance", "make", "--key", str(key), "--subject", subject, "--level", level,
            "--suite-version", "1.0.0", "--results", str(results), "--out", str(out), *extra, env=net.env)
    return out_json(r)[0]["id"]


def register(net: Network, receipt: Path, ok: bool = True) -> subprocess.CompletedProcess:
    return run(CLI, "conformance", "register", str(receipt), env=net.env, ok=ok)


def witness(net: Network, receipt: Path, *who: Participant, ok: bool = True) -> subprocess.CompletedProcess:
    return run(CLI, "conformance", "request-witness", str(receipt), *(a for p in who for a in ("--witness", p.url)),
               env=net.env, ok=ok)


def test_every_peer_witness_is_a_registered_l4_participant(network):
    """The five witnesses witnessed each other's L4 receipts (the fixture): each is registered,
    answers `good` (verified against the registry key and both logs), and signs as its did:web."""
    net = network
    policy = TrustPolicy.for_logs([s.vkey for s in net.logs], 2)
    for p in net.people:
        with urlopen(f"{net.registry.url}/v1/status/{quote(p.l4_id, safe=':')}", timeout=30) as r:
            v = verify_status(json.loads(r.read()), registry=net.key, status_id=p.l4_id, policy=policy)
        assert (v.status, v.log_checked) == ("good", True)
        with urlopen(f"{net.registry.url}/v1/subjects/{quote(p.did, safe=':')}", timeout=30) as r:
            held = json.loads(r.read())
        levels = sorted(rec["record"]["level"] for rec in held["records"]
                        if rec["type"] == "conformance" and rec["record"]["subject"] == p.did)
        assert levels == ["L3", "L4"], held
        witnessed = [rec for rec in held["records"] if rec["record"]["subject"] != p.did]
        assert len(witnessed) == (N - 1 if p is net.people[0] else 1 if p is net.people[1] else 0)
        own = json.loads(p.l4.read_text())
        assert own["id"] == p.l4_id and len(own["signatures"]) == 2
        with urlopen(f"{p.url}/v1/info", timeout=30) as r:
            info = json.loads(r.read())
        assert (info["identity"], info["signs_as"], info["registry"]) == (p.did, f"{p.did}#key-1", net.registry.url)


def test_a_new_implementation_climbs_from_l0_to_l5(network, tmp_path):
    """Through the CLIs and HTTP APIs only, with the answers §31 gives at each rung."""
    net = network
    _, p2, p3, p4, p5 = net.people
    env, d = net.env, tmp_path
    run(CLI, "keygen", "--out", str(d / "impl.key"), env=env)
    me = f"did:web:impl.localhost%3A{net.host.port}"
    doc = run(CLI, "did-document", "--key", str(d / "impl.key"), "--did", me, env=env).stdout
    site = net.root / "did-web" / "impl.localhost" / ".well-known"  # the implementation's web server
    site.mkdir(parents=True)
    (site / "did.json").write_text(doc)
    key = d / "impl.key"

    # Before the registry knows it, a peer witness will not vouch for it (§22.1)
    make(net, key, me, "L4", d / "early.json")
    r = witness(net, d / "early.json", p2, ok=False)
    assert r.returncode == 1 and "knows nothing of the subject" in r.stderr, r.stderr

    # L0-L3: self-signed; L3 with the publisher check (a did:web whose document lists the key)
    for level in ("L0", "L1", "L2", "L3"):
        rid = make(net, key, me, level, d / f"{level}.json")
        registered = out_json(register(net, d / f"{level}.json"))[0]
        assert (registered["id"], registered["status"], registered["duplicate"]) == (rid, "good", False)
    code, v = net.status(rid)  # the L3 receipt, verified
    assert (code, v["status"], v["log_checked"]) == (0, "good", True), v

    # L4: refused without a witness, then one independent peer witness (§31)
    l4 = make(net, key, me, "L4", d / "L4.json")
    r = register(net, d / "L4.json", ok=False)
    assert r.returncode == 1 and "needs at least 1 witness signature" in r.stderr, r.stderr
    signed = out_json(witness(net, d / "L4.json", p5))
    assert [s["signed_as"] for s in signed] == [f"{p5.did}#key-1"]
    assert out_json(register(net, d / "L4.json"))[0]["status"] == "good"
    assert net.status(l4)[1]["status"] == "good"

    # L5: an auditor anchors its report in both logs and signs the attestation
    run(CLI, "keygen", "--out", str(d / "auditor.key"), env=env)
    (d / "report.json").write_text('{"report": "SOC 2 Type II", "period": "2025", "opinion": "unqualified"}\n')
    audit = out_json(run(CLI, "conformance", "audit", "--key", str(d / "auditor.key"), "--subject", me,
                         "--standard", "SOC 2 Type II", "--uri", "https://auditor.example/reports/impl.json",
                         "--report", str(d / "report.json"), "--log", net.logs[0].url, "--log", net.logs[1].url,
                         "--out", str(d / "audit.json"), env=env))[0]
    assert audit["subject"] == me and audit["auditor"].startswith("did:key:")
    l5 = make(net, key, me, "L5", d / "L5.json", "--audit", str(d / "audit.json"))
    # one witness is not three: the registry refuses it
    witness(net, d / "L5.json", p2)
    r = register(net, d / "L5.json", ok=False)
    assert r.returncode == 1 and "level L5 needs at least 3 witness signature(s), has 1" in r.stderr, r.stderr
    # two more, asked at once: three independent witnesses, each holding L4 in the registry
    signed = out_json(witness(net, d / "L5.json", p3, p4))
    assert sorted(s["signed_as"] for s in signed) == sorted(f"{p.did}#key-1" for p in (p3, p4))
    receipt = json.loads((d / "L5.json").read_text())
    assert [s["by"] for s in receipt["signatures"]] == [f"{me}#key-1", *(f"{p.did}#key-1" for p in (p2, p3, p4))]
    assert out_json(register(net, d / "L5.json"))[0]["status"] == "good"
    code, v = net.status(l5)
    assert (code, v["status"], v["valid"], v["log_checked"]) == (0, "good", True, True), v
    code, v = net.status(me)
    assert (code, v["status"]) == (0, "good"), v
    with urlopen(f"{net.registry.url}/v1/records/{l5}", timeout=30) as resp:
        stored = json.loads(resp.read())["record"]
    assert stored == receipt and stored["audit"]["auditor"] == audit["auditor"]
