"""Delayed start (issue 39, point 3) on the real cluster: a task with `notBefore` a few seconds
ahead waits Blocked, saying until when, with no Job before its time (seen by the test's own
watch), and its Job is created at its time; through an operator restart and a failover too.

Lateness (the test's watch seeing the Job minus notBefore) is printed, not asserted tight: the
test asserts only that no Job came before the time. The operator and the test share this
machine's clock."""
from __future__ import annotations

import json
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import pytest
from kubernetes import client, watch

from tests.support.tasks import Cronoq

pytestmark = pytest.mark.cluster


@dataclass
class JobWatch:
    """Each Job of the namespace by the wall-clock time the test's watch first saw it."""

    api: client.ApiClient
    namespace: str
    seen: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> JobWatch:
        batch = client.BatchV1Api(self.api)
        listed = batch.list_namespaced_job(self.namespace)
        for job in listed.items:
            self.seen.setdefault(job.metadata.name, time.time())
        version = listed.metadata.resource_version

        def run() -> None:
            nonlocal version
            while not self._stop.is_set():
                try:
                    for event in watch.Watch().stream(batch.list_namespaced_job, self.namespace, timeout_seconds=2,
                                                      resource_version=version):
                        self.seen.setdefault(event["object"].metadata.name, time.time())
                        version = event["object"].metadata.resource_version
                        if self._stop.is_set():
                            break
                except Exception:  # noqa: BLE001 - an operator restart does not touch the API server; a 410 does
                    time.sleep(0.2)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    def wait(self, name: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while name not in self.seen:
            assert time.monotonic() < deadline, f"no Job {name} within {timeout}s"
            time.sleep(0.02)
        return self.seen[name]

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def ahead(seconds: float) -> datetime:
    return (datetime.now(timezone.utc) + timedelta(seconds=seconds)).replace(microsecond=0) + timedelta(seconds=1)


def spelled(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def blocked_until(cq: Cronoq, name: str, at: datetime) -> dict:
    status = cq.wait_phase(name, "Blocked", timeout=30)
    assert status["message"] == f"not before {spelled(at)} (spec.notBefore)", status
    running = next(c for c in status["conditions"] if c["type"] == "Running")
    assert running["reason"] == "WaitingForStartTime"
    return status


def started_on_time(jobs: JobWatch, job: str, at: datetime, what: str, timeout: float = 60) -> float:
    seen = jobs.wait(job, timeout)
    late = seen - at.timestamp()
    print(f"\n{what}: Job {job} seen {late * 1000:+.0f} ms after notBefore")
    assert late >= 0, f"{job} was created {-late:.3f}s before its notBefore"
    return late


@pytest.mark.parametrize("kind", ["container", "push"])
def test_a_delayed_task_waits_without_a_job_and_starts_at_its_time(cq, api, kind):
    cq.pool(concurrency=2)
    at = ahead(3)
    with JobWatch(api, cq.namespace) as jobs:
        if kind == "push":  # no image: the push runner's Job (kwok plays its pod)
            cq.custom.create_namespaced_custom_object("cronoq.io", "v1alpha1", cq.namespace, "tasks", {
                "apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": "d"},
                "spec": {"notBefore": spelled(at), "http": {"url": "https://hooks.example.com/orders"}}})
        else:
            cq.task("d", notBefore=spelled(at), delay="100ms")
        blocked_until(cq, "d", at)
        assert "d-a1" not in jobs.seen and not cq.jobs("d"), "no Job before its time"
        started_on_time(jobs, "d-a1", at, f"{kind} task")
    status = cq.status("d")
    assert status["attempt"] == 1 and status["attempts"][0]["number"] == 1


def test_a_pull_worker_is_handed_a_delayed_task_only_at_its_time(cq, api, kubeconfig, tmp_path):
    from tests.support.workers import Workers, served_task, wait_worker

    cq.pool(delivery="Workers", leaseTTL="3s")
    workers = Workers(cq.namespace, kubeconfig, tmp_path)
    try:
        workers.start("w-one", concurrency=2)
        wait_worker(api, cq.namespace, "w-one")
        at = ahead(3)
        served_task(cq, "d", {"echo": 1}, notBefore=spelled(at))
        blocked_until(cq, "d", at)
        status = cq.wait_phase("d", "Succeeded", timeout=60)
    finally:
        workers.stop()
    (start,) = [line["t"] for line in workers.lines() if line["event"] == "start"]
    late = start - at.timestamp()
    print(f"\npull worker: handler started {late * 1000:+.0f} ms after notBefore")
    assert late >= 0, f"the worker started it {-late:.3f}s before its notBefore"
    assert status["attempts"][0]["worker"] == "w-one"


def test_an_operator_restart_while_waiting_still_starts_it_at_its_time(own, api):
    own.operator.start()
    own.pool(concurrency=1)
    at = ahead(20)  # room for the restart on a loaded machine, so the lateness is the timer's, not the start's
    with JobWatch(api, own.namespace) as jobs:
        own.task("d", notBefore=spelled(at), delay="100ms")
        blocked_until(own, "d", at)
        own.operator.stop()  # as a rollout does (SIGTERM: its leader Lease released; a crash is the failover test's)
        own.operator.start()  # a fresh process: it reads the time from the spec
        own.operator.wait_leading()
        print(f"\nthe restarted operator led {at.timestamp() - time.time():.1f}s before the task's time")
        assert "d-a1" not in jobs.seen
        started_on_time(jobs, "d-a1", at, "after a restart")
    own.wait_phase("d", "Succeeded")


def test_a_failover_while_waiting_still_starts_it_at_its_time(pair, api):
    cq, a, b = pair
    cq.pool(concurrency=1)
    at = ahead(35)  # past the standby's takeover (a 15 s lease)
    with JobWatch(api, cq.namespace) as jobs:
        cq.task("d", notBefore=spelled(at), delay="100ms")
        blocked_until(cq, "d", at)
        a.kill(signal.SIGKILL)
        b.wait_leading(timeout=40)
        print(f"\nthe standby led {at.timestamp() - time.time():.1f}s before the task's time")
        started_on_time(jobs, "d-a1", at, "after a failover")
    status = cq.wait_phase("d", "Succeeded")
    assert status["epoch"] >= 2, "started by the new leader"


def _task(**spec) -> dict:
    return {"apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": "t"},
            "spec": {"image": "busybox:1.36", **spec}}


