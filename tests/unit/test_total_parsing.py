"""Every parse of tenant text is total (issue 49): any text or JSON, deep nesting included, gives a
value or the parser's documented refusal, never another exception — inputs, checkpoints, reports,
push requests, the SDK's environment, templates and times in a Task's spec. And a task that
cannot run ends Failed with a reason a user can act on, instead of failing every reconcile."""
from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings, strategies as st
from pydantic import ValidationError

from cronoq.api import Task
from cronoq.engine import delay
from cronoq.engine.jobs import build_job
from cronoq.pod_protocol import Env, PushRequest, json_object
from cronoq.pod_protocol.checkpoint import CHECKPOINT_LIMIT, decode_checkpoint, parse_checkpoint
from cronoq.pod_protocol.inputs import INPUTS_LIMIT, gated, parse_inputs, parsed_output
from cronoq.pod_protocol.jsontext import JSON_DEPTH, TooDeep, json_value, text_depth, value_depth
from cronoq.pod_protocol.report import Report
from cronoq.worker.env import AttemptEnv, InvalidEnvironment

from tests.unit.builders import T0
from tests.unit.fakes import World, task

PROPERTIES = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30)


@st.composite
def nested(draw: st.DrawFn) -> str:
    """JSON text nested 0 to 3,000 levels deep (open brackets, closed or not), around a value."""
    depth = draw(st.integers(0, 3000))
    opens = "".join(draw(st.lists(st.sampled_from(["[", '{"k":']), min_size=depth, max_size=depth)))
    closes = "".join("]" if o == "[" else "}" for o in reversed(opens.replace('{"k":', "{")))
    middle = json.dumps(draw(json_values))
    return opens + middle + (closes if draw(st.booleans()) else closes[: draw(st.integers(0, len(closes)))])


tenant_text = st.one_of(st.text(), nested(), json_values.map(json.dumps), st.sampled_from([
    "[" * 3000, "{" * 3000, '{"a":' * 3000, "1" * 5000, "NaN", "-Infinity", '"\\ud800"', "\x00", "", " "]))


@PROPERTIES
@given(tenant_text)
def test_json_value_gives_a_value_or_a_value_error(text: str) -> None:
    try:
        value = json_value(text)
    except ValueError:
        return
    assert value_depth(value) <= JSON_DEPTH
    json.dumps(value)  # what was read once encodes anywhere after


@PROPERTIES
@given(st.integers(1, 3000))
def test_deep_nesting_is_refused_as_too_deep_whatever_the_stack(depth: int) -> None:
    text = "[" * depth + "]" * depth
    assert text_depth(text) == depth
    if depth > JSON_DEPTH:
        try:
            json_value(text)
        except TooDeep:
            pass
        else:
            raise AssertionError("a value deeper than JSON_DEPTH was read")
    else:
        assert value_depth(json_value(text)) == depth


@PROPERTIES
@given(tenant_text)
def test_inputs_parse_to_inputs_or_a_value_error(text: str) -> None:
    output = parsed_output(text)  # parsed, or handed over as the text
    assert output == text or json.dumps(output) is not None
    for candidate in (text, json.dumps({"dep": {"phase": "Succeeded", "output": text}}),
                      '{"dep":{"phase":"Succeeded","output":' + text + "}}"):
        try:
            inputs = parse_inputs(candidate)
        except ValueError:
            continue
        assert all(isinstance(name, str) for name in inputs)


def test_an_output_as_deep_as_any_json_the_sdk_reads_reaches_the_dependent_as_text() -> None:
    """Found by the property below: an output nested 100 levels parsed, and two levels deeper in
    the inputs' encoding the SDK refused the whole of CRONOQ_INPUTS as too deep."""
    from cronoq.pod_protocol.inputs import encode_inputs, inputs_of

    deep = "[" * 100 + "]" * 100
    inputs = parse_inputs(encode_inputs(inputs_of([("dep", "Succeeded", deep)])))
    assert inputs["dep"].output == deep, "handed over as the text it is"
    shallow = "[" * 98 + "]" * 98
    assert isinstance(parse_inputs(encode_inputs(inputs_of([("dep", "Succeeded", shallow)])))["dep"].output, list)


@PROPERTIES
@given(tenant_text)
def test_an_output_of_any_text_reaches_the_dependent_within_the_bound(text: str) -> None:
    from cronoq.pod_protocol.inputs import encode_inputs, inputs_of

    encoded = encode_inputs(inputs_of([("dep", "Succeeded", text), ("other", None, None)]))
    assert len(encoded.encode()) <= INPUTS_LIMIT
    assert set(parse_inputs(encoded)) == {"dep", "other"}, "what the operator encodes, the SDK reads"


@PROPERTIES
@given(tenant_text)
def test_a_checkpoint_parses_to_compact_json_or_none(text: str) -> None:
    parsed = parse_checkpoint(text)
    assert parsed is None or len(parsed.encode()) <= CHECKPOINT_LIMIT
    decode_checkpoint(text)


@PROPERTIES
@given(tenant_text)
def test_a_report_parses_to_a_report_or_none(text: str) -> None:
    for candidate in (text, '{"outcome":"success","output":' + text + "}", '{"outcome":"success","message":' + text + "}"):
        found = Report.parse(candidate)
        assert found is None or isinstance(found, Report)


@PROPERTIES
@given(tenant_text, json_values)
def test_a_push_request_parses_or_is_refused_with_a_value_error(text: str, value: Any) -> None:
    for candidate in (text, json.dumps({"url": "http://x", "timeout": value, "headers": value, "successCodes": value}),
                      json.dumps({"url": "http://x", "timeout": 10**400})):
        try:
            PushRequest.from_json(candidate)
        except ValueError:
            pass
    try:
        json_object(text)
    except ValueError:
        pass


