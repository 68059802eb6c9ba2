"""`make run`'s local network: witnesses (the first with an ML-DSA-44 key too), a 2-of-3
witnessed log, the registry and a mirror the log pushes to, as separate processes on 127.0.0.1 (free ports),
then a clean Ctrl-C; and its services die with it however it ends (kill -9, a closed
terminal, kill -9 of `make run` itself)."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from itertools import pairwise

import pytest

from tlog.client.client import SyncLogClient
from tlog.client.verifier import TrustPolicy
from tlog.formats.ed25519 import generate_seed
from tlog.formats.entries import receipt_entry
from tlog.formats.hashing import leaf_hash
from tlog.formats.note import open_note, parse_note
from tlog.http.serve import port_holder
from witness.core import origin_path

from tests.support import localnet as ln
from tests.support.localnet import BIN, localnet
from tests.support.mirror import wait_for
from tests.support.proctree import command, descendants, wait_gone

pytestmark = pytest.mark.slow
GONE_WITHIN = 5.0  # seconds for every service to end once its supervisor is gone


def _witness_checkpoint(url: str, timeout: float = 60) -> str:
    """The witness's latest cosigned checkpoint, waiting (bounded) until it has one."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.read().decode()
        except urllib.error.HTTPError as e:
            if e.code != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def _checkpoint(url: str) -> str:
    with urllib.request.urlopen(url + "/checkpoint", timeout=10) as r:
        return r.read().decode()


def _mirrored(prefix: str, policy: TrustPolicy) -> int:
    """The size of the mirror's copy, checked against `policy` (its cosignature); 0 before it has one."""
    try:
        with urllib.request.urlopen(prefix + "/checkpoint", timeout=10) as r:
            return policy.verify_checkpoint(r.read().decode()).checkpoint.size
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return 0
        raise


