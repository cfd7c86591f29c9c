"""`Client.kueue_hold` (what `cronoq describe` and the dashboard read of a task Kueue holds),
against a fake of the requests it makes (cronoq.apiserver's `Api.request`): the attempt's Job, its Workloads, its
LocalQueue, and Kueue's visibility API where it is served (the place) or not (no place)."""
from __future__ import annotations

from typing import Any

from cronoq.apiserver.errors import error_of
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


class Fakes:
    """The Job, Workloads and LocalQueue as the API server has them; `pending` the visibility API's
    answer (None: not served, 404). `asked` notes each path of the visibility API asked."""

    def __init__(self, job: dict[str, Any], pending: dict[str, Any] | None) -> None:
        self.job, self.pending, self.asked = job, pending, []

    def request(self, method: str, path: str, params: dict[str, Any] | None = None, **_: Any) -> Any:
        assert method == "GET"
        if path == "/apis/batch/v1/namespaces/ns/jobs/held-a1":
            return self.job
        if path == "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads":
            assert params == {"labelSelector": "kueue.x-k8s.io/job-uid=u1"}
            return {"items": [WORKLOAD]}
        if path == "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/localqueues/gpu":
            return {"spec": {"clusterQueue": "team-a"}}
        assert path.startswith("/apis/visibility.kueue.x-k8s.io/"), path
        self.asked.append(path)
        if "visibility.kueue.x-k8s.io/v1beta2" in path and self.pending is not None:
            return self.pending
        raise error_of(404, "Not Found")


def client(fakes: Fakes) -> Client:
    return Client("ns", api=fakes)  # type: ignore[arg-type]


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
