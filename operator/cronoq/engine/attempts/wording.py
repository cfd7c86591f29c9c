"""What a task's status says: its messages, the Running and Finished conditions and the summary
column that go with them, and whether a status has said something already.

The messages are templates, kept here so that they can be reworded in one place. Whether a
write is news is judged from the phase, the Running condition's reason and the generation the
status was computed from, never from how a message is worded. Two situations share a reason and
differ only in what the status' message names (the status has no other field for it): a pod
held back for another kubelet reason, and a gate whose message changed. For the first, the part
of the message that names the situation (`POD_HELD_BACK`) is rendered by the same template that
writes it; the second compares the gate's own message, which this module does not word. So no
template here can be reworded into an extra write, or a missing one.

The lowest module of the package: it calls nothing above it.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from cronoq.api import Attempt, TaskPhase, TaskStatus
from cronoq.api.limits import SUMMARY_LIMIT
from cronoq.engine import reasons
from cronoq.engine.conditions import set_condition
from cronoq.engine.gate import Gate
from cronoq.engine.outcome import truncate

# --------------------------------------------------------------------------- the templates
# str.format templates; each names the facts it may use.

RUNNING = "attempt {n} of {most} running"
RUNNING_ON = "attempt {n} of {most} running on worker {worker}"
KUEUE_WAITING = "attempt {n} of {most} is {text}"
"""Kueue holds the attempt's Job (`waiting.kueue_text` words why)."""
JOB_REFUSED = "attempt {n} waits: its Job was refused, and is created again with backoff: {refusal}"
POD_HELD_BACK = "attempt {n} of {most}: its pod cannot start: {why}:"
"""What a pod held back says first: the part that is news (see `held_back_said`)."""
POD_HELD_BACK_DETAIL = (" {detail}; retried when its startTimeout ({start_timeout}) passes, unless it starts "
                        "before")
"""What follows `POD_HELD_BACK`: the kubelet's words, which change without being news."""
BACKING_OFF = ("attempt {n} failed ({reason}): {message}; attempt {next} of {most} after {delay:.1f}s "
               "(at {at:%H:%M:%SZ})")
IGNORED = ("attempt {n} ended ({reason}) and does not count: {message}; attempt {next} of {most} after {delay:.1f}s "
           "(at {at:%H:%M:%SZ})")
IGNORED_EXHAUSTED = ("attempt {n} ended ({reason}): {message}; {ignored} attempts were ignored already "
                     "(maxIgnoredAttempts), so this one ends the task")
SUCCEEDED = "succeeded on attempt {n}"
FAILED = "attempt {n} failed permanently ({reason}): {message}"
EXHAUSTED = "all {n} attempts failed; last ({reason}): {message}"
EXHAUSTED_LOWERED = "all {n} attempts used (maxAttempts is {most}){last}"
EXHAUSTED_LOWERED_LAST = "; last ({reason}): {message}"
CANCELLED = "cancelled by spec.cancel"
ATTEMPT_CANCELLED = "attempt {n} cancelled"
QUEUED = "queued in pool {pool}"
QUEUED_IN_SHARE = "queued in pool {pool}, in the share of {share} (weight {weight})"
WAITING_FOR_WORKER = ("queued in pool {pool}: no live worker of the pool has room (workers announce themselves "
                      "with a Lease labelled cronoq.io/worker-pool={pool})")
RATE_LIMITED = "rate-limited: pool {pool} starts at most {rate:g} attempts/s (burst {burst}); next start due at {at}"
POOL_NOT_FOUND = "TaskPool {pool} does not exist; the task starts once it does"
POD_FIELDS_GIVEN = ("pool {pool} delivers to workers (delivery: Workers), which run the payload with their own "
                    "code; this task gives {fields}, which only a Job can run: remove them, or submit it to a "
                    "pool with delivery: Job")
CANNOT_RUN = "the task cannot run: {error}"
FOREIGN_JOB = ("Job {job} claims attempt {number}, which the status does not name; it is not adopted and is "
               "deleted")
STALE_COMPLETION = "ignored a late report from Job {job} (attempt {number}); the current attempt is {n}"


def running(n: int, most: int, worker: str | None = None) -> str:
    return RUNNING_ON.format(n=n, most=most, worker=worker) if worker else RUNNING.format(n=n, most=most)


def clock(at: datetime | None) -> str:
    """A time of day to the millisecond, as messages give it: `12:00:01.500Z` ("?" when unknown)."""
    return at.strftime("%H:%M:%S.%f")[:-3] + "Z" if at is not None else "?"


