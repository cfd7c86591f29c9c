"""Pull delivery (`delivery: Workers`): workers that are real processes (tests/support/pull_worker.py)
claim a pool's tasks on the real control plane, with no Job and no pod, and keep the guarantees:
fencing, leases, retries, timeouts, cancellation, stale reports."""
from __future__ import annotations

import json
import signal
import time

import pytest
from kubernetes import client

from tests.support.waiting import wait_until
from tests.support.workers import Workers, served_task, wait_worker


@pytest.fixture
def workers(cq, kubeconfig, tmp_path):
    w = Workers(cq.namespace, kubeconfig, tmp_path)
    yield w
    w.stop()


def overlaps(lines: list[dict]) -> list[str]:
    """Tasks with two attempts running at the same time, by the journal."""
    spans: dict[str, list[tuple[float, float]]] = {}
    starts = {(line["task"], line["attempt"]): line["t"] for line in lines if line["event"] == "start"}
    for line in lines:
        if line["event"] == "end":
            spans.setdefault(line["task"], []).append((starts[(line["task"], line["attempt"])], line["t"]))
    bad = []
    for task, runs in spans.items():
        runs.sort()
        bad += [task for (_, end), (start, _) in zip(runs, runs[1:]) if start < end]
    return bad


def test_workers_run_a_pools_tasks_without_jobs_and_report_outputs(cq, api, workers):
    cq.pool(delivery="Workers", leaseTTL="3s", retry={"maxAttempts": 2, "initialBackoff": "0s"})
    workers.start("w-one", concurrency=3)
    wait_worker(api, cq.namespace, "w-one")
    for i in range(6):
        served_task(cq, f"job-{i}", {"echo": i, "sleep": 0.2})
    served_task(cq, "permanent", {"fail": "permanent"})

    statuses = {f"job-{i}": cq.wait_phase(f"job-{i}", "Succeeded", timeout=60) for i in range(6)}
    failed = cq.wait_phase("permanent", "Failed", timeout=30)

    for i in range(6):
        (attempt,) = statuses[f"job-{i}"]["attempts"]
        assert attempt["worker"] == "w-one" and "job" not in attempt
        assert json.loads(statuses[f"job-{i}"]["output"]) == {"echo": i, "by": "w-one"}
        assert attempt["durationMs"] >= 200
    assert [a["reason"] for a in failed["attempts"]] == ["Permanent"]
    assert cq.batch.list_namespaced_job(cq.namespace).items == [], "no Job was made"
    assert cq.core.list_namespaced_pod(cq.namespace).items == [], "no pod was made"
    lease = client.CoordinationV1Api(api).read_namespaced_lease("job-0-a1.w-one", cq.namespace)
    assert lease.metadata.labels["cronoq.io/worker"] == "w-one"
    assert json.loads(lease.metadata.annotations["cronoq.io/report"])["outcome"] == "success"
    running = max(sum(1 for line in workers.lines()[:k + 1] if line["event"] == "start")
                  - sum(1 for line in workers.lines()[:k + 1] if line["event"] == "end")
                  for k in range(len(workers.lines())))
    assert running <= 3, "never more at once than the worker's room"


def test_a_workers_handler_reads_its_dependencies_outputs_in_ctx_inputs(cq, api, workers):
    cq.pool(delivery="Workers", leaseTTL="3s")
    workers.start("w-in", concurrency=2)
    wait_worker(api, cq.namespace, "w-in")
    served_task(cq, "first", {"echo": 5})
    served_task(cq, "second", {"inputs": True}, dependsOn=[{"task": "first"}])
    status = cq.wait_phase("second", "Succeeded", timeout=60)
    assert json.loads(status["output"]) == {"first": {"phase": "Succeeded", "output": {"echo": 5, "by": "w-in"}}}


def test_a_killed_workers_attempt_is_retried_elsewhere_after_its_lease_never_twice_at_once(cq, api, workers):
    cq.pool(delivery="Workers", leaseTTL="3s", retry={"maxAttempts": 3, "initialBackoff": "0s"})
    doomed = workers.start("w-doomed")
    wait_worker(api, cq.namespace, "w-doomed")
    served_task(cq, "long", {"sleep": 4})
    wait_until(lambda: any(line["event"] == "start" for line in workers.lines()), timeout=30, what="attempt 1 started")

    doomed.send_signal(signal.SIGKILL)
    killed_at = time.time()
    workers.start("w-heir")
    status = cq.wait_phase("long", "Succeeded", timeout=90)

    first, second = status["attempts"]
    assert (first["worker"], first["reason"], second["worker"]) == ("w-doomed", "LeaseExpired", "w-heir")
    starts = [line for line in workers.lines() if line["event"] == "start"]
    assert [(s["worker"], s["attempt"]) for s in starts] == [("w-doomed", 1), ("w-heir", 2)]
    assert starts[1]["t"] >= killed_at, "attempt 2 started only after attempt 1's worker was gone"
    assert overlaps(workers.lines()) == []


