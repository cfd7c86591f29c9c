"""A pool that hands admission to a real Kueue (issue 51, items 1 to 3): Kueue v0.17's controller
manager (tests/support/kueue.py) against the test cluster beside the session operator, kwok
playing the pods. No mock of Kueue: its quota holds a Job back and its preemption evicts one.

What is shown: an attempt is recorded before its Job exists and the Job waits suspended while
Kueue's quota is taken (a second task's attempt starts only after the first ends); a preemption by
a higher WorkloadPriorityClass ends the running attempt with reason Preempted, uses up no attempt,
and the next attempt is a new Job with a new number while the preempted Job never runs again; a
task cancelled while Kueue holds its Job leaves neither Job nor Workload behind; a task Kueue's
quota holds says so in Kueue's words (its LocalQueue, ClusterQueue and Kueue's reason) in its
status and in `cronoq describe`, and the time Kueue held it is counted in
cronoq_kueue_wait_seconds while cronoq_dispatch_latency_seconds (the pool's own wait) does not move.
"""
from __future__ import annotations

import time

import pytest
from kubernetes import client

from tests.support.cluster import namespace_name
from tests.support.kueue import Kueue, install_crds, unique
from tests.support.waiting import wait_until

CPU = {"requests": {"cpu": "1"}}


@pytest.fixture(scope="module")
def kueue(api, kubeconfig, kubectl, crds, tmp_path_factory):
    """Kueue running for this module (its CRDs installed), stopped at the end by its pid."""
    install_crds(kubectl.binary, kubeconfig)
    started = Kueue(api, tmp_path_factory.mktemp("kueue")).start(kubeconfig)
    yield started
    started.stop()


@pytest.fixture(scope="module")
def kueue_operator(crds, kubeconfig, tmp_path_factory):
    """An operator of this module's own, on its own `kq-*` namespaces and Lease: the session's
    `t-*` operator may be another session's, started from other code, on a shared cluster.
    Supervised as the session's is: a term lost to a slow API server (exit 3) is restarted, not the
    end of every later test of the module."""
    from tests.support.operator import OperatorProcess

    proc = OperatorProcess(kubeconfig, ("kq-*",), tmp_path_factory.mktemp("kq-operator") / "operator.log",
                           supervised=True).start()
    yield proc
    proc.stop()


@pytest.fixture
def cq(request, api, kueue, kueue_operator):
    """Tasks and pools in a fresh `kq-` namespace of this test, deleted afterwards while Kueue runs."""
    from tests.support.tasks import Cronoq

    core = client.CoreV1Api(api)
    name = namespace_name(request.node.name, "kq")
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"cronoq.io/test": "true"})))
    wait_until(lambda: core.read_namespaced_service_account("default", name), timeout=30,
               what=f"default ServiceAccount in {name}")
    yield Cronoq(api, name, kueue_operator)
    core.delete_namespace(name, propagation_policy="Background")


def kueue_pool(cq, kueue, queue: str, **spec):
    return cq.pool("default", concurrency=5, leaseTTL="0s", retry={"initialBackoff": "0s", "jitter": "none"},
                   template={"resources": CPU}, admission={"kueue": {"localQueue": queue, **spec}})


def suspended(cq, task: str, n: int) -> bool:
    jobs = [j for j in cq.jobs(task) if j.metadata.labels.get("cronoq.io/attempt") == str(n)]
    return bool(jobs) and bool(jobs[0].spec.suspend)


