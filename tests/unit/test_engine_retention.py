"""Lifetime of finished work (`engine.retention`, DESIGN §10): when a finished task may be
deleted, and when an attempt whose Job is not seen counts as lost rather than never created."""
from __future__ import annotations

import random
from datetime import timedelta

from cronoq.api import AttemptOutcome, TaskPhase, TaskPoolSpec
from cronoq.engine import reasons
from cronoq.engine.attempts import reconcile
from cronoq.engine.jobs import build_job
from cronoq.engine.retention import expires_at, job_may_be_gone, task_expires_at

from tests.unit.builders import T0, at, make_task, observe, settings, with_status

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
    assert task_expires_at(T0, None, None, pool) == T0 + HOUR
    assert task_expires_at(T0, timedelta(seconds=5), None, pool) == at(5)
    assert task_expires_at(T0, timedelta(seconds=5), "k", pool) == T0 + timedelta(minutes=10)
    assert task_expires_at(None, timedelta(seconds=5), None, pool) is None
    assert task_expires_at(T0, None, None, None) is None  # no pool: DESIGN's default keeps tasks


def test_job_may_be_gone_only_after_its_retention() -> None:
    assert not job_may_be_gone(T0, HOUR, T0 + HOUR - timedelta(microseconds=1))
    assert job_may_be_gone(T0, HOUR, T0 + HOUR)
    assert not job_may_be_gone(None, timedelta(0), at(100))  # recorded before cronoq knew: create it


def _recorded(job_retention: str):
    task = make_task("t").spec(jobRetention=job_retention).obj()
    plan = reconcile(task, settings(task), observe(now=T0, admit=True), random.Random(0))
    assert plan.create_job == 1 and plan.status.attempts[0].dispatched_at == T0
    return with_status(task, plan.status)


def test_a_recorded_attempt_without_a_job_is_created_within_job_retention() -> None:
    task = _recorded("1m")
    plan = reconcile(task, settings(task), observe(now=at(59)), random.Random(0))
    assert plan.create_job == 1 and plan.status is None


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
