"""The operator's store (controller/store.py) without a cluster: what it keeps of a task, and the
indexes the controller decides from (issues 11, 12, 13)."""
from __future__ import annotations

from cronoq.api import TaskPhase
from cronoq.controller.store import Store

from tests.unit.builders import T0, at, make_task


def raw(name: str, rv: int, status: dict | None = None, **spec) -> dict:
    obj = make_task(name).spec(**spec).status(status).raw()
    obj["metadata"].update(resourceVersion=str(rv), uid=f"uid-{name}", creationTimestamp=T0.isoformat())
    return obj


def test_a_finished_task_is_kept_as_a_compact_record_with_its_metadata_only() -> None:
    store = Store()
    store.put_task(raw("a", 1, payload={"big": "x" * 10_000}, key="k"), T0)
    done = {"phase": "Succeeded", "attempt": 1, "finishedAt": at(5).isoformat(), "output": "y" * 4000,
            "outputAvailable": True, "message": "m" * 4000,
            "attempts": [{"number": 1, "leaseId": "e1-a1", "job": "a-a1", "outcome": "Success", "reason": "Completed"}]}
    entry = store.put_task(raw("a", 2, done, payload={"big": "x" * 10_000}, key="k"), at(6))
    assert entry.task is None and entry.finished is not None
    assert set(entry.raw) == {"apiVersion", "kind", "metadata"} and "spec" not in entry.raw
    assert entry.phase is TaskPhase.SUCCEEDED and entry.key == "k" and entry.finished.output_available
    assert [(m.number, m.lease_id, m.reason) for m in entry.finished.marks] == [(1, "e1-a1", "Completed")]
    assert entry.first_seen == T0  # the first sight is kept across versions
    assert store.keyed[("ns", "default", "k")] == {"a"}


def test_older_versions_never_replace_newer_ones() -> None:
    store = Store()
    store.put_task(raw("a", 5, {"phase": "Queued"}), T0)
    assert store.put_task(raw("a", 4, {"phase": "Running", "attempt": 1}), T0) is None
    assert store.tasks[("ns", "a")].phase is TaskPhase.QUEUED


def test_phase_counts_follow_every_change_and_deletion() -> None:
    store = Store()
    store.put_task(raw("a", 1, {"phase": "Queued"}), T0)
    store.put_task(raw("b", 1, {"phase": "Queued"}), T0)
    store.put_task(raw("a", 2, {"phase": "Running", "attempt": 1}), T0)
    assert dict(store.phases[("ns", "default")]) == {TaskPhase.QUEUED: 1, TaskPhase.RUNNING: 1}
    assert store.running[("ns", "default")] == {("ns", "a")}
    store.put_task(raw("a", 3, {"phase": "Succeeded", "attempt": 1, "finishedAt": at(1).isoformat()}), T0)
    store.drop_task("ns", "b")
    counts = {p: n for p, n in store.phases[("ns", "default")].items() if n}
    assert counts == {TaskPhase.SUCCEEDED: 1} and store.running[("ns", "default")] == set()
    assert [e.name for e in store.tasks_in_pool("ns", "default")] == ["a"]


def test_dependents_and_fresh_tasks_are_indexed() -> None:
    store = Store()
    store.put_task(raw("new", 1), T0)
    store.put_task(raw("child", 1, dependsOn=[{"task": "parent"}]), T0)
    assert store.fresh[("ns", "default")] == {("ns", "new")}  # no key, no dependencies: weighed at once
    assert store.related("ns", "parent") == {"child"}
    store.put_task(raw("new", 2, {"phase": "Queued"}), T0)
    assert store.fresh[("ns", "default")] == set()
