"""The log's rate limits, declared once (docs/architecture.md §3.5).

Two buckets per client: requests (dynamic reads and proof batches; checkpoints and
tiles only with `rate_limit_tiles`) and entries written (the `WriteGate`, with the
bearer tokens). The log process and its read workers apply the same declaration.
"""
from __future__ import annotations

from tlog.http.limits import Limits, RequestFilter, TokenAuth, WriteGate
from tlog.server.config import LogConfig


def limited_requests(tiles: bool) -> RequestFilter:
    """Which requests take a token of the request bucket. Entry writes take theirs from the
    write gate (step 1 of `tlog.server.pipeline`); checkpoints and tiles are immutable (or
    nearly) and belong behind a cache, so they are limited only with `tiles`."""

    def limited(method: str, path: str) -> bool:
        if method == "POST":
            return path.startswith("/v1/proof/")
        return tiles or not (path == "/checkpoint" or path.startswith("/tile/"))

    return limited


def read_limits(rate: float, burst: float, *, tiles: bool) -> Limits:
    """The limits of the requests a read worker answers (`tlog.server.readworkers`)."""
    return Limits(rate, burst, applies=limited_requests(tiles))


def log_limits(cfg: LogConfig) -> Limits:
    """Every rate limit of the log process."""
    gate = WriteGate(TokenAuth.from_file(cfg.auth_required_for, cfg.tokens_file), cfg.rate_limit_write,
                     cfg.rate_limit_write_burst, cfg.rate_limit_unauthenticated)
    return Limits(cfg.rate_limit_read, cfg.rate_limit_read_burst, applies=limited_requests(cfg.rate_limit_tiles),
                  writes=gate)
