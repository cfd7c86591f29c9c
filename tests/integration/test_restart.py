"""Restart safety (DESIGN §2): the operator can die at any instant. Attempt numbers are never
reused, there is at most one Job per (task, attempt), and every task still finishes.

Each test runs its own operator on its own namespace, so it can kill it."""
from __future__ import annotations

import random
import signal
from datetime import datetime, timezone


from tests.support.tasks import GROUP, TERMINAL, VERSION, Cronoq
from tests.support.waiting import wait_until


def assert_fenced(cq: Cronoq, name: str) -> dict:
    """Attempts 1..n recorded once each, one Job per recorded attempt, none beyond."""
    status = cq.status(name)
    numbers = [a["number"] for a in status["attempts"]]
    assert numbers == list(range(1, status["attempt"] + 1)), numbers
    jobs = {j.metadata.name for j in cq.jobs(name)}
    assert jobs == {f"{name}-a{n}" for n in numbers}, (jobs, numbers)
    return status


def test_an_attempt_recorded_before_a_crash_gets_its_job_and_no_new_number(own):
    """The state a SIGKILL leaves between 'record attempt 1' and 'create Job 1', made exactly:
    the status names attempt 1 and no Job exists. The restarted operator creates Job 1."""
    own.pool()
    task = own.task("recorded", delay="200ms", message="ok")
    now = datetime.now(timezone.utc).isoformat()
    task["status"] = {"phase": "Running", "attempt": 1, "submittedAt": now, "epoch": 0,
                      "attempts": [{"number": 1, "leaseId": "e0-a1", "job": "recorded-a1", "trigger": "First"}]}
    own.custom.replace_namespaced_custom_object_status(GROUP, VERSION, own.namespace, "tasks", "recorded", task)

    own.operator.start()
    status = own.wait_phase("recorded", "Succeeded")

    assert status["attempt"] == 1 and status["output"] == "ok"
    assert [j.metadata.name for j in own.jobs("recorded")] == ["recorded-a1"]


def test_killed_while_a_job_runs_the_job_is_adopted_not_restarted(own):
    own.pool()
    own.operator.start()
    own.task("adopted", delay="4s", message="finished")
    wait_until(lambda: own.jobs("adopted"), timeout=30, what="Job 1 created")

    own.operator.kill(signal.SIGKILL)
    own.operator.start()
    status = own.wait_phase("adopted", "Succeeded")

    assert status["attempt"] == 1 and status["output"] == "finished"
    assert [j.metadata.name for j in own.jobs("adopted")] == ["adopted-a1"]


def test_repeated_kills_lose_no_task_and_reuse_no_attempt_number(own):
    rng = random.Random(7)
    own.pool(concurrency=4, retry={"maxAttempts": 3, "initialBackoff": "200ms", "jitter": "none"})
    own.operator.start()
    names = []
    for i in range(12):
        plays = {"delay": f"{rng.choice([100, 500, 1500])}ms"}
        if i % 3 == 1:
            plays.update(outcome_a1="Fail", exit_code_a1=1)
        elif i % 3 == 2:
            plays.update(outcome="Fail", exit_code=1)
        own.task(f"t{i}", **plays)
        names.append(f"t{i}")

    for _ in range(4):
        wait_until(lambda: own.jobs(), timeout=30, what="some Job created")
        own.operator.kill(signal.SIGKILL)
        own.operator.start()

    def all_done():
        return all(own.status(n).get("phase") in TERMINAL for n in names)

    wait_until(all_done, timeout=120, what="every task finished")
    for i, name in enumerate(names):
        status = assert_fenced(own, name)
        expected = ["Succeeded", "Succeeded", "DeadLettered"][i % 3]
        assert status["phase"] == expected, (name, status["message"])
