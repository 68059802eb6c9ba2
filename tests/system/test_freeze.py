"""A log's end of life, as users and operators go through it with the CLIs and HTTP APIs
(real `oap-log`, `oap-witness`, `oap-registry` processes on 127.0.0.1):

- freezing: `oap-log freeze` publishes a final checkpoint, cosigned by the witness like any
  other and the last the log key ever signs; every write afterwards is 410 `deprecated`
  naming the successor; every entry stays provable, checked by Go's sumdb/tlog; on the
  scale-out backend the log is frozen while its frontends run and write, and the bucket
  alone serves the frozen log (docs/architecture.md §3.8);
- temporal shards: an entry outside a shard's window is refused (410 after it, 403 before
  it), and `oap-log add` follows the registry's signed log list to the successor shard with
  nothing changed in its configuration (§6.2).
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess

import aiohttp
import pytest

from tlog.client.shards import fetch_log_list, with_log
from tlog.client.verifier import TrustPolicy
from tlog.formats.proofbundle import parse_proof_bundle

from tests.support.services import BIN, ORIGIN, Service, log_service, registry_service, witness_service
from tests.support.waiting import until

pytestmark = pytest.mark.slow


def commitment(i: int) -> dict:
    return {"type": "commitment", "commitment": f"sha256:{i:064x}"}


def oap_log(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "oap-log"), *args], capture_output=True, text=True, timeout=timeout)


async def post(url: str, path: str, body: dict) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s, s.post(url + path, json=body) as r:
        return r.status, await r.json(content_type=None)


async def get_json(url: str) -> dict:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        assert r.status == 200, url
        return await r.json(content_type=None)


async def get_text(url: str) -> str:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        assert r.status == 200, url
        return await r.text()


def log_signature(note: str, origin: str = ORIGIN) -> list[str]:
    """The signature lines of `note` by the log key (a cosigner's are named otherwise)."""
    return [line for line in note.split("\n\n", 1)[1].splitlines() if line.startswith(f"\u2014 {origin} ")]


async def test_a_frozen_log_refuses_writes_naming_its_successor_and_stays_provable(tmp_path, started,
                                                                                   go_tlogverify):
    data = tmp_path / "log"
    first = started(log_service(data))  # makes the log key
    vkey = first.vkey
    first.stop()
    w = started(witness_service(tmp_path / "w", vkey))
    policy = tmp_path / "witnesses.policy"
    policy.write_text(f"witness w1 {w.vkey} {w.url}\ngroup g 1 w1\nquorum g\n")
    successor = "https://log-2027.example"
    config = tmp_path / "log.toml"
    config.write_text(f'[log]\norigin = "{ORIGIN}"\nwitness_policy = "{policy}"\nbatch_interval_ms = 5\n'
                      f'successor_url = "{successor}"\n')
    log = started(Service("log", [str(BIN / "oap-log"), "serve", "--config", str(config), "--data", str(data),
                                  "--port", "0"]))
    for i in range(300):  # more than a full tile, so the final tree has full and partial tiles
        status, _ = await post(log.url, "/v1/entries", commitment(i))
        assert status == 200
    before = tmp_path / "before.tlog-proof"
    r = oap_log("add", "--commitment", "--hash", f"sha256:{7:064x}", "--url", log.url, "--out", str(before))
    assert r.returncode == 0, r.stderr
    assert log.stop() == 0

    # an embedded log is frozen while it is stopped: one writer per data directory
    r = oap_log("freeze", "--config", str(config), "--data", str(data))
    assert r.returncode == 0, r.stderr
    frozen = json.loads(r.stdout.strip().splitlines()[-1])
    assert frozen["frozen"] is True and frozen["successor"] == successor and frozen["tree_size"] == 301
    final = frozen["checkpoint"]
    assert final.startswith(f"{ORIGIN}\n301\n")
    assert "\u2014 witness.test " in final  # witnessed like any other

    log = started(Service("log", [str(BIN / "oap-log"), "serve", "--config", str(config), "--data", str(data),
                                  "--port", "0"]))
    status, body = await post(log.url, "/v1/entries", commitment(1000))
    assert status == 410 and body["error"] == "deprecated" and body["successor"] == successor
    assert successor in body["message"]
    status, body = await post(log.url, "/v1/entries:batch", {"entries": [commitment(1001), commitment(1002)]})
    assert status == 410 and body["successor"] == successor
    status, body = await post(log.url, "/v1/entries", commitment(5))  # one it holds: refused all the same
    assert status == 410
    r = oap_log("add", "--commitment", "--hash", f"sha256:{1003:064x}", "--url", log.url,
                "--out", str(tmp_path / "after.tlog-proof"))
    assert r.returncode != 0 and "frozen" in r.stderr and successor in r.stderr
    info = await get_json(log.url + "/v1/info")
    assert info["frozen"] is True and info["successor"] == successor and info["tree_size"] == 301
    # the log serves its final checkpoint, cosigned again at the start, and signed nothing new
    served = await get_text(log.url + "/checkpoint")
    assert served.split("\n\n")[0] == final.split("\n\n")[0]
    assert log_signature(served) == log_signature(final)
    # every entry provable: the bundle made before the freeze, a proof fetched after it, and
    # Go's sumdb/tlog over the tiles, every entry's inclusion checked
    r = oap_log("verify", str(before), "--policy", str(data / "log.policy"))
    assert r.returncode == 0 and "1 verified, 0 failed" in r.stdout, r.stdout + r.stderr
    proof = tmp_path / "300.tlog-proof"
    r = oap_log("prove", "300", "--url", log.url, "--out", str(proof))
    assert r.returncode == 0, r.stderr
    assert parse_proof_bundle(proof.read_text()).index == 300
    out = await asyncio.to_thread(subprocess.run, [str(go_tlogverify), log.url, vkey, "301"],
                                  capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "OK size=301 checked=301", out.stdout + out.stderr
    # freezing again changes nothing (the first successor stands)
    assert log.stop() == 0
    r = oap_log("freeze", "--data", str(data), "--config", str(config), "--successor", "https://other.example")
    assert r.returncode == 0, r.stderr
    again = json.loads(r.stdout.strip().splitlines()[-1])
    assert again["successor"] == successor and again["tree_size"] == 301
    assert log_signature(again["checkpoint"]) == log_signature(final)


def test_a_scale_out_log_freezes_under_writes_and_the_bucket_alone_serves_it(engines, tmp_path, go_tlogverify):
    from tests.system.test_scaleout import SIGNER, Frontends

    f = Frontends(engines, tmp_path)
    successor = "https://log-next.example"
    try:
        one, two = f.start("one"), f.start("two")
        acked: dict[int, int] = {}
        refused: list[dict] = []

        async def writer(url: str, base: int, stop: asyncio.Event) -> None:
            async with aiohttp.ClientSession() as s:
                for i in range(base, base + 100_000):
                    if stop.is_set():
                        return
                    async with s.post(url + "/v1/entries", json=commitment(i)) as r:
                        doc = await r.json(content_type=None)
                        if r.status == 200:
                            acked[i] = doc["index"]
                        elif r.status == 410:
                            refused.append(doc)
                            return
                        else:
                            assert r.status == 503, doc

        async def scenario() -> tuple[dict, str]:
            stop = asyncio.Event()
            load = [asyncio.create_task(writer(u, k * 1_000_000, stop)) for k, u in enumerate([one.url, two.url])]
            await until(lambda: len(acked) >= 50, 60, "writes acknowledged before the freeze")
            r = await asyncio.to_thread(oap_log, "freeze", "--config", str(f.config), "--data", str(tmp_path / "cli"),
                                        "--successor", successor)
            assert r.returncode == 0, r.stderr
            frozen = json.loads(r.stdout.strip().splitlines()[-1])
            await until(lambda: len(refused) == 2 or all(t.done() for t in load), 60, "both writers refused")
            stop.set()
            await asyncio.gather(*load)
            return frozen, await get_text(one.url + "/checkpoint")

        frozen, served = asyncio.run(scenario())
        size = frozen["tree_size"]
        assert refused and all(d["error"] == "deprecated" and d["successor"] == successor for d in refused)
        # nothing acknowledged is lost, and nothing was sequenced after the freeze
        assert acked and max(acked.values()) < size and len(set(acked.values())) == len(acked)
        for svc in (one, two):  # every frontend refuses, and serves the final checkpoint
            status, body = asyncio.run(post(svc.url, "/v1/entries", commitment(999_999_999)))
            assert status == 410 and body["successor"] == successor
            assert asyncio.run(get_json(svc.url + "/v1/info"))["frozen"] is True
        assert served == frozen["checkpoint"]
        f.stop_all()
        # the bucket alone: its checkpoint is the final one, and Go's sumdb/tlog verifies it from its tiles
        bucket = engines.bucket_of(f.bucket)
        assert bucket.get("checkpoint").decode() == frozen["checkpoint"]
        out = subprocess.run([str(go_tlogverify), f.bucket, SIGNER.vkey, str(min(size, 200))],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and out.stdout.strip() == f"OK size={size} checked={min(size, 200)}", \
            out.stdout + out.stderr
        # a frontend started on the frozen store refuses at once, from the store
        three = f.start("three")
        status, body = asyncio.run(post(three.url, "/v1/entries", commitment(424242)))
        assert status == 410 and body["successor"] == successor
    finally:
        f.stop_all()


async def test_a_closed_shard_refuses_and_the_client_follows_the_signed_log_list(tmp_path, started):
    # two shards: 2020's, closed now, whose successor is the open-ended one from 2021
    old_dir, new_dir = tmp_path / "shard-2020", tmp_path / "shard-2021"
    new = started(log_service(new_dir, "--origin", "oap.localhost/log2021", env={
        **os.environ, "OAP_LOG_ACCEPT_FROM": "2021-01-01T00:00:00Z"}))
    old = started(log_service(old_dir, "--origin", "oap.localhost/log2020", env={
        **os.environ, "OAP_LOG_ACCEPT_FROM": "2020-01-01T00:00:00Z", "OAP_LOG_ACCEPT_UNTIL": "2021-01-01T00:00:00Z",
        "OAP_LOG_SUCCESSOR_URL": new.url}))
    future = started(log_service(tmp_path / "shard-2999", "--origin", "oap.localhost/log2999", env={
        **os.environ, "OAP_LOG_ACCEPT_FROM": "2999-01-01T00:00:00Z"}))
    # outside the window: refused, after it with the successor named, before it as not open yet
    status, body = await post(old.url, "/v1/entries", commitment(1))
    assert status == 410 and body["error"] == "deprecated" and body["successor"] == new.url
    assert body["accept_until"] == "2021-01-01T00:00:00Z"
    status, body = await post(future.url, "/v1/entries:batch", {"entries": [commitment(1)]})
    assert status == 403 and body["error"] == "policy_block" and body["accept_from"] == "2999-01-01T00:00:00Z"
    status, _ = await post(new.url, "/v1/entries", commitment(1))
    assert status == 200
    info = await get_json(old.url + "/v1/info")
    assert info["accept_until"] == "2021-01-01T00:00:00Z" and info["successor"] == new.url and not info["frozen"]

    lst = tmp_path / "logs.json"
    lst.write_text(json.dumps({"logs": [
        {"origin": "oap.localhost/log2020", "url": old.url, "vkey": old.vkey, "state": "active",
         "accept_from": "2020-01-01T00:00:00Z", "accept_until": "2021-01-01T00:00:00Z",
         "successor": "oap.localhost/log2021"},
        {"origin": "oap.localhost/log2021", "url": new.url, "vkey": new.vkey, "state": "active",
         "accept_from": "2021-01-01T00:00:00Z"}]}))
    reg = started(registry_service(tmp_path / "reg", new.url, env={**os.environ, "OAP_REGISTRY_LOG_LIST": str(lst)}))
    did = (await get_json(reg.url + "/v1/info"))["registry"]
    signed = await get_json(reg.url + "/v1/log-list")
    assert signed["type"] == "oap-log-list" and signed["registry"] == did and len(signed["logs"]) == 2

    # the client pins the old shard and the registry, nothing else
    client_policy = tmp_path / "client.policy"
    client_policy.write_text(f"log {old.vkey} {old.url}\nregistry {did} {reg.url}\n")
    out = tmp_path / "r.tlog-proof"
    r = await asyncio.to_thread(oap_log, "add", "--commitment", "--hash", f"sha256:{42:064x}",
                                "--policy", str(client_policy), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert f"names {new.url} (oap.localhost/log2021): anchored there" in r.stderr
    bundle = parse_proof_bundle(out.read_text())
    assert bundle.checkpoint.startswith("oap.localhost/log2021\n")
    # the bundle verifies offline against the pin plus the successor's key from the verified list
    policy = TrustPolicy.from_text(client_policy.read_text())
    listed = (await fetch_log_list(policy)).by_origin("oap.localhost/log2021")
    assert listed is not None and listed.vkey == new.vkey
    with_log(policy, listed).verify_checkpoint(bundle.checkpoint)

    # the monitor reads the same list, verified against the registry key
    (tmp_path / "new.policy").write_text(f"log {new.vkey}\n")
    (tmp_path / "monitor.toml").write_text(
        f'[[logs]]\nurl = "{new.url}"\npolicy = "{tmp_path / "new.policy"}"\n'
        f'[registry]\nurl = "{reg.url}"\nkey = "{did}"\nanchors = false\n')
    r = await asyncio.to_thread(subprocess.run, [str(BIN / "oap-monitor"), "run", "--once", "--config",
                                                 str(tmp_path / "monitor.toml"), "--state", str(tmp_path / "mstate")],
                                capture_output=True, text=True, timeout=120)
    assert f"log list: oap.localhost/log2020 at {old.url}: active, takes no entries now, " \
           "successor oap.localhost/log2021" in r.stdout, r.stdout + r.stderr
    assert f"log list: oap.localhost/log2021 at {new.url}: active, takes entries now" in r.stdout

    # a list the pinned key did not sign is not followed
    client_policy.write_text(f"log {old.vkey} {old.url}\nregistry did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK "
                             f"{reg.url}\n")
    r = await asyncio.to_thread(oap_log, "add", "--commitment", "--hash", f"sha256:{43:064x}",
                                "--policy", str(client_policy), "--out", str(tmp_path / "s.tlog-proof"))
    assert r.returncode != 0 and "cannot follow the registry's log list" in r.stderr, r.stderr
    assert not (tmp_path / "s.tlog-proof").exists()