def test_timeout_and_cancellation_abort_running_handlers_and_a_late_report_is_stale(cq, api, workers):
    cq.pool(delivery="Workers", leaseTTL="3s", retry={"maxAttempts": 1})
    workers.start("w-abort")
    wait_worker(api, cq.namespace, "w-abort")
    stale_before = cq.operator.metric("cronoq_stale_completions_total")

    served_task(cq, "slow-async", {"sleep": 30}, labels={"cronoq.io/handler": "async"}, timeout="2s")
    served_task(cq, "cancelled", {"sleep": 30})
    served_task(cq, "deaf", {"sleep": 5, "deaf": True})
    wait_until(lambda: {line["task"] for line in workers.lines() if line["event"] == "start"} >= {"cancelled", "deaf"},
               timeout=30, what="both started")
    cq.patch_task("cancelled", {"cancel": True})
    cq.patch_task("deaf", {"cancel": True})

    timed_out = cq.wait_phase("slow-async", "DeadLettered", timeout=30)
    cq.wait_phase("cancelled", "Cancelled", timeout=30)
    cq.wait_phase("deaf", "Cancelled", timeout=30)

    assert timed_out["attempts"][0]["reason"] == "Timeout"
    ends = {line["task"]: line["how"] for line in workers.lines() if line["event"] == "end"}
    wait_until(lambda: len({line["task"] for line in workers.lines() if line["event"] == "end"}) == 3, timeout=30,
               what="every handler ended")
    ends = {line["task"]: line["how"] for line in workers.lines() if line["event"] == "end"}
    assert ends == {"slow-async": "cancelled", "cancelled": "abandoned", "deaf": "returned"}
    wait_until(lambda: "StaleCompletion" in cq.reasons("deaf"), timeout=30, what="the deaf handler's report ignored")
    assert cq.status("deaf")["phase"] == "Cancelled"
    assert cq.operator.metric("cronoq_stale_completions_total") >= stale_before + 1


def test_workers_scale_up_and_down_under_load_each_attempt_once(cq, api, workers, tmp_path):
    """A second worker takes a share of the backlog, then the first drains and leaves. The first
    attempts hold until the second worker runs three of its own (so it is seen taking a share by
    what it runs, not by racing the first through the backlog), and the leases are the shipped
    15 s (a worker's and an attempt's), not 3 s: on a loaded machine both raced and the 3 s leases
    lapsed (issue 52 item 7)."""
    cq.pool(delivery="Workers", leaseTTL="15s", concurrency=6, retry={"maxAttempts": 3, "initialBackoff": "0s"})
    gate = tmp_path / "go-on"
    first = workers.start("w-a", concurrency=3, ttl=15.0)
    wait_worker(api, cq.namespace, "w-a")
    for i in range(24):
        served_task(cq, f"t-{i}", {"until": str(gate)})

    def running(worker: str) -> set[str]:
        return {line["task"] for line in workers.lines() if line["event"] == "start" and line["worker"] == worker}

    wait_until(lambda: len(running("w-a")) >= 3, timeout=120, what="the first worker running three")
    workers.start("w-b", concurrency=3, ttl=15.0)  # scale up: it takes a share of the backlog
    wait_until(lambda: len(running("w-b")) >= 3, timeout=180, what="w-b running three of the backlog")
    gate.touch()

    first.send_signal(signal.SIGTERM)  # scale down: drains, takes nothing new, finishes what it runs
    assert first.wait(120) == 0, workers.log("w-a")
    statuses = [cq.wait_phase(f"t-{i}", "Succeeded", timeout=180) for i in range(24)]

    assert all(len(s["attempts"]) == 1 for s in statuses), "a drained worker lost no attempt"
    by = {s["attempts"][0]["worker"] for s in statuses}
    assert by == {"w-a", "w-b"}
    starts = [(line["task"], line["attempt"]) for line in workers.lines() if line["event"] == "start"]
    assert len(starts) == len(set(starts)) == 24, "every attempt ran once"
    assert client.CoordinationV1Api(api).list_namespaced_lease(
        cq.namespace, field_selector="metadata.name=w-a").items == [], "the drained worker removed its Lease"


