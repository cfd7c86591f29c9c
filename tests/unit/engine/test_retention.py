"""Lifetime of finished work (`engine.retention`, DESIGN §10): when a finished task may be
deleted, when an attempt whose Job is not seen counts as lost rather than never created, and
which Jobs are re-timed when the jobRetention in effect changes."""
from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

from cronoq.api import AttemptOutcome, TaskPhase, TaskPoolSpec
from cronoq.engine import reasons
from cronoq.engine.attempts import reconcile, settle
from cronoq.engine.decide import Finished, Live, decide
from cronoq.engine.jobs import build_job
from cronoq.engine.naming import lease_id
from cronoq.engine.retention import expires_at, job_may_be_gone, job_retention_of, retime, task_expires_at
from cronoq.kube.observe import job_facts

from tests.unit.builders import T0, at, attempt_job, make_task, observe, settings, with_status

HOUR = timedelta(hours=1)


def test_unfinished_or_without_ttl_is_kept() -> None:
    assert expires_at(None, HOUR, keyed=False, key_retention=HOUR) is None
    assert expires_at(T0, None, keyed=True, key_retention=HOUR) is None


def test_expires_ttl_after_finishing() -> None:
    assert expires_at(T0, timedelta(0), keyed=False, key_retention=HOUR) == T0
    assert expires_at(T0, timedelta(seconds=2), keyed=False, key_retention=HOUR) == at(2)


def test_a_keyed_task_outlives_its_ttl_until_its_key_retention_ends() -> None:
    assert expires_at(T0, timedelta(seconds=2), keyed=True, key_retention=HOUR) == T0 + HOUR
    assert expires_at(T0, 2 * HOUR, keyed=True, key_retention=HOUR) == T0 + 2 * HOUR


def test_the_tasks_own_ttl_wins_over_the_pools_and_keys_extend_it() -> None:
    pool = TaskPoolSpec.model_validate({"ttlAfterFinished": "1h", "keyRetention": "10m"})
    assert task_expires_at(T0, None, None, pool, TaskPhase.SUCCEEDED) == T0 + HOUR
    assert task_expires_at(T0, timedelta(seconds=5), None, pool, TaskPhase.SUCCEEDED) == at(5)
    assert task_expires_at(T0, timedelta(seconds=5), "k", pool, TaskPhase.SUCCEEDED) == T0 + timedelta(minutes=10)
    assert task_expires_at(None, timedelta(seconds=5), None, pool, TaskPhase.SUCCEEDED) is None
    assert task_expires_at(T0, None, None, None, TaskPhase.SUCCEEDED) is None  # no pool: DESIGN's default keeps tasks


def test_job_may_be_gone_only_after_its_retention() -> None:
    assert not job_may_be_gone(T0, HOUR, T0 + HOUR - timedelta(microseconds=1))
    assert job_may_be_gone(T0, HOUR, T0 + HOUR)
    assert not job_may_be_gone(None, timedelta(0), at(100))  # recorded before cronoq knew: create it


def _recorded(job_retention: str):
    task = make_task("t").spec(jobRetention=job_retention).obj()
    plan = reconcile(task, settings(task), observe(now=T0, admit=True), random.Random(0))
    assert plan.create_job.number == 1 and plan.status.attempts[0].dispatched_at == T0
    return with_status(task, plan.status)


def test_a_recorded_attempt_without_a_job_is_created_within_job_retention() -> None:
    task = _recorded("1m")
    plan = reconcile(task, settings(task), observe(now=at(59)), random.Random(0))
    assert plan.create_job.number == 1 and plan.status is None


def test_a_recorded_attempt_without_a_job_after_job_retention_is_lost_and_retried() -> None:
    task = _recorded("1m")
    plan = reconcile(task, settings(task), observe(now=at(61)), random.Random(0))
    assert plan.create_job is None
    (attempt,) = plan.status.attempts
    assert attempt.outcome is AttemptOutcome.RETRYABLE and attempt.reason == reasons.JOB_DELETED
    assert "jobRetention" in attempt.message
    assert plan.status.phase is TaskPhase.RETRYING and plan.status.attempt == 1


