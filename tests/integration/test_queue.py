"""What makes cronoq a queue (DESIGN §5, issue 5): admission by priority and concurrency,
idempotency keys, dependencies, cancellation — against the real cluster."""
from __future__ import annotations

import random
import threading
import time
from datetime import datetime

from kubernetes import watch

from tests.support.tasks import TERMINAL
from tests.support.waiting import wait_until


def ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class RunningWatcher:
    """Counts, from a watch on the namespace's attempt pods, how many run at once (at most)."""

    def __init__(self, cq) -> None:
        self.cq, self.running, self.peak, self.stop = cq, set(), 0, threading.Event()
        self.order: list[str] = []
        """Tasks in the order their first attempt's pod appeared."""
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        w = watch.Watch()
        for event in w.stream(self.cq.core.list_namespaced_pod, self.cq.namespace, label_selector="cronoq.io/task",
                              timeout_seconds=120):
            pod = event["object"]
            task = pod.metadata.labels.get("cronoq.io/task")
            if task not in self.order:
                self.order.append(task)
            if event["type"] != "DELETED" and pod.status.phase in ("Pending", "Running"):
                self.running.add(pod.metadata.name)
            else:
                self.running.discard(pod.metadata.name)
            self.peak = max(self.peak, len(self.running))
            if self.stop.is_set():
                w.stop()

    def close(self) -> int:
        self.stop.set()
        return self.peak


def first_job_created(cq, name: str) -> datetime:
    return min(j.metadata.creation_timestamp for j in cq.jobs(name))


def test_concurrency_1_starts_in_priority_order_fifo_within_a_priority(cq):
    cq.pool(concurrency=0)  # closed while the tasks arrive, so all wait together
    priorities = [5, 1, 5, 3, 1, 3, 5, 1, 3, 0, 0, 5]
    order = list(range(len(priorities)))
    random.Random(3).shuffle(order)
    for i in order:
        cq.task(f"p{i:02d}", priority=priorities[i], delay="300ms")
        time.sleep(0.02)  # distinct submission times, in creation order
    wait_until(lambda: all(cq.status(f"p{i:02d}").get("phase") == "Queued" for i in order), timeout=30,
               what="every task Queued")
    watcher = RunningWatcher(cq)
    cq.custom.patch_namespaced_custom_object("cronoq.io", "v1alpha1", cq.namespace, "taskpools", "default",
                                             {"spec": {"concurrency": 1}})

    wait_until(lambda: all(cq.status(f"p{i:02d}").get("phase") == "Succeeded" for i in order), timeout=90,
               what="every task Succeeded")
    assert watcher.close() == 1, "never more than one attempt at once"
    statuses = {f"p{i:02d}": cq.status(f"p{i:02d}") for i in order}
    expected = sorted(statuses, key=lambda n: (-priorities[int(n[1:])], ts(statuses[n]["submittedAt"])))
    assert watcher.order == expected
    # submittedAt follows creation order.
    created = [f"p{i:02d}" for i in order]
    assert sorted(created, key=lambda n: ts(statuses[n]["submittedAt"])) == created


def test_concurrency_3_never_runs_more_than_3(cq):
    cq.pool(concurrency=3)
    watcher = RunningWatcher(cq)
    for i in range(20):
        cq.task(f"c{i}", delay="400ms")

    wait_until(lambda: all(cq.status(f"c{i}").get("phase") == "Succeeded" for i in range(20)), timeout=120,
               what="all 20 Succeeded")
    peak = watcher.close()
    assert 1 <= peak <= 3, peak


def test_a_retried_task_keeps_its_place_behind_an_older_task_of_its_priority(cq):
    cq.pool(concurrency=1, retry={"initialBackoff": "0s", "jitter": "none"})
    cq.task("old-flaky", outcome_a1="Fail", delay="300ms")
    time.sleep(0.05)
    cq.task("older", delay="300ms")
    time.sleep(0.05)
    cq.task("newer", delay="300ms")

    for name in ("old-flaky", "older", "newer"):
        cq.wait_phase(name, "Succeeded", timeout=60)
    flaky = cq.status("old-flaky")
    newer_start = ts(cq.status("newer")["attempts"][0]["startedAt"])
    # old-flaky's retry was submitted before `newer`, so it ran before it.
    assert ts(flaky["attempts"][1]["startedAt"]) <= newer_start
    assert flaky["submittedAt"] < cq.status("newer")["submittedAt"]


