"""Schedules that catch up (issue 54, item 4), decided on the injected clock: a catch-up window
runs missed fires oldest first within the concurrency policy, BufferOne and BufferAll hold a fire
until the running one ends, a fire whose Task exists already is not made again, and pauseAfterFailures
pauses after N failures in a row, a success resetting the count; and a property: through crashes
between create and status write, every fire time is created, skipped or missed exactly once."""
from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings, strategies as st

from cronoq.engine import schedule as sched
from cronoq.engine.schedule import Fired, decide, task_name

from tests.unit.engine.test_schedule import T0, after, make

S = timedelta(seconds=1)


def run(s, tasks, now, limit=50):
    """Decide again and again at `now` while the decision asks for it (wake_at == now), applying
    each create as a running Task; the fires created, oldest first, and the last schedule."""
    created = []
    for _ in range(limit):
        d = decide(s, tasks, now)
        if d.create is not None:
            created.append(d.create)
            tasks = [*tasks, Fired(task_name("s", d.create), d.create)]
        s = after(s, d)
        if d.wake_at != now:
            return created, s, tasks, d
    raise AssertionError("no rest")


def done(tasks, name, at, ok=True):
    """`tasks` with `name` finished at `at` (succeeded or failed)."""
    return [Fired(t.name, t.fire_time, finished=True, succeeded=ok, failed=not ok, finished_at=at)
            if t.name == name else t for t in tasks]


def test_without_the_new_fields_only_the_latest_missed_fire_runs_as_before():
    s = make(every="10s")
    s = after(s, decide(s, [], T0))
    created, s, _, _ = run(s, [], T0 + 65 * S)
    assert created == [T0 + 60 * S] and s.status.missed_fires == 5


def test_catch_up_after_downtime_runs_the_missed_fires_in_the_window_oldest_first():
    s = make(every="10s", catchupWindow="35s")
    s = after(s, decide(s, [], T0))
    created, s, _, last = run(s, [], T0 + 65 * S)
    # 30s..60s are within 35s of 65s; 10s and 20s are older: missed.
    assert created == [T0 + 30 * S, T0 + 40 * S, T0 + 50 * S, T0 + 60 * S]
    assert s.status.missed_fires == 2 and s.status.handled_through == T0 + 60 * S
    assert last.wake_at == T0 + 70 * S and s.status.last_fire_time == T0 + 60 * S


def test_catch_up_within_forbid_runs_the_oldest_and_skips_the_rest_while_it_runs():
    s = make(every="10s", catchupWindow="1h", concurrencyPolicy="Forbid")
    s = after(s, decide(s, [], T0))
    created, s, _, _ = run(s, [], T0 + 35 * S)
    assert created == [T0 + 10 * S] and s.status.skipped_fires == 2 and s.status.missed_fires == 0


def test_catch_up_after_a_crash_records_a_fire_whose_task_exists_and_goes_on():
    s = make(every="10s", catchupWindow="1h")
    s = after(s, decide(s, [], T0))
    made = [Fired(task_name("s", T0 + 10 * S), T0 + 10 * S)]  # created, status never written
    created, s, _, _ = run(s, made, T0 + 25 * S)
    assert created == [T0 + 20 * S] and s.status.handled_through == T0 + 20 * S


def first_fire_running(policy: str, waits: tuple[int, ...]):
    """A schedule every 10s with `policy`: its first fire (10 s) is created and still runs while
    the fire times `waits` (seconds) pass, none of which creates a Task; (schedule, tasks)."""
    s = make(every="10s", concurrencyPolicy=policy)
    s = after(s, decide(s, [], T0))
    created, s, tasks, _ = run(s, [], T0 + 10 * S)
    assert created == [T0 + 10 * S]
    for now in waits:
        d = decide(s, tasks, T0 + now * S)
        assert d.create is None
        s = after(s, d)
    return s, tasks


