"""Durations as Kubernetes users write them: `500ms`, `30s`, `2m`, `1h`, `1m30s`.

The same text has to mean the same thing in three places: the CRD's `pattern` (checked by the
API server), CEL's `duration()` (used by validation rules such as maxBackoff ≥ initialBackoff),
and Python (the engine works with `timedelta`). So the grammar is deliberately a strict subset
of Go's `time.ParseDuration`, which CEL uses: whole numbers of `h`, `m`, `s` and `ms`, each unit
at most once and in that order, at most six digits each (so no value can overflow Go's int64
nanoseconds), or a bare `0`. `1.5s`, `90s1m` and `1d` are refused everywhere alike.

`Annotated[timedelta, DurationBounds(minimum, maximum)]` is the pydantic type of a bounded
duration field: it parses to `timedelta`, serialises back to the canonical text, and carries the
pattern and a CEL range rule into the generated CRD.

The grammar and its parser sit in the pod protocol (`pod_protocol/durations.py`), which pull
workers import without the API models; they are named here for everything above.
"""
from __future__ import annotations

from datetime import timedelta
from collections.abc import Iterator
from typing import Annotated, Any

from annotated_types import GroupedMetadata
from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

from cronoq.pod_protocol.durations import PATTERN as PATTERN, UNITS_MS, DurationError as DurationError, parse as parse

MAX_LENGTH = 32
"""Longest text the grammar admits is 29 characters (`999999h999999m999999s999999ms`)."""


def format(delta: timedelta) -> str:  # noqa: A001 - the natural name next to parse()
    """`timedelta(seconds=90)` → `"1m30s"`: the shortest text in the grammar, `0s` for zero."""
    total_ms, rest = divmod(delta // timedelta(microseconds=1), 1000)
    if rest or total_ms < 0:
        raise DurationError(f"{delta!r} is not a whole, non-negative number of milliseconds")
    parts = []
    for unit, size in UNITS_MS:
        count, total_ms = divmod(total_ms, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def cel_valid(expression: str) -> str:
    """CEL that is true when `expression` (a string) is in the grammar. Rules calling
    `duration()` test it first: the pattern already reports bad text, and `duration()` on it
    would add a second, confusing error."""
    return f"{expression}.matches('{PATTERN}')"


def _coerce(value: Any) -> timedelta:
    return value if isinstance(value, timedelta) else parse(value)


class DurationBounds(GroupedMetadata):
    """The metadata of a duration field allowed between `minimum` and `maximum` (inclusive),
    and also `0s` when `off` is true (zero then means "disabled"):
    `Annotated[timedelta, DurationBounds("1s", "1h")]` parses to `timedelta`, serialises back to
    the canonical text, and in the CRD is a string with PATTERN and a CEL rule checking the range
    with `duration()`, so the API server refuses the same values Python does. (pydantic unpacks
    the group; to a type checker the field is a plain `timedelta`.)
    """

    def __init__(self, minimum: str, maximum: str, *, off: bool = False) -> None:
        low, high = parse(minimum), parse(maximum)
        in_range = f"duration(self) >= duration('{minimum}') && duration(self) <= duration('{maximum}')"
        in_range = f"duration(self) == duration('0s') || ({in_range})" if off else in_range
        rule = f"!{cel_valid('self')} || {in_range}"
        message = f"must be between {minimum} and {maximum}" + (", or 0s to turn it off" if off else "")

        def check(value: Any) -> timedelta:
            delta = _coerce(value)
            if delta % timedelta(milliseconds=1):
                raise DurationError(f"{delta!r} is finer than a millisecond")
            if not (low <= delta <= high or (off and delta == timedelta(0))):
                raise DurationError(f"{format(delta)}: {message}")
            return delta

        schema = {
            "type": "string",
            "pattern": PATTERN,
            "minLength": 1,
            "maxLength": MAX_LENGTH,
            "x-kubernetes-validations": [{"rule": rule, "message": message, "reason": "FieldValueInvalid"}],
        }
        self._metadata = (
            BeforeValidator(check),
            PlainSerializer(format, return_type=str),
            WithJsonSchema(schema),
        )

    def __iter__(self) -> Iterator[object]:
        return iter(self._metadata)


def duration_type(minimum: str, maximum: str, *, off: bool = False) -> Any:
    """`Annotated[timedelta, DurationBounds(minimum, maximum, off=off)]`, built at run time (so
    a type checker sees `Any`; module-level aliases spell out the `Annotated` instead)."""
    return Annotated[timedelta, DurationBounds(minimum, maximum, off=off)]
