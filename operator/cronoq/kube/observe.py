"""Raw API objects (Jobs, pods) reduced to the small facts the core decides on. Only these
facts are kept in memory, not the objects, so thousands of finished attempts cost little."""
from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from datetime import datetime, timedelta
from typing import Any

from cronoq.engine import naming
from cronoq.engine.jobs import KUEUE_QUEUE_LABEL, MULTIKUEUE
from cronoq.engine.observed import AttemptJob, KueueHold, Termination
from cronoq.pod_protocol import Annotation, Label
from cronoq.pod_protocol.report import REPORT_LIMIT
from cronoq.pod_protocol.checkpoint import parse_checkpoint


NO_SKEW = timedelta(0)


def parse_time(value: str | None, skew: timedelta = NO_SKEW) -> datetime | None:
    """A time stamped by the cluster, moved by `skew` (our clock minus the cluster's) into ours."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")) + skew


@dataclass(frozen=True, slots=True)
class PodFacts:
    job: str
    phase: str | None
    reason: str | None
    message: str | None
    deleting: bool
    disruption: str | None
    started_at: datetime | None
    termination: Termination | None
    waiting: tuple[str, str] | None = None
    """(reason, message) of a pod that cannot start; see `waiting`."""
    job_uid: str | None = None
    """uid of the Job that controls it (its controller owner reference): a pod speaks for the Job
    of that uid alone, whatever its labels say."""


def job_facts(job: dict[str, Any], skew: timedelta = NO_SKEW) -> AttemptJob | None:
    """The attempt a Job claims to be, or None for Jobs without cronoq's labels."""
    meta = job.get("metadata", {})
    labels = meta.get("labels") or {}
    try:
        number = int(labels[naming.ATTEMPT])
    except (KeyError, ValueError):
        return None
    finished = failure_reason = failure_message = None
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
            finished = cond["type"]
            if finished == "Failed":
                failure_reason, failure_message = cond.get("reason"), cond.get("message")
    spec, status = job.get("spec") or {}, job.get("status") or {}
    suspended = bool(spec.get("suspend"))
    resumed_at = None if suspended else parse_time(status.get("startTime"), skew)
    remote = spec.get("managedBy") == MULTIKUEUE
    return AttemptJob(
        suspended=suspended, resumed_at=resumed_at, remote=remote,
        started_at=resumed_at if remote else None,  # no pod here: the worker cluster's Job started then
        kueue_stopping=(meta.get("annotations") or {}).get("kueue.x-k8s.io/stopping") == "true",
        kueue_queue=labels.get(KUEUE_QUEUE_LABEL) or None,
        number=number, name=meta.get("name", ""), uid=meta.get("uid", ""), lease_id=labels.get(naming.LEASE_ID),
        created_at=parse_time(meta.get("creationTimestamp"), skew), deleting=bool(meta.get("deletionTimestamp")),
        ttl_after_finished=(job.get("spec") or {}).get("ttlSecondsAfterFinished"), finished=finished, failure_reason=failure_reason, failure_message=failure_message)


def pod_facts(pod: dict[str, Any], skew: timedelta = NO_SKEW) -> PodFacts | None:
    """The state of an attempt's pod, or None for pods that belong to no cronoq Job; its times
    moved by `skew` into the operator's clock."""
    meta = pod.get("metadata", {})
    labels = meta.get("labels") or {}
    job = labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
    if not job or naming.ATTEMPT not in labels:
        return None
    status = pod.get("status") or {}
    disruption = next((c.get("reason") for c in status.get("conditions") or []
                       if c.get("type") == "DisruptionTarget" and c.get("status") == "True"), None)
    statuses = status.get("containerStatuses") or []
    main = next((c for c in statuses if c.get("name") == naming.TASK_CONTAINER), statuses[0] if statuses else None)
    started = termination = None
    if main is not None:
        state = main.get("state") or {}
        if "running" in state:
            started = parse_time(state["running"].get("startedAt"), skew)
        elif "terminated" in state:
            end = state["terminated"]
            started = parse_time(end.get("startedAt"), skew)
            termination = Termination(exit_code=int(end.get("exitCode", 0)), reason=end.get("reason"),
                                      message=end.get("message"), started_at=started,
                                      finished_at=parse_time(end.get("finishedAt"), skew))
    return PodFacts(job=job, phase=status.get("phase"), reason=status.get("reason"), message=status.get("message"),
                    deleting=bool(meta.get("deletionTimestamp")), disruption=disruption, started_at=started,
                    termination=termination, waiting=None if started or termination else waiting(status),
                    job_uid=controller_uid(meta, "Job"))


def controller_uid(meta: dict[str, Any], kind: str) -> str | None:
    """uid of the object of `kind` that controls this one (its owner reference with controller set)."""
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") == kind:
            uid = ref.get("uid")
            return uid if isinstance(uid, str) else None
    return None


