"""`oap-log`: run a log, make keys, anchor receipts, fetch proofs, verify offline."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tlog.errors import ConfigError, InvalidInput, OAPError
from tlog.formats import keys
from tlog.formats.encoding import b64enc
from tlog.formats.entries import commitment_entry, commitment_for, receipt_entry, receipt_hash
from tlog.formats.hashing import format_sha256, parse_leaf_hash, parse_sha256
from tlog.formats.strict import loads_json
from tlog.formats.times import parse_utc
from tlog.runtime import keyfiles
from tlog.runtime.cli import (
    INSECURE_HTTP_CLIENT,
    KEY,
    Running,
    checked_url,
    client_outbound,
    client_url,
    fail,
    load_config,
    native_notice,
    run,
    serve_options,
)
from tlog.runtime.secretfiles import write_secret_bytes
from tlog.server.config import LogConfig
from tlog.storage.durable import fsync_dir, write_atomic
from tlog.storage.interface import Fault

if TYPE_CHECKING:
    from tlog.client.receipts import BundleCheck
    from tlog.client.verifier import TrustPolicy

DEFAULT_URL = os.environ.get("OAP_LOG_URL", "http://127.0.0.1:8080")


@dataclass(frozen=True)
class Hooks:
    """Test hooks for `oap-log serve`, passed as click's context object by a test's own entry
    point (`main(obj=Hooks(...))`, tests/crashserve.py); production runs pass none."""

    faults: Fault | None = None  # called at the crash points of the storage driver and the appender


@click.group()
@click.version_option(package_name="oap-tlog")
def main() -> None:
    """OAP transparency log (C2SP checkpoints, tiles and .tlog-proof bundles)."""
    native_notice()


# --- serve -------------------------------------------------------------------------


@main.command()
@serve_options("log")
@click.option("--origin", default=None, help="Log origin (key name); fixed at first start.")
@click.option("--batch-interval-ms", type=int, default=None)
@click.option("--max-batch", type=int, default=None)
@click.option("--witness-policy", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="tlog-policy with the witnesses (and URLs) to push checkpoints to, and the quorum.")
@click.option("--rate-limit-write", type=float, default=None, help="Entries/s per client (0: off).")
@click.option("--rate-limit-read", type=float, default=None, help="Dynamic reads/s per client (0: off).")
@click.option("--tokens-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None)
@click.option("--auth-required-for", default=None,
              help="Entry types needing a bearer token, e.g. commitment,registry or *.")
@click.option("--read-workers", type=int, default=None,
              help="Extra processes answering tile and checkpoint reads on the same port (plain HTTP only).")
@click.pass_obj
def serve(hooks: Hooks | None, config_file, **flags) -> None:
    """Run the log server until Ctrl-C (or SIGTERM)."""
    cfg = load_config(LogConfig, section="log", env_prefix="OAP_LOG_", config_file=config_file, **flags)
    if "OAP_TLOG_MAP_WINDOW_MB" in os.environ:  # the env-only setting before map_window_mb
        logging.getLogger("oap.tlog").warning("OAP_TLOG_MAP_WINDOW_MB is no longer read: the log's map window is "
                                              "map_window_mb (OAP_LOG_MAP_WINDOW_MB), now %d MiB", cfg.map_window_mb)
    run(cfg, lambda: _start(cfg, hooks))


async def _start(cfg: LogConfig, hooks: Hooks | None = None) -> Running:
    from tlog.server.api import build_app
    from tlog.server.service import LogService

    svc = await LogService.open(cfg, faults=hooks.faults if hooks is not None else None)
    workers = None
    if cfg.read_workers:
        from tlog.http.metrics import RequestMetrics
        from tlog.server.readworkers import ReadWorkers

        workers = ReadWorkers(cfg, svc.appender, RequestMetrics(svc.metrics.requests, svc.metrics.request_seconds))
    return Running(build_app(svc), drain=svc.close, helpers=workers, banner=lambda url: [
        f"origin:       {svc.origin}", f"verifier key: {svc.signer.vkey}", f"url:          {url}",
        f"tree size:    {svc.appender.state.size if svc.appender.state else 'nothing published yet'}",
        *(f"also signing: {s.vkey}   (a key rotation's overlap)" for s in svc.extra_signers),
        f"data:         {cfg.data_dir.resolve()}  (policy: {cfg.data_dir / 'log.policy'})"])


# --- keys --------------------------------------------------------------------------


@main.command()
@click.option("--name", required=True, help="Key name (for a log: its origin).")
@click.option("--out", required=True,
              help="Private key file to create (mode 0600, never overwritten), or a pkcs11: URI "
                   "(token=...;object=<new label>) to make the key inside a token, where it never leaves.")
@click.option("--import", "import_from", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="With a pkcs11: --out: put this existing key file's key into the token instead of a new one "
                   "(a log, witness or registry keeps its key, and its verifier key, when it moves to hardware).")
def keygen(name: str, out: str, import_from: Path | None) -> None:
    """Make an Ed25519 key (or move one into a token); prints its did:key (the signer the receipt
    entries it signs name) and its verifier key (the signed-note key, for a log), never the
    private key; for a key file both are also written beside it (OUT.did, OUT.vkey)."""
    from tlog.formats.did import did_key_from_public

    if keyfiles.is_token_uri(out):
        from tlog.runtime import pkcs11

        try:
            if import_from is not None:
                public = pkcs11.import_ed25519(out, keys.Signer.from_skey(keyfiles.read_key_text(import_from)[0])
                                               .export_seed())
            else:
                public = pkcs11.generate_ed25519(out)
        except ConfigError as e:
            fail(str(e))
        except OAPError as e:
            fail(e.message)
        click.echo(f"did:key:      {did_key_from_public(public)}   (its identity: entries it signs name this signer)")
        click.echo(f"verifier key: {keys.Verifier.from_public(name, keys.ED25519, public).vkey}   (as a log's or "
                   "note key)")
        return
    if import_from is not None:
        fail("--import moves a key into a token: --out must be a pkcs11: URI", 2)
    try:
        signer = keys.Signer.generate(name)
        keyfiles.write_private_key(out, signer.to_skey())
    except FileExistsError:
        fail(f"{out} exists; refusing to overwrite a key")
    except OAPError as e:
        fail(e.message)
    did = did_key_from_public(signer.public)
    Path(str(out) + ".vkey").write_text(signer.vkey + "\n")
    Path(str(out) + ".did").write_text(did + "\n")
    click.echo(f"did:key:      {did}   (its identity: entries it signs name this signer; {out}.did)")
    click.echo(f"verifier key: {signer.vkey}   (as a log's or note key; {out}.vkey)")


@main.command("encrypt-key")
@click.option("--in", "src", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="A key file (of any service or CLI: log, witness, mirror, registry, signer).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The encrypted key file to create (mode 0600, never overwritten).")
def encrypt_key(src: Path, out: Path) -> None:
    """Encrypt a key file with a passphrase (age format, scrypt), read from OAP_KEY_PASSPHRASE_FILE
    (a 0600 file) or OAP_KEY_PASSPHRASE. Services and --key read the result as they read the key file;
    `age -d` decrypts it too. Remove the plain file afterwards (shred it where that means something)."""
    import os

    try:
        text, encrypted = keyfiles.read_key_text(src)
        if encrypted:
            fail(f"{src} is already encrypted")
        passphrase = keyfiles.passphrase_for(out)
        write_secret_bytes(out, keyfiles.encrypt_key_text(text, passphrase))
    except FileExistsError:
        fail(f"{out} exists; refusing to overwrite a key")
    except ConfigError as e:
        fail(str(e))
    except OAPError as e:
        fail(e.message)
    click.echo(json.dumps({"encrypted": os.fspath(out)}))


@main.command()
@click.option("--types", default="*", show_default=True, help="Entry types this token may write, comma-separated.")
@click.option("--label", default="", help="A name for the token's owner (kept in the tokens file).")
def token(types: str, label: str) -> None:
    """Make a bearer token for writes: prints the token (give it to the client) and the
    line for the log's tokens file (which stores only its SHA-256)."""
    from tlog.http.limits import new_token

    tok, digest = new_token()
    click.echo(f"token:            {tok}")
    click.echo(f"tokens_file line: {digest} {types} {label}".rstrip())