def test_quota_holds_the_second_attempt_until_the_first_ends(cq, kueue):
    queue = unique("quota")
    kueue.queue(cq.namespace, queue, "1")
    kueue_pool(cq, kueue, queue)
    cq.task("first", delay="4s")
    first = cq.wait_phase("first", "Running")
    wait_until(lambda: not suspended(cq, "first", 1), timeout=60, what="Kueue admitting first's Job")
    cq.task("second", delay="100ms")

    # cronoq admits and records second's attempt 1 at once (its pool has room); its Job exists,
    # suspended, with the LocalQueue label, and stays so while first holds the quota.
    status = cq.wait_status("second", lambda s: s.get("attempt") == 1, "second's attempt 1 recorded")
    assert status["phase"] == "Running"
    (job,) = wait_until(lambda: cq.jobs("second"), timeout=30, what="second's Job")
    assert job.spec.suspend and job.metadata.labels["kueue.x-k8s.io/queue-name"] == queue, (
        job.metadata.labels, job.spec.template.spec.containers[0].resources, [
            (w["metadata"]["name"], (w.get("status") or {}).get("conditions")) for w in kueue.workloads(cq.namespace)])
    # Kueue frees first's quota only once its Job completed: so when second's Job is seen admitted,
    # first's Job (read after it) has completed.
    wait_until(lambda: not suspended(cq, "second", 1), timeout=90, what="Kueue admitting second's Job")
    (first_job,) = cq.jobs("first")
    assert any(c.type == "Complete" and c.status == "True" for c in first_job.status.conditions or []), \
        "Kueue let second run while first held the quota"

    done_first = cq.wait_phase("first", "Succeeded", timeout=60)
    done_second = cq.wait_phase("second", "Succeeded", timeout=60)
    (a,), (b,) = done_first["attempts"], done_second["attempts"]
    assert b["startedAt"] >= a["finishedAt"], (a, b)
    assert (a["number"], b["number"]) == (1, 1) and first["attempt"] == 1
    assert [w["metadata"]["name"] for w in kueue.workloads(cq.namespace)], "Kueue made Workloads for both"


def test_a_preemption_ends_the_attempt_preempted_and_the_next_is_a_new_job(cq, kueue, api):
    queue, low, high = unique("preempt"), unique("low"), unique("high")
    kueue.priority_class(low, 10)
    kueue.priority_class(high, 1000)
    kueue.queue(cq.namespace, queue, "1", preemption=True)
    kueue_pool(cq, kueue, queue, priorityClasses=[{"minPriority": 0, "workloadPriorityClass": low},
                                                  {"minPriority": 100, "workloadPriorityClass": high}])
    # maxAttempts 1: were the preemption to use up an attempt, the task would dead-letter.
    cq.task("victim", retry={"maxAttempts": 1}, outcome_a1="Run", delay="1s")
    wait_until(lambda: cq.jobs("victim") and not suspended(cq, "victim", 1), timeout=60,
               what="Kueue admitting victim's attempt 1")
    core = client.CoreV1Api(api)
    wait_until(lambda: any(p.status.phase == "Running" for p in core.list_namespaced_pod(
        cq.namespace, label_selector="cronoq.io/task=victim").items), timeout=60, what="victim's pod running")

    cq.task("urgent", priority=500, delay="3s")
    urgent = cq.wait_phase("urgent", "Succeeded", timeout=90)
    try:
        victim = cq.wait_phase("victim", "Succeeded", timeout=90)
    except AssertionError as err:
        raise AssertionError(f"{err}\nstatus: {cq.status('victim')}\njobs: {[(j.metadata.name, j.spec.suspend, j.status) for j in cq.jobs('victim')]}\nworkloads: {kueue.workloads(cq.namespace)}") from err

    first, second = victim["attempts"]
    assert (first["number"], first["outcome"], first["reason"], first.get("ignored")) == \
        (1, "Retryable", "Preempted", True), first
    assert "Kueue preempted" in first["message"], first["message"]
    assert (second["number"], second["outcome"], second["job"]) == (2, "Success", "victim-a2")
    assert victim["ignoredAttempts"] == 1
    assert urgent["attempts"][0]["startedAt"] <= second["startedAt"]
    # The preempted Job is deleted (Kueue would admit it again, and the Job controller, which does
    # not count a pod deleted by a suspension as failed, would run a second pod under attempt 1);
    # the Job controller created exactly one pod for it.
    wait_until(lambda: "victim-a1" not in {j.metadata.name for j in cq.jobs("victim")}, timeout=30,
               what="the preempted Job deleted")
    created = [e for e in cq.events("victim-a1") if e.reason == "SuccessfulCreate"]
    assert len(created) == 1, [(e.reason, e.message) for e in cq.events("victim-a1")]
    jobs = {j.metadata.name: j for j in cq.jobs("victim")}
    assert jobs["victim-a2"].metadata.labels["kueue.x-k8s.io/priority-class"] == low


