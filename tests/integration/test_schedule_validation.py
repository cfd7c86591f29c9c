"""The API server refuses bad TaskSchedules, naming the field: the OpenAPI bounds, patterns and
CEL rules of crds/taskschedule.yaml against the real kube-apiserver."""
from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("crds")]


def schedule(name: str = "s", template: dict | None = None, **spec: Any) -> dict[str, Any]:
    if "schedule" not in spec and "every" not in spec and not spec.pop("neither", False):
        spec["every"] = "1m"
    body = {"apiVersion": "cronoq.io/v1alpha1", "kind": "TaskSchedule", "metadata": {"name": name},
            "spec": {"taskTemplate": {"spec": {"image": "busybox:1.36", **(template or {})}}, **spec}}
    return body


def create(kubectl, namespace: str, obj: dict[str, Any]):
    return kubectl("create", "-f", "-", input=json.dumps(obj), check=False, namespace=namespace)


def refused(result, *words: str) -> None:
    assert result.returncode != 0, f"accepted, but should have been refused: {result.stdout}"
    for word in words:
        assert word in result.stderr, f"{word!r} not in the error:\n{result.stderr}"


def _with_template_annotations(annotations: dict[str, str]) -> dict[str, Any]:
    body = schedule()
    body["spec"]["taskTemplate"]["metadata"] = {"annotations": annotations}
    return body


no_template = schedule()
del no_template["spec"]["taskTemplate"]

BAD = [
    ("both schedule and every", schedule(schedule="* * * * *", every="1m"), ["spec.schedule", "exactly one"]),
    ("neither schedule nor every", schedule(neither=True), ["spec.schedule", "exactly one"]),
    ("four cron fields", schedule(schedule="* * * *"), ["spec.schedule", "should match"]),
    ("unknown macro", schedule(schedule="@reboot"), ["spec.schedule", "should match"]),
    ("fractional every", schedule(every="1.5s"), ["spec.every", "should match"]),
    ("every in milliseconds", schedule(every="500ms"), ["spec.every", "should match"]),
    ("every of zero", schedule(every="0s"), ["spec.every", "between 1s and 8760h"]),
    ("every in days", schedule(every="1d"), ["spec.every", "should match"]),
    ("unknown policy", schedule(concurrencyPolicy="Queue"), ["spec.concurrencyPolicy", "Unsupported value"]),
    ("negative success history", schedule(successfulTasksHistoryLimit=-1), ["spec.successfulTasksHistoryLimit"]),
    ("negative failure history", schedule(failedTasksHistoryLimit=-1), ["spec.failedTasksHistoryLimit"]),
    ("huge history", schedule(successfulTasksHistoryLimit=5000), ["spec.successfulTasksHistoryLimit"]),
    ("zero starting deadline", schedule(startingDeadline="0s"), ["spec.startingDeadline", "between 1s"]),
    ("time zone with a space", schedule(timeZone="New York"), ["spec.timeZone", "should match"]),
    ("no template", no_template, ["spec.taskTemplate", "Required"]),
    ("key in the template", schedule(template={"key": "k"}), ["spec.taskTemplate.spec.key", "derived"]),
    ("cancel in the template", schedule(template={"cancel": True}), ["spec.taskTemplate.spec.cancel"]),
    ("template priority too high", schedule(template={"priority": 10**7}), ["spec.taskTemplate.spec.priority"]),
    ("submitter in the template", _with_template_annotations({"cronoq.io/submitter": "someone-else"}),
     ["spec.taskTemplate.metadata.annotations", "cronoq.io/submitter is not the template's to set"]),
    ("suspend not a boolean", schedule(suspend="yes"), ["spec.suspend"]),
    ("name too long", schedule(name="s" * 64), ["metadata.name", "63"]),
    ("backfill ending before it starts", schedule(backfills=[{"start": "2026-12-02T00:00:00Z",
                                                               "end": "2026-12-01T00:00:00Z"}]),
     ["spec.backfills[0].end", "before start"]),
]


@pytest.mark.parametrize("obj, words", [(obj, words) for _, obj, words in BAD], ids=[why for why, _, _ in BAD])
def test_bad_schedule_is_refused_naming_the_field(kubectl, namespace, obj, words) -> None:
    refused(create(kubectl, namespace, obj), *words)


def test_there_are_enough_bad_schedules() -> None:
    assert len(BAD) >= 8


def test_good_schedules_are_accepted_and_the_template_may_change(kubectl, namespace) -> None:
    for obj in (schedule("cron", schedule="*/5 9-17 * * MON-FRI", timeZone="America/New_York"),
                schedule("macro", schedule="@daily"), schedule("interval", every="1h30m", startingDeadline="5m")):
        result = create(kubectl, namespace, obj)
        assert result.returncode == 0, result.stderr
    patch = {"spec": {"taskTemplate": {"spec": {"image": "busybox:1.37", "priority": 7}}, "every": "2h"}}
    result = kubectl("patch", "taskschedule", "interval", "--type=merge", "-p", json.dumps(patch), check=False,
                     namespace=namespace)
    assert result.returncode == 0, result.stderr


def test_handled_through_never_goes_back(kubectl, own_namespace) -> None:
    """In a namespace no operator serves, so the test alone writes the status."""
    namespace = own_namespace
    assert create(kubectl, namespace, schedule("mark")).returncode == 0

    def set_mark(at: str):
        return kubectl("patch", "taskschedule", "mark", "--subresource=status", "--type=merge",
                       "-p", json.dumps({"status": {"handledThrough": at}}), check=False, namespace=namespace)

    assert set_mark("2026-01-02T00:00:00Z").returncode == 0
    assert set_mark("2026-01-03T00:00:00.5Z").returncode == 0
    refused(set_mark("2026-01-01T00:00:00Z"), "status.handledThrough", "cannot decrease")
