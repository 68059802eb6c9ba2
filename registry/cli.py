"""`oap-registry`: run a registry or mirror, sign and submit records, check status offline.

Exit codes: 0 success; 1 verification failed or the mirror refused the
upstream (evidence kept); 2 usage, configuration or network error.
`status` also uses 0 good, 3 revoked, 4 unknown, 5 suspended once the response verified.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import aiohttp
import click

from tlog.client.verifier import TrustPolicy
from tlog.errors import ConfigError, OAPError
from tlog.formats import keys
from tlog.formats.keys import Ed25519Key
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

from .config import RegistryConfig
from .records import KEY_EVENTS, KEYED_EVENTS, REASONS

STATUS_EXIT = {"good": 0, "revoked": 3, "unknown": 4, "suspended": 5}

F = TypeVar("F", bound=Callable[..., Any])


def _seed(path: Path | str) -> Ed25519Key:
    """A --key: a key file's seed, an encrypted key file's, or a token key (`keyfiles.open_key`)."""
    try:
        return keyfiles.open_ed25519(path, what="record signing key")
    except (OSError, OAPError, ConfigError) as e:
        fail(f"{path}: {getattr(e, 'message', e)}", 2)
        raise


def _trust(policy_file: Path | None, vkeys: tuple[str, ...], min_logs: int | None) -> TrustPolicy | None:
    """The logs anchors are checked against: a tlog-policy, or log keys; an anchor counts once
    `min_logs` of them hold it (default: the policy's `logs <k>`, else 1)."""
    try:
        if policy_file is not None:
            policy = TrustPolicy.from_text(policy_file.read_text())
            return policy.requiring(min_logs) if min_logs else policy
        if vkeys:
            if min_logs is not None and min_logs > len(vkeys):
                fail(f"--min-logs {min_logs}: only {len(vkeys)} --log-vkey given", 2)
            return TrustPolicy.for_logs(vkeys, min_logs or 1)
        if min_logs is not None:
            fail("--min-logs needs --log-policy or --log-vkey", 2)
    except (OSError, OAPError) as e:
        fail(f"log trust: {getattr(e, 'message', e)}", 2)
    return None


@click.group()
@click.version_option(package_name="oap-tlog")
def main() -> None:
    """OAP Registry: add-only Git registry of conformance receipts and revocations."""
    native_notice()


# --- serve -------------------------------------------------------------------------


@main.command()
@serve_options("registry")
@click.option("--name", default=None, help="Repository name, served as /<name>.git.")
@click.option("--log-url", "log_urls", multiple=True,
              help="Log to anchor commits, status epochs and kill switches in; repeat it to anchor in several "
                   "(OAP-CORE-1.0 §19.3).")
@click.option("--anchor-quorum", type=int, default=None,
              help="With several logs: how many must hold an anchor (default min(2, number of logs)).")
@click.option("--log-policy", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="tlog-policy to check anchors against (default: the log keys named at genesis).")
@click.option("--key", "key_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Registry key (default <data>/registry.key, created on first start): a key file, an encrypted "
                   "key file or a pkcs11: URI of a key in a token.")
@click.option("--public-url", default=None, help="Base URL of this registry, named in status list credentials.")
@click.option("--upstream", default=None, help="Run as a read-only, verifying mirror of this registry.")
@click.option("--registry-key", default=None, help="Mirror: pin the upstream registry key (did:key).")
@click.option("--mirror-interval", type=float, default=None)
@click.option("--epoch-seconds", type=int, default=None)
@click.option("--batch-interval-ms", type=int, default=None)
@click.option("--anchor-idle-seconds", type=float, default=None)
@click.option("--bootstrap-witness", "bootstrap", multiple=True,
              help="DID accepted as an L4/L5 witness without a receipt (genesis only; repeatable).")
@click.option("--rate-limit", type=float, default=None, help="Requests/s per client (0: off).")
def serve(config_file: Path | None, bootstrap: tuple[str, ...], log_urls: tuple[str, ...], **flags: Any) -> None:
    """Run the registry (or a mirror) until Ctrl-C or SIGTERM."""
    if log_urls:  # the flags name the logs: one is log_url, several log_urls, replacing the file's
        flags |= {"log_url": log_urls[0], "log_urls": ()} if len(log_urls) == 1 else \
            {"log_url": "", "log_urls": log_urls}
    cfg = load_config(RegistryConfig, section="registry", env_prefix="OAP_REGISTRY_", config_file=config_file,
                      bootstrap_witnesses=",".join(bootstrap) if bootstrap else None, **flags)
    run(cfg, lambda: _start(cfg))


async def _start(cfg: RegistryConfig) -> Running:
    from .api import build_app
    from .service import RegistryService

    svc = await RegistryService.open(cfg)
    head = svc.index.head
    return Running(build_app(svc), drain=svc.close, banner=lambda url: [
        f"registry key: {svc.registry}", f"mode:         {'mirror of ' + cfg.upstream if cfg.mirror else 'primary'}",
        f"url:          {url}", f"git:          {url}/{cfg.name}.git", f"head seq:     {head.seq if head else 'none'}",
        f"data:         {cfg.data_dir.resolve()}"])


@main.command("rotate-key")
@click.option("--data", "data_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The registry's data directory (the registry stopped).")
@click.option("--key", "key_file", type=KEY, default=None,
              help="The key in force (default <data>/registry.key): it signs the hand-over.")
@click.option("--new-key", "new_key", required=True, type=KEY,
              help="The new key (oap-registry keygen; a key file, an encrypted key file or a pkcs11: URI): it "
                   "countersigns.")
def rotate_key(data_dir: Path, key_file: Path | str | None, new_key: Path | str) -> None:
    """Rotate the registry's key in place: prepare the rotation statement, signed by the key in
    force and countersigned by the new one. Stop the registry first; then start it with
    --key <new key>: it commits the rotation (anchored by the new key) and signs with the new key
    from then on. Mirrors and clients pinned to the old key follow the statement."""
    from .service import prepare_rotation

    try:
        r = prepare_rotation(data_dir, key_file or data_dir / "registry.key", new_key)
    except (OSError, OAPError, ConfigError) as e:
        fail(f"rotate-key: {getattr(e, 'message', e)}", 2)
    click.echo(f"key rotation {r.number} prepared: {r.previous} -> {r.key} (commit {r.seq})")
    click.echo(f"start the registry with --key {new_key} to commit it")


# --- keys and records ------------------------------------------------------------------


@main.command()
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Private key file to create (mode 0600, never overwritten).")
def keygen(out: Path) -> None:
    """Make an Ed25519 key for signing records; prints its did:key."""
    from .client import did_of

    signer = keys.Signer.generate("oap-registry")
    try:
        keyfiles.write_private_key(out, signer.to_skey())
    except FileExistsError:
        fail(f"{out} exists; refusing to overwrite a key", 2)
    did = did_of(signer.export_seed())
    Path(str(out) + ".did").write_text(did + "\n")
    click.echo(did)


def _submit(url: str, record: dict, out: Path | None) -> None:
    from .client import RegistryClient

    async def go() -> dict[str, Any]:
        async with RegistryClient(url, outbound=client_outbound()) as c:
            return await c.submit(record)

    try:
        res = asyncio.run(go())
    except OAPError as e:
        fail(e.message, 1)
    except (TimeoutError, aiohttp.ClientError, OSError) as e:
        fail(f"cannot reach the registry at {url}: {e}", 2)
    if out is not None:
        out.write_text(res["anchor"])
    click.echo(json.dumps({k: v for k, v in res.items() if k not in ("anchor", "receipt_anchor")}))


def _url_option(checked: bool = True, note: str = ""):
    """--url (or OAP_REGISTRY_URL), checked as it is parsed (`checked_url`) unless the command
    checks it itself: `status` does, and only when it goes to the network, so that an --offline
    check of a saved response never fails on a URL it does not use."""
    return click.option("--url", default="http://127.0.0.1:8090", show_default=True, envvar="OAP_REGISTRY_URL",
                        callback=checked_url if checked else None,
                        help=f"The registry's base URL (or OAP_REGISTRY_URL){note}.")


def URL_OPT(f):
    return INSECURE_HTTP_CLIENT(_url_option()(f))
ANCHOR_OUT = click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
                          help="Write the commit's .tlog-proof here.")


