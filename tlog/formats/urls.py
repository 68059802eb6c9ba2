"""What a service URL may be: the shape of a base URL, and plain HTTP beyond loopback, which
OAP-CORE-1.0 §8.1 forbids. Pure, so the services' configuration and the command-line
clients check URLs the same way."""
from __future__ import annotations

from urllib.parse import urlsplit

from tlog.errors import InvalidInput

__all__ = ["INSECURE_HINT", "check_url", "is_base_url", "is_loopback", "plain_beyond_loopback"]


def is_base_url(url: str) -> bool:
    """An http(s) URL a service is reached at: no trailing '/', no spaces, at most 2 KiB."""
    return (url.startswith(("http://", "https://")) and len(url) <= 2048 and not url.endswith("/")
            and url.isprintable() and not any(c.isspace() for c in url))


def is_loopback(host: str) -> bool:
    """Whether a listen address reaches only this machine ("localhost", 127.0.0.0/8, ::1).

    Names other than "localhost" are not resolved: a name could point anywhere, so it
    counts as beyond loopback (the safe side)."""
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def plain_beyond_loopback(url: str) -> bool:
    """Whether `url` is plain http:// to a host that is not this machine (OAP-CORE-1.0 §8.1)."""
    parts = urlsplit(url)
    return parts.scheme.lower() == "http" and not is_loopback(parts.hostname or "")


INSECURE_HINT = ("OAP-CORE-1.0 §8.1: plain HTTP must not be used. Serve TLS (tls_cert, tls_key) or listen on "
                 "127.0.0.1 behind a TLS-terminating proxy, and use https:// URLs; to run without TLS anyway, "
                 "start with --insecure-http (insecure_http = true)")


def check_url(url: str, what: str = "URL", *, insecure_http: bool = False) -> str:
    """A service base URL, refused early and in one line when it cannot be one (a bare
    host:port is the usual slip), rather than as a traceback from deep in aiohttp; plain
    http:// beyond loopback only with `insecure_http` (OAP-CORE-1.0 §8.1)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(f"the {what} must be an http:// or https:// URL, got {url!r}")
    if plain_beyond_loopback(url) and not insecure_http:
        raise InvalidInput(f"the {what} {url} is plain http:// beyond loopback. {INSECURE_HINT}")
    return url.rstrip("/")