def test_buffer_one_starts_the_newest_waiting_fire_when_the_running_one_ends():
    s, tasks = first_fire_running("BufferOne", (20, 30, 40))  # the newest waiting fire waits
    assert s.status.skipped_fires == 2 and s.status.handled_through == T0 + 30 * S
    tasks = done(tasks, task_name("s", T0 + 10 * S), T0 + 42 * S)
    created, s, _, _ = run(s, tasks, T0 + 42 * S)
    assert created == [T0 + 40 * S] and s.status.handled_through == T0 + 40 * S


def test_buffer_all_starts_every_waiting_fire_oldest_first_one_at_a_time():
    s, tasks = first_fire_running("BufferAll", (20, 30))
    assert s.status.handled_through == T0 + 10 * S and s.status.skipped_fires == 0
    fires = [T0 + 10 * S]
    for end in (33, 36):  # each ends; the oldest waiting fire starts
        tasks = done(tasks, task_name("s", fires[-1]), T0 + end * S)
        created, s, tasks, _ = run(s, tasks, T0 + end * S)
        assert len(created) == 1
        fires.append(created[0])
    assert fires == [T0 + 10 * S, T0 + 20 * S, T0 + 30 * S] and s.status.handled_through == T0 + 30 * S


def test_buffer_all_waiting_fires_older_than_the_window_are_missed():
    s = make(every="10s", concurrencyPolicy="BufferAll", catchupWindow="15s")
    s = after(s, decide(s, [], T0))
    created, s, tasks, _ = run(s, [], T0 + 10 * S)
    for now in (20, 30, 40):
        s = after(s, decide(s, tasks, T0 + now * S))
    tasks = done(tasks, task_name("s", T0 + 10 * S), T0 + 41 * S)
    created, s, _, _ = run(s, tasks, T0 + 41 * S)
    assert created == [T0 + 30 * S] and s.status.missed_fires == 1  # 20s was 21s old


def test_catch_up_does_not_make_again_a_fire_whose_task_exists_already():
    s = make(every="10s", catchupWindow="1h")
    s = after(s, decide(s, [], T0))
    made = [Fired(task_name("s", T0 + 20 * S), T0 + 20 * S, finished=True, succeeded=True,
                  finished_at=T0 + 21 * S)]
    created, s, _, _ = run(s, made, T0 + 35 * S)
    assert created == [T0 + 10 * S, T0 + 30 * S]


def test_the_fire_times_of_a_range_oldest_first():
    every = sched.timetable(None, timedelta(hours=1))
    assert every.times(T0, T0 + 3 * timedelta(hours=1)) == [T0 + k * timedelta(hours=1) for k in (1, 2, 3)]
    cron = sched.timetable("0 * * * *", None)
    assert cron.times(T0, T0 + 3 * timedelta(hours=1)) == every.times(T0, T0 + 3 * timedelta(hours=1))


def failing_schedule(n=3):
    s = make(every="10s", pauseAfterFailures=n)
    return after(s, decide(s, [], T0))


def test_n_failures_in_a_row_pause_with_a_condition():
    s = failing_schedule(3)
    tasks = []
    for k in (1, 2, 3):
        tasks.append(Fired(f"s-{k}", T0 + k * 10 * S, finished=True, failed=True, finished_at=T0 + (k * 10 + 5) * S))
        s = after(s, decide(s, tasks, T0 + (k * 10 + 5) * S))
    assert s.status.consecutive_failures == 3
    paused = next(c for c in s.status.conditions if c.type == "Paused")
    assert paused.status.value == "True" and paused.reason == "ConsecutiveFailures" and "s-3" in paused.message
    ready = next(c for c in s.status.conditions if c.type == "Ready")
    assert ready.status.value == "False" and ready.reason == "PausedAfterFailures"
    d = decide(s, tasks, T0 + 100 * S)
    assert d.create is None and (d.status or s.status).next_fire_time is None