def rate_limited(pool: str, rate: float, burst: int, at: datetime) -> str:
    """Written once as the task begins to wait for a token: the due time, never a countdown."""
    return RATE_LIMITED.format(pool=pool, rate=rate, burst=burst, at=clock(at))


def held_back(n: int, most: int, why: str, detail: str | None, start_timeout: timedelta) -> str:
    return (POD_HELD_BACK.format(n=n, most=most, why=why)
            + POD_HELD_BACK_DETAIL.format(detail=detail, start_timeout=secs(start_timeout)))


def exhausted_lowered(n: int, most: int, last: Attempt | None) -> str:
    detail = (EXHAUSTED_LOWERED_LAST.format(reason=last.reason, message=last.message)
              if last is not None and last.reason else "")
    return EXHAUSTED_LOWERED.format(n=n, most=most, last=detail)


def ended(attempt: Attempt) -> str:
    """One Event per attempt, at its end, telling its start too (one write instead of two)."""
    ran = f"worker {attempt.worker}" if attempt.worker else f"Job {attempt.job}"
    if attempt.started_at is not None:
        ran += f", started {attempt.started_at.isoformat(timespec='milliseconds')}"
    if attempt.duration_ms is not None:
        ran += f", ran {attempt.duration_ms / 1000:.3f}s"
    assert attempt.outcome is not None  # only an ended attempt is told
    text = f"attempt {attempt.number} ({ran}) ended: {attempt.outcome.value} ({attempt.reason})"
    return f"{text}: {attempt.message}" if attempt.message else text


def secs(delta: timedelta) -> str:
    """A duration as the API spells it (`90s`, `2m`), for messages."""
    from cronoq.api.durations import format as fmt
    try:
        return fmt(delta)
    except ValueError:
        return f"{delta.total_seconds():g}s"


# --------------------------------------------------------------------------- writing it down


def say(status: TaskStatus, reason: str, message: str, generation: int | None, now: datetime) -> TaskStatus:
    """Set the message, the summary column, and the conditions for the status' phase."""
    message = truncate(message)
    phase = status.phase
    conditions = list(status.conditions)
    active = phase is TaskPhase.RUNNING
    finished = phase is not None and phase.terminal
    conditions = set_condition(conditions, "Running", active, reason if active else _idle_reason(phase, reason),
                               message if active else "", now, generation)
    conditions = set_condition(conditions, "Finished", finished, reason if finished else "NotFinished",
                               message if finished else "", now, generation)
    return status.model_copy(update={"message": message, "summary": summary(message), "conditions": tuple(conditions)})


def stamp(status: TaskStatus, generation: int | None, epoch: int) -> TaskStatus:
    """The status as computed from `generation` by the leader of `epoch`."""
    return status.model_copy(update={"epoch": epoch, "observed_generation": generation})


def summary(message: str) -> str:
    line = message.splitlines()[0] if message else ""
    return line if len(line) <= SUMMARY_LIMIT else line[:SUMMARY_LIMIT - 1] + "…"


def _idle_reason(phase: TaskPhase | None, reason: str) -> str:
    return reason if phase is not None and not phase.terminal else (phase.value if phase else reason)


# --------------------------------------------------------------------------- said already?


def told(status: TaskStatus) -> str | None:
    """The reason the status gives now: its Running condition's."""
    condition = next((c for c in status.conditions if c.type == "Running"), None)
    return condition.reason if condition else None


def acknowledged(status: TaskStatus, generation: int | None) -> bool:
    """The status was computed from this generation of the spec."""
    return status.observed_generation == generation


def said(status: TaskStatus, phase: TaskPhase, reason: str, generation: int | None) -> bool:
    """The status is in `phase` for `reason`, computed from this generation: saying it again is no news."""
    return status.phase is phase and told(status) == reason and acknowledged(status, generation)


def held_back_said(status: TaskStatus, most: int, why: str) -> bool:
    """The status already says the open attempt's pod is held back for `why` (whatever the
    kubelet's words about it, which change from event to event)."""
    return told(status) == reasons.POD_CANNOT_START and (status.message or "").startswith(
        POD_HELD_BACK.format(n=status.attempt, most=most, why=why))


def blocked_said(status: TaskStatus, gate: Gate, generation: int | None) -> bool:
    """The status already says what the gate says: Blocked for its reason, from this generation,
    naming the same original task, with the gate's own message (which words the facts it waits
    on, such as its dependencies' phases: a moved dependency is news)."""
    return (said(status, TaskPhase.BLOCKED, gate.reason, generation) and status.duplicate_of == gate.duplicate_of
            and status.message == truncate(gate.message))
