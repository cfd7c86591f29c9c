"""The operator's store (controller/store.py) without a cluster: what it keeps of a task, and the
indexes the controller decides from (issues 11, 12, 13)."""
from __future__ import annotations

from cronoq.api import TaskPhase
from cronoq.controller.store import Store
from cronoq.engine.pools import WorkerTrust, roomiest

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
    store.forget(("ns", "b"))
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


# --- dependency cycles, checked once per task (issue 26, point 4a) ----------------------------------------------

def chained(n: int, fan_in: int) -> Store:
    store = Store()
    for i in range(n):
        deps = [{"task": f"t{j}"} for j in range(max(0, i - fan_in), i)]
        store.put_task(raw(f"t{i}", 1, dependsOn=deps), T0)
    return store


def test_a_resync_pass_over_3000_tasks_each_needing_32_predecessors_is_cheap() -> None:
    import time
    store = chained(3000, 32)
    started = time.process_time()
    for _ in range(3):  # the first pass checks, the later ones are resyncs
        for i in range(3000):
            assert store.cycle_of(store.tasks[("ns", f"t{i}")]) is None
    assert time.process_time() - started < 0.5  # 0.1 s measured; was 11.6 s per pass before (issue 26)
    assert len(store.cycle_checked) == 3000


def test_a_cycle_closed_by_the_last_task_to_come_fails_every_task_on_it() -> None:
    store = Store()
    store.put_task(raw("a", 1, dependsOn=[{"task": "b"}]), T0)
    store.put_task(raw("b", 1, dependsOn=[{"task": "c"}]), T0)
    assert store.cycle_of(store.tasks[("ns", "a")]) is None  # c does not exist yet
    assert store.cycle_of(store.tasks[("ns", "b")]) is None
    store.put_task(raw("c", 1, dependsOn=[{"task": "a"}]), T0)
    assert store.cycle_of(store.tasks[("ns", "c")]) == ("c", "a", "b", "c")
    assert store.cycle_of(store.tasks[("ns", "a")]) == ("a", "b", "c", "a")
    assert store.cycle_of(store.tasks[("ns", "b")]) == ("b", "c", "a", "b")


def test_a_deleted_task_forgets_what_the_checks_settled() -> None:
    store = Store()
    store.put_task(raw("a", 1, dependsOn=[{"task": "b"}]), T0)
    store.put_task(raw("b", 1), T0)
    assert store.cycle_of(store.tasks[("ns", "a")]) is None and store.settled["ns"] == {"a", "b"}
    store.forget(("ns", "b"))
    assert "ns" not in store.settled
    store.put_task(raw("b", 1, dependsOn=[{"task": "a"}]), T0)
    assert store.cycle_of(store.tasks[("ns", "b")]) == ("b", "a", "b")


def test_a_task_too_big_to_read_is_kept_without_its_spec() -> None:
    """Issue 26, point 4c: the operator holds unfinished tasks in memory; an oversized one is
    refused (Failed, naming spec.template) and only what its refusal needs is kept."""
    store = Store()
    template = {"spec": {"containers": [{"name": "task", "args": ["x" * 200_000]}]}}
    entry = store.put_task(raw("big", 1, pool="p", template=template), T0)
    assert entry.task is None and "spec.template is" in (entry.error or "")
    assert entry.raw["spec"] == {"pool": "p"} and entry.pool == "p"
    assert len(str(entry.raw)) < 1000


def test_a_task_replaced_under_its_name_forgets_the_old_ones_attempts() -> None:
    """Deleted and created again while no watch said so: the new uid starts with nothing of the old."""
    from cronoq.engine.observed import AttemptJob
    from cronoq.kube.observe import WorkerFacts

    store = Store()
    store.put_task(raw("a", 1, {"phase": "Running", "attempt": 1}), T0)
    store.put_job("ns", "uid-a", "a", AttemptJob(number=1, name="a-a1", uid="job-1"))
    store.drop_job("ns", "a-a1")
    store.put_job("ns", "uid-a", "a", AttemptJob(number=2, name="a-a2", uid="job-2"))
    store.put_lease("ns", "a-a2", "e1-a2", "t", T0)
    store.put_served("ns", "uid-a", AttemptJob(number=3, name="a-a3", uid="lease-3", worker="w"))
    store.put_worker("ns", WorkerFacts("w", "default", 2, "w", "t", 10.0), T0)

    replacement = raw("a", 9)
    replacement["metadata"]["uid"] = "uid-a-2"
    store.put_task(replacement, at(1))

    assert ("ns", "uid-a") not in store.by_id and ("ns", "uid-a") not in store.unclaimed
    assert ("ns", "a-a2") not in store.job_owner and ("ns", "a-a2") not in store.leases
    assert store.attempt_jobs(store.tasks[("ns", "a")]) == []
    assert store.worker_alive_until("ns", "w") == at(10), "workers are the pool's, not the task's"


