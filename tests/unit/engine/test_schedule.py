"""The schedule decisions (engine/schedule.py), with the clock passed in: fire times against the
library on ordinary and daylight-saving days, missed-fire accounting, concurrency policies,
history pruning, names; and a property: through crashes between create and status write, every
fire time is created, skipped or counted as missed exactly once."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import given, settings, strategies as st

from cronoq.api import TaskSchedule
from cronoq.engine import schedule as sched
from cronoq.engine.schedule import Fired, InvalidSchedule, decide, timetable

UTC = timezone.utc
NY = ZoneInfo("America/New_York")
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def make(name: str = "s", *, status: dict | None = None, generation: int = 1, created: datetime = T0,
         **spec) -> TaskSchedule:
    if "schedule" not in spec and "every" not in spec:
        spec["every"] = "10s"
    body = {"apiVersion": "cronoq.io/v1alpha1", "kind": "TaskSchedule",
            "metadata": {"name": name, "namespace": "ns", "uid": "u-1", "generation": generation,
                         "creationTimestamp": created.isoformat()},
            "spec": {"taskTemplate": {"spec": {"image": "busybox"}}, **spec}}
    if status is not None:
        body["status"] = status
    return TaskSchedule.model_validate(body)


def after(schedule: TaskSchedule, decision: sched.Decision, generation: int = 1) -> TaskSchedule:
    """The schedule as it reads once the decision's status was written."""
    status = (decision.status or schedule.status)
    return schedule.model_copy(update={"status": status})


# --------------------------------------------------------------------------- timetables

def local(day: str, hm: str, zone=NY) -> datetime:
    return datetime.fromisoformat(f"{day}T{hm}").replace(tzinfo=zone)


@pytest.mark.parametrize("day, expected_utc", [
    ("2026-03-07", "2026-03-07T07:30:00+00:00"),   # an ordinary day, EST
    ("2026-03-08", "2026-03-08T07:00:00+00:00"),   # spring forward: 02:30 does not exist → 03:00 EDT
    ("2026-03-09", "2026-03-09T06:30:00+00:00"),   # EDT
    ("2026-11-01", "2026-11-01T07:30:00+00:00"),   # fall back: 02:30 EST, once
])
def test_0230_daily_fires_exactly_once_on_each_day(day, expected_utc):
    table = timetable("30 2 * * *", None, "America/New_York")
    start = local(day, "00:00").astimezone(UTC)
    span = table.span(start, local(day, "23:59").astimezone(UTC))
    assert span.count == 1
    assert span.latest.isoformat() == expected_utc


def test_a_time_that_happens_twice_fires_at_its_first_occurrence_only():
    table = timetable("30 1 * * *", None, "America/New_York")
    start = local("2026-11-01", "00:00").astimezone(UTC)
    fires = [table.after(start)]
    fires.append(table.after(fires[0]))
    assert fires[0].isoformat() == "2026-11-01T05:30:00+00:00"   # 01:30 EDT
    assert fires[1].isoformat() == "2026-11-02T06:30:00+00:00"   # next day, 01:30 EST
    # Asked from inside the repeated hour (01:15 EST, after 01:30 EDT), the past occurrence is not returned.
    inside = datetime(2026, 11, 1, 6, 15, tzinfo=UTC)
    assert table.after(inside).isoformat() == "2026-11-02T06:30:00+00:00"


@settings(max_examples=100, deadline=None)
@given(start=st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2035, 1, 1)),
       expression=st.sampled_from(["*/5 * * * *", "0 9 * * MON-FRI", "15 3 1 * *", "0 0 * * 0", "7 */2 * * *"]))
def test_cron_fire_times_are_the_librarys_in_utc(start, expression):
    start = start.replace(tzinfo=UTC)
    table = timetable(expression, None, "UTC")
    ours = [table.after(start)]
    for _ in range(4):
        ours.append(table.after(ours[-1]))
    it = CronSim(expression, start)
    theirs = [next(it).astimezone(UTC) for _ in range(5)]
    assert ours == theirs


