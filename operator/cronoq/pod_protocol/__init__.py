"""The pod protocol: what the operator hands an attempt's pod, and what the pod hands back.

The operator writes it (`engine/jobs.py`: the CRONOQ_* environment, the push request; the `Terms`
on an attempt's record); the pod or the pull worker reads it (the worker SDK's `worker/env.py`; a pull worker the
hand-over on the Task, `handover.py`; the push runner `push.py`), writes the attempt's Lease with the labels the operator watches (`worker/lease.py`)
and reports how the attempt ended (`report.py`, which the operator parses in `engine/outcome.py`).
Both sides import these names and encodings from here, so they cannot drift apart. The package
imports nothing else of cronoq and nothing outside the standard library: it runs in task images
that carry only the SDK.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Mapping, TypeGuard

from cronoq.pod_protocol.jsontext import json_value

API_VERSION: Final = "cronoq.io/v1alpha1"
"""The Task's apiVersion, which the attempt names as its Lease's owner."""


class Env:
    """Names of the environment variables of an attempt's containers."""

    PREFIX: Final = "CRONOQ_"
    """Reserved: a task's own env may not use it; the operator sets these."""
    TASK_ID: Final = "CRONOQ_TASK_ID"
    TASK_NAME: Final = "CRONOQ_TASK_NAME"
    NAMESPACE: Final = "CRONOQ_NAMESPACE"
    ATTEMPT: Final = "CRONOQ_ATTEMPT"
    LEASE_NAME: Final = "CRONOQ_LEASE_NAME"
    LEASE_ID: Final = "CRONOQ_LEASE_ID"
    LEASE_TTL: Final = "CRONOQ_LEASE_TTL"
    """Seconds, `%g`; 0 turns heartbeats off."""
    PAYLOAD: Final = "CRONOQ_PAYLOAD"
    """The task's payload as compact JSON."""
    INPUTS: Final = "CRONOQ_INPUTS"
    """A task with dependencies: their phases and outputs, `inputs.encode_inputs` (≤ `inputs.INPUTS_LIMIT` bytes)."""
    HTTP: Final = "CRONOQ_HTTP"
    """A push task's request, `PushRequest.to_json()`."""
    HTTP_HEADER_PREFIX: Final = "CRONOQ_HTTP_HEADER_"
    """`<prefix><i>` holds the value of the push request's i-th header, filled from a Secret."""
    HTTP_CA: Final = "CRONOQ_HTTP_CA"
    """The push request's CA bundle, filled from a ConfigMap."""
    TERMINATION_LOG: Final = "CRONOQ_TERMINATION_LOG"
    """Read by the SDK only (tests point it elsewhere); the operator never sets it."""
    CHECKPOINT: Final = "CRONOQ_CHECKPOINT"
    """The newest checkpoint an earlier attempt of the task saved, as compact JSON; unset when none
    did (`checkpoint.py`)."""
    CHECKPOINT_FILE: Final = "CRONOQ_CHECKPOINT_FILE"
    """Set in pods with the heartbeat sidecar: the file, on a volume the task container shares with
    the sidecar, where a task without the SDK writes its checkpoint's JSON; the sidecar carries it
    to the attempt's Lease with its next renewal."""


class Label:
    """Label keys on an attempt's Job, its pod and its Lease."""

    PREFIX: Final = "cronoq.io/"
    TASK_UID: Final = "cronoq.io/task-uid"
    TASK: Final = "cronoq.io/task"
    ATTEMPT: Final = "cronoq.io/attempt"
    LEASE_ID: Final = "cronoq.io/lease-id"
    POOL: Final = "cronoq.io/pool"
    WORKER: Final = "cronoq.io/worker"
    """On an attempt's Lease written by a pull worker: the worker that ran it."""
    WORKER_POOL: Final = "cronoq.io/worker-pool"
    """On a pull worker's own Lease: the pool it serves."""
    HANDLER: Final = "cronoq.io/handler"
    """On a Task of a Workers pool: which of the worker's handlers runs it (when it has several)."""


