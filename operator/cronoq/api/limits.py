"""Bounds that the CRDs enforce and the engine must keep to, each written once: the models use
them in their field bounds (so the generated CRDs carry them), the engine truncates and trims to
them (so a status it writes is never refused for its size)."""
from __future__ import annotations

from datetime import timedelta

from cronoq.pod_protocol.report import REPORT_LIMIT

ATTEMPTS_KEPT = 20
"""Attempt records kept in a Task's status; the newest are kept."""
MESSAGE_LIMIT = REPORT_LIMIT
"""A Task's status message and output, in bytes: the bound of the report an output comes from."""
ATTEMPT_MESSAGE_LIMIT = 1024
"""An attempt record's message, and a condition's message as cronoq writes it."""
REASON_LIMIT = 128
"""An attempt record's reason."""
SUMMARY_LIMIT = 100
"""The one-line summary shown in the MESSAGE column."""
DEFAULT_START_TIMEOUT = timedelta(minutes=10)
"""How long an attempt's pod may stay Pending before the attempt is abandoned (StartTimeout)."""
