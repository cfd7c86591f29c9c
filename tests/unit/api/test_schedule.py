"""The TaskSchedule model and its CRD: the shape the API server checks, the template without the
Task's immutability rules, the printer columns."""
from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from cronoq.api import TaskSchedule, crdgen


def body(**spec):
    return {"apiVersion": "cronoq.io/v1alpha1", "kind": "TaskSchedule", "metadata": {"name": "s"},
            "spec": {"taskTemplate": {"spec": {"image": "busybox"}}, **spec}}


def test_defaults_and_round_trip():
    s = TaskSchedule.model_validate(body(every="1m30s"))
    assert s.spec.every == timedelta(seconds=90) and s.spec.time_zone == "UTC"
    assert s.spec.concurrency_policy == "Allow" and not s.spec.suspend
    assert (s.spec.successful_tasks_history_limit, s.spec.failed_tasks_history_limit) == (3, 1)
    assert s.to_dict()["spec"]["every"] == "1m30s"


@pytest.mark.parametrize("every", ["500ms", "0s", "1.5s", "8761h"])
def test_every_is_whole_seconds_from_1s(every):
    with pytest.raises(ValidationError):
        TaskSchedule.model_validate(body(every=every))


def test_the_template_spec_has_no_immutability_rules_and_refuses_key_and_cancel():
    spec = crdgen.crd(TaskSchedule)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    template = spec["properties"]["taskTemplate"]["properties"]["spec"]
    rules = template["x-kubernetes-validations"]
    assert not any("oldSelf" in r["rule"] for r in rules)
    assert {r["fieldPath"] for r in rules} == {".key", ".cancel"}
    assert "payload" in template["properties"] and "retry" in template["properties"]
    assert any("has(self.schedule) != has(self.every)" in r["rule"] for r in spec["x-kubernetes-validations"])


def test_printer_columns_and_names():
    crd = crdgen.crd(TaskSchedule)
    columns = [c["name"].upper() for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns == ["SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST FIRE", "NEXT FIRE", "AGE"]
    assert crd["spec"]["names"]["categories"] == ["cronoq"]
    assert crd["metadata"]["name"] == "taskschedules.cronoq.io"


def test_cronoq_schedule_list_says_paused_when_pause_after_failures_stopped_the_fires():
    from cronoq.cli.schedules import _row

    def suspend_column(**fields):
        schedule = TaskSchedule.model_validate({**body(every="1m", pauseAfterFailures=3), **fields})
        return _row(schedule, namespaces=False)[2].plain

    paused = {"conditions": [{"type": "Paused", "status": "True", "reason": "ConsecutiveFailures",
                              "message": "3 Tasks in a row failed", "lastTransitionTime": "2026-12-07T12:00:00Z"}]}
    assert suspend_column() == "false"
    assert suspend_column(status=paused) == "paused"
    resumed = {"conditions": [{**paused["conditions"][0], "status": "False", "reason": "Resumed"}]}
    assert suspend_column(status=resumed) == "false"
