"""The test cluster is real: the Job controller, scheduler, garbage collector, RBAC and CEL all act,
and kwok plays the pod outcomes that the annotations in hack/kwok-stages.yaml ask for."""
from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.waiting import wait_until


def job(name: str, annotations: dict[str, str] | None = None) -> client.V1Job:
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(
            backoff_limit=0,
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(annotations=annotations or {}),
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[client.V1Container(name="main", image="example.invalid/task:1")],
                ),
            ),
        ),
    )


def job_condition(batch: client.BatchV1Api, namespace: str, name: str) -> str | None:
    """The Job's finished condition type (Complete or Failed) once it holds, else None."""
    status = batch.read_namespaced_job_status(name, namespace).status
    for cond in status.conditions or []:
        if cond.type in ("Complete", "Failed") and cond.status == "True":
            return cond.type
    return None


def job_pods(core: client.CoreV1Api, namespace: str, name: str) -> list[client.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").items


def main_state(pod: client.V1Pod):
    statuses = pod.status.container_statuses or []
    return statuses[0].state if statuses else None


def test_job_pod_is_scheduled_on_a_kwok_node_and_the_job_completes(api, namespace):
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    batch.create_namespaced_job(namespace, job("hello"))

    assert wait_until(lambda: job_condition(batch, namespace, "hello"), timeout=60, what="Job finished") == "Complete"
    (pod,) = job_pods(core, namespace, "hello")
    node = core.read_node(pod.spec.node_name)
    assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
    assert pod.status.phase == "Succeeded"
    assert main_state(pod).terminated.exit_code == 0


def test_failing_pod_reports_exit_code_and_message_and_the_job_fails(api, namespace):
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    batch.create_namespaced_job(namespace, job("boom", {
        "kwok.cronoq.io/outcome": "Fail", "kwok.cronoq.io/exit-code": "3", "kwok.cronoq.io/message": "boom",
    }))

    assert wait_until(lambda: job_condition(batch, namespace, "boom"), timeout=60, what="Job finished") == "Failed"
    (pod,) = job_pods(core, namespace, "boom")
    terminated = main_state(pod).terminated
    assert (terminated.exit_code, terminated.message, terminated.reason) == (3, "boom", "Error")
    assert pod.status.phase == "Failed"


def test_annotations_choose_reason_and_structured_message(api, namespace):
    """What later tests rely on: an OOMKilled reason, and a JSON termination message kept verbatim."""
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    message = json.dumps({"outcome": "retryable", "message": "try later: \"quoted\"", "retryAfterSeconds": 5})
    batch.create_namespaced_job(namespace, job("oom", {
        "kwok.cronoq.io/outcome": "Fail", "kwok.cronoq.io/exit-code": "137",
        "kwok.cronoq.io/reason": "OOMKilled", "kwok.cronoq.io/delay": "200ms",
    }))
    batch.create_namespaced_job(namespace, job("sdk", {"kwok.cronoq.io/message": message, "kwok.cronoq.io/delay": "0s"}))

    wait_until(lambda: job_condition(batch, namespace, "oom"), timeout=60, what="oom Job finished")
    wait_until(lambda: job_condition(batch, namespace, "sdk"), timeout=60, what="sdk Job finished")
    oom = main_state(job_pods(core, namespace, "oom")[0]).terminated
    assert (oom.exit_code, oom.reason) == (137, "OOMKilled")
    sdk = main_state(job_pods(core, namespace, "sdk")[0]).terminated
    assert (sdk.exit_code, json.loads(sdk.message)) == (0, json.loads(message))


def test_run_keeps_the_pod_running_and_pending_never_starts_it(api, namespace):
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    batch.create_namespaced_job(namespace, job("forever", {"kwok.cronoq.io/outcome": "Run"}))
    batch.create_namespaced_job(namespace, job("stuck", {"kwok.cronoq.io/outcome": "Pending"}))
    # A short control Job that completes proves kwok has acted on pods created at the same time.
    batch.create_namespaced_job(namespace, job("control", {"kwok.cronoq.io/delay": "1500ms"}))

    wait_until(lambda: job_condition(batch, namespace, "control"), timeout=60, what="control Job finished")
    forever = job_pods(core, namespace, "forever")[0]
    assert forever.status.phase == "Running" and main_state(forever).running.started_at is not None
    stuck = job_pods(core, namespace, "stuck")[0]
    assert stuck.status.phase == "Pending" and stuck.spec.node_name  # scheduled, never started
    assert job_condition(batch, namespace, "forever") is None


def test_start_delay_keeps_the_pod_pending_first(api, namespace):
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    batch.create_namespaced_job(namespace, job("slow", {"kwok.cronoq.io/start-delay": "2s", "kwok.cronoq.io/delay": "0s"}))

    wait_until(lambda: job_condition(batch, namespace, "slow"), timeout=60, what="Job finished")
    pod = job_pods(core, namespace, "slow")[0]
    scheduled = next(c.last_transition_time for c in pod.status.conditions if c.type == "PodScheduled")
    started = main_state(pod).terminated.started_at
    assert (started - pod.metadata.creation_timestamp).total_seconds() >= 1.5, (scheduled, started)


def test_rbac_refuses_an_unprivileged_service_account(api, namespace, kubectl):
    core = client.CoreV1Api(api)
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="nobody")))
    token = kubectl("create", "token", "nobody", "--duration=10m", namespace=namespace).stdout.strip()

    # Only the bearer token: no admin client certificate rides along.
    admin = api.configuration
    as_nobody = client.Configuration(host=admin.host, api_key={"authorization": f"Bearer {token}"})
    as_nobody.ssl_ca_cert = admin.ssl_ca_cert
    with client.ApiClient(as_nobody) as nobody:
        with pytest.raises(ApiException) as refused:
            client.CoreV1Api(nobody).list_namespaced_secret(namespace)
        # The token is valid (authenticated, so 403 and not 401) and names the service account.
        assert refused.value.status == 403
        assert f"system:serviceaccount:{namespace}:nobody" in refused.value.body


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.devcluster.cronoq.io"},
    "spec": {
        "group": "devcluster.cronoq.io",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
                "type": "object",
                "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}},
                "x-kubernetes-validations": [{"rule": "self.min <= self.max", "message": "min must not exceed max"}],
            }}}},
        }],
    },
}