def test_job_retention_becomes_the_jobs_ttl() -> None:
    task = make_task("t").obj()
    assert "ttlSecondsAfterFinished" not in build_job(task, None, 1, "e1-a1")["spec"]
    job = build_job(task, None, 1, "e1-a1", job_retention=timedelta(milliseconds=1500))
    assert job["spec"]["ttlSecondsAfterFinished"] == 2
    assert build_job(task, None, 1, "e1-a1", job_retention=timedelta(0))["spec"]["ttlSecondsAfterFinished"] == 0


# --------------------------------------------------------------------------- re-timing Jobs

def _kept(ttl: int | None, number: int = 1, task: str = "t"):
    """A finished attempt's Job whose ttlSecondsAfterFinished is `ttl`."""
    return attempt_job(task, number).with_(ttl_after_finished=ttl, finished="Complete", lease_id=lease_id(1, number))


def test_retime_lists_the_jobs_not_at_the_retention_in_effect() -> None:
    jobs = [_kept(3600, 1), _kept(0, 2), _kept(None, 3)]
    assert retime(jobs, timedelta(0)) == (("t-a1", 0), ("t-a3", 0))
    assert retime(jobs, timedelta(milliseconds=1500)) == (("t-a1", 2), ("t-a2", 2), ("t-a3", 2))  # whole seconds, up
    assert retime(jobs, None) == ()  # unknown (no pool): the Jobs keep what they have


def test_retime_leaves_jobs_that_are_going() -> None:
    jobs = [_kept(3600, 1), attempt_job("t", 2).with_(ttl_after_finished=3600, deleting=True),
            attempt_job("t", 3).with_(ttl_after_finished=3600, gone=True), _kept(3600, 4)]
    assert retime(jobs, timedelta(0), deleting=("t-a4",)) == (("t-a1", 0),)


def test_the_tasks_own_job_retention_wins_and_no_pool_means_unknown() -> None:
    pool = TaskPoolSpec.model_validate({"jobRetention": "10m"})
    assert job_retention_of(None, pool, TaskPhase.SUCCEEDED) == timedelta(minutes=10)
    assert job_retention_of(timedelta(seconds=5), pool, TaskPhase.SUCCEEDED) == timedelta(seconds=5)
    assert job_retention_of(timedelta(seconds=5), None, TaskPhase.SUCCEEDED) == timedelta(seconds=5)
    assert job_retention_of(None, None, TaskPhase.SUCCEEDED) is None


def test_a_job_built_with_the_retention_in_effect_is_never_retimed() -> None:
    """The hot path writes nothing more: the Job a reconcile creates already holds the value the
    next reconcile would set."""
    for retention in ("0s", "1500ms", "1h", "720h"):
        task = make_task("t").spec(jobRetention=retention).obj()
        effective = settings(task)
        facts = job_facts(build_job(task, None, 1, "e1-a1", job_retention=effective.job_retention))
        assert facts is not None and facts.ttl_after_finished is not None
        assert retime([facts], effective.job_retention) == ()


def _running(pool_spec: dict, **spec: str):
    task = make_task("t").spec(**spec).obj()
    plan = reconcile(task, settings(task, pool_spec), observe(now=T0, admit=True), random.Random(0))
    return with_status(task, plan.status)


def test_a_running_tasks_job_follows_its_pools_changed_job_retention() -> None:
    task = _running({"jobRetention": "1h"})
    job = attempt_job("t", 1).running(T0).with_(ttl_after_finished=3600, lease_id=lease_id(1, 1))
    unchanged = reconcile(task, settings(task, {"jobRetention": "1h"}), observe(job, now=at(1)), random.Random(0))
    assert unchanged.retime_jobs == ()
    lowered = reconcile(task, settings(task, {"jobRetention": "0s"}), observe(job, now=at(1)), random.Random(0))
    assert lowered.retime_jobs == (("t-a1", 0),) and lowered.status is None  # nothing else changes


def test_a_tasks_own_job_retention_wins_over_its_pools_change() -> None:
    task = _running({"jobRetention": "1h"}, jobRetention="2h")
    job = attempt_job("t", 1).running(T0).with_(ttl_after_finished=7200, lease_id=lease_id(1, 1))
    plan = reconcile(task, settings(task, {"jobRetention": "0s"}), observe(job, now=at(1)), random.Random(0))
    assert plan.retime_jobs == ()