def _log_config(config_file: Path | None, data_dir: Path | None) -> LogConfig:
    return load_config(LogConfig, section="log", env_prefix="OAP_LOG_", config_file=config_file, data_dir=data_dir)


_log_source = [
    click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                 help="The log's TOML file ([log] table): which storage, where."),
    click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path),
                 help="The log's data directory (embedded storage, and its key)."),
]


def _with(options):
    def wrap(fn):
        for option in reversed(options):
            fn = option(fn)
        return fn

    return wrap


def _copy_keys(src_dir: Path, key_file: Path | None, dst_dir: Path, dst_key: Path | None = None) -> None:
    """Copy the key files from a log's directory (its key from `key_file` if set) to another
    (its key to `dst_key` if set); files already there are kept."""
    import shutil

    for name in ("log.key", "log.vkey", "log.policy"):
        src = key_file if (name == "log.key" and key_file is not None) else src_dir / name
        dst = dst_key if (name == "log.key" and dst_key is not None) else dst_dir / name
        if keyfiles.is_token_uri(src) or keyfiles.is_token_uri(dst):
            continue  # a key in a token stays there: the target names the same token key
        if src.exists() and not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)  # copy2 keeps the 0600 mode of the key


@main.command()
@_with(_log_source)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Backup directory to create.")
def backup(config_file: Path | None, data_dir: Path | None, out: Path) -> None:
    """Online backup of a log (it may keep running): every entry up to its latest
    checkpoint, that checkpoint, and the key files. Works for every storage."""
    from tlog.server.service import open_snapshot
    from tlog.storage.transfer import export

    cfg = _log_config(config_file, data_dir)

    async def run() -> int:
        snap = open_snapshot(cfg)
        await snap.entries.open()
        try:
            with click.progressbar(length=snap.size, label="backing up", file=sys.stderr,
                                   hidden=snap.size < 100_000) as bar:
                return await export(snap, out, bar.update)
        finally:
            await snap.entries.close()

    try:
        size = asyncio.run(run())
    except FileExistsError:
        fail(f"{out} exists; a backup goes to a new directory")
    except OAPError as e:
        fail(e.message)
    _copy_keys(cfg.data_dir, cfg.key_file, out)
    fsync_dir(out)
    click.echo(json.dumps({"backup": str(out), "tree_size": size}))


