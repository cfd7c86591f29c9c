"""What Task and TaskPool share: the model base, the retry policy, the pod fields, conditions.

Every model here is the single source of truth for its part of the CRD: field docstrings
become the descriptions `kubectl explain` prints, pydantic constraints become the schema's
bounds, and CEL rules (`x-kubernetes-validations`) sit in `json_schema_extra` next to the model
they guard. `cronoq.api.crdgen` turns the models into crds/*.yaml.

Bounds are chosen so that the API server can estimate the cost of every CEL rule (each string
has maxLength, each list maxItems, each map maxProperties) and so that no status can grow
without limit.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Final, Union
from urllib.parse import urlsplit

from pydantic import (
    AwareDatetime, BaseModel, ConfigDict, Field, WithJsonSchema, model_validator,
)
from pydantic.alias_generators import to_camel

from cronoq import pod_protocol
from cronoq.pod_protocol import API_VERSION as API_VERSION
from cronoq.api.durations import DurationBounds, cel_valid, format as format_duration


def snake_case(name: str) -> str:
    """`DeadLettered` → `dead_lettered`: phases and outcomes as metric label values and as the
    pool status' count fields."""
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))

GROUP: Final = "cronoq.io"
VERSION: Final = "v1alpha1"
# API_VERSION (`GROUP/VERSION`) is the pod protocol's: the attempt names the Task as its Lease's owner.


class Model(BaseModel):
    """Base of every cronoq API model: immutable, camelCase on the wire, snake_case in Python."""

    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
        # Fields the models do not know (say, written by a newer CRD) are dropped, not fatal.
        extra="ignore",
    )

    def to_dict(self) -> dict[str, Any]:
        """The object as Kubernetes stores it: camelCase keys; unset optional fields, and lists
        and maps that are empty by default, left out (so a dump reads like its manifest)."""
        return _omit_empty(self, self.model_dump(mode="json", by_alias=True, exclude_none=True))


def _omit_empty(model: Model, data: dict[str, Any]) -> dict[str, Any]:
    for name, info in type(model).model_fields.items():
        key = info.alias or name
        if key not in data:
            continue
        value = getattr(model, name)
        if isinstance(value, Model):
            _omit_empty(value, data[key])
        elif isinstance(value, tuple) and value and all(isinstance(v, Model) for v in value):
            for item, item_data in zip(value, data[key]):
                _omit_empty(item, item_data)
        elif data[key] in ([], {}) and _empty_by_default(info):
            del data[key]
    return data


def _empty_by_default(info: Any) -> bool:
    if info.default_factory is not None:
        return info.default_factory in (dict, list, tuple)
    return info.default in ((), [], {})


def rule(expression: str, message: str, *, field_path: str | None = None,
         reason: str = "FieldValueInvalid") -> dict[str, str]:
    """One entry of `x-kubernetes-validations`. `message` should name the field it is about."""
    entry = {"rule": expression, "message": message}
    if field_path:
        entry["fieldPath"] = field_path
    entry["reason"] = reason
    return entry


def on_create(entry: dict[str, str]) -> dict[str, Any]:
    """`entry`, checked when the object is created and skipped on every update: for a rule about
    what cannot change afterwards (metadata.name, a spec another rule keeps fixed). The API server
    runs every rule of the whole object on every write, status writes included, and a rule that
    reads fields is paid in allocations for each (`optionalOldSelf` makes `oldSelf` absent on create
    only; bench/README.md has the profile)."""
    return {**entry, "rule": f"oldSelf.hasValue() || ({entry['rule']})", "optionalOldSelf": True}


def validations(*rules: dict[str, Any]) -> dict[str, Any]:
    """`json_schema_extra` carrying CEL rules."""
    return {"x-kubernetes-validations": list(rules)}


# --- names and small bounded types ---------------------------------------------------------

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

ObjectName = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)]
"""Task and pool names: DNS labels, because they end up in Job names and label values."""

SubdomainName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]

Timestamp = Annotated[AwareDatetime, WithJsonSchema({"type": "string", "format": "date-time", "maxLength": 64})]
"""RFC 3339 time with a zone, as Kubernetes writes it (`2025-01-02T03:04:05Z`)."""

