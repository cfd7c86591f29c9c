"""The observer: watches a namespace's Tasks and Jobs and notes when each milestone is first seen.

It runs as its own process (`python -m bench.observer`), so parsing the watch streams never
waits behind the load generator's threads for the GIL: a milestone's time is when its event
arrived. Times are time.monotonic(), which on Linux is one clock for every process, so they
compare directly with the load generator's send times.

    python -m bench.observer --kubeconfig K --namespace NS --out obs.json --until tasks=5000

prints `ready` once both watches are connected, writes `<out>.progress` every half second, and
writes `out` when the goal is met (tasks: that many Tasks terminal; jobs: that many Jobs
Complete or Failed), at --timeout, or on SIGTERM.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.kubeapi import OBSERVER_AGENT, Api, ApiError, jobs_path, tasks_path, workflows_path  # noqa: E402
from cronoq.apiserver.errors import event_error  # noqa: E402

TERMINAL = {"Succeeded", "Failed", "DeadLettered", "Cancelled", "Skipped"}
WORKFLOW_TERMINAL = {"Succeeded", "Failed", "Error"}


class Milestones:
    """First-seen times, by object name; safe to feed from two watch threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tasks: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self.workflows: dict[str, dict[str, Any]] = {}
        self.tasks_done = 0
        self.jobs_done = 0
        self.workflows_done = 0

    @staticmethod
    def _phases(table: dict[str, dict[str, Any]], obj: dict[str, Any], now: float, terminal: set[str]) -> bool:
        """Note each phase of the object when first seen; True when it is its first terminal phase."""
        phase = (obj.get("status") or {}).get("phase")
        seen = table.setdefault(obj["metadata"]["name"], {"added": now, "phases": {}})
        if phase and phase not in seen["phases"]:
            seen["phases"][phase] = now
            if phase in terminal and not seen.get("terminal"):
                seen["terminal"] = phase
                return True
        return False

    def on_task(self, obj: dict[str, Any], now: float) -> None:
        with self.lock:
            if self._phases(self.tasks, obj, now, TERMINAL):
                self.tasks[obj["metadata"]["name"]]["attempt"] = (obj.get("status") or {}).get("attempt")
                self.tasks_done += 1

    def on_job(self, obj: dict[str, Any], now: float) -> None:
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        with self.lock:
            seen = self.jobs.setdefault(meta["name"], {"added": now, "task": labels.get("cronoq.io/task"),
                                                       "attempt": labels.get("cronoq.io/attempt")})
            if "started" not in seen and (obj.get("status") or {}).get("startTime"):
                seen["started"] = now  # the Job controller started it (for Kueue's: after admission)
            for cond in (obj.get("status") or {}).get("conditions") or []:
                kind = cond.get("type")
                if cond.get("status") == "True" and kind in ("Complete", "Failed", "SuccessCriteriaMet") \
                        and kind not in seen:
                    seen[kind] = now
                    if kind in ("Complete", "Failed"):
                        self.jobs_done += 1

    def on_workflow(self, obj: dict[str, Any], now: float) -> None:
        """An Argo Workflow's phases (Pending, Running, Succeeded, ...), each first seen."""
        with self.lock:
            self.workflows_done += self._phases(self.workflows, obj, now, WORKFLOW_TERMINAL)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {"tasks": dict(self.tasks), "jobs": dict(self.jobs), "workflows": dict(self.workflows)}

    def progress(self) -> dict[str, Any]:
        with self.lock:
            return {"tasks_seen": len(self.tasks), "tasks_done": self.tasks_done, "jobs_created": len(self.jobs),
                    "jobs_done": self.jobs_done, "workflows_done": self.workflows_done, "at": time.monotonic()}


