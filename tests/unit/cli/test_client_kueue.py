"""`Client.kueue_hold` (what `cronoq describe` and the dashboard read of a task Kueue holds),
against fakes of the kubernetes package's APIs it calls: the attempt's Job, its Workloads, its
LocalQueue, and Kueue's visibility API where it is served (the place) or not (no place)."""
from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from kubernetes import client as k8s

from cronoq.client import Client
from cronoq.engine.attempts import waiting
from tests.unit.builders import make_task

JOB = {"metadata": {"name": "held-a1", "uid": "u1", "labels": {"cronoq.io/attempt": "1",
                                                               "kueue.x-k8s.io/queue-name": "gpu"}},
       "spec": {"suspend": True}, "status": {}}
WORKLOAD = {"metadata": {"name": "job-held-a1-1"},
            "status": {"resourceRequests": [{"name": "main", "resources": {"nvidia.com/gpu": "4"}}],
                       "conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                       "message": "couldn't assign flavors…"}]}}


class Fakes(k8s.ApiClient):
    """The Job, Workloads and LocalQueue as the API server has them; `pending` the visibility API's
    answer (None: not served, 404). `asked` notes each path."""

    def __init__(self, job: dict[str, Any], pending: dict[str, Any] | None) -> None:
        super().__init__()
        self.job, self.pending, self.asked = job, pending, []

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        self.asked.append(url.removeprefix(self.configuration.host))
        served = "visibility.kueue.x-k8s.io/v1beta2" in url and self.pending is not None
        return SimpleNamespace(status=200 if served else 404, data=json.dumps(self.pending).encode(),
                               read=lambda: None)

    def read_namespaced_job(self, name: str, namespace: str) -> dict[str, Any]:
        assert (name, namespace) == ("held-a1", "ns")
        return self.job

    def list_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                      label_selector: str = "") -> dict[str, Any]:
        assert (group, plural, label_selector) == ("kueue.x-k8s.io", "workloads", "kueue.x-k8s.io/job-uid=u1")
        return {"items": [WORKLOAD]}

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                     name: str) -> dict[str, Any]:
        assert (plural, name) == ("localqueues", "gpu")
        return {"spec": {"clusterQueue": "team-a"}}


def client(fakes: Fakes) -> Client:
    made = Client("ns", api_client=fakes)
    made.batch = made.custom = fakes  # type: ignore[assignment]
    return made


def running():
    return make_task("held", "ns").status({"phase": "Running", "attempt": 1,
                                           "attempts": [{"number": 1, "job": "held-a1"}]}).obj()


def test_where_the_visibility_api_is_served_describe_gives_the_place() -> None:
    pending = {"items": [{"metadata": {"name": "job-held-a1-1"}, "positionInClusterQueue": 11}]}
    hold = client(Fakes(JOB, pending)).kueue_hold(running())
    assert hold is not None
    assert waiting.kueue_text(hold, position=True) == (
        "waiting for Kueue: LocalQueue gpu, ClusterQueue team-a, position 12, needs 4 nvidia.com/gpu; "
        "Kueue says: couldn't assign flavors…")


def test_where_it_is_not_the_place_is_unknown_after_asking_both_versions() -> None:
    fakes = Fakes(JOB, None)
    hold = client(fakes).kueue_hold(running())
    assert hold is not None and hold.position is None
    assert [p.split("/")[3] for p in fakes.asked] == ["v1beta2", "v1beta1"]
    assert "position unknown (Kueue's visibility API is not served)" in waiting.kueue_text(hold, position=True)


def test_a_job_kueue_admitted_or_a_task_not_running_reads_nothing_of_kueue() -> None:
    admitted = {**JOB, "spec": {"suspend": False}, "status": {"startTime": "2026-12-03T12:00:05Z"}}
    fakes = Fakes(admitted, None)
    assert client(fakes).kueue_hold(running()) is None and fakes.asked == []
    queued = make_task("held", "ns").status({"phase": "Queued"}).obj()
    assert client(Fakes(JOB, None)).kueue_hold(queued) is None