def test_a_task_in_a_missing_pool_waits_and_starts_once_the_pool_appears(cq):
    cq.task("early", pool="later", delay="100ms")
    status = cq.wait_status("early", lambda s: s.get("phase") == "Queued", "Queued for a missing pool")
    assert "later" in status["message"] and "does not exist" in status["message"]
    assert not cq.jobs("early")

    cq.pool("later")
    cq.wait_phase("early", "Succeeded")


def test_a_duplicate_of_a_finished_task_reports_its_output_without_a_job(cq):
    cq.pool()
    cq.task("original", key="order-42", message="receipt-1", delay="100ms")
    cq.wait_phase("original", "Succeeded")

    cq.task("again", key="order-42", message="receipt-2")
    status = cq.wait_phase("again", "Succeeded")

    assert (status["duplicateOf"], status["output"]) == ("original", "receipt-1")
    assert not cq.jobs("again")


def test_a_duplicate_of_a_running_task_follows_it_to_its_end(cq):
    cq.pool()
    cq.task("first", key="k", outcome="Fail", exit_code=9, delay="2s", retry={"maxAttempts": 1})
    cq.wait_status("first", lambda s: s.get("phase") == "Running", "first Running")
    cq.task("follower", key="k")

    blocked = cq.wait_status("follower", lambda s: s.get("phase") == "Blocked", "follower Blocked")
    assert blocked["duplicateOf"] == "first"
    status = cq.wait_phase("follower", "DeadLettered")

    assert status["duplicateOf"] == "first" and not cq.jobs("follower")
    assert cq.status("first")["phase"] == "DeadLettered"


def test_after_the_retention_window_a_task_with_the_key_runs_again(cq):
    cq.pool(keyRetention="2s")
    cq.task("once", key="nightly", message="run 1", delay="100ms")
    done = cq.wait_phase("once", "Succeeded")
    wait_until(lambda: (datetime.now(ts(done["finishedAt"]).tzinfo) - ts(done["finishedAt"])).total_seconds() > 2.5,
               timeout=10, what="the retention window to pass")

    cq.task("twice", key="nightly", message="run 2", delay="100ms")
    status = cq.wait_phase("twice", "Succeeded")

    assert status.get("duplicateOf") is None and status["output"] == "run 2"
    assert [j.metadata.name for j in cq.jobs("twice")] == ["twice-a1"]


def test_a_diamond_runs_in_order(cq):
    cq.pool(concurrency=4)
    cq.task("d", dependsOn=[{"task": "b"}, {"task": "c"}], delay="100ms")
    cq.task("b", dependsOn=[{"task": "a"}], delay="300ms")
    cq.task("c", dependsOn=[{"task": "a"}], delay="300ms")
    cq.task("a", delay="300ms")

    for name in "abcd":
        cq.wait_phase(name, "Succeeded", timeout=60)
    start = {n: ts(cq.status(n)["attempts"][0]["startedAt"]) for n in "abcd"}
    end = {n: ts(cq.status(n)["attempts"][0]["finishedAt"]) for n in "abcd"}
    assert start["b"] >= end["a"] and start["c"] >= end["a"]
    assert start["d"] >= max(end["b"], end["c"])


def test_a_failed_dependency_skips_success_edges_transitively_and_runs_failure_edges(cq):
    cq.pool(retry={"maxAttempts": 1})
    cq.task("root", outcome="Fail", exit_code=1, delay="100ms")
    cq.task("on-success", dependsOn=[{"task": "root"}])
    cq.task("grandchild", dependsOn=[{"task": "on-success", "on": "Success"}])
    cq.task("on-failure", dependsOn=[{"task": "root", "on": "Failure"}], delay="100ms")
    cq.task("after-grandchild", dependsOn=[{"task": "grandchild", "on": "Complete"}], delay="100ms")

    cq.wait_phase("root", "DeadLettered")
    assert "root" in cq.wait_phase("on-success", "Skipped")["message"]
    cq.wait_phase("grandchild", "Skipped")
    cq.wait_phase("on-failure", "Succeeded")
    cq.wait_phase("after-grandchild", "Succeeded")  # Complete edges hold after a skip too
    assert not cq.jobs("on-success") and not cq.jobs("grandchild")


