"""Leader election on a coordination.k8s.io/v1 Lease (DESIGN §6), as pure decisions.

Expiry is judged by locally observed time, never by comparing our clock with the renewTime
another machine wrote: a follower notes, on its own monotonic clock, when it last saw the
Lease change (holder or renewTime), and treats it as expired once leaseDuration has passed
since then without a change. Clock offsets between replicas therefore do not matter.

The epoch is the Lease's leaseTransitions after we took it, plus one: it increases with every
change of leader, so it fences what an older leader writes.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ElectionTiming:
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


@dataclass(frozen=True)
class LeaseRecord:
    """What a Lease says, reduced to what the election reads."""

    holder: str | None
    renew_time: str | None
    transitions: int
    duration: float

    @property
    def version(self) -> tuple[str | None, str | None]:
        """Changes whenever the holder renews or changes."""
        return (self.holder, self.renew_time)


@dataclass(frozen=True)
class Observed:
    """The last version of the Lease we saw and when we first saw it (local monotonic time)."""

    version: tuple[str | None, str | None]
    seen_at: float


def observe(previous: Observed | None, lease: LeaseRecord, now: float) -> Observed:
    if previous is not None and previous.version == lease.version:
        return previous
    return Observed(lease.version, now)


def may_acquire(me: str, lease: LeaseRecord | None, observed: Observed | None, now: float) -> bool:
    """Free, ours already, or unchanged for longer than its duration by our own clock."""
    if lease is None or not lease.holder or lease.holder == me:
        return True
    return observed is not None and now - observed.seen_at > lease.duration


def epoch_after_acquiring(me: str, lease: LeaseRecord | None) -> tuple[int, int]:
    """(leaseTransitions to write, our epoch) when `me` takes or renews the Lease."""
    if lease is None:
        return 0, 1
    transitions = lease.transitions if lease.holder == me else lease.transitions + 1
    return transitions, transitions + 1


def still_leading(last_renewed: float | None, now: float, timing: ElectionTiming) -> bool:
    """A leader that has not renewed within the renew deadline must stop acting at once."""
    return last_renewed is not None and now - last_renewed <= timing.renew_deadline