def test_cancel_while_kueue_holds_the_job_leaves_no_job_and_no_workload(cq, kueue):
    queue = unique("full")
    kueue.queue(cq.namespace, queue, "0")  # no quota at all: every Job waits
    kueue_pool(cq, kueue, queue)
    cq.task("waiting")
    wait_until(lambda: suspended(cq, "waiting", 1), timeout=30, what="waiting's Job, suspended")
    wait_until(lambda: kueue.workloads(cq.namespace), timeout=30, what="Kueue's Workload for it")
    cq.patch_task("waiting", {"cancel": True})
    status = cq.wait_phase("waiting", "Cancelled")
    assert status["attempts"][0]["outcome"] == "Cancelled"
    wait_until(lambda: not cq.jobs("waiting"), timeout=30, what="the Job deleted")
    wait_until(lambda: not kueue.workloads(cq.namespace), timeout=60, what="the Workload gone with it")


def test_a_start_deadline_counts_the_wait_for_kueue(cq, kueue):
    queue = unique("never")
    kueue.queue(cq.namespace, queue, "0")
    kueue_pool(cq, kueue, queue)
    cq.task("late", startDeadline="3s")
    status = cq.wait_phase("late", "Failed", timeout=30)
    assert "StartDeadlineExceeded" in {c.get("reason") for c in status["conditions"]}
    assert "waiting for Kueue" in status["message"] and status["attempt"] == 1
    wait_until(lambda: not cq.jobs("late"), timeout=30, what="the waiting Job deleted")


def test_a_failover_while_kueue_holds_a_job_adopts_it_without_a_second_attempt(cq, kueue, kueue_operator):
    """The leader is SIGKILLed while an attempt's Job waits suspended; the next leader (a new
    epoch) adopts the recorded attempt and its Job, which Kueue then admits: one attempt, one Job."""
    queue = unique("failover")
    kueue.queue(cq.namespace, queue, "1")
    kueue_pool(cq, kueue, queue)
    cq.task("holder", delay="8s")
    wait_until(lambda: cq.jobs("holder") and not suspended(cq, "holder", 1), timeout=60,
               what="Kueue admitting holder's Job")
    cq.task("held", delay="100ms")
    wait_until(lambda: suspended(cq, "held", 1), timeout=30, what="held's Job, suspended behind holder")
    before = cq.status("held")

    kueue_operator.kill()
    kueue_operator.start()
    kueue_operator.wait_leading()

    held = cq.wait_phase("held", "Succeeded", timeout=90)
    assert [(a["number"], a["outcome"], a["job"], a["leaseId"]) for a in held["attempts"]] == \
        [(1, "Success", "held-a1", before["attempts"][0]["leaseId"])], held["attempts"]
    assert held["epoch"] > before["epoch"]
    assert [j.metadata.name for j in cq.jobs("held")] == ["held-a1"]
    assert cq.wait_phase("holder", "Succeeded")["attempt"] == 1


