"""The duration grammar (`500ms`, `30s`, `2m`, `1h`, `1m30s`) and its parser, below the API models
because a pull worker reads durations too: a Task's or a pool's `leaseTTL`, for an attempt whose
record carries no `Terms` (one recorded by an operator older than them). `api/durations.py` says
why the grammar is what it is and carries it into the CRDs; there is no other parser.
"""
from __future__ import annotations

import re
from datetime import timedelta
from typing import Final

PATTERN: Final = r"^(0|([0-9]{1,6}h)?([0-9]{1,6}m)?([0-9]{1,6}s)?([0-9]{1,6}ms)?)$"
"""The grammar, as a regular expression valid in both Python and Go (RE2)."""

UNITS_MS: Final = (("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1))
"""The units, largest first, in milliseconds."""

_COMPILED = re.compile(PATTERN)


class DurationError(ValueError):
    """The text is not a duration in cronoq's grammar."""


def parse(text: str) -> timedelta:
    """`"1m30s"` → `timedelta(seconds=90)`; raises DurationError on anything outside the grammar."""
    if not isinstance(text, str):
        raise DurationError(f"a duration is a string such as '30s' or '1m30s', not {type(text).__name__}")
    match = _COMPILED.fullmatch(text)  # not match(): Python's `$` also matches before a final newline
    if not text or match is None:
        raise DurationError(f"{text!r} is not a duration: use whole numbers of h, m, s, ms in that order, e.g. '1m30s' or '500ms'")
    hours, minutes, seconds, millis = (int(g[: -len(u)]) if g else 0 for g, (u, _) in zip(match.groups()[1:], UNITS_MS))
    return timedelta(hours=hours, minutes=minutes, seconds=seconds, milliseconds=millis)
