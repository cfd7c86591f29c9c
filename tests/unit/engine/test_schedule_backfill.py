"""Backfill (issue 54, item 4): spec.backfills runs past fire times, oldest first, each exactly
once — through repeated decisions, crashes between the create and the status write, and fire
times whose Task exists already — after the schedule's own due fires; and adding a range is not
an edit of the fires. Decided on the injected clock."""
from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings, strategies as st

from cronoq.engine.schedule import Fired, decide, task_manifest, task_name

from tests.unit.engine.test_schedule import T0, after, make
from tests.unit.engine.test_schedule_catchup import done, play, run

S = timedelta(seconds=1)
H = timedelta(hours=1)


def backfilled(s, ranges, generation=2):
    """`s` with spec.backfills set to `ranges` ((start, end) pairs), as a new generation."""
    spec = s.spec.to_dict()
    spec["backfills"] = [{"start": a.isoformat(), "end": b.isoformat()} for a, b in ranges]
    return make(generation=generation, status=s.status.to_dict() if s.status else None, **{
        k: v for k, v in spec.items() if k != "taskTemplate"})


def running_hourly(policy="Allow", **spec):
    """An hourly schedule made at T0 + 10h, decided once at T0 + 10h + 1 s."""
    s = make(every="1h", concurrencyPolicy=policy, created=T0 + 10 * H, **spec)
    return after(s, decide(s, [], T0 + 10 * H + S))


def test_allow_backfills_each_past_fire_time_of_the_range_oldest_first_with_its_own_trigger():
    s = backfilled(running_hourly(), [(T0 + 2 * H, T0 + 5 * H)])
    created, s, _, last = run(s, [], T0 + 10 * H + 2 * S)
    assert created == [T0 + 2 * H, T0 + 3 * H, T0 + 4 * H, T0 + 5 * H]
    progress = s.status.backfills[0]
    assert progress.done and progress.created == 4 and progress.through == T0 + 5 * H
    assert s.status.handled_through == T0 + 10 * H and s.status.missed_fires == 0, "the schedule's own fires untouched"
    assert last.wake_at == T0 + 11 * H
    manifest = task_manifest(s, T0 + 2 * H, backfill=True)
    assert manifest["metadata"]["name"] == task_name("s", T0 + 2 * H), "named as the scheduled fire of its time"
    assert manifest["metadata"]["labels"]["cronoq.io/trigger"] == "backfill"


def test_a_fire_time_whose_task_exists_is_not_made_again():
    s = backfilled(running_hourly(), [(T0 + 2 * H, T0 + 4 * H)])
    there = [Fired(task_name("s", T0 + 3 * H), T0 + 3 * H)]
    created, s, _, _ = run(s, there, T0 + 10 * H + 2 * S)
    assert created == [T0 + 2 * H, T0 + 4 * H] and s.status.backfills[0].created == 2


def test_forbid_backfills_one_at_a_time_each_when_none_runs():
    s = backfilled(running_hourly("Forbid"), [(T0 + 2 * H, T0 + 4 * H)])
    now = T0 + 10 * H + 2 * S
    created, s, tasks, last = run(s, [], now)
    assert created == [T0 + 2 * H] and last.wake_at == T0 + 11 * H
    tasks = done(tasks, task_name("s", T0 + 2 * H), now + S)
    created, s, tasks, _ = run(s, tasks, now + 2 * S)
    assert created == [T0 + 3 * H] and not s.status.backfills[0].done


def test_the_schedules_own_due_fire_goes_first():
    s = backfilled(running_hourly(), [(T0 + 2 * H, T0 + 3 * H)])
    d = decide(s, [], T0 + 11 * H)
    assert d.create == T0 + 11 * H and not d.backfill and d.wake_at == T0 + 11 * H, "then the backfill, at once"
    created, s, _, _ = run(after(s, d), [Fired(task_name("s", d.create), d.create)], T0 + 11 * H)
    assert created == [T0 + 2 * H, T0 + 3 * H]


def test_a_range_past_now_stops_at_now_and_a_huge_one_is_refused():
    s = backfilled(running_hourly(), [(T0 + 8 * H, T0 + 30 * H), (T0 - 2000 * 24 * H, T0)])
    created, s, _, _ = run(s, [], T0 + 10 * H + 2 * S)
    assert created == [T0 + 8 * H, T0 + 9 * H, T0 + 10 * H]
    first, huge = s.status.backfills
    assert first.done and huge.refused.startswith("more than 10,000 fire times") and huge.created == 0


def test_adding_a_range_is_not_an_edit_a_waiting_fire_and_a_pause_stay():
    s = make(every="10s", concurrencyPolicy="BufferAll")
    s = after(s, decide(s, [], T0))
    created, s, tasks, _ = run(s, [], T0 + 10 * S)
    s = after(s, decide(s, tasks, T0 + 25 * S))  # the fire at 20 s waits behind the first
    assert s.status.handled_through == T0 + 10 * S
    edited = backfilled(s, [(T0 - 30 * S, T0 - 10 * S)])
    d = decide(edited, tasks, T0 + 26 * S)
    assert d.status.handled_through == T0 + 10 * S, "the waiting fire still waits"
    assert d.create is None, "BufferAll: the backfill waits too, while a Task runs"


@settings(max_examples=40, deadline=None)
@given(policy=st.sampled_from(["Allow", "Forbid", "BufferAll"]),
       steps=st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.booleans()), min_size=1, max_size=30))
def test_each_backfilled_fire_time_is_created_once_through_crashes_and_failovers(policy, steps):
    """At each step time may move, the decision may crash between the create and the status write,
    and running Tasks may end. No fire time is created twice; once nothing runs and the decisions
    rest, every fire time of the range has its Task."""
    s = backfilled(running_hourly(policy), [(T0, T0 + 9 * H)])
    s, _, created = play(s, [*steps, *[(0, False, True)] * 14], T0 + 10 * H + 2 * S)
    backfill = [c for c in created if c <= T0 + 9 * H]
    assert len(backfill) == len(set(backfill)) and sorted(backfill) == [T0 + i * H for i in range(10)]
    assert s.status.backfills[0].done
