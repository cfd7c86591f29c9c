"""Builders of test objects for the engine's unit tests, in the manner of jobset's
`util/testing`: `make_task("a").retries(3).timeout("10s").obj()` gives a parsed Task,
`attempt_job("a", 1).exited(0, "out")` an observed attempt Job, `at(5)` a time five seconds
after the tests' epoch T0.

Builders only assemble objects the way the API server and the kube layer would hand them to
the engine (a Task parsed with `Task.model_validate`, `AttemptJob` facts); they decide nothing.
"""
from __future__ import annotations

import copy
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

from cronoq.api import Task, TaskPoolSpec, TaskStatus
from cronoq.engine.plan import DEFAULT_JOB_RETENTION, Effective, Observation
from cronoq.engine.naming import job_name, lease_id
from cronoq.engine.observed import AttemptJob, Termination
from cronoq.engine.retention import ttl_seconds

T0 = datetime(2026, 12, 3, 12, 0, 0, tzinfo=timezone.utc)
"""The tests' epoch: every clock in the unit tests counts from here."""


def at(seconds: float) -> datetime:
    """T0 plus `seconds`."""
    return T0 + timedelta(seconds=seconds)


class TaskBuilder:
    """A Task manifest under construction; `.obj()` parses it as the operator would."""

    def __init__(self, name: str, namespace: str = "ns") -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": "cronoq.io/v1alpha1",
            "kind": "Task",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "generation": 1,
                         "creationTimestamp": T0.isoformat()},
            "spec": {"image": "busybox:1.36"},
        }

    # --- spec -------------------------------------------------------------------------------
    def spec(self, **fields: Any) -> TaskBuilder:
        """Set spec fields by their wire (camelCase) names."""
        self._obj["spec"].update(copy.deepcopy(fields))
        return self

    def unset(self, *fields: str) -> TaskBuilder:
        """Remove spec fields (e.g. the default `image`, to let a template or pool supply it)."""
        for name in fields:
            self._obj["spec"].pop(name, None)
        return self

    def retry(self, **fields: Any) -> TaskBuilder:
        self._obj["spec"].setdefault("retry", {}).update(fields)
        return self

    def retries(self, max_attempts: int) -> TaskBuilder:
        return self.retry(maxAttempts=max_attempts)

    def no_jitter(self) -> TaskBuilder:
        return self.retry(jitter="none")

    def timeout(self, text: str) -> TaskBuilder:
        return self.spec(timeout=text)

    def pool(self, name: str) -> TaskBuilder:
        return self.spec(pool=name)

    def priority(self, value: int) -> TaskBuilder:
        return self.spec(priority=value)

    def cancelled(self) -> TaskBuilder:
        return self.spec(cancel=True)

    def uid(self, uid: str) -> TaskBuilder:
        self._obj["metadata"]["uid"] = uid
        return self

    def submitted_by(self, username: str) -> TaskBuilder:
        """The cronoq.io/submitter annotation the chart's admission policy writes."""
        self._obj["metadata"].setdefault("annotations", {})["cronoq.io/submitter"] = username
        return self

    # --- status -----------------------------------------------------------------------------
    def status(self, status: TaskStatus | dict[str, Any] | None) -> TaskBuilder:
        """Set the stored status (a TaskStatus, e.g. the one a previous plan wrote, or its wire form)."""
        if status is None:
            self._obj.pop("status", None)
        else:
            self._obj["status"] = status.to_dict() if isinstance(status, TaskStatus) else copy.deepcopy(status)
        return self

    def obj(self) -> Task:
        return Task.model_validate(copy.deepcopy(self._obj))

    def raw(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)


def make_task(name: str = "t", namespace: str = "ns") -> TaskBuilder:
    return TaskBuilder(name, namespace)


def with_status(task: Task, status: TaskStatus | None) -> Task:
    """`task` as the API server would return it after `status` was written."""
    return task.model_copy(update={"status": status})


class JobBuilder:
    """What the kube layer reports of one attempt's Job (and its pod)."""

    def __init__(self, task: str, number: int, epoch: int = 1) -> None:
        """The Job of attempt `number` recorded by the leader of `epoch` (its lease id label)."""
        self._job = AttemptJob(number=number, name=job_name(task, number), uid=f"job-uid-{task}-{number}",
                               lease_id=lease_id(epoch, number), created_at=T0,
                               ttl_after_finished=ttl_seconds(DEFAULT_JOB_RETENTION))

    def named(self, name: str) -> JobBuilder:
        self._job = replace(self._job, name=name)
        return self

    def created(self, when: datetime) -> JobBuilder:
        self._job = replace(self._job, created_at=when)
        return self

    def running(self, since: datetime, *, seen: datetime | None = None) -> JobBuilder:
        """The kubelet reports the container running `since` (whole seconds in reality); the
        operator saw it running at `seen` (default: not yet)."""
        self._job = replace(self._job, pod_phase="Running", started_at=since, running_seen_at=seen)
        return self

    def pending(self) -> JobBuilder:
        self._job = replace(self._job, pod_phase="Pending", started_at=None)
        return self

    def waiting(self, reason: str, message: str = "") -> JobBuilder:
        """Pending, the kubelet (or the scheduler) holding the pod back with `reason`."""
        self._job = replace(self._job, pod_phase="Pending", started_at=None, waiting_reason=reason,
                            waiting_message=message)
        return self

    def exited(self, code: int, message: str | None = None, *, reason: str | None = None,
               started: datetime | None = None, finished: datetime | None = None) -> AttemptJob:
        """The task container terminated (and the Job controller noticed)."""
        end = Termination(exit_code=code, reason=reason or ("Completed" if code == 0 else "Error"), message=message,
                          started_at=started, finished_at=finished)
        return replace(self._job, termination=end, started_at=started,
                       pod_phase="Succeeded" if code == 0 else "Failed",
                       finished="Complete" if code == 0 else "Failed")

    def with_(self, **facts: Any) -> AttemptJob:
        return replace(self._job, **facts)

    def obj(self) -> AttemptJob:
        return self._job


def attempt_job(task: str, number: int, epoch: int = 1) -> JobBuilder:
    return JobBuilder(task, number, epoch)


def observe(*jobs: AttemptJob, now: datetime = T0, epoch: int = 1, admit: bool = False, **more: Any) -> Observation:
    return Observation(jobs=tuple(jobs), now=now, epoch=epoch, admit=admit, **more)


def settings(task: Task, pool: TaskPoolSpec | dict[str, Any] | None = None) -> Effective:
    if isinstance(pool, dict):
        pool = TaskPoolSpec.model_validate(pool)
    return Effective.of(task, pool)
