"""`oap-witness`: run a C2SP tlog-witness node, make its keys, follow logs that do not push."""
from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import click

from tlog.errors import ConfigError, OAPError
from tlog.runtime.cli import INSECURE_HTTP, Running, fail, load_config, native_notice, run, serve_options, warn_insecure
from tlog.runtime.config import load
from tlog.runtime.logs import setup_logging

from .config import WitnessConfig
from .keyfiles import create_keys, create_mldsa_key, did_of

log = logging.getLogger("oap.witness")




def _config(config_file: Path | None, **flags) -> WitnessConfig:
    return load_config(WitnessConfig, section="witness", env_prefix="OAP_WITNESS_", config_file=config_file, **flags)


_config_option = click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                              help="TOML file ([witness] table, [[witness.logs]] entries).")
_data_option = click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path),
                            help="Data directory (keys, state database).")


@click.group()
@click.version_option(package_name="oap-tlog")
def main() -> None:
    """OAP witness: cosigns checkpoints of C2SP logs (tlog-witness) and peer-witnesses conformance receipts."""
    native_notice()


# --- serve -------------------------------------------------------------------------


@main.command()
@serve_options("witness", data_help="Data directory (keys, state database).")
@click.option("--name", default=None, help="Witness key name; fixed when the key is made.")
@click.option("--rate-limit", type=float, default=None, help="Requests/s per client (0: off).")
def serve(config_file, **flags) -> None:
    """Serve POST /add-checkpoint, monitoring, metrics and peer-witnessing until Ctrl-C (or SIGTERM)."""
    cfg = _config(config_file, **flags)
    run(cfg, lambda: _start(cfg, lambda: load(WitnessConfig, section="witness", env_prefix="OAP_WITNESS_",
                                              file=config_file, **flags)))


async def _start(cfg: WitnessConfig, reread: Callable[[], WitnessConfig] | None = None) -> Running:
    from .api import build_app
    from .service import WitnessService

    svc = WitnessService.open(cfg)

    def reload() -> None:
        """SIGHUP: re-read the configuration and follow its logs (a bad file keeps the old ones)."""
        assert reread is not None
        try:
            svc.reload_logs(reread())
        except (ConfigError, OAPError, OSError) as e:
            log.error("SIGHUP: the configuration was not reloaded (the logs stay as they were): %s",
                      getattr(e, "message", None) or e)

    keys = [f"verifier key: {s.vkey}" if s.key_type != 0x06 else
            f"ML-DSA-44:    {cfg.mldsa_key_path.with_suffix('.vkey')} ({s.vkey[:40]}...)" for s in svc.signers]
    lists = [f"log lists:    {', '.join(cfg.log_lists)} (every {cfg.log_list_refresh:g} s)"] if cfg.log_lists else []
    registry = [f"registry:     {cfg.registry_url} (consulted before witnessing a receipt)"] if cfg.registry_url else []
    return Running(build_app(svc), close=svc.close, reload=reload if reread is not None else None, banner=lambda url: [
        f"name:         {svc.signer.name}", *keys, f"identity:     {svc.peer.signer}", *registry,
        f"logs:         {', '.join(log_.origin for log_ in cfg.logs) or 'none configured'}", *lists,
        f"url:          {url}", f"data:         {cfg.data_dir.resolve()}"])


# --- keygen ------------------------------------------------------------------------


@main.command()
@click.option("--name", required=True, help="Witness key name, e.g. witness.example.org (no spaces, no '+').")
@_data_option
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Cosigning key file to create (default: DATA/witness.key).")
@click.option("--mldsa44", "mldsa", is_flag=True,
              help="Also make an ML-DSA-44 cosigning key (DATA/witness-mldsa44.key; set cosigners to use it).")
def keygen(name: str, data_dir: Path | None, out: Path | None, mldsa: bool) -> None:
    """Make the witness keys (mode 0600, never overwritten); print only the verifier keys.

    Also makes identity.key beside it (the did:key for conformance peer-witnessing,
    printed on stderr) unless it exists.
    """
    data = data_dir or WitnessConfig.data_dir
    key_path = out or data / "witness.key"
    mldsa_path = key_path.with_name("witness-mldsa44.key")
    if mldsa and mldsa_path.exists():
        fail(f"{mldsa_path} exists; refusing to overwrite a key")
    try:
        signer, seed = create_keys(key_path, key_path.parent / "identity.key", name)
        extra = create_mldsa_key(mldsa_path, name) if mldsa else None
    except FileExistsError:
        fail(f"{key_path} exists; refusing to overwrite a key")
    except OAPError as e:
        fail(e.message)
    click.echo(signer.vkey)
    if extra is not None:
        click.echo(extra.vkey)
    click.echo(f"identity: {did_of(seed)}", err=True)


