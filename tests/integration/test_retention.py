"""Lifetime of finished work (DESIGN §10, issue 11) on the real cluster: finished Tasks deleted
`ttlAfterFinished` after finishing (their Jobs, pods and Leases with them, by the garbage
collector), keyed tasks kept through their key's retention, attempt Jobs removed by the Job TTL
controller after `jobRetention`, and an outcome lost while the operator was away retried."""
from __future__ import annotations

import signal
import time
from datetime import datetime

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.tasks import Cronoq
from tests.support.waiting import wait_until


def ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def exists(cq: Cronoq, name: str) -> bool:
    try:
        cq.get(name)
        return True
    except ApiException as err:
        if err.status == 404:
            return False
        raise


def owned(cq: Cronoq, task: str) -> dict[str, list[str]]:
    """What is left of the task's attempts: Jobs, pods and heartbeat Leases, by kind."""
    selector = f"cronoq.io/task={task}"
    leases = client.CoordinationV1Api(cq.api).list_namespaced_lease(cq.namespace, label_selector=selector).items
    return {"jobs": [j.metadata.name for j in cq.jobs(task)],
            "pods": [p.metadata.name for p in cq.core.list_namespaced_pod(cq.namespace, label_selector=selector).items],
            "leases": [lease.metadata.name for lease in leases]}


def test_a_finished_task_is_deleted_ttl_after_finishing_with_its_job_pod_and_lease(cq, kubeconfig):
    from cronoq.worker.lease import KubeLease, Owner

    cq.pool(leaseTTL="30s")
    task = cq.task("short", ttlAfterFinished="10s", message="done", delay="100ms")
    wait_until(lambda: cq.status("short").get("attempts"), timeout=30, what="attempt 1 recorded")
    lease_id = cq.status("short")["attempts"][0]["leaseId"]
    # The attempt's Lease, created as the SDK creates it at its first renewal (kwok pods run no SDK).
    lease = KubeLease(cq.namespace, "short-a1", lease_id, kubeconfig=kubeconfig,
                      owner=Owner("short", task["metadata"]["uid"], 1), ttl=30)
    assert lease.renew(5.0).renewed
    status = cq.wait_phase("short", "Succeeded")
    assert all(owned(cq, "short").values()), owned(cq, "short")  # a Job, a pod and a Lease to clean up

    wait_until(lambda: not exists(cq, "short"), timeout=30, what="the task deleted after its TTL")
    gone_at = time.time()
    finished = ts(status["finishedAt"]).timestamp()
    # Not before its TTL (the operator's clock is this machine's), and soon after it.
    assert gone_at - finished >= 10.0
    assert gone_at - finished < 18.0, gone_at - finished
    wait_until(lambda: not any(owned(cq, "short").values()), timeout=60,
               what="its Job, pod and Lease removed by the garbage collector")
    assert cq.operator.metric("cronoq_tasks_deleted_total") >= 1


def test_a_keyed_task_outlives_its_ttl_until_its_key_retention_ends(cq):
    cq.pool(keyRetention="8s")
    cq.task("original", key="k", ttlAfterFinished="0s", message="first", delay="100ms")
    status = cq.wait_phase("original", "Succeeded")
    finished = ts(status["finishedAt"]).timestamp()

    # Within the key's retention the original is kept (TTL 0s notwithstanding) and deduplicates.
    cq.task("again", key="k", message="second")
    dup = cq.wait_phase("again", "Succeeded")
    assert dup["duplicateOf"] == "original" and dup["output"] == "first" and dup["attempt"] == 0
    assert exists(cq, "original") or time.time() - finished >= 8.0

    wait_until(lambda: not exists(cq, "original"), timeout=40, what="the original deleted once its key retention ended")
    assert time.time() - finished >= 8.0
    cq.task("later", key="k", message="third", delay="100ms")
    fresh = cq.wait_phase("later", "Succeeded")
    assert fresh.get("duplicateOf") is None and fresh["attempt"] == 1 and fresh["output"] == "third"


def test_changing_the_pools_ttl_applies_to_tasks_that_already_finished(cq):
    cq.pool()
    cq.task("kept", message="done", delay="100ms")
    cq.wait_phase("kept", "Succeeded")
    cq.task("probe", message="done", delay="100ms")
    cq.wait_phase("probe", "Succeeded")  # the operator has long reconciled `kept` as finished
    assert exists(cq, "kept")

    cq.custom.patch_namespaced_custom_object("cronoq.io", "v1alpha1", cq.namespace, "taskpools", "default",
                                             {"spec": {"ttlAfterFinished": "1s"}})
    wait_until(lambda: not exists(cq, "kept") and not exists(cq, "probe"), timeout=30,
               what="both finished tasks deleted under the pool's new TTL")


def test_job_retention_removes_the_jobs_while_the_task_keeps_its_outcome(cq):
    cq.pool(jobRetention="1s", leaseTTL="0s")
    cq.task("logs", outcome_a1="Fail", exit_code_a1=1, message="ok", delay="100ms",
            retry={"initialBackoff": "1s", "jitter": "none"})
    cq.wait_phase("logs", "Succeeded")
    (job,) = [j for j in cq.jobs("logs") if j.metadata.name == "logs-a2"] or [None]
    assert job is None or job.spec.ttl_seconds_after_finished == 1

    wait_until(lambda: not cq.jobs("logs"), timeout=60, what="both attempts' Jobs removed by the TTL controller")
    status = cq.status("logs")
    assert status["phase"] == "Succeeded" and status["output"] == "ok"
    assert [(a["number"], a["outcome"]) for a in status["attempts"]] == [(1, "Retryable"), (2, "Success")]
    # A barrier: once a later task has run, the operator has seen the deletions; they changed nothing.
    cq.task("barrier", message="ok", delay="100ms")
    cq.wait_phase("barrier", "Succeeded")
    assert cq.status("logs")["attempt"] == 2
    assert "StaleCompletion" not in cq.reasons("logs")


def test_an_outcome_lost_while_the_operator_was_down_past_job_retention_is_retried(own):
    """At least once: attempt 1 ends and its Job is cleaned up while no operator watches, so its
    outcome is never read; the restarted operator counts it as a retryable JobDeleted."""
    own.pool(jobRetention="1s", leaseTTL="0s")
    own.operator.start()
    own.task("lost", outcome_a1="Succeed", delay_a1="3s", message="done", delay="100ms",
             retry={"initialBackoff": "1s", "jitter": "none"})
    wait_until(lambda: own.jobs("lost"), timeout=30, what="attempt 1's Job")
    own.operator.kill(signal.SIGKILL)
    wait_until(lambda: not own.jobs("lost"), timeout=60, what="Job 1 finished and removed by its TTL")

    own.operator.start()
    status = own.wait_phase("lost", "Succeeded")
    first, second = status["attempts"]
    assert (first["outcome"], first["reason"]) == ("Retryable", "JobDeleted"), first
    assert "jobRetention" in first["message"]
    assert (second["number"], second["outcome"], status["output"]) == (2, "Success", "done")