async def _import(cfg: LogConfig, note: str, entries, total: int, logged) -> int:
    """Append the entries `entries()` (an async iterator) yields into the (empty) log `cfg`
    names, through its own appender (`tlog.server.importing`), checked against `note` first,
    keeping the times their receipts were logged (`logged`, a `LoggedTimes`); the size."""
    from tlog.server.importing import import_log

    key_path = cfg.key_file or cfg.data_dir / "log.key"
    if not keyfiles.key_exists(key_path):  # never a new key: the log's checkpoints are signed again by its own
        fail(f"no log key at {key_path}: an import signs with the log's key (a backup's log.key, or key_file)")
    # each entry is read twice: once to check the source, once to import it
    with click.progressbar(length=2 * total, label="checking, then importing", file=sys.stderr,
                           hidden=total < 100_000) as bar:
        done = await import_log(cfg, note, entries, logged=logged, progress=bar.update, check_progress=bar.update)
    if done.published:
        click.echo(f"the checkpoint of size {done.size} is signed, not yet published ({done.published}): "
                   "the log publishes it when it starts", err=True)
    return done.size


@main.command()
@click.option("--from", "src", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True,
              help="A backup directory (oap-log backup).")
@_with(_log_source)
def restore(src: Path, config_file: Path | None, data_dir: Path | None) -> None:
    """Restore a backup into an empty log (any storage): same entries, same indices, same
    root as the backup's checkpoint, signed again by the backup's key. Stop the log first."""
    from tlog.storage.transfer import checkpoint_of, read_backup

    cfg = _log_config(config_file, data_dir)
    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    _copy_keys(src, None, cfg.data_dir, cfg.key_file)

    async def each(read) -> AsyncIterator[bytes]:
        for data in read():
            yield data

    try:
        note, entries, logged = read_backup(src)
        size = asyncio.run(_import(cfg, note, lambda: each(entries), checkpoint_of(note)[0], logged))
    except OAPError as e:
        fail(e.message)
    except ConfigError as e:
        fail(str(e))
    click.echo(json.dumps({"restored": str(src), "tree_size": size}))