def test_a_success_resets_the_count():
    s = failing_schedule(2)
    tasks = [Fired("s-1", T0 + 10 * S, finished=True, failed=True, finished_at=T0 + 11 * S)]
    s = after(s, decide(s, tasks, T0 + 12 * S))
    assert s.status.consecutive_failures == 1
    tasks.append(Fired("s-2", T0 + 20 * S, finished=True, succeeded=True, finished_at=T0 + 21 * S))
    tasks.append(Fired("s-3", T0 + 30 * S, finished=True, failed=True, finished_at=T0 + 31 * S))
    s = after(s, decide(s, tasks, T0 + 32 * S))
    assert s.status.consecutive_failures == 1
    assert not any(c.type == "Paused" for c in s.status.conditions)


def test_the_count_survives_pruning_and_a_spec_edit_resumes():
    s = failing_schedule(2)
    s = after(s, decide(s, [Fired("s-1", T0 + 10 * S, finished=True, failed=True, finished_at=T0 + 11 * S)],
                        T0 + 12 * S))
    # s-1 pruned by the history limit: still counted.
    s = after(s, decide(s, [Fired("s-2", T0 + 20 * S, finished=True, failed=True, finished_at=T0 + 21 * S)],
                        T0 + 22 * S))
    assert any(c.type == "Paused" and c.status.value == "True" for c in s.status.conditions)
    resumed = make(every="10s", pauseAfterFailures=2, generation=2, status=s.status.to_dict())
    d = decide(resumed, [], T0 + 45 * S)
    paused = next(c for c in d.status.conditions if c.type == "Paused")
    assert paused.status.value == "False" and paused.reason == "Resumed"
    assert d.status.consecutive_failures == 0 and d.status.next_fire_time == T0 + 50 * S
    assert d.create is None  # fires that passed while paused are not caught up on


def play(s, steps, now):
    """Time moves in `steps` of (seconds, crash, finish) from `now`: at each, running Tasks may end,
    and the decision may crash between the create and the status write (once). Decides again while
    the decision asks for it. Returns (the schedule, its Tasks, the fire times created, in order)."""
    tasks: list[Fired] = []
    created: list = []
    for advance, crash, finish in steps:
        now += advance * S
        if finish:
            tasks = [Fired(t.name, t.fire_time, finished=True, succeeded=True, finished_at=now) for t in tasks]
        for _ in range(100):
            d = decide(s, tasks, now)
            if d.create is not None and d.create not in {t.fire_time for t in tasks}:
                created.append(d.create)
                tasks.append(Fired(task_name("s", d.create), d.create))
            if d.cancel:
                tasks = [Fired(t.name, t.fire_time, finished=True, finished_at=now) if t.name in d.cancel else t
                         for t in tasks]
            if crash and d.create is not None:
                crash = False
                continue  # the status write never happened
            s = after(s, d)
            if d.wake_at != now:
                break
    return s, tasks, created


@settings(max_examples=60, deadline=None)
@given(policy=st.sampled_from(["Allow", "Forbid", "Replace", "BufferOne", "BufferAll"]),
       window=st.sampled_from([None, "25s", "1h"]),
       steps=st.lists(st.tuples(st.integers(1, 40), st.booleans(), st.booleans()), min_size=1, max_size=25))
def test_every_fire_time_is_created_skipped_or_missed_exactly_once(policy, window, steps):
    """Time moves in steps; at each, the decision may crash between the create and the status
    write, and running Tasks may end. No fire time is created twice, and at the end every fire
    time up to handledThrough is created, skipped or missed once."""
    spec = {"every": "10s", "concurrencyPolicy": policy}
    if window:
        spec["catchupWindow"] = window
    s = make(**spec)
    s = after(s, decide(s, [], T0))
    s, tasks, created = play(s, steps, T0)
    assert len(created) == len(set(created))
    st_ = s.status
    total = sched.timetable(None, timedelta(seconds=10)).span(T0, st_.handled_through).count
    recorded = sum(1 for c in created if c <= st_.handled_through)
    assert recorded + st_.skipped_fires + st_.missed_fires == total
