"""The Job of one attempt (DESIGN §2): deterministic name, owned by the Task, labelled with the
fencing token, `backoffLimit: 0` and `restartPolicy: Never` (cronoq, not the Job controller,
decides about retries), and the CRONOQ_* environment the task container needs.

Pod settings are layered: the task's named fields (image, command, env, ...) win over its full
`template`, which wins over its pool's `template`.

A push task (`http`, its own or, when it gives no container, its pool's) runs cronoq's push
runner (`cronoq push`) from the operator image in the task container: the request goes as JSON
in CRONOQ_HTTP, header values from Secrets and the CA bundle as environment variables the
kubelet fills (`valueFrom`), so the Job never holds a secret. The pool's other pod settings
(resources, nodeSelector, serviceAccountName, ...) apply as to any task.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from cronoq import pod_protocol
from cronoq.api import API_VERSION, HTTPRequest, PodSettings, Task, TaskPoolSpec
from cronoq.api.admission import KueueAdmission
from cronoq.engine import naming
from cronoq.engine.retention import ttl_seconds
from cronoq.pod_protocol import Env, PushHeader, PushRequest, tracecontext


HEARTBEAT_CONTAINER = "cronoq-heartbeat"
CHECKPOINT_VOLUME = "cronoq-checkpoint"
"""The volume a task container shares with its heartbeat sidecar, for its checkpoint file."""
CHECKPOINT_DIR = "/var/run/cronoq-checkpoint"
CHECKPOINT_FILE = "checkpoint.json"
PUSH_COMMAND = ["cronoq", "push"]
OPERATOR_IMAGE_USER = 65532
"""The unprivileged user of the operator image (Dockerfile), which runs the push runner and the sidecar."""
RESTRICTED = {
    "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
    "runAsUser": OPERATOR_IMAGE_USER, "runAsGroup": OPERATOR_IMAGE_USER,
    "seccompProfile": {"type": "RuntimeDefault"},
}
"""The security context of the containers cronoq adds: they pass Pod Security `restricted`, so a
push task or a task with the sidecar runs in a namespace that enforces it."""
PROXY_VARIABLES = frozenset({"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"})
"""The push runner honours these (corporate networks need them), but only from its pool: a proxy
named by the task would receive the pool's secret headers. Compared without case: urllib and
aiohttp read `Http_Proxy` as `http_proxy`."""
RESOLVER_VARIABLES = frozenset({"LOCALDOMAIN", "RES_OPTIONS", "HOSTALIASES"})
"""These steer the C resolver (search domains, options, a hosts file of aliases), so a task naming
them could send the pool's secret headers to a host of its choosing: only its pool may set them."""
POOL_ONLY_VARIABLES = PROXY_VARIABLES | RESOLVER_VARIABLES
"""Upper-case names; a push container has a variable of these names, in any case, only from its pool."""


@dataclass(frozen=True)
class TaskServiceAccount:
    """The operator's `--task-service-account`: the ServiceAccount of attempt pods whose task and
    pool name none, in the namespaces where it exists (the chart creates it there, with the lease
    role). Elsewhere pods keep the namespace's `default`, since a pod naming a missing
    ServiceAccount is never created."""

    name: str | None = None
    namespaces: frozenset[str] = frozenset()
    """Empty: every namespace."""

    def in_namespace(self, namespace: str) -> str | None:
        return self.name if self.name and (not self.namespaces or namespace in self.namespaces) else None


def push_request(task: Task, pool: TaskPoolSpec | None) -> HTTPRequest | None:
    """The request a push task makes: its own `http`, else its pool's when the task names no
    container of its own (the API server allows at most one of the two on each)."""
    spec = task.spec
    if spec.http is not None:
        return spec.http
    if any(v is not None for v in (spec.image, spec.command, spec.args, spec.template)):
        return None
    return pool.template.http if pool and pool.template else None


def _name_and_uid(task: Task) -> tuple[str, str]:
    """The task's name and uid. The API server gives both to every stored object, and Jobs and
    Leases are only built for stored Tasks."""
    name, uid = task.metadata.name, task.metadata.uid
    if name is None or uid is None:
        raise ValueError(f"task {name!r} (uid {uid!r}) has no name or uid: it was never stored")
    return name, uid


