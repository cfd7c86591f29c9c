"""Retry rules end to end (issue 39.5): the real operator, the real control plane, kwok playing
each attempt, the Eviction API evicting pods, and the real push runner's reports."""
from __future__ import annotations

from kubernetes import client

from tests.integration.test_cli import Cli
from tests.integration.test_push import plays, push_task, runner_says
from tests.support.waiting import wait_until


def test_an_exit_code_rule_fails_the_task_at_once_with_attempts_left(cq):
    cq.pool(retry={"maxAttempts": 3, "initialBackoff": "0s", "rules": [{"action": "Fail", "exitCodes": [3]}]})
    cq.task("bad", outcome="Fail", exit_code=3, message="bad input", delay="100ms")

    status = cq.wait_phase("bad", "Failed")

    (attempt,) = status["attempts"]
    assert (attempt["outcome"], attempt["exitCode"], attempt["reason"], attempt["rule"]) == \
        ("Permanent", 3, "ExitCode", "pool rule 1")
    assert attempt["message"].endswith("(pool rule 1: Fail)") and "ignored" not in attempt
    assert "failed permanently" in status["message"] and "(pool rule 1: Fail)" in status["message"]
    assert [j.metadata.name for j in cq.jobs("bad")] == ["bad-a1"]


def test_evicted_attempts_are_ignored_numbered_and_not_counted(cq, api, kubeconfig):
    """maxAttempts 1: without the rule the first eviction would dead-letter the task. Attempts 1
    and 2 are evicted through the Eviction API and ignored; attempt 3 runs and succeeds."""
    pool = "evictable"
    cq.pool(pool, leaseTTL="0s", retry={"initialBackoff": "0s"})
    cq.task("survivor", pool=pool, retry={"maxAttempts": 1, "rules": [{"action": "Ignore", "reasons": ["Evicted"]}]},
            outcome_a1="Run", outcome_a2="Run", delay="100ms", message="ok")
    core = client.CoreV1Api(api)

    for n in (1, 2):
        def running_pod(n=n):
            pods = core.list_namespaced_pod(cq.namespace,
                                            label_selector=f"cronoq.io/task=survivor,cronoq.io/attempt={n}").items
            return next((p for p in pods if p.status.phase == "Running"), None)

        pod = wait_until(running_pod, timeout=60, what=f"attempt {n}'s pod running")
        core.create_namespaced_pod_eviction(pod.metadata.name, cq.namespace, client.V1Eviction(
            metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=cq.namespace)))

    status = cq.wait_phase("survivor", "Succeeded", timeout=90)

    assert [(a["number"], a["outcome"], a["reason"], a.get("rule"), a.get("ignored")) for a in status["attempts"]] == [
        (1, "Retryable", "Evicted", "task rule 1", True), (2, "Retryable", "Evicted", "task rule 1", True),
        (3, "Success", "Completed", None, None)], status["attempts"]
    assert status["ignoredAttempts"] == 2 and status["message"] == "succeeded on attempt 3"
    ignored = ("cronoq_attempts_ignored_total", (("namespace", cq.namespace), ("pool", pool)))
    wait_until(lambda: cq.operator.metrics().get(ignored) == 2.0, timeout=10, what="two attempts counted as ignored")

    described = Cli(cq.namespace, kubeconfig).ok("describe", "survivor").stdout
    assert "Ignored attempts:" in described and "2 (retry rules said Ignore" in described, described
    history = described.split("Attempts:")[1].split("Events:")[0]
    assert history.count("(task rule 1, not counted)") == 2, described


def test_a_push_409_retried_and_a_500_failed_at_once_by_rules(cq, tmp_path):
    conflict_code, conflict = runner_says(tmp_path, "/conflict")
    ok_code, ok = runner_says(tmp_path, "/ok")
    broken_code, broken = runner_says(tmp_path, "/broken")
    assert (conflict_code, broken_code) == (2, 1), "the runner's defaults: 4xx permanent, 5xx retryable"
    cq.pool(retry={"maxAttempts": 3, "initialBackoff": "0s", "rules": [
        {"action": "Retry", "responseCodes": [409]}, {"action": "Fail", "responseCodes": [500, 501]}]})
    push_task(cq, "conflicted", {"url": "http://hooks.example.com/orders"},
              {**plays(1, conflict_code, conflict), **plays(2, ok_code, ok)})
    push_task(cq, "broken", {"url": "http://hooks.example.com/orders"}, plays(1, broken_code, broken))

    conflicted = cq.wait_phase("conflicted", "Succeeded")
    first, second = conflicted["attempts"]
    assert (first["outcome"], first["responseCode"], first["rule"]) == ("Retryable", 409, "pool rule 1")
    assert (second["outcome"], second["responseCode"]) == ("Success", 200)

    failed = cq.wait_phase("broken", "Failed")
    (only,) = failed["attempts"]
    assert (only["outcome"], only["responseCode"], only["rule"]) == ("Permanent", 500, "pool rule 2")
    assert "(pool rule 2: Fail)" in failed["message"]
