"""`oap-log`: run a log, make keys, anchor receipts, fetch proofs, verify offline."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from pathlib import Path

import click

from tlog.errors import InvalidInput, OAPError
from tlog.formats import keys
from tlog.formats.entries import commitment_entry, commitment_for, decode_entry, receipt_entry, receipt_hash
from tlog.formats.hashing import format_sha256, parse_sha256
from tlog.formats.strict import loads_json
from tlog.formats.times import parse_utc
from tlog.server.config import LogConfig
from tlog.service import keyfiles
from tlog.service.cli import Running, fail, load_config, run, serve_options
from tlog.storage.files import fsync_dir, write_atomic

DEFAULT_URL = os.environ.get("OAP_LOG_URL", "http://127.0.0.1:8080")





@click.group()
@click.version_option(package_name="oap-tlog")
def main() -> None:
    """OAP transparency log (C2SP checkpoints, tiles and .tlog-proof bundles)."""


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
def serve(config_file, **flags) -> None:
    """Run the log server until Ctrl-C (or SIGTERM)."""
    cfg = load_config(LogConfig, section="log", env_prefix="OAP_LOG_", config_file=config_file, **flags)
    if "OAP_TLOG_MAP_WINDOW_MB" in os.environ:  # the env-only setting before map_window_mb
        logging.getLogger("oap.tlog").warning("OAP_TLOG_MAP_WINDOW_MB is no longer read: the log's map window is "
                                              "map_window_mb (OAP_LOG_MAP_WINDOW_MB), now %d MiB", cfg.map_window_mb)
    run(cfg, lambda: _start(cfg))


async def _start(cfg: LogConfig) -> Running:
    from tlog.server.app import build_app
    from tlog.server.service import LogService

    svc = await LogService.open(cfg)
    workers = None
    if cfg.read_workers:
        from tlog.server.readworkers import ReadWorkers
        from tlog.service.metrics import RequestMetrics

        workers = ReadWorkers(cfg, svc.sequencer, RequestMetrics(svc.metrics.requests, svc.metrics.request_seconds))
    return Running(build_app(svc), drain=svc.close, helpers=workers, banner=lambda url: [
        f"origin:       {svc.origin}", f"verifier key: {svc.signer.vkey}", f"url:          {url}",
        f"tree size:    {svc.state.size}",
        f"data:         {cfg.data_dir.resolve()}  (policy: {cfg.data_dir / 'log.policy'})"])


# --- keys --------------------------------------------------------------------------


@main.command()
@click.option("--name", required=True, help="Key name (for a log: its origin).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Private key file to create (mode 0600, never overwritten).")
def keygen(name: str, out: Path) -> None:
    """Make an Ed25519 key; prints only the verifier key."""
    try:
        signer = keys.Signer.generate(name)
        keyfiles.write_private_key(out, signer.to_skey())
    except FileExistsError:
        fail(f"{out} exists; refusing to overwrite a key")
    except OAPError as e:
        fail(e.message)
    Path(str(out) + ".vkey").write_text(signer.vkey + "\n")
    click.echo(signer.vkey)


@main.command()
@click.option("--types", default="*", show_default=True, help="Entry types this token may write, comma-separated.")
@click.option("--label", default="", help="A name for the token's owner (kept in the tokens file).")
def token(types: str, label: str) -> None:
    """Make a bearer token for writes: prints the token (give it to the client) and the
    line for the log's tokens file (which stores only its SHA-256)."""
    from tlog.service.limits import new_token

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


def _copy_keys(src_dir: Path, key_file: Path | None, dst_dir: Path) -> None:
    import shutil

    for name in ("log.key", "log.vkey", "log.policy"):
        src = key_file if (name == "log.key" and key_file is not None) else src_dir / name
        if src.exists() and not (dst_dir / name).exists():
            shutil.copy2(src, dst_dir / name)  # copy2 keeps the 0600 mode of the key


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


