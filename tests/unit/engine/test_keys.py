"""Idempotency keys (DESIGN §5): one original per key runs; a duplicate of a finished original
copies its outcome at once, a duplicate of an unfinished one waits for it; a finished original
deduplicates for keyRetention."""
from __future__ import annotations

from datetime import timedelta

from hypothesis import given, strategies as st

from cronoq.api import TaskPhase
from cronoq.engine import reasons
from cronoq.engine.keys import Archived, Holder, archived_gate, asks_archive, gate, original, reported

from tests.unit.builders import at

HOUR = timedelta(hours=1)


def test_alone_it_runs() -> None:
    assert gate(Holder("a", at(0)), [], HOUR, at(10)).verdict == "run"


def test_the_oldest_is_the_original_and_the_newer_waits_for_it() -> None:
    old, new = Holder("old", at(0)), Holder("new", at(5))
    assert gate(old, [new], HOUR, at(10)).verdict == "run"
    result = gate(new, [old], HOUR, at(10))
    assert result.verdict == "wait" and result.reason == reasons.WAITING_FOR_ORIGINAL
    assert result.duplicate_of == "old" and "old" in result.message


def test_the_name_breaks_a_tie_in_creation_time() -> None:
    assert gate(Holder("a", at(0)), [Holder("b", at(0))], HOUR, at(1)).verdict == "run"
    assert gate(Holder("b", at(0)), [Holder("a", at(0))], HOUR, at(1)).verdict == "wait"


def test_a_started_task_stays_the_original_even_if_an_older_one_turns_up() -> None:
    running = Holder("running", at(10), phase=TaskPhase.RUNNING, attempt=1)
    late_seen_older = Holder("older", at(0))
    assert gate(running, [late_seen_older], HOUR, at(20)).verdict == "run"
    assert gate(late_seen_older, [running], HOUR, at(20)).duplicate_of == "running"


def test_a_duplicate_of_a_finished_original_copies_its_phase_and_output() -> None:
    done = Holder("orig", at(0), phase=TaskPhase.SUCCEEDED, attempt=2, finished_at=at(30), output="42",
                  output_available=True, message="succeeded on attempt 2")
    result = gate(Holder("dup", at(40)), [done], HOUR, at(50))
    assert result.verdict == "end" and result.phase is TaskPhase.SUCCEEDED
    assert result.output == "42" and result.duplicate_of == "orig" and result.reason == reasons.DUPLICATE
    assert "orig" in result.message and "succeeded on attempt 2" in result.message


def test_only_a_duplicate_of_a_finished_original_reports_it() -> None:
    """What the controller reads in full before deciding: the finished original, and nothing else."""
    done = Holder("orig", at(0), phase=TaskPhase.SUCCEEDED, attempt=1, finished_at=at(30))
    running = Holder("orig", at(0), phase=TaskPhase.RUNNING, attempt=1)
    assert reported(Holder("dup", at(40)), [done], HOUR, at(50)) == done
    assert reported(Holder("dup", at(40)), [running], HOUR, at(50)) is None  # it waits
    assert reported(Holder("dup", at(40)), [done], HOUR, at(30 + 3600)) is None  # retention passed: it runs
    assert reported(Holder("new", at(40)), [], HOUR, at(50)) is None  # it is the original


def test_no_output_is_copied_when_the_original_has_none() -> None:
    done = Holder("orig", at(0), phase=TaskPhase.SUCCEEDED, attempt=1, finished_at=at(1), output=None)
    assert gate(Holder("dup", at(2)), [done], HOUR, at(3)).output is None


def test_every_terminal_phase_is_copied() -> None:
    for phase in (TaskPhase.FAILED, TaskPhase.DEAD_LETTERED, TaskPhase.CANCELLED, TaskPhase.SKIPPED):
        done = Holder("orig", at(0), phase=phase, finished_at=at(1))
        result = gate(Holder("dup", at(2)), [done], HOUR, at(3))
        assert (result.verdict, result.phase) == ("end", phase)


def test_after_key_retention_a_new_task_with_the_key_runs() -> None:
    done = Holder("orig", at(0), phase=TaskPhase.SUCCEEDED, attempt=1, finished_at=at(100))
    assert gate(Holder("dup", at(150)), [done], HOUR, at(100 + 3599)).verdict == "end"
    assert gate(Holder("dup", at(150)), [done], HOUR, at(100 + 3600)).verdict == "run"


