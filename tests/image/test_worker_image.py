"""The worker example's image (examples/worker), run with podman the way an attempt's pod runs
it: the environment and termination message path of the Job the operator builds for the attempt
(engine/jobs.build_job), a token bound to the attempt's pod for the ServiceAccount the chart's
lease role is bound to (so the chart's ValidatingAdmissionPolicy judges its requests), the
cluster CA, a read-only root and user 65532. It must create and renew its attempt's Lease, leave
its output as the termination message, and fence itself when another attempt takes the Lease."""
from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from kubernetes import client

from tests.image.conftest import api_server_env, service_account_volume
from tests.support.waiting import wait_until

# The first test may build the images (podman installed, a Debian base made): `make test`
# builds them before pytest, a bare `pytest tests/image` inside the first test's limit.
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1500)]

TTL = 3
LEASE_ID = "e1-a1"


class Attempt:
    """Attempt 1 of a Task nobody reconciles (no operator watches `o-` namespaces): the Task
    exists so the Lease's owner reference holds, its pod exists so a token can be bound to it."""

    def __init__(self, api, namespace: str, image: str, payload: dict) -> None:
        from cronoq.api import Task
        from cronoq.engine.jobs import build_job

        self.namespace = namespace
        self._seen: list[str] = []
        self.custom = client.CustomObjectsApi(api)
        self.leases = client.CoordinationV1Api(api)
        core = client.CoreV1Api(api)
        body = self.custom.create_namespaced_custom_object("cronoq.io", "v1alpha1", namespace, "tasks", {
            "apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": "sum"},
            "spec": {"image": image, "payload": payload, "leaseTTL": f"{TTL}s"}})
        # As the chart's operator builds it: the pod runs as the chart's task ServiceAccount, which
        # holds the lease role (a namespace's `default` does not).
        self.job = build_job(Task.model_validate(body), None, 1, LEASE_ID, lease_ttl=timedelta(seconds=TTL),
                             service_account="cronoq-task")
        pod_spec = self.job["spec"]["template"]["spec"]
        (self.container,) = pod_spec["containers"]
        self.pod_name = f"{self.job['metadata']['name']}-x7k2p"  # the Job controller's <job>-<suffix>
        pod = core.create_namespaced_pod(namespace, {
            "metadata": {"name": self.pod_name, "labels": self.job["spec"]["template"]["metadata"]["labels"],
                         "annotations": {"kwok.cronoq.io/outcome": "Run"}},
            "spec": {"serviceAccountName": pod_spec.get("serviceAccountName", "default"),
                     "containers": [{"name": "task", "image": image}]}})
        self.token = core.create_namespaced_service_account_token(
            pod.spec.service_account_name, namespace, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
                audiences=[], expiration_seconds=600,
                bound_object_ref=client.V1BoundObjectReference(kind="Pod", api_version="v1", name=self.pod_name,
                                                               uid=pod.metadata.uid)))).status.token
        self.lease_name = next(e["value"] for e in self.container["env"] if e["name"] == "CRONOQ_LEASE_NAME")

    def env(self) -> dict[str, str]:
        """The Job's container env as the kubelet resolves it (CRONOQ_NAMESPACE is a fieldRef)."""
        env = {}
        for e in self.container["env"]:
            if "value" in e:
                env[e["name"]] = e["value"]
            else:
                assert e["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}, e
                env[e["name"]] = self.namespace
        return {**env, **api_server_env()}

    def termination_path(self) -> str:
        # build_job leaves the container's terminationMessagePath at the kubelet's default.
        return self.container.get("terminationMessagePath", "/dev/termination-log")

    def renew_times(self) -> list[str]:
        """Distinct spec.renewTime values seen so far (polled)."""
        try:
            spec = self.leases.read_namespaced_lease(self.lease_name, self.namespace).spec
        except client.ApiException as err:
            if err.status == 404:
                return self._seen
            raise
        if spec.renew_time is not None:
            stamp = spec.renew_time.isoformat()
            if not self._seen or self._seen[-1] != stamp:
                self._seen.append(stamp)
        return self._seen



@pytest.fixture
def start_attempt(api, own_namespace, release, images, run_container, scratch):
    """start_attempt(payload) -> (attempt, container, termination log on the host)."""

    def start(payload: dict):
        attempt = Attempt(api, own_namespace, images.worker, payload)
        log = scratch / "termination-log"
        log.write_text("")
        log.chmod(0o666)  # the kubelet's file is writable by the container's user
        container = run_container(
            images.worker, env=attempt.env(),
            mounts=[service_account_volume(scratch / "sa", token=attempt.token, namespace=own_namespace),
                    f"{log}:{attempt.termination_path()}:rw"])
        return attempt, container, log

    return start


def test_the_worker_image_renews_its_lease_and_leaves_its_output(start_attempt):
    attempt, container, log = start_attempt({"numbers": [1, 2, 3, 4], "seconds": 4})

    wait_until(lambda: attempt.renew_times() and not container.running(), timeout=60, interval=0.1,
               what=f"the worker to finish ({container.logs()[-1500:]})")
    seen = attempt.renew_times()

    assert container.exit_code() == 0, container.logs()
    assert json.loads(log.read_text()) == {"outcome": "success", "message": "", "output": '{"sum":10,"attempt":1}'}
    assert "attempt 1 of task" in container.logs()
    # Created at the first renewal, then renewed every TTL/3 while the handler worked 4 s.
    assert len(seen) >= 3, seen
    lease = attempt.leases.read_namespaced_lease(attempt.lease_name, attempt.namespace)
    assert lease.spec.holder_identity == LEASE_ID
    assert lease.metadata.labels["cronoq.io/attempt"] == "1"


def test_the_worker_image_fences_itself_when_its_lease_is_taken(start_attempt):
    attempt, container, log = start_attempt({"numbers": [5], "seconds": 120})
    wait_until(lambda: len(attempt.renew_times()) >= 2, timeout=60, interval=0.1,
               what=f"renewals of the attempt's Lease ({container.logs()[-1500:]})")
    assert container.running()

    # Another attempt's lease id takes the Lease (the admin's write: no policy applies to it).
    taken = attempt.leases.patch_namespaced_lease(attempt.lease_name, attempt.namespace,
                                                  {"spec": {"holderIdentity": "e1-a2"}})
    took_over = time.monotonic()
    wait_until(lambda: not container.running(), timeout=TTL + 5, interval=0.1, what="the worker to fence itself")

    assert time.monotonic() - took_over <= TTL + 1
    assert container.exit_code() == 3, container.logs()
    doc = json.loads(log.read_text())
    assert doc["outcome"] == "retryable" and doc["reason"] == "LeaseLost", doc
    assert "no longer held by e1-a1" in doc["message"], doc
    # It never renewed the new holder's Lease.
    after = attempt.leases.read_namespaced_lease(attempt.lease_name, attempt.namespace).spec
    assert after.holder_identity == "e1-a2" and after.renew_time == taken.spec.renew_time
