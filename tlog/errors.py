"""One error hierarchy for the whole project.

Every failure a client can cause is an `OAPError` subclass carrying an HTTP
status and an OAP error code (OAP-CORE-1.0 Appendix B). Services map them to
responses in exactly one place (`tlog.http.middleware.make_error_middleware`) with
`isinstance`, so wrapping an error never silently turns a 4xx into a 500.
Verifiers raise `VerificationError` subclasses instead of returning a bool a
caller could ignore.
"""
from __future__ import annotations

from typing import Any


class OAPError(Exception):
    """Base error: `status` and `code` decide the HTTP answer; `data` is extra JSON."""

    status: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.data = data

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.code, "message": self.message}
        body.update(self.data)
        return body


class InvalidInput(OAPError):
    status, code = 400, "invalid_input"


class TooLarge(InvalidInput):
    """Body, entry or batch over its cap (HTTP 413)."""

    status = 413


class UnsupportedMediaType(InvalidInput):
    status = 415


class AuthRequired(OAPError):
    status, code = 401, "auth_required"


class Forbidden(OAPError):
    status, code = 403, "policy_block"


class NotFound(OAPError):
    status, code = 404, "not_found"


class MethodNotAllowed(OAPError):
    """The resource exists; the method does not apply to it. App. B has no 405 row:
    the code is the one for a request that cannot be served as sent."""

    status, code = 405, "invalid_input"


class Conflict(OAPError):
    status, code = 409, "conflict"


class RequestTimeout(OAPError):
    """The client did not deliver its request body in time (slow client). App. B's
    `timeout` is an action that ran too long (504), not this: the input never came."""

    status, code = 408, "invalid_input"


class RateLimited(OAPError):
    status, code = 429, "rate_limited"


class Unavailable(OAPError):
    """Writes cannot be accepted right now (disk full, shutting down): HTTP 503."""

    status, code = 503, "maintenance"


class UpstreamError(OAPError):
    """Something this service depends on failed: a DID document's host, a log (App. B)."""

    status, code = 502, "upstream_error"


class NotPublished(Unavailable):
    """Entries are durable but their checkpoint has not reached the witness quorum."""


class LogHalted(Unavailable):
    """The log stopped accepting writes: a witness has seen more of this log than it
    holds (a restore from an old backup?). Signing on would fork the log."""


class LogFrozen(OAPError):
    """The log is frozen (docs/architecture.md §3.8): it takes no more entries, ever, and
    serves what it holds. App. B's `deprecated` (410, "sunset reached"): the body names the
    successor log, where writes go now (`successor`, a URL, when the operator named one)."""

    status, code = 410, "deprecated"


class OutsideWindow(OAPError):
    """A temporal shard refuses an entry outside its time window (docs/architecture.md §3.8):
    after it, 410 `deprecated` like a frozen log; before it, 403 `policy_block` (the shard
    is not open yet). The body carries the window (`accept_from`, `accept_until`)."""

    status, code = 410, "deprecated"

    def __init__(self, message: str, *, early: bool = False, **data: Any) -> None:
        super().__init__(message, **data)
        if early:
            self.status, self.code = 403, "policy_block"


class ForkError(OAPError):
    """The log was asked to sign a second, different root for a size it signed before.

    This is a bug or corruption, never client input: the log refuses to sign.
    """

    status, code = 500, "internal_error"


# --- verification (offline verifier, witness, client) -----------------------


class VerificationError(OAPError):
    """Something presented as proof did not verify."""

    status, code = 422, "output_unverifiable"


class SignatureError(VerificationError):
    pass


class UnknownKeyError(VerificationError):
    """No signature from a trusted key (carries the names seen)."""


class InclusionProofError(VerificationError):
    pass


class ConsistencyProofError(VerificationError):
    pass


class PolicyError(VerificationError):
    """A checkpoint does not satisfy a trust policy (log key, witness quorum)."""


class FormatError(InvalidInput):
    """A wire format (note, checkpoint, tile path, bundle, policy) is malformed."""


class ConfigError(ValueError):
    """A bad or conflicting setting, or a data directory or port another process holds:
    the service refuses to start and says why in one line."""