def test_a_pool_naming_a_missing_local_queue_says_so_in_its_ready_condition(cq, kueue):
    kueue_pool(cq, kueue, "nowhere")

    def ready():
        pool = cq.custom.get_namespaced_custom_object("cronoq.io", "v1alpha1", cq.namespace, "taskpools", "default")
        found = [c for c in (pool.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"]
        return found[0] if found and found[0]["reason"] == "KueueNotReady" else None

    condition = wait_until(ready, timeout=30, what="the pool's Ready condition naming Kueue")
    assert condition["status"] == "False"
    assert condition["message"].startswith(f"LocalQueue nowhere not found in namespace {cq.namespace}")


def test_a_workload_deactivated_ends_the_attempt_evicted_by_kueue_and_the_next_runs(cq, kueue):
    """Another eviction than a preemption: the admin deactivates the running attempt's Workload
    (spec.active: false); Kueue evicts it (reason Deactivated) and the attempt ends EvictedByKueue,
    not counted; attempt 2, a new Job with a new Workload, runs."""
    queue = unique("inactive")
    kueue.queue(cq.namespace, queue, "1")
    kueue_pool(cq, kueue, queue)
    cq.task("benched", retry={"maxAttempts": 1}, outcome_a1="Run", delay="1s")
    wait_until(lambda: cq.jobs("benched") and not suspended(cq, "benched", 1), timeout=60,
               what="Kueue admitting benched's attempt 1")
    (job,) = cq.jobs("benched")
    (workload,) = wait_until(lambda: [w for w in kueue.workloads(cq.namespace)
                                      if w["metadata"]["labels"].get("kueue.x-k8s.io/job-uid") == job.metadata.uid],
                             timeout=30, what="attempt 1's Workload")
    kueue.custom.patch_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", cq.namespace, "workloads",
                                                workload["metadata"]["name"], {"spec": {"active": False}})

    status = cq.wait_phase("benched", "Succeeded", timeout=90)
    first, second = status["attempts"]
    assert (first["outcome"], first["reason"], first.get("ignored")) == ("Retryable", "EvictedByKueue", True), first
    assert "(Deactivated)" in first["message"], first["message"]  # Kueue v0.17's reason
    assert (second["number"], second["outcome"], second["job"]) == (2, "Success", "benched-a2")


def test_a_task_held_by_quota_says_why_in_kueues_words_and_its_wait_is_counted_apart(cq, kueue, kueue_operator,
                                                                                     kubeconfig):
    from tests.integration.test_cli import Cli

    local, cluster = unique("words"), unique("team")
    kueue.queue(cq.namespace, local, "1", cluster_queue=cluster)
    kueue_pool(cq, kueue, local)
    cq.task("holder", delay="10m")  # holds the quota until it is cancelled
    wait_until(lambda: cq.jobs("holder") and not suspended(cq, "holder", 1), timeout=60,
               what="Kueue admitting holder's Job")
    cq.task("held", delay="100ms")

    def says_why():
        status = cq.status("held")
        running = [c for c in status.get("conditions") or [] if c["type"] == "Running"]
        # Kueue's words once its Workload says why (a look every 10 s: the first may find no Workload yet).
        said = running and running[0]["reason"] == "WaitingForKueue" and "Kueue says:" in status.get("message", "")
        return (status, running[0]) if said else None

    status, running = wait_until(says_why, timeout=60, what="held's status giving Kueue's reason")
    assert (status["phase"], status["attempt"]) == ("Running", 1)
    message = status["message"]
    assert message.startswith(f"attempt 1 of 3 is waiting for Kueue: LocalQueue {local}, ClusterQueue {cluster}, "
                              "needs 1 cpu; Kueue says: "), message
    assert "insufficient unused quota for cpu" in message, message  # Kueue's own words, from its Workload
    assert running["message"] == message and running["status"] == "True"

    described = " ".join(Cli(cq.namespace, str(kubeconfig)).ok("describe", "held").stdout.split())
    # The test's Kueue serves no visibility API: the place is said to be unknown, not made up.
    assert (f"waiting for Kueue: LocalQueue {local}, ClusterQueue {cluster}, position unknown (Kueue's visibility "
            "API is not served), needs 1 cpu; Kueue says:") in described, described
    (held_job,) = cq.jobs("held")
    assert held_job.spec.suspend, "Kueue still holds it"
    held_since = held_job.metadata.creation_timestamp.timestamp()
    still_held_at = time.time()

    labels = {"namespace": cq.namespace, "pool": "default"}
    kueue_before = [kueue_operator.metric(f"cronoq_kueue_wait_seconds_{s}", **labels) for s in ("count", "sum")]
    pool_before = [kueue_operator.metric(f"cronoq_dispatch_latency_seconds_{s}", **labels) for s in ("count", "sum")]
    cq.patch_task("holder", {"cancel": True})  # frees the quota: Kueue admits held's Job
    done = cq.wait_phase("held", "Succeeded", timeout=90)
    assert [a["number"] for a in done["attempts"]] == [1]
    cq.wait_phase("holder", "Cancelled", timeout=30)

    def counted():
        now = [kueue_operator.metric(f"cronoq_kueue_wait_seconds_{s}", **labels) for s in ("count", "sum")]
        return now if now[0] >= kueue_before[0] + 2 else None

    kueue_after = wait_until(counted, timeout=30, what="both attempts' Kueue waits counted")
    pool_after = [kueue_operator.metric(f"cronoq_dispatch_latency_seconds_{s}", **labels) for s in ("count", "sum")]
    assert kueue_after[0] == kueue_before[0] + 2, (kueue_before, kueue_after)  # holder's and held's attempts
    # held's Job waited from its creation to at least when it was last seen held (Kueue's times have whole seconds).
    assert kueue_after[1] - kueue_before[1] >= int(still_held_at) - held_since - 1, (kueue_before, kueue_after)
    assert pool_after == pool_before, "the wait for Kueue is not the wait for the pool"
