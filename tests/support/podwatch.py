"""A pod watch run by the test itself, in a thread: what happened to each attempt pod and when,
by the test's own clock. It measures what a user would see (when a container was seen running,
terminated, or gone) independently of what the operator reports."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from kubernetes import client, watch


@dataclass
class PodTimes:
    added: float | None = None
    running: float | None = None
    """First seen with its task container running."""
    ended: float | None = None
    """First seen with its task container terminated, in a terminal phase (a pod failed by the
    pod GC keeps a running container status), or deleted (whichever came first)."""
    deleting: float | None = None
    """First seen with a deletionTimestamp."""


@dataclass
class PodWatch:
    api: client.ApiClient
    namespace: str
    pods: dict[str, PodTimes] = field(default_factory=dict)
    last: dict[str, client.V1Pod] = field(default_factory=dict)
    """Each attempt's pod as last seen (a deleted pod: its final container statuses)."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> PodWatch:
        core = client.CoreV1Api(self.api)
        w = watch.Watch()
        started = threading.Event()

        def listing() -> str:
            pods = core.list_namespaced_pod(self.namespace, label_selector="cronoq.io/task")
            for pod in pods.items:
                self._record("MODIFIED", pod)
            return pods.metadata.resource_version

        def run() -> None:
            version = listing()
            started.set()
            while not self._stop.is_set():  # short watches, resumed where they left off
                try:
                    if version is None:  # after a 410, or with the API server away (fault tests)
                        version = listing()
                    for event in w.stream(core.list_namespaced_pod, self.namespace, timeout_seconds=2,
                                          label_selector="cronoq.io/task", resource_version=version):
                        self._record(event["type"], event["object"])
                        version = event["object"].metadata.resource_version
                        if self._stop.is_set():
                            break
                except Exception:  # noqa: BLE001 - the API server restarting, or 410 Gone: list again
                    version = None
                    time.sleep(0.2)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        started.wait()
        return self

    def _record(self, kind: str, pod: client.V1Pod) -> None:
        now = time.monotonic()
        job = pod.metadata.labels.get("batch.kubernetes.io/job-name", pod.metadata.name)
        times = self.pods.setdefault(job, PodTimes())
        self.last[job] = pod
        if times.added is None:
            times.added = now
        if pod.metadata.deletion_timestamp is not None and times.deleting is None:
            times.deleting = now
        for status in pod.status.container_statuses or []:
            if status.name != "task":
                continue
            if status.state.running is not None and times.running is None:
                times.running = now
            if status.state.terminated is not None and times.ended is None:
                times.ended = now
        if (kind == "DELETED" or pod.status.phase in ("Succeeded", "Failed")) and times.ended is None:
            times.ended = now

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
