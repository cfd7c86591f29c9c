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

from tests.integration.test_cli import Cli
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


def test_a_success_is_deleted_while_a_dead_letter_of_the_same_pool_is_kept(cq, kubeconfig):
    """Issue 40: retention by outcome. The dead letter finishes first, so under one TTL it would go
    first; the success goes (its Job first, re-timed to its outcome's jobRetention) and the dead
    letter stays with its Job, kept for the failure's retention."""
    cq.pool(ttlAfterFinished="2s", ttlAfterFailure="1h", jobRetentionAfterSuccess="0s",
            jobRetentionAfterFailure="1h", leaseTTL="0s")
    cq.task("dead", outcome="Fail", exit_code=1, delay="100ms", retry={"maxAttempts": 1})
    dead = cq.wait_phase("dead", "DeadLettered")
    cq.task("ok", message="done", delay="100ms")
    cq.wait_phase("ok", "Succeeded")

    wait_until(lambda: not exists(cq, "ok"), timeout=30, what="the success deleted after ttlAfterFinished")
    assert time.time() - ts(dead["finishedAt"]).timestamp() > 2.0  # the dead letter was due first under one TTL
    assert cq.status("dead")["phase"] == "DeadLettered"
    assert [j.spec.ttl_seconds_after_finished for j in cq.jobs("dead")] == [3600]
    cli = Cli(cq.namespace, kubeconfig)
    assert "(failure: task 1h, Jobs 1h)" in cli.ok("describe", "dead").stdout
    assert "tasks 2s after success, 1h after failure; Jobs 0s after success, 1h after failure" in \
        cli.ok("pool", "status", "default").stdout


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


def finished_job(cq: Cronoq, task: str) -> client.V1Job | None:
    """The task's one Job, once the Job controller has marked it finished (its TTL counts from then)."""
    jobs = cq.jobs(task)
    if len(jobs) == 1 and any(c.type in ("Complete", "Failed") and c.status == "True"
                              for c in jobs[0].status.conditions or ()):
        return jobs[0]
    return None


def test_lowering_the_pools_job_retention_removes_the_jobs_already_there(cq):
    """Issue 27: a pool's jobRetention lowered (etcd filling up) applies to the Jobs and pods
    already kept, not only to Jobs created afterwards; a task's own jobRetention still wins."""
    cq.pool(jobRetention="1h", leaseTTL="0s")
    cq.task("old", message="done", delay="100ms")
    cq.task("own", jobRetention="2h", message="done", delay="100ms")
    cq.wait_phase("old", "Succeeded")
    cq.wait_phase("own", "Succeeded")
    job = wait_until(lambda: finished_job(cq, "old"), timeout=30, what="old's Job finished")
    assert job.spec.ttl_seconds_after_finished == 3600
    assert all(owned(cq, "old")[kind] for kind in ("jobs", "pods")), owned(cq, "old")  # kept for the hour
    wait_until(lambda: finished_job(cq, "own"), timeout=30, what="own's Job finished")

    cq.custom.patch_namespaced_custom_object("cronoq.io", "v1alpha1", cq.namespace, "taskpools", "default",
                                             {"spec": {"jobRetention": "0s"}})
    patched = time.monotonic()
    wait_until(lambda: not any(owned(cq, "old")[kind] for kind in ("jobs", "pods")), timeout=30,
               what="old's Job and pod deleted by the TTL controller under the pool's new jobRetention")
    print(f"jobRetention 0s: the Job deleted {time.monotonic() - patched:.1f}s after the patch")  # bench's, not ours

    # A barrier: a task run since has been reconciled after the pool change, so `own` was too.
    cq.task("barrier", message="ok", delay="100ms")
    cq.wait_phase("barrier", "Succeeded")
    (kept,) = cq.jobs("own")
    assert kept.spec.ttl_seconds_after_finished == 7200  # the task's own value wins over the pool's
    assert owned(cq, "own")["pods"]
    status = cq.status("old")
    assert status["phase"] == "Succeeded" and status["output"] == "done"  # the outcome stays
    assert "StaleCompletion" not in cq.reasons("old")


def test_raising_the_pools_job_retention_keeps_the_jobs_already_there_longer(cq):
    cq.pool(jobRetention="6s", leaseTTL="0s")
    cq.task("logs", message="done", delay="100ms")
    cq.wait_phase("logs", "Succeeded")
    job = wait_until(lambda: finished_job(cq, "logs"), timeout=30, what="the Job finished")
    assert job.spec.ttl_seconds_after_finished == 6
    cq.custom.patch_namespaced_custom_object("cronoq.io", "v1alpha1", cq.namespace, "taskpools", "default",
                                             {"spec": {"jobRetention": "1h"}})
    wait_until(lambda: [j for j in cq.jobs("logs") if j.spec.ttl_seconds_after_finished == 3600], timeout=5,
               what="the Job's TTL raised to the pool's new jobRetention")
    finished_at = max(c.last_transition_time for c in job.status.conditions if c.status == "True").timestamp()
    wait_until(lambda: time.time() > finished_at + 10, timeout=20, what="the old jobRetention long past")
    assert cq.jobs("logs") and owned(cq, "logs")["pods"]  # still there to read its logs