@main.command()
@click.option("--from-config", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="TOML file of the source log.")
@click.option("--from-data", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Data directory of the source log (embedded storage).")
@click.option("--to-config", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="TOML file of the target log (e.g. storage = \"postgres\" and a bucket).")
@click.option("--to-data", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Data directory of the target (its cache, and the key unless key_file is set).")
def migrate(from_config: Path | None, from_data: Path | None, to_config: Path, to_data: Path | None) -> None:
    """Move a log to another storage, e.g. from the embedded store to PostgreSQL and a bucket.

    Stop the source log's writers first; the target must be empty. Every entry keeps its
    index, the target's root is checked against the source's checkpoint, and the key moves
    with the log (same origin, same verifier key: clients and witnesses see no change).
    """
    from tlog.server.service import open_snapshot
    from tlog.storage.transfer import LoggedTimes

    src = _log_config(from_config, from_data)
    dst = _log_config(to_config, to_data)
    try:
        src_key = src.key_file or src.data_dir / "log.key"  # a token key carries no name: the source's origin
        origin = src.origin if keyfiles.is_token_uri(src_key) else \
            keys.Signer.from_skey(keyfiles.read_key_text(src_key)[0]).name
    except (OSError, OAPError, ConfigError) as e:
        fail(f"the source log's key: {getattr(e, 'message', e)}", 2)
    if dst.origin != origin:
        fail(f"the target's origin {dst.origin!r} is not the source's {origin!r} (set origin in the target's "
             "configuration)", 2)
    dst.data_dir.mkdir(parents=True, exist_ok=True)
    _copy_keys(src.data_dir, src.key_file, dst.data_dir, dst.key_file)

    async def stream(snap) -> AsyncIterator[bytes]:
        """The source's entries in order, a bundle at a time (memory stays flat)."""
        from tlog.formats.tiles import TILE_WIDTH, parse_entry_bundle

        for start in range(0, snap.size, TILE_WIDTH):
            for data in parse_entry_bundle(await snap.entries.bundle(start, min(TILE_WIDTH, snap.size - start))):
                yield data

    async def run() -> int:
        snap = open_snapshot(src)
        await snap.entries.open()
        try:
            logged = await LoggedTimes.read(snap.entries, snap.size)
            return await _import(dst, snap.note, lambda: stream(snap), snap.size, logged)
        finally:
            await snap.entries.close()

    try:
        size = asyncio.run(run())
    except OAPError as e:
        fail(e.message)
    except ConfigError as e:
        fail(str(e))
    click.echo(json.dumps({"migrated": size, "tree_size": size, "storage": dst.storage}))


@main.command()
@_with(_log_source)
@click.option("--successor", default=None,
              help="URL of the log that takes this log's writes from now on, named in every refusal "
                   "(default: successor_url of the configuration).")
@click.option("--timeout", type=click.FloatRange(1, 3600), default=60.0, show_default=True,
              help="Seconds to wait for the final checkpoint to be witnessed and published.")
def freeze(config_file: Path | None, data_dir: Path | None, successor: str | None, timeout: float) -> None:
    """Freeze the log for good: it takes no more entries, and everything it holds is signed,
    witnessed and published in a final checkpoint, the last it ever signs. Reads, tiles and
    proofs go on. Stop an embedded log first (its data directory has one writer); a
    scale-out log (PostgreSQL) is frozen while its frontends run, all of them at once."""
    from tlog.formats.urls import is_base_url
    from tlog.server.service import LogService

    cfg = _log_config(config_file, data_dir)
    succ = cfg.successor_url if successor is None else successor
    if succ and not is_base_url(succ):
        fail(f"--successor must be an http(s) URL without a trailing '/': {succ!r}", 2)

    async def run():
        svc = await LogService.open(cfg)
        try:
            state = await svc.appender.freeze(succ, timeout)
            frozen = svc.appender.frozen
            return state, (frozen.data.get("successor") if frozen is not None else None)  # the first one named
        finally:
            await svc.close()

    try:
        state, named = asyncio.run(run())
    except OAPError as e:
        fail(e.message)
    except ConfigError as e:
        fail(f"{e} (an embedded log is frozen while it is stopped)" if cfg.storage == "embedded" else str(e))
    click.echo(json.dumps({"frozen": True, "origin": cfg.origin, "tree_size": state.size, "successor": named,
                           "checkpoint": state.note}))


def _signing_key(ref: Path | str) -> keys.Ed25519Key:
    """A --key: a key file's seed, or a token key (the entry helpers take either)."""
    try:
        return keyfiles.open_ed25519(ref, what="signer key")
    except ConfigError as e:
        fail(str(e))


# --- add / prove / info ------------------------------------------------------------


URL_HELP = "The log's base URL (http:// or https://; default from OAP_LOG_URL)."
TOKEN_HELP = ("A file holding a bearer token from `oap-log token`, for a log that requires one for writes "
              "(default: the OAP_TOKEN environment variable).")


@main.command()
@click.argument("receipt", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--hash", "hash_", help="Anchor this receipt hash (sha256:<hex>) instead of a receipt file.")
@click.option("--commitment", is_flag=True, help="Privileged mode: anchor only a salted commitment.")
@click.option("--entry", "entry_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Anchor a prepared entry (JSON) of any type.")
@click.option("--key", type=KEY,
              help="Signer key for receipt entries: a key file (from `oap-log keygen`), an encrypted key file, "
                   "or a pkcs11: URI of a key in a token (its PIN from pin-source=file:... or OAP_PKCS11_PIN).")
@click.option("--url", "urls", multiple=True, callback=checked_url,
              help="A log to anchor in; repeat it to anchor in several logs at once (OAP-CORE-1.0 §19.3). "
                   "Default: the policy's log URLs, else OAP_LOG_URL, else " + DEFAULT_URL + ".")
@click.option("--policy", "policy_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="tlog-policy: every bundle is verified against it before it is written, its `log` lines "
                   "give the URLs when --url is not given, and its `logs <k>` line how many must succeed.")
@click.option("--min-logs", type=click.IntRange(1, 32), default=None,
              help="Fail unless at least this many logs anchored the entry (default: the policy's "
                   "`logs <k>`, else 1).")
@click.option("--timeout", type=click.FloatRange(0.1, 600), default=30.0, show_default=True,
              help="Seconds to wait for each log; a log that is down delays nothing beyond this.")
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), help=TOKEN_HELP)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the proof: a .tlog-proof for one log, an anchors file (JSON) holding "
                   "every log's .tlog-proof for several. Default: next to the receipt.")
@click.option("--journal", type=click.Path(dir_okay=False, path_type=Path), envvar="OAP_LOG_JOURNAL",
              help="Record the entry in this journal (one JSON line, fsynced) before sending it: a monitor "
                   "reading the journal (oap-monitor's `journals`) then raises no alert for it, since you made "
                   "it. Default: the OAP_LOG_JOURNAL environment variable, else none.")
