"""Status conditions, the Kubernetes way: one per type, its lastTransitionTime moving only when
its status flips. Shared by the Task, TaskPool and TaskSchedule decisions."""
from __future__ import annotations

from datetime import datetime

from cronoq.api import Condition, ConditionStatus
from cronoq.api.limits import ATTEMPT_MESSAGE_LIMIT
from cronoq.engine.outcome import truncate


def set_condition(conditions: list[Condition], type_: str, holds: bool, reason: str, message: str,
                  now: datetime, generation: int | None) -> list[Condition]:
    """Conditions with `type_` set; lastTransitionTime kept unless the status itself flips."""
    value = ConditionStatus.TRUE if holds else ConditionStatus.FALSE
    old = next((c for c in conditions if c.type == type_), None)
    since = old.last_transition_time if old is not None and old.status == value else now
    new = Condition(type=type_, status=value, reason=reason, message=truncate(message, ATTEMPT_MESSAGE_LIMIT),
                    last_transition_time=since, observed_generation=generation)
    return [c for c in conditions if c.type != type_] + [new]
