"""The operator image, run with podman exactly as the chart's pod runs it: the chart's RBAC
applied, a token of the chart's ServiceAccount from the TokenRequest API and the cluster CA where
the kubelet mounts them, KUBERNETES_SERVICE_HOST/PORT, a read-only root, user 65532, a tmpfs
/tmp and the chart's own arguments. It must become ready and leader, carry a task through a
failed attempt to success, serve cronoq_ metrics, and release its Lease on SIGTERM."""
from __future__ import annotations

import json
import urllib.request

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from tests.image.conftest import api_server_env, request_token, service_account_volume
from tests.support.tasks import Cronoq
from tests.support.waiting import wait_until

# The first test may build the images (podman installed, a Debian base made): `make test`
# builds them before pytest, a bare `pytest tests/image` inside the first test's limit.
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1500)]


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, ""
    except OSError:
        return 0, ""


def samples(text: str, name: str) -> dict[tuple, float]:
    return {tuple(sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples if s.name == name}


def test_the_image_runs_as_the_charts_pod_leads_retries_a_task_and_releases_its_lease_on_sigterm(
        api, own_namespace, release, images, run_container, scratch):
    deployment, ports = release
    pod = deployment["spec"]["template"]["spec"]
    (spec,) = pod["containers"]
    assert spec["image"] == images.operator
    assert f"--sidecar-image={images.operator}" in spec["args"]
    assert spec["securityContext"]["readOnlyRootFilesystem"] and spec["securityContext"]["runAsUser"] == 65532

    token = request_token(api, own_namespace, pod["serviceAccountName"])
    pod_name = f"{deployment['metadata']['name']}-7d9f-x2k4q"
    operator = run_container(
        images.operator, *spec["args"],
        env={**api_server_env(), "POD_NAME": pod_name, "POD_NAMESPACE": own_namespace},
        mounts=[service_account_volume(scratch / "sa", token=token, namespace=own_namespace)])

    def ready() -> bool:
        if not operator.running():
            raise AssertionError(f"the operator container exited:\n{operator.logs()}")
        return http_get(f"http://127.0.0.1:{ports['probePort']}/readyz")[0] == 200

    wait_until(ready, timeout=60, what="the container's /readyz")
    assert http_get(f"http://127.0.0.1:{ports['probePort']}/healthz")[0] == 200

    leases = client.CoordinationV1Api(api)
    lease_name = "cronoq-leader"  # `cronoq operator`'s default; the chart passes no other

    def holder() -> str | None:
        try:
            return leases.read_namespaced_lease(lease_name, own_namespace).spec.holder_identity
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise

    wait_until(lambda: (holder() or "").startswith(pod_name + "_"), timeout=60,
               what=f"the container to take the Lease ({operator.logs()[-2000:]})")

    # A task whose first attempt exits 1 (kwok plays the pod) and whose second succeeds.
    cq = Cronoq(api, own_namespace, None)
    cq.pool("default", concurrency=2, retry={"maxAttempts": 3, "initialBackoff": "0s", "jitter": "none"})
    cq.task("flaky", outcome_a1="Fail", exit_code_a1="1", message_a1="upstream unavailable", delay="300ms")
    status = cq.wait_phase("flaky", "Succeeded", timeout=90)
    first, second = status["attempts"]
    assert (first["number"], first["outcome"], first["exitCode"]) == (1, "Retryable", 1)
    assert (second["number"], second["outcome"], second["trigger"]) == (2, "Success", "Retry")
    assert {j.metadata.name for j in cq.jobs("flaky")} == {"flaky-a1", "flaky-a2"}

    # A task without the SDK gets the heartbeat sidecar: the image the chart passed, this one.
    cq.task("plain", heartbeatSidecar=True, leaseTTL="30s", delay="300ms")
    cq.wait_phase("plain", "Succeeded", timeout=90)
    (job,) = cq.jobs("plain")
    (sidecar,) = job.spec.template.spec.init_containers
    assert (sidecar.image, sidecar.command, sidecar.args) == (images.operator, ["cronoq"], ["heartbeat"])

    code, text = http_get(f"http://127.0.0.1:{ports['metricsPort']}/metrics")
    assert code == 200
    assert samples(text, "cronoq_leader") == {(): 1.0}
    ns = ("namespace", own_namespace)
    assert samples(text, "cronoq_tasks_total")[(ns, ("pool", "default"), ("status", "succeeded"))] == 2.0
    attempts = samples(text, "cronoq_attempts_total")
    assert attempts[(ns, ("outcome", "retryable"), ("pool", "default"))] == 1.0
    assert attempts[(ns, ("outcome", "success"), ("pool", "default"))] == 2.0

    held = leases.read_namespaced_lease(lease_name, own_namespace).spec
    assert held.holder_identity.startswith(pod_name + "_")
    operator.stop(timeout=30)  # SIGTERM, as when the pod is deleted

    logs = operator.logs()
    assert operator.exit_code() == 0, logs
    released = leases.read_namespaced_lease(lease_name, own_namespace).spec
    assert released.holder_identity is None, released
    assert "released the leader Lease" in logs
    # What the container printed, for the record of a run.
    print(json.dumps({"lease_before": held.holder_identity,
                      "log": [line for line in logs.splitlines() if "aiohttp.access" not in line]}, indent=1))