def test_local_network_end_to_end(tmp_path):
    with localnet(tmp_path / "data") as net:
        policy_text = (tmp_path / "data" / "log" / "log.policy").read_text()
        assert policy_text.count("\nwitness ") == 4 and "\nwitness w1-mldsa44 witness-1.localhost+" in policy_text
        assert "group w1-any any w1 w1-mldsa44" in policy_text
        assert "group local-witnesses 2 w1-any w2 w3" in policy_text
        assert "\nmirror m1 mirror.localhost+" in policy_text and f" {net.mirror}\n" in policy_text
        policy = TrustPolicy.from_text(policy_text)
        with SyncLogClient(net.log, policy=policy) as log:
            a = log.anchor(receipt_entry(leaf_hash(b"localnet"), generate_seed()))
        assert len(parse_note(a.checkpoint).signatures) >= 3  # log + at least 2 witnesses
        verified = policy.verify_bundle(a.bundle).checkpoint
        assert len({n.split("-")[0] for n in verified.witnesses}) >= 2  # two distinct witnesses
        # witness 1's copy carries its Ed25519 and its ML-DSA-44 cosignatures, both verifying
        w1 = _witness_checkpoint(f"{net.witness}/{origin_path('oap.localhost/log')}/checkpoint")
        _, sigs = open_note(w1, policy.witnesses["w1"] + policy.witnesses["w1-mldsa44"])
        assert sorted(len(s.signature.blob) for s in sigs) == [72, 2428]
        # every explorer page finds the others (the log names them) and ships the network's policy
        info = json.loads(urllib.request.urlopen(f"{net.log}/v1/info", timeout=10).read())
        copy = f"{net.mirror}/{hashlib.sha256(b'oap.localhost/log').hexdigest()}"  # the mirror's copy of the log
        assert (info["public_url"], info["registry_url"], info["mirrors"]) == (net.log, net.registry, [copy])
        # one row per witness key: witness 1's ML-DSA-44 key has the same URL as its Ed25519 key
        assert [w["url"] for w in info["witnesses"]] == [f"http://127.0.0.1:{net.base + i}" for i in (1, 1, 2, 3)]
        for service in (net.log, net.registry, net.witness, net.mirror):
            with urllib.request.urlopen(f"{service}/ui/trust.policy", timeout=10) as r:
                assert r.read().decode() == policy_text, service
        # the registry's key is pinned in it, beside the log's (a `registry` line)
        registry_info = json.loads(urllib.request.urlopen(f"{net.registry}/v1/info", timeout=10).read())
        assert [(r.did, r.url) for r in policy.policy.registries] == [(registry_info["status_service"], net.registry)]
        clone = tmp_path / "clone"
        r = subprocess.run(["git", "clone", "-q", f"{net.registry}/registry.git", str(clone)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert subprocess.run(["git", "-C", str(clone), "log", "--oneline"], capture_output=True,
                              text=True, timeout=60).stdout.strip()
        # the log pushes to the mirror: its copy carries its cosignature, verified from its tiles
        # alone, and the log's own checkpoint gets the mirror's cosignature (outside the quorum)
        prefix = f"{net.mirror}/{hashlib.sha256(b'oap.localhost/log').hexdigest()}"
        assert f"  mirror    {net.mirror}   mirror.localhost+" in "".join(net.lines)
        mirror_policy = TrustPolicy.from_text((tmp_path / "data" / "mirror.policy").read_text())
        wait_for("the mirror to copy the entry", lambda: _mirrored(prefix, mirror_policy) > a.index)
        audit = subprocess.run([str(BIN / "oap-log"), "audit", prefix, "--policy", str(tmp_path / "data/mirror.policy")],
                               capture_output=True, text=True, timeout=120)
        assert audit.returncode == 0 and "mirrors among them: m1" in audit.stdout, audit.stdout + audit.stderr
        mirrored = wait_for("the mirror's cosignature on the log's checkpoint",
                            lambda: policy.mirrors(policy.verify_checkpoint(_checkpoint(net.log)).witnesses))
        assert mirrored == ["m1"]
    assert net.lines[-1] == "stopped cleanly\n", net.output[-2000:]
    assert_stopped_in_order(net, ["monitor"], ["registry"], ["log"], ["mirror"], ["w1", "w2", "w3"])


def assert_stopped_in_order(net: ln.LocalNet, *tiers: list[str]) -> None:
    """Each service stopped cleanly, and every one of a tier before any of the next began
    to: the registry (which writes to the log), the log frontends, then the witnesses."""
    at = {}
    for name in (n for tier in tiers for n in tier):
        line = f"[{name}] stopped cleanly\n"
        assert line in net.lines, net.output[-3000:]
        at[name] = net.lines.index(line)
    for earlier, later in pairwise(tiers):
        assert max(at[n] for n in earlier) < min(at[n] for n in later), net.output[-3000:]


def services_of(net: ln.LocalNet) -> set[tuple[int, int]]:
    """The service processes below what the test started (and their own children)."""
    assert net.proc is not None
    procs = descendants(net.proc.pid)
    names = " ".join(command(pid) for pid, _ in procs)
    for program in ("oap-witness serve", "oap-log serve", "oap-registry serve"):
        assert program in names, names
    return procs


def assert_all_gone(net: ln.LocalNet, procs: set[tuple[int, int]]) -> None:
    """Within GONE_WITHIN seconds no service runs, and every port of the network is free."""
    deadline = time.monotonic() + GONE_WITHIN
    left = wait_gone(procs, GONE_WITHIN)
    names = [command(pid) for pid, _ in left]
    for pid, _ in left:  # not to leave them running after the failure
        os.kill(pid, signal.SIGKILL)
    assert not left, names
    # (a process's last thread closes its sockets, which may come just after it shows as ended)
    while not ln.ports_free(net.ports):
        assert time.monotonic() < deadline, f"ports still in use: {[port_holder(p) for p in net.ports]}"
        time.sleep(0.02)


def test_kill_9_of_localnet_ends_every_service_and_the_next_start_works(tmp_path):
    net = ln.start(tmp_path / "data")
    try:
        procs = services_of(net)
        assert len(procs) >= 5
        net.proc.kill()  # kill -9 of oap-localnet: nothing of it runs to stop the services
        assert_all_gone(net, procs)
    finally:
        net.finish()

    # a second start on the same ports and data comes up; a closed terminal (SIGHUP) stops it cleanly
    again = ln.start(tmp_path / "data", base=net.base)
    try:
        procs = services_of(again)
        os.kill(again.proc.pid, signal.SIGHUP)
        assert again.finish() == 0
        assert_all_gone(again, procs)
    finally:
        if again.proc.poll() is None:
            again.proc.kill()
            again.finish()
    assert again.lines[-1] == "stopped cleanly\n", again.output[-2000:]
    assert_stopped_in_order(again, ["registry"], ["log"], ["mirror"], ["w1", "w2", "w3"])


def test_kill_9_of_make_run_ends_oap_localnet_and_every_service(tmp_path):
    """`make run` starts oap-localnet with --stop-with-parent; here a shell stands in for make."""
    net = ln.start(tmp_path / "data", wrap=["sh", "-c", '"$@"; exit $?', "sh"], extra=["--stop-with-parent"])
    try:
        procs = services_of(net)
        assert any("oap-localnet" in command(pid) for pid, _ in procs)
        net.proc.kill()
        assert_all_gone(net, procs)
    finally:
        net.finish()
    assert "stopped cleanly\n" in net.lines, net.output[-2000:]  # oap-localnet stopped them in order


def test_make_run_scale_stops_the_surviving_frontend_before_the_witnesses_it_pushes_to(tmp_path):
    """One of `make run-scale`'s frontends dies: oap-localnet stops the network, and the
    other frontend stops while its witnesses still answer (it used to find them gone and
    wait out its cosigning timeout)."""
    from tlog.cli.engines import free_port

    net = ln.start(tmp_path / "data", extra=["--scale", "--postgres-port", str(free_port()),
                                             "--s3-port", str(free_port())], timeout=300)
    try:
        procs = services_of(net)
        second = [pid for pid, _ in procs if "oap-log serve" in command(pid) and f"--port {net.base + 5} " in command(pid)]
        assert len(second) == 1
        os.kill(second[0], signal.SIGKILL)
        assert net.finish(300) == 0
        left = wait_gone(procs, GONE_WITHIN)
        for pid, _ in left:
            os.kill(pid, signal.SIGKILL)
        assert not left, [command(pid) for pid, _ in left]
    finally:
        if net.proc.poll() is None:
            net.proc.kill()
            net.finish()
    assert "log-2 exited with status -9; stopping\n" in net.lines, net.output[-3000:]
    assert net.lines[-1] == "stopped cleanly\n", net.output[-2000:]
    assert_stopped_in_order(net, ["registry"], ["log-1"], ["mirror"], ["w1", "w2", "w3"])