def _import(cfg: LogConfig, note: str, entries, total: int) -> int:
    """Append `entries` into the (empty) log `cfg` names, checked against `note`; the size."""
    from tlog.server.service import checkpoint_signer, load_or_create_key, open_storage
    from tlog.storage.transfer import import_into

    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    signer = load_or_create_key(cfg.data_dir, cfg.origin, cfg.key_file)
    sign = checkpoint_signer(signer)
    storage = open_storage(cfg)
    try:
        storage.open(sign)
        with click.progressbar(length=total, label="importing", file=sys.stderr, hidden=total < 100_000) as bar:
            return import_into(storage, sign, note, entries, bar.update).size
    finally:
        storage.close()


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
    _copy_keys(src, None, cfg.key_file.parent if cfg.key_file else cfg.data_dir)
    try:
        note, entries = read_backup(src)
        size = _import(cfg, note, entries, checkpoint_of(note)[0])
    except OAPError as e:
        fail(e.message)
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

    src = _log_config(from_config, from_data)
    dst = _log_config(to_config, to_data)
    try:
        origin = keys.Signer.from_skey(keyfiles.read_private_key(src.key_file or src.data_dir / "log.key")).name
    except (OSError, OAPError) as e:
        fail(f"the source log's key: {getattr(e, 'message', e)}", 2)
    if dst.origin != origin:
        fail(f"the target's origin {dst.origin!r} is not the source's {origin!r} (set origin in the target's "
             "configuration)", 2)
    dst.data_dir.mkdir(parents=True, exist_ok=True)
    _copy_keys(src.data_dir, src.key_file, dst.key_file.parent if dst.key_file else dst.data_dir)

    def stream(snap, loop: asyncio.AbstractEventLoop):
        """The source's entries in order, a bundle at a time (memory stays flat)."""
        from tlog.formats.tiles import TILE_WIDTH, parse_entry_bundle

        for start in range(0, snap.size, TILE_WIDTH):
            bundle = loop.run_until_complete(snap.entries.bundle(start, min(TILE_WIDTH, snap.size - start)))
            yield from parse_entry_bundle(bundle)

    loop = asyncio.new_event_loop()
    try:
        snap = open_snapshot(src)
        loop.run_until_complete(snap.entries.open())
        try:
            size = _import(dst, snap.note, stream(snap, loop), snap.size)
        finally:
            loop.run_until_complete(snap.entries.close())
    except OAPError as e:
        fail(e.message)
    finally:
        loop.close()
    click.echo(json.dumps({"migrated": snap.size, "tree_size": size, "storage": dst.storage}))


def _seed_from(path: Path) -> bytes:
    return keyfiles.read_seed(path)  # the entry helpers sign with the raw seed


# --- add / prove / info ------------------------------------------------------------


