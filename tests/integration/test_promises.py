"""Promises kept to the second (issue 19), each measured against what a user sees: a pod watch
run by the test itself (tests/support/podwatch.py), not the operator's own account."""
from __future__ import annotations

from tests.support.podwatch import PodWatch
from tests.support.waiting import wait_until

LAG = 0.25
"""Seconds the test's own watch may see a pod's start later than its end, relative to the truth."""


def test_a_timeout_never_ends_an_attempt_before_it_has_run_that_long(cq, api):
    """2s timeouts, container start seen by the test's watch → the pod seen deleted (aborted)."""
    cq.pool(leaseTTL="0s", retry={"maxAttempts": 1})
    names = [f"slow{i}" for i in range(4)]
    with PodWatch(api, cq.namespace) as pods:
        for name in names:
            cq.task(name, outcome="Run", timeout="2s")
        for name in names:
            status = cq.wait_phase(name, "DeadLettered", timeout=60)
            assert status["attempts"][0]["reason"] == "Timeout"
        wait_until(lambda: all(pods.pods.get(f"{n}-a1") and pods.pods[f"{n}-a1"].deleting for n in names),
                   timeout=30, what="every aborted pod seen deleting")
    ran = [pods.pods[f"{n}-a1"].deleting - pods.pods[f"{n}-a1"].running for n in names]
    print("2s timeouts, container seen running → pod seen deleting:", [f"{r:.2f}s" for r in ran])
    # Both ends are sightings by this test's watch, each late by its lag. Under a loaded CI run the
    # start was once seen 0.15 s later than the operator saw it (1.85 s measured; the operator
    # counts from its own, earlier, sighting); LAG allows for that and still catches the cut this
    # test was written for (before issue 19: 1.26–1.59 s).
    assert min(ran) >= 2.0 - LAG, ran
    assert max(ran) < 4.0, ran


def test_raising_a_queued_tasks_priority_reorders_the_queue(cq):
    cq.pool(concurrency=0, leaseTTL="0s")
    for i in range(10):
        cq.task(f"q{i}", priority=-3 if i == 7 else i, delay="100ms")
    for i in range(10):
        cq.wait_phase(f"q{i}", "Queued")
    cq.patch_task("q7", {"priority": 20})
    cq.wait_status("q7", lambda s: s.get("observedGeneration") == 2, "the priority change acknowledged")

    cq.custom.patch_namespaced_custom_object("cronoq.io", "v1alpha1", cq.namespace, "taskpools", "default",
                                             {"spec": {"concurrency": 1}})
    dispatched = {}
    for i in range(10):
        status = cq.wait_phase(f"q{i}", "Succeeded", timeout=120)
        dispatched[f"q{i}"] = status["attempts"][0]["dispatchedAt"]
    order = sorted(dispatched, key=dispatched.get)
    assert order == ["q7", "q9", "q8", "q6", "q5", "q4", "q3", "q2", "q1", "q0"], order


def test_a_cancelled_attempt_keeps_its_slot_until_its_pod_has_stopped(cq, api):
    """concurrency 1: the cancelled attempt's pod takes 3s to exit (a grace period); the next
    task's pod must not exist before it has."""
    cq.pool(concurrency=1, leaseTTL="0s")
    with PodWatch(api, cq.namespace) as pods:
        cq.task("first", outcome="Run", on_delete="Succeed", delete_delay="3s")
        cq.wait_phase("first", "Running")
        wait_until(lambda: pods.pods.get("first-a1") and pods.pods["first-a1"].running, timeout=30,
                   what="the first task's container running")
        cq.task("second", delay="100ms")
        cq.wait_phase("second", "Queued")
        cq.patch_task("first", {"cancel": True})
        cq.wait_phase("first", "Cancelled")
        cq.wait_phase("second", "Succeeded", timeout=60)
    first, second = pods.pods["first-a1"], pods.pods["second-a1"]
    assert first.ended is not None and second.added is not None
    assert second.added >= first.ended, (first, second)
    assert first.ended - first.deleting >= 2.5  # it did linger: the test shows what it claims


def test_a_500ms_attempt_records_its_duration_in_milliseconds_as_the_pod_was_seen(own, api):
    """Measured by an operator of its own: the session's operator, busy with the events of former
    tests' namespaces being deleted, once saw this pod's end 0.5 s late (the kubelet's second then
    stands in, docs/concepts/attempts-and-fencing.md, "Attempt times"), which is the fallback, not the promise tested here."""
    cq = own
    cq.operator.start()
    cq.pool(leaseTTL="0s")
    with PodWatch(api, cq.namespace) as pods:
        cq.task("half", delay="500ms", message="ok")
        status = cq.wait_phase("half", "Succeeded")
        wait_until(lambda: pods.pods.get("half-a1") and pods.pods["half-a1"].ended, timeout=30,
                   what="the pod's end seen")
    seen = pods.pods["half-a1"]
    observed_ms = (seen.ended - seen.running) * 1000
    duration = status["attempts"][0]["durationMs"]
    print(f"500ms run: durationMs {duration}, seen by the test's watch {observed_ms:.0f} ms")
    # Judged against the test's own watch of the same pod, not against 500 ms: on a loaded machine
    # both see the pod's start and end late, and a fixed figure fails by chance (it cost a landing).
    assert abs(duration - observed_ms) < 250, (duration, observed_ms)
    assert duration not in (0, 1000), duration  # milliseconds (before issue 19: whole seconds, 0 or 1000)
