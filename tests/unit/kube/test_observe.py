"""kube/observe against objects recorded from the test cluster (`tests/unit/data/recorded-*.json`,
managedFields removed): a Job and pod of an attempt that exited 3 with a message, and of one still
running. What the engine later decides depends only on these facts, so they are pinned here."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from cronoq.api import RetryPolicy
from cronoq.engine.outcome import classify
from cronoq.controller.store import with_pod as combine
from cronoq.kube.observe import job_facts, pod_facts

DATA = Path(__file__).parents[1] / "data"


def recorded(kind: str, name: str) -> dict:
    return json.loads((DATA / f"recorded-{kind}-{name}.json").read_text())


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


def test_a_failed_attempts_job_and_pod() -> None:
    job = job_facts(recorded("job", "rec-failed-a1"))
    pod = pod_facts(recorded("pod", "rec-failed-a1"))
    assert job is not None and pod is not None
    assert (job.number, job.name, job.lease_id) == (1, "rec-failed-a1", "e1-a1")
    assert job.uid == recorded("job", "rec-failed-a1")["metadata"]["uid"]
    assert (job.finished, job.failure_reason) == ("Failed", "BackoffLimitExceeded")
    assert job.ttl_after_finished == 3600  # its jobRetention, which a changed one is compared with
    assert pod.job == "rec-failed-a1" and pod.phase == "Failed" and not pod.deleting
    end = pod.termination
    assert end is not None
    assert (end.exit_code, end.reason, end.message) == (3, "Error", '{"error": "no such order"}')
    assert (end.started_at, end.finished_at) == (utc("2026-12-03T04:55:55"), utc("2026-12-03T04:55:56"))

    seen = combine(job, pod)
    assert seen.termination == end and seen.pod_phase == "Failed"
    verdict = classify(seen, RetryPolicy())
    assert verdict is not None and verdict.outcome.value == "Retryable", verdict
    assert "exited with code 3" in verdict.message and "no such order" in verdict.message


def test_a_running_attempts_job_and_pod() -> None:
    job = job_facts(recorded("job", "rec-running-a1"))
    pod = pod_facts(recorded("pod", "rec-running-a1"))
    assert job is not None and pod is not None
    assert job.finished is None and not job.deleting
    assert pod.phase == "Running" and pod.termination is None
    assert pod.started_at == utc("2026-12-03T04:55:55")
    assert classify(combine(job, pod), RetryPolicy()) is None  # still running: no verdict


def test_objects_without_cronoqs_labels_are_not_attempts() -> None:
    job, pod = recorded("job", "rec-failed-a1"), recorded("pod", "rec-failed-a1")
    for obj in (job, pod):
        del obj["metadata"]["labels"]["cronoq.io/attempt"]
    assert job_facts(job) is None and pod_facts(pod) is None


def test_a_job_without_a_ttl_says_so() -> None:
    job = recorded("job", "rec-running-a1")
    del job["spec"]["ttlSecondsAfterFinished"]
    facts = job_facts(job)
    assert facts is not None and facts.ttl_after_finished is None


def test_a_deleting_pod_and_job_say_so() -> None:
    job, pod = recorded("job", "rec-running-a1"), recorded("pod", "rec-running-a1")
    for obj in (job, pod):
        obj["metadata"]["deletionTimestamp"] = "2026-12-03T04:56:00Z"
    facts = job_facts(job)
    assert facts is not None and facts.deleting
    seen = pod_facts(pod)
    assert seen is not None and seen.deleting


def _pending_pod(**status) -> dict:
    return {"metadata": {"name": "t-a1-xyz", "labels": {"batch.kubernetes.io/job-name": "t-a1", "cronoq.io/attempt": "1"}},
            "status": {"phase": "Pending", **status}}


def test_a_pod_held_back_by_the_kubelet_says_why() -> None:
    pull = {"name": "task", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image " + "x" * 900}}}
    facts = pod_facts(_pending_pod(containerStatuses=[pull]))
    assert facts.waiting[0] == "ImagePullBackOff"
    assert len(facts.waiting[1]) == 512, "cut: kept in memory per pod"
    job = combine(job_facts({"metadata": {"name": "t-a1", "labels": {"cronoq.io/attempt": "1"}}}), facts)
    assert (job.waiting_reason, job.started_at) == ("ImagePullBackOff", None)


def test_the_sidecar_is_looked_at_first_and_normal_starts_are_not_reasons() -> None:
    sidecar = {"name": "heartbeat", "state": {"waiting": {"reason": "ErrImagePull", "message": "no such image"}}}
    main = {"name": "task", "state": {"waiting": {"reason": "PodInitializing"}}}
    assert pod_facts(_pending_pod(initContainerStatuses=[sidecar], containerStatuses=[main])).waiting == ("ErrImagePull", "no such image")
    creating = {"name": "task", "state": {"waiting": {"reason": "ContainerCreating"}}}
    assert pod_facts(_pending_pod(containerStatuses=[creating])).waiting is None


def test_an_unschedulable_pod_says_what_the_scheduler_said() -> None:
    conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                   "message": "0/3 nodes are available: 3 Insufficient memory."}]
    assert pod_facts(_pending_pod(conditions=conditions)).waiting == (
        "Unschedulable", "0/3 nodes are available: 3 Insufficient memory.")