def build_job(task: Task, pool: TaskPoolSpec | None, attempt: int, lease: str, *,
              lease_ttl: timedelta = timedelta(0), sidecar_image: str | None = None,
              job_retention: timedelta | None = None, push_image: str | None = None,
              service_account: str | None = None, inputs: str | None = None,
              checkpoint: str | None = None, traceparent: str | None = None) -> dict[str, Any]:
    """The attempt's Job. With `sidecar_image`, a native sidecar renews the attempt's lease. With
    `job_retention`, Kubernetes' TTL controller deletes the Job (and its pod) that long after it
    finishes: the operator has read its outcome by then, and writes nothing to clean up.
    `push_image` (the operator image) runs a push task's request; the runner heartbeats itself,
    so a push task's pod never gets the sidecar. `service_account` (the operator's
    `--task-service-account`) is the pod's ServiceAccount when neither the task nor its pool names
    one: the one that holds the lease role, so the namespace's `default` need not. `inputs` (a task
    with dependencies: `pod_protocol.inputs.encode_inputs`) goes to the task container as CRONOQ_INPUTS.
    `checkpoint` (an earlier attempt's, compact JSON) is handed over as CRONOQ_CHECKPOINT.
    `traceparent` (tracing on: the attempt span's) is the containers' TRACEPARENT, in place of
    any the templates set, so what the attempt's code traces joins the task's trace."""
    task_name, task_uid = _name_and_uid(task)
    labels = naming.attempt_labels(task=task_name, task_uid=task_uid, attempt=attempt, lease=lease,
                                   pool=task.spec.pool)
    template = task.spec.template
    pod_spec: dict[str, Any] = copy.deepcopy(template.spec) if template is not None else {}
    container = _task_container(pod_spec)
    # Lowest layer first, so the task's own named fields are applied last and win.
    _apply(pod_spec, container, pool.template if pool else None, only_unset=True)
    _apply(pod_spec, container, task.spec, only_unset=False)
    if service_account and not (pod_spec.get("serviceAccountName") or pod_spec.get("serviceAccount")):
        pod_spec["serviceAccountName"] = service_account
    http = push_request(task, pool)
    if http is not None:
        _run_push(pod_spec, container, pool, push_image, heartbeats=lease_ttl > timedelta(0))
    env = [e for e in container.get("env", []) if not e.get("name", "").startswith(Env.PREFIX)]
    env += pod_protocol.attempt_env(pod_protocol.Attempt(
        task_id=task_uid, task_name=task_name, attempt=attempt, lease_name=naming.lease_name(task_name, attempt),
        lease_id=lease, lease_ttl=lease_ttl.total_seconds(), payload=task.spec.payload, checkpoint=checkpoint))
    if inputs is not None:
        env.append({"name": Env.INPUTS, "value": inputs})
    if http is not None:
        env += _push_env(http, allow_link_local=pool.allow_link_local if pool else False)
    if traceparent is not None:
        env = [e for e in env if e.get("name") != tracecontext.ENV] + [{"name": tracecontext.ENV, "value": traceparent}]
    container["env"] = env
    container.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    pod_spec["restartPolicy"] = "Never"
    if sidecar_image and http is None and lease_ttl > timedelta(0):
        _add_heartbeat_sidecar(pod_spec, sidecar_image, env)
    pod_meta = _pod_metadata(task, pool, labels)
    job_spec: dict[str, Any] = {"backoffLimit": 0, "completions": 1, "parallelism": 1}
    kueue = pool.admission.kueue if pool and pool.admission else None
    if kueue is not None:
        labels = {**labels, **kueue_labels(kueue, task.spec.priority)}
        # Created suspended: Kueue unsuspends it when it admits its Workload. Evicted, it is
        # suspended again and would run again when readmitted: the operator deletes it first
        # (engine.attempts.deadlines), so an attempt number runs once.
        job_spec["suspend"] = True
        if kueue.multi_kueue:
            job_spec["managedBy"] = MULTIKUEUE
    if job_retention is not None:
        job_spec["ttlSecondsAfterFinished"] = ttl_seconds(job_retention)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": naming.job_name(task_name, attempt),
            "namespace": task.metadata.namespace,
            "labels": labels,
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": "Task", "name": task_name, "uid": task_uid,
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {**job_spec, "template": {"metadata": pod_meta, "spec": pod_spec}},
    }


KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
"""spec.managedBy of a Job MultiKueue runs on a worker cluster (this cluster's Job controller skips it)."""
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


def kueue_labels(kueue: KueueAdmission, priority: int) -> dict[str, str]:
    """The labels that put an attempt's Job in its pool's LocalQueue, with its WorkloadPriorityClass."""
    labels = {KUEUE_QUEUE_LABEL: kueue.local_queue}
    if (cls := kueue.priority_class(priority)) is not None:
        labels[KUEUE_PRIORITY_LABEL] = cls
    return labels


def _task_container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    """The container the attempt is judged by: the one named `task`, else the first (made if none)."""
    containers: list[dict[str, Any]] = pod_spec.setdefault("containers", [])
    container = next((c for c in containers if c.get("name") == naming.TASK_CONTAINER), None)
    if container is None:
        if not containers:
            containers.append({"name": naming.TASK_CONTAINER})
        container = containers[0]
    return container


def _pod_metadata(task: Task, pool: TaskPoolSpec | None, labels: dict[str, str]) -> dict[str, Any]:
    """The pod's labels and annotations, lowest layer first as for the other fields (pool template
    < task template < task's podMetadata); the attempt's own labels last, so none is overridden."""
    template = task.spec.template
    pod_labels: dict[str, str] = {}
    pod_annotations: dict[str, str] = {}
    pool_meta = pool.template.pod_metadata if pool and pool.template else None
    for metadata in (pool_meta, template.metadata if template is not None else None, task.spec.pod_metadata):
        if metadata is None:
            continue
        pod_labels.update(metadata.labels)
        pod_annotations.update(metadata.annotations)
    pod_labels.update(labels)
    pod_meta: dict[str, Any] = {"labels": pod_labels}
    if pod_annotations:
        pod_meta["annotations"] = pod_annotations
    return pod_meta


def _run_push(pod_spec: dict[str, Any], container: dict[str, Any], pool: TaskPoolSpec | None,
              push_image: str | None, *, heartbeats: bool) -> None:
    """Make the task container cronoq's push runner, under the restricted security context."""
    container.update(image=push_image, command=list(PUSH_COMMAND), securityContext=copy.deepcopy(RESTRICTED))
    container.pop("args", None)
    container["env"] = _network_settings_of_the_pool_only(container.get("env", []), pool)
    if not heartbeats:
        # Without heartbeats the runner makes no API call: no token to steal from its pod.
        pod_spec["automountServiceAccountToken"] = False


