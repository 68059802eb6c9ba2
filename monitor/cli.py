"""`oap-monitor`: watch C2SP logs and an OAP registry, alert on what an owner or operator must know."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import sys
from pathlib import Path

import click

from tlog.errors import ConfigError, OAPError
from tlog.runtime.cli import Running, fail, load_config, native_notice, run
from tlog.runtime.logs import setup_logging

from .config import MonitorConfig


def _config(config_file: Path, **flags) -> MonitorConfig:
    cfg = load_config(MonitorConfig, section="monitor", env_prefix="OAP_MONITOR_", config_file=config_file, **flags)
    try:
        cfg = cfg.resolve_paths(config_file.resolve().parent)
        if flags.get("state_dir") is not None:
            cfg = dataclasses.replace(cfg, state_dir=Path(flags["state_dir"]).resolve())
        cfg.validate()
    except ConfigError as e:
        fail(str(e), 2)
    return cfg


@click.group()
@click.version_option(package_name="oap-tlog")
def main() -> None:
    """OAP monitor: watches C2SP logs (split views, every entry, a key's receipts) and a registry."""
    native_notice()


@main.command("run")
@click.option("--config", "config_file", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="TOML file (README: oap-monitor); relative paths in it are relative to its directory.")
@click.option("--state", "state_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="State directory (overrides state_dir).")
@click.option("--once", is_flag=True,
              help="One pass over every log and the registry, one round of deliveries, then exit: 0 no alert, "
                   "1 alerts raised, 2 something could not be checked (its alerts are delivered all the same).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default=None)
@click.option("--insecure-http", is_flag=True, default=None,
              help="Allow plain http:// beyond loopback (OAP-CORE-1.0 §8.1 forbids it).")
def run_cmd(config_file: Path, state_dir: Path | None, once: bool, log_format: str | None,
            insecure_http: bool | None) -> None:
    """Watch until Ctrl-C (or SIGTERM): a pass every poll_seconds, the registry's push stream,
    alerts delivered from the state directory's queue."""
    cfg = _config(config_file, state_dir=state_dir, log_format=log_format, insecure_http=insecure_http)
    if once:
        setup_logging(cfg.log_format)
        sys.exit(_run_once(cfg))
    if cfg.metrics:
        run(cfg, lambda: _start(cfg))
        return
    setup_logging(cfg.log_format)
    try:
        asyncio.run(_run_without_http(cfg))
    except (ConfigError, OAPError) as e:
        fail(getattr(e, "message", None) or str(e), 2)


def _run_once(cfg: MonitorConfig) -> int:
    from .service import MonitorService

    async def go() -> int:
        svc = await MonitorService.open(cfg)
        try:
            summary = await svc.once()
            listed = (svc.status().get("registry") or {}).get("log_list")
        finally:
            await svc.close()
        for r in summary.results:
            state = "ok" if r.ok else "could not check"
            click.echo(f"{r.source}: {state}" + (f": {r.detail}" if r.detail else "")
                       + (f"; {len(r.alerts)} alert(s)" if r.alerts else ""))
        click.echo(f"{len(summary.alerts)} alert(s) raised")
        for e in (listed or {}).get("logs", []):  # the registry's signed log list, verified (§6.2)
            click.echo(f"log list: {e['origin']} at {e['url']}: {e['state']}"
                       + (", takes entries now" if e["takes_entries_now"] else ", takes no entries now")
                       + (f", successor {e['successor']}" if e["successor"] else ""))
        return summary.exit_code

    try:
        return asyncio.run(go())
    except ConfigError as e:
        fail(str(e), 2)
    except OAPError as e:
        fail(e.message, 2)


def _banner(cfg: MonitorConfig, svc) -> list[str]:
    lines = [f"log:          {lw.name}  {lw.cfg.url}" + (f"  (+{len(lw.prefixes)} witnesses/mirrors)"
                                                        if lw.prefixes else "") for lw in svc.logs]
    if cfg.registry is not None:
        lines.append(f"registry:     {cfg.registry.url}  ({len(cfg.registry.dids)} DIDs watched)")
    lines += [f"alerts:       {s.name}" for s in cfg.alerts] or ["alerts:       kept in the state directory only"]
    return lines


async def _start(cfg: MonitorConfig) -> Running:
    from .api import build_app
    from .service import MonitorService

    svc = await MonitorService.open(cfg)
    svc.start()

    def banner(url: str) -> list[str]:
        return [*_banner(cfg, svc), f"url:          {url}", f"data:         {cfg.state_dir.resolve()}"]

    return Running(build_app(svc), banner=banner, drain=svc.close)


async def _run_without_http(cfg: MonitorConfig) -> None:
    from .service import MonitorService

    svc = await MonitorService.open(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    svc.start()
    for line in [*_banner(cfg, svc), f"data:         {cfg.state_dir.resolve()}"]:
        print(line)
    sys.stdout.flush()
    try:
        await stop.wait()
    finally:
        await svc.close()
    print("stopped cleanly", flush=True)


@main.command("check-evidence")
@click.argument("evidence", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--policy", "policy_file", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A tlog-policy naming the log's key (its witness lines name the cosigners reported).")
@click.option("--json", "as_json", is_flag=True, help="The verdict as one JSON object.")
def check_evidence(evidence: Path, policy_file: Path, as_json: bool) -> None:
    """Check split-view evidence (an oap-split-view/v1 file) offline: both checkpoints signed by
    the log, and no single append-only tree holding both. Exit 0 when it proves a split view,
    1 when it does not, 2 when it cannot be read."""
    from tlog.client.splitview import SplitViewError, check_split_view, parse_split_view
    from tlog.client.verifier import TrustPolicy
    from tlog.formats.encoding import b64enc

    try:
        policy = TrustPolicy.from_text(policy_file.read_text())
        split = parse_split_view(evidence.read_bytes())
    except (OAPError, OSError, UnicodeDecodeError) as e:
        fail(f"{getattr(e, 'message', None) or e}", 2)
    try:
        report = check_split_view(split, policy)
    except SplitViewError as e:
        if as_json:
            click.echo(json.dumps({"split_view": False, "reason": e.message}))
        else:
            click.echo(f"NOT PROVEN {evidence}: {e.message}")
        sys.exit(1)
    if as_json:
        click.echo(json.dumps({
            "split_view": True, "origin": report.origin, "sizes": [report.a.size, report.b.size],
            "roots": [b64enc(report.a.root), b64enc(report.b.root)], "root_in_a": b64enc(report.root_in_a),
            "cosigners": [sorted(report.cosigners_a), sorted(report.cosigners_b)],
            "quorum": [report.quorum_a, report.quorum_b], "summary": report.describe()}))
    else:
        click.echo(f"SPLIT VIEW {evidence}: {report.describe()}")
        for label, cp, names, q in (("first ", report.a, report.cosigners_a, report.quorum_a),
                                    ("second", report.b, report.cosigners_b, report.quorum_b)):
            click.echo(f"     {label} size {cp.size} root {b64enc(cp.root)}: signed by the log; cosigned by "
                       f"{', '.join(sorted(names)) or 'no witness of the policy'}"
                       + ("" if q else " (quorum not met)"))