class Annotation:
    """Annotation keys of the Leases a pull worker writes (`delivery: Workers`)."""

    CAPACITY: Final = "cronoq.io/capacity"
    """On the worker's Lease: how many attempts it runs at once."""
    REPORT: Final = "cronoq.io/report"
    """On an attempt's Lease: how the attempt ended, `report.Report` (at most `report.REPORT_LIMIT` bytes)."""
    CHECKPOINT: Final = "cronoq.io/checkpoint"
    """On an attempt's Lease (a pod's or a pull worker's): the progress the attempt saved, compact JSON
    of at most `checkpoint.CHECKPOINT_LIMIT` bytes, carried by a renewal."""


def _keys(cls: type) -> tuple[str, ...]:
    return tuple(sorted(v for k, v in vars(cls).items() if k.isupper() and k != "PREFIX" and isinstance(v, str)))


UNPROTECTED_KEYS: Final[Mapping[str, str]] = {
    Label.HANDLER: "a producer's choice on its own Task (which of a worker's handlers runs it); the operator never "
                   "reads it, and a Task's labels are its writers' to set",
    "cronoq.io/schedule": "on a Task, read only from a Task a TaskSchedule controls: the chart's schedule-owners policy "
                          "lets only the operator make one (engine/schedule.py SCHEDULE)",
    "cronoq.io/fire-time": "as cronoq.io/schedule (engine/schedule.py FIRE_TIME)",
    "cronoq.io/trigger": "as cronoq.io/schedule (engine/schedule.py TRIGGER)",
    "cronoq.io/submitter": "on Tasks and TaskSchedules only (api.pool.SUBMITTER), guarded by the chart's submitter "
                           "policy (templates/submitter-policy.yaml: the creator's username, never changed), not by "
                           "the key guard of Jobs, pods and Leases",
    "cronoq.io/traceparent": "a producer's own trace context on its own Task (tracecontext.ANNOTATION): it only puts "
                             "the task's spans in the producer's trace, no decision reads it, and a Task's annotations "
                             "are its writers' to set",
}
"""Keys of cronoq's prefix that admission does not guard, each with why. Everything else of `Label`
and `Annotation` is protected: a key added there is protected the day it is added."""

PROTECTED_LABELS: Final[tuple[str, ...]] = tuple(k for k in _keys(Label) if k not in UNPROTECTED_KEYS)
"""The label keys the operator reads on Jobs, pods and Leases. The chart's admission policies refuse
an object carrying one unless its writer is the operator, the attempt's own pod (its own Lease), a
worker allowed to serve the pool it names, or (pods) the Job controller: `python -m
cronoq.api.keysgen` writes them into the chart (templates/_protected_keys.tpl)."""
PROTECTED_ANNOTATIONS: Final[tuple[str, ...]] = tuple(k for k in _keys(Annotation) if k not in UNPROTECTED_KEYS)
"""The annotation keys the operator reads (on Leases), guarded like `PROTECTED_LABELS`."""
PROTECTED_KEYS: Final[tuple[str, ...]] = tuple(sorted({*PROTECTED_LABELS, *PROTECTED_ANNOTATIONS}))


MAX_ATTEMPT_NAME: Final = 57
"""The Job controller names a pod `<job>-<5 random characters>`, cutting `<job>-` to 58
characters: a Job name of at most 57 keeps the pod name `<job>-xxxxx` whole, so the task-lease
admission policy can tell a pod's attempt (its Lease shares the Job's name) from the pod name."""


def attempt_name(task: str, attempt: int) -> str:
    """The name of an attempt's Job and of its Lease (a pull worker's too): `<task>-a<n>`, or for
    names too long to fit, a prefix of the task name and a hash of it."""
    suffix = f"-a{attempt}"
    if len(task) + len(suffix) <= MAX_ATTEMPT_NAME:
        return task + suffix
    digest = hashlib.sha256(task.encode()).hexdigest()[:8]
    keep = MAX_ATTEMPT_NAME - len(suffix) - len(digest) - 1
    return f"{task[:keep].rstrip('-')}-{digest}{suffix}"


def served_lease_name(task: str, attempt: int, worker: str) -> str:
    """The Lease of an attempt a pull worker serves: `<attempt name>.<worker>`. It names its worker,
    so no other worker can take it first (the chart's lease guard lets a worker write only Leases
    that end in its own name), and the operator reads only the one of the worker the status names."""
    return f"{attempt_name(task, attempt)}.{worker}"


