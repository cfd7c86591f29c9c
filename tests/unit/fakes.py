"""The fakes the controller's unit tests share: a writer that keeps what it is sent as an API
server would, and a `World` that runs the Controller over it on a fake clock from the tests' one
epoch (`builders.T0`). Kept out of any test module, so that a test imports its fakes and never
another test; a fake only one module needs stays beside its tests."""
from __future__ import annotations

import asyncio
import sqlite3
import copy
from datetime import datetime
from typing import Any, Callable

from cronoq import metrics
from cronoq.archive import Database
from cronoq.controller.archive import Archiver
from cronoq.controller.clock import FakeClock
from cronoq.controller.reconciler import Controller

from tests.unit.builders import T0

NS = "unit"


class FakeWriter:
    """Keeps the objects written, as an API server would (resourceVersion bumped on each write),
    and records each call. `fail` holds exceptions the next status writes raise, in order."""

    def __init__(self) -> None:
        self.tasks: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.fail: list[Exception] = []
        self.job_fail: list[Exception] = []
        """Exceptions the next Job creations raise, in order."""
        self.events: list[tuple[str, str, str]] = []
        self.jobs: dict[str, dict[str, Any]] = {}
        self.deleted: list[tuple[str, str, str]] = []
        """(namespace, name, uid precondition) of each Job deletion asked for."""
        self.version = 100
        self.workloads: dict[str, list[dict[str, Any]]] = {}
        """Kueue Workloads by their Job's uid (read_workloads)."""
        self.local_queues: dict[str, tuple[str, dict[str, Any] | None]] = {}
        """Kueue LocalQueues by name, as read_local_queue answers (default: missing)."""

    def _bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        return obj

    async def replace_task_status(self, raw: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        name = raw["metadata"]["name"]
        if self.fail:
            self.calls.append(("status-failed", name))
            raise self.fail.pop(0)
        self.calls.append(("status", name))
        written = self._bump({**copy.deepcopy(self.tasks[name]), "status": copy.deepcopy(status)})
        self.tasks[name] = written
        return copy.deepcopy(written)

    async def read_task(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("read", name))
        return copy.deepcopy(self.tasks.get(name))

    async def read_local_queue(self, namespace: str, name: str) -> tuple[str, dict[str, Any] | None]:
        self.calls.append(("read-local-queue", name))
        return self.local_queues.get(name, ("missing", None))

    async def read_workloads(self, namespace: str, job_uid: str) -> list[dict[str, Any]] | None:
        self.calls.append(("read-workloads", job_uid))
        return copy.deepcopy(self.workloads.get(job_uid))

    async def create_job(self, job: dict[str, Any]) -> dict[str, Any]:
        if self.job_fail:
            self.calls.append(("job-refused", job["metadata"]["name"]))
            raise self.job_fail.pop(0)
        self.calls.append(("job", job["metadata"]["name"]))
        created = copy.deepcopy(job)
        created["metadata"].update(uid=f"uid-{job['metadata']['name']}", creationTimestamp="2026-12-03T12:00:00Z")
        self.jobs[job["metadata"]["name"]] = self._bump(created)
        return copy.deepcopy(created)

    async def delete_job(self, namespace: str, name: str, uid: str) -> None:
        self.calls.append(("delete-job", name))
        self.deleted.append((namespace, name, uid))

    async def retime_job(self, namespace: str, name: str, uid: str, seconds: int) -> dict[str, Any] | None:
        self.calls.append(("retime-job", f"{name}={seconds}"))
        job = self.jobs.get(name)
        if job is None or job["metadata"].get("uid") != uid:
            return None
        job["spec"]["ttlSecondsAfterFinished"] = seconds
        return copy.deepcopy(self._bump(job))

    async def post_event(self, raw: dict[str, Any], event: Any, now: datetime) -> None:
        self.calls.append(("event", event.reason))
        self.events.append((raw["metadata"]["name"], event.reason, "Warning" if event.warning else "Normal"))

    async def delete_task(self, namespace: str, name: str, uid: str) -> None:
        self.calls.append(("delete-task", name))

    async def replace_pool_status(self, raw: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        return {**raw, "status": status}


def pool(concurrency: int = 1, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "cronoq.io/v1alpha1", "kind": "TaskPool",
            "metadata": {"name": "p", "namespace": NS, "uid": "pool-uid", "resourceVersion": "1", "generation": 1},
            "spec": {"concurrency": concurrency, "leaseTTL": "0s", **spec}}


def task(name: str) -> dict[str, Any]:
    return {"apiVersion": "cronoq.io/v1alpha1", "kind": "Task",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": "2",
                         "generation": 1, "creationTimestamp": "2026-12-03T11:59:59Z"},
            "spec": {"pool": "p", "image": "busybox"}}


def pod(job: str, task_name: str, exit_code: int, job_uid: str | None = None) -> dict[str, Any]:
    """A pod of Job `job` (controlled by the Job of `job_uid`: the fake writer's uid by default)
    whose task container exited with `exit_code`."""
    end = {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
           "startedAt": "2026-12-03T12:00:01Z", "finishedAt": "2026-12-03T12:00:02Z"}
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": job_uid or f"uid-{job}", "controller": True}
    return {"metadata": {"name": f"{job}-xyz12", "namespace": NS, "resourceVersion": "300",
                         "ownerReferences": [owner],
                         "labels": {"batch.kubernetes.io/job-name": job, "cronoq.io/attempt": "1",
                                    "cronoq.io/task": task_name}},
            "status": {"phase": "Succeeded" if exit_code == 0 else "Failed",
                       "containerStatuses": [{"name": "task", "state": {"terminated": end}}]}}


async def settle(controller: Controller) -> None:
    """Let one worker run the Controller's queued keys until none is waiting or being processed (no
    time passes: keys queued for later wait for the clock)."""
    queue = controller.queue
    worker = asyncio.create_task(queue.run(1, controller.process))
    try:
        for _ in range(100_000):
            await asyncio.sleep(0)
            if len(queue) == 0 and not queue._processing:
                return
        raise AssertionError("the work queue never went quiet")
    finally:
        worker.cancel()


class World:
    """A Controller over the fake writer; watch events are fed by hand, work keys run to quiet."""

    def __init__(self, concurrency: int = 1, warnings_only: bool = False,
                 archiver: Callable[[FakeClock], Archiver] | None = None) -> None:
        self.writer = FakeWriter()
        self.clock = FakeClock(T0)
        self.controller = Controller(self.writer, epoch=1, clock=self.clock, warnings_only=warnings_only,
                                     archiver=archiver(self.clock) if archiver is not None else None)
        self.controller.intake.on_pool(None, pool(concurrency))

    def submit(self, name: str, **spec: Any) -> None:
        raw = task(name)
        raw["spec"].update(spec)
        self.writer.tasks[name] = copy.deepcopy(raw)
        self.controller.intake.on_task(None, raw)

    async def settle(self) -> None:
        await settle(self.controller)

    def status(self, name: str) -> dict[str, Any]:
        return self.writer.tasks[name].get("status") or {}


async def direct(fn: Callable[..., Any], *args: Any) -> Any:
    """An archive's database calls on the event loop's own thread: the fake clock then says when they end."""
    return fn(*args)


def archiver_on(url: str) -> Callable[[FakeClock], Archiver]:
    """A World's archiver over a real database (SQLite in a test's folder)."""
    return lambda clock: Archiver(Database(url), clock, run_blocking=direct)


async def archived_world(url: str) -> tuple[World, Archiver]:
    """A World whose archiver writes to a real, migrated database at `url`."""
    world = World(archiver=archiver_on(url))
    archiver = world.controller.archiver
    assert archiver is not None
    await archiver.migrate()
    return world, archiver


class DownDatabase:
    """An archive database that does not answer: every call but close fails as SQLite's would."""

    url = "sqlite:///down"

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any) -> Any:
            if name == "close":
                return None
            raise sqlite3.OperationalError("unable to open database file")
        return fail


def counter(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


QUOTA_REFUSAL = ('jobs.batch "a-a1" is forbidden: exceeded quota: tenant-jobs, requested: count/jobs.batch=1, '
                 'used: count/jobs.batch=5, limited: count/jobs.batch=5')


class KeeperClock:
    """Monotonic time that moves only when the keeper waits or a renewal takes time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0, "the keeper must not spin"
        self.now += seconds
