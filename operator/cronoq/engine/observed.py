"""What the operator has seen of one attempt: its Job and the Job's pod, reduced to the facts the
decisions need. The kube layer builds these from API objects; the core never reads raw dicts."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

_SECOND = timedelta(seconds=1)


def _refine(reported: datetime | None, seen: datetime | None) -> datetime | None:
    """A kubelet time (whole seconds) sharpened by the operator's own sighting, when consistent."""
    if reported is None:
        return seen
    if seen is not None and reported <= seen < reported + _SECOND:
        return seen
    return reported


@dataclass(frozen=True, slots=True)
class Termination:
    """How the task container ended."""

    exit_code: int
    reason: str | None = None
    message: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class KueueHold:
    """What Kueue says of an attempt's Job it holds (suspended, not admitted yet): read from the
    Job's Workload and the pool's LocalQueue (`kube.observe.kueue_hold`), and where Kueue serves
    its visibility API, the Workload's place in its ClusterQueue."""

    local_queue: str
    cluster_queue: str | None = None
    """The LocalQueue's spec.clusterQueue (None: the LocalQueue could not be read)."""
    workload: str | None = None
    """The Workload's name (None: Kueue has made none for the Job yet, or it could not be read)."""
    readable: bool = True
    """False: Kueue's Workloads could not be read (Kueue not installed, or not allowed)."""
    reason: str | None = None
    """Kueue's reason on the Workload's QuotaReserved condition while it is not True, else on its
    Admitted condition (quota reserved, admission checks pending), e.g. `Pending`."""
    message: str | None = None
    """Kueue's words on that condition, e.g. "couldn't assign flavors to pod set main: insufficient
    unused quota for cpu in flavor default, 1 more needed"."""
    needs: tuple[tuple[str, str], ...] = ()
    """(resource, quantity) the Workload asks for, summed over its pod sets (each request times its count)."""
    position: int | None = None
    """1 for the next the ClusterQueue admits (Kueue's visibility API); None: not known."""


@dataclass(frozen=True, slots=True)
class AttemptJob:
    """One attempt's Job as last observed, with its pod's state folded in. For an attempt a pull
    worker serves (`worker` set) there is no Job: these are the facts of the attempt's Lease the
    worker writes, its report as the `termination` message."""

    number: int
    name: str
    uid: str = ""
    lease_id: str | None = None
    created_at: datetime | None = None
    deleting: bool = False
    """The Job has a deletionTimestamp (someone, maybe we, is deleting it)."""
    ttl_after_finished: int | None = None
    """The Job's spec.ttlSecondsAfterFinished (its jobRetention when it was created or last
    brought in line); None when unset."""
    gone: bool = False
    """The Job was seen and has since been deleted."""
    finished: str | None = None
    """`Complete` or `Failed` once the Job controller says so."""
    failure_reason: str | None = None
    failure_message: str | None = None
    suspended: bool = False
    """spec.suspend: the Job waits for Kueue to admit it (or Kueue stopped it again)."""
    resumed_at: datetime | None = None
    """status.startTime of a Job not suspended: when it was last let run (for a Kueue Job, when
    Kueue admitted it). Its start timeout counts from here, not from its creation."""
    kueue_stopping: bool = False
    """Kueue's annotation `kueue.x-k8s.io/stopping` is on the Job: Kueue is suspending it again."""
    kueue_queue: str | None = None
    """The LocalQueue its `kueue.x-k8s.io/queue-name` label names (None: not a Kueue Job)."""
    remote: bool = False
    """Its spec.managedBy is MultiKueue's: it runs on a worker cluster, its pod is never seen here,
    and `started_at` is its mirrored status.startTime."""
    kueue_hold: KueueHold | None = None
    """What Kueue said of it while it held the Job, as last looked at (None: not looked at yet)."""
    kueue_looked_at: datetime | None = None
    """When, by the operator's clock, it was last looked at (its Workload read)."""
    kueue_stop: tuple[str, str] | None = None
    """(reason, message) of the Kueue eviction that stopped the Job, read from its Workload (a
    plan's `read_workload`); None until read."""
    pod_phase: str | None = None
    pod_reason: str | None = None
    """pod.status.reason, e.g. `Evicted` or `NodeLost`."""
    pod_message: str | None = None
    disruption: str | None = None
    """Reason of the pod's DisruptionTarget condition (eviction, preemption, taint manager)."""
    waiting_reason: str | None = None
    """Why the pod cannot start, as the kubelet or the scheduler says it (ImagePullBackOff,
    CreateContainerConfigError, Unschedulable, ...); None while it starts normally or runs."""
    waiting_message: str | None = None
    started_at: datetime | None = None
    """When the task container started running; timeouts and lease TTLs count from here."""
    termination: Termination | None = None
    running_seen_at: datetime | None = None
    """When the operator first saw the task container running, by its own clock."""
    ended_seen_at: datetime | None = None
    """When the operator first saw the task container terminated, by its own clock."""
    renewed_seen_at: datetime | None = None
    """When the operator last saw the attempt's heartbeat Lease renewed, by its own clock."""
    worker: str | None = None
    """The pull worker that wrote the attempt's Lease (no Job: nothing to delete)."""
    checkpoint: str | None = None
    """The checkpoint (compact JSON) the attempt's Lease carries, when the Lease is held by this
    attempt's lease id; whether it counts is the engine's to say (engine/attempts/checkpoints.py)."""

    @property
    def run_started(self) -> datetime | None:
        """When the container started, never earlier than it did: the kubelet reports whole
        seconds (rounded down, so up to a second early); the operator's first sight of it running
        is late by the watch's delay only. The earlier of the kubelet's second + 1 and that
        sight is the tightest bound that cannot be early. Timeouts count from here."""
        if self.started_at is None:
            return None
        bound = self.started_at + _SECOND
        return min(bound, self.running_seen_at) if self.running_seen_at is not None else bound

    @property
    def start_estimate(self) -> datetime | None:
        """The best estimate of the container's start, for the attempt record: the operator's sight
        of it running when that falls within the kubelet's (truncated) second, else that second."""
        return _refine(self.started_at or (self.termination.started_at if self.termination else None),
                       self.running_seen_at)

    @property
    def end_estimate(self) -> datetime | None:
        """Likewise for the container's end: the operator's first sight of it terminated, when that
        falls within the kubelet's finishedAt second."""
        return _refine(self.termination.finished_at if self.termination else None, self.ended_seen_at)

    @property
    def stopped_by_kueue(self) -> bool:
        """Suspended again after it was let run: Kueue evicted it (a preemption or another cause)
        and the Job controller deletes its pod, without counting it failed, so Kueue could admit
        the Job again and a new pod would run under the same attempt number. A Job cronoq creates
        is never suspended otherwise once it ran."""
        ran = self.kueue_stopping or self.started_at is not None or self.pod_phase is not None \
            or self.termination is not None or self.finished == "Failed"
        return self.suspended and self.finished != "Complete" and ran

    @property
    def held_by_kueue(self) -> bool:
        """A Kueue Job waiting, suspended, for Kueue to admit it: never let run yet."""
        return (self.kueue_queue is not None and self.suspended and self.resumed_at is None
                and not self.stopped_by_kueue and self.finished is None and not self.gone and not self.deleting)

    @property
    def active(self) -> bool:
        """Could still be running: neither finished, nor going away, nor its pod in a terminal
        phase (the pod GC fails a lost node's pods before the Job controller fails their Jobs)."""
        return not (self.finished or self.gone or self.deleting or self.termination
                    or self.pod_phase in ("Succeeded", "Failed"))
