"""The walk of one attempt through a pull worker (issue 52): from the watch that sees its hand-over
to the report on its Lease, the calls go down the worker's layers once, never back up.

The layers are the import contract's (pyproject.toml, "The pull worker goes down once"). A profiler
records every call into the worker's modules on the two threads an attempt passes (the watch's and
its handler's); a call from a module into one of a higher layer is a climb. The worker's own Lease
and an attempt's heartbeats run on threads of their own, beside the walk, and are not counted."""
from __future__ import annotations

import json
import sys
import threading
import tomllib
from pathlib import Path
from types import FrameType
from typing import Any

from cronoq.pod_protocol import Annotation
from cronoq.worker.lifecycle import Worker

from tests.support.waiting import wait_until

WORKER = "w-1"
PYPROJECT = next(p / "pyproject.toml" for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())


def layers() -> dict[str, int]:
    """Each worker module's layer, from the top (0); the pod protocol below them all."""
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c.get("containers") == ["cronoq.worker"]]
    rank = {f"cronoq.worker.{name.strip()}": i for i, layer in enumerate(contract["layers"])
            for name in layer.replace("|", ":").split(":")}
    rank["cronoq.pod_protocol"] = len(contract["layers"])
    return rank


def module_of(frame: FrameType | None, rank: dict[str, int]) -> str | None:
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    if name.startswith("cronoq.pod_protocol"):
        return name
    return name if name in rank else None


class Walk:
    """The calls into the worker's modules, by thread: (caller's module, callee's module)."""

    def __init__(self) -> None:
        self.rank = layers()
        self.calls: dict[str, list[tuple[str | None, str]]] = {}

    def level(self, module: str) -> int:
        return self.rank.get(module, self.rank["cronoq.pod_protocol"])

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = module_of(frame, self.rank)
        if callee is not None:
            thread = threading.current_thread().name
            self.calls.setdefault(thread, []).append((module_of(frame.f_back, self.rank), callee))

    def stops(self, thread_prefix: str) -> list[str]:
        """The modules entered, in order, a module entered again right after itself once."""
        found: list[str] = []
        for thread, calls in self.calls.items():
            if thread.startswith(thread_prefix):
                for _, callee in calls:
                    if not found or found[-1] != callee:
                        found.append(callee)
        return found

    def climbs(self, thread_prefix: str) -> list[tuple[str, str]]:
        return [(caller, callee) for thread, calls in self.calls.items() if thread.startswith(thread_prefix)
                for caller, callee in calls if caller is not None and self.level(callee) < self.level(caller)]


class Api:
    """The API server for one Task handed to the worker: listed once, then a watch that says nothing."""

    def __init__(self, done: threading.Event) -> None:
        self.done = done
        self.report: dict[str, Any] | None = None
        self.task = {"metadata": {"name": "t", "uid": "uid-t"}, "spec": {"payload": {"to": "ann"}},
                     "status": {"phase": "Running", "attempt": 1, "worker": WORKER, "attempts": [
                         {"number": 1, "worker": WORKER, "leaseId": "e1-a1", "leaseTTLMs": 0}]}}

    def create_namespaced_lease(self, namespace: str, body: dict, _request_timeout: float = 0) -> None:
        annotations = body["metadata"].get("annotations") or {}
        if Annotation.REPORT in annotations:
            self.report = json.loads(annotations[Annotation.REPORT])

    def patch_namespaced_lease(self, *args: Any, **kwargs: Any) -> None:
        pass

    def delete_namespaced_lease(self, *args: Any, **kwargs: Any) -> None:
        pass

    def list_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {"metadata": {"resourceVersion": "1"}, "items": [self.task]}

    def watch_namespaced_custom_object(self, *args: Any, **kwargs: Any):
        self.done.wait(10)
        return iter(())


def test_an_attempt_goes_down_the_workers_layers_once_from_its_hand_over_to_its_report() -> None:
    api = Api(threading.Event())
    worker = Worker("mail", lambda ctx: f"sent to {ctx.payload['to']}", concurrency=1, namespace="jobs", name=WORKER,
                    ttl=30.0, grace=1.0, coordination=api, custom=api)
    api.done = worker.done  # the watch says nothing until the worker stops
    walk = Walk()
    threading.setprofile(walk)
    try:
        runner = threading.Thread(target=worker.run, name="main-of-the-worker", daemon=True)
        runner.start()
        wait_until(lambda: api.report is not None, timeout=10, what="the attempt reported")
        worker.drain()
        runner.join(10)
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
        sys.setprofile(None)

    assert api.report == {"outcome": "success", "message": "", "output": "sent to ann"}
    assert not runner.is_alive(), "drained and stopped"
    watch, handler = walk.stops("cronoq-worker-watch"), walk.stops("cronoq-handler")
    main = [m for m in (*watch, *handler) if m in ("cronoq.worker.lifecycle", "cronoq.worker.watch",
                                                   "cronoq.worker.attempts", "cronoq.worker.runner")]
    firsts = list(dict.fromkeys(main))
    assert firsts == ["cronoq.worker.lifecycle", "cronoq.worker.watch", "cronoq.worker.attempts",
                      "cronoq.worker.runner"], (watch, handler)
    assert "cronoq.pod_protocol.handover" in watch and "cronoq.worker.lease" in handler, (watch, handler)
    assert walk.climbs("cronoq-worker-watch") == [] and walk.climbs("cronoq-handler") == [], \
        (walk.climbs("cronoq-worker-watch"), walk.climbs("cronoq-handler"))
    print("watch thread:", " → ".join(m.removeprefix("cronoq.") for m in watch))
    print("handler thread:", " → ".join(m.removeprefix("cronoq.") for m in handler))