@INSECURE_HTTP_CLIENT
def add(receipt, hash_, commitment, entry_file, key, urls, policy_file, min_logs, timeout, token_file, out,
        journal) -> None:
    """Anchor a receipt (file or --hash), a privileged commitment, or an entry, in one
    log or several, and write the proof to verify offline with `oap-log verify`."""
    from tlog.client.client import token_from
    from tlog.client.shards import anchor_following_list
    from tlog.client.verifier import TrustPolicy
    from tlog.formats.anchors import anchors_text

    if sum(x is not None for x in (receipt, hash_, entry_file)) != 1:
        fail("give exactly one of RECEIPT, --hash or --entry")
    try:
        policy = TrustPolicy.from_text(policy_file.read_text()) if policy_file else None
        if not urls:
            urls = tuple(log.url for log in policy.policy.logs if log.url) if policy else ()
            urls = urls or (DEFAULT_URL,)
        urls = tuple(client_url(u) for u in urls)
        need = min_logs or (policy.policy.log_quorum if policy else 1)
        if need > len(urls):
            fail(f"{need} log(s) must anchor the entry, and only {len(urls)} URL(s) are given")
        token = token_from(token_file)
        if entry_file is not None:
            stem: Path = entry_file
        elif receipt is not None:
            stem = receipt
        else:
            stem = Path(parse_sha256(hash_, "--hash").hex()[:16])
        dest = out or Path(str(stem) + (".tlog-proof" if len(urls) == 1 else ".anchors.json"))
        _check_writable(dest)  # before anything is anchored, not after
        entry = _entry_to_anchor(receipt, hash_, commitment, entry_file, key, out, stem)
        if journal is not None:
            _journal(journal, entry)
        results, policy = asyncio.run(anchor_following_list(
            entry, urls, policy=policy, timeout=timeout, token=token, outbound=client_outbound(),
            tell=lambda text: click.echo(f"note: {text}", err=True)))
    except OAPError as e:
        fail(e.message)
    done = [r for r in results if r.anchored is not None]
    for r in results:
        if r.anchored is None:
            click.echo(f"warning: {r.url}: {r.error}", err=True)
    if len(done) < need:
        fail(f"anchored in {len(done)} of {len(urls)} log(s); {need} required")
    bundles = [r.anchored.bundle for r in done if r.anchored is not None]
    dest.write_text(bundles[0] if len(urls) == 1 else anchors_text(bundles))
    first = done[0].anchored
    assert first is not None
    if len(urls) == 1:
        click.echo(json.dumps({"index": first.index, "tree_size": first.tree_size,
                               "duplicate": first.duplicate, "bundle": str(dest)}))
    else:
        click.echo(json.dumps({"anchored_in": [{"url": r.url, "index": r.anchored.index,
                                                "tree_size": r.anchored.tree_size}
                                               for r in done if r.anchored is not None],
                               "failed": [{"url": r.url, "error": r.error} for r in results if r.anchored is None],
                               "bundle": str(dest)}))


def _journal(path: Path, entry: dict) -> None:
    """One line in the anchoring journal, on disk before the entry leaves (tlog.formats.journal)."""
    from datetime import UTC, datetime

    from tlog.formats.journal import journal_line_for
    from tlog.formats.times import format_utc
    from tlog.storage.durable import append_durable

    line = journal_line_for(entry, at=format_utc(datetime.now(UTC).replace(microsecond=0)))
    try:
        append_durable(path, line)
    except OSError as e:
        raise InvalidInput(f"--journal {path}: {e.strerror}") from None


def _check_writable(dest: Path) -> None:
    parent = dest.parent if str(dest.parent) else Path(".")
    if not parent.is_dir():
        raise InvalidInput(f"--out: the directory {parent} does not exist")
    if dest.is_dir():
        raise InvalidInput(f"--out: {dest} is a directory")
    if not os.access(parent, os.W_OK):
        raise InvalidInput(f"--out: the directory {parent} is not writable")


def _entry_to_anchor(receipt: Path | None, hash_: str | None, commitment: bool, entry_file: Path | None,
                     key: Path | str | None, out: Path | None, stem: Path) -> dict:
    """The entry `add` submits: a prepared one, a signed receipt entry, or a commitment
    (whose salt is written, mode 0600, before anything leaves the machine)."""
    if entry_file is not None:
        entry = loads_json(entry_file.read_bytes())
        if not isinstance(entry, dict):
            raise InvalidInput("an entry must be a JSON object")
        return entry
    if receipt is not None:
        obj = loads_json(receipt.read_bytes())
        if not isinstance(obj, dict):
            raise InvalidInput("a receipt must be a JSON object")
        rh = receipt_hash(obj)
        rid = obj.get("receipt_id") if isinstance(obj.get("receipt_id"), str) else None
        ts = _receipt_time(obj.get("timestamp"))
    else:
        assert hash_ is not None
        rh, rid, ts = parse_sha256(hash_, "--hash"), None, None
    if commitment:
        salt = os.urandom(32)
        c = commitment_for(rh, salt)
        salt_path = Path(str(out or stem) + ".salt.json")
        try:
            keys_write_secret(salt_path, {"receipt_hash": format_sha256(rh), "salt": salt.hex(),
                                          "commitment": format_sha256(c)})
        except FileExistsError:
            raise InvalidInput(f"{salt_path} exists: refusing to overwrite a salt (pass another --out)") from None
        click.echo(f"salt kept locally in {salt_path} (needed to open the commitment)", err=True)
        return commitment_entry(c)
    if key is None:
        raise InvalidInput("a receipt entry is signed: pass --key (make one with `oap-log keygen`)")
    return receipt_entry(rh, _signing_key(key), rid if rid and rid.startswith("urn:oap:") else None, timestamp=ts)


def _receipt_time(value: object) -> str | None:
    """The receipt's timestamp, copied into the entry when it is one the log indexes: the
    log can then list a key's receipts by when they claim to be signed (§28.5)."""
    try:
        parse_utc(value, "timestamp")
    except InvalidInput:
        return None
    return value if isinstance(value, str) else None


