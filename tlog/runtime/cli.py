"""What the three command-line programs share: one-line errors, the `serve` options,
loading the configuration, and running a service until a signal."""
from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
from aiohttp import web

from tlog.errors import ConfigError, OAPError
from tlog.http.serve import serve_until_signal
from tlog.runtime.config import HTTPConfig, load, plain_http_uses
from tlog.runtime.logs import setup_logging
from tlog.transport import Outbound

C = TypeVar("C", bound=HTTPConfig)
F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("oap.http")


NATIVE_MISSING = ("note: the optional C extension tlog._native is not built, so bulk hashing uses hashlib "
                  "(same results, about 4x slower); with a C compiler and the OpenSSL headers installed, "
                  "reinstall the package to build it")


def native_notice() -> None:
    """Say once, at the start of a CLI, when the C extension is missing: a slow log is
    better explained than discovered. Silent with OAP_QUIET_NATIVE=1."""
    from tlog.formats import hashing

    if hashing.native is None and not os.environ.get("OAP_QUIET_NATIVE"):
        click.echo(NATIVE_MISSING, err=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr and a non-zero exit: what every CLI error looks like."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


class KeyRef(click.ParamType):
    """A signing key on a command line (`--key`): a key file, an encrypted key file, or a
    `pkcs11:` URI (RFC 7512) of a key in a token, whose PIN comes from its pin-source file or
    OAP_PKCS11_PIN, never from the command line (a pin-value is refused here)."""

    name = "KEY"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path | str:
        if isinstance(value, Path):
            return value
        text = str(value)
        if text.startswith("pkcs11:"):
            from tlog.runtime.pkcs11 import parse_uri

            try:
                parse_uri(text)
            except ConfigError as e:
                self.fail(str(e), param, ctx)
            return text
        path = Path(text)
        if not path.is_file():
            self.fail(f"{text!r} is not a key file (nor a pkcs11: URI)", param, ctx)
        return path


KEY = KeyRef()


INSECURE_HTTP = click.option(
    "--insecure-http", is_flag=True, default=None,
    help="Allow plain HTTP beyond loopback: listening on another address without TLS, http:// URLs of "
         "other hosts. OAP-CORE-1.0 §8.1 forbids it; a warning is logged at start.")


def _remember_insecure(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    ctx.meta["oap.insecure_http"] = bool(value)


def _remember_ca_file(ctx: click.Context, _param: click.Parameter, value: Path | None) -> None:
    ctx.meta["oap.ca_file"] = value


_INSECURE_HTTP_FLAG = click.option(
    "--insecure-http", is_flag=True, is_eager=True, expose_value=False, callback=_remember_insecure,
    help="Allow a plain http:// URL beyond loopback (OAP-CORE-1.0 §8.1 forbids plain HTTP).")
_CA_FILE = click.option(
    "--ca-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), envvar="OAP_CA_FILE",
    is_eager=True, expose_value=False, callback=_remember_ca_file,
    help="Also trust the CA certificates in this PEM file for HTTPS (a private deployment's CA); "
         "or OAP_CA_FILE.")


def INSECURE_HTTP_CLIENT(f: F) -> F:
    """The transport options of a command that talks to a service: --insecure-http and
    --ca-file, eager so that the --url checks below see them. `client_outbound` reads them."""
    return _INSECURE_HTTP_FLAG(_CA_FILE(f))


def insecure_http_allowed() -> bool:
    """Whether the running command was given --insecure-http (INSECURE_HTTP_CLIENT)."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get("oap.insecure_http"))


def client_outbound() -> Outbound:
    """How the running command reaches services (`tlog.transport`): TLS 1.3, the system's CAs
    and --ca-file's, plain HTTP beyond loopback only with --insecure-http."""
    ctx = click.get_current_context(silent=True)
    ca = ctx.meta.get("oap.ca_file") if ctx is not None else None
    return Outbound((ca,) if ca is not None else (), insecure_http_allowed())


def client_url(url: str, what: str = "--url") -> str:
    """A service URL a command talks to. Plain http:// to another host is refused (exit 2)
    unless --insecure-http, and then said on stderr: a relying party's command must not send
    or read trust answers in the clear without knowing it (OAP-CORE-1.0 §8.1)."""
    from tlog.formats.urls import check_url, plain_beyond_loopback

    allowed = insecure_http_allowed()
    try:
        url = check_url(url, what, insecure_http=allowed)
    except OAPError as e:
        fail(e.message, 2)
    if plain_beyond_loopback(url):
        click.echo(f"warning: {what} {url} is plain HTTP (--insecure-http): OAP-CORE-1.0 §8.1 forbids it", err=True)
    return url


def checked_url(_ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """click callback for a --url option or URL argument (one value or several): client_url."""
    what = f"--{param.name}" if isinstance(param, click.Option) else (param.name or "URL").upper()
    if value is None:
        return None
    if isinstance(value, tuple):
        return tuple(client_url(v, what) for v in value)
    return client_url(value, what)


def serve_options(table: str, data_help: str = "Data directory."):
    """The options every `serve` command takes: --config, --data, --host, --port,
    --log-format, --tls-cert, --tls-key and --insecure-http (each overrides the file and the
    environment)."""
    options = [
        click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help=f"TOML file ([{table}] table)."),
        click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), help=data_help),
        click.option("--host", default=None, help="Address to listen on (default 127.0.0.1)."),
        click.option("--port", type=int, default=None, help="Port to listen on (0: the kernel picks one)."),
        click.option("--log-format", type=click.Choice(["text", "json"]), default=None),
        click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
                     help="Serve HTTPS (TLS 1.3) with this certificate chain (PEM)."),
        click.option("--tls-key", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
                     help="The private key of --tls-cert (PEM)."),
        INSECURE_HTTP,
    ]

    def wrap(fn):
        for option in reversed(options):
            fn = option(fn)
        return fn

    return wrap


