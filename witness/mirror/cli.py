"""`oap-mirror`: run a C2SP tlog-mirror, make its key, feed it from any tlog-tiles log."""
from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import click

from tlog.errors import ConfigError, FormatError, OAPError
from tlog.runtime.cli import (
    INSECURE_HTTP_CLIENT,
    Running,
    checked_url,
    client_outbound,
    fail,
    load_config,
    native_notice,
    run,
    serve_options,
)
from tlog.runtime.config import load
from tlog.runtime.logs import setup_logging

from .config import MirrorConfig

log = logging.getLogger("oap.mirror")


def _config(config_file: Path | None, **flags) -> MirrorConfig:
    return load_config(MirrorConfig, section="mirror", env_prefix="OAP_MIRROR_", config_file=config_file, **flags)


@click.group()
@click.version_option(package_name="oap-tlog")
def main() -> None:
    """OAP mirror: keeps copies of C2SP logs (tlog-mirror), serves them as tlog-tiles, cosigns what it stored."""
    native_notice()


@main.command()
@serve_options("mirror", data_help="Data directory (key, ticket key, entries, hashes).")
@click.option("--name", default=None, help="Mirror key name; fixed when the key is made.")
@click.option("--rate-limit", type=float, default=None, help="Write requests/s per client (0: off).")
def serve(config_file, **flags) -> None:
    """Serve add-checkpoint, add-entries and the copies (tlog-tiles) until Ctrl-C (or SIGTERM)."""
    cfg = _config(config_file, **flags)
    run(cfg, lambda: _start(cfg, lambda: load(MirrorConfig, section="mirror", env_prefix="OAP_MIRROR_",
                                              file=config_file, **flags)))


async def _start(cfg: MirrorConfig, reread: Callable[[], MirrorConfig] | None = None) -> Running:
    from witness.core import origin_path

    from .api import build_app
    from .service import MirrorService

    svc = MirrorService.open(cfg)

    def reload() -> None:
        """SIGHUP: re-read the configuration and follow its logs' keys (a bad file keeps the old ones)."""
        assert reread is not None
        try:
            skipped = svc.mirror.set_keys(reread().logs)
        except (ConfigError, OAPError, OSError) as e:
            log.error("SIGHUP: the configuration was not reloaded (the logs' keys stay as they were): %s",
                      getattr(e, "message", None) or e)
            return
        log.info("reloaded the keys of the logs kept%s", f"; new logs need a restart: {', '.join(skipped)}"
                 if skipped else "")

    def banner(url: str) -> list[str]:
        prefix = cfg.monitoring_prefix.rstrip("/") or url
        lines = [f"name:         {svc.signers[0].name}"]
        lines += [f"verifier key: {s.vkey}" if len(s.vkey) < 200 else
                  f"ML-DSA-44:    {cfg.mldsa_key_path.with_suffix('.vkey')} ({s.vkey[:40]}...)" for s in svc.signers]
        lines += [f"log:          {lg.origin}  at {prefix}/{origin_path(lg.origin)}/" for lg in cfg.logs] or \
            ["logs:         none configured"]
        return [*lines, f"url:          {url}", f"data:         {cfg.data_dir.resolve()}"]

    return Running(build_app(svc), close=svc.close, banner=banner, reload=reload if reread is not None else None)


@main.command()
@click.option("--name", required=True, help="Mirror key name, e.g. mirror.example.org (no spaces, no '+').")
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), help="Data directory.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Key file to create (default: DATA/mirror.key, or DATA/mirror-mldsa44.key with --mldsa44).")
@click.option("--mldsa44", "mldsa", is_flag=True,
              help="Make the ML-DSA-44 cosigning key instead (set cosigners to use it beside the Ed25519 one).")
def keygen(name: str, data_dir: Path | None, out: Path | None, mldsa: bool) -> None:
    """Make the mirror's cosigning key (mode 0600, never overwritten); print only its verifier key."""
    from .keys import create_key

    path = out or (data_dir or MirrorConfig.data_dir) / ("mirror-mldsa44.key" if mldsa else "mirror.key")
    try:
        signer = create_key(path, name, mldsa=mldsa)
    except FileExistsError:
        fail(f"{path} exists; refusing to overwrite a key")
    except OAPError as e:
        fail(e.message)
    click.echo(signer.vkey)


@main.command()
@click.argument("log_url", callback=checked_url)
@click.option("--mirror", "mirror_url", required=True, callback=checked_url,
              help="The mirror's submission prefix, e.g. http://127.0.0.1:8084")
@click.option("--log-key", default=None, help="The log's verifier key: refuse checkpoints it did not sign.")
@click.option("--mirror-key", "mirror_keys", multiple=True, help="The mirror's verifier key: check its cosignature "
                                                                 "(repeatable).")
@click.option("--interval", type=click.FloatRange(0.1, 86400), default=10.0, show_default=True,
              help="Seconds between rounds.")
@click.option("--once", is_flag=True, help="One round, then exit (1 if it was refused or failed).")
@click.option("--rounds", type=click.IntRange(1), default=None, help="Stop after this many rounds.")
@click.option("--timeout", type=click.FloatRange(1, 600), default=60.0, show_default=True,
              help="Seconds without progress on one HTTP request before it fails.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text")
@INSECURE_HTTP_CLIENT
def follow(log_url, mirror_url, log_key, mirror_keys, interval, once, rounds, timeout, log_format) -> None:
    """Copy the tlog-tiles log at LOG_URL into the mirror, then keep it up to date.

    Resumes from the mirror's next entry after any interruption, so nothing the mirror
    stored is sent twice. Each round prints one line: what the mirror cosigned."""
    from tlog.formats.keys import cosigner_verifier, parse_vkey

    from .follower import Follower

    setup_logging(log_format)
    try:
        lk = parse_vkey(log_key) if log_key else None
        mks = [cosigner_verifier(parse_vkey(k)) for k in mirror_keys]
    except FormatError as e:
        fail(e.message, 2)

    def show(r) -> None:
        what = f"{r.origin or log_url}: {r.action} size {r.size}, {r.sent} entries sent"
        click.echo(what + (f" ({r.detail})" if r.detail else ""))
        sys.stdout.flush()

    async def go() -> bool:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with Follower(log_url, mirror_url, log_key=lk, mirror_keys=mks, timeout=timeout,
                            outbound=client_outbound()) as f:
            return await f.run(interval=interval, rounds=1 if once else rounds, stop=stop, on_round=show)

    try:
        ok = asyncio.run(go())
    except (ConfigError, OAPError) as e:
        fail(str(getattr(e, "message", e)), 2)
    sys.exit(0 if ok else 1)


@main.command()
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per log.")
def status(config_file, data_dir, as_json) -> None:
    """Pending size, next entry and cosigned size per log, from the data directory (mirror stopped)."""
    from .embedded import EmbeddedStore

    cfg = _config(config_file, data_dir=data_dir)
    if not (cfg.data_dir / "mirror.db").exists():
        fail(f"no mirror database in {cfg.data_dir}")
    try:
        store = EmbeddedStore(cfg.data_dir)
    except ConfigError as e:
        fail(str(e))
    try:
        for lg in cfg.logs:
            rec = store.record(lg.origin)
            row = {"origin": lg.origin, "pending_size": rec.pending.size if rec.pending else None,
                   "next_entry": rec.next_entry, "size": rec.mirror.size if rec.mirror else None}
            if as_json:
                click.echo(json.dumps(row))
            else:
                click.echo(f"{lg.origin}  pending {row['pending_size']}  stored {rec.next_entry}  "
                           f"cosigned {row['size']}")
    finally:
        store.close()