@main.command()
@click.option("--signer", required=True, help="The signer's DID (or ed25519:<base64> key).")
@click.option("--since", default=None,
              help="Only receipts logged, or claiming to be signed, at or after this RFC 3339 UTC time "
                   "(e.g. the key's compromise).")
@click.option("--url", default=DEFAULT_URL, show_default=True, help=URL_HELP, callback=checked_url)
@INSECURE_HTTP_CLIENT
def receipts(signer: str, since: str | None, url: str) -> None:
    """List the receipt entries a key signed, one JSON object per line (OAP-CORE-1.0 §28.5)."""
    from tlog.client.client import SyncLogClient

    try:
        if since is not None:
            parse_utc(since, "--since")
        with SyncLogClient(url, outbound=client_outbound()) as client:
            for r in client.receipts(signer, since=since):
                click.echo(json.dumps(r, separators=(",", ":")))
    except OAPError as e:
        fail(e.message)


def keys_write_secret(path: Path, obj: dict) -> None:
    write_atomic(path, json.dumps(obj, indent=2) + "\n", mode=0o600, exclusive=True)


@main.command()
@click.argument("index", type=int)
@click.option("--url", default=DEFAULT_URL, show_default=True, help=URL_HELP, callback=checked_url)
@INSECURE_HTTP_CLIENT
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the bundle here.")
def prove(index: int, url: str, out: Path | None) -> None:
    """Fetch a fresh .tlog-proof bundle for the entry at INDEX."""
    from tlog.client.client import SyncLogClient

    try:
        with SyncLogClient(url, outbound=client_outbound()) as client:
            bundle = client.bundle_for(index)
    except OAPError as e:
        fail(e.message)
    if out:
        out.write_text(bundle)
    else:
        click.echo(bundle, nl=False)


@main.command()
@click.option("--url", default=DEFAULT_URL, show_default=True, help=URL_HELP, callback=checked_url)
@INSECURE_HTTP_CLIENT
def info(url: str) -> None:
    """Origin, verifier key and size of a log."""
    from tlog.client.client import SyncLogClient

    try:
        with SyncLogClient(url, outbound=client_outbound()) as client:
            click.echo(json.dumps(client.info(), indent=2))
    except OAPError as e:
        fail(e.message)


# --- verify ------------------------------------------------------------------------


@main.command()
@click.argument("bundles", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--policy", "policy_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="tlog-policy file: log key, witnesses, quorum.")
@click.option("--vkey", "vkeys", multiple=True,
              help="Instead of --policy: a log's verifier key (signed-note vkey); no witness is then required. "
                   "Repeat it for several logs.")
@click.option("--entry", "entry_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The entry the bundles prove (its bytes, as the log hashed them): for a proof made by any "
                   "C2SP log. The bundles' extra lines are then ignored (C2SP tlog-proof leaves them unauthenticated).")
@click.option("--leaf-hash", default=None,
              help="Instead of --entry: the entry's leaf hash (64 hex digits or base64), SHA-256(0x00 || entry).")
@click.option("--receipt", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Also check that the (single) bundle anchors this receipt, and every signature it carries "
                   "(OAP-CORE-1.0 §19.1).")