@pytest.mark.parametrize("spec, words", [
    ({"notBefore": "tomorrow"}, ["spec.notBefore", "date-time"]),
    ({"startDelay": "10 minutes"}, ["spec.startDelay", "should match"]),
    ({"startDelay": "1d"}, ["spec.startDelay", "should match"]),
    ({"startDelay": "721h"}, ["spec.startDelay", "between 0s and 720h"]),
    ({"startDelay": "10m", "notBefore": "2026-12-06T14:00:00Z"},
     ["spec.startDelay", "spec.notBefore and spec.startDelay: give one or the other, not both"]),
], ids=["notBefore not a time", "startDelay in words", "startDelay in days", "startDelay over 30 days", "both"])
def test_a_bad_start_time_is_refused_naming_the_field(kubectl, namespace, spec, words):
    result = kubectl("create", "-f", "-", input=json.dumps(_task(**spec)), check=False, namespace=namespace)
    assert result.returncode != 0, f"accepted, but should have been refused: {result.stdout}"
    for word in words:
        assert word in result.stderr, f"{word!r} not in the error:\n{result.stderr}"


def test_a_start_time_is_fixed_once_the_task_exists_and_a_schedule_may_carry_it(kubectl, namespace):
    created = kubectl("create", "-f", "-", input=json.dumps(_task(startDelay="1h")), check=False, namespace=namespace)
    assert created.returncode == 0, created.stderr
    changed = kubectl("patch", "task", "t", "--type=merge", "-p", json.dumps({"spec": {"startDelay": "1s"}}),
                      check=False, namespace=namespace)
    assert changed.returncode != 0 and "spec.startDelay" in changed.stderr, changed.stderr
    schedule = {"apiVersion": "cronoq.io/v1alpha1", "kind": "TaskSchedule", "metadata": {"name": "s"},
                "spec": {"every": "1h", "taskTemplate": {"spec": {"image": "busybox:1.36", "startDelay": "5m"}}}}
    accepted = kubectl("create", "-f", "-", "-o", "json", input=json.dumps(schedule), check=False, namespace=namespace)
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(accepted.stdout)["spec"]["taskTemplate"]["spec"]["startDelay"] == "5m"


def test_cronoq_submit_delay_and_describe_say_not_before(cq, kubeconfig):
    """`cronoq submit --delay` as a user runs it (a subprocess), then `describe` says until when."""
    import os
    import subprocess
    import sys

    cq.pool()

    def cronoq(*args: str) -> str:
        result = subprocess.run([sys.executable, "-m", "cronoq", *args, "-n", cq.namespace, "--kubeconfig", kubeconfig],
                                capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
        assert result.returncode == 0, result.stderr
        return result.stdout

    cronoq("submit", "later", "--image", "example.invalid/task:1", "--delay", "1h")
    task = cq.get("later")
    assert task["spec"]["startDelay"] == "1h"
    start = datetime.fromisoformat(task["metadata"]["creationTimestamp"].replace("Z", "+00:00")) + timedelta(hours=1)
    cq.wait_status("later", lambda s: s.get("phase") == "Blocked", "Blocked")
    described = cronoq("describe", "later")
    assert re.search(rf"Not before: +{spelled(start)} \(in (59|60)m\)", described), described
    assert f"not before {spelled(start)} (spec.startDelay 1h after its creation)" in described
    assert not cq.jobs("later")
