"""cronoq's API: the Task, TaskPool and TaskSchedule resources as typed, frozen models.

The models are the single source of truth: crds/ is generated from them
(`python -m cronoq.api.crdgen`). Parse an object from the API with `Task.model_validate(obj)`
and write one back with `.to_dict()`.
"""
from cronoq.api.http import CABundle, HTTPHeader, HTTPMethod, HTTPRequest, KeyRef
from cronoq.api.meta import API_VERSION, Condition, ConditionStatus, GROUP, ObjectMeta, VERSION
from cronoq.api.model import snake_case
from cronoq.api.pod import EnvVar, PodMetadata, PodSettings, Resources, Toleration
from cronoq.api.retry import Jitter, RetryOverride, RetryPolicy, RetryRule, RuleAction
from cronoq.api.durations import DurationError
from cronoq.api.notify import NotificationResult, Notified, NotifyFormat, NotifyOn, Receiver, ReceiverScope
from cronoq.api.pool import (
    SUBMITTER, Debounce, FairShare, KeyLimit, PhaseCounts, PoolTemplate, QueueMark, QueueMarks, RateLimit, TaskPool, TaskPoolSpec, TaskPoolStatus,
)
from cronoq.api.schedule import ConcurrencyPolicy, TaskSchedule, TaskScheduleSpec, TaskScheduleStatus, TaskTemplate
from cronoq.api.task import (
    TERMINAL_PHASES, Attempt, AttemptOutcome, AttemptTrigger, Checkpoint, Dependency, Edge, PodTemplate, Task, TaskPhase,
    TaskSpec, TaskStatus,
)

__all__ = [
    "API_VERSION", "GROUP", "VERSION", "Attempt", "AttemptOutcome", "AttemptTrigger", "Checkpoint", "Condition",
    "ConditionStatus", "Dependency", "DurationError", "Edge", "EnvVar", "CABundle", "HTTPHeader",
    "HTTPMethod", "HTTPRequest", "Jitter", "KeyRef", "ObjectMeta", "PhaseCounts", "SUBMITTER", "Debounce", "FairShare", "KeyLimit",
    "PodMetadata", "PodSettings", "PodTemplate", "PoolTemplate", "QueueMark", "QueueMarks", "RateLimit", "Resources", "RetryOverride",
    "RetryPolicy", "RetryRule", "RuleAction",
    "TERMINAL_PHASES", "Task", "TaskPhase", "TaskPool", "TaskPoolSpec", "TaskPoolStatus", "TaskSpec", "TaskStatus",
    "Toleration", "snake_case",
    "NotificationResult", "Notified", "NotifyFormat", "NotifyOn", "Receiver", "ReceiverScope",
    "ConcurrencyPolicy", "TaskSchedule", "TaskScheduleSpec", "TaskScheduleStatus", "TaskTemplate",
]
