"""`oap-localnet` (what `make run` starts): a whole OAP trust network on 127.0.0.1.

Three witnesses (8081-8083), a log (8080) that requires cosignatures from 2 of
them, and the registry (8090) anchored in that log, each as its own process,
as they would run in production. Keys and configs are made on first start
under ./data and reused afterwards; Ctrl-C, SIGTERM or a closed terminal (SIGHUP)
stops everything cleanly, in the reverse order of start. Every service dies with
this process (`tlog.service.children`): after a kill -9 of it, they are killed too
(as in a crash, which each survives) and their ports are free at once.

With `--scale` (`make run-scale`) the log runs as two frontends (8080 and 8085) on a
PostgreSQL server and an S3-compatible bucket (SeaweedFS) started here, from the
binaries the `scale` extra installs; readers can fetch the log from the bucket alone.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import click

from tlog.formats.keys import CosignatureSigner
from tlog.server.service import load_or_create_key
from tlog.server.witnessing import policy_text
from tlog.service import children
from tlog.service.keyfiles import read_private_key, write_secret
from tlog.service.serve import port_holder

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


def _wait_healthy(url: str, proc: subprocess.Popen, stopping: threading.Event, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stopping.is_set():
        if proc.poll() is not None:
            raise click.ClickException(f"{url} exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1) as r:
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


def _witness_key(data: Path, name: str) -> str:
    key = data / "witness.key"
    if not key.exists():
        children.run([str(BIN / "oap-witness"), "keygen", "--name", name, "--data", str(data)], check=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    return CosignatureSigner.from_skey(read_private_key(key)).vkey


@click.command()
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("data"),
              show_default=True)
@click.option("--origin", default="oap.localhost/log", show_default=True)
@click.option("--witnesses", "n_witnesses", type=click.IntRange(1, 9), default=3, show_default=True)
@click.option("--quorum", type=click.IntRange(0, 9), default=2, show_default=True)
@click.option("--log-port", type=int, default=8080, show_default=True)
@click.option("--registry-port", type=int, default=8090, show_default=True)
@click.option("--registry/--no-registry", default=True, show_default=True)
@click.option("--scale", is_flag=True, help="Two log frontends on PostgreSQL and an S3 bucket (SeaweedFS).")
@click.option("--postgres-port", type=int, default=5433, show_default=True, help="With --scale.")
@click.option("--s3-port", type=int, default=8333, show_default=True, help="With --scale.")
@click.option("--stop-with-parent", is_flag=True,
              help="Stop when the process that started this one ends, even by kill -9 (make run sets it).")
def main(data_dir: Path, origin: str, n_witnesses: int, quorum: int, log_port: int, registry_port: int,
         registry: bool, scale: bool, postgres_port: int, s3_port: int, stop_with_parent: bool) -> None:
    """Run a log, its witnesses and the registry on 127.0.0.1 until Ctrl-C."""
    if quorum > n_witnesses:
        raise click.BadParameter("quorum exceeds the number of witnesses")
    if stop_with_parent:
        children.die_with_parent(signal.SIGTERM)
    frontends = [log_port, log_port + 5] if scale else [log_port]
    _check_free(frontends + [log_port + i for i in range(1, n_witnesses + 1)] + ([registry_port] if registry else [])
                + ([postgres_port, s3_port] if scale else []))
    data_dir.mkdir(parents=True, exist_ok=True)
    log_dir = data_dir / ("scale" if scale else "log")
    log_vkey = load_or_create_key(log_dir, origin).vkey
    log_url = f"http://{HOST}:{log_port}"

    rows = []
    for i in range(1, n_witnesses + 1):
        wdir = data_dir / f"witness-{i}"
        wdir.mkdir(parents=True, exist_ok=True)
        name = f"witness-{i}.localhost"
        vkey = _witness_key(wdir, name)
        port = log_port + i
        (wdir / "witness.toml").write_text(
            f'[witness]\nname = "{name}"\nhost = "{HOST}"\nport = {port}\n\n'
            f'[[witness.logs]]\norigin = "{origin}"\nvkey = "{log_vkey}"\nurl = "{log_url}"\n'
        )
        rows.append((f"w{i}", vkey, f"http://{HOST}:{port}"))
    policy = data_dir / "witnesses.policy"
    policy.write_text(policy_text(log_vkey, rows, quorum))

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
        for i, (wname, _, wurl) in enumerate(rows, 1):
            wdir = data_dir / f"witness-{i}"
            spawn("witness", wname, [str(BIN / "oap-witness"), "serve", "--config", str(wdir / "witness.toml"),
                                     "--data", str(wdir)], wurl)
        if scale and not stopping.is_set():
            bucket_url = _start_engines(log_dir, postgres_port, s3_port, engines)
            for n, port in enumerate(frontends, 1):
                fdir = log_dir / f"frontend-{n}"
                fdir.mkdir(parents=True, exist_ok=True)
                spawn("log", f"log-{n}", [str(BIN / "oap-log"), "serve", "--config", str(log_dir / "log.toml"),
                                          "--data", str(fdir), "--port", str(port), "--origin", origin,
                                          "--witness-policy", str(policy)], f"http://{HOST}:{port}")
        elif not scale:
            spawn("log", "log", [str(BIN / "oap-log"), "serve", "--data", str(log_dir), "--port", str(log_port),
                                 "--origin", origin, "--witness-policy", str(policy)], log_url)
        reg_url = f"http://{HOST}:{registry_port}"
        if registry:
            spawn("registry", "registry", [str(BIN / "oap-registry"), "serve", "--data", str(data_dir / "registry"),
                                           "--port", str(registry_port), "--log-url", log_url], reg_url)
        if not stopping.is_set():
            banner = ["", "OAP local network is up (Ctrl-C stops it):"]
            banner += [f"  log       http://{HOST}:{port}   origin {origin}" for port in frontends]
            banner.append(f"            verifier key {log_vkey}")
            if scale:
                banner.append(f"  postgres  {engines[0].dsn}")
                banner.append(f"  bucket    {bucket_url}/checkpoint   (tiles under {bucket_url}/tile/, public read)")
            banner += [f"  witness   {wurl}   {vkey}" for _, vkey, wurl in rows]
            if registry:
                banner.append(f"  registry  {reg_url}   git clone {reg_url}/registry.git")
            banner.append(f"  policy    {log_dir / 'log.policy'}   "
                          f"(log key, witnesses, quorum {quorum} of {n_witnesses})")
            _say("\n".join(banner) + "\n")
        while not stopping.is_set():
            for _, name, proc in procs:
                if proc.poll() is not None:
                    _say(f"{name} exited with status {proc.returncode}; stopping", err=True)
                    stopping.set()
            stopping.wait(0.5)
    finally:
        _stop_in_order(procs, engines)
        _say("stopped cleanly")


def _stop_in_order(procs: list[tuple[str, str, subprocess.Popen]], engines: list) -> None:
    """Stop the services in the reverse order of their start, one tier at a time, each
    tier gone before the next is signalled: the registry (it writes to the log), then the
    log frontends (while the witnesses they push to still answer: a log stopping without
    them would wait out its cosigning timeout), then PostgreSQL and the bucket, then the
    witnesses."""
    for tier in ("registry", "log", "witness"):
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


def _start_engines(log_dir: Path, postgres_port: int, s3_port: int, engines: list) -> str:
    """PostgreSQL and SeaweedFS under `log_dir`, and the frontends' shared configuration."""
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
        f'bucket_credentials_file = "{creds.resolve()}"\nkey_file = "{(log_dir / "log.key").resolve()}"\n')
    return bucket_url