@settings(max_examples=200, deadline=None)
@given(seconds=st.integers(1, 7200), a=st.integers(0, 10**6), width=st.integers(0, 20000),
       micro=st.integers(0, 999_999))
def test_every_span_counts_the_multiples_in_the_interval(seconds, a, width, micro):
    table = sched.Every(seconds)
    start = T0 + timedelta(seconds=a, microseconds=micro)
    end = start + timedelta(seconds=width)
    span = table.span(start, end)
    brute = [k for k in range(sched.unix(start) // seconds, sched.unix(end) // seconds + 2)
             if start < sched.EPOCH + timedelta(seconds=k * seconds) <= end]
    assert span.count == len(brute)
    if brute:
        assert span.latest == sched.EPOCH + timedelta(seconds=brute[-1] * seconds)
    nxt = table.after(start)
    assert nxt > start and nxt - start <= timedelta(seconds=seconds) and sched.unix(nxt) % seconds == 0


def test_macros_and_refusals():
    assert timetable("@hourly", None).after(T0 + timedelta(minutes=1)) == T0 + timedelta(hours=1)
    assert timetable("@daily", None).after(T0) == datetime(2026, 3, 2, tzinfo=UTC)
    for bad, words in [("61 * * * *", "Bad minute"), ("* * 31 2 *", "Bad day-of-month"),
                       ("@reboot", "five fields"), ("* * * * * *", "five fields")]:
        with pytest.raises(InvalidSchedule, match=words):
            timetable(bad, None)
    with pytest.raises(InvalidSchedule, match="Mars/Base"):
        timetable("* * * * *", None, "Mars/Base")


def test_the_cron_scan_is_bounded():
    table = timetable("* * * * *", None)
    span = table.span(T0, T0 + timedelta(days=30), limit=100)
    assert span.truncated and span.count == 100 and span.latest == T0 + timedelta(minutes=100)


# --------------------------------------------------------------------------- names

def test_names_are_deterministic_distinct_and_fit():
    at = datetime(2026, 1, 1, tzinfo=UTC)
    assert sched.task_name("nightly", at) == "nightly-1767225600"
    assert sched.task_name("nightly", at, manual=True) == "nightly-manual-1767225600"
    assert sched.task_key("nightly", at) == "nightly@1767225600"
    long = "x" * 63
    a, b = sched.task_name(long, at), sched.task_name(long + "y"[:0], at + timedelta(seconds=1))
    assert len(a) <= 63 and len(b) <= 63 and a != b
    assert sched.task_name("y" * 63, at) != sched.task_name("y" * 62 + "z", at)


def test_the_task_manifest_is_the_template_owned_labelled_and_keyed():
    s = make("nightly", every="1h", taskTemplate={"metadata": {"labels": {"team": "a"}, "annotations": {"n": "1"}},
                                                  "spec": {"image": "busybox", "pool": "batch", "priority": 5}})
    at = datetime(2026, 1, 1, tzinfo=UTC)
    m = sched.task_manifest(s, at)
    assert m["metadata"]["name"] == "nightly-1767225600"
    assert m["metadata"]["labels"] == {"team": "a", sched.SCHEDULE: "nightly", sched.FIRE_TIME: "1767225600",
                                       sched.TRIGGER: "schedule"}
    assert m["metadata"]["annotations"] == {"n": "1"}
    assert m["metadata"]["ownerReferences"] == [{"apiVersion": "cronoq.io/v1alpha1", "kind": "TaskSchedule",
                                                 "name": "nightly", "uid": "u-1", "controller": True}]
    assert m["spec"]["pool"] == "batch" and m["spec"]["priority"] == 5 and m["spec"]["key"] == "nightly@1767225600"


def test_a_fire_is_submitted_by_whoever_created_the_schedule_never_by_its_template():
    """Issue 54: a pool that shares by submitter takes a fire's group from cronoq.io/submitter. The
    schedule's own annotation is the chart's stamp of its creator; the template's would be the
    author's word (the operator creates the fires, which the policy does not judge), so it is
    dropped (and the CRD refuses it: tests/unit/api)."""
    s = make("nightly", taskTemplate={"metadata": {"annotations": {"cronoq.io/submitter": "someone-else", "n": "1"}},
                                      "spec": {"image": "busybox"}})
    at = datetime(2026, 1, 1, tzinfo=UTC)
    assert sched.task_manifest(s, at)["metadata"]["annotations"] == {"n": "1"}
    stamped = s.model_copy(update={"metadata": s.metadata.model_copy(
        update={"annotations": {"cronoq.io/submitter": "system:serviceaccount:team-a:ci"}})})
    assert sched.task_manifest(stamped, at)["metadata"]["annotations"] == {
        "n": "1", "cronoq.io/submitter": "system:serviceaccount:team-a:ci"}


# --------------------------------------------------------------------------- decisions

def test_a_new_schedule_waits_for_its_first_fire_time():
    d = decide(make(every="10s"), [], T0 + timedelta(seconds=3))
    assert d.create is None and d.wake_at == T0 + timedelta(seconds=10)
    assert d.status.next_fire_time == T0 + timedelta(seconds=10) and d.status.handled_through == T0
    assert d.status.schedule == "every 10s" and d.status.conditions[0].reason == "Scheduled"


def test_a_due_fire_is_created_and_recorded_after():
    s = make(every="10s")
    s = after(s, decide(s, [], T0))
    d = decide(s, [], T0 + timedelta(seconds=10, milliseconds=5))
    assert d.create == T0 + timedelta(seconds=10)
    assert d.status.last_fire_time == d.create and d.status.handled_through == d.create
    assert d.status.active == 1 and d.status.next_fire_time == T0 + timedelta(seconds=20)
    # Decided again before the write landed (a crash): the same fire, nothing new.
    again = decide(s, [], T0 + timedelta(seconds=10, milliseconds=50))
    assert again.create == d.create


def test_a_fire_created_before_a_crash_is_recorded_not_made_again():
    s = make(every="10s")
    s = after(s, decide(s, [], T0))
    fired = [Fired("s-x", T0 + timedelta(seconds=10))]
    d = decide(s, fired, T0 + timedelta(seconds=12))
    assert d.create is None and d.status.last_fire_time == T0 + timedelta(seconds=10) and d.missed == 0


def test_after_downtime_one_catch_up_fire_and_the_rest_counted():
    s = make(every="10s")
    s = after(s, decide(s, [], T0))
    d = decide(s, [], T0 + timedelta(minutes=3, seconds=5))
    assert d.create == T0 + timedelta(minutes=3) and d.missed == 17
    assert d.status.missed_fires == 17


def test_after_downtime_beyond_the_deadline_nothing_runs_and_all_are_counted():
    s = make(every="10s", startingDeadline="5s")
    s = after(s, decide(s, [], T0))
    d = decide(s, [], T0 + timedelta(minutes=3, seconds=47))
    assert d.create is None and d.missed == 22 and d.status.handled_through == T0 + timedelta(minutes=3, seconds=40)
    late = decide(s, [], T0 + timedelta(minutes=3, seconds=43))
    assert late.create == T0 + timedelta(minutes=3, seconds=40) and late.missed == 21


def test_no_cliff_a_long_downtime_of_a_minutely_cron_is_counted_exactly_in_bounded_steps():
    s = make(schedule="* * * * *")
    s = after(s, decide(s, [], T0))
    now = T0 + timedelta(days=10, seconds=30)  # 14400 fire times
    total, created, steps = 0, [], 0
    while True:
        d = decide(s, [], now)
        total += d.missed
        steps += 1
        if d.create:
            created.append(d.create)
        s = after(s, d)
        if d.wake_at != now:
            break
    assert created == [T0 + timedelta(days=10)] and total == 14399 and steps == 2


def test_forbid_skips_while_a_fire_is_unfinished_and_counts_it():
    s = make(every="10s", concurrencyPolicy="Forbid")
    s = after(s, decide(s, [], T0))
    running = [Fired("s-1", T0 + timedelta(seconds=10))]
    s = after(s, decide(s, running, T0 + timedelta(seconds=10)))
    d = decide(s, running, T0 + timedelta(seconds=20))
    assert d.create is None and d.skipped == 1 and d.status.skipped_fires == 1
    done = [Fired("s-1", T0 + timedelta(seconds=10), finished=True, succeeded=True, finished_at=T0)]
    d = decide(after(s, d), done, T0 + timedelta(seconds=30))
    assert d.create == T0 + timedelta(seconds=30)


def test_replace_cancels_the_unfinished_then_creates():
    s = make(every="10s", concurrencyPolicy="Replace")
    s = after(s, decide(s, [], T0))
    running = [Fired("s-1", T0 + timedelta(seconds=10)), Fired("s-0", T0, cancelling=True)]
    d = decide(s, running, T0 + timedelta(seconds=20))
    assert d.cancel == ("s-1",) and d.create == T0 + timedelta(seconds=20)


def test_allow_runs_side_by_side():
    s = make(every="10s")
    s = after(s, decide(s, [], T0))
    d = decide(s, [Fired("s-1", T0 + timedelta(seconds=10))], T0 + timedelta(seconds=20))
    assert d.create == T0 + timedelta(seconds=20) and not d.cancel and d.status.active == 2


def test_suspended_nothing_fires_and_resuming_does_not_catch_up():
    s = make(every="10s", suspend=True)
    d = decide(s, [], T0 + timedelta(seconds=55))
    assert d.create is None and d.status.next_fire_time is None and d.status.conditions[0].reason == "Suspended"
    s = after(s, d)
    assert decide(s, [], T0 + timedelta(seconds=65)).status is None  # no write while nothing changes
    resumed = make(every="10s", generation=2, status=s.status.to_dict())
    d = decide(resumed, [], T0 + timedelta(seconds=95))
    assert d.create is None and d.missed == 0 and d.status.next_fire_time == T0 + timedelta(seconds=100)


def test_an_edit_changes_future_fires_only():
    s = make(every="1h")
    s = after(s, decide(s, [], T0 + timedelta(minutes=30)))
    edited = make(every="1m", generation=2, status=s.status.to_dict())
    d = decide(edited, [], T0 + timedelta(minutes=30, seconds=1))
    assert d.create is None and d.missed == 0 and d.status.next_fire_time == T0 + timedelta(minutes=31)


def test_an_unparsable_schedule_is_reported_not_fired():
    d = decide(make(schedule="61 * * * *"), [], T0 + timedelta(hours=2))
    ready = d.status.conditions[0]
    assert d.create is None and ready.status == "False" and ready.reason == "InvalidSchedule"
    assert "Bad minute" in ready.message and d.wake_at is None


def test_no_write_when_nothing_changed():
    s = make(every="10s")
    s = after(s, decide(s, [], T0))
    assert decide(s, [], T0 + timedelta(seconds=5)).status is None


def test_history_keeps_the_newest_of_each_kind():
    tasks = [Fired(f"ok{i}", T0 + timedelta(seconds=i), finished=True, succeeded=True) for i in range(5)]
    tasks += [Fired(f"bad{i}", T0 + timedelta(seconds=i), finished=True) for i in range(3)]
    tasks += [Fired("running", T0 - timedelta(hours=1))]
    assert set(sched.history_to_prune(tasks, 3, 1, T0 + timedelta(hours=1))) == {"ok0", "ok1", "bad0", "bad1"}
    # Fires not yet recorded (after handledThrough) are never pruned.
    assert set(sched.history_to_prune(tasks, 0, 0, T0)) == {"ok0", "bad0"}


def test_last_successful_time_and_active_follow_the_tasks():
    s = make(every="10s")
    s = after(s, decide(s, [], T0))
    tasks = [Fired("s-1", T0 + timedelta(seconds=10), finished=True, succeeded=True,
                   finished_at=T0 + timedelta(seconds=12)), Fired("s-2", T0 + timedelta(seconds=20))]
    d = decide(s, tasks, T0 + timedelta(seconds=21))
    assert d.status.last_successful_time == T0 + timedelta(seconds=12) and d.status.active == 1


@settings(max_examples=150, deadline=None)
@given(every=st.integers(1, 30), steps=st.lists(st.tuples(st.integers(0, 200), st.booleans(), st.booleans()),
                                                min_size=1, max_size=40),
       policy=st.sampled_from(["Allow", "Forbid", "Replace"]), deadline=st.sampled_from([None, "5s", "1m"]))
def test_every_fire_time_is_created_skipped_or_missed_exactly_once(every, steps, policy, deadline):
    """A random world: time jumps forward, a crash may strike between the create and the status
    write, and tasks finish at random. Fire times up to handledThrough are accounted for once."""
    spec = {"every": f"{every}s", "concurrencyPolicy": policy}
    if deadline:
        spec["startingDeadline"] = deadline
    s = make(**spec)
    now = T0
    created: dict[datetime, Fired] = {}
    for jump, crash, finish in steps:
        now += timedelta(seconds=jump, milliseconds=7)
        if finish:
            created = {t: Fired(f.name, t, finished=True, succeeded=True, finished_at=now) for t, f in created.items()}
        d = decide(s, list(created.values()), now)
        if d.create is not None:
            assert d.create not in created, "a fire made twice"
            created[d.create] = Fired(sched.task_name("s", d.create), d.create)
        if not crash:
            s = after(s, d)
    d = decide(s, list(created.values()), now)  # the decision after the last crash, then no more
    s = after(s, d)
    status = s.status
    fire_times = sched.Every(every).span(T0, status.handled_through).count
    recorded = sum(1 for t in created if t <= status.handled_through)
    assert recorded + status.missed_fires + status.skipped_fires == fire_times
    assert status.last_fire_time == (max(created) if created else None)


def test_the_engine_module_does_no_io():
    """Layering: engine/schedule imports neither kopf, nor the kubernetes client, nor the controller."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(sched))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | \
        {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and m.split(".")[0] in ("kopf", "kubernetes", "aiohttp")}, imported
    assert not {m for m in imported if m and m.startswith(("cronoq.kube", "cronoq.controller"))}, imported


# --------------------------------------------------------------------------- bounds (issue 26, point 4d)

@pytest.mark.parametrize("spec, fires", [({"every": "1s"}, False), ({"every": "30s"}, False), ({"every": "1m"}, True),
                                         ({"schedule": "* * * * *"}, True), ({"schedule": "0,1 * * * *"}, True),
                                         ({"schedule": "*/5 * * * *"}, True)])
def test_a_schedule_firing_more_often_than_the_operators_minimum_makes_no_fire(spec, fires) -> None:
    s = make(**spec)
    s = after(s, decide(s, [], T0, timedelta(minutes=1)))
    d = decide(s, [], T0 + timedelta(minutes=10), timedelta(minutes=1))
    status = after(s, d).status
    ready = next(c for c in status.conditions if c.type == "Ready")
    if fires:
        assert d.create is not None
    else:
        assert d.create is None and status.next_fire_time is None
        assert ready.status.value == "False" and ready.reason == "IntervalTooShort"
        assert "--min-schedule-interval" in ready.message and "1m" in ready.message


def test_max_active_tasks_skips_fires_beyond_it_and_counts_them() -> None:
    s = make(every="10s", maxActiveTasks=2)
    s = after(s, decide(s, [], T0))
    running = [Fired("s-1", T0 + timedelta(seconds=10))]
    d = decide(s, running, T0 + timedelta(seconds=20))
    assert d.create == T0 + timedelta(seconds=20)
    running.append(Fired("s-2", T0 + timedelta(seconds=20)))
    d = decide(after(s, d), running, T0 + timedelta(seconds=30))
    assert d.create is None and d.skipped == 1 and d.status.skipped_fires == 1
    running[0] = Fired("s-1", T0 + timedelta(seconds=10), finished=True, succeeded=True, finished_at=T0)
    d = decide(after(s, d), running, T0 + timedelta(seconds=40))
    assert d.create == T0 + timedelta(seconds=40)


def test_max_active_tasks_is_bounded() -> None:
    with pytest.raises(ValueError, match="maxActiveTasks|max_active_tasks"):
        make(maxActiveTasks=0)
