"""The TaskPool resource: where tasks run, how many at once, and the defaults they inherit.

Unlike a Task, a pool's spec may change at any time (raise concurrency, change the defaults);
the change applies to attempts started afterwards, but for the retention of finished work
(`ttlAfterFinished`, `jobRetention` and their by-outcome forms), which applies to what is already there. Its retry policy is complete — the API
server fills in DESIGN's defaults — so a task's `retry` only has to say what differs.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Annotated, ClassVar, Final, Literal

from pydantic import ConfigDict, Field, model_validator

from cronoq.api.http import HTTPRequest
from cronoq.api.meta import API_VERSION, Conditions, ObjectMeta
from cronoq.api.model import LabelValue, Model, ObjectName, Timeout, Timestamp, rule, validations
from cronoq.api.pod import PodSettings
from cronoq.api.retry import RetryPolicy
from cronoq.api.admission import Admission
from cronoq.api.durations import DurationBounds, cel_valid
from cronoq.api.limits import DEFAULT_START_TIMEOUT
from cronoq.api.notify import RECEIVERS_MOST, Receiver

LEASE_TTL_RANGE: Final = ("2s", "1h")
LeaseTTL = Annotated[timedelta, DurationBounds(*LEASE_TTL_RANGE, off=True)]
KeyRetention = Annotated[timedelta, DurationBounds("0s", "720h")]
StartTimeout = Annotated[timedelta, DurationBounds("1s", "24h")]
TTLAfterFinished = Annotated[timedelta, DurationBounds("0s", "8760h")]
JobRetention = Annotated[timedelta, DurationBounds("0s", "720h")]
Deadline = Annotated[timedelta, DurationBounds("1s", "8760h", off=True)]
"""A task's startDeadline or deadline, from its submission: 1s to a year, or 0s for none."""

Count = Annotated[int, Field(ge=0, le=10**9)]


class PoolTemplate(PodSettings):
    """Pod settings every task of the pool starts from; a task's own fields win. A task that
    gives its own image, command, args, template or http runs that, not the pool's image or http."""

    model_config = ConfigDict(json_schema_extra=validations(rule(
        "!has(self.http) || (!has(self.image) && !has(self.command) && !has(self.args))",
        "template.http: a pool template gives either http or a container (image, command, args), not both",
        field_path=".http")))

    http: HTTPRequest | None = None
    """The HTTP request the pool's tasks make when they give neither their own http nor a
    container (image, command, args, template): a pool of push tasks to one endpoint, each
    task bringing its payload. A task's own http replaces it whole."""

    @model_validator(mode="after")
    def _http_or_container(self) -> PoolTemplate:
        if self.http is not None and any(v is not None for v in (self.image, self.command, self.args)):
            raise ValueError("template.http: a pool template gives either http or a container (image, command, "
                             "args), not both")
        return self


class RateLimit(Model):
    """A token bucket on attempt starts: `burst` tokens at most, refilled at `startsPerSecond`;
    each attempt started (a first attempt or a retry, Job or pull worker) takes one. Exact across
    the pool, because only the leader starts attempts. A task waiting for a token stays Queued with
    reason RateLimited; priorities still decide which task gets the next one."""

    # The schema's minimum alone lets a whole 0 through (the API server compares a whole number
    # with the minimum truncated to one): this rule refuses it.
    model_config = ConfigDict(json_schema_extra=validations(rule(
        "double(self.startsPerSecond) >= 0.001",
        "rateLimit.startsPerSecond must be at least 0.001 (one start every 1000 s); to stop starts, pause the pool",
        field_path=".startsPerSecond")))

    starts_per_second: float = Field(ge=0.001, le=1000.0)
    """Attempts started per second, on average, over time (0.001 to 1000; may be fractional:
    0.5 is one start every 2 seconds)."""
    burst: int = Field(1, ge=1, le=1000)
    """Most attempts that may start at once after the pool has been idle (1 to 1000). In any
    window of t seconds at most burst + startsPerSecond × t attempts start. Default 1: starts
    evenly spaced."""