@main.command()
@click.argument("receipt", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--hash", "hash_", help="Anchor this receipt hash (sha256:<hex>) instead of a receipt file.")
@click.option("--commitment", is_flag=True, help="Privileged mode: anchor only a salted commitment.")
@click.option("--entry", "entry_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Anchor a prepared entry (JSON) of any type.")
@click.option("--key", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Signer key for receipt entries (from `oap-log keygen`).")
@click.option("--url", default=DEFAULT_URL, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Where to write the .tlog-proof.")
def add(receipt, hash_, commitment, entry_file, key, url, out) -> None:
    """Anchor a receipt (file or --hash), a privileged commitment, or an entry."""
    from tlog.client.client import SyncLogClient

    if sum(x is not None for x in (receipt, hash_, entry_file)) != 1:
        fail("give exactly one of RECEIPT, --hash or --entry")
    try:
        if entry_file is not None:
            entry = loads_json(entry_file.read_bytes())
            stem = entry_file
        else:
            if receipt is not None:
                obj = loads_json(receipt.read_bytes())
                if not isinstance(obj, dict):
                    fail("a receipt must be a JSON object")
                rh = receipt_hash(obj)
                rid = obj.get("receipt_id") if isinstance(obj.get("receipt_id"), str) else None
                ts = _receipt_time(obj.get("timestamp"))
                stem = receipt
            else:
                rh, rid, ts, stem = parse_sha256(hash_, "--hash"), None, None, Path(hash_[7:23])
            if commitment:
                salt = os.urandom(32)
                c = commitment_for(rh, salt)
                salt_path = Path(str(out or stem) + ".salt.json")
                keys_write_secret(salt_path, {"receipt_hash": format_sha256(rh), "salt": salt.hex(),
                                              "commitment": format_sha256(c)})
                click.echo(f"salt kept locally in {salt_path} (needed to open the commitment)", err=True)
                entry = commitment_entry(c)
            else:
                if key is None:
                    fail("a receipt entry is signed: pass --key (make one with `oap-log keygen`)")
                entry = receipt_entry(rh, _seed_from(key), rid if rid and rid.startswith("urn:oap:") else None,
                                      timestamp=ts)
        with SyncLogClient(url) as client:
            anchored = client.anchor(entry)
    except OAPError as e:
        fail(e.message)
    dest = out or Path(str(stem) + ".tlog-proof")
    dest.write_text(anchored.bundle)
    click.echo(json.dumps({"index": anchored.index, "tree_size": anchored.tree_size,
                           "duplicate": anchored.duplicate, "bundle": str(dest)}))


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
@click.option("--url", default=DEFAULT_URL, show_default=True, help="The log's base URL.")
def receipts(signer: str, since: str | None, url: str) -> None:
    """List the receipt entries a key signed, one JSON object per line (OAP-CORE-1.0 §28.5)."""
    from tlog.client.client import SyncLogClient

    try:
        if since is not None:
            parse_utc(since, "--since")
        with SyncLogClient(url) as client:
            for r in client.receipts(signer, since=since):
                click.echo(json.dumps(r, separators=(",", ":")))
    except OAPError as e:
        fail(e.message)


def keys_write_secret(path: Path, obj: dict) -> None:
    write_atomic(path, json.dumps(obj, indent=2) + "\n", mode=0o600, exclusive=True)


@main.command()
@click.argument("index", type=int)
@click.option("--url", default=DEFAULT_URL, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the bundle here.")
def prove(index: int, url: str, out: Path | None) -> None:
    """Fetch a fresh .tlog-proof bundle for the entry at INDEX."""
    from tlog.client.client import SyncLogClient

    try:
        with SyncLogClient(url) as client:
            bundle = client.bundle_for(index)
    except OAPError as e:
        fail(e.message)
    if out:
        out.write_text(bundle)
    else:
        click.echo(bundle, nl=False)


@main.command()
@click.option("--url", default=DEFAULT_URL, show_default=True)
def info(url: str) -> None:
    """Origin, verifier key and size of a log."""
    from tlog.client.client import SyncLogClient

    try:
        with SyncLogClient(url) as client:
            click.echo(json.dumps(client.info(), indent=2))
    except OAPError as e:
        fail(e.message)


# --- verify ------------------------------------------------------------------------


@main.command()
@click.argument("bundles", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--policy", "policy_file", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="tlog-policy file: log key, witnesses, quorum.")
@click.option("--receipt", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Also check that the (single) bundle anchors this receipt.")
@click.option("--salt", "salt_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="With --receipt: open a privileged-mode commitment with this salt file.")
@click.option("--did-document", "did_documents", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A pinned DID document (JSON) of a signer that is not a did:key, e.g. a did:web "
                   "saved while it was reachable: the entry's signature is then checked offline too. Repeatable.")
@click.option("--quiet", is_flag=True, help="Print only failures and the summary.")
def verify(bundles, policy_file, receipt, salt_file, did_documents, quiet) -> None:
    """Verify .tlog-proof bundles offline (no network). Exit 1 if any fails.

    Each bundle's inclusion in a checkpoint the policy accepts is checked; so is the
    signature of a receipt or registry entry it carries (did:key signers always,
    other DIDs when their document is given with --did-document)."""
    from tlog.client.verifier import TrustPolicy
    from tlog.formats.diddoc import lookup_from, needs_resolution
    from tlog.formats.entries import check_entry_signature

    try:
        policy = TrustPolicy.from_text(policy_file.read_text())
        pinned: dict[str, object] = {}
        for p in did_documents:
            doc = loads_json(p.read_bytes())
            if not isinstance(doc, dict) or not isinstance(doc.get("id"), str):
                fail(f"{p}: not a DID document (a JSON object with an id)", 2)
            pinned[doc["id"]] = doc
        lookup = lookup_from(pinned.items())
    except (OAPError, UnicodeDecodeError) as e:
        fail(f"{getattr(e, 'message', e)}", 2)
    if (receipt or salt_file) and len(bundles) != 1:
        fail("--receipt and --salt check one bundle at a time", 2)
    failures = 0
    show_each = not quiet and len(bundles) <= 20
    with click.progressbar(bundles, label="verifying", file=sys.stderr,
                           hidden=len(bundles) <= 20) as bar:
        for path in bar:
            try:
                v = policy.verify_bundle(path.read_bytes())
                if receipt is not None:
                    _check_receipt(v.entry, receipt, salt_file)
                signed = ""
                if v.entry is not None:
                    signer = _entry_signer(v.entry)
                    did = needs_resolution(signer)
                    if signer is None:
                        pass
                    elif did is not None and did not in pinned:
                        signed = f"; signed by {signer}: not checked, pass its --did-document"
                    else:
                        signed = f"; signed by {check_entry_signature(v.entry, lookup)}"
                if show_each:
                    cp = v.checkpoint
                    wit = ", ".join(sorted(cp.witnesses)) or "none required"
                    click.echo(f"OK   {path}: index {v.index} in {cp.checkpoint.origin} at size "
                               f"{cp.checkpoint.size} (witnesses: {wit}){signed}")
            except OSError as e:
                failures += 1
                click.echo(f"FAIL {path}: cannot read: {e.strerror}")
            except (OAPError, UnicodeDecodeError) as e:
                failures += 1
                click.echo(f"FAIL {path}: {getattr(e, 'message', e)}")
    click.echo(f"{len(bundles) - failures} verified, {failures} failed")
    sys.exit(1 if failures else 0)


@main.command()
@click.argument("url")
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

    policy = TrustPolicy.from_text(policy_file.read_text())
    base = url.rstrip("/")

    async def go():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
            async def fetch(path: str) -> bytes:
                async with s.get(f"{base}/{path}") as r:
                    if r.status != 200:
                        raise OAPError(f"{base}/{path}: HTTP {r.status}")
                    return await r.read()

            return await run_audit(fetch, policy, entries=entries)

    try:
        result = asyncio.run(go())
    except (OAPError, aiohttp.ClientError, OSError) as e:
        fail(getattr(e, "message", None) or f"cannot read {base}: {e}", 1)
    cp = result.checkpoint.checkpoint
    click.echo(f"OK   {cp.origin} at size {cp.size}: {result.tiles} tiles and {result.entries} entries verified "
               f"(witnesses: {', '.join(sorted(result.checkpoint.witnesses)) or 'none required'})")


def _entry_signer(entry: bytes) -> str | None:
    try:
        obj = decode_entry(entry)
    except OAPError:
        return None  # not an OAP entry (another log's format): inclusion is all there is to check
    signer = obj.get("signer") if obj.get("type") in ("receipt", "registry") else None
    return signer if isinstance(signer, str) else None


def _check_receipt(entry: bytes | None, receipt: Path, salt_file: Path | None) -> None:
    from tlog.errors import VerificationError

    if entry is None:
        raise VerificationError("bundle carries no entry to compare with the receipt")
    e = decode_entry(entry)
    rh = receipt_hash(loads_json(receipt.read_bytes()))
    if salt_file is not None:
        salt = bytes.fromhex(json.loads(salt_file.read_text())["salt"])
        if e.get("type") != "commitment" or e["commitment"] != format_sha256(commitment_for(rh, salt)):
            raise VerificationError("the commitment does not open to this receipt with this salt")
    elif e.get("type") != "receipt" or e["receipt_hash"] != format_sha256(rh):
        raise VerificationError("the bundle anchors a different receipt")