def test_a_pools_worker_room_counts_live_workers_their_load_and_the_hand_overs_in_flight() -> None:
    from cronoq.kube.observe import WorkerFacts

    store = Store(worker_trust=WorkerTrust.GUARDED)
    store.pools[("ns", "default")] = pool("default", 10)
    store.put_worker("ns", WorkerFacts("w1", "default", 2, "w1", "t1", 10.0), T0)
    store.put_worker("ns", WorkerFacts("w2", "default", 3, "w2", "t1", 10.0), T0)
    store.put_worker("ns", WorkerFacts("gone", "default", 5, None, None, 10.0), T0)  # released
    store.put_worker("ns", WorkerFacts("other", "other-pool", 5, "other", "t1", 10.0), T0)
    running = {"phase": "Running", "attempt": 1, "attempts": [{"number": 1, "leaseId": "e1-a1", "worker": "w2"}]}
    store.put_task(raw("busy", 1, running), T0)

    assert store.worker_room(("ns", "default"), at(1)) == {"w1": 2, "w2": 2}
    assert roomiest(store.worker_room(("ns", "default"), at(1))) == "w2"
    store.hold(("ns", "x"), "w2")
    assert store.worker_room(("ns", "default"), at(1)) == {"w1": 2, "w2": 1}
    store.handed(("ns", "x"))
    assert store.worker_room(("ns", "default"), at(10)) == {}, "a Lease not renewed for its duration is dead"
    store.put_worker("ns", WorkerFacts("w1", "default", 2, "w1", "t2", 10.0), at(9))  # renewed: alive again
    assert store.worker_room(("ns", "default"), at(10)) == {"w1": 2}
    store.forget(("ns", "busy"))
    assert store.by_worker == {}
    store.worker_trust = WorkerTrust.UNGUARDED
    assert store.worker_room(("ns", "default"), at(10)) == {}, "nothing believed without the lease guard"


def pool(name: str, concurrency: int):
    from cronoq.api import TaskPool

    return TaskPool.model_validate({"apiVersion": "cronoq.io/v1alpha1", "kind": "TaskPool",
                                    "metadata": {"name": name, "namespace": "ns"},
                                    "spec": {"concurrency": concurrency, "delivery": "Workers"}})


def worker_lease(name: str, pool: str, capacity: str, duration: int, renewed: str) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "labels": {"cronoq.io/worker-pool": pool},
                         "annotations": {"cronoq.io/capacity": capacity}},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": duration, "renewTime": renewed}}


