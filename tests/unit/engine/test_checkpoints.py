"""Checkpoints across attempts (engine/attempts/checkpoints.py): the open attempt's checkpoint, from
its own Lease, is recorded once per change and handed to the next attempt; anyone else's changes
nothing. Driven through `decide`, so the next attempt's Job (its CRONOQ_CHECKPOINT) is checked too."""
from __future__ import annotations

import random
from dataclasses import replace

from cronoq.api import AttemptOutcome, Task, TaskPhase, TaskPoolSpec
from cronoq.engine.decide import Live, decide
from cronoq.engine.plan import Plan
from cronoq.pod_protocol import Env

from tests.unit.builders import T0, at, attempt_job, make_task, observe, with_status
from tests.unit.engine.test_served import handed, lease, served
from tests.unit.engine.test_served import run as run_served

RETRY = {"retry": {"maxAttempts": 3, "initialBackoff": "0s", "jitter": "none"}, "leaseTTL": "30s"}


def run(task: Task, *jobs, now=T0, **seen) -> Plan:
    return decide(Live(task), observe(*jobs, now=now, pool=TaskPoolSpec.model_validate(RETRY), **seen),
                  random.Random(0))


def step(task: Task, plan: Plan) -> Task:
    return with_status(task, plan.status) if plan.status is not None else task


def running(number: int = 1, checkpoint: str | None = None, lease_id: str | None = None):
    return attempt_job("t", number).running(at(1)).with_(lease_id=lease_id or f"e1-a{number}", checkpoint=checkpoint)


