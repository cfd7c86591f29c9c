"""Durations: the grammar Kubernetes users write, the same in Python as in the CRD pattern."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
from hypothesis import given, strategies as st
from pydantic import BaseModel, ValidationError

from cronoq.api import durations
from cronoq.api.durations import PATTERN, DurationError, duration_type, parse

ms = timedelta(milliseconds=1)


@pytest.mark.parametrize("text, expected", [
    ("0", timedelta(0)),
    ("0s", timedelta(0)),
    ("500ms", timedelta(milliseconds=500)),
    ("30s", timedelta(seconds=30)),
    ("2m", timedelta(minutes=2)),
    ("1h", timedelta(hours=1)),
    ("1m30s", timedelta(seconds=90)),
    ("1h2m3s4ms", timedelta(hours=1, minutes=2, seconds=3, milliseconds=4)),
    ("90s", timedelta(seconds=90)),
    ("1h0m", timedelta(hours=1)),
    ("999999h", timedelta(hours=999999)),
])
def test_parse(text: str, expected: timedelta) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize("text", [
    "", "1", "10", "s", "1.5s", "-1s", "+1s", "1d", "1us", "1ns", "30s1m", "1m1m", "1 m", " 1s", "1s ",
    "1S", "1msx", "1000000h", "PT1S", "1h30", "ms", "1s\n",
])
def test_refused(text: str) -> None:
    with pytest.raises(DurationError):
        parse(text)
    assert re.fullmatch(PATTERN, text) is None or text == "", "the CRD pattern (Go: `$` is end of text) must refuse it too"


def test_not_a_string() -> None:
    with pytest.raises(DurationError, match="is a string"):
        parse(30)  # type: ignore[arg-type]


@pytest.mark.parametrize("delta, text", [
    (timedelta(0), "0s"),
    (timedelta(milliseconds=500), "500ms"),
    (timedelta(seconds=60), "1m"),
    (timedelta(seconds=90), "1m30s"),
    (timedelta(hours=1, milliseconds=1), "1h1ms"),
    (timedelta(hours=25), "25h"),
])
def test_format(delta: timedelta, text: str) -> None:
    assert durations.format(delta) == text


@pytest.mark.parametrize("delta", [timedelta(microseconds=1), timedelta(seconds=-1)])
def test_format_refuses_what_the_grammar_cannot_say(delta: timedelta) -> None:
    with pytest.raises(DurationError):
        durations.format(delta)


@given(st.integers(min_value=0, max_value=999_999 * 3_600_000).map(lambda n: n * ms))
def test_format_then_parse_is_identity(delta: timedelta) -> None:
    text = durations.format(delta)
    assert parse(text) == delta
    assert re.fullmatch(PATTERN, text)
    assert len(text) <= durations.MAX_LENGTH


@given(st.text(alphabet="0123456789hms.", max_size=12))
def test_python_and_crd_pattern_agree(text: str) -> None:
    """Whatever the API server's pattern admits, Python parses, and the other way round."""
    try:
        parse(text)
        parsed = True
    except DurationError:
        parsed = False
    assert parsed == (text != "" and re.fullmatch(PATTERN, text) is not None)


def test_canonical_text_is_stable() -> None:
    assert durations.format(parse("90s")) == "1m30s"
    assert durations.format(parse("1m30s")) == "1m30s"


class _Probe(BaseModel):
    ttl: duration_type("2s", "1h", off=True)  # type: ignore[valid-type]


@pytest.mark.parametrize("text", ["0s", "0", "2s", "30s", "1h"])
def test_bounded_duration_accepts(text: str) -> None:
    assert _Probe(ttl=text).ttl == parse(text)


@pytest.mark.parametrize("text", ["1s", "1999ms", "1h1ms", "2h", "soon"])
def test_bounded_duration_refuses(text: str) -> None:
    with pytest.raises(ValidationError):
        _Probe(ttl=text)


def test_bounded_duration_serialises_canonically() -> None:
    assert _Probe(ttl="90s").model_dump(mode="json") == {"ttl": "1m30s"}
    assert _Probe(ttl=timedelta(seconds=5)).model_dump(mode="json") == {"ttl": "5s"}


def test_bounded_duration_schema_carries_pattern_and_cel_range() -> None:
    schema = _Probe.model_json_schema(mode="serialization")["properties"]["ttl"]
    assert schema["pattern"] == PATTERN
    (rule,) = schema["x-kubernetes-validations"]
    assert "duration('2s')" in rule["rule"] and "duration('1h')" in rule["rule"]
    assert "duration(self) == duration('0s')" in rule["rule"]
    assert rule["rule"].startswith(f"!self.matches('{PATTERN}')")