@PROPERTIES
@given(tenant_text, tenant_text, tenant_text)
def test_the_sdks_environment_parses_or_is_refused_as_invalid(payload: str, inputs: str, checkpoint: str) -> None:
    try:
        AttemptEnv.from_environ({Env.PAYLOAD: payload, Env.INPUTS: inputs, Env.CHECKPOINT: checkpoint})
    except InvalidEnvironment:
        pass


@PROPERTIES
@given(st.one_of(st.none(), st.text(max_size=40), st.datetimes().map(str)), st.one_of(st.none(), st.text(max_size=40)))
def test_gated_answers_for_any_times(finished: str | None, started: str | None) -> None:
    assert gated(finished, started) in (True, False)
    assert gated(finished, None) is True


def test_gated_hands_over_only_a_dependency_that_ended_before_the_first_attempt() -> None:
    assert gated("2026-12-03T11:59:59Z", "2026-12-03T12:00:00Z")
    assert gated("2026-12-03T12:00:00Z", "2026-12-03T12:00:00Z"), "the same second: the operator wrote both"
    assert not gated("2026-12-03T12:00:01Z", "2026-12-03T12:00:00Z"), "a Task of the same name, made since"
    assert not gated(None, "2026-12-03T12:00:00Z") and not gated("soon", "2026-12-03T12:00:00Z")


pod_specs = st.one_of(
    json_values,
    st.fixed_dictionaries({}, optional={
        "containers": st.lists(st.one_of(json_values, st.fixed_dictionaries({}, optional={
            "name": json_values, "env": st.lists(st.one_of(json_values, st.fixed_dictionaries(
                {"name": json_values}, optional={"value": json_values}))), "volumeMounts": json_values})), max_size=3),
        "initContainers": json_values, "volumes": json_values, "tolerations": json_values,
        "nodeSelector": json_values, "serviceAccountName": json_values}))
times = st.one_of(st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat()),
                  st.sampled_from(["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "9998-12-31T23:59:59Z"]),
                  st.text(max_size=30))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod_specs, json_values | nested().map(lambda t: t), times)
def test_a_task_spec_is_read_or_refused_and_a_read_one_always_builds_its_job(
        spec: Any, payload: Any, not_before: str) -> None:
    raw = task("a")
    raw["spec"].update(template={"spec": spec}, payload=payload, notBefore=not_before)
    try:
        parsed = orjson.loads(orjson.dumps(raw))  # as the watch delivers it (orjson reads 1,024 levels)
    except orjson.JSONDecodeError:
        return
    except orjson.JSONEncodeError:
        return
    try:
        found = Task.model_validate(parsed)
    except ValidationError:
        return  # refused: the task ends Failed (InvalidSpec) with the message
    job = build_job(found, None, 1, "e1-a1")
    orjson.dumps(job)  # the write the operator makes
    delay.gate(found, T0), delay.in_line_from(found, T0), delay.quiet_until(found, "WaitingForStartTime", T0)


def refused(spec: dict[str, Any]) -> dict[str, Any]:
    """The status a task with `spec` ends with, in the unit-test world."""
    async def scenario() -> dict[str, Any]:
        world = World()
        world.submit("a", **spec)
        await world.settle()
        assert not world.controller.queue._failures, "no reconcile failed"
        return world.status("a")
    return asyncio.run(scenario())


def test_a_time_the_operator_cannot_count_to_fails_the_task_with_a_reason() -> None:
    """It raised OverflowError in every reconcile: no status, a log line per retry."""
    status = refused({"notBefore": "9999-12-31T23:59:59-23:59"})
    assert status["phase"] == "Failed" and "spec.notBefore" in status["message"], status
    assert {c["reason"] for c in status["conditions"]} >= {"InvalidSpec"}


def test_a_template_that_is_not_a_pod_spec_fails_the_task_with_a_reason() -> None:
    for template, named in (({"containers": [1]}, "spec.template.spec.containers"),
                            ({"containers": [{"name": "task", "env": ["x"]}]}, "spec.template.spec.containers[0].env")):
        status = refused({"template": {"spec": template}})
        assert status["phase"] == "Failed" and named in status["message"], status


def test_a_deeply_nested_payload_fails_the_task_with_a_reason() -> None:
    payload: Any = 1
    for _ in range(300):  # under the 1,024 levels the watch reads, over the 255 orjson writes
        payload = [payload]
    status = refused({"payload": payload})
    assert status["phase"] == "Failed" and "nested more than 100 levels" in status["message"], status


def test_a_dependency_whose_output_is_deeply_nested_hands_it_over_as_text_and_the_dependent_runs() -> None:
    """Finding 3: `"[" * 3000` (3 KiB) raised RecursionError after the dependent's slot was granted."""
    async def scenario() -> None:
        world = World()
        dep = task("dep")
        dep["status"] = {"phase": "Succeeded", "attempt": 1, "finishedAt": "2026-12-03T11:59:59Z",
                         "output": "[" * 3000, "outputAvailable": True}
        world.writer.tasks["dep"] = copy.deepcopy(dep)
        world.controller.intake.on_task(None, dep)
        world.submit("b", dependsOn=[{"task": "dep"}])
        await world.settle()
        job = world.writer.jobs["b-a1"]
        env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert parse_inputs(env[Env.INPUTS])["dep"].output == "[" * 3000
        assert world.status("b")["phase"] == "Running"
    asyncio.run(scenario())
