"""A pull worker's own Prometheus metrics (issue 55), in a registry of their own, served by
`serve(..., metrics_port=N)` (or CRONOQ_WORKER_METRICS_PORT): what one worker process ran and how
it fared. The operator's view of the same pool (queued depth, live workers, their room) is the
operator's own metrics; a fleet scales on the two together (docs/how-to/scaling-workers.md).

A process serving several workers (one per pool, or a test's) sums them: the gauges are read from
every live worker when scraped, and a series is labelled by the worker's namespace and pool.
"""
from __future__ import annotations

import threading
from collections import defaultdict
from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

REGISTRY = CollectorRegistry(auto_describe=True)

ATTEMPTS = Counter("cronoq_worker_attempts_total", "Attempts this worker reported, by namespace, pool and outcome "
                   "(success, retryable, permanent; an attempt aborted or whose result came after the drain's "
                   "grace is retryable).", ["namespace", "pool", "outcome"], registry=REGISTRY)
HANDLER_SECONDS = Histogram("cronoq_worker_handler_duration_seconds", "How long the handler ran, per attempt, from "
                            "its start to its return or raise (labels: namespace, pool, outcome as in "
                            "cronoq_worker_attempts_total).", ["namespace", "pool", "outcome"], registry=REGISTRY,
                            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600))
API_ERRORS = Counter("cronoq_worker_api_errors_total", "Requests of this worker the API server refused or that "
                     "failed, by code: the HTTP status (429: throttled by API Priority and Fairness) or "
                     "`network`.", ["code"], registry=REGISTRY)
LATE_RENEWALS = Counter("cronoq_worker_lease_renewals_late_total", "Lease renewals that landed with less than half "
                        "the lease's TTL left (failed or delayed ones before them), by lease: `worker` (its own) "
                        "or `attempt`.", ["lease"], registry=REGISTRY)


class Room:
    """What one worker holds now, read when scraped: attempts in flight and slots free."""

    def __init__(self, namespace: str, pool: str, in_flight: Callable[[], int], free: Callable[[], int]) -> None:
        self.namespace, self.pool, self.in_flight, self.free = namespace, pool, in_flight, free


class _Rooms(Collector):
    """`cronoq_worker_in_flight` and `cronoq_worker_free_slots`, summed over the live workers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rooms: list[Room] = []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        in_flight = GaugeMetricFamily("cronoq_worker_in_flight", "Attempts this worker's handlers run now, by "
                                      "namespace and pool.", labels=["namespace", "pool"])
        free = GaugeMetricFamily("cronoq_worker_free_slots", "Attempts this worker could take now (its concurrency "
                                 "less what runs; 0 while it drains), by namespace and pool.",
                                 labels=["namespace", "pool"])
        sums: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        with self.lock:
            rooms = list(self.rooms)
        for room in rooms:
            both = sums[(room.namespace, room.pool)]
            both[0] += room.in_flight()
            both[1] += room.free()
        for labels, (running, slots) in sorted(sums.items()):
            in_flight.add_metric(list(labels), running)
            free.add_metric(list(labels), slots)
        yield in_flight
        yield free


ROOMS = _Rooms()
REGISTRY.register(ROOMS)


def live(room: Room) -> Callable[[], None]:
    """Count `room` in the gauges until the returned function is called (the worker stopped)."""
    with ROOMS.lock:
        ROOMS.rooms.append(room)

    def gone() -> None:
        with ROOMS.lock:
            if room in ROOMS.rooms:
                ROOMS.rooms.remove(room)
    return gone


def api_error(err: BaseException) -> None:
    """Count a failed request: its HTTP status, or `network` when no answer came."""
    status = getattr(err, "status", None)
    API_ERRORS.labels(str(status) if isinstance(status, int) else "network").inc()


def late(lease: str) -> Callable[[], None]:
    """A `LeaseKeeper`'s `on_late` for a lease of this kind (`worker` or `attempt`)."""
    child = LATE_RENEWALS.labels(lease)
    return child.inc


_served: dict[tuple[str, int], object] = {}
_serving = threading.Lock()


def serve_metrics(port: int, addr: str = "0.0.0.0") -> int:
    """Serve this registry on `addr:port` (`/metrics`, any path in fact), once per address in a
    process. Port 0 picks a free port. Returns the port."""
    with _serving:
        if (addr, port) not in _served or port == 0:
            server, _thread = start_http_server(port, addr, registry=REGISTRY)
            port = server.server_port
            _served[(addr, port)] = server
        return port
