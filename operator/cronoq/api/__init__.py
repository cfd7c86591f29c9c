"""cronoq's API: the Task, TaskPool and TaskSchedule resources as typed, frozen models.

The models are the single source of truth: crds/ is generated from them
(`python -m cronoq.api.crdgen`). Parse an object from the API with `Task.model_validate(obj)`
and write one back with `.to_dict()`.
"""
from cronoq.api.common import (
    API_VERSION, GROUP, VERSION, CABundle, Condition, ConditionStatus, EnvVar, HTTPHeader, HTTPMethod, HTTPRequest,
    Jitter, KeyRef, ObjectMeta, PodMetadata, PodSettings, Resources, RetryOverride, RetryPolicy, RetryRule, RuleAction, Toleration,
    snake_case,
)
from cronoq.api.durations import DurationError
from cronoq.api.pool import PhaseCounts, PoolTemplate, RateLimit, TaskPool, TaskPoolSpec, TaskPoolStatus
from cronoq.api.schedule import ConcurrencyPolicy, TaskSchedule, TaskScheduleSpec, TaskScheduleStatus, TaskTemplate
from cronoq.api.task import (
    TERMINAL_PHASES, Attempt, AttemptOutcome, AttemptTrigger, Checkpoint, Dependency, Edge, PodTemplate, Task, TaskPhase,
    TaskSpec, TaskStatus,
)

__all__ = [
    "API_VERSION", "GROUP", "VERSION", "Attempt", "AttemptOutcome", "AttemptTrigger", "Checkpoint", "Condition",
    "ConditionStatus", "Dependency", "DurationError", "Edge", "EnvVar", "CABundle", "HTTPHeader",
    "HTTPMethod", "HTTPRequest", "Jitter", "KeyRef", "ObjectMeta", "PhaseCounts",
    "PodMetadata", "PodSettings", "PodTemplate", "PoolTemplate", "RateLimit", "Resources", "RetryOverride",
    "RetryPolicy", "RetryRule", "RuleAction",
    "TERMINAL_PHASES", "Task", "TaskPhase", "TaskPool", "TaskPoolSpec", "TaskPoolStatus", "TaskSpec", "TaskStatus",
    "Toleration", "snake_case",
    "ConcurrencyPolicy", "TaskSchedule", "TaskScheduleSpec", "TaskScheduleStatus", "TaskTemplate",
]
