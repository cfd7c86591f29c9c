"""What the archive keeps of a task (engine/history.py): the rows a status records, read from the
status alone, so any writer (the leader as attempts end, a new leader catching up, the deletion
gate) writes the same rows."""
from __future__ import annotations

from typing import Any

from cronoq.api import TaskStatus
from cronoq.engine import history
from cronoq.engine.history import Identity

from tests.unit.builders import at, make_task


def attempt(number: int, outcome: str | None = None, **more: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"number": number, "job": f"t-a{number}", "trigger": "First" if number == 1 else "Retry",
                            "dispatchedAt": at(number * 10).isoformat()}
    if outcome is not None:
        base.update(outcome=outcome, startedAt=at(number * 10 + 1).isoformat(),
                    finishedAt=at(number * 10 + 3).isoformat(), durationMs=2000)
    return {**base, **more}


def status(phase: str, *attempts: dict[str, Any], **more: Any) -> TaskStatus:
    return TaskStatus.model_validate({"phase": phase, "attempt": len(attempts), "attempts": list(attempts), **more})


WHO = Identity.of(make_task("t").spec(key="k1", pool="p").obj())


def test_only_ended_attempts_give_rows_and_an_unfinished_task_gives_no_task_row() -> None:
    s = status("Running", attempt(1, "Retryable", exitCode=1, reason="Error", message="boom"), attempt(2))
    rows = history.rows(WHO, s)
    assert rows.task is None
    assert [(r.attempt, r.outcome, r.exit_code, r.reason, r.message) for r in rows.attempts] == [
        (1, "Retryable", 1, "Error", "boom")]
    row = rows.attempts[0]
    assert (row.task_uid, row.namespace, row.name, row.pool, row.key) == ("uid-t", "ns", "t", "p", "k1")
    assert (row.delivery, row.trigger, row.job, row.worker, row.duration_ms) == ("Job", "First", "t-a1", None, 2000)
    assert (row.started_at, row.finished_at) == (at(11), at(13))


def test_a_finished_task_gives_its_row_and_every_attempt_its_status_holds() -> None:
    s = status("Succeeded", attempt(1, "Retryable"), attempt(2, "Success"), output='{"n": 1}', outputAvailable=True,
               message="succeeded on attempt 2", finishedAt=at(23).isoformat(),
               conditions=[{"type": "Ready", "status": "True", "reason": "Succeeded", "message": "m",
                            "lastTransitionTime": at(23).isoformat()}])
    rows = history.rows(WHO, s, only=frozenset({2}))  # `only` is for a running task: a finished one gives all
    assert [r.attempt for r in rows.attempts] == [1, 2]
    assert rows.task is not None
    assert (rows.task.phase, rows.task.attempts, rows.task.output, rows.task.output_available, rows.task.reason,
            rows.task.message, rows.task.finished_at) == (
        "Succeeded", 2, '{"n": 1}', True, "Succeeded", "succeeded on attempt 2", at(23))


def test_a_write_adds_only_the_attempts_it_ended() -> None:
    before = status("Running", attempt(1, "Retryable"), attempt(2))
    after = status("Retrying", attempt(1, "Retryable"), attempt(2, "Retryable"))
    assert history.ended(before, after) == {2}
    assert history.ended(None, after) == {1, 2}
    assert history.ended(after, after) == set(), "the same status again adds nothing"
    rows = history.rows(WHO, after, history.ended(before, after))
    assert [r.attempt for r in rows.attempts] == [2] and rows.task is None


def test_the_same_status_gives_equal_rows_whoever_reads_it() -> None:
    """Idempotence starts here: rows are values of the status, equal each time it is read."""
    s = status("Failed", attempt(1, "Retryable"), attempt(2, "Permanent", exitCode=2),
               finishedAt=at(30).isoformat())
    assert history.rows(WHO, s) == history.rows(WHO, TaskStatus.model_validate(s.to_dict()))


def test_the_delivery_is_read_from_the_attempt_and_the_spec() -> None:
    served = status("Running", attempt(1, "Success", worker="w-1", job=None))
    assert history.rows(WHO, served).attempts[0].delivery == "Workers"
    pushed = Identity.of(make_task("h").unset("image").spec(http={"url": "https://example.com/x"}).obj())
    assert history.rows(pushed, status("Running", attempt(1, "Retryable"))).attempts[0].delivery == "Push"
    answered = status("Running", attempt(1, "Retryable", responseCode=503))  # http from the pool's template
    assert history.rows(WHO, answered).attempts[0].delivery == "Push"
    assert history.rows(WHO, answered).attempts[0].response_code == 503


def test_a_task_that_ended_without_running_has_a_task_row_and_no_attempt_rows() -> None:
    s = TaskStatus.model_validate({"phase": "Succeeded", "attempt": 0, "duplicateOf": "orig",
                                   "finishedAt": at(1).isoformat(), "message": "same key as task orig"})
    rows = history.rows(WHO, s)
    assert rows.attempts == () and rows.task is not None and rows.task.duplicate_of == "orig"
    assert not history.rows(WHO, None) and not history.rows(WHO, status("Queued"))