def _add_heartbeat_sidecar(pod_spec: dict[str, Any], image: str, env: list[dict[str, Any]]) -> None:
    """A native sidecar (an init container that keeps running) renewing the attempt's Lease for an
    image without the SDK; it sees the attempt's environment but the payload and the inputs."""
    inits = [c for c in pod_spec.get("initContainers", []) if c.get("name") != HEARTBEAT_CONTAINER]
    # The task leaves its checkpoint in a file on a volume the two share; the sidecar carries it.
    checkpoint_file = {"name": Env.CHECKPOINT_FILE, "value": f"{CHECKPOINT_DIR}/{CHECKPOINT_FILE}"}
    mount = {"name": CHECKPOINT_VOLUME, "mountPath": CHECKPOINT_DIR}
    task_container = _task_container(pod_spec)
    task_container["env"] = [*task_container.get("env", []), checkpoint_file]
    task_container["volumeMounts"] = [*(m for m in task_container.get("volumeMounts", [])
                                        if m.get("name") != CHECKPOINT_VOLUME), mount]
    pod_spec["volumes"] = [*(v for v in pod_spec.get("volumes", []) if v.get("name") != CHECKPOINT_VOLUME),
                           {"name": CHECKPOINT_VOLUME, "emptyDir": {"sizeLimit": "1Mi"}}]
    inits.append({"name": HEARTBEAT_CONTAINER, "image": image, "restartPolicy": "Always",
                  "command": ["cronoq"], "args": ["heartbeat"],
                  "env": [*(e for e in env if e["name"] not in (Env.PAYLOAD, Env.INPUTS, Env.CHECKPOINT)),
                          checkpoint_file],
                  "volumeMounts": [dict(mount, readOnly=True)],
                  "securityContext": copy.deepcopy(RESTRICTED),
                  "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}})
    pod_spec["initContainers"] = inits


def _network_settings_of_the_pool_only(env: list[dict[str, Any]], pool: TaskPoolSpec | None) -> list[dict[str, Any]]:
    """The push container's environment with proxy and resolver variables only as its pool sets them."""
    pools = [e for e in pool.template.env if e.name.upper() in POOL_ONLY_VARIABLES] if pool and pool.template else []
    kept = [e for e in env if str(e.get("name", "")).upper() not in POOL_ONLY_VARIABLES]
    return kept + [e.to_dict() | {"value": e.value} for e in sorted(pools, key=lambda e: e.name)]


def _push_env(http: HTTPRequest, *, allow_link_local: bool) -> list[dict[str, Any]]:
    """The runner's request (`cronoq.push.request_from` reads it) and the variables the kubelet
    fills from Secrets and ConfigMaps."""
    headers: list[PushHeader] = []
    refs: list[dict[str, Any]] = []
    for i, header in enumerate(http.headers):
        if header.secret_key_ref is not None:
            name = f"{Env.HTTP_HEADER_PREFIX}{i}"
            headers.append(PushHeader(header.name, env=name))
            refs.append({"name": name, "valueFrom": {"secretKeyRef": header.secret_key_ref.to_dict()}})
        else:
            headers.append(PushHeader(header.name, header.value or ""))
    ca_env = None
    if http.ca_bundle is not None:
        ca_env = Env.HTTP_CA
        refs.append({"name": ca_env, "valueFrom": {"configMapKeyRef": http.ca_bundle.config_map_key_ref.to_dict()}})
    request = PushRequest(url=http.url, method=http.method.value, headers=tuple(headers),
                          timeout=http.timeout.total_seconds(), body=http.body,
                          success_codes=tuple(sorted(http.success_codes or ())), ca_env=ca_env,
                          allow_link_local=allow_link_local)
    return [{"name": Env.HTTP, "value": request.to_json()}] + refs


def _apply(pod: dict[str, Any], container: dict[str, Any], layer: PodSettings | None, *, only_unset: bool) -> None:
    """Put `layer`'s named fields on the pod. `only_unset`: a default layer fills gaps only."""
    if layer is None:
        return

    def put(target: dict[str, Any], key: str, value: Any) -> None:
        if value is None or (only_unset and key in target):
            return
        target[key] = value

    put(container, "image", layer.image)
    put(container, "command", list(layer.command) if layer.command is not None else None)
    put(container, "args", list(layer.args) if layer.args is not None else None)
    if layer.resources is not None:
        put(container, "resources", layer.resources.to_dict())
    put(pod, "serviceAccountName", layer.service_account_name)
    put(pod, "priorityClassName", layer.priority_class_name)
    if layer.env:
        names = {e.get("name") for e in container.get("env", [])}
        ours = [e.to_dict() | {"value": e.value} for e in layer.env]
        if only_unset:
            container["env"] = container.get("env", []) + [e for e in ours if e["name"] not in names]
        else:
            mine = {e["name"] for e in ours}
            container["env"] = [e for e in container.get("env", []) if e.get("name") not in mine] + ours
    if layer.node_selector:
        merged = dict(layer.node_selector) | pod.get("nodeSelector", {}) if only_unset else \
            pod.get("nodeSelector", {}) | dict(layer.node_selector)
        pod["nodeSelector"] = merged
    if layer.tolerations:
        pod["tolerations"] = pod.get("tolerations", []) + [t.to_dict() for t in layer.tolerations]


def build_lease(task: Task, attempt: int, lease: str, ttl: timedelta) -> dict[str, Any]:
    """The attempt's heartbeat Lease, held by the attempt's lease id and owned by the Task (so it
    goes when the Task goes). The attempt itself creates it, at its first renewal (the SDK or the
    sidecar: `cronoq.worker.lease.KubeLease`, with the same `pod_protocol.lease_body`); the
    operator only watches it."""
    task_name, task_uid = _name_and_uid(task)
    return pod_protocol.lease_body(task.metadata.namespace or "", naming.lease_name(task_name, attempt), lease,
                                   pod_protocol.Owner(task_name, task_uid, attempt), ttl.total_seconds())