def load_config(cls: type[C], *, section: str, env_prefix: str, config_file: Path | None, **flags: Any) -> C:
    """The configuration from defaults, the TOML file, the environment and flags; exit 2 if it is bad."""
    try:
        return load(cls, section=section, env_prefix=env_prefix, file=config_file, **flags)
    except ConfigError as e:
        fail(str(e), 2)


def warn_insecure(cfg: HTTPConfig) -> None:
    """The warning `insecure_http` costs, once at start, naming every plain-HTTP use it allows."""
    if cfg.insecure_http:
        uses = plain_http_uses(cfg)
        log.warning("insecure_http is set: plain HTTP beyond loopback is allowed, which OAP-CORE-1.0 §8.1 "
                    "forbids (%s)", "; ".join(uses) if uses else "nothing configured uses it now")


@dataclass
class Running:
    """A service ready to listen: its app, what it prints once listening, and how it stops."""

    app: web.Application
    banner: Callable[[str], list[str]]
    drain: Callable[[], Awaitable[None]] | None = None  # finish queued work, close storage
    close: Callable[[], object] | None = None
    helpers: Any = None  # processes sharing the port (the log's read workers)
    reload: Callable[[], object] | None = None  # on SIGHUP, instead of stopping (the witness's logs)


def run(cfg: HTTPConfig, start: Callable[[], Awaitable[Running]]) -> None:
    """Start a service and serve until SIGINT/SIGTERM. A failure to start (a busy port, a
    data directory in use, a bad key) is one line on stderr and exit status 2."""
    setup_logging(cfg.log_format)
    warn_insecure(cfg)

    async def main() -> None:
        r = await start()
        await serve_until_signal(r.app, host=cfg.host, port=cfg.port, header_timeout=cfg.header_timeout,
                                 tls_cert=cfg.tls_cert, tls_key=cfg.tls_key, banner=r.banner, drain=r.drain,
                                 close=r.close, helpers=r.helpers, reload=r.reload)

    try:
        asyncio.run(main())
    except (ConfigError, OAPError) as e:
        fail(getattr(e, "message", None) or str(e), 2)
    except OSError as e:  # a data directory that cannot be created or read, a certificate that cannot be read
        fail(f"{e.filename or ''}: {e.strerror}" if e.filename else str(e), 2)
