"""`oap-localnet` (what `make run` starts): a whole OAP trust network on 127.0.0.1.

Three witnesses (8081-8083; the first also cosigns with an ML-DSA-44 key), a log
(8080) that requires cosignatures from 2 of them, the registry (8090) anchored in that
log, a mirror (8084, C2SP tlog-mirror) the log pushes its checkpoints and entries
to, and a monitor (8086: metrics and status) that reads every entry of the log, compares
its checkpoints with the witnesses' and the mirror's, and alerts to data/monitor/alerts.jsonl,
each as its own process, as they would run in production. The witnesses are OAP
participants too: each signs conformance receipts as a did:web on a local HTTPS host
(8088, `tlog.cli.didhost`, with a local CA the network's DID resolvers trust) and holds
an L4 receipt in the registry (`tlog.cli.participants`), so a newcomer can climb the §31
ladder to L5 through them. Keys and configs are made on first start under ./data and
reused afterwards; Ctrl-C, SIGTERM or a closed terminal (SIGHUP) stops everything
cleanly, in the reverse order of start. Every service dies with this process
(`tlog.runtime.children`): after a kill -9 of it, they are killed too (as in a crash,
which each survives) and their ports are free at once.

With `--scale` (`make run-scale`) the log runs as two frontends (8080 and 8085) on a
PostgreSQL server and an S3-compatible bucket (SeaweedFS) started here, from the
binaries the `scale` extra installs; readers can fetch the log from the bucket alone.
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import click

from tlog.cli import didhost
from tlog.cli.participants import ensure_l4, participant
from tlog.errors import OAPError
from tlog.formats.did import did_key_from_public
from tlog.formats.keys import CosignatureSigner, MLDSACosigner, Signer
from tlog.http.serve import port_holder
from tlog.runtime import children
from tlog.runtime.keyfiles import read_private_key, write_private_key, write_secret
from tlog.server.service import load_or_create_key
from tlog.server.witnessing import policy_text
from tlog.transport import Outbound

BIN = Path(sys.executable).parent
HOST = "127.0.0.1"


def _say(text: str, err: bool = False) -> None:
    """A line to the terminal, which may be gone (SIGHUP): then nothing is shown."""
    try:
        click.echo(text, err=err)
    except OSError:
        pass


def _prefix_output(name: str, proc: subprocess.Popen[str]) -> None:
    """Copy a service's output, prefixed with its name. Read to the end even when the
    terminal is gone, so that the service never blocks on a full pipe."""
    assert proc.stdout is not None  # started with stdout=PIPE
    for line in proc.stdout:
        try:
            sys.stdout.write(f"[{name}] {line}")
            sys.stdout.flush()
        except OSError:
            pass


LOCAL = Outbound()  # how the services this command started are asked whether they are up (tlog.transport)


def _wait_healthy(url: str, proc: subprocess.Popen, stopping: threading.Event, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stopping.is_set():
        if proc.poll() is not None:
            raise click.ClickException(f"{url} exited with status {proc.returncode}")
        try:
            with LOCAL.open(url + "/healthz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    if not stopping.is_set():
        raise click.ClickException(f"{url} did not become healthy")


def _check_free(ports: list[int]) -> None:
    """Every port this network listens on is free, or one clear line says which is not."""
    for port in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((HOST, port))
            except OSError:
                holder = port_holder(port)
                click.echo(f"error: {HOST}:{port} is already in use" + (f" by {holder}" if holder else "")
                           + " (another oap-localnet?); stop it first", err=True)
                sys.exit(2)


def _mirror_key(data: Path, name: str) -> str:
    key = data / "mirror.key"
    if not key.exists():
        children.run([str(BIN / "oap-mirror"), "keygen", "--name", name, "--data", str(data)], check=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    return CosignatureSigner.from_skey(read_private_key(key)).vkey


def _registry_key(data: Path) -> str:
    """The registry's key (made here on first start with `oap-registry keygen`, where the
    registry would make it itself): the network's policy pins its did:key before it runs."""
    key = data / "registry.key"
    if not key.exists():
        data.mkdir(parents=True, exist_ok=True)
        children.run([str(BIN / "oap-registry"), "keygen", "--out", str(key)], check=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    return did_key_from_public(Signer.from_skey(read_private_key(key)).public)


def _witness_key(data: Path, name: str) -> str:
    key = data / "witness.key"
    if not key.exists():
        children.run([str(BIN / "oap-witness"), "keygen", "--name", name, "--data", str(data)], check=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    return CosignatureSigner.from_skey(read_private_key(key)).vkey


def _with_registry(text: str, line: str) -> str:
    """`text` with the `registry` line after its `log` line (the canonical order)."""
    head, _, rest = text.partition("\n")
    return f"{head}\n{line}{rest}"


def _mldsa_key(data: Path, name: str) -> str:
    """The witness's ML-DSA-44 key (made here on first start, as `oap-witness keygen --mldsa44`
    would: 0600, its vkey beside it); the log's policy needs its vkey before the witness runs."""
    key = data / "witness-mldsa44.key"
    if not key.exists():
        signer = MLDSACosigner.generate(name)
        write_private_key(key, signer.to_skey())
        (data / "witness-mldsa44.vkey").write_text(signer.vkey + "\n")
    return MLDSACosigner.from_skey(read_private_key(key)).vkey


@click.command()
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("data"),
              show_default=True)
@click.option("--origin", default="oap.localhost/log", show_default=True)
@click.option("--witnesses", "n_witnesses", type=click.IntRange(1, 9), default=3, show_default=True)
@click.option("--quorum", type=click.IntRange(0, 9), default=2, show_default=True)
@click.option("--log-port", type=int, default=8080, show_default=True)
@click.option("--registry-port", type=int, default=8090, show_default=True)
@click.option("--registry/--no-registry", default=True, show_default=True)
@click.option("--mirror-port", type=int, default=None, help="Default: the port after the witnesses' (8084).")
@click.option("--monitor-port", type=int, default=None,
              help="The monitor's metrics and status (default: the log's port + 6, 8086).")
@click.option("--did-port", type=int, default=None,
              help="The local did:web host (HTTPS) of the network's participants. Default: the log's port + 8 (8088).")
@click.option("--scale", is_flag=True, help="Two log frontends on PostgreSQL and an S3 bucket (SeaweedFS).")
@click.option("--postgres-port", type=int, default=5433, show_default=True, help="With --scale.")
@click.option("--s3-port", type=int, default=8333, show_default=True, help="With --scale.")
@click.option("--stop-with-parent", is_flag=True,
              help="Stop when the process that started this one ends, even by kill -9 (make run sets it).")
def main(data_dir: Path, origin: str, n_witnesses: int, quorum: int, log_port: int, registry_port: int,
         registry: bool, mirror_port: int | None, monitor_port: int | None, did_port: int | None, scale: bool,
         postgres_port: int, s3_port: int, stop_with_parent: bool) -> None:
    """Run a log, its witnesses, the registry and a mirror on 127.0.0.1 until Ctrl-C."""
    if quorum > n_witnesses:
        raise click.BadParameter("quorum exceeds the number of witnesses")
    if stop_with_parent:
        children.die_with_parent(signal.SIGTERM)
    frontends = [log_port, log_port + 5] if scale else [log_port]
    if mirror_port is None:
        mirror_port = log_port + n_witnesses + 1
        mirror_port += mirror_port in frontends
    if monitor_port is None:
        monitor_port = log_port + 6
    if did_port is None:
        did_port = log_port + 8
    _check_free(frontends + [log_port + i for i in range(1, n_witnesses + 1)] + ([registry_port] if registry else [])
                + [mirror_port, monitor_port, did_port] + ([postgres_port, s3_port] if scale else []))
    data_dir.mkdir(parents=True, exist_ok=True)
    log_dir = data_dir / ("scale" if scale else "log")
    log_vkey = load_or_create_key(log_dir, origin).vkey
    log_url = f"http://{HOST}:{log_port}"
    # The participants' web servers: one HTTPS host for every localhost name, with a local CA
    # that the log, the witnesses and the registry trust for did:web documents (and nothing else).
    did_root = data_dir / "did-web"
    did_host = didhost.serve(did_root, HOST, did_port)
    dids = f'did_ca_file = "{did_host.did_host.ca_file}"\ndid_allow_private_networks = true\n'
    reg_url = f"http://{HOST}:{registry_port}"
    reg_did = _registry_key(data_dir / "registry") if registry else ""
    people = []

    rows = []  # (policy name, vkey, url): witness 1's second (ML-DSA-44) key is a row of its own
    witnesses = []  # (name, url, Ed25519 vkey, ML-DSA-44 vkey file or None) for the banner
    policy = data_dir / "witnesses.policy"
    for i in range(1, n_witnesses + 1):
        wdir = data_dir / f"witness-{i}"
        wdir.mkdir(parents=True, exist_ok=True)
        name = f"witness-{i}.localhost"
        vkey = _witness_key(wdir, name)
        port = log_port + i
        url = f"http://{HOST}:{port}"
        pq = i == 1  # witness 1 also cosigns with ML-DSA-44 (C2SP tlog-cosignature type 0x06)
        cosigners = '\ncosigners = ["ed25519", "mldsa44"]' if pq else ""
        # ... and peer-witnesses conformance receipts as a participant, consulting the registry
        me = participant(did_root, wdir, name, did_port)
        people.append(me)
        peer = (f'identity_did = "{me.key_id}"\nown_receipt = "{me.receipt_file.resolve()}"\n'
                f'trusted_logs = ["{log_vkey}"]\n' + dids
                + (f'registry_url = "{reg_url}"\nregistry_key = "{reg_did}"\n' if registry else ""))
        (wdir / "witness.toml").write_text(
            f'[witness]\nname = "{name}"\nhost = "{HOST}"\nport = {port}{cosigners}\n'
            f'ui_trust_policy = "{policy.resolve()}"\n{peer}\n'
            f'[[witness.logs]]\norigin = "{origin}"\nvkey = "{log_vkey}"\nurl = "{log_url}"\n'
        )
        rows.append((f"w{i}", vkey, url))
        if pq:
            rows.append((f"w{i}-mldsa44", _mldsa_key(wdir, name), url))
        witnesses.append((f"w{i}", url, vkey, wdir / "witness-mldsa44.vkey" if pq else None))
    # The mirror keeps a copy of the log (C2SP tlog-mirror): the log pushes its checkpoints
    # and entries to it (a `mirror` line of the log's policy, outside the quorum: writes never
    # wait for it); its own policy (mirror.policy) requires its cosignature.
    mirror_url = f"http://{HOST}:{mirror_port}"
    mdir = data_dir / "mirror"
    mdir.mkdir(parents=True, exist_ok=True)
    mirror_vkey = _mirror_key(mdir, "mirror.localhost")
    reg_url = f"http://{HOST}:{registry_port}"
    # The registry's key is pinned beside the log's (a `registry` line, an OAP extension of
    # tlog-policy): clients check its status answers against it, not against its own word.
    registry_line = f"registry {reg_did} {reg_url}\n" if registry else ""
    policy.write_text(_with_registry(policy_text(log_vkey, rows, quorum, [("m1", mirror_vkey, mirror_url)]),
                                     registry_line))
    # Each service's explorer page ships the network's policy (pinned, not the log's word
    # about itself) and the log names its registry: /ui/ on any port shows every service.
    mirror_copy = f"{mirror_url}/{hashlib.sha256(origin.encode()).hexdigest()}"  # its tlog-tiles copy of the log
    neighbours = (f'public_url = "{log_url}"\nui_trust_policy = "{policy.resolve()}"\n'
                  f'mirror_urls = ["{mirror_copy}"]\n'
                  + (f'registry_url = "{reg_url}"\n' if registry else "") + dids)
    log_toml = data_dir / "log.toml"
    log_toml.write_text("[log]\n" + neighbours)
    registry_toml = data_dir / "registry.toml"
    registry_toml.write_text(f'[registry]\npublic_url = "{reg_url}"\nui_trust_policy = "{policy.resolve()}"\n'
                             + dids)

    (mdir / "mirror.toml").write_text(
        f'[mirror]\nname = "mirror.localhost"\nhost = "{HOST}"\nport = {mirror_port}\n'
        f'ui_trust_policy = "{policy.resolve()}"\n\n'
        f'[[mirror.logs]]\norigin = "{origin}"\nvkey = "{log_vkey}"\nurl = "{log_url}"\n')
    (data_dir / "mirror.policy").write_text(f"log {log_vkey}\nmirror m1 {mirror_vkey} {mirror_url}\nquorum m1\n")

    procs: list[tuple[str, str, subprocess.Popen]] = []  # (tier, name, process) in the order started
    engines: list = []
    stopping = threading.Event()

    def spawn(tier: str, name: str, args: list[str], health: str) -> None:
        if stopping.is_set():
            return
        # Every orderly stop (Ctrl-C, SIGTERM, SIGHUP, --stop-with-parent) goes through
        # _stop_in_order. If this process dies without one (kill -9), the services are
        # killed too, as in a crash, which each of them survives with nothing acknowledged
        # lost: stopped cleanly all at once instead, a log would wait out its cosigning
        # timeout for witnesses stopping at the same moment.
        proc = children.popen(args, death_signal=signal.SIGKILL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
        procs.append((tier, name, proc))
        threading.Thread(target=_prefix_output, args=(name, proc), daemon=True).start()
        _wait_healthy(health, proc, stopping)

    def stop(*_: object) -> None:
        stopping.set()

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    bucket_url = ""
    try:
        for i, (wname, wurl, _, _) in enumerate(witnesses, 1):
            wdir = data_dir / f"witness-{i}"
            spawn("witness", wname, [str(BIN / "oap-witness"), "serve", "--config", str(wdir / "witness.toml"),
                                     "--data", str(wdir)], wurl)
        # Before the others make connections: an outgoing one could take its port meanwhile.
        spawn("mirror", "mirror", [str(BIN / "oap-mirror"), "serve", "--config", str(mdir / "mirror.toml"),
                                   "--data", str(mdir)], mirror_url)
        if scale and not stopping.is_set():
            bucket_url = _start_engines(log_dir, postgres_port, s3_port, engines, neighbours)
            for n, port in enumerate(frontends, 1):
                fdir = log_dir / f"frontend-{n}"
                fdir.mkdir(parents=True, exist_ok=True)
                spawn("log", f"log-{n}", [str(BIN / "oap-log"), "serve", "--config", str(log_dir / "log.toml"),
                                          "--data", str(fdir), "--port", str(port), "--origin", origin,
                                          "--witness-policy", str(policy)], f"http://{HOST}:{port}")
        elif not scale:
            spawn("log", "log", [str(BIN / "oap-log"), "serve", "--config", str(log_toml), "--data", str(log_dir),
                                 "--port", str(log_port), "--origin", origin, "--witness-policy", str(policy)],
                  log_url)
        if registry:
            spawn("registry", "registry", [str(BIN / "oap-registry"), "serve", "--config", str(registry_toml),
                                           "--data", str(data_dir / "registry"), "--port", str(registry_port),
                                           "--log-url", log_url], reg_url)
            if not stopping.is_set():
                try:
                    renewed = asyncio.run(ensure_l4(reg_url, people))
                except OAPError as e:  # the rest of the network is of use without it: say so, go on
                    _say(f"warning: the witnesses' L4 conformance receipts were not registered: {e.message}", err=True)
                else:
                    if renewed:
                        _say(f"registered L4 conformance receipts of {', '.join(renewed)} (each witnessed by the next)")
        monitor_dir = data_dir / "monitor"
        monitor_url = f"http://{HOST}:{monitor_port}"
        if not stopping.is_set():
            _monitor_config(monitor_dir, log_url, policy, monitor_port, reg_url if registry else None)
            spawn("monitor", "monitor", [str(BIN / "oap-monitor"), "run", "--config",
                                         str(monitor_dir / "monitor.toml")], monitor_url)
        if not stopping.is_set():
            banner = ["", "OAP local network is up (Ctrl-C stops it):"]
            banner += [f"  log       http://{HOST}:{port}   origin {origin}" for port in frontends]
            banner.append(f"            verifier key {log_vkey}")
            if scale:
                banner.append(f"  postgres  {engines[0].dsn}")
                banner.append(f"  bucket    {bucket_url}/checkpoint   (tiles under {bucket_url}/tile/, public read)")
            for (_, wurl, vkey, pq_vkey), me in zip(witnesses, people):
                banner.append(f"  witness   {wurl}   {vkey}")
                if pq_vkey is not None:
                    banner.append(f"            and ML-DSA-44 {pq_vkey}")
                banner.append(f"            peer-witnesses as {me.did}")
            if registry:
                banner.append(f"  registry  {reg_url}   git clone {reg_url}/registry.git")
            banner.append(f"  mirror    {mirror_url}   {mirror_vkey}")
            banner.append(f"            copy of the log at {mirror_copy}/ (the log pushes to it; policy "
                          f"{data_dir / 'mirror.policy'})")
            banner.append(f"  monitor   {monitor_url}/v1/status   alerts in {monitor_dir / 'alerts.jsonl'}")
            banner.append(f"            watches every entry of the log and the registry's anchors; add a DID or key "
                          f"to {monitor_dir / 'watch.txt'} to watch it")
            banner.append(f"  policy    {log_dir / 'log.policy'}   "
                          f"(log key, witnesses, quorum {quorum} of {n_witnesses}, mirror m1"
                          + (", registry key)" if registry else ")"))
            banner.append(f"  did:web   https://<name>.localhost:{did_host.port}/   documents in "
                          f"{did_root}/<name>.localhost/, CA {did_host.did_host.ca_file}")
            banner.append(f"  explorer  {log_url}/ui/")
            _say("\n".join(banner) + "\n")
        while not stopping.is_set():
            for _, name, proc in procs:
                if proc.poll() is not None:
                    _say(f"{name} exited with status {proc.returncode}; stopping", err=True)
                    stopping.set()
            stopping.wait(0.5)
    finally:
        _stop_in_order(procs, engines)
        did_host.stop()
        _say("stopped cleanly")


# The order services stop in: the reverse of their start, one tier at a time.
STOP_ORDER = ("monitor", "registry", "log", "mirror", "witness")


def _monitor_config(mdir: Path, log_url: str, policy: Path, port: int, registry_url: str | None) -> None:
    """The monitor's configuration (made on every start: the network's addresses may change):
    it watches the log with the network's policy (its witnesses and mirror, with their URLs,
    and the registry's key: its registry line), every identity listed in watch.txt, and the
    registry's anchors; alerts go to alerts.jsonl; what `oap-log add --journal
    anchored.jsonl` anchored is not alerted."""
    mdir.mkdir(parents=True, exist_ok=True)
    watch = mdir / "watch.txt"
    if not watch.exists():
        watch.write_text("# DIDs or keys to watch, one a line: each entry one of them signed or names is an alert\n")
    text = (f'state_dir = "state"\npoll_seconds = 1\nmetrics = "{HOST}:{port}"\nwatch_files = ["watch.txt"]\n'
            f'journals = ["anchored.jsonl"]\nunreachable_after = 30\nbehind_after = 60\n\n'
            f'[[logs]]\nurl = "{log_url}"\npolicy = "{policy.resolve()}"\n\n')
    if registry_url is not None:  # its key: the policy's registry line
        text += f'[registry]\nurl = "{registry_url}"\n\n'
    text += '[[alerts]]\nfile = "alerts.jsonl"\n'
    (mdir / "monitor.toml").write_text(text)


def _stop_in_order(procs: list[tuple[str, str, subprocess.Popen]], engines: list) -> None:
    """Stop the services in the reverse order of their start, one tier at a time, each
    tier gone before the next is signalled: the monitor (it reads them all), the registry
    (it writes to the log), then the log frontends (while the witnesses and the mirror they push to still answer: a
    log stopping without them would wait out its cosigning timeout), then PostgreSQL and
    the bucket, the mirror, and the witnesses."""
    for tier in STOP_ORDER:
        group = [proc for t, _, proc in procs if t == tier]
        for proc in group:
            _signal_group(proc, signal.SIGTERM)
        for proc in group:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(10)
        if tier == "log":
            for engine in reversed(engines):
                engine.stop()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """`sig` to a service and the helpers it started (its read workers) if it still runs."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass


def _start_engines(log_dir: Path, postgres_port: int, s3_port: int, engines: list, neighbours: str) -> str:
    """PostgreSQL and SeaweedFS under `log_dir`, and the frontends' shared configuration
    (with the `neighbours` settings every log of the network has)."""
    from tlog.cli.engines import Postgres, Seaweed

    pg = Postgres(log_dir / "postgres", port=postgres_port).start()
    engines.append(pg)
    creds = log_dir / "bucket.credentials"
    if creds.exists():
        key_id, secret = read_private_key(creds).split()
    else:
        key_id, secret = "oap", os.urandom(16).hex()
        write_secret(creds, f"{key_id} {secret}")
    weed = Seaweed(log_dir / "seaweed", access_key=key_id, secret_key=secret, s3_port=s3_port).start()
    engines.append(weed)
    weed.create_bucket("oap-log")
    bucket_url = weed.bucket_url("oap-log")
    (log_dir / "log.toml").write_text(
        f'[log]\nstorage = "postgres"\npostgres_dsn = "{pg.dsn}"\nbucket_url = "{bucket_url}"\n'
        f'bucket_credentials_file = "{creds.resolve()}"\nkey_file = "{(log_dir / "log.key").resolve()}"\n'
        + neighbours)
    return bucket_url