def test_crd_cel_rule_refuses_a_bad_object_with_its_message(api, namespace):
    ext, custom = client.ApiextensionsV1Api(api), client.CustomObjectsApi(api)
    try:
        ext.create_custom_resource_definition(CRD)
    except ApiException as err:
        if err.status != 409:
            raise

    def established() -> bool:
        crd = ext.read_custom_resource_definition(CRD["metadata"]["name"])
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    wait_until(established, timeout=30, what="CRD Established")

    def create(spec):
        body = {"apiVersion": "devcluster.cronoq.io/v1", "kind": "Widget", "metadata": {"name": f"w{spec['min']}"}, "spec": spec}
        return custom.create_namespaced_custom_object("devcluster.cronoq.io", "v1", namespace, "widgets", body)

    # Discovery of a brand-new CRD can lag Established by a moment: retry the good create only.
    wait_until(lambda: create({"min": 1, "max": 2}), timeout=30, what="a valid Widget accepted")
    with pytest.raises(ApiException) as refused:
        create({"min": 5, "max": 2})
    assert refused.value.status == 422
    assert "min must not exceed max" in refused.value.body


def test_garbage_collector_deletes_the_pods_of_a_deleted_job(api, namespace):
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    batch.create_namespaced_job(namespace, job("keep", {"kwok.cronoq.io/outcome": "Run"}))
    wait_until(lambda: job_pods(core, namespace, "keep"), timeout=60, what="the Job's pod")

    batch.delete_namespaced_job("keep", namespace, propagation_policy="Background")

    wait_until(lambda: not job_pods(core, namespace, "keep"), timeout=60, what="the garbage collector to delete the pod")
    with pytest.raises(ApiException) as gone:
        batch.read_namespaced_job("keep", namespace)
    assert gone.value.status == 404


def test_per_attempt_annotations_win_for_their_attempt(api, namespace):
    """`kwok.cronoq.io/<name>-a<N>` applies to pods labelled cronoq.io/attempt=N only."""
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    plays = {"kwok.cronoq.io/outcome-a1": "Fail", "kwok.cronoq.io/exit-code-a1": "7", "kwok.cronoq.io/delay": "0s",
             "kwok.cronoq.io/message": "fine", "kwok.cronoq.io/message-a1": "first try"}
    for attempt in ("1", "2"):
        body = job(f"try{attempt}", plays)
        body.spec.template.metadata.labels = {"cronoq.io/attempt": attempt}
        batch.create_namespaced_job(namespace, body)

    assert wait_until(lambda: job_condition(batch, namespace, "try1"), timeout=60, what="try1 finished") == "Failed"
    assert wait_until(lambda: job_condition(batch, namespace, "try2"), timeout=60, what="try2 finished") == "Complete"
    first = main_state(job_pods(core, namespace, "try1")[0]).terminated
    second = main_state(job_pods(core, namespace, "try2")[0]).terminated
    assert (first.exit_code, first.message) == (7, "first try")
    assert (second.exit_code, second.message) == (0, "fine")


def test_on_delete_succeed_reports_an_exit_before_the_pod_goes(api, namespace):
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    batch.create_namespaced_job(namespace, job("late", {"kwok.cronoq.io/outcome": "Run", "kwok.cronoq.io/on-delete": "Succeed"}))
    pod = wait_until(lambda: [p for p in job_pods(core, namespace, "late") if p.status.phase == "Running"],
                     timeout=60, what="the pod running")[0]
    seen: list[str] = []
    watch_pod = __import__("kubernetes").watch.Watch()
    core.delete_namespaced_pod(pod.metadata.name, namespace)
    for event in watch_pod.stream(core.list_namespaced_pod, namespace, field_selector=f"metadata.name={pod.metadata.name}",
                                  resource_version=pod.metadata.resource_version, timeout_seconds=30):
        seen.append(event["object"].status.phase)
        if event["type"] == "DELETED":
            break
    assert "Succeeded" in seen, seen
    assert seen[-1] == "Succeeded", "the exit is the last state before the pod goes"