# Waiting reasons of a container that starts normally: nothing to tell the user.
_STARTING = frozenset({"ContainerCreating", "PodInitializing"})
WAITING_MESSAGE_LIMIT = 512


def waiting(status: dict[str, Any]) -> tuple[str, str] | None:
    """Why a pod that has not started cannot start: the first container (init containers, the
    native sidecar among them, first) the kubelet holds back with a reason, else the scheduler's
    Unschedulable. Messages are cut to 512 characters: they are kept in memory per pod."""
    for container in (*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())):
        held = (container.get("state") or {}).get("waiting") or {}
        reason = held.get("reason")
        if reason and reason not in _STARTING:
            return reason, (held.get("message") or "")[:WAITING_MESSAGE_LIMIT]
    for cond in status.get("conditions") or ():
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("reason"):
            return cond["reason"], (cond.get("message") or "")[:WAITING_MESSAGE_LIMIT]
    return None


def checkpoint_of(lease: dict[str, Any]) -> str | None:
    """The checkpoint an attempt's Lease carries (compact JSON), or None when it carries none that
    is whole JSON within the bound (an oversized one is never held: it costs nothing)."""
    return parse_checkpoint((lease.get("metadata", {}).get("annotations") or {}).get(Annotation.CHECKPOINT))


def served_facts(lease: dict[str, Any], skew: timedelta = NO_SKEW) -> AttemptJob | None:
    """The attempt a pull worker's attempt Lease claims to be, its report (when the worker has
    written one) as the termination message; None for a Lease no worker wrote, or one not held by
    the lease id it names (the engine takes a report only from the attempt's own Lease: see
    `engine.attempts.cleanup.own`). A report longer than the protocol allows is kept cut to its bytes, so
    it reads as no report at all (InvalidReport) and costs no more than the bound."""
    meta = lease.get("metadata", {})
    labels = meta.get("labels") or {}
    worker, lease_id = labels.get(Label.WORKER), labels.get(naming.LEASE_ID)
    try:
        number = int(labels[naming.ATTEMPT])
    except (KeyError, ValueError):
        return None
    if not worker or not lease_id or (lease.get("spec") or {}).get("holderIdentity") != lease_id:
        return None
    report = (meta.get("annotations") or {}).get(Annotation.REPORT)
    if report is not None and len(report) > REPORT_LIMIT // 4 and len(encoded := report.encode()) > REPORT_LIMIT:
        report = encoded[:REPORT_LIMIT].decode(errors="ignore")
    return AttemptJob(number=number, name=meta.get("name", ""), uid=meta.get("uid", ""),
                      lease_id=lease_id, created_at=parse_time(meta.get("creationTimestamp"), skew),
                      worker=worker, termination=None if report is None else Termination(exit_code=0, message=report))


MAX_WORKER_LEASE = 120.0
"""Seconds a worker counts as alive after a renewal, whatever its Lease's leaseDurationSeconds
says (the shipped worker TTL is 15 s): a Lease cannot keep a dead worker handed work for longer."""


@dataclass(frozen=True, slots=True)
class WorkerFacts:
    """A pull worker's own Lease: which pool it serves, with how much room, and whether it renews.
    `duration` is already capped at MAX_WORKER_LEASE; `renewed_at` is its renewTime in our clock."""

    name: str
    pool: str
    capacity: int
    holder: str | None
    renew_time: str | None
    duration: float
    renewed_at: datetime | None = None


def worker_facts(lease: dict[str, Any], skew: timedelta = NO_SKEW) -> WorkerFacts | None:
    """A pull worker's Lease reduced to its facts; None for a Lease that is not one."""
    meta = lease.get("metadata", {})
    pool = (meta.get("labels") or {}).get(Label.WORKER_POOL)
    if not pool:
        return None
    spec = lease.get("spec") or {}
    try:
        capacity = max(int((meta.get("annotations") or {}).get(Annotation.CAPACITY, "1")), 0)
    except ValueError:
        capacity = 0  # a worker that says nothing usable of its room gets nothing
    try:
        duration = min(max(float(spec.get("leaseDurationSeconds") or 0), 0.0), MAX_WORKER_LEASE)
        renewed_at = parse_time(spec.get("renewTime"), skew)
    except (TypeError, ValueError):
        duration, renewed_at = 0.0, None  # unreadable: not alive
    return WorkerFacts(name=meta.get("name", ""), pool=pool, capacity=capacity, holder=spec.get("holderIdentity"),
                       renew_time=spec.get("renewTime"), duration=duration, renewed_at=renewed_at)


KUEUE_STOP_UNREAD = "Kueue stopped the Job; its Workload could not be read (is the operator allowed to read workloads.kueue.x-k8s.io?)"


