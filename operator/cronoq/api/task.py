"""The Task resource: one unit of work, run as pods, one Job per attempt (DESIGN §1–§5).

The rules the API server enforces live here, next to the fields they guard:

- The spec is fixed once the task exists, so every attempt runs the same work. Two fields
  may change: `cancel` (false → true, never back) and `priority` (until the task finishes;
  CEL sees the stored status, so "while waiting" is read as "not in a terminal phase" — a
  running task can still go back to the queue for a retry, where priority matters again).
- The status is written by the leader only. Its `attempt` and `epoch` never go down, and a
  finished task stays finished, so a stale leader's write fails at the API server even if it
  raced past everything else (DESIGN §2).
- A task cannot depend on itself. Rules that need `metadata.name` or both spec and status
  sit at the root of the schema, the only place CEL can see them together.

Every rule of the whole object runs on every write, and the operator's two status writes per
task are most of them, so each rule sits as deep as what it reads and a rule about what cannot
change runs on create only (`on_create`): reading a field of the spec costs the API server an
allocation per spec field. Profiled on a status PUT: CEL went from 0.65–0.77 to 0.36–0.50 ms
(docs/development/benchmarks.md).
"""
from __future__ import annotations

import json
from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

from cronoq.api.delayed import ONE_START_TIME, StartDelay, check_not_before
from cronoq.api.durations import parse as parse_duration
from cronoq.api.limits import ATTEMPT_MESSAGE_LIMIT, ATTEMPTS_KEPT, MESSAGE_LIMIT, REASON_LIMIT, SUMMARY_LIMIT
from cronoq.api.pool import LEASE_TTL_RANGE, ConcurrencyKey, Deadline, JobRetention, LeaseTTL, StartTimeout, TTLAfterFinished
from cronoq.pod_protocol import Terms
from cronoq.pod_protocol.checkpoint import CHECKPOINT_LIMIT
from cronoq.pod_protocol.handover import Wire
from cronoq.pod_protocol.jsontext import JSON_DEPTH, value_depth

from cronoq.api.http import HTTPRequest, StatusCode
from cronoq.api.meta import API_VERSION, Conditions, ObjectMeta
from cronoq.api.notify import NOTIFIED_MOST, Notified
from cronoq.api.model import (
    LabelValue, Model, ObjectName, TIMEOUT_RANGE, Timeout, Timestamp, on_create, rule, validations,
)
from cronoq.api.pod import PodMetadata, PodSettings
from cronoq.api.retry import RetryOverride


class TaskPhase(StrEnum):
    """Where a task is in its life (DESIGN §1)."""

    BLOCKED = "Blocked"
    QUEUED = "Queued"
    RUNNING = "Running"
    RETRYING = "Retrying"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    DEAD_LETTERED = "DeadLettered"
    CANCELLED = "Cancelled"
    SKIPPED = "Skipped"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_PHASES


TERMINAL_PHASES = frozenset({TaskPhase.SUCCEEDED, TaskPhase.FAILED, TaskPhase.DEAD_LETTERED,
                             TaskPhase.CANCELLED, TaskPhase.SKIPPED})


class Edge(StrEnum):
    """What a dependency edge waits for (DESIGN §5)."""

    SUCCESS = "Success"
    FAILURE = "Failure"
    COMPLETE = "Complete"


class Dependency(Model):
    """An edge of the dependency graph: this task waits until `task` ends as `on` says."""

    task: ObjectName = Field(alias=Wire.DEPENDENCY_TASK)
    """Name of the Task (in the same namespace) this one waits for."""
    on: Edge = Edge.SUCCESS
    """`Success` (it succeeded, the default), `Failure` (it failed or was dead-lettered; a
    cancelled task skips its Failure dependents) or `Complete` (it ended in any way). Quote the key in YAML ("on"): YAML 1.1
    reads a bare `on` as true."""

    @model_validator(mode="before")
    @classmethod
    def _quoted_on(cls, data: Any) -> Any:
        if isinstance(data, dict) and True in data:
            raise ValueError('dependsOn: write "on" in quotes; YAML 1.1 read the bare key on as true')
        return data