def test_without_its_pool_a_task_leaves_its_jobs_as_they_are() -> None:
    task = _running({"jobRetention": "1h"})
    job = attempt_job("t", 1).running(T0).with_(ttl_after_finished=0, lease_id=lease_id(1, 1))
    plan = reconcile(task, settings(task, None), observe(job, now=at(1), pool_found=False), random.Random(0))
    assert plan.retime_jobs == ()


def test_a_deposed_replica_retimes_nothing() -> None:
    task = _running({"jobRetention": "1h"})
    job = attempt_job("t", 1).running(T0).with_(ttl_after_finished=3600, lease_id=lease_id(1, 1))
    plan = reconcile(task, settings(task, {"jobRetention": "0s"}), observe(job, now=at(1), epoch=0), random.Random(0))
    assert plan.retime_jobs == ()


class _Mark:
    def __init__(self, number: int) -> None:
        self.number, self.lease_id, self.reason = number, lease_id(1, number), None


def test_a_finished_tasks_jobs_are_retimed_finished_ones_included() -> None:
    jobs = [_kept(3600, 1), _kept(3600, 2)]
    plan = settle("t", 2, [_Mark(1), _Mark(2)], jobs, timedelta(0))
    assert plan.retime_jobs == (("t-a1", 0), ("t-a2", 0)) and plan.delete_jobs == ()
    raised = settle("t", 2, [_Mark(1), _Mark(2)], jobs, timedelta(hours=2))
    assert raised.retime_jobs == (("t-a1", 7200), ("t-a2", 7200))
    assert settle("t", 2, [_Mark(1), _Mark(2)], jobs, timedelta(hours=1)).retime_jobs == ()
    assert settle("t", 2, [_Mark(1), _Mark(2)], jobs, None).retime_jobs == ()


def test_a_finished_tasks_running_leftover_is_deleted_not_retimed() -> None:
    leftover = attempt_job("t", 3).running(T0).with_(ttl_after_finished=3600)  # an attempt the status never named
    plan = settle("t", 2, [_Mark(1), _Mark(2)], [_kept(3600, 1), leftover], timedelta(0))
    assert plan.delete_jobs == ("t-a3",) and plan.retime_jobs == (("t-a1", 0),)


# --------------------------------------------------------------------------- retention by outcome

DAY, WEEK = timedelta(days=1), timedelta(days=7)
BY_OUTCOME = {"ttlAfterFinished": "24h", "ttlAfterSuccess": "1h", "ttlAfterFailure": "168h"}
NOT_SUCCEEDED = (TaskPhase.FAILED, TaskPhase.DEAD_LETTERED, TaskPhase.CANCELLED, TaskPhase.SKIPPED)


def _finished(phase: TaskPhase, **spec: str) -> Finished:
    task = make_task("t").spec(**spec).status({"phase": phase, "finishedAt": T0, "attempt": 1}).obj()
    return Finished.of(task)


def _deleted_at(phase: TaskPhase, pool: dict, **spec: str):
    plan = decide(_finished(phase, **spec), observe(now=T0, pool=TaskPoolSpec.model_validate(pool)),
                  random.Random(0))
    return plan.deletion.at


def test_success_and_every_other_end_have_their_own_ttl() -> None:
    assert _deleted_at(TaskPhase.SUCCEEDED, BY_OUTCOME) == T0 + HOUR
    for phase in NOT_SUCCEEDED:
        assert _deleted_at(phase, BY_OUTCOME) == T0 + WEEK, phase


def test_a_plain_ttl_after_finished_still_means_any_outcome() -> None:
    for phase in (TaskPhase.SUCCEEDED, *NOT_SUCCEEDED):
        assert _deleted_at(phase, {"ttlAfterFinished": "1h"}) == T0 + HOUR
    # one outcome given, the other falls back to the general value, else is kept
    assert _deleted_at(TaskPhase.DEAD_LETTERED, {"ttlAfterFinished": "24h", "ttlAfterSuccess": "1h"}) == T0 + DAY
    assert _deleted_at(TaskPhase.DEAD_LETTERED, {"ttlAfterSuccess": "1h"}) is None
    assert _deleted_at(TaskPhase.SUCCEEDED, {"ttlAfterSuccess": "1h"}) == T0 + HOUR


