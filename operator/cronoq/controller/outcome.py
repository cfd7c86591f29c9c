"""How a reconcile ended, as a value: the Controller's work queue acts on it in one place
(controller/reconciler.py `Controller.settle`), as controller-runtime's reconcileHandler switches
on the (Result, error) a Reconciler returns. Whatever a reconcile raises is turned into one of
these here, once (`outcome_of`): no caller looks at exception classes or HTTP statuses.

A reconcile's plan may also ask to be looked at again (a deadline, a backoff the engine timed, a
detour to read): that is the plan's, carried out by controller/apply.py with the rest of it,
whatever the outcome.
"""
from __future__ import annotations

from dataclasses import dataclass
from cronoq.apiserver import errors
from cronoq.kube.writes import NotLeader


@dataclass(frozen=True, slots=True)
class Done:
    """Reconciled: the key's failures in a row are forgotten (its next one backs off from the
    shortest delay)."""


@dataclass(frozen=True, slots=True)
class StillRefused:
    """Reconciled, but the task's attempt still waits on a Job the API server refused: the backoff
    of its creations goes on (its failures are kept; the retry's timer brings it back)."""


@dataclass(frozen=True, slots=True)
class Refused:
    """The API server refused the attempt's Job for now (403: a ResourceQuota, a terminating
    namespace): created again after a per-key delay that doubles with each refusal."""

    message: str
    first: bool
    """The attempt's first refusal: the task's message has yet to say it (reconciled again now)."""


@dataclass(frozen=True, slots=True)
class Throttled:
    """The API server throttled a request (429, API Priority and Fairness): back when it says, not
    after a per-key delay that doubles to minutes while the throttling lasts."""

    retry_after: float
    """Seconds, as the server's Retry-After says (`retry_after`)."""


@dataclass(frozen=True, slots=True)
class Failed:
    """Anything else went wrong: retried after a per-key delay that doubles with each failure in a
    row (workqueue `retry`)."""

    error: Exception


@dataclass(frozen=True, slots=True)
class Deposed:
    """This replica's leadership lapsed mid-reconcile (NotLeader): it acts no more."""


Outcome = Done | StillRefused | Refused | Throttled | Failed | Deposed

DONE, STILL_REFUSED, DEPOSED = Done(), StillRefused(), Deposed()


def succeeded(outcome: Outcome) -> bool:
    """Whether the reconcile did what it set out to (a grant it started with is its to book or
    hand on; controller/reconciler.py `reconcile_task`)."""
    return isinstance(outcome, (Done, StillRefused))


def outcome_of(err: Exception) -> Outcome:
    """What a reconcile that raised `err` comes to."""
    if isinstance(err, NotLeader):
        return DEPOSED
    if isinstance(err, errors.Throttled):
        return Throttled(retry_after(err))
    return Failed(err)


THROTTLED_MAX = 30.0


def retry_after(err: errors.Throttled) -> float:
    """Seconds to wait after a 429: the Retry-After the API server gave (1 s when none or unreadable,
    at most THROTTLED_MAX)."""
    return min(1.0 if err.retry_after is None else err.retry_after, THROTTLED_MAX)
