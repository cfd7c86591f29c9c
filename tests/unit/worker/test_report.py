"""The SDK's termination message (DESIGN §3): the JSON the operator reads, always valid and at
most 4096 bytes however long or strange the message and output, and the exit codes."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from hypothesis import given, settings, strategies as st

from cronoq.api import AttemptOutcome, RetryPolicy
from cronoq.engine.observed import Termination
from cronoq.engine.outcome import from_termination
from cronoq.pod_protocol.report import REPORT_LIMIT as LIMIT, TRUNCATED, Report
from cronoq.worker import Permanent, Retryable
from cronoq.worker.report import encode_output

from tests.unit.builders import T0, at


def decoded(report: Report) -> dict:
    data = report.encode()
    assert len(data) <= LIMIT
    return json.loads(data.decode("utf-8"))


def assert_cut_from(kept: str, original: str) -> None:
    """`kept` is `original`, or a prefix of it with the marker."""
    if kept != original:
        assert kept.endswith(TRUNCATED)
        assert original.startswith(kept[: -len(TRUNCATED)])


def test_success_with_output() -> None:
    assert decoded(Report("success", output='{"rows":3}')) == {"outcome": "success", "message": "",
                                                                "output": '{"rows":3}'}


def test_success_without_output_has_no_output_field() -> None:
    assert decoded(Report("success")) == {"outcome": "success", "message": ""}


def test_retryable_with_retry_after_is_a_whole_number_when_it_is_one() -> None:
    assert decoded(Report("retryable", "busy", retry_after=5.0)) == {"outcome": "retryable", "message": "busy",
                                                                      "retryAfterSeconds": 5}
    assert decoded(Report("retryable", "busy", retry_after=0.25))["retryAfterSeconds"] == 0.25


def test_lease_lost_names_its_reason() -> None:
    doc = decoded(Report("retryable", "lease lost: gone", reason="LeaseLost"))
    assert doc == {"outcome": "retryable", "message": "lease lost: gone", "reason": "LeaseLost"}


@pytest.mark.parametrize("report, code", [(Report("success"), 0), (Report("retryable"), 1), (Report("permanent"), 2),
                                          (Report("retryable", reason="LeaseLost"), 3)])
def test_exit_codes(report: Report, code: int) -> None:
    assert report.exit_code == code


@pytest.mark.parametrize("unit", ["x", "é", "€", "😀", "\x00", '"', "\\", "\n", "\u2028"])
def test_a_huge_output_is_cut_to_fit_the_whole_message_in_4096_bytes(unit: str) -> None:
    output = unit * 10_000
    doc = decoded(Report("success", output=output))
    assert doc["output"].endswith(TRUNCATED)
    assert_cut_from(doc["output"], output)
    # The room is used, not wasted: one more unit would not have fit.
    unit_bytes = len(json.dumps(unit, ensure_ascii=False).encode()) - 2
    assert len(Report("success", output=output).encode()) > LIMIT - unit_bytes


@pytest.mark.parametrize("outcome", ["retryable", "permanent"])
def test_a_huge_message_is_cut_too(outcome: str) -> None:
    message = "line of log 😀\n" * 2000
    doc = decoded(Report(outcome, message, retry_after=3))
    assert doc["retryAfterSeconds"] == 3
    assert_cut_from(doc["message"], message)


def test_the_message_has_the_first_claim_on_the_room() -> None:
    doc = decoded(Report("success", "m" * 5000, output="o" * 5000))
    assert doc["message"].endswith(TRUNCATED) and doc["output"] in ("", TRUNCATED)


def test_output_exactly_at_the_limit_is_kept_whole() -> None:
    overhead = len(Report("success", output="").encode())
    output = "x" * (LIMIT - overhead)
    assert decoded(Report("success", output=output))["output"] == output
    assert decoded(Report("success", output=output + "x"))["output"].endswith(TRUNCATED)


def test_lone_surrogates_still_give_utf8_json() -> None:
    doc = decoded(Report("retryable", "bad \ud800 text", output="\udfff"))
    assert doc["message"] == "bad ? text" and doc["output"] == "?"


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=50), st.integers(min_value=1, max_value=3000), st.text(max_size=300))
def test_any_output_and_message_fit_as_valid_json(unit: str, repeat: int, message: str) -> None:
    output = unit * repeat
    doc = decoded(Report("success", message, output=output))
    assert_cut_from(doc["message"], message.encode("utf-8", "replace").decode())
    assert_cut_from(doc["output"], output.encode("utf-8", "replace").decode())


def test_returned_values_become_the_output() -> None:
    assert encode_output("plain text") == "plain text"
    assert encode_output(None) is None
    assert encode_output({"rows": 3, "name": "é"}) == '{"rows":3,"name":"é"}'
    assert encode_output([1, 2.5, None, True]) == "[1,2.5,null,true]"
    assert encode_output(42) == "42"
    assert encode_output(b"bytes \xff") == "bytes \ufffd"
    assert encode_output({"when": timedelta(seconds=1)}) == '{"when":"0:00:01"}'


def test_retryable_and_permanent_carry_their_message_and_hint() -> None:
    assert (Retryable("later", retry_after=5).message, Retryable("later", retry_after=5).retry_after) == ("later", 5.0)
    assert Retryable("later", retry_after=timedelta(minutes=1)).retry_after == 60.0
    assert Retryable("now").retry_after is None
    assert Permanent("never").message == "never"
    for bad in (-1, float("inf"), float("nan"), "5", True):
        with pytest.raises(ValueError):
            Retryable("x", retry_after=bad)


@pytest.mark.parametrize("report, exit_code, outcome, output, retry_after", [
    (Report("success", output='{"rows":3}'), 0, AttemptOutcome.SUCCESS, '{"rows":3}', None),
    (Report("success", output="x" * 9000), 0, AttemptOutcome.SUCCESS, None, None),
    (Report("retryable", "busy", retry_after=5), 1, AttemptOutcome.RETRYABLE, None, 5.0),
    (Report("permanent", "bad input"), 2, AttemptOutcome.PERMANENT, None, None),
    (Report("retryable", "lease lost: gone", reason="LeaseLost"), 3, AttemptOutcome.RETRYABLE, None, None),
])
def test_the_operator_reads_what_the_sdk_writes(report, exit_code, outcome, output, retry_after) -> None:
    """The contract from both ends: engine/outcome.py classifies the SDK's bytes as meant, even
    with a permanentExitCodes list that would say otherwise for the bare exit code."""
    message = report.encode().decode()
    verdict = from_termination(Termination(exit_code=exit_code, reason=None, message=message, started_at=T0,
                                           finished_at=at(1)), RetryPolicy(permanent_exit_codes=(1, 3)))
    assert verdict.outcome is outcome and verdict.retry_after == retry_after
    if outcome is AttemptOutcome.SUCCESS:
        assert verdict.output is not None and len(verdict.output.encode()) <= LIMIT
        assert verdict.output == output if output is not None else verdict.output.endswith(TRUNCATED)
