"""How far this process's wall clock is from the API server's, from the `Date` header of the
API server's answers, so that times the cluster stamps (a container's start and end, a Job's
creation) are compared with the operator's own clock in the operator's terms.

A `Date` is whole seconds: an answer sent between our `sent` and `received` times with Date D
bounds the offset (ours − the server's) to (sent − D − 1, received − D]. Over recent answers
the tightest bounds are kept. While they allow a difference within TOLERANCE, the clocks are
taken as agreeing (offset 0: what the operator has always assumed, and where the kubelet's
whole seconds are sharpened by its own sightings). Beyond it, the upper bound is used: a
cluster time moved by it is never earlier than it was by our clock, so a timeout measured from
a container's start can be late by about a second, never early.
"""
from __future__ import annotations

import threading
from collections import deque
from datetime import timedelta
from email.utils import parsedate_to_datetime

TOLERANCE = 2.0
"""Seconds of difference taken as none (the Date header's resolution and a request's latency)."""
SAMPLES = 32


class ClockSkew:
    def __init__(self) -> None:
        self._bounds: deque[tuple[float, float]] = deque(maxlen=SAMPLES)
        self._lock = threading.Lock()

    def observe(self, sent: float, received: float, date: str | None) -> None:
        """An answer requested at `sent`, received at `received` (our Unix seconds), with the
        server's `Date` header (ignored when missing or unreadable)."""
        try:
            server = parsedate_to_datetime(date).timestamp() if date else None
        except (TypeError, ValueError):
            server = None
        if server is None:
            return
        with self._lock:
            self._bounds.append((sent - server - 1.0, received - server))

    def seconds(self) -> float:
        """Our clock minus the server's, as used: 0 while they agree within TOLERANCE."""
        with self._lock:
            if not self._bounds:
                return 0.0
            low = max(b[0] for b in self._bounds)
            high = min(b[1] for b in self._bounds)
        if -TOLERANCE <= low and high <= TOLERANCE:
            return 0.0
        return high

    def offset(self) -> timedelta:
        return timedelta(seconds=self.seconds())


SKEW = ClockSkew()
"""The process's estimate, fed by the watches (kube/watch.py)."""