def test_a_complete_edge_runs_after_a_cancelled_dependency(cq):
    cq.pool()
    cq.task("long", outcome="Run")
    cq.task("cleanup", dependsOn=[{"task": "long", "on": "Complete"}], delay="100ms")
    cq.task("needs-long", dependsOn=[{"task": "long"}])
    cq.wait_status("long", lambda s: s.get("phase") == "Running", "long Running")

    cq.patch_task("long", {"cancel": True})

    cq.wait_phase("long", "Cancelled")
    cq.wait_phase("cleanup", "Succeeded")
    cq.wait_phase("needs-long", "Skipped")


def test_a_dependency_cycle_is_refused_naming_the_cycle(cq):
    cq.pool()
    cq.task("x", dependsOn=[{"task": "y"}])
    cq.task("y", dependsOn=[{"task": "z"}])
    cq.task("z", dependsOn=[{"task": "x"}])

    for name in "xyz":
        status = cq.wait_phase(name, "Failed")
        assert "cycle" in status["message"] and all(n in status["message"] for n in "xyz")
    assert not cq.jobs()


def test_a_missing_dependency_keeps_the_task_blocked_with_that_reason(cq):
    cq.pool()
    cq.task("waiter", dependsOn=[{"task": "ghost"}], delay="100ms")
    status = cq.wait_status("waiter", lambda s: s.get("phase") == "Blocked", "Blocked")
    assert status["message"] == "waiting for ghost (Success; no such task yet)"

    cq.task("ghost", delay="100ms")
    cq.wait_phase("waiter", "Succeeded")


def test_cancellation_in_every_phase(cq):
    cq.pool(concurrency=1, retry={"initialBackoff": "1m", "jitter": "none"})
    cq.task("running", outcome="Run")
    cq.wait_status("running", lambda s: s.get("phase") == "Running", "Running")
    cq.task("queued")                                           # waits: the one slot is taken
    cq.task("blocked", dependsOn=[{"task": "queued"}])
    cq.wait_status("queued", lambda s: s.get("phase") == "Queued", "Queued")
    cq.wait_status("blocked", lambda s: s.get("phase") == "Blocked", "Blocked")

    for name in ("blocked", "queued", "running"):
        cq.patch_task(name, {"cancel": True})
    for name in ("blocked", "queued", "running"):
        cq.wait_phase(name, "Cancelled")
    wait_until(lambda: not cq.jobs("running"), timeout=30, what="the running attempt's Job deleted")
    assert cq.status("running")["attempts"][0]["outcome"] == "Cancelled"

    cq.task("retrying", outcome="Fail", delay="100ms")          # slot free again; fails, backs off 1m
    cq.wait_status("retrying", lambda s: s.get("phase") == "Retrying", "Retrying")
    cq.patch_task("retrying", {"cancel": True})
    status = cq.wait_phase("retrying", "Cancelled")
    assert status["attempt"] == 1


def test_one_kubectl_command_lists_the_tasks_of_a_phase(cq, kubectl):
    cq.pool(retry={"maxAttempts": 1})
    cq.task("ok", delay="100ms")
    cq.task("dead", outcome="Fail", delay="100ms")
    cq.wait_phase("ok", "Succeeded")
    cq.wait_phase("dead", "DeadLettered")

    out = kubectl("get", "tasks", "--field-selector=status.phase=DeadLettered", "-o", "name", namespace=cq.namespace)
    assert out.stdout.split() == ["task.cronoq.io/dead"]
    assert all(cq.status(n)["phase"] in TERMINAL for n in ("ok", "dead"))


