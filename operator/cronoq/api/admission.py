"""A pool's admission: who decides when an attempt's Job may start once cronoq has recorded it.

By default cronoq alone (the pool's concurrency, rate limit and fairness). A pool may hand that
decision to Kueue (`admission.kueue`): cronoq still admits by its own pool concurrency, records
attempt n in the Task's status and only then creates Job n, but creates it suspended and labelled
with the pool's LocalQueue, and Kueue starts it when its quotas allow (docs/how-to/kueue.md).
"""
from __future__ import annotations

from pydantic import ConfigDict, Field

from cronoq.api.model import Model, rule, validations

KUEUE_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
"""A LocalQueue or WorkloadPriorityClass name: a DNS subdomain, as Kueue names them."""


class KueuePriorityClass(Model):
    """Tasks of at least this priority get this WorkloadPriorityClass."""

    min_priority: int = Field(ge=-(2**31), le=2**31 - 1)
    """The lowest task `priority` mapped to `workloadPriorityClass` (a task takes the entry with
    the highest minPriority it reaches)."""
    workload_priority_class: str = Field(min_length=1, max_length=253, pattern=KUEUE_NAME_PATTERN)
    """The Kueue WorkloadPriorityClass (cluster-scoped) the attempt's Job is labelled with
    (`kueue.x-k8s.io/priority-class`): it orders the Job in Kueue's queue and decides whom Kueue's
    preemption may evict."""


class KueueAdmission(Model):
    """Kueue starts the pool's attempts: each attempt's Job is created suspended, labelled with
    `kueue.x-k8s.io/queue-name`, and runs when Kueue admits it."""

    model_config = ConfigDict(json_schema_extra=validations(rule(
        "!has(self.priorityClasses) || self.priorityClasses.all(a, self.priorityClasses.exists_one("
        "b, b.minPriority == a.minPriority))",
        "admission.kueue.priorityClasses: each minPriority at most once", field_path=".priorityClasses")))

    local_queue: str = Field(min_length=1, max_length=253, pattern=KUEUE_NAME_PATTERN)
    """The Kueue LocalQueue, in the pool's namespace, the attempts' Jobs are submitted to."""
    priority_classes: tuple[KueuePriorityClass, ...] = Field((), max_length=16)
    """Task priorities mapped to Kueue WorkloadPriorityClasses (at most 16). A task below every
    minPriority gets no class (Kueue's default priority). Unset: no class on any Job."""

    multi_kueue: bool = False
    """True: Kueue's MultiKueue runs the attempts on its worker clusters. Each attempt's Job is
    created with `spec.managedBy: kueue.x-k8s.io/multikueue`, so this cluster's Job controller
    leaves it to Kueue, which copies it to a worker cluster and mirrors its status back; cronoq's
    Task, attempt numbers, fencing and outcome stay here. The pod is never seen here: an attempt
    starts when the mirrored Job starts (its timeout counts from then), ends by the Job's
    `Complete` or `Failed` condition, and carries no exit code, output or checkpoint; heartbeats
    are off (the pool's `leaseTTL` must be 0s). Default false (docs/how-to/kueue.md)."""

    def priority_class(self, priority: int) -> str | None:
        """The WorkloadPriorityClass of a task of `priority`, if any entry reaches it."""
        reached = [p for p in self.priority_classes if priority >= p.min_priority]
        return max(reached, key=lambda p: p.min_priority).workload_priority_class if reached else None


class Admission(Model):
    """Who starts the pool's attempts once cronoq has admitted and recorded them."""

    kueue: KueueAdmission | None = None
    """Hand the start of each attempt to Kueue. Unset: cronoq starts it at once."""