@main.command()
@click.argument("record", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@URL_OPT
@ANCHOR_OUT
def submit(record: Path, url: str, out: Path | None) -> None:
    """Submit a prepared record (JSON): conformance, revocation, kill_switch, key_event."""
    from tlog.formats.strict import loads_json

    try:
        doc = loads_json(record.read_bytes())
    except OAPError as e:
        fail(f"{record}: {e.message}", 2)
    _submit(url, doc, out)  # type: ignore[arg-type]


@main.command()
@click.option("--key", "key_file", required=True, type=KEY,
              help="Key of the subject or of a controller.")
@click.option("--kind", type=click.Choice(["did", "vc", "key", "conformance"]), required=True)
@click.option("--subject", default=None, help="What is revoked (default: the key's own did:key).")
@click.option("--reason", type=click.Choice(sorted(REASONS)), default="unspecified", show_default=True,
              help="Why (RFC 5280 reason codes); key_compromise with an earlier --effective-at for a stolen key.")
@click.option("--effective-at", default=None, help="RFC 3339 UTC time (default now; earlier for a compromise).")
@click.option("--status-list-index", type=int, default=None, help="vc: the credential's statusListIndex.")
@URL_OPT
@ANCHOR_OUT
def revoke(key_file: Path | str, kind: str, subject: str | None, reason: str, effective_at: str | None,
           status_list_index: int | None, url: str, out: Path | None) -> None:
    """Sign and submit a revocation."""
    from .client import did_of, make_revocation

    seed = _seed(key_file)
    try:
        rec = make_revocation(seed, kind=kind, subject=subject or did_of(seed), reason=reason,
                              effective_at=effective_at, status_list_index=status_list_index)
    except OAPError as e:
        fail(e.message, 2)
    _submit(url, rec, out)


@main.command("kill-switch")
@click.option("--key", "key_file", required=True, type=KEY)
@click.option("--principal", default=None, help="Principal DID (default: the key's did:key).")
@click.option("--effective-at", default=None)
@URL_OPT
@ANCHOR_OUT
def kill_switch(key_file: Path | str, principal: str | None, effective_at: str | None, url: str,
                out: Path | None) -> None:
    """Revoke every token, grant and webhook subscription of a principal (§22.3)."""
    from .client import make_kill_switch

    _submit(url, make_kill_switch(_seed(key_file), principal=principal, effective_at=effective_at), out)


@main.command("key-event")
@click.option("--key", "key_file", required=True, type=KEY)
@click.option("--subject", required=True, help="The principal DID the event is about.")
@click.option("--controller", default=None,
              help="add_controller, rotate: DID of the new controller (a did:key, or e.g. a did:web).")
@click.option("--event", type=click.Choice(sorted(KEY_EVENTS)), default="add_controller", show_default=True,
              help="add_controller; rotate (retires the previous key); suspend (until a recovery); "
                   "resume (recovers from a suspension or a kill switch).")
@click.option("--reason", type=click.Choice(sorted(REASONS)), default=None, help="suspend: why.")
@click.option("--effective-at", default=None, help="RFC 3339 UTC time (default now; rotate and resume: not earlier).")
@URL_OPT
@ANCHOR_OUT
def key_event(key_file: Path | str, subject: str, controller: str | None, event: str, reason: str | None,
              effective_at: str | None, url: str, out: Path | None) -> None:
    """Controllers, rotation, suspension and recovery of a principal (§5.3)."""
    from .client import make_key_event

    if (event in KEYED_EVENTS) != (controller is not None):
        fail(f"--controller is {'required' if event in KEYED_EVENTS else 'not taken'} with --event {event}", 2)
    if reason is not None and event != "suspend":
        fail("--reason goes with --event suspend", 2)
    _submit(url, make_key_event(_seed(key_file), subject=subject, key=controller, event=event, reason=reason,
                                effective_at=effective_at), out)


# --- status --------------------------------------------------------------------------


@main.command()
@click.argument("target")
@click.option("--offline", is_flag=True, help="TARGET is a saved response file; no network.")
@click.option("--id", "expect_id", default=None,
              help="With --offline: the status id the answer must be about (with --issuer, the credential's id).")
@click.option("--registry-key", default=None,
              help="Pin the did:key the answer must be signed with. Default: the --log-policy's registry line; "
                   "else, online only, the key the registry names (said to be not pinned).")
@click.option("--log-policy", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="tlog-policy of the logs the registry anchors in; a `registry <did:key>` line pins its key.")
@click.option("--log-vkey", "log_vkeys", multiple=True,
              help="Log verifier key, instead of --log-policy; repeat it for a registry that anchors in several.")
@click.option("--min-logs", type=click.IntRange(1, 32), default=None,
              help="In how many of the logs an anchor must be. Never fewer than 2 when two logs or more are "
                   "pinned, the policy's `logs <k>`, or the k the registry declares (to accept one log, pin only it).")
@click.option("--issuer", default=None, help="For a credential id: the issuer DID.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Save the fetched response here.")
@click.option("--allow-stale", is_flag=True, help="Accept a response past its next_update.")
@click.option("--key-rotations", "rotations_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The registry's key rotations (GET /v1/key-rotations), to follow from the pinned key to the key "
                   "that signed. Online they are fetched when the answer is signed by another key; --out saves "
                   "them beside the answer (<out>.key-rotations.json).")
@click.option("--json", "as_json", is_flag=True, help="The verified answer as one JSON object.")
@INSECURE_HTTP_CLIENT
@_url_option(checked=False, note="; unused with --offline")
def status(target: str, offline: bool, expect_id: str | None, registry_key: str | None, log_policy: Path | None,
           log_vkeys: tuple[str, ...], min_logs: int | None, issuer: str | None, out: Path | None,
           allow_stale: bool, rotations_file: Path | None, as_json: bool, url: str) -> None:
    """Fetch (or, with --offline, read) a status response and verify it.

    Exit 0 good, 3 revoked, 4 unknown, 5 suspended; 1 if the response does not verify
    (also when it is about another id than TARGET, or --id offline).
    """
    from tlog.formats.times import relative

    from .keyrotation import KeyChain, chain_of_document, rotations_document
    from .statusverify import StatusVerificationError, anchor_policy, status_id_of, verify_status

    def invalid(message: str) -> NoReturn:
        click.echo(json.dumps({"valid": False, "error": message}) if as_json else f"INVALID: {message}")
        sys.exit(1)

    policy = _trust(log_policy, log_vkeys, min_logs)
    keys: KeyChain | None = None
    if rotations_file is not None:
        try:
            keys = chain_of_document(json.loads(rotations_file.read_text()))
        except (OSError, ValueError) as e:
            fail(f"{rotations_file}: {e}", 2)
        except OAPError as e:
            invalid(f"key rotations: {e.message}")
    declared_k = 1  # what the registry says its k is (/v1/info): it can only raise the relying party's
    # Whose key the answer must be signed with: --registry-key, else the policy's `registry`
    # line, else (online only) the key the registry names, which pins nothing and says so.
    pins = [r.did for r in policy.policy.registries] if policy is not None else []
    pinned_by = "--registry-key" if registry_key else None
    if offline:
        if not registry_key and len(pins) == 1:
            registry_key, pinned_by = pins[0], f"the registry line of {log_policy}"
        elif not registry_key and pins:
            fail(f"{log_policy} pins {len(pins)} registries: say which one signed with --registry-key", 2)
        if not registry_key:
            fail("--offline needs --registry-key (the did:key the registry signs with), or a --log-policy with a "
                 "registry line", 2)
        if issuer is not None and expect_id is None:
            fail("--issuer goes with --id offline (the credential's id)", 2)
        try:
            asked = status_id_of(expect_id, issuer) if expect_id is not None else None
        except OAPError as e:
            fail(e.message, 2)
        try:
            resp = json.loads(Path(target).read_text())
        except (OSError, ValueError) as e:
            fail(f"{target}: {e}", 2)
    else:
        from .client import RegistryClient

        if expect_id is not None:
            fail("--id is for --offline; online the answer must be about TARGET", 2)
        url = client_url(url)
        try:
            asked = status_id_of(target, issuer)
        except OAPError as e:
            fail(e.message, 2)

        async def go() -> tuple[dict[str, Any], dict[str, Any], KeyChain | None]:
            async with RegistryClient(url, outbound=client_outbound()) as c:
                info = await c.info()
                got = await c.status(target, issuer)
                pin = registry_key or (pins[0] if len(pins) == 1 else None)
                if keys is None and pin is not None:  # the registry may have rotated its key: follow it
                    return got, info, await c.keys_for(got, pin)
                return got, info, keys

        try:
            resp, info, keys = asyncio.run(go())
        except StatusVerificationError as e:
            invalid(e.message)
        except OAPError as e:
            fail(e.message, 2)
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            fail(f"cannot reach the registry at {url}: {e}", 2)
        served_key = info.get("status_service") if isinstance(info, dict) else None
        k = info.get("anchor_quorum") if isinstance(info, dict) else None
        declared_k = k if type(k) is int and k > 0 else 1
        if not registry_key:
            if not isinstance(served_key, str):
                invalid("the registry names no status key (/v1/info status_service)")
            if served_key in pins:
                pinned_by = f"the registry line of {log_policy}"
            elif pins:
                invalid(f"the registry signs with {served_key}, which {log_policy} does not pin "
                        f"(it pins {', '.join(pins)})")
            else:
                click.echo(f"warning: trusting the key the server names ({served_key}); pin it with --registry-key "
                           "or a registry line in --log-policy", err=True)
            registry_key = served_key
        if out is not None:
            out.write_text(json.dumps(resp, indent=2) + "\n")
            if keys is not None and keys.rotations:
                Path(f"{out}.key-rotations.json").write_text(json.dumps(rotations_document(keys), indent=2) + "\n")
    assert registry_key is not None  # required offline, else the pinned or served key
    if policy is not None:
        try:
            policy = anchor_policy(policy, declared_k)
        except OAPError as e:
            invalid(f"this registry anchors in {declared_k} log(s): {e.message}")
    try:
        v = verify_status(resp, registry=registry_key, status_id=asked, policy=policy, allow_stale=allow_stale,
                          keys=keys)
    except OAPError as e:
        invalid(e.message)
    if asked is None:
        click.echo(f"warning: the answer is about {v.id}; nothing said which id it must be about (--id)", err=True)
    by = v.record.get("issued_by", v.record.get("subject")) if v.record else None
    if as_json:
        out_obj: dict[str, Any] = {"valid": True, "status": v.status, "id": v.id, "epoch": v.epoch,
                                   "this_update": resp["this_update"], "next_update": resp["next_update"],
                                   "log_checked": v.log_checked, "status_key": registry_key,
                                   "key_pinned": pinned_by is not None}
        if v.status == "revoked":
            out_obj |= {"revoked_at": resp["revocation"]["revoked_at"], "reason": v.reason, "by": by}
            if v.reinstated_at is not None:  # a token class: the tokens issued since carry reinstated_id
                out_obj["reinstated_at"] = resp["revocation"]["reinstated"]["reinstated_at"]
                out_obj["reinstated_id"] = v.reinstated_id
        elif v.status == "suspended":
            out_obj |= {"suspended_at": resp["suspension"]["suspended_at"], "reason": v.reason, "by": by}
        if v.subject is not None:  # a receipt that falls with its subject
            out_obj["subject"] = v.subject
        if v.signer is not None:  # a receipt whose level does not hold: the signer that does not count
            out_obj["signer"] = resp["revocation"]["signer"]
        click.echo(json.dumps(out_obj))
        sys.exit(STATUS_EXIT[v.status])
    click.echo(f"{v.status.upper()}  {v.id}")
    click.echo(f"  answered {resp['this_update']} ({relative(v.this_update)}), fresh until {resp['next_update']} "
               f"({relative(v.next_update)}); epoch {v.epoch}; "
               f"log anchors {'verified' if v.log_checked else 'not checked'}")
    click.echo(f"  signed by the status key {registry_key}: "
               + (f"pinned ({pinned_by})" if pinned_by else "NOT PINNED (the key the registry names itself)"))
    if v.status == "revoked":
        click.echo(f"  revoked at {resp['revocation']['revoked_at']} reason {v.reason} by {by or '?'}")
        if v.reinstated_at is not None:
            at = resp["revocation"]["reinstated"]["reinstated_at"]
            click.echo(f"  every token of this id stays revoked; the principal recovered at {at}: the tokens it "
                       f"issued since carry the status id {v.reinstated_id} (ask about that id)")
    elif v.status == "suspended":
        click.echo(f"  suspended at {resp['suspension']['suspended_at']} reason {v.reason} by {by or '?'}; "
                   "refuse it until it recovers")
    if v.subject is not None:
        click.echo(f"  with its subject {v.subject}: the receipt vouches for it and stands as it does")
    if v.signer is not None:
        signer = resp["revocation"]["signer"]
        if v.reason == "witness_unqualified":
            click.echo(f"  its level does not hold: witness {v.signer} held no valid L4/L5 receipt when it signed, "
                       "and too few qualified witnesses remain")
        else:
            role = "auditor" if v.reason == "auditor_invalid" else "witness"
            click.echo(f"  its level does not hold: {role} {v.signer} was {signer['status']} ({signer['reason']}) "
                       f"since {signer['since']}, no later than the receipt was committed (the latest time it can "
                       "have signed): its signature does not count")
    sys.exit(STATUS_EXIT[v.status])


# --- mirror, rebuild, verify ----------------------------------------------------------------


def _mirror_once(data: Path, upstream: str, registry_key: str | None, policy: TrustPolicy | None,
                 metrics_file: Path | None, quiet: bool) -> int:
    from .index import Index
    from .mirror import Mirror, UpstreamError
    from .service import lock_data_dir
    from .store import RegistryRepo

    data.mkdir(parents=True, exist_ok=True)
    try:
        fd = lock_data_dir(data)
    except ConfigError as e:
        fail(str(e), 2)
    repo = RegistryRepo(data / "registry.git")
    repo.clear_stale_locks()  # this process holds the data directory's lock: the one writer

    def progress(total: int):
        return click.progressbar(length=total, label="verifying commits", file=sys.stderr,
                                 hidden=quiet or total == 0)

    try:
        m = Mirror(data, upstream, repo=repo, index=Index(), registry=registry_key, policy=policy,
                   progress=progress, outbound=client_outbound())
        m.load()
        result = m.sync()
        if m.tofu_log and not quiet:
            click.echo("warning: log key taken from the registry's own registry.json; pin it with --log-policy",
                       err=True)
    except UpstreamError as e:
        fail(e.message, 2)
    except OAPError as e:  # e.g. the head's anchor, missing or bad, for a history already mirrored
        fail(f"REFUSED: {e.message}", 1)
    finally:
        repo.close()
        os.close(fd)
    if metrics_file is not None:
        from prometheus_client import write_to_textfile

        write_to_textfile(str(metrics_file), m.metrics.registry)
    if result.refused:
        click.echo(f"REFUSED ({result.reason}): {result.message}", err=True)
        click.echo(f"evidence: {result.details['quarantine_ref']}, report {result.report}", err=True)
        return 1
    head = m.index.head
    click.echo(f"OK: {result.message}; head seq {head.seq if head else 'none'} {result.after or ''}".rstrip())
    return 0


TRUST_OPTS = [
    click.option("--registry-key", default=None, help="Pin the registry key (did:key); default: from registry.json."),
    click.option("--log-policy", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
                 help="tlog-policy for the anchors' logs (default: the log keys named in registry.json)."),
    click.option("--log-vkey", "log_vkeys", multiple=True,
                 help="Log verifier key, instead of --log-policy (repeatable)."),
    click.option("--min-logs", type=click.IntRange(1, 32), default=None,
                 help="In how many logs each anchor must be; never fewer than registry.json names."),
]


def _trust_opts(fn: F) -> F:
    for opt in reversed(TRUST_OPTS):
        fn = opt(fn)
    return fn


@main.command()
@click.option("--upstream", required=True, callback=checked_url, help="Registry to follow, e.g. http://127.0.0.1:8090")
@click.option("--data", "data_dir", required=True, type=click.Path(file_okay=False, path_type=Path))
@_trust_opts
@click.option("--metrics-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write Prometheus metrics here (node_exporter textfile format).")
@INSECURE_HTTP_CLIENT
@click.option("--quiet", is_flag=True)
def mirror(upstream: str, data_dir: Path, registry_key: str | None, log_policy: Path | None, log_vkeys: tuple[str, ...],
           min_logs: int | None, metrics_file: Path | None, quiet: bool) -> None:
    """Fetch and verify new upstream commits; advance only if all verify (exit 1 if refused)."""
    sys.exit(_mirror_once(data_dir, upstream, registry_key, _trust(log_policy, log_vkeys, min_logs), metrics_file,
                          quiet))


@main.command()
@click.option("--from", "source", required=True, callback=checked_url, help="Any registry or mirror URL.")
@click.option("--data", "data_dir", required=True, type=click.Path(file_okay=False, path_type=Path))
@_trust_opts
@INSECURE_HTTP_CLIENT
@click.option("--quiet", is_flag=True)
def rebuild(source: str, data_dir: Path, registry_key: str | None, log_policy: Path | None, log_vkeys: tuple[str, ...],
            min_logs: int | None, quiet: bool) -> None:
    """Rebuild a registry from any mirror into an empty data directory, verifying all of it."""
    if data_dir.exists() and any(data_dir.iterdir()):
        fail(f"{data_dir} is not empty", 2)
    code = _mirror_once(data_dir, source, registry_key, _trust(log_policy, log_vkeys, min_logs), None, quiet)
    if code == 0:
        click.echo(f"serve it with: oap-registry serve --data {data_dir} --key <the registry's key> --log-url <log>"
                   f"  (or read-only: --upstream {source})")
    sys.exit(code)


@main.command()
@click.argument("repo_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@_trust_opts
@click.option("--head-anchor", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The head commit's .tlog-proof (GET /v1/anchors/<seq>).")
@click.option("--url", default=None, callback=checked_url,
              help="Fetch the head commit's .tlog-proof from this registry or mirror.")
@INSECURE_HTTP_CLIENT
def verify(repo_dir: Path, registry_key: str | None, log_policy: Path | None, log_vkeys: tuple[str, ...],
           min_logs: int | None, head_anchor: Path | None, url: str | None) -> None:
    """Check a whole registry history (a bare repo or a `git clone`) against the log, offline."""
    from .history import Replayer, replay
    from .index import Index
    from .store import MAIN, RegistryRepo

    gitdir = repo_dir / ".git" if (repo_dir / ".git").is_dir() else repo_dir
    if not (gitdir / "HEAD").exists():
        fail(f"{repo_dir} is not a Git repository", 2)
    repo = RegistryRepo(gitdir)
    index = Index()
    r = Replayer(repo, index, strict=True, registry=registry_key, policy=_trust(log_policy, log_vkeys, min_logs))
    head_checked = False
    try:
        head = repo.ref(MAIN)
        n = len(repo.chain(head, None)) if head else 0
        with click.progressbar(length=n, label="verifying commits", file=sys.stderr, hidden=n < 2) as bar:
            replay(repo, index, head, r, progress=bar.update)
        if head_anchor is not None:
            r.verify_head_anchor(head_anchor.read_text())
            head_checked = True
        elif url and index.head is not None:
            from .mirror import fetch_url

            r.verify_head_anchor(fetch_url(f"{url.rstrip('/')}/v1/anchors/{index.head.seq}", client_outbound()))
            head_checked = True
    except OAPError as e:
        click.echo(f"FAIL: {e.message}")
        sys.exit(1)
    finally:
        repo.close()
    h = index.head
    if head_checked:
        assert h is not None  # verify_head_anchor refuses an empty registry
        head_note = f", head {h.seq} too"
    else:
        head_note = f"; head {h.seq if h else '-'} unchecked (--head-anchor)"
    g = r.genesis
    where = f"at least {g.anchor_quorum} of its {len(g.logs)} logs each" if g is not None and g.several else "the log"
    click.echo(f"OK: {n} commit(s), {len(index.records)} record(s), registry {r.registry}; anchors of commits "
               f"0..{h.seq - 1 if h else -1} verified in {where}" + head_note)
    if r.tofu_log:
        click.echo("warning: log keys taken from registry.json; pin them with --log-policy", err=True)


# --- conformance receipts: the §31 ladder ----------------------------------------------------

LOG_URL_OPT = click.option("--log", "log_url", default="http://127.0.0.1:8080", show_default=True,
                           envvar="OAP_LOG_URL", callback=checked_url,
                           help="The log the receipt is anchored in (or OAP_LOG_URL); the witnesses must trust it.")


def _read_json(path: Path) -> dict[str, Any]:
    from tlog.formats.strict import loads_json

    try:
        doc = loads_json(path.read_bytes())
    except (OSError, OAPError) as e:
        fail(f"{path}: {getattr(e, 'message', e)}", 2)
    if not isinstance(doc, dict):
        fail(f"{path}: not a JSON object", 2)
    return doc


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    from tlog.storage.durable import write_atomic

    write_atomic(path, json.dumps(doc, indent=2) + "\n")


@main.command("did-document")
@click.option("--key", "key_file", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The Ed25519 key the document lists (oap-registry keygen; a witness's identity.key).")
@click.option("--did", required=True, help="The DID the document is for, e.g. did:web:example.org.")
@click.option("--fragment", default="key-1", show_default=True, help="The key's id in the document (#key-1).")
def did_document(key_file: Path, did: str, fragment: str) -> None:
    """Print a DID document listing the key (publish it at the did:web's URL, e.g.
    https://example.org/.well-known/did.json): what its receipts are signed with."""
    from tlog.formats.did import is_did
    from tlog.formats.diddoc import ed25519_document
    from tlog.formats.keys import ed25519_signer

    if not is_did(did) or "#" in did:
        fail(f"--did {did!r} is not a DID", 2)
    if not fragment or any(c in fragment for c in "#/?& "):
        fail("--fragment must be a plain name like key-1", 2)
    click.echo(json.dumps(ed25519_document(did, {fragment: ed25519_signer(_seed(key_file)).public}), indent=2))


@main.group()
def conformance() -> None:
    """Conformance receipts (OAP-CORE-1.0 §31): make one, have it peer-witnessed, audit, register.

    The ladder: L0-L2 are self-signed; L3 needs a did:web subject (the publisher check);
    L4 one independent peer witness; L5 three peer witnesses that hold L4/L5 receipts in the
    registry, and an audit attestation."""


@conformance.command("make")
@click.option("--key", "key_file", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The implementation's key (oap-registry keygen).")
@click.option("--subject", default=None,
              help="The implementation's DID (default: the key's did:key). From L3 up a did:web whose document "
                   "lists the key (oap-registry did-document).")
@click.option("--key-id", default="key-1", show_default=True,
              help="The key's id in the subject's DID document (not for a did:key).")
@click.option("--level", required=True, type=click.Choice(["L0", "L1", "L2", "L3", "L4", "L5", "L1-NC", "L3-NC"]))
@click.option("--profile", default=None,
              help="The test suite's profile (default: non-commercial for L1-NC and L3-NC, else standard).")
@click.option("--suite-name", default="oap-test-suite", show_default=True)
@click.option("--suite-version", required=True, help="The version of the test suite that produced the results.")
@click.option("--results", "results_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The test suite's results file: results_digest is its SHA-256.")
@click.option("--results-digest", default=None, help="sha256:<hex> of the results, instead of --results.")
@click.option("--days", type=click.IntRange(1, 90), default=90, show_default=True, help="Validity (at most 90 days).")
@click.option("--audit", "audit_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="L5: the auditor's signed audit reference (oap-registry conformance audit).")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The receipt file to write.")
def conformance_make(key_file: Path, subject: str | None, key_id: str, level: str, profile: str | None,
                     suite_name: str, suite_version: str, results_file: Path | None, results_digest: str | None,
                     days: int, audit_file: Path | None, out: Path) -> None:
    """Make a conformance receipt self-signed by the implementation's key."""
    from datetime import UTC, datetime, timedelta

    from tlog.formats.conformance import NC_LEVELS, NON_COMMERCIAL, new_claims, sign_conformance, validate_conformance
    from tlog.formats.diddoc import skip_resolved_signatures
    from tlog.formats.hashing import format_sha256, parse_sha256, sha256

    from .client import did_of

    if (results_file is None) == (results_digest is None):
        fail("give --results (the test suite's results file) or --results-digest", 2)
    seed = _seed(key_file)
    subject = subject or did_of(seed)
    try:
        digest = format_sha256(sha256(results_file.read_bytes()) if results_file is not None
                               else parse_sha256(results_digest, "--results-digest"))
        audit = _read_json(audit_file) if audit_file is not None else None
        claims = new_claims(subject, level, results_digest=digest, suite={"name": suite_name, "version": suite_version},
                            issued_at=datetime.now(UTC), validity=timedelta(days=days),
                            profile=profile or (NON_COMMERCIAL if level in NC_LEVELS else "standard"),
                            audit=audit)
        by = None if subject.startswith("did:key:") else f"{subject}#{key_id}"
        receipt = sign_conformance(claims, seed, by=by)
        # everything this machine can check (a did:web's key and the publisher are the registry's to check)
        validate_conformance(receipt, now=datetime.now(UTC), lookup=skip_resolved_signatures,
                             require_witnesses=False, check_publisher=False)
    except OAPError as e:
        fail(e.message, 2)
    _write_json(out, receipt)
    click.echo(json.dumps({"id": receipt["id"], "subject": subject, "level": level,
                           "expires_at": receipt["expires_at"], "receipt": str(out)}))


@conformance.command("request-witness")
@click.argument("receipt_file", metavar="RECEIPT", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--witness", "witnesses", multiple=True, required=True, callback=checked_url,
              help="A peer witness's URL; repeat it to ask several at once (L5 needs three).")
@LOG_URL_OPT
@click.option("--bundle", "bundle_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The receipt's .tlog-proof, when it is anchored already (else it is anchored in --log).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the witnessed receipt here (default: RECEIPT, rewritten).")
@click.option("--timeout", type=click.FloatRange(0.1, 600), default=60.0, show_default=True)
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A bearer token for a log that requires one for writes (default: OAP_TOKEN).")
@INSECURE_HTTP_CLIENT
def request_witness(receipt_file: Path, witnesses: tuple[str, ...], log_url: str, bundle_file: Path | None,
                    out: Path | None, timeout: float, token_file: Path | None) -> None:
    """Anchor RECEIPT in a log and ask peer witnesses to sign it (POST /v1/conformance/witness).

    Every signature given is added to the receipt (a witness that refuses says why, and
    the command exits 1). One JSON line per witness."""
    from tlog.client.client import token_from

    from .receipts import request_witnesses

    if len(set(witnesses)) != len(witnesses):
        fail("the same --witness is given twice", 2)
    receipt = _read_json(receipt_file)
    try:
        bundle = bundle_file.read_text() if bundle_file is not None else None
        signed, answers = asyncio.run(request_witnesses(receipt, witnesses, log_url, bundle=bundle, timeout=timeout,
                                                        token=token_from(token_file), outbound=client_outbound()))
    except OAPError as e:
        fail(e.message, 2)
    except (TimeoutError, aiohttp.ClientError, OSError) as e:
        fail(f"cannot reach the log at {log_url}: {e}", 2)
    if signed != receipt:
        _write_json(out or receipt_file, signed)
    for a in answers:
        if a.signature is not None:
            click.echo(json.dumps({"witness": a.url, "signed_as": a.by, "inclusion": a.inclusion}))
        else:
            click.echo(f"error: {a.url} refused: {a.error}", err=True)
    sys.exit(0 if all(a.signature is not None for a in answers) else 1)


@conformance.command("audit")
@click.option("--key", "key_file", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The auditor's key.")
@click.option("--subject", required=True, help="The audited implementation's DID.")
@click.option("--standard", required=True, help="What was audited against, e.g. 'SOC 2 Type II' or 'ISO 27001'.")
@click.option("--uri", required=True, help="Where the machine-readable attestation is published.")
@click.option("--report", "report_file", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The attestation document, exactly as published at --uri (its SHA-256 is signed and anchored).")
@click.option("--log", "log_urls", multiple=True, callback=checked_url,
              help="A log to anchor the attestation in (repeatable; default OAP_LOG_URL, else "
                   "http://127.0.0.1:8080); the registry must trust one of them.")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The audit reference to write (give it to `conformance make --audit`).")
@click.option("--timeout", type=click.FloatRange(0.1, 600), default=60.0, show_default=True)
@INSECURE_HTTP_CLIENT
def conformance_audit(key_file: Path, subject: str, standard: str, uri: str, report_file: Path,
                      log_urls: tuple[str, ...], out: Path, timeout: float) -> None:
    """The auditor's side of L5: anchor the attestation's hash in a log, sign the audit reference."""
    from tlog.formats.audit import check_audit
    from tlog.formats.diddoc import skip_resolved_signatures

    from .receipts import make_audit

    urls = log_urls or (client_url(os.environ.get("OAP_LOG_URL", "http://127.0.0.1:8080"), "OAP_LOG_URL"),)
    try:
        audit = asyncio.run(make_audit(_seed(key_file), subject=subject, standard=standard, uri=uri,
                                       document=report_file.read_bytes(), log_urls=urls, timeout=timeout,
                                       outbound=client_outbound()))
        check_audit(audit, subject, skip_resolved_signatures)
    except OAPError as e:
        fail(e.message, 2)
    _write_json(out, audit)
    click.echo(json.dumps({"auditor": audit["auditor"], "subject": subject, "digest": audit["digest"],
                           "audit": str(out)}))


@conformance.command("register")
@click.argument("receipt_file", metavar="RECEIPT", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@URL_OPT
@click.option("--wait", type=click.FloatRange(0, 600), default=60.0, show_default=True,
              help="Seconds to wait until the registry's status answers name the receipt (0: do not wait).")
def conformance_register(receipt_file: Path, url: str, wait: float) -> None:
    """Register a conformance receipt: the registry checks the level's rules (publisher,
    witnesses holding L4/L5, independence, the audit), stores it and anchors it."""
    from .receipts import register

    try:
        ack, status = asyncio.run(register(url, _read_json(receipt_file), wait=wait, outbound=client_outbound()))
    except OAPError as e:
        fail(e.message, 1)
    except (TimeoutError, aiohttp.ClientError, OSError) as e:
        fail(f"cannot reach the registry at {url}: {e}", 2)
    out = {k: v for k, v in ack.items() if k not in ("anchor", "receipt_anchor")}
    if status:
        out["status"] = status
    click.echo(json.dumps(out))
