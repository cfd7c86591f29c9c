"""The SDK's side of the report (`cronoq.pod_protocol.report`, DESIGN §3): a handler's return value
as the output, and the report left as the container's termination message.

The document, its limits, its reasons and its exit codes are the pod protocol's, not the SDK's:
the operator parses what this writes with the same type.
"""
from __future__ import annotations

import json
import sys
from typing import Any

from cronoq.pod_protocol.report import Report

DEFAULT_PATH = "/dev/termination-log"
"""The container's terminationMessagePath unless the pod says otherwise; CRONOQ_TERMINATION_LOG overrides."""


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