def test_a_worker_lease_gets_no_more_room_than_its_pool_and_no_longer_life_than_its_renewals() -> None:
    """Issue 37, point 1, at the operator's level: capacity 1,000,000 and a duration of 2^31-1 s
    buy a worker its pool's concurrency and MAX_WORKER_LEASE after the last renewal seen, no more;
    a Lease first seen long after its renewTime (an operator restart) is not alive at all."""
    from cronoq.kube.observe import MAX_WORKER_LEASE, worker_facts

    store = Store(worker_trust=WorkerTrust.GUARDED)
    store.pools[("ns", "payments")] = pool("payments", 8)
    greedy = worker_facts(worker_lease("greedy", "payments", "1000000", 2**31 - 1, T0.isoformat()))
    assert greedy is not None and greedy.duration == MAX_WORKER_LEASE
    store.put_worker("ns", greedy, T0)
    assert store.worker_room(("ns", "payments"), at(1)) == {"greedy": 8}, "capped at the pool's concurrency"
    assert store.worker_room(("ns", "payments"), at(MAX_WORKER_LEASE - 1)) == {"greedy": 8}
    assert store.worker_room(("ns", "payments"), at(MAX_WORKER_LEASE)) == {}, "dead without renewals"
    assert store.worker_room(("ns", "payments"), at(365 * 86400)) == {}, "a year later too"
    store.pools.pop(("ns", "payments"))
    assert store.worker_room(("ns", "payments"), at(1)) == {"greedy": 0}, "no pool, no room"

    stale = worker_facts(worker_lease("stale", "mail", "4", 15, at(-3600).isoformat()))
    assert stale is not None
    store.pools[("ns", "mail")] = pool("mail", 8)
    store.put_worker("ns", stale, T0)  # first seen an hour after its last renewal
    assert store.worker_room(("ns", "mail"), at(1)) == {}
    renewed = worker_facts(worker_lease("stale", "mail", "4", 15, at(2).isoformat()))
    store.put_worker("ns", renewed, at(2))
    assert store.worker_room(("ns", "mail"), at(3)) == {"stale": 4}


def test_an_attempt_leases_facts_go_when_the_lease_goes() -> None:
    """Issue 37, point 4: facts are kept under the task uid a Lease names, and dropped with the
    Lease, whether or not a task of that uid was ever seen: orphan Leases cost nothing lasting."""
    from cronoq.kube.observe import served_facts

    store = Store()
    for i in range(100):
        lease = {"metadata": {"name": f"ghost-a1.w-{i}", "uid": f"l-{i}", "labels": {
            "cronoq.io/task-uid": f"nobody-{i}", "cronoq.io/task": "ghost", "cronoq.io/attempt": "1",
            "cronoq.io/lease-id": "e1-a1", "cronoq.io/worker": f"w-{i}"},
            "annotations": {"cronoq.io/report": "é" * 4000}},
            "spec": {"holderIdentity": "e1-a1", "renewTime": T0.isoformat()}}
        facts = served_facts(lease)
        assert facts is not None and len(facts.termination.message.encode()) <= 4096, "cut to the bytes allowed"
        store.put_lease("ns", f"ghost-a1.w-{i}", "e1-a1", T0.isoformat(), T0, f"nobody-{i}")
        store.put_served("ns", f"nobody-{i}", facts)
    assert len(store.unclaimed) == 100 and len(store.leases) == 100
    for i in range(100):
        store.drop_lease("ns", f"ghost-a1.w-{i}")
    assert store.unclaimed == {} and store.leases == {}


def test_a_lease_not_held_by_the_lease_id_it_names_is_no_attempts_lease() -> None:
    from cronoq.kube.observe import served_facts

    lease = {"metadata": {"name": "t-a1.w", "labels": {"cronoq.io/attempt": "1", "cronoq.io/lease-id": "e1-a1",
                                                       "cronoq.io/worker": "w"}},
             "spec": {"holderIdentity": "e1-a2"}}
    assert served_facts(lease) is None
    del lease["metadata"]["labels"]["cronoq.io/lease-id"]
    lease["spec"]["holderIdentity"] = None
    assert served_facts(lease) is None, "no lease id, no attempt"


def test_a_deleted_job_keeps_the_attempt_number_it_was_seen_with() -> None:
    """The number is the one the Job's label gave while it was there, not parsed back out of its name."""
    from cronoq.engine.observed import AttemptJob

    store = Store()
    entry = store.put_task(raw("a", 1, {"phase": "Running", "attempt": 2}), T0)
    store.put_job("ns", "uid-a", "a", AttemptJob(number=2, name="a-retry", uid="job-2", lease_id="e1-a2"))
    store.drop_job("ns", "a-retry")
    assert store.attempt_jobs(entry) == [AttemptJob(number=2, name="a-retry", uid="job-2", lease_id="e1-a2", gone=True)]


def test_counting_a_pools_slots_changes_nothing_and_release_drained_frees_stopped_ones() -> None:
    from cronoq.controller.slots import Slots

    slots = Slots(Store())
    pool = ("ns", "p")
    slots.draining[("ns", "gone-a1")] = pool  # an aborted attempt whose Job (and so its pod) is gone
    assert slots.running(pool) == 1 and slots.running(pool) == 1, "a read, however often"
    assert slots.draining == {("ns", "gone-a1"): pool}
    slots.release_drained(pool)
    assert slots.running(pool) == 0 and slots.draining == {}