QUANTITY = (r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
            r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")

Quantity = Annotated[
    Union[Annotated[int, Field(ge=0, le=2**53)], Annotated[str, Field(min_length=1, max_length=64, pattern=QUANTITY)]],
    # Structural schemas allow int-or-string only as this exact anyOf; the bounds sit beside it
    # and apply to whichever of the two the value is.
    WithJsonSchema({
        "x-kubernetes-int-or-string": True,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "minimum": 0, "maximum": 2**53, "maxLength": 64, "pattern": QUANTITY,
    }),
]
"""A resource quantity such as `500m`, `1Gi` or `2`, as in a Pod's resources."""

LabelValue = Annotated[str, Field(max_length=63, pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")]
_KEYS_BOUNDED = rule("self.all(k, k.size() <= 317)", "keys must be at most 317 characters (prefix/name)")


def _string_map(*, items: int, doc: str) -> Any:
    """A bounded string → string map (labels, annotations, node selectors)."""
    return Field(default_factory=dict, max_length=items, description=doc,
                 json_schema_extra=validations(_KEYS_BOUNDED))


# --- conditions ----------------------------------------------------------------------------

class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(Model):
    """One aspect of the object's state, following Kubernetes API conventions (metav1.Condition)."""

    type: str = Field(min_length=1, max_length=316,
                      pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                              r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")
    """Kind of condition, in CamelCase (e.g. `Ready`)."""
    status: ConditionStatus
    """Whether the condition holds: True, False or Unknown."""
    reason: str = Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    """Machine-readable CamelCase reason for the last transition."""
    message: str = Field("", max_length=32768)
    """Human-readable details about the last transition."""
    last_transition_time: Timestamp
    """When the status last changed (not when reason or message last changed)."""
    observed_generation: int | None = Field(None, ge=0, le=2**53)
    """The metadata.generation the condition was computed from."""


Conditions = Annotated[
    tuple[Condition, ...],
    Field(max_length=16, json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}),
]


# --- retry policy ----------------------------------------------------------------------------

class Jitter(StrEnum):
    """How the delay before a retry is randomised (DESIGN §4)."""

    FULL = "full"
    NONE = "none"
    ADDITIVE = "additive"


MaxAttempts = Annotated[int, Field(ge=1, le=100)]
Backoff = Annotated[timedelta, DurationBounds("0s", "24h")]
RetryDuration = Annotated[timedelta, DurationBounds("1s", "8760h", off=True)]
"""A retry budget in time (maxRetryDuration): 1s to a year, or 0s for none."""
Multiplier = Annotated[float, Field(ge=1.0, le=10.0)]
ExitCode = Annotated[int, Field(ge=1, le=255)]
PermanentExitCodes = Annotated[tuple[ExitCode, ...], Field(max_length=32, json_schema_extra={"x-kubernetes-list-type": "set"})]

_BACKOFF_ORDER = rule(
    "!has(self.initialBackoff) || !has(self.maxBackoff) || "
    f"!{cel_valid('self.initialBackoff')} || !{cel_valid('self.maxBackoff')} || "
    "duration(self.maxBackoff) >= duration(self.initialBackoff)",
    "maxBackoff must be at least initialBackoff", field_path=".maxBackoff")


def _check_backoff_order(initial: timedelta | None, most: timedelta | None) -> None:
    if initial is not None and most is not None and most < initial:
        raise ValueError(f"maxBackoff ({format_duration(most)}) must be at least initialBackoff ({format_duration(initial)})")


def _check_unique(codes: tuple[int, ...] | None) -> None:
    if codes and len(set(codes)) != len(codes):
        raise ValueError(f"permanentExitCodes has duplicates: {list(codes)}")


class RuleAction(StrEnum):
    """What a retry rule does with the attempt it matches."""

    RETRY = "Retry"
    FAIL = "Fail"
    IGNORE = "Ignore"


RULES_LIMIT: Final = 16
RuleReason = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Z][A-Za-z0-9]*$")]
RuleExitCode = Annotated[int, Field(ge=0, le=255)]
RuleResponseCode = Annotated[int, Field(ge=100, le=599)]
_SET: Final[dict[str, Any]] = {"x-kubernetes-list-type": "set"}


class RetryRule(Model):
    """One retry rule: when an attempt that did not succeed matches, `action` decides what
    follows instead of the defaults. Every list given must match (reason, exit code and response
    code); within a list, any one value does. Rules are consulted in order, the task's before its
    pool's, and the first that matches wins; when none does, the defaults decide (permanentExitCodes,
    then DESIGN §3)."""

    model_config = ConfigDict(json_schema_extra=validations(rule(
        "(has(self.reasons) ? size(self.reasons) : 0) + (has(self.exitCodes) ? size(self.exitCodes) : 0) + "
        "(has(self.responseCodes) ? size(self.responseCodes) : 0) > 0",
        "a retry rule must match on at least one of reasons, exitCodes or responseCodes")))

    action: RuleAction
    """`Retry` (retry with backoff, using up an attempt; `DeadLettered` when they are used up),
    `Fail` (the task fails now, `Failed`, even with attempts left) or `Ignore` (run it again
    without using up an attempt: the next attempt still gets a new number; at most
    `maxIgnoredAttempts` are ignored)."""
    reasons: tuple[RuleReason, ...] = Field((), max_length=16, json_schema_extra=_SET)
    """Attempt reasons that match (at most 16), as the attempt record spells them: e.g. `Evicted`,
    `NodeLost`, `Preempted`, `PodDeleted`, `OOMKilled`, `Timeout`, `LeaseExpired`, `StartTimeout`,
    `ExitCode`, `HTTPStatus`, `NetworkError`, `Retryable`, `Permanent`."""
    exit_codes: tuple[RuleExitCode, ...] = Field((), max_length=32, json_schema_extra=_SET)
    """Exit codes of the task container that match (0 to 255, at most 32). An attempt without an
    exit code (a lost pod, a timeout) does not match."""
    response_codes: tuple[RuleResponseCode, ...] = Field((), max_length=32, json_schema_extra=_SET)
    """HTTP status codes a push task's endpoint answered with that match (100 to 599, at most 32),
    e.g. `409` to retry a conflict, `500` to fail at once. An attempt without an answer does not match."""

    @model_validator(mode="after")
    def _matches_something(self) -> RetryRule:
        if not (self.reasons or self.exit_codes or self.response_codes):
            raise ValueError("a retry rule must match on at least one of reasons, exitCodes or responseCodes")
        return self


RetryRules = Annotated[tuple[RetryRule, ...], Field(max_length=RULES_LIMIT)]
MaxIgnored = Annotated[int, Field(ge=0, le=100)]


class RetryPolicy(Model):
    """How a failed attempt is retried. The delay before attempt n (n ≥ 2) is
    min(initialBackoff × multiplier^(n−2), maxBackoff), randomised by `jitter`."""

    model_config = ConfigDict(json_schema_extra=validations(_BACKOFF_ORDER))

    max_attempts: MaxAttempts = 3
    """Most attempts a task gets, counting the first (1 to 100); 1 disables retries. Default 3."""
    initial_backoff: Backoff = timedelta(seconds=1)
    """Delay before the second attempt, e.g. `500ms`, `30s`, `1m30s` (0s to 24h). Default 1s."""
    multiplier: Multiplier = 2.0
    """Factor the delay grows by with each further attempt (1.0 to 10.0). Default 2.0."""
    max_backoff: Backoff = timedelta(seconds=60)
    """Upper bound of the delay between attempts (0s to 24h, at least initialBackoff). Default 60s."""
    jitter: Jitter = Jitter.FULL
    """Randomisation of the delay d: `full` (uniform in [0, d], the default), `none` (exactly d),
    or `additive` (d plus uniform in [0, d], capped at maxBackoff)."""
    permanent_exit_codes: PermanentExitCodes = ()
    """Exit codes (1 to 255) that mean a permanent failure: the task fails without retrying."""
    max_retry_duration: RetryDuration | None = None
    """A retry budget in time, e.g. `1h` (1s to 8760h; 0s: none), counted from the dispatch of the
    first attempt: no attempt starts after it, and a retry whose backoff would end after it ends
    the task at once (DeadLettered, reason RetryDurationExhausted). With maxAttempts, the first
    budget used up ends the task. Unset: none."""
    rules: RetryRules = ()
    """Ordered rules that decide what follows a failed attempt by its reason, exit code or
    response code: retry, fail now, or ignore it (at most 16). A task's own rules are consulted
    first, then these; the first that matches wins; when none does, the defaults decide."""
    max_ignored_attempts: MaxIgnored = 10
    """Most attempts an `Ignore` rule may leave uncounted (0 to 100). The next attempt it would
    ignore ends the task `DeadLettered` (reason IgnoredAttemptsExhausted), so a node that keeps
    dying cannot keep a task running forever. Default 10."""

    @model_validator(mode="after")
    def _consistent(self) -> RetryPolicy:
        _check_backoff_order(self.initial_backoff, self.max_backoff)
        _check_unique(self.permanent_exit_codes)
        return self

    def overlay(self, override: RetryOverride | None) -> RetryPolicy:
        """This policy with the fields `override` sets replaced. When the mix would put
        initialBackoff above maxBackoff, the value the task set wins: a task's initialBackoff
        above the pool's cap lifts the cap, a task's maxBackoff below the pool's initial delay
        lowers the initial delay. The task's `rules` are not merged here: they come before the
        pool's (`cronoq.engine.retryrules`)."""
        if override is None:
            return self
        changes = {name: value for name in type(override).model_fields
                   if (value := getattr(override, name)) is not None and name != "rules"}  # added to, not replaced
        initial = changes.get("initial_backoff", self.initial_backoff)
        most = changes.get("max_backoff", self.max_backoff)
        if initial > most:
            if "initial_backoff" in changes:
                changes["max_backoff"] = initial
            else:
                changes["initial_backoff"] = most
        return RetryPolicy(**{**self.__dict__, **changes})


class RetryOverride(Model):
    """A task's changes to its pool's retry policy: each field set here replaces the pool's;
    fields left out come from the pool (DESIGN §4 gives the defaults)."""

    model_config = ConfigDict(json_schema_extra=validations(_BACKOFF_ORDER))

    max_attempts: MaxAttempts | None = None
    """Most attempts, counting the first (1 to 100); 1 disables retries. Unset: the pool's."""
    initial_backoff: Backoff | None = None
    """Delay before the second attempt, e.g. `500ms`, `30s`, `1m30s` (0s to 24h). Unset: the pool's."""
    multiplier: Multiplier | None = None
    """Factor the delay grows by with each further attempt (1.0 to 10.0). Unset: the pool's."""
    max_backoff: Backoff | None = None
    """Upper bound of the delay between attempts (0s to 24h). Unset: the pool's."""
    jitter: Jitter | None = None
    """Randomisation of the delay: `full`, `none` or `additive`. Unset: the pool's."""
    permanent_exit_codes: PermanentExitCodes | None = None
    """Exit codes (1 to 255) that mean a permanent failure. Unset: the pool's."""
    max_retry_duration: RetryDuration | None = None
    """Retry budget in time from the first attempt's dispatch, e.g. `1h` (1s to 8760h; 0s: none,
    whatever the pool says). Unset: the pool's."""
    rules: RetryRules | None = None
    """The task's own retry rules (at most 16), consulted before its pool's: the first that
    matches, of the task's then the pool's, decides."""
    max_ignored_attempts: MaxIgnored | None = None
    """Most attempts an `Ignore` rule may leave uncounted (0 to 100). Unset: the pool's."""

    @model_validator(mode="after")
    def _consistent(self) -> RetryOverride:
        _check_backoff_order(self.initial_backoff, self.max_backoff)
        _check_unique(self.permanent_exit_codes)
        return self


TIMEOUT_RANGE: Final = ("1s", "168h")
Timeout = Annotated[timedelta, DurationBounds(*TIMEOUT_RANGE)]
"""Per-attempt timeout, counted from container start: 1s to 7 days."""


# --- pod fields --------------------------------------------------------------------------------

ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
RESERVED_ENV_PREFIX = pod_protocol.Env.PREFIX


class EnvVar(Model):
    """An environment variable of the task container."""

    model_config = ConfigDict(json_schema_extra=validations(rule(
        f"!self.name.startsWith('{RESERVED_ENV_PREFIX}')",
        f"env names starting with {RESERVED_ENV_PREFIX} are reserved for the operator", field_path=".name")))

    name: str = Field(min_length=1, max_length=128, pattern=ENV_NAME)
    """Variable name; names starting with CRONOQ_ are set by the operator and reserved."""
    value: str = Field("", max_length=32768)
    """Variable value (at most 32768 characters)."""

    @model_validator(mode="after")
    def _not_reserved(self) -> EnvVar:
        if self.name.startswith(RESERVED_ENV_PREFIX):
            raise ValueError(f"env name {self.name}: names starting with {RESERVED_ENV_PREFIX} are reserved for the operator")
        return self


class TolerationOperator(StrEnum):
    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(Model):
    """A toleration of the task pod, as in a Pod spec."""

    key: str | None = Field(None, max_length=317)
    """Taint key the toleration matches; empty with operator Exists matches every taint."""
    operator: TolerationOperator | None = None
    """`Exists` or `Equal` (the Kubernetes default when unset)."""
    value: str | None = Field(None, max_length=63)
    """Taint value to match when operator is Equal."""
    effect: TaintEffect | None = None
    """Taint effect to match: NoSchedule, PreferNoSchedule or NoExecute; unset matches all."""
    toleration_seconds: int | None = Field(None, ge=0, le=2**31 - 1)
    """For NoExecute: how long the pod stays bound after the taint appears."""


class Resources(Model):
    """Compute resources of the task container, as in a Pod spec."""

    limits: dict[str, Quantity] = Field(default_factory=dict, max_length=16)
    """Most of each resource the container may use, e.g. `{cpu: 500m, memory: 256Mi}`."""
    requests: dict[str, Quantity] = Field(default_factory=dict, max_length=16)
    """Resources the scheduler reserves for the container."""


class PodMetadata(Model):
    """Labels and annotations put on the task pod (in the test cluster, `kwok.cronoq.io/*`
    annotations choose the simulated outcome)."""

    labels: dict[str, LabelValue] = _string_map(items=64, doc="Labels of the pod (at most 64).")
    annotations: dict[str, Annotated[str, Field(max_length=8192)]] = _string_map(
        items=64, doc="Annotations of the pod (at most 64).")


class PodSettings(Model):
    """The pod fields cronoq knows by name. Anything else about the pod goes in a Task's
    `template`. When a task is run its own fields win over its pool's `template`."""

    image: str | None = Field(None, min_length=1, max_length=512, pattern=r"^\S+$")
    """Container image of the task, e.g. `ghcr.io/acme/worker:1.4`."""
    command: tuple[Annotated[str, Field(max_length=4096)], ...] | None = Field(None, max_length=64)
    """Entrypoint of the container (replaces the image's ENTRYPOINT)."""
    args: tuple[Annotated[str, Field(max_length=8192)], ...] | None = Field(None, max_length=128)
    """Arguments to the entrypoint (replace the image's CMD)."""
    env: tuple[EnvVar, ...] = Field((), max_length=64, json_schema_extra={
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})
    """Environment variables of the container, besides the CRONOQ_* ones the operator sets."""
    resources: Resources | None = None
    """CPU, memory and other resources of the container."""
    service_account_name: SubdomainName | None = None
    """ServiceAccount the pod runs as."""
    node_selector: dict[str, LabelValue] = _string_map(items=32, doc="Node labels the pod must be scheduled on.")
    tolerations: tuple[Toleration, ...] = Field((), max_length=32)
    """Taints the pod tolerates."""
    priority_class_name: SubdomainName | None = None
    """PriorityClass of the pod (scheduling priority between pods, not the task's queue priority)."""
    pod_metadata: PodMetadata | None = None
    """Labels and annotations of the pod."""


# --- push tasks (DESIGN §12) -------------------------------------------------------------------

class HTTPMethod(StrEnum):
    GET = "GET"
    HEAD = "HEAD"
    POST = "POST"
    PUT = "PUT"
    PATCH = "PATCH"
    DELETE = "DELETE"


HEADER_NAME = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
"""An HTTP field name: a `token` of RFC 9110 §5.1 (letters, digits and a few marks, no spaces or colons)."""
RESERVED_HEADERS = ("idempotency-key", "x-cronoq-attempt", "x-cronoq-task", "host", "content-length")
"""Header names the push runner sets itself (the fencing token, the attempt) or the HTTP client
owns; compared case-insensitively, as HTTP does."""
KEY_NAME = r"^[-._a-zA-Z0-9]+$"
BODY_LIMIT = 32768
"""Bytes of an explicit request body: it reaches the runner through the environment, like the payload."""
HTTPTimeout = Annotated[timedelta, DurationBounds("1s", "1h")]


class KeyRef(Model):
    """One key of a Secret or ConfigMap in the task's namespace."""

    name: SubdomainName
    """Name of the Secret or ConfigMap."""
    key: str = Field(min_length=1, max_length=253, pattern=KEY_NAME)
    """Key within it."""


class HTTPHeader(Model):
    """One request header: a literal `value`, or a `secretKeyRef` read into the attempt's pod
    from a Secret (through the container's environment, so it never appears in the Job)."""

    model_config = ConfigDict(json_schema_extra=validations(
        rule("has(self.value) != has(self.secretKeyRef)",
             "a header gives exactly one of value and secretKeyRef", field_path=".value"),
        rule("!(self.name.lowerAscii() in [" + ", ".join(f"'{h}'" for h in RESERVED_HEADERS) + "])",
             "header names Idempotency-Key, X-Cronoq-Attempt, X-Cronoq-Task, Host and Content-Length "
             "are set by cronoq", field_path=".name"),
    ))

    name: str = Field(min_length=1, max_length=256, pattern=HEADER_NAME)
    """Header name, e.g. `Authorization` (an RFC 9110 token; Idempotency-Key, X-Cronoq-Attempt,
    X-Cronoq-Task, Host and Content-Length are reserved)."""
    value: str | None = Field(None, max_length=8192, pattern=r"^[^\r\n]*$")
    """Literal header value (no line breaks)."""
    secret_key_ref: KeyRef | None = None
    """Take the value from this key of a Secret in the task's namespace."""

    @model_validator(mode="after")
    def _one_source(self) -> HTTPHeader:
        if (self.value is None) == (self.secret_key_ref is None):
            raise ValueError(f"header {self.name}: give exactly one of value and secretKeyRef")
        if self.name.lower() in RESERVED_HEADERS:
            raise ValueError(f"header {self.name} is set by cronoq")
        return self


class CABundle(Model):
    """Where the CA certificates that verify the endpoint's TLS certificate come from."""

    config_map_key_ref: KeyRef
    """A ConfigMap key in the task's namespace holding PEM certificates (e.g. one written by
    trust-manager). They replace the runner's default trust store for this request."""


StatusCode = Annotated[int, Field(ge=100, le=599)]


class HTTPRequest(Model):
    """A push task: each attempt makes this HTTP request (from cronoq's push runner, in a Job like
    any attempt) and its answer decides the outcome (see docs/how-to/push-tasks.md, its outcomes table)."""

    model_config = ConfigDict(json_schema_extra=validations(
        rule("isURL(self.url) && url(self.url).getScheme() in ['http', 'https'] && url(self.url).getHostname() != ''",
             "url must be an absolute http:// or https:// URL with a host", field_path=".url"),
        rule("!has(self.body) || !(self.method in ['GET', 'HEAD'])",
             "body cannot be sent with GET or HEAD", field_path=".body"),
    ))

    url: str = Field(min_length=1, max_length=2048, pattern=r"^[hH][tT][tT][pP][sS]?://\S+$")
    """Absolute http:// or https:// URL to call (at most 2048 characters)."""
    method: HTTPMethod = HTTPMethod.POST
    """GET, HEAD, POST, PUT, PATCH or DELETE. Default POST."""
    headers: tuple[HTTPHeader, ...] = Field((), max_length=32, json_schema_extra={
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})
    """Request headers (at most 32), each a value or a secretKeyRef. Idempotency-Key,
    X-Cronoq-Task and X-Cronoq-Attempt are always added."""
    body: str | None = Field(None, max_length=BODY_LIMIT)
    """Request body, sent as is (at most 32 KiB; Content-Type text/plain unless a header says
    otherwise). Unset: the task's payload as JSON (application/json), none if it has no payload
    or the method is GET or HEAD; a task with dependencies sends `{"payload": ..., "inputs": ...}`,
    its dependencies' phases and outputs (docs/inputs.md)."""
    timeout: HTTPTimeout = timedelta(seconds=30)
    """How long one request may take, connecting included (1s to 1h). Default 30s. A request
    that runs out of time is retried (reason Timeout)."""
    success_codes: tuple[StatusCode, ...] = Field((), max_length=32, json_schema_extra={"x-kubernetes-list-type": "set"})
    """Status codes that mean success (100 to 599). Empty (the default): any 2xx."""
    ca_bundle: CABundle | None = None
    """CA certificates to verify an https endpoint with, instead of the runner's default trust
    store. TLS certificates are always verified."""

    @model_validator(mode="after")
    def _consistent(self) -> HTTPRequest:
        parts = urlsplit(self.url)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url {self.url!r} must be an absolute http:// or https:// URL with a host")
        if self.body is not None and self.method in (HTTPMethod.GET, HTTPMethod.HEAD):
            raise ValueError(f"body cannot be sent with {self.method.value}")
        return self


# --- object metadata (Python side only: the API server owns its schema) -----------------------

class ObjectMeta(Model):
    """The parts of Kubernetes object metadata cronoq reads."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: tuple[str, ...] = ()