SUBMITTER: Final = "cronoq.io/submitter"
"""The Task annotation naming who created the task: the username the API server authenticated
(`system:serviceaccount:team-a:ci`, `alice@example.com`). The chart's admission policies write it
on create and refuse any other value, and any change of it later; a pool that shares by submitter
(`fairShare.by: Submitter`) takes a task's fairness group from it."""

WEIGHT_MOST: Final = 1000
UsageHalfLife = Annotated[timedelta, DurationBounds("1m", "168h")]
Weight = Annotated[int, Field(ge=1, le=WEIGHT_MOST)]


class FairShare(Model):
    """How the pool shares its slots among fairness groups: where a task's group comes from
    (`by`), and how much each group gets against the others (`weights`). The next free slot goes
    to the waiting group that holds the fewest slots for its weight (running attempts, and slots
    granted but not started), groups as low taking turns; a task's `priority` orders only the tasks
    of its own group. So a group gets its weight's part of the pool however many tasks it queues,
    whatever their priority: with two groups of weights 2 and 1 waiting, 2 of every 3 slots go to
    the first."""

    model_config = ConfigDict(json_schema_extra=validations(rule(
        "!has(self.weights) || self.weights.all(k, k.size() >= 1 && k.size() <= 512)",
        "fairShare.weights: each key (a submitter or a group) is 1 to 512 characters", field_path=".weights")))

    by: Literal["Submitter", "Group"]
    """Where a task's fairness group comes from. `Submitter`: who created the task, the user or
    ServiceAccount the API server authenticated, as its `cronoq.io/submitter` annotation records
    it (the chart's admission policies write it and refuse any other value), so a tenant has as
    many groups as it has identities, whatever it writes in its tasks; a task without the
    annotation is in the one group of the tasks without a submitter. `Group`: the task's own
    `spec.group`, which whoever writes the task chooses (for producers that cooperate: a tenant
    that names 60 groups takes 60 parts)."""
    weights: dict[str, Weight] = Field(default_factory=dict, max_length=256)
    """Weight of named groups, 1 to 1000 (at most 256 entries): a submitter's username (e.g.
    `system:serviceaccount:team-a:ci`) or a `spec.group`, as `by` says. A group of weight 2 gets
    twice the slots of a group of weight 1 while both wait. Groups not named here weigh
    `defaultWeight`."""
    default_weight: Weight = 1
    """Weight of the groups `weights` does not name (1 to 1000). Default 1."""
    usage_half_life: UsageHalfLife | None = None
    """Count recent use too (Kueue's admission fair sharing): a group's standing is the slots it
    holds plus its usage, the slots it held averaged over time with this half-life (1m to 168h),
    so a group that just held many slots yields to one that did not until the average catches up.
    Unset: only the slots held now count. The usage is the leader's memory: a new leader starts
    it from what runs."""

    def weight(self, group: str) -> int:
        return self.weights.get(group, self.default_weight)


CONCURRENCY_KEY: Final = r"^[A-Za-z0-9]([-A-Za-z0-9_./:]*[A-Za-z0-9])?$"
ConcurrencyKey = Annotated[str, Field(min_length=1, max_length=253, pattern=CONCURRENCY_KEY)]
"""A task's concurrency key (`spec.concurrencyKeys`): `customer-42`, `deploy/service-x`."""
KEY_LIMITS_MOST: Final = 64


DebounceQuiet = Annotated[timedelta, DurationBounds("1s", "24h")]
DebounceMaxWait = Annotated[timedelta, DurationBounds("1s", "168h")]


class Debounce(Model):
    """How long a key with `onNewer: Debounce` must be quiet before its newest task starts, and how
    long a burst may put that off."""

    model_config = ConfigDict(json_schema_extra=validations(rule(
        f"!{cel_valid('self.quiet')} || !{cel_valid('self.maxWait')} || "
        "duration(self.maxWait) >= duration(self.quiet)",
        "debounce.maxWait must be at least debounce.quiet", field_path=".maxWait")))

    quiet: DebounceQuiet
    """The newest waiting task naming the key starts once no newer one has arrived for this long
    (1s to 24h): each arrival starts the quiet period again."""
    max_wait: DebounceMaxWait
    """Most time the oldest waiting task naming the key waits for the quiet (1s to 168h, at least
    `quiet`): then the newest starts anyway, so a steady stream of arrivals still runs."""