def test_a_checkpoint_is_folded_into_its_attempt_only_from_a_lease_its_lease_id_holds() -> None:
    from cronoq.engine.observed import AttemptJob
    from cronoq.kube.observe import checkpoint_of

    store = Store()
    store.put_task(raw("a", 1, {"phase": "Running", "attempt": 1}), T0)
    store.put_job("ns", "uid-a", "a", AttemptJob(number=1, name="a-a1", uid="job-1", lease_id="e1-a1"))
    lease = {"metadata": {"annotations": {"cronoq.io/checkpoint": '{"done": 4}'}}}
    assert checkpoint_of(lease) == '{"done":4}' and checkpoint_of({"metadata": {}}) is None
    store.put_lease("ns", "a-a1", "e1-a1", T0.isoformat(), T0, "uid-a")
    assert store.put_checkpoint("ns", "a-a1", "e1-a1", checkpoint_of(lease)) is True
    assert store.put_checkpoint("ns", "a-a1", "e1-a1", '{"done":4}') is False, "unchanged: nothing to decide"
    (job,) = store.attempt_jobs(store.tasks[("ns", "a")])
    assert job.checkpoint == '{"done":4}'

    store.put_checkpoint("ns", "a-a1", "e9-a1", '{"done":99}')  # held by another lease id now
    (job,) = store.attempt_jobs(store.tasks[("ns", "a")])
    assert job.checkpoint is None
    store.drop_lease("ns", "a-a1")
    assert store.checkpoints == {}, "what a Lease said goes with it"


def test_an_unfinished_tasks_spec_is_kept_within_its_bound_and_a_larger_one_refused() -> None:
    """Issue 49: env, args, command and podMetadata are each bounded by the CRD, together not:
    64 env values of 32 KiB made one task weigh ~1.5 MiB in memory. kubectl's last-applied copy of
    the manifest is never kept."""
    from cronoq.api.task import SPEC_LIMIT
    from cronoq.controller.store import LAST_APPLIED

    store = Store()
    big = raw("big", 1)
    big["spec"]["env"] = [{"name": f"E{i}", "value": "x" * 32768} for i in range(64)]
    entry = store.put_task(big, T0)
    assert entry.task is None and entry.error.startswith("spec is ") and str(SPEC_LIMIT) in entry.error
    assert len(str(entry.raw)) < 1000, "kept no bigger than its refusal needs"

    applied = raw("applied", 1)
    applied["metadata"]["annotations"] = {LAST_APPLIED: "{" + "x" * 60000 + "}", "team": "a"}
    kept = store.put_task(applied, T0)
    assert kept.task is not None and kept.raw["metadata"]["annotations"] == {"team": "a"}

    done = raw("done", 1, {"phase": "Succeeded", "attempt": 1})
    done["spec"]["env"] = big["spec"]["env"]
    assert store.put_task(done, T0).finished is not None, "a task finished before the bound stays finished"


def test_a_task_waiting_for_its_first_attempt_is_kept_packed_and_read_whole_again() -> None:
    """Issue 56: a backlog of 100,000 queued tasks must not hold 100,000 parsed objects. A task
    waiting for its first attempt is kept as its brief (what admission weighs) and its object
    packed; a decision reads it whole again, equal to what came; its first attempt parses it."""
    from cronoq.api import Task

    store = Store()
    env = [{"name": f"E{i}", "value": f"value-{i}-" + "v" * 50} for i in range(40)]
    came = raw("w", 1, {"phase": "Queued"}, pool="p", priority=7, group="g", key="k", env=env,
               dependsOn=[{"task": "up"}], notBefore=at(60).isoformat().replace("+00:00", "Z"))
    entry = store.put_task(came, T0)
    assert entry.parsed is None and entry.kept is None and entry.packed is not None
    assert len(entry.packed) < len(str(came["spec"])) / 3
    brief = entry.weighed()
    assert (brief.pool, brief.priority, brief.group, brief.key, brief.depends_on, brief.not_before,
            brief.phase) == ("p", 7, "g", "k", ("up",), at(60), TaskPhase.QUEUED)
    assert (entry.name, entry.uid, entry.namespace, entry.resource_version) == ("w", "uid-w", "ns", 1)
    assert entry.task == Task.model_validate(came) and entry.raw["spec"]["env"] == env
    assert store.keyed[("ns", "p", "k")] == {"w"} and store.dependents[("ns", "up")] == {"w"}

    started = store.put_task(raw("w", 2, {"phase": "Running", "attempt": 1}, pool="p", key="k", env=env), T0)
    assert started.parsed is not None and started.packed is None and started.brief is None
    assert started.task.spec.env[0].name == "E0" and store.running[("ns", "p")] == {("ns", "w")}