def test_the_tasks_own_ttl_wins_over_the_pools_outcome_ttl() -> None:
    """Own fields first (the outcome's, then the general one), then the pool's in the same order."""
    assert _deleted_at(TaskPhase.SUCCEEDED, BY_OUTCOME, ttlAfterFinished="2h") == T0 + 2 * HOUR
    assert _deleted_at(TaskPhase.FAILED, BY_OUTCOME, ttlAfterFinished="2h", ttlAfterFailure="3h") == T0 + 3 * HOUR
    assert _deleted_at(TaskPhase.SUCCEEDED, BY_OUTCOME, ttlAfterFailure="3h") == T0 + HOUR  # not its outcome


def test_key_retention_outlasts_an_outcomes_shorter_ttl() -> None:
    pool = {**BY_OUTCOME, "ttlAfterSuccess": "0s", "keyRetention": "2h"}
    assert _deleted_at(TaskPhase.SUCCEEDED, pool, key="k") == T0 + 2 * HOUR
    assert _deleted_at(TaskPhase.SUCCEEDED, pool) == T0
    assert _deleted_at(TaskPhase.DEAD_LETTERED, pool, key="k") == T0 + WEEK


def test_a_task_that_ends_now_is_scheduled_by_its_outcome() -> None:
    """The reconcile that ends a task schedules its deletion at once, by the outcome it ended with."""
    task = _running(BY_OUTCOME)
    done = replace(attempt_job("t", 1).exited(0, started=T0, finished=at(4)), lease_id=lease_id(1, 1),
                   ttl_after_finished=WEEK // timedelta(seconds=1))
    plan = decide(Live(task), observe(done, now=at(5), pool=TaskPoolSpec.model_validate(BY_OUTCOME)),
                  random.Random(0))
    assert plan.status.phase is TaskPhase.SUCCEEDED
    assert plan.deletion.at == plan.status.finished_at + HOUR


JOBS_BY_OUTCOME = {"jobRetention": "1h", "jobRetentionAfterSuccess": "10m", "jobRetentionAfterFailure": "168h"}


def test_an_unfinished_tasks_jobs_are_kept_for_the_longest_outcome() -> None:
    task = make_task("t").obj()
    assert settings(task, JOBS_BY_OUTCOME).job_retention == WEEK
    assert settings(task, {"jobRetention": "1h"}).job_retention == HOUR  # no outcome fields: as before
    own = make_task("t").spec(jobRetentionAfterSuccess="2h").obj()
    assert settings(own, {"jobRetention": "30m"}).job_retention == 2 * HOUR
    assert settings(own, JOBS_BY_OUTCOME).job_retention == WEEK


def _retimed(phase: TaskPhase, pool: dict, **spec: str):
    jobs = [_kept(WEEK // timedelta(seconds=1), 1)]
    plan = decide(_finished(phase, **spec), observe(*jobs, now=T0, pool=TaskPoolSpec.model_validate(pool)),
                  random.Random(0))
    return plan.retime_jobs


def test_a_finished_tasks_jobs_are_brought_to_its_outcomes_job_retention() -> None:
    assert _retimed(TaskPhase.SUCCEEDED, JOBS_BY_OUTCOME) == (("t-a1", 600),)
    for phase in NOT_SUCCEEDED:
        assert _retimed(phase, JOBS_BY_OUTCOME) == (), phase  # already at the week
    assert _retimed(TaskPhase.SUCCEEDED, JOBS_BY_OUTCOME, jobRetention="2h") == (("t-a1", 7200),)


def test_without_outcome_fields_a_finished_task_costs_no_retime() -> None:
    """Writes per task stay as they were: the Job's TTL at creation is the one it ends with."""
    task = make_task("t").obj()
    created = settings(task, {"jobRetention": "1h"}).job_retention // timedelta(seconds=1)
    for phase in (TaskPhase.SUCCEEDED, *NOT_SUCCEEDED):
        plan = decide(_finished(phase), observe(_kept(created, 1), now=T0,
                                                pool=TaskPoolSpec.model_validate({"jobRetention": "1h"})),
                      random.Random(0))
        assert plan.retime_jobs == ()
