"""A pool's rate limit on the real cluster (issue 39.1): attempt starts, as the tasks' statuses
record them (`dispatchedAt`), never exceed burst + rate in any one-second window; a waiting task is
Queued with reason RateLimited and a message naming the limit, seen by a watch; after a failover the
new leader starts with an empty bucket, never with the burst its predecessor had saved."""
from __future__ import annotations

import signal
import threading
import time
from datetime import datetime

from kubernetes import watch

from tests.support.tasks import GROUP, TERMINAL, VERSION, Cronoq
from tests.support.waiting import wait_until


def ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class StatusWatcher:
    """Every status of the namespace's tasks, as a watch delivers them."""

    def __init__(self, cq: Cronoq) -> None:
        self.cq, self.seen, self.stop = cq, [], threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        w = watch.Watch()
        for event in w.stream(self.cq.custom.list_namespaced_custom_object, GROUP, VERSION, self.cq.namespace, "tasks",
                              timeout_seconds=180):
            self.seen.append(event["object"].get("status") or {})
            if self.stop.is_set():
                w.stop()

    def close(self) -> list[dict]:
        self.stop.set()
        return self.seen


def start_times(cq: Cronoq, names: list[str]) -> list[float]:
    """Every attempt's dispatchedAt, in seconds, sorted."""
    return sorted(ts(a["dispatchedAt"]).timestamp() for n in names for a in cq.status(n).get("attempts", []))


def most_in_a_second(times: list[float]) -> int:
    """The most starts in any closed window of one second."""
    return max(sum(1 for u in times if t <= u <= t + 1.0) for t in times)


def reason(status: dict) -> str | None:
    return next((c["reason"] for c in status.get("conditions", []) if c["type"] == "Running"), None)


def test_starts_never_exceed_rate_plus_burst_and_a_waiting_task_names_the_limit(cq):
    watcher = StatusWatcher(cq)
    cq.pool(concurrency=20, rateLimit={"startsPerSecond": 2, "burst": 1})
    names = [f"r{i}" for i in range(8)]
    for name in names:
        cq.task(name, delay="500ms")
    wait_until(lambda: all(cq.status(n).get("phase") in TERMINAL for n in names), timeout=90, what="all finished")
    seen = watcher.close()

    times = start_times(cq, names)
    assert len(times) == 8 and all(cq.status(n)["phase"] == "Succeeded" for n in names)
    assert most_in_a_second(times) <= 3, f"more than rate + burst in one second: {times}"
    assert times[-1] - times[0] >= 3.5 - 0.25, f"8 starts at 2/s with burst 1 take 3.5 s at least: {times}"
    limited = [s for s in seen if s.get("phase") == "Queued" and reason(s) == "RateLimited"]
    assert limited, "a watch saw a task Queued for the rate limit"
    assert "starts at most 2 attempts/s (burst 1)" in limited[0]["message"] and limited[0].get("nextStartAt")
    assert cq.operator.metric("cronoq_dispatch_rate_limited_total", namespace=cq.namespace, pool="default") >= 1


def test_a_new_leader_starts_with_an_empty_bucket(pair):
    cq, a, b = pair
    cq.pool(concurrency=20, rateLimit={"startsPerSecond": 1, "burst": 5})
    cq.task("warm", delay="100ms")  # the leader has dispatched the pool: its bucket fills while idle
    warm = wait_until(lambda: (s := cq.status("warm")).get("phase") == "Succeeded" and s, timeout=60,
                      what="warm succeeded")
    time.sleep(6)  # idle: a's bucket holds its burst of 5 by now
    a.kill(signal.SIGKILL)
    names = [f"f{i}" for i in range(5)]
    for name in names:  # submitted while no one leads: b finds them all waiting
        cq.task(name, delay="100ms")
    b.wait_leading(timeout=40)
    wait_until(lambda: all(cq.status(n).get("phase") in TERMINAL for n in names), timeout=90, what="all finished")

    times = start_times(cq, names)
    assert all(cq.status(n)["attempts"][0]["leaseId"] != f"e{warm['epoch']}-a1" for n in names), "started by b"
    assert most_in_a_second(times) <= 2, f"b spent a burst it never saved: {times}"


def test_the_api_server_refuses_a_limit_out_of_bounds_naming_the_field(kubectl, namespace, crds):
    import json

    for limit, field in (({"startsPerSecond": 0}, "spec.rateLimit.startsPerSecond"),
                         ({"startsPerSecond": 2000}, "spec.rateLimit.startsPerSecond"),
                         ({"startsPerSecond": 1, "burst": 0}, "spec.rateLimit.burst"),
                         ({"burst": 2}, "spec.rateLimit.startsPerSecond")):
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TaskPool", "metadata": {"name": "p"},
                "spec": {"rateLimit": limit}}
        result = kubectl("create", "-f", "-", input=json.dumps(body), check=False, namespace=namespace)
        assert result.returncode != 0 and field in result.stderr, (limit, result.stderr)
    explained = kubectl("explain", "taskpool.spec.rateLimit").stdout
    assert "startsPerSecond" in explained and "burst" in explained and "how fast the pool starts" in explained