# --- feed --------------------------------------------------------------------------


@main.command()
@_config_option
@_data_option
@click.option("--origin", "origins", multiple=True,
              help="Follow only this log (repeatable; default: every log with a url).")
@click.option("--interval", type=click.FloatRange(0.1, 86400), default=30.0, show_default=True,
              help="Seconds between polls.")
@click.option("--once", is_flag=True, help="Poll each log once and exit (exit 1 if any was refused or failed).")
@click.option("--rounds", type=click.IntRange(1), default=None, help="Stop after this many rounds.")
@click.option("--publish-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write each cosigned checkpoint to DIR/<hex sha256(origin)>/checkpoint.")
@INSECURE_HTTP
def feed(config_file, data_dir, origins, interval, once, rounds, publish_dir, insecure_http) -> None:
    """Follow logs that do not push: poll /checkpoint and tiles, prove consistency, cosign."""
    cfg = _config(config_file, data_dir=data_dir, insecure_http=insecure_http)
    setup_logging(cfg.log_format)
    warn_insecure(cfg)
    logs = [log_ for log_ in cfg.logs if log_.url and (not origins or log_.origin in origins)]
    unknown = set(origins) - {log_.origin for log_ in cfg.logs if log_.url}
    if unknown:
        fail(f"not a configured log with a url: {', '.join(sorted(unknown))}", 2)
    if not logs:
        fail("no configured log has a url to poll", 2)
    try:
        chosen = cfg.data_dir != WitnessConfig.data_dir  # --data, the config file or the environment named it
        ok = asyncio.run(_feed(cfg, logs, interval=interval, rounds=1 if once else rounds, publish_dir=publish_dir,
                               chosen=chosen))
    except (ConfigError, OAPError) as e:
        fail(str(e), 2)
    sys.exit(0 if ok else 1)


async def _feed(cfg: WitnessConfig, logs, *, interval: float, rounds: int | None, publish_dir: Path | None,
                chosen: bool = True) -> bool:
    from tlog.transport import Outbound

    from .core import Witness
    from .feeder import Feeder
    from .keyfiles import load_or_create_keys
    from .state import WitnessState

    fresh = not cfg.key_path.exists()
    if fresh and not chosen:
        # A feeder cosigns as an existing witness: a new identity in a default directory
        # would silently be a second witness nobody trusts.
        raise ConfigError(f"no witness key at {cfg.key_path}: pass the witness's --data (or --config), "
                          "or create the witness first with `oap-witness serve` or `oap-witness keygen`")
    signers, _ = load_or_create_keys(cfg)
    if fresh:
        click.echo(f"created a new witness key {signers[0].vkey} in {cfg.data_dir}", err=True)
    state = WitnessState(cfg.state_path)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    def show(results) -> None:
        for r in results:
            click.echo(f"{r.origin}: {r.action} size {r.size}" + (f" ({r.detail})" if r.detail else ""))
        sys.stdout.flush()

    try:
        async with Feeder(Witness(signers, cfg.logs, state), logs, timeout=cfg.feed_timeout,
                          publish_dir=publish_dir, outbound=Outbound.from_config(cfg)) as feeder:
            return await feeder.run(interval=interval, rounds=rounds, stop=stop, on_round=show)
    finally:
        state.close()


# --- status ------------------------------------------------------------------------


@main.command()
@_config_option
@_data_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per log.")
def status(config_file, data_dir, as_json) -> None:
    """Latest cosigned size and root per log, from the state database."""
    from datetime import UTC, datetime

    from tlog.formats.encoding import b64enc
    from tlog.formats.times import format_utc, relative

    from .state import WitnessState

    cfg = _config(config_file, data_dir=data_dir)
    if not cfg.state_path.exists():
        fail(f"no state database at {cfg.state_path}")
    state = WitnessState(cfg.state_path)
    try:
        for rec in state.all_sync():
            when = datetime.fromtimestamp(rec.cosigned_at, UTC)
            if as_json:
                click.echo(json.dumps({"origin": rec.origin, "size": rec.size, "root": b64enc(rec.root),
                                       "cosigned_at": format_utc(when)}))
            else:
                click.echo(f"{rec.origin}  size {rec.size}  root {b64enc(rec.root)}  "
                           f"cosigned {format_utc(when)} ({relative(when)})")
    finally:
        state.close()