@dataclass(frozen=True)
class Attempt:
    """Who an attempt is, as its environment tells it (the namespace comes from the pod itself)."""

    task_id: str
    task_name: str
    attempt: int
    lease_name: str
    lease_id: str
    lease_ttl: float
    """Seconds; 0 turns heartbeats off."""
    payload: Any
    checkpoint: str | None = None
    """The newest checkpoint of an earlier attempt (compact JSON), when there is one."""


def attempt_env(attempt: Attempt) -> list[dict[str, Any]]:
    """The container env entries that tell the pod which attempt it is."""
    return [
        {"name": Env.TASK_ID, "value": attempt.task_id},
        {"name": Env.TASK_NAME, "value": attempt.task_name},
        {"name": Env.ATTEMPT, "value": str(attempt.attempt)},
        {"name": Env.LEASE_NAME, "value": attempt.lease_name},
        {"name": Env.LEASE_ID, "value": attempt.lease_id},
        {"name": Env.LEASE_TTL, "value": f"{attempt.lease_ttl:g}"},
        {"name": Env.PAYLOAD, "value": json.dumps(attempt.payload, separators=(",", ":"))},
        {"name": Env.NAMESPACE, "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        *([{"name": Env.CHECKPOINT, "value": attempt.checkpoint}] if attempt.checkpoint is not None else []),
    ]


@dataclass(frozen=True)
class Terms:
    """What an attempt runs under, stamped by the operator on the attempt's record in the Task's
    status (`status.attempts[]`), in the write that records the attempt: its lease TTL and its
    timeout, as the task's and its pool's settings said then. A pull worker reads them there, so
    it never derives them again from specs that may have changed since (and a pool it would have
    to read). On the wire they are whole milliseconds, as the durations they come from are."""

    LEASE_TTL_MS: ClassVar[str] = "leaseTTLMs"
    """The record's field for `lease_ttl`; 0 turns heartbeats off. Its absence marks a record an
    operator older than the terms wrote."""
    TIMEOUT_MS: ClassVar[str] = "timeoutMs"
    """The record's field for `timeout`; absent when the attempt has none."""

    lease_ttl: float
    """Seconds; 0 turns heartbeats off."""
    timeout: float | None = None
    """Seconds; None: no timeout."""

    @classmethod
    def of_record(cls, record: Mapping[str, Any]) -> Terms | None:
        """The terms on an attempt record as the API server returns it; None when it carries none."""
        ttl, timeout = record.get(cls.LEASE_TTL_MS), record.get(cls.TIMEOUT_MS)
        if not _whole(ttl) or ttl < 0:
            return None
        return cls(ttl / 1000, timeout / 1000 if _whole(timeout) and timeout > 0 else None)


def _whole(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class PushHeader:
    """One header of a push request: its value inline, or the name of the variable holding it."""

    name: str
    value: str = ""
    env: str | None = None
    """Set for a header from a Secret: the kubelet fills this variable, so the Job never holds it."""


@dataclass(frozen=True)
class PushRequest:
    """The request a push attempt makes, as the operator hands it over in CRONOQ_HTTP."""

    url: str
    method: str = "POST"
    headers: tuple[PushHeader, ...] = ()
    timeout: float = 30.0
    """Seconds."""
    body: str | None = None
    """None: the payload is the body (but not for GET and HEAD)."""
    success_codes: tuple[int, ...] = ()
    """Empty: any 2xx."""
    ca_env: str | None = None
    """The variable holding the PEM CA bundle, when the request has its own."""
    allow_link_local: bool = False
    """The pool lets the request reach link-local and cloud metadata addresses (its `allowLinkLocal`)."""

    def to_json(self) -> str:
        request: dict[str, Any] = {
            "url": self.url, "method": self.method,
            "headers": [{"name": h.name, "env": h.env} if h.env is not None else {"name": h.name, "value": h.value}
                        for h in self.headers],
            "timeout": self.timeout}
        if self.body is not None:
            request["body"] = self.body
        if self.success_codes:
            request["successCodes"] = list(self.success_codes)
        if self.ca_env is not None:
            request["caEnv"] = self.ca_env
        if self.allow_link_local:
            request["allowLinkLocal"] = True
        return json.dumps(request, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> PushRequest:
        """The request in `text`; ValueError naming the field when it is not one."""
        spec = json_object(text)
        url = _field(spec, "url", str, required=True)
        timeout = _field(spec, "timeout", (int, float)) or 30.0
        if isinstance(timeout, int) and timeout > 10**9:  # an int of any size: float() would overflow
            timeout = math.inf
        if not math.isfinite(timeout) or timeout < 0:
            raise ValueError(f"timeout must be a finite number of seconds >= 0, not {timeout!r}")
        headers = []
        for i, header in enumerate(_field(spec, "headers", list) or ()):
            if not isinstance(header, dict):
                raise ValueError(f"headers[{i}] is not an object")
            headers.append(PushHeader(_field(header, "name", str, required=True, where=f"headers[{i}]."),
                                      _field(header, "value", str, where=f"headers[{i}].") or "",
                                      _field(header, "env", str, where=f"headers[{i}].")))
        codes = _field(spec, "successCodes", list) or ()
        if not all(isinstance(c, int) and not isinstance(c, bool) for c in codes):
            raise ValueError(f"successCodes must be whole numbers, not {codes!r}")
        return cls(url=url, method=(_field(spec, "method", str) or "POST").upper(), headers=tuple(headers),
                   timeout=float(timeout), body=_field(spec, "body", str), success_codes=tuple(codes),
                   ca_env=_field(spec, "caEnv", str) or None,
                   allow_link_local=_flag(spec, "allowLinkLocal"))


def _field(spec: dict[str, Any], key: str, kind: type | tuple[type, ...], *, required: bool = False,
           where: str = "") -> Any:
    """`spec[key]` when it is a `kind` (None when absent and not required)."""
    value = spec.get(key)
    if value is None:
        if required:
            raise ValueError(f"{where}{key} is missing")
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"{where}{key} has the wrong type: {value!r}")
    return value


def _flag(spec: dict[str, Any], key: str) -> bool:
    """`spec[key]` when it is a boolean, False when absent."""
    value = spec.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"{key} must be true or false, not {value!r}")
    return value


@dataclass(frozen=True)
class Owner:
    """The attempt a Lease belongs to, for creating it: its task (the Lease's owner, so it goes
    with the task) and its number."""

    task_name: str
    task_uid: str
    attempt: int


def lease_body(namespace: str, name: str, holder: str, owner: Owner, ttl: float,
               worker: str | None = None, pool: str | None = None) -> dict[str, Any]:
    """An attempt's heartbeat Lease: held by the attempt's lease id, labelled so the operator
    finds it, owned by the Task. The attempt creates it (a pull worker, naming itself and the pool
    it serves, which the lease guard authorizes); the operator only watches it."""
    labels = {Label.TASK_UID: owner.task_uid, Label.TASK: owner.task_name,
              Label.ATTEMPT: str(owner.attempt), Label.LEASE_ID: holder}
    if worker is not None:
        labels[Label.WORKER] = worker
        labels[Label.POOL] = pool or ""
    return {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {
            "name": name, "namespace": namespace,
            "labels": labels,
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": "Task", "name": owner.task_name,
                                 "uid": owner.task_uid}],
        },
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": max(1, math.ceil(ttl))},
    }


def worker_lease_body(namespace: str, name: str, pool: str, capacity: int, ttl: float) -> dict[str, Any]:
    """A pull worker's own Lease: it is alive while it renews it, and serves `pool` with room
    for `capacity` attempts at once. Held by its own name."""
    return {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace, "labels": {Label.WORKER_POOL: pool},
                     "annotations": {Annotation.CAPACITY: str(capacity)}},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": max(1, math.ceil(ttl))},
    }


def json_object(text: str) -> dict[str, Any]:
    """The JSON object in `text`; ValueError saying what it is instead (the environment's JSON
    values: a push request, a dependent's inputs), never another exception (`jsontext`)."""
    found = json_value(text)
    if not isinstance(found, dict):
        raise ValueError(f"not a JSON object but {type(found).__name__}")
    return found