class KeyLimit(Model):
    """How many running attempts may hold a concurrency key at once, across every pool of the
    namespace."""

    model_config = ConfigDict(json_schema_extra=validations(
        rule("!has(self.onNewer) || self.onNewer != 'Debounce' || has(self.debounce)",
             "debounce: required with onNewer Debounce (quiet and maxWait)", field_path=".debounce"),
        rule("!has(self.debounce) || (has(self.onNewer) && self.onNewer == 'Debounce')",
             "debounce: only with onNewer Debounce", field_path=".debounce"),
    ))

    key: str = Field(min_length=1, max_length=253, pattern=r"^([A-Za-z0-9]([-A-Za-z0-9_./:]*[A-Za-z0-9])?|"
                                                          r"[A-Za-z0-9][-A-Za-z0-9_./:]*\*)$")
    """The key (`deploy/service-x`), or a prefix ending in `*` (`customer-*`) that gives each key
    starting with it a limit of its own: `customer-*` with limit 3 lets 3 attempts hold
    `customer-42` and 3 others `customer-7`. A key's own entry wins over a prefix's, a longer
    prefix over a shorter one."""
    limit: int = Field(ge=0, le=10_000)
    """Most running attempts (across every pool of the namespace) holding the key at once (0 to
    10000): 1 makes it a mutex; 0 holds every task naming it."""
    on_newer: Literal["Queue", "SupersedeQueued", "CancelRunning", "Debounce"] = "Queue"
    """What a newer task naming the key does to the older unfinished ones (newer: submitted later,
    in any pool of the namespace). `Queue` (default): nothing, they take turns. `SupersedeQueued`:
    the older ones not running an attempt end Cancelled with reason Superseded, naming the newer
    task; one running goes on. `CancelRunning`: the running ones too (their attempts are aborted),
    so the newest alone goes on. For a prefix, each key is its own: a newer `customer-42` task
    supersedes older `customer-42` ones only. `Debounce`: a task naming the key starts only once no
    newer one has arrived for `debounce.quiet`, or once the oldest waiting one has waited
    `debounce.maxWait`; then the newest starts and the older waiting ones end Cancelled with
    reason Superseded, naming it (a running one goes on). Meanwhile they stay Queued with reason
    Debouncing."""
    debounce: Debounce | None = None
    """With `onNewer: Debounce` (required then, refused otherwise): its quiet period and maximum wait."""

    @model_validator(mode="after")
    def _debounce_with_its_policy(self) -> KeyLimit:
        if (self.on_newer == "Debounce") != (self.debounce is not None):
            raise ValueError("debounce: required with onNewer Debounce, and only with it")
        return self


