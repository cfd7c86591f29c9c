"""Checkpoints across attempts on real pods (issue 40, part 2): the example
(examples/real-node/checkpoints.yaml) saves its progress with the SDK; attempt 1's pod is deleted
halfway, and attempt 2 resumes from the newest checkpoint the operator recorded and does only the
items left. A late checkpoint on attempt 1's Lease, once attempt 2 runs, changes nothing. Beside it
a task in the same pool that heartbeats but never checkpoints writes its Task no more than before,
and a shell task without the SDK checkpoints through the heartbeat sidecar's file."""
from __future__ import annotations

import json
import threading

import pytest
from kubernetes import client, watch

from tests.realnode.conftest import placement
from tests.support.cluster import REPO

pytestmark = pytest.mark.cluster

EXAMPLE = REPO / "examples" / "real-node" / "checkpoints.yaml"
TASK = "resumable-count"
PLAIN = "resumable-plain"  # the same pool and leaseTTL, no checkpoint
SIDECAR = "resumable-sh"  # no SDK: a shell script, its checkpoint file carried by the heartbeat sidecar
SIDECAR_SCRIPT = """
if [ -z "$CRONOQ_CHECKPOINT" ]; then
  printf '{"done":5}' > "$CRONOQ_CHECKPOINT_FILE.tmp" && mv "$CRONOQ_CHECKPOINT_FILE.tmp" "$CRONOQ_CHECKPOINT_FILE"
  sleep 3; exit 1
fi
printf '%s' "$CRONOQ_CHECKPOINT" > /dev/termination-log
"""


