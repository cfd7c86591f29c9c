"""What the API server refused, as cronoq's own error types: `error_of` turns a non-2xx answer (its
status, reason, body and headers) into one of them, once, for every caller. Callers catch the type
they mean (`except NotFound`) instead of comparing HTTP statuses, and read the server's own words
(`message`: the `message` of the `Status` it answers with — an admission policy's message, a quota's
usage, a validation error naming the field) from the error itself.

Standard library only: the worker SDK, the client library and the operator all import it.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, ClassVar


class ApiError(Exception):
    """The API server answered with a status other than 2xx. `status`, `reason` (the HTTP reason
    phrase), `body` (as text) and `headers` are the answer's; a subclass names what it means."""

    STATUS: ClassVar[int] = 500

    def __init__(self, reason: str = "", *, status: int | None = None, body: str | bytes | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        self.status = self.STATUS if status is None else status
        self.reason = reason
        self.body = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
        self.headers: dict[str, str] = dict(headers or {})
        super().__init__(self.status, reason)

    def __str__(self) -> str:
        said = server_message(self)
        return f"{self.status} {self.reason}" + (f": {said}" if said is not None else "")

    @property
    def status_body(self) -> dict[str, Any]:
        """The `Status` object the body holds; empty when it holds none (a proxy's page, an answer cut
        short)."""
        try:
            found = json.loads(self.body)
        except ValueError:
            return {}
        return found if isinstance(found, dict) else {}

    @property
    def message(self) -> str:
        """The server's own message of the refusal, else the HTTP reason."""
        said = server_message(self)
        return self.reason if said is None else said

    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked to wait (the Retry-After of a 429 or a 5xx); None when it asked
        nothing readable (an HTTP date is rare from the API server: the caller's backoff stands)."""
        if not (self.status == 429 or self.status >= 500):
            return None
        value = next((v for k, v in self.headers.items() if k.lower() == "retry-after"), None)
        try:
            seconds = float(value) if value is not None else None
        except ValueError:
            return None
        return max(seconds, 0.0) if seconds is not None and math.isfinite(seconds) else None


class NotFound(ApiError):
    """404: no such object (never made, or gone since)."""

    STATUS = 404


class Conflict(ApiError):
    """409: the object changed since it was read (a stale resourceVersion or a failed uid
    precondition), or one of its name exists already (AlreadyExists)."""

    STATUS = 409


class Gone(ApiError):
    """410: the resourceVersion (or `continue` token) asked from is too old: list again."""

    STATUS = 410

    @property
    def fresh_continue(self) -> str | None:
        """The token to go on with that a 410 answer to an expired `continue` carries (from the newest
        snapshot), if any."""
        token = (self.status_body.get("metadata") or {}).get("continue")
        return token if isinstance(token, str) and token else None


class Forbidden(ApiError):
    """403: the caller may not (RBAC), or admission refused it for now (a ResourceQuota, a
    terminating namespace, a webhook)."""

    STATUS = 403


class Refused(ApiError):
    """422: the object is invalid (the schema's bounds, a CEL rule, an admission policy, a failed
    JSON-patch `test`); `field` is the first field the server named, `message` its words."""

    STATUS = 422

    @property
    def field(self) -> str | None:
        details = self.status_body.get("details")
        causes = details.get("causes") if isinstance(details, dict) else None
        for cause in causes if isinstance(causes, list) else ():
            if isinstance(cause, dict) and isinstance(cause.get("field"), str) and cause["field"]:
                return str(cause["field"])
        return None


class Throttled(ApiError):
    """429: API Priority and Fairness (or a max-in-flight limit) turned the request away; come back no
    sooner than `retry_after` seconds when it says."""

    STATUS = 429


KINDS: dict[int, type[ApiError]] = {cls.STATUS: cls for cls in (NotFound, Conflict, Gone, Forbidden, Refused,
                                                                 Throttled)}


def error_of(status: int, reason: str | None, body: str | bytes | None = None,
             headers: Mapping[str, str] | None = None) -> ApiError:
    """The error a non-2xx answer means."""
    return KINDS.get(status, ApiError)(reason or "", status=status, body=body, headers=headers)


def event_error(status: Mapping[str, Any]) -> ApiError:
    """The error an ERROR event of a watch carries (its object is a `Status`: code, reason, message)."""
    code = status.get("code")
    return error_of(code if isinstance(code, int) and code > 0 else 500, str(status.get("reason") or "watch error"),
                    json.dumps(dict(status)))


def server_message(err: ApiError) -> str | None:
    """The `message` of the Status in `err`'s body; None when the body holds none (a proxy's page,
    an answer cut short, a Status without a message)."""
    message = err.status_body.get("message")
    return None if message is None else str(message)