class TaskPoolSpec(Model):
    """How many attempts the pool runs at once and the defaults its tasks inherit."""

    model_config = ConfigDict(json_schema_extra=validations(
        rule("!has(self.admission) || !has(self.admission.kueue) || !has(self.delivery) || self.delivery == 'Job'",
             "admission.kueue: Kueue admits Jobs; a pool of delivery Workers has none", field_path=".admission"),
        rule("!has(self.admission) || !has(self.admission.kueue) || !has(self.admission.kueue.multiKueue) || "
             "!self.admission.kueue.multiKueue || (has(self.leaseTTL) && duration(self.leaseTTL) == duration('0s'))",
             "leaseTTL: must be 0s with admission.kueue.multiKueue: the attempts run on worker clusters, where "
             "no heartbeat reaches this cluster's Leases", field_path=".leaseTTL"),
        rule("!has(self.admission) || !has(self.admission.kueue) || !has(self.admission.kueue.multiKueue) || "
             "!self.admission.kueue.multiKueue || !has(self.template) || !has(self.template.http)",
             "template.http: push tasks cannot run with admission.kueue.multiKueue: the response of a request "
             "made on a worker cluster never reaches this one", field_path=".template.http"),
    ))

    concurrency: int = Field(10, ge=0, le=10_000)
    """Most attempts running at once in the pool (0 to 10000; 0 pauses it: queued tasks wait). Default 10."""
    group_concurrency: int | None = Field(None, ge=1, le=10_000)
    """Most attempts one fairness group (a task's `group`, or its submitter when the pool shares by
    submitter; tasks without one form one group) runs at once in the pool (1 to 10000). Unset: a
    group may use every slot. Whatever the cap, the pool grants slots to groups in turn."""
    fair_share: FairShare | None = None
    """Share the slots among fairness groups by weight, with groups taken from the submitter's
    identity (`by: Submitter`) or from the tasks' `spec.group` (`by: Group`); priority then orders
    only the tasks of one group. Unset: groups (`spec.group`) of one priority take turns, and a
    higher priority goes ahead of every group's lower ones (the order before fair shares)."""
    concurrency_key_limits: tuple[KeyLimit, ...] = Field(
        (), max_length=KEY_LIMITS_MOST, json_schema_extra={
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["key"]})
    """Limits of concurrency keys (a task's `spec.concurrencyKeys`), at most 64, each key once:
    they hold for the whole namespace, across every pool, not for this pool alone. Declare a key
    in one pool of the namespace; if several pools declare the same key, the smallest limit holds.
    A key no pool declares has no limit. Applies at the next grant."""
    delivery: Literal["Job", "Workers"] = "Job"
    """How the pool's attempts run: `Job` (default), each attempt a Job and its pod; `Workers`,
    each attempt handed to a live worker process that serves the pool (`cronoq.worker.serve`),
    with no Job and no pod per attempt. A worker announces itself with its own Lease; the
    operator still admits, fences, times out and retries every attempt."""
    events: Literal["All", "Warnings"] | None = None
    """Events posted on the pool's tasks: `All` (an AttemptEnded Event for every attempt, succeeded
    ones too) or `Warnings` (only Warning Events: attempts that failed, timed out or were lost, late
    reports). Unset: the operator's default (`--events`; shipped: All in Job pools, Warnings in
    Workers pools, where a stream of small tasks would pay an Event write per success for what the
    status' attempt history already says). The operator's `--events=warnings` caps every pool."""
    admission: Admission | None = None
    """Who starts an attempt once cronoq has recorded it: unset, cronoq at once; `kueue`, Kueue,
    when its quotas allow (the Job is created suspended in the pool's LocalQueue). The pool's
    `concurrency` still bounds how many attempts (suspended Jobs included) exist at once. Only
    with `delivery: Job`."""
    paused: bool = False
    """True: the pool starts no new attempts (its queued tasks wait) while those running go on;
    `concurrency` is kept, so setting it back to false resumes at the same limit
    (`cronoq pool pause|resume`). Default false."""
    rate_limit: RateLimit | None = None
    """Limit on how fast the pool starts attempts (retries included), beside `concurrency`. A
    change applies at once; the tokens start empty when the operator (or a new leader) starts,
    when the limit is first set and when the pool is created, never full. Unset: no limit."""
    retry: RetryPolicy = Field(default_factory=RetryPolicy, json_schema_extra={"default": {}})
    """Retry policy of the pool's tasks; a task's own `retry` fields win."""
    timeout: Timeout | None = None
    """Default per-attempt timeout, counted from container start (1s to 168h). Unset: none."""
    lease_ttl: LeaseTTL = Field(timedelta(seconds=30), alias="leaseTTL")
    """Heartbeat lease TTL of each attempt: an attempt whose lease is not renewed within it is
    aborted and retried (2s to 1h; 0s turns heartbeats off). Default 30s."""
    start_timeout: StartTimeout = DEFAULT_START_TIMEOUT
    """How long an attempt's pod may stay Pending (unschedulable, pulling its image) before the
    attempt is abandoned and retried with reason StartTimeout (1s to 24h). Default 10m. Timeouts and
    lease TTLs count only from container start, so this bounds the time before it."""
    start_deadline: Deadline | None = None
    """Default startDeadline of the pool's tasks: a task whose first attempt has not started this
    long after its submission ends without running, Failed with reason StartDeadlineExceeded
    (1s to 8760h; 0s: none). Applies at once to the tasks waiting. Unset: none."""
    deadline: Deadline | None = None
    """Default deadline of the pool's tasks, from submission: when it passes, a running attempt is
    aborted and the task ends Failed with reason DeadlineExceeded (1s to 8760h; 0s: none).
    Applies at once to the unfinished tasks. Unset: none."""
    heartbeat_sidecar: bool = False
    """Add cronoq's heartbeat sidecar to every attempt's pod, for images without the cronoq SDK:
    the sidecar renews the attempt's lease while the pod runs. Default false (the SDK heartbeats)."""
    key_retention: KeyRetention = timedelta(hours=1)
    """How long a finished keyed task keeps deduplicating new tasks with its key (0s to 720h). Default 1h."""
    ttl_after_finished: TTLAfterFinished | None = None
    """How long a finished task is kept before the operator deletes it (and, through its owner
    references, whatever is left of its Jobs, pods and Leases), counted from its finishedAt
    (0s to 8760h; 0s deletes it right after it finishes). A keyed task is kept until its
    keyRetention has passed too. Applies to tasks that already finished when changed. Unset:
    finished tasks are kept until someone deletes them. A task's own value wins."""
    job_retention: JobRetention = timedelta(hours=1)
    """How long an attempt's Job and pod are kept after the attempt finishes, so its logs stay
    readable (0s to 720h; set as the Job's ttlSecondsAfterFinished). Changing it applies to the
    Jobs already there, finished ones included: lowered, Jobs past it are deleted at once.
    Default 1h. A task's own value wins."""
    ttl_after_success: TTLAfterFinished | None = None
    """ttlAfterFinished for tasks that end Succeeded, e.g. `1h` (0s to 8760h); overrides
    ttlAfterFinished for them, and keyRetention is still honoured. Unset: ttlAfterFinished.
    A task's own ttlAfterSuccess or ttlAfterFinished wins."""
    ttl_after_failure: TTLAfterFinished | None = None
    """ttlAfterFinished for tasks that end in any other way (Failed, DeadLettered, Cancelled,
    Skipped), e.g. `168h` to keep dead letters for a week (0s to 8760h); overrides
    ttlAfterFinished for them, and keyRetention is still honoured. Unset: ttlAfterFinished.
    A task's own ttlAfterFailure or ttlAfterFinished wins."""
    job_retention_after_success: JobRetention | None = None
    """jobRetention for the Jobs of tasks that end Succeeded (0s to 720h). While a task is
    unfinished its Jobs are kept for the longest retention it may end with; when it succeeds they
    are brought to this one. Unset: jobRetention. A task's own value wins."""
    job_retention_after_failure: JobRetention | None = None
    """jobRetention for the Jobs of tasks that end in any other way (Failed, DeadLettered,
    Cancelled, Skipped), e.g. `168h` to keep a dead letter's logs for a week (0s to 720h). Unset:
    jobRetention. A task's own value wins."""
    allow_link_local: bool = False
    """Let the pool's push tasks (`http`) call link-local addresses (169.254.0.0/16, fe80::/10) and
    cloud metadata addresses (169.254.169.254, fd00:ec2::254, Alibaba Cloud's 100.100.100.200, Azure
    WireServer's 168.63.129.16), whether named literally or reached
    through a name that resolves to them. Default false: such a request ends its attempt Permanent
    with reason AddressNotAllowed, as a metadata service hands out the node's cloud credentials.
    Only pool writers (the namespace's admins) can set it; a Task has no such field."""
    notifications: tuple[Receiver, ...] = Field((), max_length=RECEIVERS_MOST, json_schema_extra={
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})
    """Receivers told about the pool's tasks' outcomes (at most 8): an HTTP POST of a signed
    CloudEvent (or a Slack message) when a task ends DeadLettered, Failed or Succeeded, or a
    schedule of the pool's tasks pauses (SchedulePaused), as each receiver's `outcomes` say; at
    least once, with an id stable across failovers (docs/how-to/notifications.md). A receiver of
    `scope: Namespace` serves every pool of the namespace. Empty (the default): none."""
    @model_validator(mode="after")
    def _kueue_admits_jobs(self) -> TaskPoolSpec:
        if self.admission is not None and self.admission.kueue is not None and self.delivery != "Job":
            raise ValueError("admission.kueue: Kueue admits Jobs; a pool of delivery Workers has none")
        if self.admission is not None and self.admission.kueue is not None and self.admission.kueue.multi_kueue:
            if self.lease_ttl:
                raise ValueError("leaseTTL: must be 0s with admission.kueue.multiKueue: the attempts run on worker "
                                 "clusters, where no heartbeat reaches this cluster's Leases")
            if self.template is not None and self.template.http is not None:
                raise ValueError("template.http: push tasks cannot run with admission.kueue.multiKueue: the "
                                 "response of a request made on a worker cluster never reaches this one")
        return self

    template: PoolTemplate | None = None
    """Pod settings the pool's tasks inherit (image, serviceAccountName, resources, nodeSelector,
    tolerations, priorityClassName, ...)."""