def follow(api: Api, path: str, feed, connected: threading.Event, stop: threading.Event) -> None:
    """List once for a resourceVersion (and any objects already there), then watch, reconnecting."""
    def listed(query: str) -> str:
        listing = api.request("GET", f"{path}?{query}")
        now = time.monotonic()
        for item in listing.get("items", []):
            feed(item, now)
        return listing["metadata"]["resourceVersion"]

    rv = listed("limit=500")
    while not stop.is_set():
        try:
            for event in api.watch(path, rv, on_connected=connected.set):
                obj = event.get("object") or {}
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    feed(obj, time.monotonic())
                elif event.get("type") == "ERROR":
                    raise event_error(obj)
        except ApiError as err:
            if err.status == 410:  # too old: list again; milestones already seen stay first-seen
                rv = listed("limit=0")
            else:
                print(f"observer: watch {path}: {err}", file=sys.stderr, flush=True)
                time.sleep(0.5)
        except Exception as err:  # noqa: BLE001 - a dropped stream is reconnected
            print(f"observer: watch {path} dropped: {err!r}", file=sys.stderr, flush=True)
            time.sleep(0.2)


class ObserverProcess:
    """The handle the scenarios hold: start the observer, wait until it watches, read progress."""

    def __init__(self, kubeconfig: str | Path, namespace: str, out: Path, until: str, timeout: float = 3600,
                 workflows: bool = False) -> None:
        import subprocess
        out.parent.mkdir(parents=True, exist_ok=True)
        for stale in (out, out.with_name(out.name + ".progress")):
            stale.unlink(missing_ok=True)
        self.out = out
        repo = Path(__file__).resolve().parent.parent
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.observer", f"--kubeconfig={kubeconfig}", f"--namespace={namespace}",
             f"--out={out}", f"--until={until}", f"--timeout={timeout}", *(["--workflows"] if workflows else [])],
            cwd=repo, stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            self.process.kill()
            raise RuntimeError(f"the observer did not start watching {namespace}")

    def progress(self) -> dict[str, Any]:
        try:
            return json.loads(self.out.with_name(self.out.name + ".progress").read_text())
        except (OSError, ValueError):
            return {"tasks_seen": 0, "tasks_done": 0, "jobs_created": 0, "jobs_done": 0, "workflows_done": 0}

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        """Wait for the goal (or the observer's own timeout) and return the milestones."""
        self.process.wait(timeout=timeout)
        return json.loads(self.out.read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--until", default="", help="tasks=N, jobs=N or workflows=N: stop when that many are finished")
    p.add_argument("--workflows", action="store_true", help="watch Argo Workflows too")
    p.add_argument("--timeout", type=float, default=3600)
    args = p.parse_args(argv)
    goal_kind, _, goal = args.until.partition("=")
    goal_n = int(goal) if goal else None

    api = Api(args.kubeconfig, user_agent=OBSERVER_AGENT, pool_size=4)
    seen = Milestones()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    watched = [(tasks_path(args.namespace), seen.on_task), (jobs_path(args.namespace), seen.on_job)]
    if args.workflows:
        watched.append((workflows_path(args.namespace), seen.on_workflow))
    connected = [threading.Event() for _ in watched]
    for (path, feed), ready in zip(watched, connected):
        threading.Thread(target=follow, args=(api, path, feed, ready, stop), daemon=True).start()
    for ready in connected:
        if not ready.wait(60):
            print("observer: watches did not connect", file=sys.stderr)
            return 1
    print("ready", flush=True)

    out = Path(args.out)
    progress_file = out.with_name(out.name + ".progress")
    deadline = time.monotonic() + args.timeout
    timed_out = False
    while not stop.is_set():
        progress = seen.progress()
        tmp = progress_file.with_name(progress_file.name + ".tmp")
        tmp.write_text(json.dumps(progress))
        os.replace(tmp, progress_file)
        done = progress[f"{goal_kind}_done"] if goal_kind else 0
        if goal_n is not None and done >= goal_n:
            break
        if time.monotonic() > deadline:
            timed_out = True
            break
        stop.wait(0.5)
    result = seen.snapshot()
    result["timed_out"] = timed_out
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, out)
    return 2 if timed_out else 0


if __name__ == "__main__":
    sys.exit(main())