def test_a_draining_worker_keeps_its_leases_and_its_handlers_result_is_the_outcome(cq, api, workers):
    """Issue 37: with the shipped defaults (worker TTL 15 s, grace 30 s) a 20 s handler outlives a
    worker TTL after SIGTERM; the worker renews its Leases throughout, so the result counts and a
    spare worker of the pool never runs the task again."""
    cq.pool(delivery="Workers", retry={"maxAttempts": 3, "initialBackoff": "0s"})
    draining = workers.start("w-drain", ttl=15.0, grace=30.0)
    wait_worker(api, cq.namespace, "w-drain")
    served_task(cq, "long", {"echo": "kept", "sleep": 20})
    start = wait_until(lambda: next((line for line in workers.lines() if line["event"] == "start"), None),
                       timeout=30, what="attempt 1 started")
    time.sleep(max(0.0, start["t"] + 1 - time.time()))  # the signal comes 1 s into the handler
    draining.send_signal(signal.SIGTERM)
    sigterm_at = time.time()
    workers.start("w-spare", ttl=15.0)  # would take a retry at once

    seen: dict[str, float] = {}

    def settled() -> bool:
        if "exit" not in seen and draining.poll() is not None:
            seen["exit"] = time.time()
        if "succeeded" not in seen:
            status = cq.status("long")
            attempts = status.get("attempts") or []
            assert len(attempts) <= 1, f"attempt 1 ended {attempts[0].get('reason')} and the task ran again: {attempts}"
            if status.get("phase") == "Succeeded":
                seen["succeeded"] = time.time()
        return len(seen) == 2

    wait_until(settled, timeout=90, interval=0.2, what="the task Succeeded and the drained worker exited")
    status = cq.status("long")
    (attempt,) = status["attempts"]
    assert (attempt["worker"], attempt["outcome"]) == ("w-drain", "Success")
    assert json.loads(status["output"]) == {"echo": "kept", "by": "w-drain"}
    assert [(line["event"], line["worker"], line["attempt"]) for line in workers.lines()] == [
        ("start", "w-drain", 1), ("end", "w-drain", 1)], "exactly one attempt ran"
    end = workers.lines()[1]
    assert end["how"] == "returned" and end["t"] - sigterm_at >= 18, "the handler ran its 20 s to the end"
    assert draining.returncode == 0, workers.log("w-drain")
    assert seen["exit"] >= end["t"], "the worker exited only after its handler finished"
    assert client.CoordinationV1Api(api).list_namespaced_lease(
        cq.namespace, field_selector="metadata.name=w-drain").items == [], "the drained worker removed its Lease"
    print(f"SIGTERM -> handler end {end['t'] - sigterm_at:.1f}s, -> Succeeded seen {seen['succeeded'] - sigterm_at:.1f}s, "
          f"-> worker exit {seen['exit'] - sigterm_at:.1f}s")


def test_a_worker_cut_off_from_the_api_server_fences_itself(cq, api, workers, kubeconfig, tmp_path):
    from tests.support.toxiproxy import Toxiproxy, server_of, through

    cq.pool(delivery="Workers", leaseTTL="3s", retry={"maxAttempts": 2, "initialBackoff": "0s"})
    with Toxiproxy.start(tmp_path / "toxiproxy.log") as toxi:
        proxy = toxi.proxy("apiserver", upstream=server_of(kubeconfig))
        cut_off = workers.start("w-cut", ttl=3.0, kubeconfig=through(kubeconfig, proxy, tmp_path / "proxied"))
        wait_worker(api, cq.namespace, "w-cut")
        served_task(cq, "stranded", {"sleep": 20})
        wait_until(lambda: any(line["event"] == "start" for line in workers.lines()), timeout=30, what="started")

        proxy.enabled(False)
        assert cut_off.wait(30) == 3, "it fenced itself: exit 3, every handler aborted"
        lost_at = time.time()
        workers.start("w-after")
        status = cq.wait_phase("stranded", "Succeeded", timeout=90)

    assert [a["worker"] for a in status["attempts"]] == ["w-cut", "w-after"]
    assert status["attempts"][0]["reason"] == "LeaseExpired"
    second = next(line for line in workers.lines() if line["event"] == "start" and line["attempt"] == 2)
    assert second["t"] >= lost_at - 1
