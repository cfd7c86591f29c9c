"""The report: how an attempt ended, as the SDK, a pull worker and the push runner write it and the
operator reads it (DESIGN §3). One type encodes and parses it, so the two sides cannot drift.

On the wire it is one JSON object: `{"outcome": "success"|"retryable"|"permanent", "message": str}`,
plus `reason` (one of REPORT_REASONS), `responseCode` (the push runner's), `retryAfterSeconds` and
`output` when they apply. A pod leaves it as its termination message, a pull worker as an
annotation on the attempt's Lease. The kubelet keeps at most REPORT_LIMIT bytes of a termination
message, so the encoder makes the whole document fit (the message, then the output, cut with
TRUNCATED); the parser takes any text and calls what is not a report None (the operator then
judges the exit code). Nothing is ever rejected for being too long.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

from cronoq.pod_protocol.jsontext import json_value

REPORT_LIMIT: Final = 4096
"""Bytes of a report: the kubelet's bound on a termination message, so a worker's report on a Lease
has it too, and so do the output and the message the operator keeps from one."""
TRUNCATED: Final = "…[truncated]"
"""The marker at the end of a message or an output that was cut, on both sides."""
MAX_RETRY_AFTER: Final = 24 * 3600.0
"""Longest `retryAfterSeconds` read: the longest backoff a retry policy may set (24h). A larger hint
(or `Infinity`) would overflow the next attempt's time and fail every reconcile."""

SUCCESS: Final = "success"
RETRYABLE: Final = "retryable"
PERMANENT: Final = "permanent"
OUTCOMES: Final = frozenset({SUCCESS, RETRYABLE, PERMANENT})


class Reason:
    """The words a report may give for a failure: the SDK's self-fencing and the push runner's. The
    operator believes no other word, so a container cannot pose as one of its own verdicts."""

    LEASE_LOST: Final = "LeaseLost"
    """The SDK could not renew the attempt's Lease and stopped itself."""
    TIMEOUT: Final = "Timeout"
    """A push request got no answer within its timeout."""
    NETWORK_ERROR: Final = "NetworkError"
    """A push request got no answer at all (DNS, refused, reset, TLS)."""
    HTTP_STATUS: Final = "HTTPStatus"
    """A push request was answered with a status that is not a success."""
    ADDRESS_NOT_ALLOWED: Final = "AddressNotAllowed"
    """A push request would reach a link-local or metadata address its pool does not allow."""


REPORT_REASONS: Final = frozenset({Reason.LEASE_LOST, Reason.TIMEOUT, Reason.NETWORK_ERROR, Reason.HTTP_STATUS,
                                   Reason.ADDRESS_NOT_ALLOWED})

EXIT_SUCCESS: Final = 0
"""The handler returned."""
EXIT_RETRYABLE: Final = 1
"""The handler raised `Retryable` or any exception other than `Permanent`."""
EXIT_PERMANENT: Final = 2
"""The handler raised `Permanent`, or the CRONOQ_* environment is unusable."""
EXIT_LEASE_LOST: Final = 3
"""Self-fenced: the attempt's Lease was lost (taken over, deleted, or not renewed for a TTL)."""


@dataclass(frozen=True)
class Report:
    """How the attempt ended."""

    outcome: str
    """One of OUTCOMES."""
    message: str = ""
    retry_after: float | None = None
    """Seconds to wait at least before the next attempt."""
    output: str | None = None
    reason: str | None = None
    """One of REPORT_REASONS, or None."""
    response_code: int | None = None
    """The HTTP status a push task's endpoint answered with (the push runner only)."""

    @property
    def exit_code(self) -> int:
        if self.reason == Reason.LEASE_LOST:
            return EXIT_LEASE_LOST
        return {SUCCESS: EXIT_SUCCESS, RETRYABLE: EXIT_RETRYABLE, PERMANENT: EXIT_PERMANENT}[self.outcome]

    def encode(self, limit: int = REPORT_LIMIT) -> bytes:
        """The document: valid JSON of at most `limit` bytes of UTF-8."""
        doc: dict[str, Any] = {"outcome": self.outcome, "message": _clean(self.message)}
        if self.reason:
            doc["reason"] = self.reason
        if self.response_code is not None:
            doc["responseCode"] = self.response_code
        if self.retry_after is not None:
            seconds = float(self.retry_after)
            doc["retryAfterSeconds"] = int(seconds) if seconds.is_integer() else seconds
        if self.output is not None:
            # The message has the first claim on the room; the output gets what is left.
            doc["output"] = ""
            _fit(doc, "message", limit)
            doc["output"] = _clean(self.output)
            _fit(doc, "output", limit)
        else:
            _fit(doc, "message", limit)
        return _dump(doc)

    @classmethod
    def parse(cls, text: str | None) -> Report | None:
        """The report in `text`, or None when it is none: anything else, however it fails to parse
        (nesting deeper than jsontext.JSON_DEPTH included), is plain text. Lenient
        where an older writer may differ (the outcome's case, an output that is JSON but no
        string), and it keeps only what it can believe: a positive retry hint (at most
        MAX_RETRY_AFTER), a reason of REPORT_REASONS, a response code of 100 to 599. The
        message and the output come whole: the reader cuts them to its own bounds."""
        if not text or not text.lstrip().startswith("{"):
            return None
        try:
            doc = json_value(text)
        except ValueError:  # not JSON, or nested deeper than jsontext.JSON_DEPTH
            return None
        if not isinstance(doc, dict):
            return None
        output = doc.get("output")
        if output is not None and not isinstance(output, str):
            output = json.dumps(output, separators=(",", ":"))
        outcome = str(doc.get("outcome", "")).lower()
        if outcome not in OUTCOMES:
            return None
        retry_after = doc.get("retryAfterSeconds")
        reason = str(doc.get("reason", ""))
        code = doc.get("responseCode")
        return cls(outcome, str(doc.get("message") or ""),
                   float(min(retry_after, MAX_RETRY_AFTER)) if _number(retry_after) and retry_after > 0 else None,
                   output, reason if reason in REPORT_REASONS else None,
                   code if isinstance(code, int) and not isinstance(code, bool) and 100 <= code <= 599 else None)


def truncate(text: str | None, limit: int = REPORT_LIMIT) -> str:
    """`text` cut to at most `limit` bytes of UTF-8, with the marker when cut: how the operator
    bounds whatever it keeps of a report (and its own messages)."""
    if not text:
        return ""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    keep = limit - len(TRUNCATED.encode())
    return raw[:keep].decode(errors="ignore") + TRUNCATED


def _number(value: Any) -> TypeGuard[int | float]:
    """A JSON number (`true` is a bool to JSON, though an int to Python)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _dump(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


def _fit(doc: dict[str, Any], key: str, limit: int) -> None:
    """Cut `doc[key]` (and add the marker) until `doc` encodes to at most `limit` bytes."""
    if len(_dump(doc)) <= limit:
        return
    # Every character costs at least one byte, so no more than `limit` of them can stay; the
    # encoded size grows with the kept prefix, so a binary search finds the longest that fits.
    text = doc[key][:limit]
    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        doc[key] = text[:mid] + TRUNCATED
        if len(_dump(doc)) <= limit:
            low = mid
        else:
            high = mid - 1
    doc[key] = text[:low] + TRUNCATED if low or len(_dump({**doc, key: TRUNCATED})) <= limit else ""


def _clean(text: str) -> str:
    """`text` without lone surrogates, which UTF-8 (and so the kubelet) cannot carry."""
    return text.encode("utf-8", errors="replace").decode("utf-8")
