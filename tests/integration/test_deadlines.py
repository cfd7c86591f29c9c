"""A task's own time limits end to end (issue 39.4): startDeadline ends a task that could not
start in time without creating a Job; deadline aborts the running attempt (its pod deleted, as a
watch of the test's own sees) and fails the task, so a Success dependent is skipped and a Failure
dependent runs; and a deadline that passes while no operator runs ends the task when one starts.
Times are read from what the cluster stored (creationTimestamp, finishedAt), never from sleeps."""
from __future__ import annotations

import signal
from datetime import datetime, timedelta, timezone

import pytest

from tests.support.podwatch import PodWatch
from tests.support.waiting import wait_until
from tests.support.workers import Workers, served_task, wait_worker


def ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def finished_reason(status: dict) -> str:
    return next(c["reason"] for c in status["conditions"] if c["type"] == "Finished")


def test_a_task_that_cannot_start_in_time_ends_at_its_start_deadline_without_a_job(cq):
    cq.pool(concurrency=1, leaseTTL="0s")
    before = cq.operator.metric("cronoq_deadlines_total", namespace=cq.namespace, pool="default", kind="start")
    cq.task("hog", outcome="Run")                    # holds the pool's one slot
    cq.wait_phase("hog", "Running")
    late = cq.task("late", startDeadline="3s", delay="100ms")
    queued = cq.wait_phase("late", "Queued")
    assert queued["attempt"] == 0

    status = cq.wait_phase("late", "Failed", timeout=30)

    assert finished_reason(status) == "StartDeadlineExceeded", status
    assert status["attempt"] == 0 and not status.get("attempts")
    assert "startDeadline of 3s" in status["message"]
    created = ts(late["metadata"]["creationTimestamp"])
    assert ts(status["finishedAt"]) >= created + timedelta(seconds=3), "not before its start deadline"
    late = ts(status["finishedAt"]) - ts(status["submittedAt"]) - timedelta(seconds=3)
    print(f"startDeadline 3s: ended {late.total_seconds() * 1000:.0f} ms after submittedAt + 3s")
    assert cq.jobs("late") == [], "it never ran"
    assert cq.status("hog")["phase"] == "Running"
    wait_until(lambda: cq.operator.metric("cronoq_deadlines_total", namespace=cq.namespace, pool="default",
                                          kind="start") == before + 1, timeout=10, what="the deadline counted")


def test_the_deadline_aborts_the_running_attempt_and_a_success_dependent_is_not_run(cq, api):
    cq.pool(leaseTTL="0s")
    with PodWatch(api, cq.namespace) as pods:
        long = cq.task("long", outcome="Run", deadline="4s", retry={"maxAttempts": 3})
        cq.task("after", dependsOn=[{"task": "long", "on": "Success"}], delay="100ms")
        cq.task("cleanup", dependsOn=[{"task": "long", "on": "Failure"}], delay="100ms", message="cleaned")
        wait_until(lambda: pods.pods.get("long-a1") and pods.pods["long-a1"].running, timeout=30,
                   what="the long task's container running")

        status = cq.wait_phase("long", "Failed", timeout=30)
        wait_until(lambda: pods.pods["long-a1"].deleting is not None, timeout=30,
                   what="the attempt's pod deleted (seen by the test's watch)")

    assert finished_reason(status) == "DeadlineExceeded", status
    assert status["attempt"] == 1, "no retry after the deadline"
    (attempt,) = status["attempts"]
    assert (attempt["outcome"], attempt["reason"]) == ("Retryable", "DeadlineExceeded")
    assert "attempt 1 was aborted" in status["message"]
    assert ts(status["finishedAt"]) >= ts(long["metadata"]["creationTimestamp"]) + timedelta(seconds=4)
    late = ts(status["finishedAt"]) - ts(status["submittedAt"]) - timedelta(seconds=4)
    print(f"deadline 4s: attempt aborted {late.total_seconds() * 1000:.0f} ms after submittedAt + 4s")
    assert cq.wait_phase("after", "Skipped")["attempt"] == 0
    assert cq.jobs("after") == []
    assert cq.wait_phase("cleanup", "Succeeded")["output"] == "cleaned"


