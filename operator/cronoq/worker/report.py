"""The structured termination message the SDK leaves for the operator (DESIGN §3), and the exit
codes that go with it.

The message is JSON, `{"outcome": "success"|"retryable"|"permanent", "message": str,
"retryAfterSeconds": number, "output": str}` (the last two optional; a self-fenced attempt adds
`"reason": "LeaseLost"`; the push runner adds `reason` and `responseCode`). The kubelet keeps at most 4096 bytes of a termination message, so the
whole JSON document is made to fit in 4096 bytes of UTF-8: the message, then the output, are cut
(with a marker) until it does. Nothing is ever rejected for being too long.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

LIMIT = 4096
"""Bytes of the whole termination message (the kubelet's own limit per container)."""
TRUNCATED = "…[truncated]"
"""Appended to a message or output that was cut (the operator uses the same marker)."""
DEFAULT_PATH = "/dev/termination-log"
"""The container's terminationMessagePath unless the pod says otherwise; CRONOQ_TERMINATION_LOG overrides."""

SUCCESS, RETRYABLE, PERMANENT = "success", "retryable", "permanent"

EXIT_SUCCESS = 0
"""The handler returned."""
EXIT_RETRYABLE = 1
"""The handler raised `Retryable` or any exception other than `Permanent`."""
EXIT_PERMANENT = 2
"""The handler raised `Permanent`, or the CRONOQ_* environment is unusable."""
EXIT_LEASE_LOST = 3
"""Self-fenced: the attempt's Lease was lost (taken over, deleted, or not renewed for a TTL)."""

LEASE_LOST = "LeaseLost"


@dataclass(frozen=True)
class Report:
    """How the attempt ended, as the SDK tells the operator."""

    outcome: str
    message: str = ""
    retry_after: float | None = None
    output: str | None = None
    reason: str | None = None
    response_code: int | None = None
    """The HTTP status a push task's endpoint answered with (the push runner only)."""

    @property
    def exit_code(self) -> int:
        if self.reason == LEASE_LOST:
            return EXIT_LEASE_LOST
        return {SUCCESS: EXIT_SUCCESS, RETRYABLE: EXIT_RETRYABLE, PERMANENT: EXIT_PERMANENT}[self.outcome]

    def encode(self, limit: int = LIMIT) -> bytes:
        """The termination message: valid JSON of at most `limit` bytes of UTF-8."""
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


def encode_output(value: Any) -> str | None:
    """A handler's return value as the attempt's output: a str as is, bytes decoded as UTF-8,
    None as no output, anything else as compact JSON (objects JSON cannot encode as their str())."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def write(report: Report, path: str) -> None:
    """Leave `report` at `path` and say on stderr how the attempt ended. A path that cannot be
    written (a local run outside a pod) only costs the message, never the exit code."""
    data = report.encode()
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as err:
        print(f"cronoq: cannot write the termination message to {path}: {err}", file=sys.stderr)
    summary = report.outcome + (f" ({report.reason})" if report.reason else "")
    if report.message:
        summary += f": {report.message[:500]}"
    print(f"cronoq: attempt {summary}", file=sys.stderr, flush=True)


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