def kueue_stop(workloads: list[dict[str, Any]] | None) -> tuple[str, str]:
    """(reason, message) of the eviction that stopped a Job, from its Workload: the Evicted
    condition (Kueue's reason: Preempted, PodsReadyTimeout, InactiveWorkload, ...), else the latest
    counted eviction; Kueue's own words in the message, cut to 512 characters."""
    if workloads is None:
        return "EvictedByKueue", KUEUE_STOP_UNREAD
    for workload in workloads:
        status = workload.get("status") or {}
        conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
        evicted = conditions.get("Evicted")
        if evicted is not None and evicted.get("status") == "True" and evicted.get("reason"):
            return str(evicted["reason"])[:128], str(evicted.get("message") or "")[:WAITING_MESSAGE_LIMIT]
        # Read late (Kueue admitted it again meanwhile): the evictions it counted, the requeue's reason.
        counted = [e for e in ((status.get("schedulingStats") or {}).get("evictions")) or []
                   if isinstance(e, dict) and e.get("reason")]
        if counted:
            last = counted[-1]
            return str(last["reason"])[:128], f"evicted {last.get('count', 1)} time(s) ({last.get('underlyingCause') or 'no detail'})"
        requeued = conditions.get("Requeued")
        if requeued is not None and requeued.get("reason") not in (None, "", "Pending"):
            return str(requeued["reason"])[:128], str(requeued.get("message") or "")[:WAITING_MESSAGE_LIMIT]
    return "EvictedByKueue", "Kueue stopped the Job; its Workload names no eviction"


def cluster_queue_of(queue: dict[str, Any] | None) -> str | None:
    """The ClusterQueue a LocalQueue (as read; None: not read) submits to."""
    return str(((queue or {}).get("spec") or {}).get("clusterQueue") or "") or None


def kueue_hold(local_queue: str, workloads: list[dict[str, Any]] | None, cluster_queue: str | None,
               pending: dict[str, Any] | None = None) -> KueueHold:
    """What Kueue says of a Job it holds: from its Workload (`workloads`, Kueue's Workloads of the
    Job; None: they could not be read), the LocalQueue's ClusterQueue (`cluster_queue_of`) and,
    where Kueue serves its visibility API, the LocalQueue's pending Workloads (`pending`: the
    Workload's positionInClusterQueue, 0 for the next, told as 1)."""
    if workloads is None:
        return KueueHold(local_queue, cluster_queue, readable=False)
    if not workloads:
        return KueueHold(local_queue, cluster_queue)
    workload = workloads[0]
    name = str((workload.get("metadata") or {}).get("name") or "")
    status = workload.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
    # What holds it: quota not reserved yet, else (quota reserved) admission checks not passed yet.
    said = next((c for c in (conditions.get("QuotaReserved"), conditions.get("Admitted"))
                 if c is not None and c.get("status") != "True"), conditions.get("QuotaReserved") or {})
    position = None
    for item in (pending or {}).get("items") or []:
        if isinstance(item, dict) and (item.get("metadata") or {}).get("name") == name:
            try:
                position = int(item["positionInClusterQueue"]) + 1
            except (KeyError, TypeError, ValueError):
                position = None
    return KueueHold(local_queue, cluster_queue, name or None, True,
                     str(said.get("reason") or "")[:128] or None,
                     str(said.get("message") or "")[:WAITING_MESSAGE_LIMIT] or None,
                     _needs(workload), position)


def _needs(workload: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """(resource, quantity) a Workload asks for: Kueue's own count (status.resourceRequests, each
    pod set's total) when it gives one, else its pod sets' container requests times their count."""
    totals: dict[str, list[str]] = {}
    given = (workload.get("status") or {}).get("resourceRequests") or []
    if given:
        for podset in given:
            for resource, quantity in ((podset or {}).get("resources") or {}).items():
                totals.setdefault(str(resource), []).append(str(quantity))
    else:
        for podset in (workload.get("spec") or {}).get("podSets") or []:
            count = int((podset or {}).get("count") or 1)
            spec = ((podset or {}).get("template") or {}).get("spec") or {}
            for container in spec.get("containers") or []:
                requests = ((container or {}).get("resources") or {}).get("requests") or {}
                for resource, quantity in requests.items():
                    totals.setdefault(str(resource), []).extend([str(quantity)] * count)
    return tuple((resource, _sum(quantities)) for resource, quantities in totals.items())


_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([a-zA-Z]*)$")


def _sum(quantities: list[str]) -> str:
    """Quantities of one resource added up when they share a unit (`500m` + `500m` = `1000m`),
    else shown side by side (`1 + 500m`)."""
    if len(quantities) == 1:
        return quantities[0]
    parsed = [_QUANTITY.match(q) for q in quantities]
    units = {m.group(2) for m in parsed if m is not None}
    if any(m is None for m in parsed) or len(units) != 1:
        return "(" + " + ".join(quantities) + ")"
    total = sum((Decimal(m.group(1)) for m in parsed if m is not None), Decimal(0))
    return f"{total.normalize():f}{units.pop()}"