def test_a_deadline_that_passes_while_the_operator_is_down_ends_the_task_when_it_is_back(own, api):
    own.pool(leaseTTL="0s")
    own.operator.start()
    with PodWatch(api, own.namespace) as pods:
        task = own.task("orphan", outcome="Run", deadline="5s")
        own.wait_phase("orphan", "Running")
        wait_until(lambda: pods.pods.get("orphan-a1") and pods.pods["orphan-a1"].running, timeout=30,
                   what="its container running")
        own.operator.kill(signal.SIGKILL)
        deadline = ts(task["metadata"]["creationTimestamp"]) + timedelta(seconds=5)
        wait_until(lambda: datetime.now(timezone.utc) > deadline + timedelta(seconds=1), timeout=30,
                   what="the deadline passed with no operator running")
        assert own.status("orphan")["phase"] == "Running", "nothing ended it while no operator ran"

        own.operator.start()
        status = own.wait_phase("orphan", "Failed", timeout=60)
        wait_until(lambda: pods.pods["orphan-a1"].deleting is not None, timeout=30, what="its pod deleted")

    assert finished_reason(status) == "DeadlineExceeded"
    assert status["attempts"][0]["reason"] == "DeadlineExceeded"
    assert [j.metadata.name for j in own.jobs("orphan")] in ([], ["orphan-a1"])  # deleted, or going


@pytest.fixture
def workers(cq, kubeconfig, tmp_path):
    w = Workers(cq.namespace, kubeconfig, tmp_path)
    yield w
    w.stop()


def test_the_deadline_aborts_a_pull_workers_handler(cq, api, workers):
    cq.pool(delivery="Workers", leaseTTL="3s", retry={"maxAttempts": 3, "initialBackoff": "0s"})
    workers.start("w-late")
    wait_worker(api, cq.namespace, "w-late")
    task = served_task(cq, "slow", {"sleep": 30}, labels={"cronoq.io/handler": "async"}, deadline="3s")

    status = cq.wait_phase("slow", "Failed", timeout=30)

    assert finished_reason(status) == "DeadlineExceeded" and status["attempt"] == 1
    assert ts(status["finishedAt"]) >= ts(task["metadata"]["creationTimestamp"]) + timedelta(seconds=3)
    wait_until(lambda: any(line["event"] == "end" and line["task"] == "slow" for line in workers.lines()),
               timeout=30, what="the handler ended")
    (end,) = [line for line in workers.lines() if line["event"] == "end" and line["task"] == "slow"]
    assert end["how"] == "cancelled", end


def test_describe_shows_the_limits_as_times_the_pools_default_included(cq, kubeconfig):
    from cronoq.client import Client
    from tests.integration.test_cli import Cli

    cq.pool(concurrency=0, startDeadline="1h")       # nothing starts: the task waits with its limits
    cli = Cli(cq.namespace, kubeconfig)
    cli.ok("submit", "report", "--image", "example.invalid/task:1", "--deadline", "2h", "--max-retry-duration", "30m")
    client = Client(namespace=cq.namespace, kubeconfig=kubeconfig)
    other = client.submit("other", image="example.invalid/task:1", start_deadline=timedelta(minutes=1, seconds=30),
                          deadline="3h")
    assert (other.spec.start_deadline, other.spec.deadline) == (timedelta(seconds=90), timedelta(hours=3))
    cq.wait_phase("report", "Queued")

    described = cli.ok("describe", "report").stdout
    created = ts(cq.get("report")["metadata"]["creationTimestamp"])
    assert f"start by {created + timedelta(hours=1):%H:%M:%SZ} (startDeadline 1h)" in described, described
    assert f"deadline {created + timedelta(hours=2):%H:%M:%SZ} (2h from submission)" in described, described
    assert cq.get("report")["spec"]["retry"] == {"maxRetryDuration": "30m"}
