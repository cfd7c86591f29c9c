"""The report both sides share (`cronoq.pod_protocol.report`): what the SDK, a pull worker and the
push runner encode, the operator parses back as it was meant; what is cut is cut as before; what
is no report is none; and the documents workers and pods of earlier releases write still parse."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from cronoq.pod_protocol.report import (
    MAX_RETRY_AFTER, OUTCOMES, REPORT_LIMIT, REPORT_REASONS, TRUNCATED, Report, truncate,
)

LEASE_GUARD = Path(__file__).resolve().parents[3] / "charts" / "cronoq" / "templates" / "lease-guard-policy.yaml"

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=200)
"""Text UTF-8 can carry (a lone surrogate is replaced when encoded), short enough that no report of
two of them is cut."""


@given(outcome=st.sampled_from(sorted(OUTCOMES)), message=TEXT, output=st.none() | TEXT,
       retry_after=st.none() | st.floats(min_value=0.001, max_value=MAX_RETRY_AFTER) | st.integers(1, 86400),
       reason=st.none() | st.sampled_from(sorted(REPORT_REASONS)), code=st.none() | st.integers(100, 599))
def test_what_is_encoded_parses_back_the_same(outcome, message, output, retry_after, reason, code) -> None:
    report = Report(outcome, message, None if retry_after is None else float(retry_after), output, reason, code)
    data = report.encode()
    assert len(data) <= REPORT_LIMIT
    assert Report.parse(data.decode()) == report


def test_the_wire_format_is_unchanged() -> None:
    """The bytes today's encoder writes, field order included: older operators parse them too."""
    assert Report("success", output='{"rows":3}').encode() == b'{"outcome":"success","message":"","output":"{\\"rows\\":3}"}'
    assert Report("retryable", "lease lost: gone", reason="LeaseLost").encode() == \
        b'{"outcome":"retryable","message":"lease lost: gone","reason":"LeaseLost"}'
    assert Report("retryable", "GET https://x: HTTP 503", retry_after=120.0, reason="HTTPStatus",
                  response_code=503).encode() == \
        b'{"outcome":"retryable","message":"GET https://x: HTTP 503","reason":"HTTPStatus","responseCode":503,' \
        b'"retryAfterSeconds":120}'
    assert Report("retryable", "busy", retry_after=0.25).encode() == \
        b'{"outcome":"retryable","message":"busy","retryAfterSeconds":0.25}'
    assert Report("success", "é").encode() == '{"outcome":"success","message":"é"}'.encode()


@pytest.mark.parametrize("report, cut", [
    (Report("retryable", "x" * 100), '{"outcome":"retryable","message":"xxxxxxxxxxxxxx…[truncated]"}'),
    (Report("success", "m" * 50, output="é" * 80), '{"outcome":"success","message":"mmmm…[truncated]","output":""}'),
    (Report("permanent", "😀" * 40, reason="HTTPStatus", response_code=404),
     '{"outcome":"permanent","message":"","reason":"HTTPStatus","responseCode":404}'),
    (Report("retryable", 'a"b\\c\n' * 20, retry_after=2.5), '{"outcome":"retryable","message":"","retryAfterSeconds":2.5}'),
])
def test_an_oversize_report_is_cut_as_before(report: Report, cut: str) -> None:
    """The same bytes as the encoder of earlier releases, on a small limit where every step shows:
    the message has the first claim, the marker only where it fits, never invalid JSON."""
    assert report.encode(limit=64).decode() == cut


def test_the_operator_cuts_what_it_keeps_as_before() -> None:
    assert truncate("€" * 2000) == "€" * 1360 + TRUNCATED  # 4096 bytes less the marker's 14, in whole characters
    assert truncate("x" * REPORT_LIMIT) == "x" * REPORT_LIMIT
    assert truncate("x" * 100, 20) == "x" * 6 + TRUNCATED
    assert truncate(None) == truncate("") == ""


@pytest.mark.parametrize("document, report", [
    # As the SDK, the push runner and pull workers of earlier releases wrote them.
    ('{"outcome":"success","message":"","output":"{\\"rows\\":3}"}', Report("success", output='{"rows":3}')),
    ('{"outcome":"retryable","message":"lease lost: gone","reason":"LeaseLost"}',
     Report("retryable", "lease lost: gone", reason="LeaseLost")),
    ('{"outcome":"permanent","message":"GET https://x: HTTP 404 Not Found","reason":"HTTPStatus","responseCode":404}',
     Report("permanent", "GET https://x: HTTP 404 Not Found", reason="HTTPStatus", response_code=404)),
    ('{"outcome":"retryable","message":"aborted: the worker stopped (grace 30s passed)"}',
     Report("retryable", "aborted: the worker stopped (grace 30s passed)")),
    # As people write them by hand (the docs' examples, a shell script's echo).
    ('{"outcome": "retryable", "message": "try later", "retryAfterSeconds": 5}', Report("retryable", "try later", 5.0)),
    ('  \n{"outcome": "Permanent", "message": "x"}', Report("permanent", "x")),
    ('{"outcome": "success", "output": {"rows": [1, 2]}}', Report("success", output='{"rows":[1,2]}')),
    ('{"outcome": "success"}', Report("success")),
])
def test_documents_of_earlier_releases_still_parse(document: str, report: Report) -> None:
    assert Report.parse(document) == report


@pytest.mark.parametrize("document", [
    None, "", "not json", "42 rows", '{"rows": 3}', '{"outcome": "maybe"}', '{"message": "no outcome"}',
    '["retryable"]', '{"outcome": "retryable"', '{"outcome": null}', "[" * 100_000,
    '{"outcome": "success", "output": ' + "[" * 100_000 + "]" * 100_000 + "}",
])
def test_what_is_no_report_is_none(document: str | None) -> None:
    assert Report.parse(document) is None


@pytest.mark.parametrize("fields, read", [
    ({"retryAfterSeconds": 0}, {}), ({"retryAfterSeconds": -5}, {}), ({"retryAfterSeconds": "30"}, {}),
    ({"retryAfterSeconds": True}, {}), ({"retryAfterSeconds": 1e300}, {"retry_after": MAX_RETRY_AFTER}),
    ({"retryAfterSeconds": 10**400}, {"retry_after": MAX_RETRY_AFTER}),
    ({"reason": "Completed"}, {}), ({"reason": "OOMKilled"}, {}), ({"reason": "Timeout"}, {"reason": "Timeout"}),
    ({"responseCode": 99}, {}), ({"responseCode": 600}, {}), ({"responseCode": True}, {}),
    ({"responseCode": 429}, {"response_code": 429}),
    ({"message": None}, {}), ({"message": 7}, {"message": "7"}), ({"output": 42}, {"output": "42"}),
])
def test_only_what_can_be_believed_is_read(fields: dict, read: dict) -> None:
    """A hint must never overflow the operator's arithmetic, and a container must not pose as one of
    the operator's own verdicts (OOMKilled, Completed): those fields are read as absent."""
    assert Report.parse(json.dumps({"outcome": "retryable", **fields})) == Report("retryable", **read)


def test_the_lease_guard_bounds_a_report_as_the_protocol_does() -> None:
    """The chart's admission policy states the limit in CEL, where no Python constant reaches."""
    policy = LEASE_GUARD.read_text()
    assert f"orValue(''))) <= {REPORT_LIMIT}" in policy and f"is over {REPORT_LIMIT} bytes" in policy
