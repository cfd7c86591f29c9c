"""The dashboard's pure part: the task list's filters and paging, the overview per pool, the
attempt timeline and the dependency graph, from models alone."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from cronoq.api import TaskPool
from cronoq.cli.dashboard import views

T0 = datetime(2026, 11, 5, 12, 0, tzinfo=timezone.utc)


def task(name: str, phase: str | None = None, *, pool: str = "default", key: str | None = None,
         labels: dict | None = None, created: timedelta = timedelta(), namespace: str = "ns",
         depends_on: tuple[str, ...] = (), **status):
    meta = {"name": name, "namespace": namespace, "creationTimestamp": (T0 + created).isoformat(),
            "labels": labels or {}}
    spec: dict = {"image": "busybox", "pool": pool}
    if key:
        spec["key"] = key
    if depends_on:
        spec["dependsOn"] = [{"task": d} for d in depends_on]
    from cronoq.api import Task
    body: dict = {"metadata": meta, "spec": spec}
    if phase:
        body["status"] = {"phase": phase, **status}
    return Task.model_validate(body)


def pool(name: str, concurrency: int = 2, paused: bool = False, namespace: str = "ns") -> TaskPool:
    return TaskPool.model_validate({"metadata": {"name": name, "namespace": namespace},
                                    "spec": {"concurrency": concurrency, "paused": paused}})


@pytest.mark.parametrize("query, says", [
    ({"phase": "Done"}, "phase: 'Done' is none of"),
    ({"page": "two"}, "page: 'two' is not a whole number"),
    ({"size": "100000"}, "size: 100000 is not between 1 and 500"),
    ({"label": "a!=b"}, "label: 'a!=b' is not key=value or key"),
])
def test_a_bad_filter_names_its_field(query, says):
    with pytest.raises(views.BadFilter, match=says):
        views.TaskFilter.parse(query)


def test_filters_match_phase_pool_key_label_namespace_and_text():
    a = task("report-a", "Failed", pool="reports", key="k1", labels={"team": "x", "tier": "1"},
             summary="disk full on node-3")
    b = task("mail-b", "Running", labels={"team": "y"}, namespace="other")
    parse = views.TaskFilter.parse
    assert parse({"phase": "Failed"}).matches(a) and not parse({"phase": "Failed"}).matches(b)
    assert parse({"pool": "reports"}).matches(a) and not parse({"pool": "reports"}).matches(b)
    assert parse({"key": "k1"}).matches(a) and not parse({"key": "k1"}).matches(b)
    assert parse({"label": "team=x,tier"}).matches(a) and not parse({"label": "team=x"}).matches(b)
    assert not parse({"label": "team=x,missing"}).matches(a)
    assert parse({"namespace": "other"}).matches(b) and not parse({"namespace": "other"}).matches(a)
    assert parse({"text": "DISK FULL"}).matches(a) and parse({"text": "mail"}).matches(b)
    assert not parse({"text": "disk"}).matches(b)


def test_pages_are_newest_first_and_a_page_past_the_end_shows_the_last():
    tasks = [task(f"t{i:05}", "Queued", created=timedelta(seconds=i)) for i in range(10_000)]
    first = views.task_page(tasks, views.TaskFilter.parse({"size": "50"}))
    assert (first.total, first.pages, first.number) == (10_000, 200, 1)
    assert [t.metadata.name for t in first.tasks[:2]] == ["t09999", "t09998"]
    past = views.task_page(tasks, views.TaskFilter.parse({"page": "999"}))
    assert past.number == 200 and past.tasks[-1].metadata.name == "t00000"
    assert views.TaskFilter.parse({"pool": "p", "page": "3"}).query(page=4) == "pool=p&page=4"


def test_overview_counts_per_pool_the_last_hours_ends_and_the_longest_waiting():
    tasks = [
        task("q-old", "Queued", pool="p", submittedAt=(T0 - timedelta(minutes=30)).isoformat()),
        task("q-new", "Queued", pool="p", submittedAt=(T0 - timedelta(minutes=1)).isoformat()),
        task("r", "Running", pool="p"),
        task("b", "Blocked", pool="p"),
        task("ok", "Succeeded", pool="p", finishedAt=(T0 - timedelta(minutes=5)).isoformat()),
        task("old-ok", "Succeeded", pool="p", finishedAt=(T0 - timedelta(hours=3)).isoformat()),
        task("dl", "DeadLettered", pool="p", finishedAt=(T0 - timedelta(minutes=50)).isoformat()),
        task("lost", "Queued", pool="nowhere"),
    ]
    rows = views.overview(tasks, [pool("p", concurrency=3, paused=True), pool("idle")], T0)
    by = {r.name: r for r in rows}
    p = by["p"]
    assert (p.queued, p.running, p.blocked, p.concurrency, p.paused) == (2, 1, 1, 3, True)
    assert p.finished == {"Succeeded": 1, "DeadLettered": 1}
    assert p.oldest_waiting.metadata.name == "q-old"
    assert by["idle"].queued == 0 and by["idle"].oldest_waiting is None
    assert by["nowhere"].pool is None and by["nowhere"].queued == 1


def test_overview_counts_the_queued_tasks_waiting_per_concurrency_key():
    def waiting(name: str, reason: str, message: str):
        return task(name, "Queued", pool="p", message=message, conditions=[
            {"type": "Running", "status": "False", "reason": reason, "message": message,
             "lastTransitionTime": T0.isoformat()}])
    tasks = [
        waiting("a", "WaitingForKey", "waiting for concurrency key deploy/x: 1 of 1 running across pools, held by z"),
        waiting("b", "WaitingForKey", "waiting for concurrency key deploy/x: 1 of 1 running across pools, held by z"),
        waiting("c", "Debouncing", "debouncing key rebuild/site: starts at 12:00:30Z unless a newer task arrives "
                                   "(at the latest 12:10:00Z)"),
        waiting("d", "WaitingForSlot", "queued in pool p"),
    ]
    (row,) = views.overview(tasks, [pool("p")], T0)
    assert row.queued == 4 and row.key_waits == {"deploy/x": 2, "rebuild/site": 1}


def test_the_timeline_places_attempts_on_one_span():
    t = task("t", "Running", attempt=2, attempts=[
        {"number": 1, "dispatchedAt": T0.isoformat(), "finishedAt": (T0 + timedelta(seconds=10)).isoformat(),
         "outcome": "Retryable"},
        {"number": 2, "dispatchedAt": (T0 + timedelta(seconds=30)).isoformat()},
    ])
    first, second = views.timeline(t, T0 + timedelta(seconds=40))
    assert (first.left, first.width, first.running) == (0.0, 25.0, False)
    assert (second.left, second.width, second.running) == (75.0, 25.0, True)
    assert views.timeline(task("new"), T0) == []


def test_the_graph_holds_dependencies_and_dependents_transitively():
    tasks = [task("a", "Succeeded"), task("b", "Running", depends_on=("a",)),
             task("c", "Blocked", depends_on=("b", "gone")), task("d", "Blocked", depends_on=("c",)),
             task("unrelated", "Queued")]
    elements = views.graph(tasks[2], tasks)
    nodes = {e["data"]["id"]: e["data"]["phase"] for e in elements if "source" not in e["data"]}
    edges = {(e["data"]["source"], e["data"]["target"]) for e in elements if "source" in e["data"]}
    assert nodes == {"a": "Succeeded", "b": "Running", "c": "Blocked", "d": "Blocked", "gone": "Missing"}
    assert edges == {("a", "b"), ("b", "c"), ("gone", "c"), ("c", "d")}


def test_a_schedule_shows_its_next_fires_and_none_while_suspended():
    from cronoq.api import TaskSchedule

    def schedule(**spec):
        return TaskSchedule.model_validate({"metadata": {"name": "s", "namespace": "ns"},
                                            "spec": {"taskTemplate": {"spec": {"image": "busybox"}}, **spec}})

    when, fires = views.next_fires(schedule(schedule="0 3 * * *"), T0)
    assert when == "0 3 * * *"
    assert [f.isoformat() for f in fires] == ["2026-11-06T03:00:00+00:00", "2026-11-07T03:00:00+00:00",
                                              "2026-11-08T03:00:00+00:00"]
    when, fires = views.next_fires(schedule(every="10m"), T0)
    assert when == "every 10m" and fires[0] == T0 + timedelta(minutes=10)
    assert views.next_fires(schedule(schedule="0 3 * * *", suspend=True), T0)[1] == []