def test_fairness_groups_take_turns_and_a_group_runs_no_more_than_its_cap(cq, kubeconfig):
    """Issue 39: tenant acme's backlog of 6 is queued before bolt's 2; with groups taking turns and
    groupConcurrency 1, bolt's first task starts second, not after acme's sixth, both of bolt's
    start while acme's first (6 s) still runs, and never two of one group run at once (their
    recorded times); `describe` says why acme's second waits."""
    from tests.integration.test_cli import Cli

    cq.pool(concurrency=0, groupConcurrency=1)  # closed while the tasks arrive, so all wait together
    for i in range(6):
        cq.task(f"a{i}", group="acme", delay="6s" if i == 0 else "500ms")
        time.sleep(0.02)
    for i in range(2):
        cq.task(f"b{i}", group="bolt", delay="500ms")
    names = [f"a{i}" for i in range(6)] + ["b0", "b1"]
    wait_until(lambda: all(cq.status(n).get("phase") == "Queued" for n in names), timeout=30,
               what="every task Queued")
    watcher = RunningWatcher(cq)
    cq.custom.patch_namespaced_custom_object("cronoq.io", "v1alpha1", cq.namespace, "taskpools", "default",
                                             {"spec": {"concurrency": 3}})
    cli = Cli(cq.namespace, str(kubeconfig))
    wait_until(lambda: cq.status("a0").get("phase") == "Running", timeout=30, what="acme's first task running")
    described = cli.ok("describe", "a1").stdout
    assert "group acme has 1 of 1 running (pool default's groupConcurrency)" in described, described

    wait_until(lambda: all(cq.status(n).get("phase") == "Succeeded" for n in names), timeout=120,
               what="every task Succeeded")
    watcher.close()
    # a0 and b0 are granted together (their pods may appear in either order); bolt's second runs
    # while acme's first still does, before acme's second.
    assert set(watcher.order[:2]) == {"a0", "b0"} and watcher.order[2] == "b1", watcher.order
    # At most one attempt of a group at once: the attempts' own times, as the operator recorded them.
    for group, prefix in (("acme", "a"), ("bolt", "b")):
        spans = sorted((ts(a["startedAt"]), ts(a["finishedAt"]))
                       for n in names if n.startswith(prefix) for a in cq.status(n)["attempts"])
        assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:])), (group, spans)


def test_describe_past_the_marks_limit_places_a_task_by_the_pools_queue_marks(own, kubeconfig):
    """Issue 56 item 4: past --queue-marks-from waiting (2,000 by default; 4 here), the pool's
    status carries marks of the operator's admission order, which the API server accepts as the
    CRD says, and `cronoq describe` places a queued task by them, reading no other task (12 waiting
    are all marked: at most 100 are; the place between two marks is unit-tested)."""
    import subprocess
    import sys

    own.operator.extra_args = ("--queue-marks-from=4",)
    own.pool(paused=True)
    own.operator.start()
    for i in range(12):
        own.task(f"q{i:02d}", priority=5 if i == 9 else 0)
    for i in range(12):
        own.wait_phase(f"q{i:02d}", "Queued")

    def marked():
        pool = own.custom.get_namespaced_custom_object("cronoq.io", "v1alpha1", own.namespace, "taskpools", "default")
        marks = (pool.get("status") or {}).get("queueMarks")
        return marks if marks and marks["waiting"] == 12 else None

    marks = wait_until(marked, timeout=30, what="the pool's queue marks for 12 waiting")
    order = [(m["place"], m["name"]) for m in marks["marks"]]
    expected = [(1, "q09")] + [(i + 2, f"q{i:02d}") for i in range(9)] + [(11, "q10"), (12, "q11")]
    assert order == expected, marks
    said = subprocess.run([sys.executable, "-m", "cronoq", "describe", "q05", "-n", own.namespace,
                           "--kubeconfig", kubeconfig], capture_output=True, text=True, timeout=60)
    assert said.returncode == 0, said.stderr
    line = next(ln for ln in said.stdout.splitlines() if "pool default's queue" in ln)
    assert "7th of 12 in pool default's queue" in line and "from the pool's queue marks" in line, line