def test_zero_retention_deduplicates_only_unfinished_originals() -> None:
    done = Holder("orig", at(0), phase=TaskPhase.SUCCEEDED, finished_at=at(1))
    assert gate(Holder("new", at(2)), [done], timedelta(0), at(2)).verdict == "run"
    busy = Holder("orig", at(0), phase=TaskPhase.RUNNING, attempt=1)
    assert gate(Holder("new", at(2)), [busy], timedelta(0), at(2)).verdict == "wait"


def test_a_duplicate_is_never_an_original() -> None:
    dup = Holder("dup", at(0), phase=TaskPhase.SUCCEEDED, finished_at=at(1), duplicate_of="gone")
    assert gate(Holder("new", at(5)), [dup], HOUR, at(6)).verdict == "run"


def test_a_duplicate_follows_its_original_to_the_end() -> None:
    orig, dup = Holder("orig", at(0), phase=TaskPhase.RUNNING, attempt=1), Holder("dup", at(1))
    assert gate(dup, [orig], HOUR, at(2)).verdict == "wait"
    waiting = Holder("dup", at(1), phase=TaskPhase.BLOCKED, duplicate_of="orig")
    finished = Holder("orig", at(0), phase=TaskPhase.DEAD_LETTERED, attempt=3, finished_at=at(9), message="boom")
    result = gate(waiting, [finished], HOUR, at(10))
    assert (result.verdict, result.phase, result.duplicate_of) == ("end", TaskPhase.DEAD_LETTERED, "orig")


holders = st.lists(
    st.builds(Holder, name=st.from_regex(r"[a-z]{1,4}", fullmatch=True), created_at=st.integers(0, 50).map(at),
              phase=st.sampled_from([None, TaskPhase.BLOCKED, TaskPhase.QUEUED, TaskPhase.RUNNING]),
              attempt=st.integers(0, 2)),
    min_size=1, max_size=8, unique_by=lambda h: h.name)


@given(group=holders)
def test_exactly_one_task_of_a_key_runs(group: list[Holder]) -> None:
    runs = [h.name for h in group if gate(h, [o for o in group if o is not h], HOUR, at(100)).verdict == "run"]
    assert len(runs) == 1
    first = original(group, HOUR, at(100))
    assert runs == [first.name]
    for h in group:
        if h is not first:
            assert gate(h, [o for o in group if o is not h], HOUR, at(100)).duplicate_of == first.name


# A finished original deleted from the cluster, as the archive keeps it (keys.archived_gate).

def test_an_archived_original_within_its_retention_ends_the_task_with_its_outcome_and_output() -> None:
    gone = Holder("orig", at(0), phase=TaskPhase.SUCCEEDED, attempt=2, finished_at=at(30), output="42",
                  output_available=True, message="succeeded on attempt 2")
    result = archived_gate(Archived(gone), HOUR, at(50))
    assert (result.verdict, result.phase, result.output, result.duplicate_of) == ("end", TaskPhase.SUCCEEDED, "42",
                                                                                   "orig")
    assert result.reason == reasons.DUPLICATE and "archive" in result.message and "attempt 2" in result.message


def test_an_archived_original_without_an_output_gives_none() -> None:
    gone = Holder("orig", at(0), phase=TaskPhase.SUCCEEDED, attempt=1, finished_at=at(30), output=None)
    result = archived_gate(Archived(gone), HOUR, at(50))
    assert (result.verdict, result.output) == ("end", None)


def test_the_archive_holds_the_key_back_only_within_its_retention_and_only_for_an_original() -> None:
    gone = Holder("orig", at(0), phase=TaskPhase.FAILED, attempt=1, finished_at=at(100))
    assert archived_gate(Archived(gone), HOUR, at(100 + 3599)).phase is TaskPhase.FAILED
    assert archived_gate(Archived(gone), HOUR, at(100 + 3600)).verdict == "run"
    duplicate = Holder("dup", at(0), phase=TaskPhase.SUCCEEDED, finished_at=at(100), duplicate_of="orig")
    assert archived_gate(Archived(duplicate), HOUR, at(101)).verdict == "run"
    assert archived_gate(Archived(None), HOUR, at(101)).verdict == "run"
    assert archived_gate(Archived(None, answered=False), HOUR, at(101)).verdict == "run"


def test_only_a_task_never_let_past_its_key_asks_the_archive() -> None:
    assert asks_archive(Holder("new", at(0)))
    assert asks_archive(Holder("w", at(0), phase=TaskPhase.BLOCKED, duplicate_of="gone"))
    assert not asks_archive(Holder("q", at(0), phase=TaskPhase.QUEUED))
    assert not asks_archive(Holder("b", at(0), phase=TaskPhase.BLOCKED))  # waiting for a dependency