class PhaseCounts(Model):
    """How many of the pool's tasks are in each phase."""

    blocked: Count = 0
    """Tasks waiting on dependencies."""
    queued: Count = 0
    """Tasks ready and waiting for a slot."""
    running: Count = 0
    """Tasks with a running attempt."""
    retrying: Count = 0
    """Tasks waiting out a backoff."""
    succeeded: Count = 0
    """Tasks that succeeded."""
    failed: Count = 0
    """Tasks that failed permanently."""
    dead_lettered: Count = 0
    """Tasks that ran out of attempts."""
    cancelled: Count = 0
    """Tasks that were cancelled."""
    skipped: Count = 0
    """Tasks skipped because a dependency edge could no longer hold."""


class QueueMark(Model):
    """One waiting task of the pool at its place in the admission order."""

    place: int = Field(ge=1, le=10**9)
    """1 for the next to be admitted."""
    name: ObjectName
    """The Task's name."""
    priority: int = Field(0, ge=-1_000_000, le=1_000_000)
    """Its spec.priority then."""
    submitted_at: Timestamp
    """Its status.submittedAt then."""
    group: LabelValue | None = None
    """Its fairness group (spec.group), if it names one."""
    submitter: str | None = Field(None, min_length=1, max_length=512)
    """Its submitter (the cronoq.io/submitter annotation), when the pool shares by submitter."""