class PodTemplate(Model):
    """A full pod template for what the named pod fields do not cover (volumes, sidecars,
    security contexts...). Its `spec` is a Kubernetes PodSpec, passed through unchecked here:
    the API server validates it when the attempt's Job is created."""

    metadata: PodMetadata | None = None
    """Labels and annotations of the pod (`podMetadata` of the task is applied over these)."""
    # Untyped on purpose: CEL compares an untyped value as a whole (so the immutability rule on
    # `template` sees every change), while a typed free-form object hides its unknown keys.
    spec: Annotated[dict[str, Any], WithJsonSchema({"x-kubernetes-preserve-unknown-fields": True})] = Field(
        default_factory=dict)
    """A PodSpec. The container named `task`, or else the first container, runs the task; the
    task's image, command, args, env and resources are applied to it."""


POD_SPEC_LISTS = {"containers": "a container", "initContainers": "a container", "volumes": "a volume",
                  "tolerations": "a toleration"}
"""The lists of a template's PodSpec the operator reads or extends when it builds a Job, and what
each item is (an object)."""


def pod_spec_shape(spec: dict[str, Any]) -> None:
    """ValueError naming the first part of a template's PodSpec that the operator reads (to build
    the attempt's Job) and that has not the PodSpec's shape (`containers: [1]`, `env: ["x"]`): the
    task is then refused (InvalidSpec) with that message. The rest of the PodSpec is the API
    server's to judge when the Job is created."""
    def objects(value: Any, where: str, what: str) -> list[dict[str, Any]]:
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise ValueError(f"{where} must be a list of objects, each {what}")
        return value

    base = "spec.template.spec"
    for key, what in POD_SPEC_LISTS.items():
        items = objects(spec.get(key, []), f"{base}.{key}", what)
        if key not in ("containers", "initContainers"):
            continue
        for i, container in enumerate(items):
            where = f"{base}.{key}[{i}]"
            if not isinstance(container.get("name", ""), str):
                raise ValueError(f"{where}.name must be a string")
            for j, var in enumerate(objects(container.get("env", []), f"{where}.env", "a variable")):
                if not isinstance(var.get("name"), str):
                    raise ValueError(f"{where}.env[{j}].name must be a string")
            objects(container.get("volumeMounts", []), f"{where}.volumeMounts", "a mount")
    selector = spec.get("nodeSelector", {})
    if not isinstance(selector, dict) or not all(isinstance(v, str) for v in selector.values()):
        raise ValueError(f"{base}.nodeSelector must be an object of strings")


PAYLOAD_LIMIT = 32768
"""Bytes of compact JSON a payload may take: it reaches the container as CRONOQ_PAYLOAD, and one
environment string is limited to 128 KiB by Linux."""

TEMPLATE_LIMIT = 65536
"""Bytes of compact JSON a pod `template` may take. The operator holds every unfinished task's
spec in memory, so one tenant's huge templates would grow it for all (issue 26); the other pod
fields are bounded by the CRD itself."""

SPEC_LIMIT = 131072
"""Bytes of compact JSON a whole spec may take (128 KiB: the payload's 32 and the template's 64,
and 32 for everything else). The operator holds every unfinished task's spec in memory, and the
CRD's per-field bounds alone let `env`, `args`, `command` and `podMetadata` reach ~1.5 MiB; a
larger spec is refused (the task ends Failed, InvalidSpec) and kept no bigger than its refusal
needs. Checked by the operator on the object as read (controller/store.py), not here: a model
has no cheap way to its own encoded size."""

MUTABLE_SPEC_FIELDS = ("cancel", "priority")


IMMUTABLE = "is immutable once the task exists (only spec.cancel and spec.priority may change)"