@click.option("--salt", "salt_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="With --receipt: open a privileged-mode commitment with this salt file.")
@click.option("--did-document", "did_documents", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A pinned DID document (JSON) of a signer that is not a did:key, e.g. a did:web saved "
                   "while it was reachable: signatures by it are then checked offline with it, and with it "
                   "only (the copy a log entry keeps is then not trusted for that DID). Repeatable.")
@click.option("--quiet", is_flag=True, help="Print only failures and the summary.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per bundle, then a summary object.")
def verify(bundles, policy_file, vkeys, entry_file, leaf_hash, receipt, salt_file, did_documents, quiet,
           as_json) -> None:
    """Verify .tlog-proof bundles offline (no network).

    Each bundle's inclusion in a checkpoint the policy accepts is checked, and every
    signature: the entry's own (receipt and registry entries), and with --receipt each
    signature the receipt carries. OK means every one of them was checked and verified.
    Exit 0 when all bundles are OK; 1 when any failed (a proof, a signature, a
    signature the receipt lacks); 3 when nothing failed but some signature could not be
    checked (no DID document of its signer: pass one with --did-document).

    Any C2SP log's proofs: give the log's key (--vkey, or a policy) and the entry (--entry)
    or its leaf hash (--leaf-hash), as C2SP tlog-proof verifiers do."""
    from tlog.client.receipts import verify_proof_file
    from tlog.client.verifier import TrustPolicy

    if (policy_file is None) == (not vkeys):
        fail("give the log's trust policy (--policy) or its key (--vkey), one of the two", 2)
    if entry_file is not None and leaf_hash is not None:
        fail("--entry and --leaf-hash name the same thing: give one", 2)
    try:
        policy = (TrustPolicy.from_text(policy_file.read_text()) if policy_file is not None
                  else TrustPolicy.for_logs(vkeys))
        entry = entry_file.read_bytes() if entry_file is not None else None
        leaf = parse_leaf_hash(leaf_hash.strip(), "--leaf-hash") if leaf_hash is not None else None
        pinned: dict[str, object] = {}
        for p in did_documents:
            doc = loads_json(p.read_bytes())
            if not isinstance(doc, dict) or not isinstance(doc.get("id"), str):
                fail(f"{p}: not a DID document (a JSON object with an id)", 2)
            pinned[doc["id"]] = doc
        receipt_doc = loads_json(receipt.read_bytes()) if receipt is not None else None
        salt = bytes.fromhex(json.loads(salt_file.read_text())["salt"]) if salt_file is not None else None
    except (OAPError, UnicodeDecodeError) as e:
        fail(f"{getattr(e, 'message', e)}", 2)
    except (ValueError, KeyError, TypeError):
        fail(f"{salt_file}: not a salt file from `oap-log add --commitment`", 2)
    if (receipt or salt_file) and len(bundles) != 1:
        fail("--receipt and --salt check one bundle at a time", 2)
    if salt_file is not None and receipt is None:
        fail("--salt opens a commitment to the receipt given with --receipt", 2)
    counts = {"ok": 0, "failed": 0, "incomplete": 0}
    show_each = as_json or (not quiet and len(bundles) <= 20)
    with click.progressbar(bundles, label="verifying", file=sys.stderr,
                           hidden=as_json or len(bundles) <= 20) as bar:
        for path in bar:
            try:
                data = path.read_bytes()
            except OSError as e:
                result: dict[str, Any] = {"bundle": str(path), "ok": False, "verdict": "failed",
                                          "error": f"cannot read: {e.strerror}"}
                lines = [f"FAIL {path}: cannot read: {e.strerror}"]
            else:
                check = verify_proof_file(data, policy, receipt=receipt_doc, salt=salt, pinned=pinned, entry=entry,
                                          leaf=leaf)
                if check.error is not None and entry is None and leaf is None:
                    check.error += _foreign_hint(data, check.error)
                result = {"bundle": str(path), **check.to_json()}
                lines = _verify_lines(path, check, policy, named=entry is not None or leaf is not None)
                for item in result.get("logs", []):  # cosigners the policy lists as mirrors (they store the log)
                    item["mirrors"] = policy.mirrors(item["witnesses"])
            counts[result["verdict"]] += 1
            if as_json:
                click.echo(json.dumps(result, separators=(",", ":")))
            elif show_each or result["verdict"] == "failed":
                click.echo("\n".join(lines))
    if as_json:
        click.echo(json.dumps({"verified": counts["ok"], "failed": counts["failed"],
                               "incomplete": counts["incomplete"]}))
    else:
        more = f", {counts['incomplete']} not fully checked" if counts["incomplete"] else ""
        if vkeys:
            more += " (against the log key alone: no witness cosignature was required)"
        click.echo(f"{counts['ok']} verified, {counts['failed']} failed{more}")
    sys.exit(1 if counts["failed"] else 3 if counts["incomplete"] else 0)


_STATES = {"ok": "OK  ", "failed": "FAIL", "incomplete": "INCOMPLETE"}
_SIG_STATES = {"verified": "verified", "failed": "FAILED", "not_checkable": "NOT CHECKED", "missing": "MISSING"}
_RECEIPT_STATES = {"ok": "all verified", "failed": "FAILED", "incomplete": "not all checked"}
_SOURCES = {"anchored": "the DID document kept in the log entry", "pinned": "a pinned DID document"}


def _verify_lines(path: Path, check: BundleCheck, policy: TrustPolicy, named: bool = False) -> list[str]:
    """`oap-log verify`'s text for one bundle: a line for its anchors and the entry's
    signer (`named`: and the leaf hash the caller named), then one per log that did not
    count, then one per receipt signature."""
    if check.error is not None or check.anchors is None:
        return [f"FAIL {path}: {check.error}"]
    state = _STATES[check.verdict]
    lines = []
    for i, v in enumerate(check.anchors.entries):
        wit = ", ".join(w + (" (ML-DSA-44)" if w in v.checkpoint.post_quantum else "")
                        for w in sorted(v.checkpoint.witnesses)) or "none required"
        mirrors = policy.mirrors(v.checkpoint.witnesses)
        if mirrors:
            wit += f"; mirrors among them: {', '.join(mirrors)}"
        signed = ""
        es = check.entry_signature
        if i == 0 and es is not None:
            signed = f"; signed by {es.by}"
            if es.status != "verified":
                signed += f": {_SIG_STATES[es.status]}: {_hint(es.status, es.reason)}"
            elif es.source in _SOURCES:
                signed += f" (checked with {_SOURCES[es.source]})"
        leaf = f"; leaf hash {b64enc(v.leaf_hash)}" if named else ""
        lines.append(f"{state} {path}: index {v.index} in {v.checkpoint.checkpoint.origin} at size "
                     f"{v.checkpoint.checkpoint.size} (witnesses: {wit}){signed}{leaf}")
    for where, reason in check.anchors.failures:
        lines.append(f"     {path}: {where} does not count: {reason}")
    if check.receipt is not None:
        lines.append(f"     receipt {format_sha256(check.receipt.receipt_hash)} is the one anchored; its signatures: "
                     f"{_RECEIPT_STATES[check.receipt.verdict]}")
        for s in check.receipt.signatures:
            who = f"signature {s.index}" if s.index is not None else "signature"
            by = f" by {s.by}" if s.by else ""
            roles = f" ({', '.join(s.roles)})" if s.roles else ""
            alg = f" ({s.alg})" if s.alg else ""
            if s.status == "verified" and s.source == "did:key":
                how = ", with the did:key itself"
            elif s.status == "verified":
                how = f", with key {s.key} from {_SOURCES.get(s.source or '', s.source)}"
            else:
                how = f": {_hint(s.status, s.reason)}"
            lines.append(f"     {who}{by}{roles}: {_SIG_STATES[s.status]}{alg}{how}")
    return lines


def _foreign_hint(data: bytes, error: str) -> str:
    """What to add to a failure when the bundle may come from another C2SP log: its extra line
    (if any) is not an OAP entry, so the entry must be named."""
    from tlog.formats.entries import decode_entry
    from tlog.formats.proofbundle import parse_proof_bundle

    try:
        b = parse_proof_bundle(data)
    except (OAPError, UnicodeDecodeError):
        return ""  # an anchors file, or no bundle at all: the error says why
    if b.extra is not None:
        try:
            decode_entry(b.extra)
            return ""
        except OAPError:
            pass
    elif "no entry" not in error:
        return ""
    return (" (a proof made by another C2SP log: name its entry with --entry or its leaf hash with --leaf-hash, "
            "and its key with --vkey or --policy)")


def _hint(status: str, reason: str) -> str:
    if status == "not_checkable" and ("no DID document" in reason or "none is pinned" in reason):
        return reason + " (pass a copy with --did-document)"
    return reason


@main.command()
@click.argument("url", callback=checked_url)
@INSECURE_HTTP_CLIENT
@click.option("--policy", "policy_file", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="tlog-policy file: log key, witnesses, quorum.")
@click.option("--entries/--no-entries", default=True, show_default=True,
              help="Also read every entry bundle and check each entry against its leaf hash.")
def audit(url: str, policy_file: Path, entries: bool) -> None:
    """Verify a log from its tiles alone: URL is the log, or any static copy of its bucket.

    The checkpoint must satisfy the policy, the tiles must hash to its root, and (by
    default) every entry must hash to its leaf. Exit 1 on the first problem.
    """
    import aiohttp

    from tlog.client.audit import audit as run_audit
    from tlog.client.verifier import TrustPolicy
    from tlog.formats.tiles import TILE_WIDTH
    from tlog.transport import read_capped

    cap = TILE_WIDTH * (2 + 0xFFFF)  # the largest entry bundle; tiles and checkpoints are smaller

    policy = TrustPolicy.from_text(policy_file.read_text())
    base = url.rstrip("/")

    async def go():
        async with client_outbound().session(timeout=60) as s:
            async def fetch(path: str) -> bytes:
                async with s.get(f"{base}/{path}", allow_redirects=False) as r:
                    if r.status != 200:
                        raise OAPError(f"{base}/{path}: HTTP {r.status}")
                    return await read_capped(r, cap)

            return await run_audit(fetch, policy, entries=entries)

    try:
        result = asyncio.run(go())
    except (OAPError, aiohttp.ClientError, OSError) as e:
        fail(getattr(e, "message", None) or f"cannot read {base}: {e}", 1)
    cp = result.checkpoint.checkpoint
    mirrors = policy.mirrors(result.checkpoint.witnesses)
    click.echo(f"OK   {cp.origin} at size {cp.size}: {result.tiles} tiles and {result.entries} entries verified "
               f"(witnesses: {', '.join(sorted(result.checkpoint.witnesses)) or 'none required'}"
               + (f"; mirrors among them: {', '.join(mirrors)}" if mirrors else "") + ")")


@main.command()
@click.argument("receipts", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--after", default=None, help="Start from the receipt citing this hash (sha256:<hex>): the head "
                                            "of a chain checked before.")
@click.option("--principal", default=None, help="Every receipt must name this principal_did.")
@click.option("--json", "as_json", is_flag=True, help="The report as one JSON object.")
def chain(receipts: tuple[Path, ...], after: str | None, principal: str | None, as_json: bool) -> None:
    """Check a principal's receipt hash chain (OAP-CORE-1.0 §19.2), offline: every
    receipt cites the previous one's hash; a lost, altered or forked receipt breaks it.
    Exit 1 on any break."""
    from tlog.client.chain import verify_chain

    try:
        start = parse_sha256(after, "--after") if after else None
        docs = [loads_json(p.read_bytes()) for p in receipts]
        report = verify_chain(docs, after=start, principal=principal)
    except OAPError as e:
        fail(e.message, 2)
    head = format_sha256(report.head) if report.head else None
    if as_json:
        click.echo(json.dumps({"ok": report.ok, "length": len(report.chain), "head": head,
                               "problems": list(report.problems)}))
    else:
        for problem in report.problems:
            click.echo(f"BREAK {problem}")
        state = "OK" if report.ok else "BROKEN"
        click.echo(f"{state}: {len(report.chain)} of {len(docs)} receipts on the chain; head {head}")
    sys.exit(0 if report.ok else 1)