class TaskWrites:
    """Every version of one Task, seen by a watch from its creation: the writes to it."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str) -> None:
        self.versions: list[dict] = []
        self._watch = watch.Watch()
        custom = client.CustomObjectsApi(api)
        selector = f"metadata.name={name}"
        # From the listing's version on: every write after this constructor returns is seen.
        since = custom.list_namespaced_custom_object("cronoq.io", "v1alpha1", namespace, "tasks",
                                                     field_selector=selector)["metadata"]["resourceVersion"]

        self.stopped = False
        self.broken: Exception | None = None
        """Why the stream ended before `stop()`: then versions may be missing."""

        def follow() -> None:
            try:
                for event in self._watch.stream(custom.list_namespaced_custom_object, "cronoq.io", "v1alpha1",
                                                namespace, "tasks", field_selector=selector, resource_version=since,
                                                timeout_seconds=300):
                    self.versions.append({"type": event["type"], "status": event["object"].get("status") or {}})
            except Exception as err:  # noqa: BLE001 - said by `broken`
                if not self.stopped:
                    self.broken = err

        self._thread = threading.Thread(target=follow, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stopped = True
        self._watch.stop()

    def checkpoints(self) -> list[dict]:
        return [v["status"]["checkpoint"] for v in self.versions if v["status"].get("checkpoint")]


def done(checkpoint: dict | None) -> int:
    return json.loads(checkpoint["data"])["done"] if checkpoint else 0


def test_a_task_killed_halfway_resumes_from_its_checkpoint_and_a_stale_one_is_ignored(rq, kubectl, real_node):
    writes, plain_writes = TaskWrites(rq.api, rq.namespace, TASK), TaskWrites(rq.api, rq.namespace, PLAIN)
    kubectl("apply", "-f", str(EXAMPLE), namespace=rq.namespace)
    plain = {"apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": PLAIN},
             "spec": {"pool": "resumable", "image": "localhost/cronoq/operator:dev", "command": ["python3", "-c"],
                      "args": ["import time, cronoq.worker as w\nw.run(lambda ctx: time.sleep(8) or 'done')"]}}
    rq.custom.create_namespaced_custom_object("cronoq.io", "v1alpha1", rq.namespace, "tasks", plain)
    rq.pool("resumable-sh", heartbeatSidecar=True, leaseTTL="6s",
            retry={"maxAttempts": 2, "initialBackoff": "1s", "jitter": "none"}, template=placement(real_node))
    rq.custom.create_namespaced_custom_object("cronoq.io", "v1alpha1", rq.namespace, "tasks", {
        "apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": SIDECAR},
        "spec": {"pool": "resumable-sh", "image": "localhost/cronoq/operator:dev", "command": ["sh", "-c"],
                 "args": [SIDECAR_SCRIPT]}})
    try:
        # Attempt 1 has saved some progress and the operator recorded it: delete its pod, halfway.
        halfway = rq.wait_status(TASK, lambda s: s.get("attempt") == 1 and done(s.get("checkpoint")) >= 8,
                                 "attempt 1's checkpoint past item 8 recorded", timeout=180)
        assert halfway["checkpoint"]["attempt"] == 1
        (pod,) = rq.core.list_namespaced_pod(rq.namespace, label_selector=f"cronoq.io/task={TASK},cronoq.io/attempt=1").items
        # Without grace, as a lost node's pods go: killed at once, no SIGTERM first.
        kubectl("delete", "pod", pod.metadata.name, "--grace-period=0", "--force", namespace=rq.namespace)

        second = rq.wait_status(TASK, lambda s: s.get("attempt") == 2 and len(s.get("attempts") or []) == 2
                                and s["attempts"][1].get("startedAt"), "attempt 2 running", timeout=120)
        (pod,) = rq.core.list_namespaced_pod(rq.namespace, label_selector=f"cronoq.io/task={TASK},cronoq.io/attempt=2").items
        env = {e.name: e.value for e in next(c for c in pod.spec.containers if c.name == "task").env}
        handed_over = {"attempt": 1, "data": env["CRONOQ_CHECKPOINT"]}
        # Attempt 1's Lease (its pod is gone; a partitioned one could still write it) says much more: stale.
        first_lease = second["attempts"][0]["job"]
        client.CoordinationV1Api(rq.api).patch_namespaced_lease(
            first_lease, rq.namespace, {"metadata": {"annotations": {"cronoq.io/checkpoint": '{"done":19}'}}})

        finished = rq.wait_phase(TASK, "Succeeded", timeout=120)
        plain_done = rq.wait_phase(PLAIN, "Succeeded", timeout=60)
        by_sidecar = rq.wait_phase(SIDECAR, "Succeeded", timeout=60)
    finally:
        writes.stop()
        plain_writes.stop()
        kubectl("delete", "-f", str(EXAMPLE), "--wait=false", namespace=rq.namespace, check=False)

    assert writes.broken is None and plain_writes.broken is None, "the watches saw every write"
    assert by_sidecar["output"] == '{"done":5}', "the file attempt 1 wrote, carried by its sidecar, handed to attempt 2"
    assert (by_sidecar["checkpoint"]["attempt"], by_sidecar["checkpoint"]["data"]) == (1, '{"done":5}')
    first, last = finished["attempts"]
    output = json.loads(finished["output"])
    assert first["outcome"] == "Retryable" and last["outcome"] == "Success"
    assert output == {"resumedFrom": done(handed_over), "processed": 20 - done(handed_over), "attempt": 2}, \
        "attempt 2 started from the newest checkpoint attempt 1 saved and did only the rest"
    assert done(handed_over) >= 8
    # A succeeding attempt sends no last checkpoint: the newest its renewals carried stays.
    assert finished["checkpoint"]["attempt"] == 2 and done(handed_over) < done(finished["checkpoint"]) <= 20
    seen = writes.checkpoints()
    first_saved = [c for c in seen if c["attempt"] == 1]
    assert first_saved[-1]["data"] == handed_over["data"], "attempt 2 got the newest checkpoint attempt 1 saved"
    assert max(done(c) for c in first_saved) == done(handed_over), "the stale {done: 19} never counted"
    assert [c["attempt"] for c in seen] == sorted(c["attempt"] for c in seen), "attempt 1's never after attempt 2's"

    modified = [v for v in plain_writes.versions if v["type"] == "MODIFIED"]
    assert len(modified) == 2, [v["status"].get("phase") for v in modified]  # Running, Succeeded: as before
    assert "checkpoint" not in plain_done
    statuses = [v["status"] for v in writes.versions]
    task_writes = sum(1 for v in writes.versions if v["type"] == "MODIFIED")
    only_checkpoint = sum(1 for a, b in zip(statuses, statuses[1:])
                          if a.get("checkpoint") != b.get("checkpoint") and
                          {k: v for k, v in a.items() if k != "checkpoint"} == {k: v for k, v in b.items() if k != "checkpoint"})
    distinct = len({(c["attempt"], c["data"]) for c in seen})
    print(f"\ncheckpoints: attempt 1 ran {first.get('durationMs')} ms and saved {done(handed_over)} items; "
          f"attempt 2 ran {last.get('durationMs')} ms from {handed_over['data']} and did {output['processed']}; "
          f"Task writes {task_writes}, {only_checkpoint} of them for a checkpoint alone ({distinct} checkpoints "
          f"recorded); the plain task's {len(modified)}")