def _spec_is_fixed(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """CEL rules making the spec immutable but `cancel` (one way) and `priority`.

    One rule for every field, generated from the model, so a new field is covered without anyone
    remembering to. It starts with `self == oldSelf`: the spec is unchanged on every status write
    (the operator's two per task), and one comparison then answers for all of them; a rule per
    field made the API server run all twenty-odd on every status write (a quarter of its CPU on a
    Task status PUT, profiled). The message, computed only when the rule fails, names each field
    that changed. CEL cannot name a field that has no type (`payload`, free-form JSON), but it can
    compare the whole spec, which includes it: when every other field is unchanged and so are
    cancel and priority, the whole spec must be. The one edit the API server cannot see is a
    payload change made in the same update as a cancel or priority change. Transition rules only
    run on update, never on create."""
    typed: list[str] = []
    untyped: list[str] = []
    for name, info in model.model_fields.items():
        wire = info.alias or name
        (untyped if info.annotation is Any else typed).append(wire)
    same = {w: f"has(self.{w}) == has(oldSelf.{w}) && (!has(self.{w}) || self.{w} == oldSelf.{w})"
            for w in typed if w not in MUTABLE_SPEC_FIELDS}
    mutable_same = " && ".join(f"self.{w} == oldSelf.{w}" for w in MUTABLE_SPEC_FIELDS)
    fixed = " && ".join(f"({s})" for s in same.values())
    # Concatenated, not a list joined: the API server's cost estimate of list macros over these
    # comparisons exceeds the budget for a message.
    changed = [f"(({s}) ? '' : 'spec.{w} ')" for w, s in same.items()]
    changed += [f"(({fixed}) && {mutable_same} ? 'spec.{w} ' : '')" for w in untyped]
    immutable = rule(f"self == oldSelf || ({fixed}) && !({mutable_same})", f"spec {IMMUTABLE}",
                     reason="FieldValueForbidden")
    immutable["messageExpression"] = " + ".join(changed) + f" + '{IMMUTABLE}'"
    schema["x-kubernetes-validations"] = [
        rule("!oldSelf.cancel || self.cancel", "spec.cancel cannot go back to false once true",
             field_path=".cancel", reason="FieldValueForbidden"),
        immutable, on_create(HTTP_OR_CONTAINER), on_create(ONE_START_TIME)]


CONTAINER_FIELDS = ("image", "command", "args", "template")
HTTP_OR_CONTAINER = rule(
    "!has(self.http) || " + " && ".join(f"!has(self.{f})" for f in CONTAINER_FIELDS),
    "spec.http: a task gives either http or a container (image, command, args, template), not both",
    field_path=".http")
"""At most one, not exactly one: a task that gives neither takes what its pool's template gives
(a pool may supply the image, or the http request), and only the Job can tell that none did
(the API server then refuses it: JobRejected)."""


class TaskSpec(PodSettings):
    """What to run, where, and how to retry it. Fixed once the task exists, except `cancel`
    and `priority`."""

    model_config = ConfigDict(json_schema_extra=_spec_is_fixed)

    pool: ObjectName = "default"
    """TaskPool the task runs in; the pool limits concurrency and supplies defaults. Default `default`."""
    priority: int = Field(0, ge=-1_000_000, le=1_000_000)
    """Higher runs first among the pool's queued tasks (-1000000 to 1000000). Default 0.
    May change until the task finishes."""
    key: str | None = Field(None, min_length=1, max_length=256)
    """Idempotency key: a task whose key matches a task of the same pool and namespace runs
    nothing and reports that task's outcome (see the pool's keyRetention)."""
    concurrency_keys: tuple[ConcurrencyKey, ...] = Field(
        (), max_length=8, json_schema_extra={"x-kubernetes-list-type": "set"})
    """Concurrency keys the task holds while an attempt runs, e.g. `customer-42` or
    `deploy/service-x` (at most 8, each 1 to 253 letters, digits, `-`, `_`, `.`, `/`, `:`). A key
    whose limit a TaskPool of the namespace declares (`concurrencyKeyLimits`) is held by at most
    that many running attempts at once, across every pool of the namespace; a task that would pass
    it waits Queued with reason WaitingForKey. Not the idempotency `key`: tasks sharing a
    concurrency key are different tasks that take turns; tasks sharing a `key` are one task."""
    group: LabelValue | None = Field(None, min_length=1)
    """Fairness group, e.g. a tenant or customer id (a label value: up to 63 letters, digits, `-`,
    `_`, `.`). Among queued tasks of one priority, the pool grants its slots to groups in turn, so
    one group's backlog does not hold back another's; the pool's `groupConcurrency` caps what one
    group runs at once. Unset: the task is in the pool's one unnamed group."""
    payload: Any = Field(None, alias=Wire.PAYLOAD, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    """Any JSON value, handed to the container as the CRONOQ_PAYLOAD environment variable. At
    most 32 KiB of JSON nested at most 100 levels; the operator fails a task with a larger or
    deeper payload (the API server cannot measure free-form data)."""
    retry: RetryOverride | None = None
    """Changes to the pool's retry policy; fields left out are the pool's."""
    lease_ttl: LeaseTTL | None = Field(None, alias=Wire.LEASE_TTL)
    """Heartbeat lease TTL of each attempt, e.g. `30s` (2s to 1h; `0s` turns heartbeats off).
    Unset: the pool's."""
    start_timeout: StartTimeout | None = None
    """How long the attempt's pod may stay Pending before the attempt is retried as StartTimeout
    (1s to 24h). Unset: the pool's (10m)."""
    heartbeat_sidecar: bool | None = None
    """Add cronoq's heartbeat sidecar to the attempt's pod (for images without the SDK). Unset: the pool's."""
    start_deadline: Deadline | None = None
    """For work that is worthless late: if the first attempt has not started this long after the
    task's submission (its creationTimestamp; time Blocked and Queued counts), or after its
    start time when it was told to wait (notBefore, startDelay), the task ends
    without running, Failed with reason StartDeadlineExceeded, e.g. `5m` (1s to 8760h; 0s: none,
    whatever the pool says). Unset: the pool's, else none."""
    deadline: Deadline | None = None
    """The whole task's time limit from its submission, e.g. `1h` (1s to 8760h; 0s: none, whatever
    the pool says): when it passes, the running attempt is aborted (its Job deleted, or its pull
    worker's handler aborted), no attempt starts again, and the task ends Failed with reason
    DeadlineExceeded. Unset: the pool's, else none."""
    timeout: Timeout | None = None
    """Per-attempt timeout from container start, e.g. `10m` (1s to 168h). Unset: the pool's, else none."""
    ttl_after_finished: TTLAfterFinished | None = None
    """Delete the task this long after it finishes, e.g. `24h` (0s to 8760h; never before its
    key's keyRetention has passed). Unset: the pool's, else kept."""
    job_retention: JobRetention | None = None
    """Keep each attempt's Job and pod this long after the attempt ends, e.g. `1h` (0s to 720h).
    Unset: the pool's (1h)."""
    ttl_after_success: TTLAfterFinished | None = None
    """ttlAfterFinished if the task ends Succeeded, e.g. `1h` (0s to 8760h; never before its key's
    keyRetention has passed). Unset: the task's ttlAfterFinished, else the pool's."""
    ttl_after_failure: TTLAfterFinished | None = None
    """ttlAfterFinished if the task ends in any other way (Failed, DeadLettered, Cancelled,
    Skipped), e.g. `168h` (0s to 8760h; never before its key's keyRetention has passed). Unset:
    the task's ttlAfterFinished, else the pool's."""
    job_retention_after_success: JobRetention | None = None
    """jobRetention if the task ends Succeeded (0s to 720h). Unset: the task's jobRetention, else
    the pool's."""
    job_retention_after_failure: JobRetention | None = None
    """jobRetention if the task ends in any other way (Failed, DeadLettered, Cancelled, Skipped),
    e.g. `168h` (0s to 720h). Unset: the task's jobRetention, else the pool's."""
    depends_on: tuple[Dependency, ...] = Field((), alias=Wire.DEPENDS_ON, max_length=32, json_schema_extra={
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["task"]})
    """Tasks that must end a certain way before this one is queued (at most 32). Each attempt
    receives their phases and outputs: CRONOQ_INPUTS (JSON, at most 64 KiB), `ctx.inputs` in the
    SDK, a push task's default body (docs/inputs.md)."""
    template: PodTemplate | None = None
    """A full pod template, for pod settings that have no field of their own here. At most
    64 KiB of JSON nested at most 100 levels, with containers, initContainers, volumes and
    tolerations lists of objects, each container's env a list of objects with a name; the
    operator fails a task with any other (reason InvalidSpec, naming the part)."""
    http: HTTPRequest | None = None
    """Make this HTTP request instead of running a container: each attempt runs cronoq's push
    runner, and the answer decides the outcome. Excludes image, command, args and template; the
    pod settings (resources, nodeSelector, serviceAccountName, ...) still apply."""
    not_before: Timestamp | None = None
    """Do not start before this time (RFC 3339, e.g. `2026-12-06T14:00:00Z`): the task waits Blocked,
    without a slot, and then queues in its priority class as if submitted at that time. A time
    past starts it at once. From 0002-01-01 to 9998-12-31 (UTC); the operator fails a task with
    another (reason InvalidSpec). Excludes startDelay."""
    start_delay: StartDelay | None = None
    """Do not start before this long after the task's creation (its creationTimestamp), e.g. `10m`
    (0s to 720h); waits and queues as notBefore does. Excludes notBefore."""
    cancel: bool = Field(False, alias=Wire.CANCEL)
    """Set to true to cancel the task: a running attempt is stopped and the task ends Cancelled.
    Cannot be set back to false."""

    @model_validator(mode="after")
    def _payload_bounded(self) -> TaskSpec:
        for where, value in (("payload", self.payload), ("spec.template.spec", self.template and self.template.spec)):
            if value_depth(value) > JSON_DEPTH:  # before anything recurses into it
                raise ValueError(f"{where} is nested more than {JSON_DEPTH} levels deep")
        if self.template is not None:
            pod_spec_shape(self.template.spec)
        if self.payload is not None:
            size = len(json.dumps(self.payload, separators=(",", ":"), ensure_ascii=False).encode())
            if size > PAYLOAD_LIMIT:
                raise ValueError(f"payload is {size} bytes of JSON, more than {PAYLOAD_LIMIT}")
        if self.template is not None:
            size = len(json.dumps(self.template.to_dict(), separators=(",", ":"), ensure_ascii=False).encode())
            if size > TEMPLATE_LIMIT:
                raise ValueError(f"spec.template is {size} bytes of JSON, more than {TEMPLATE_LIMIT}")
        if self.http is not None and any(getattr(self, f) is not None for f in CONTAINER_FIELDS):
            raise ValueError("spec.http: a task gives either http or a container (image, command, args, template), "
                             "not both")
        return self

    @model_validator(mode="after")
    def _one_start_time(self) -> TaskSpec:
        if self.not_before is not None and self.start_delay is not None:
            raise ValueError(ONE_START_TIME["message"])
        check_not_before(self.not_before)
        return self


class AttemptTrigger(StrEnum):
    FIRST = "First"
    RETRY = "Retry"


class AttemptOutcome(StrEnum):
    """How an attempt ended (DESIGN §3); the `reason` says more (Timeout, LeaseExpired, OOMKilled...)."""

    SUCCESS = "Success"
    RETRYABLE = "Retryable"
    PERMANENT = "Permanent"
    CANCELLED = "Cancelled"


def _ms(text: str) -> int:
    return parse_duration(text) // timedelta(milliseconds=1)


LEASE_TTL_MS = tuple(_ms(bound) for bound in LEASE_TTL_RANGE)
TIMEOUT_MS = tuple(_ms(bound) for bound in TIMEOUT_RANGE)


class Attempt(Model):
    """One attempt of the task: one Job, fenced by (task uid, number)."""

    number: int = Field(alias=Wire.NUMBER, ge=1, le=100)
    """Attempt number, from 1; never reused for this task."""
    lease_id: str | None = Field(None, alias=Wire.LEASE_ID, min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    """Lease id of the attempt, carrying the leader epoch (e.g. `e7-a3`)."""
    job: ObjectName | None = None
    """Name of the attempt's Job (unset when a worker serves it)."""
    worker: ObjectName | None = Field(None, alias=Wire.WORKER)
    """The worker the attempt was handed to, in a pool with `delivery: Workers` (its Lease's name)."""
    trigger: AttemptTrigger = AttemptTrigger.FIRST
    """`First` for the first attempt, `Retry` for the others."""
    dispatched_at: Timestamp | None = Field(None, alias=Wire.DISPATCHED_AT)
    """When the operator granted the attempt its pool slot (and its rate limit's token), recorded
    right before creating its Job; for a pull worker's attempt, when it was handed over (operator
    clock)."""
    lease_ttl_ms: int | None = Field(None, ge=0, le=LEASE_TTL_MS[1], alias=Terms.LEASE_TTL_MS, json_schema_extra=validations(
        rule(f"self == 0 || self >= {LEASE_TTL_MS[0]}", f"{Terms.LEASE_TTL_MS} must be 0 (no heartbeats) or between "
             f"{LEASE_TTL_MS[0]} and {LEASE_TTL_MS[1]}")))
    """The attempt's heartbeat lease TTL in milliseconds (0: no heartbeats), as the task's
    leaseTTL, else its pool's, said when the operator recorded the attempt. A pull worker
    heartbeats by it. Unset on attempts recorded by an operator older than this field."""
    timeout_ms: int | None = Field(None, ge=TIMEOUT_MS[0], le=TIMEOUT_MS[1], alias=Terms.TIMEOUT_MS)
    """The attempt's timeout in milliseconds, as the task's timeout, else its pool's, said when the
    operator recorded the attempt. Unset when it has none (or leaseTTLMs is unset too)."""
    started_at: Timestamp | None = None
    """When the container started: the operator's first sight of it running when that falls
    within the second the kubelet reports (kubelet times are whole seconds), else the kubelet's."""
    finished_at: Timestamp | None = None
    """When the attempt ended: the container's end, sharpened the same way; for an attempt the
    operator ended (timeout, lease expiry, cancellation), when it decided so."""
    outcome: AttemptOutcome | None = Field(None, alias=Wire.OUTCOME)
    """`Success`, `Retryable`, `Permanent` or `Cancelled`; unset while the attempt runs."""
    exit_code: int | None = Field(None, ge=-(2**31), le=2**31 - 1)
    """Exit code of the task container, when it exited."""
    reason: str | None = Field(None, alias=Wire.REASON, max_length=REASON_LIMIT)
    """Why the attempt ended as it did, in CamelCase (e.g. `Timeout`, `LeaseExpired`, `OOMKilled`)."""
    message: str | None = Field(None, max_length=ATTEMPT_MESSAGE_LIMIT)
    """What the container or the operator said about the attempt (truncated to 1 KiB)."""
    duration_ms: int | None = Field(None, ge=0, le=2**53)
    """Run time in milliseconds, from startedAt to finishedAt."""
    response_code: StatusCode | None = None
    """HTTP status code the endpoint answered with (push tasks only; unset when no answer came)."""
    rule: str | None = Field(None, max_length=16, pattern=r"^(task|pool) rule [0-9]+$")
    """The retry rule that decided what followed the attempt: `task rule 1` is the first of the
    task's spec.retry.rules, `pool rule 2` the second of its pool's. Unset when no rule matched and
    the defaults decided."""
    ignored: bool | None = None
    """True when an `Ignore` rule matched: the attempt did not use up one of maxAttempts (its
    number is used all the same). Unset for every attempt that counted."""


class Checkpoint(Model):
    """Progress an attempt saved (`ctx.checkpoint(data)`, or the heartbeat sidecar's checkpoint
    file), carried by a renewal of its Lease and recorded by the operator while that attempt was
    the task's current one. The next attempt starts with it (`ctx.checkpoint_data`,
    CRONOQ_CHECKPOINT)."""

    attempt: int = Field(ge=1, le=100)
    """The number of the attempt that saved it."""
    data: str = Field(alias=Wire.CHECKPOINT_DATA, min_length=1, max_length=CHECKPOINT_LIMIT)
    """The checkpoint as compact JSON text, at most 4096 bytes."""
    saved_at: Timestamp | None = None
    """When the operator recorded it (its own clock)."""


TERMINAL_CEL = "[" + ", ".join(f"'{p}'" for p in sorted(TERMINAL_PHASES)) + "]"


def _never_goes_back(field: str, what: str) -> dict[str, Any]:
    """A transition rule on the integer itself, not on the root: the API server then reads one
    number on each status write instead of walking root → status for every field (the status's
    defaults keep both fields present while a status exists; the root keeps the status)."""
    return validations(rule("self >= oldSelf", f"status.{field} cannot decrease: {what}",
                            reason="FieldValueForbidden"))


class TaskStatus(Model):
    """What the operator observed and decided; written by the leader only."""

    model_config = ConfigDict(json_schema_extra=validations(rule(
        f"!has(oldSelf.phase) || !(oldSelf.phase in {TERMINAL_CEL}) || "
        "(has(self.phase) && self.phase == oldSelf.phase)",
        "status.phase cannot change once the task has finished", field_path=".phase", reason="FieldValueForbidden")))

    phase: TaskPhase | None = Field(None, alias=Wire.PHASE)
    """Blocked, Queued, Running, Retrying, or one of the terminal phases Succeeded, Failed,
    DeadLettered, Cancelled, Skipped. Unset until the operator first sees the task."""
    attempt: int = Field(0, alias=Wire.ATTEMPT, ge=0, le=100, json_schema_extra=_never_goes_back(
        "attempt", "attempt numbers are never reused"))
    """Number of the newest attempt (0 before the first); never decreases."""
    attempts: tuple[Attempt, ...] = Field((), alias=Wire.ATTEMPTS, max_length=ATTEMPTS_KEPT, json_schema_extra={
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["number"]})
    """History of the newest attempts (at most 20 are kept), oldest first."""
    next_attempt_at: Timestamp | None = None
    """While Retrying: when the next attempt may start."""
    ignored_attempts: int | None = Field(None, ge=1, le=100)
    """How many attempts `Ignore` retry rules left uncounted; the task may run maxAttempts plus
    this many. Unset while none was."""
    next_start_at: Timestamp | None = None
    """While Queued for its pool's rate limit (reason RateLimited): when the pool's next start was
    due as the task began to wait. While the pool stays rate-limited, starts follow every
    1/startsPerSecond seconds after it (`cronoq describe` counts down to the next one); the
    status is not rewritten for each."""
    submitted_at: Timestamp | None = None
    """When the task was first queued; retries keep it, so a retried task keeps its place."""
    first_attempt_at: Timestamp | None = Field(None, alias=Wire.FIRST_ATTEMPT_AT)
    """When the first attempt was dispatched; the retry policy's maxRetryDuration counts from it."""
    finished_at: Timestamp | None = None
    """When the task reached its terminal phase."""
    output: str | None = Field(None, max_length=MESSAGE_LIMIT)
    """Output of the successful attempt (its termination message, at most 4 KiB). The task's
    dependents receive it (CRONOQ_INPUTS, parsed when it is JSON)."""
    output_available: bool = False
    """Whether `output` holds the task's output (false for tasks that produced none)."""
    checkpoint: Checkpoint | None = Field(None, alias=Wire.CHECKPOINT)
    """The newest checkpoint an attempt saved, with the number of that attempt; the next attempt
    resumes from it. Unset while no attempt saved one."""
    message: str | None = Field(None, max_length=MESSAGE_LIMIT)
    """Final or current message, at most 4 KiB."""
    summary: str | None = Field(None, max_length=SUMMARY_LIMIT)
    """One short line for the MESSAGE column of `kubectl get tasks` (at most 100 characters)."""
    duplicate_of: ObjectName | None = None
    """For a task whose key matched another's: the name of that task."""
    worker: ObjectName | None = Field(None, alias=Wire.WORKER)
    """While an attempt a pull worker serves runs: that worker (the newest attempt's `worker`),
    unset otherwise. A selectable field, so a worker watches only the tasks handed to it."""
    conditions: Conditions = ()
    """Conditions, following Kubernetes API conventions."""
    observed_generation: int | None = Field(None, ge=0, le=2**53)
    """The metadata.generation this status was computed from."""
    notifications: tuple[Notified, ...] = Field((), max_length=NOTIFIED_MOST, json_schema_extra={
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["receiver"]})
    """Once the task has finished: what became of each notification its pool's (and namespace's) receivers wanted
    (delivered or given up), so that no leader sends a recorded one again. Unset while none was."""
    epoch: int = Field(0, ge=0, le=2**31 - 1, json_schema_extra=_never_goes_back(
        "epoch", "a status written by an older leader is refused"))
    """Leader epoch of the operator replica that last wrote this status; never decreases."""


class Task(Model):
    """A unit of work that cronoq runs as pods, with retries, leases and dependencies."""

    model_config = ConfigDict(json_schema_extra=validations(
        on_create(rule("self.metadata.name.size() <= 63",
                       "metadata.name must be at most 63 characters: it names the task's Jobs and labels",
                       reason="FieldValueInvalid")),
        on_create(rule("!has(self.spec.dependsOn) || self.spec.dependsOn.all(d, d.task != self.metadata.name)",
                       "spec.dependsOn: a task cannot depend on itself", field_path=".spec.dependsOn")),
        rule("self.spec.priority == oldSelf.spec.priority || !has(oldSelf.status) || "
             f"!has(oldSelf.status.phase) || !(oldSelf.status.phase in {TERMINAL_CEL})",
             "spec.priority cannot change once the task has finished",
             field_path=".spec.priority", reason="FieldValueForbidden"),
        rule("!has(oldSelf.status) || has(self.status)",
             "status cannot be removed once written: its attempt and epoch never go back",
             field_path=".status", reason="FieldValueForbidden"),
    ))

    KIND: ClassVar[str] = "Task"
    PLURAL: ClassVar[str] = "tasks"

    api_version: Literal["cronoq.io/v1alpha1"] = API_VERSION
    """cronoq.io/v1alpha1."""
    kind: Literal["Task"] = "Task"
    """Task."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""
    spec: TaskSpec
    """What to run, where, and how to retry it."""
    status: TaskStatus | None = None
    """What the operator observed, written by the leader only."""

    @model_validator(mode="after")
    def _acyclic_self(self) -> Task:
        name = self.metadata.name
        if name is not None:
            if len(name) > 63:
                raise ValueError(f"metadata.name {name!r} is longer than 63 characters")
            if any(d.task == name for d in self.spec.depends_on):
                raise ValueError(f"spec.dependsOn: task {name} cannot depend on itself")
        return self

    @property
    def phase(self) -> TaskPhase | None:
        return self.status.phase if self.status else None