QUEUE_MARKS_MOST: Final = 100


class QueueMarks(Model):
    """Every so many of the pool's waiting tasks in admission order, as the operator saw them: with
    these `cronoq describe` places a queued task between two marks, without listing the pool."""

    taken_at: Timestamp
    """When the operator read its queue."""
    waiting: Count = 0
    """How many tasks waited for a slot then (the last mark's place)."""
    marks: tuple[QueueMark, ...] = Field((), max_length=QUEUE_MARKS_MOST)
    """The first, the last, and evenly spaced ones between (at most 100)."""


class TaskPoolStatus(Model):
    """What the operator observed of the pool; written by the leader only."""

    counts: PhaseCounts | None = None
    """Tasks of the pool by phase."""
    running: Count = 0
    """Attempts running now."""
    queued: Count = 0
    """Tasks waiting for a slot."""
    queue_marks: QueueMarks | None = None
    """While more than 2,000 tasks wait: marks of the admission order, taken at most once a minute
    (`cronoq describe` reads a queued task's place between two of them)."""
    conditions: Conditions = ()
    """Conditions, following Kubernetes API conventions."""
    observed_generation: int | None = Field(None, ge=0, le=2**53)
    """The metadata.generation this status was computed from."""


class TaskPool(Model):
    """A pool of task slots: its concurrency limit and the defaults its tasks inherit."""

    model_config = ConfigDict(json_schema_extra=validations(
        rule("self.metadata.name.size() <= 63",
             "metadata.name must be at most 63 characters: pool names are used as label values",
             reason="FieldValueInvalid"),
    ))

    KIND: ClassVar[str] = "TaskPool"
    PLURAL: ClassVar[str] = "taskpools"

    api_version: Literal["cronoq.io/v1alpha1"] = API_VERSION
    """cronoq.io/v1alpha1."""
    kind: Literal["TaskPool"] = "TaskPool"
    """TaskPool."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""
    spec: TaskPoolSpec = Field(default_factory=TaskPoolSpec, json_schema_extra={"default": {}})
    """Concurrency and defaults of the pool."""
    status: TaskPoolStatus | None = None
    """What the operator observed, written by the leader only."""