def test_a_packed_tasks_brief_says_whether_it_is_ready_as_the_whole_task_does() -> None:
    """Issue 56: a slot is granted to a packed task on its brief (`Brief.ready`), which agrees with
    `is_ready` of the whole task whenever it answers, and leaves to the whole task what it cannot
    tell (a Blocked task: by its start time, or by a key or a dependency)."""
    from cronoq.engine.attempts import is_ready

    later = at(60).isoformat().replace("+00:00", "Z")
    cases = {
        "new": raw("new", 1),
        "queued": raw("queued", 1, {"phase": "Queued"}),
        "cancelled": raw("cancelled", 1, {"phase": "Queued"}, cancel=True),
        "later": raw("later", 1, notBefore=later),
        "delayed": raw("delayed", 1, startDelay="30s"),
        "blocked-time": raw("blocked-time", 1, {"phase": "Blocked", "conditions": [
            {"type": "Running", "status": "False", "reason": "WaitingForStartTime", "lastTransitionTime": T0.isoformat()}]}, notBefore=later),
        "blocked-key": raw("blocked-key", 1, {"phase": "Blocked", "conditions": [
            {"type": "Running", "status": "False", "reason": "DuplicateKey", "lastTransitionTime": T0.isoformat()}]}, key="k"),
    }
    store = Store()
    answered = {}
    for name, came in cases.items():
        entry = store.put_task(came, T0)
        assert entry.brief is not None, name
        for now in (T0, at(61)):
            told = entry.brief.ready(now)
            if told is not None:
                assert told == is_ready(entry.task, now), (name, now)
            answered[(name, now)] = told
    assert answered[("new", T0)] is True and answered[("queued", T0)] is True
    assert answered[("cancelled", at(61))] is False
    assert answered[("later", T0)] is False and answered[("later", at(61))] is True
    assert answered[("delayed", T0)] is False and answered[("delayed", at(61))] is True
    assert answered[("blocked-time", at(61))] is None and answered[("blocked-key", T0)] is None


def test_a_slot_is_granted_to_a_packed_task_without_reading_it_whole(monkeypatch) -> None:
    """Issue 56: granting reads the brief; the task is read whole once, by its decision. A
    cancelled one is passed over, a Blocked one is read whole to judge."""
    from cronoq.controller import store as stored
    from cronoq.controller.slots import Slots
    from cronoq.engine.admission import Candidate

    store = Store()
    slots = Slots(store)
    waiting = {"a": raw("a", 1), "b": raw("b", 1, {"phase": "Queued"}, cancel=True),
               "c": raw("c", 1, {"phase": "Blocked", "conditions": [
                   {"type": "Running", "status": "False", "reason": "WaitingForStartTime",
                    "lastTransitionTime": T0.isoformat()}]})}
    for i, (name, came) in enumerate(waiting.items()):
        store.put_task(came, T0)
        slots.want(("ns", "default"), Candidate.of("ns", name, 0, at(i), None, None, ()), T0)
    reads: list[bytes] = []
    unpack = stored.unpack
    monkeypatch.setattr(stored, "unpack", lambda packed: reads.append(packed) or unpack(packed))
    granted = slots.admit(("ns", "default"), 10, at(10))
    assert granted == [("ns", "a"), ("ns", "c")]
    assert reads == [store.tasks[("ns", "c")].packed], "only the Blocked task was read whole"