def env_of(job: dict) -> dict[str, str]:
    container = job["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container["env"]}


def first_attempt() -> Task:
    task = make_task("t").obj()
    plan = run(task, admit=True)
    assert plan.job is not None and Env.CHECKPOINT not in env_of(plan.job), "no checkpoint before any was saved"
    return step(task, plan)


def test_a_checkpoint_on_the_open_attempts_lease_is_recorded_once_with_its_attempt() -> None:
    task = first_attempt()
    assert run(task, running(), now=at(5)).status is None, "a renewal without a checkpoint writes nothing"

    plan = run(task, running(checkpoint='{"done":40}'), now=at(6))

    saved = plan.status.checkpoint
    assert (saved.attempt, saved.data, saved.saved_at) == (1, '{"done":40}', at(6))
    assert plan.status.phase is TaskPhase.RUNNING and plan.status.epoch == 1
    task = step(task, plan)
    assert run(task, running(checkpoint='{"done":40}'), now=at(7)).status is None, "the same checkpoint: no write"
    assert run(task, running(checkpoint='{"done":80}'), now=at(16)).status.checkpoint.data == '{"done":80}'


def test_a_checkpoint_gets_a_write_of_its_own_at_most_once_per_renewal_interval() -> None:
    """leaseTTL 30s: renewals every 10s. A newer checkpoint seen sooner waits (the reconcile comes
    back when the interval is over), then the newest one is written."""
    task = first_attempt()
    assert task.status.attempts[-1].lease_ttl_ms == 30_000
    task = step(task, run(task, running(checkpoint='{"done":1}'), now=at(5)))

    for second, done in ((6, 2), (9, 3), (14.9, 4)):
        plan = run(task, running(checkpoint=f'{{"done":{done}}}'), now=at(second))
        assert plan.status is None, f"at {second}s: within the interval, no write of its own"
        assert plan.requeue_after is not None and abs(plan.requeue_after - (15 - second)) < 1e-6, "back when it is over"
    plan = run(task, running(checkpoint='{"done":4}'), now=at(15))
    assert plan.status.checkpoint.data == '{"done":4}' and plan.status.checkpoint.saved_at == at(15)


def test_a_checkpoint_rides_along_with_a_write_made_anyway_and_the_closing_write_keeps_the_newest() -> None:
    task = first_attempt()
    task = step(task, run(task, running(checkpoint='{"done":1}'), now=at(5)))

    plan = run(task, exited(1, 0, '{"done":9}'), now=at(6))  # 1s later: well within the interval

    assert plan.status.phase is TaskPhase.SUCCEEDED and plan.status.checkpoint.data == '{"done":9}'
    killed = run(task, exited(1, 137, '{"done":7}', reason="OOMKilled"), now=at(6), admit=True)
    assert killed.status.checkpoint.data == '{"done":7}', "the attempt that dies hands over its newest"


def exited(number: int, code: int, checkpoint: str | None, reason: str | None = None):
    return replace(attempt_job("t", number).exited(code, reason=reason, started=at(1)), lease_id=f"e1-a{number}",
                   checkpoint=checkpoint)


def test_the_attempt_killed_halfway_hands_its_checkpoint_to_the_next_one() -> None:
    task = first_attempt()
    killed = exited(1, 137, '{"done":50}', reason="OOMKilled")

    ended = run(task, killed, now=at(10), admit=True)

    assert ended.status.attempts[0].outcome is AttemptOutcome.RETRYABLE
    assert ended.status.attempts[0].reason == "OOMKilled"
    assert (ended.status.checkpoint.attempt, ended.status.checkpoint.data) == (1, '{"done":50}'), \
        "recorded in the write that closes the attempt"
    task = step(task, ended)
    if ended.job is None:  # Retrying, its backoff (0s) over: the next reconcile starts attempt 2
        ended = run(task, killed, now=at(10), admit=True)
        task = step(task, ended)
    assert task.status.attempt == 2 and ended.job is not None
    assert env_of(ended.job)[Env.CHECKPOINT] == '{"done":50}'
    assert task.status.checkpoint.attempt == 1, "attempt 2 has saved nothing yet"


def test_a_stale_attempts_late_checkpoint_changes_nothing() -> None:
    task = first_attempt()
    task = step(task, run(task, exited(1, 1, '{"done":50}'), now=at(10), admit=True))
    if task.status.attempt == 1:  # Retrying, its backoff (0s) over: the next reconcile starts attempt 2
        task = step(task, run(task, exited(1, 1, '{"done":50}'), now=at(10), admit=True))
    assert task.status.attempt == 2 and task.status.checkpoint.data == '{"done":50}'

    # Attempt 1's pod lives on (a partition) and its Lease carries a newer checkpoint: ignored.
    plan = run(task, exited(1, 1, '{"done":90}'), running(2), now=at(12))
    assert plan.status is None or plan.status.checkpoint == task.status.checkpoint


def test_a_checkpoint_closed_attempt_or_foreign_lease_is_ignored() -> None:
    task = first_attempt()
    # A Lease held by another lease id than the attempt's (someone took its name): ignored.
    assert run(task, running(checkpoint='{"x":1}', lease_id="e9-a1"), now=at(5)).status is None
    # A Job of the attempt's name whose lease id is unknown cannot vouch for a checkpoint.
    unknown = attempt_job("t", 1).running(at(1)).with_(checkpoint='{"x":1}', lease_id=None)
    assert run(task, unknown, now=at(5)).status is None
    # The Job of an attempt the status never recorded (a number ahead of it): ignored.
    ahead = running(2, checkpoint='{"x":1}')
    plan = run(task, ahead, running(), now=at(5))
    assert plan.status is None or plan.status.checkpoint is None


def test_a_served_attempt_takes_a_checkpoint_only_from_the_lease_of_its_worker() -> None:
    task = handed(served())
    own = replace(lease("t", 1), checkpoint='{"page":3}')
    other = replace(lease("t", 1, worker="w-2"), checkpoint='{"page":99}')

    assert run_served(task, now=at(2), jobs=(other,)).status is None, "another worker's Lease changes nothing"
    plan = run_served(task, now=at(2), jobs=(own, other))

    assert plan.status.checkpoint.data == '{"page":3}' and plan.status.checkpoint.attempt == 1
    assert plan.status.worker == "w-1"


def test_the_checkpoint_outlives_the_task_finishing() -> None:
    task = first_attempt()
    task = step(task, run(task, running(checkpoint='{"done":40}'), now=at(6)))
    done = exited(1, 0, '{"done":100}')

    plan = run(task, done, now=at(9))

    assert plan.status.phase is TaskPhase.SUCCEEDED and plan.status.checkpoint.data == '{"done":100}'




def test_the_heartbeat_sidecar_shares_a_checkpoint_file_with_the_task_container() -> None:
    from datetime import timedelta

    from cronoq.engine.jobs import HEARTBEAT_CONTAINER, build_job

    job = build_job(make_task("t").obj(), None, 2, "e1-a2", lease_ttl=timedelta(seconds=30),
                    sidecar_image="cronoq:1", checkpoint='{"done":50}')
    pod = job["spec"]["template"]["spec"]
    task, sidecar = pod["containers"][0], next(c for c in pod["initContainers"] if c["name"] == HEARTBEAT_CONTAINER)
    task_env, sidecar_env = env_of(job), {e["name"]: e.get("value") for e in sidecar["env"]}
    assert task_env[Env.CHECKPOINT] == '{"done":50}' and Env.CHECKPOINT not in sidecar_env
    assert task_env[Env.CHECKPOINT_FILE] == sidecar_env[Env.CHECKPOINT_FILE] == "/var/run/cronoq-checkpoint/checkpoint.json"
    assert [v["name"] for v in pod["volumes"]] == ["cronoq-checkpoint"]
    assert task["volumeMounts"] == [{"name": "cronoq-checkpoint", "mountPath": "/var/run/cronoq-checkpoint"}]
    assert sidecar["volumeMounts"][0]["readOnly"] is True
    plain = build_job(make_task("t").obj(), None, 1, "e1-a1", lease_ttl=timedelta(seconds=30))
    assert "volumes" not in plain["spec"]["template"]["spec"], "no sidecar, no volume"


def test_a_checkpoint_after_its_attempt_was_closed_changes_nothing_while_the_task_backs_off() -> None:
    task = first_attempt()
    slow = TaskPoolSpec.model_validate({**RETRY, "retry": {"maxAttempts": 3, "initialBackoff": "60s", "jitter": "none"}})
    closed = decide(Live(task), observe(exited(1, 1, '{"done":50}'), now=at(10), pool=slow), random.Random(0))
    task = step(task, closed)
    assert task.status.phase is TaskPhase.RETRYING and task.status.checkpoint.data == '{"done":50}'

    later = decide(Live(task), observe(exited(1, 1, '{"done":90}'), now=at(20), pool=slow), random.Random(0))

    assert later.status is None or later.status.checkpoint == task.status.checkpoint
