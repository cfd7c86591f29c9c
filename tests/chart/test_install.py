"""`helm install` into a namespace that enforces Pod Security "restricted", then `helm upgrade`
and `helm uninstall`, against the real API server. kwok plays the operator pods (no image is
pulled), so what is checked is what the cluster decides: admission, scheduling, availability,
the PodDisruptionBudget and Service selecting the pods, and what uninstall removes."""
from __future__ import annotations

import json

import pytest

from tests.chart.chart import CHART
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

RELEASE = "cronoq"
SELECTOR = "app.kubernetes.io/instance=cronoq,app.kubernetes.io/component=operator"


def restricted(kubectl, namespace: str) -> None:
    kubectl("label", "namespace", namespace, "--overwrite",
            "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version=latest")


def get(kubectl, *args: str, namespace: str | None = None) -> dict | None:
    result = kubectl("get", *args, "-o", "json", namespace=namespace, check=False)
    if result.returncode != 0:
        assert "NotFound" in result.stderr, result.stderr
        return None
    return json.loads(result.stdout)


def operator_pods(kubectl, namespace: str) -> list[dict]:
    return get(kubectl, "pods", "-l", SELECTOR, namespace=namespace)["items"]


def available(kubectl, namespace: str, replicas: int):
    """The Deployment rolled out: `replicas` updated, available pods and no old ones."""
    deployment = get(kubectl, "deployment", RELEASE, namespace=namespace)
    status = deployment["status"]
    done = (status.get("observedGeneration") == deployment["metadata"]["generation"]
            and status.get("replicas") == status.get("updatedReplicas") == status.get("availableReplicas") == replicas
            and len(operator_pods(kubectl, namespace)) == replicas)
    return deployment if done else None


def test_the_namespace_really_enforces_restricted(kubectl, namespace):
    # The control for the test below: a pod breaking "restricted" is refused in such a namespace.
    restricted(kubectl, namespace)
    result = kubectl("run", "root", "--image=example.invalid/x:1", "--dry-run=server",
                     "--overrides", json.dumps({"spec": {"securityContext": {"runAsUser": 0}}}),
                     namespace=namespace, check=False)
    assert result.returncode != 0 and "violates PodSecurity" in result.stderr, result.stderr


def test_install_upgrade_uninstall_in_a_restricted_namespace(kubectl, helm, install, namespace):
    restricted(kubectl, namespace)
    install(RELEASE, namespace, "--set=defaultPool.create=true")

    deployment = wait_until(lambda: available(kubectl, namespace, 2), timeout=120, what="the operator Deployment available")
    assert {c["type"]: c["status"] for c in deployment["status"]["conditions"]}["Available"] == "True"
    pods = operator_pods(kubectl, namespace)
    # Admitted under "restricted" and created by the Deployment's ReplicaSet.
    for pod in pods:
        assert [o["kind"] for o in pod["metadata"]["ownerReferences"]] == ["ReplicaSet"]
        assert pod["spec"]["serviceAccountName"] == RELEASE
        assert pod["spec"]["nodeName"], "scheduled"
    events = get(kubectl, "events", "--field-selector=reason=FailedCreate", namespace=namespace)["items"]
    assert not events, [e["message"] for e in events]

    # The PodDisruptionBudget counts both pods and allows one voluntary disruption.
    wait_until(lambda: get(kubectl, "pdb", RELEASE, namespace=namespace)["status"].get("expectedPods") == 2,
               timeout=60, what="the PDB observing the operator pods")
    wait_until(lambda: get(kubectl, "pdb", RELEASE, namespace=namespace)["status"].get("disruptionsAllowed") == 1,
               timeout=60, what="the PDB allowing one disruption")
    # The metrics Service selects both pods.
    wait_until(lambda: sorted(a for s in get(kubectl, "endpointslices", "-l", f"kubernetes.io/service-name={RELEASE}-metrics",
                                             namespace=namespace)["items"]
                              for e in s.get("endpoints") or [] for a in e["addresses"])
               == sorted(p["status"]["podIP"] for p in operator_pods(kubectl, namespace)),
               timeout=60, what="the metrics Service's endpoints being the operator pods")
    assert get(kubectl, "taskpool", "default", namespace=namespace)["spec"]["concurrency"] == 10

    # Upgrade: a changed value rolls the pods, new ones admitted under "restricted" too.
    helm("upgrade", RELEASE, str(CHART), f"--namespace={namespace}", "--reuse-values",
         "--set=operator.logLevel=debug", "--set=defaultPool.concurrency=3")
    wait_until(lambda: available(kubectl, namespace, 2)
               and all("--log-level=debug" in p["spec"]["containers"][0]["args"] for p in operator_pods(kubectl, namespace)),
               timeout=120, what="the upgraded Deployment rolled out")
    assert get(kubectl, "taskpool", "default", namespace=namespace)["spec"]["concurrency"] == 3
    status = json.loads(helm("status", RELEASE, f"--namespace={namespace}", "-o", "json").stdout)
    assert status["version"] == 2 and status["info"]["status"] == "deployed"

    # Uninstall removes everything, the cluster-scoped objects included, and keeps the CRDs.
    helm("uninstall", RELEASE, f"--namespace={namespace}", "--wait")
    for kind, name, ns in [("deployment", RELEASE, namespace), ("serviceaccount", RELEASE, namespace),
                           ("service", f"{RELEASE}-metrics", namespace), ("pdb", RELEASE, namespace),
                           ("taskpool", "default", namespace), ("clusterrole", f"{namespace}-{RELEASE}", None),
                           ("clusterrolebinding", f"{namespace}-{RELEASE}", None),
                           ("clusterrole", f"{namespace}-{RELEASE}-task-lease", None)]:
        wait_until(lambda: get(kubectl, kind, name, namespace=ns) is None, timeout=60, what=f"{kind}/{name} deleted")
    wait_until(lambda: not operator_pods(kubectl, namespace), timeout=60, what="the operator pods gone")
    assert get(kubectl, "crd", "tasks.cronoq.io") is not None, "Helm never deletes CRDs"
