"""A long-running pull worker: it serves a pool with `delivery: Workers`, running the attempts the
operator hands it, with no Job and no pod per attempt.

    import cronoq.worker

    def send(ctx: cronoq.worker.Context):
        mail(ctx.payload["to"])                        # (ctx.id, ctx.attempt) fences side effects
        return "sent"

    cronoq.worker.serve("mail", send, concurrency=8)

The operator decides and fences, the worker only runs and reports:
- it announces itself with a Lease of its own (labelled with the pool, annotated with its room),
  renewed every TTL/3; while it lapses the operator hands it nothing, and the attempts it was
  running end as LeaseExpired and are retried. A worker that cannot renew it for a whole TTL
  (cut off from the API server) stops every handler and exits (code 3), as a pod's SDK fences;
- throttled (429 from API Priority and Fairness, 5xx), every request it makes (its announcement
  too) backs off with jitter and comes back no sooner than the server's Retry-After
  (worker/backoff.py), but what must land before a lease lapses (a renewal, a report) waits only
  as long as that lease can afford; and its own Lease goes first: while its renewal is being
  refused, the worker's other requests (its attempts' renewals, its reports, its watch) hold
  back, for they share its flow at the API server and are worth nothing once the worker is
  presumed dead;
- it watches its pool's Running Tasks and starts an attempt when the status names it as the
  attempt's worker (the status is written before: attempt numbers never repeat);
- it heartbeats each attempt on the attempt's Lease (created at TTL/3, renewed every TTL/3) and
  reports the outcome on that Lease as an annotation (one write for a short attempt), which the
  operator validates (attempt, lease id, worker) and records; the worker never writes a Task;
- when the status says the attempt ended (timeout, cancellation, a lost lease) or the task goes,
  the handler is aborted: a coroutine handler is cancelled; a synchronous one sees `ctx.aborted`
  turn true and `ctx.heartbeat()` return False (a thread cannot be stopped from outside), and
  what it returns later is reported and ignored by the operator as stale.
SIGTERM (or SIGINT) drains: the worker tells the operator it has no room (capacity 0 on its
Lease), runs what was handed over meanwhile and lets running handlers finish, for at most `grace`
seconds. All that time it goes on renewing its own Lease and the attempts' Leases, so the operator
never presumes it dead: a result that comes within grace is reported and is the attempt's outcome.
When grace passes, the attempts still running are aborted and reported retryable ("aborted: the
worker stopped"); a handler's later return is dropped. Once the operator has recorded the reports
(or a few seconds passed), the worker deletes its Lease and returns. Losing its own Lease while
draining still fences (exit 3).

Given a metrics port (`metrics_port`, or CRONOQ_WORKER_METRICS_PORT), the worker serves its own
Prometheus metrics there (worker/metrics.py): attempts by outcome, handler durations, attempts in
flight and slots free, API errors and late lease renewals; a fleet scales on them with the pool's
queued depth (docs/how-to/scaling-workers.md).

By concern (issue 52), an attempt goes down these modules once, from the watch to its report:
`watch.py` (the Tasks handed to this worker, parsed once into `pod_protocol.handover.HandOver`s) →
`lifecycle.py` (hands them on while the worker lives: start, drain, stop) → `attempts.py` (starts,
runs, aborts and reports the attempt; its Lease by `lease.py`) → `runner.outcome` (what the handler
did, as a report: the one mapping the Job-mode runner uses too). Every part reads time through one
`clock.Clock`.
"""
from __future__ import annotations

import os
import signal
from typing import Mapping

from cronoq.worker.attempts import Handler
from cronoq.worker.discovery import worker_name, worker_namespace
from cronoq.worker.lifecycle import Worker
from cronoq.worker.metrics import serve_metrics

__all__ = ["Handler", "Worker", "serve", "worker_name"]


def serve(pool: str, handler: Handler | Mapping[str, Handler], *, concurrency: int | None = None,
          namespace: str | None = None, name: str | None = None, ttl: float = 15.0, grace: float = 30.0,
          kubeconfig: str | None = None, metrics_port: int | None = None, metrics_addr: str = "0.0.0.0") -> int:
    """Serve `pool` until SIGTERM/SIGINT (returns 0 once drained) or until this worker's Lease
    is lost (every handler aborted, returns 3). `handler` is one function for every task, or a
    mapping from the task's `cronoq.io/handler` label to functions. `concurrency` (default
    CRONOQ_WORKER_CONCURRENCY, else 4) is how many attempts it runs at once. `ttl` is the worker Lease's
    (seconds); `namespace` defaults to the pod's (or the kubeconfig's, else `default`).
    `metrics_port` (default CRONOQ_WORKER_METRICS_PORT, else none) serves the worker's Prometheus
    metrics on `metrics_addr:metrics_port/metrics` (worker/metrics.py, docs/reference/metrics.md)."""
    port = metrics_port if metrics_port is not None else _number(METRICS_PORT_ENV, os.environ.get(METRICS_PORT_ENV),
                                                                   None, 1, 65535)
    if port is not None:
        serve_metrics(port, metrics_addr)  # before the worker is let in: its refusals count too
    if concurrency is None:
        concurrency = _number(CONCURRENCY_ENV, os.environ.get(CONCURRENCY_ENV), 4, 1, 10_000) or 4
    worker = Worker(pool, handler, concurrency=concurrency, namespace=namespace or worker_namespace(kubeconfig),
                    name=name or worker_name(pool), ttl=ttl, grace=grace,
                    kubeconfig=kubeconfig or os.environ.get("KUBECONFIG") or None)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: worker.drain())
    return worker.run()



CONCURRENCY_ENV = "CRONOQ_WORKER_CONCURRENCY"
"""The default of `concurrency`: the chart's worker Deployment (workers.fleet.concurrency) sets it."""
METRICS_PORT_ENV = "CRONOQ_WORKER_METRICS_PORT"
"""The default of `metrics_port` (empty: none): the chart's worker Deployment sets it."""


def _number(name: str, text: str | None, default: int | None, low: int, high: int) -> int | None:
    """An integer setting from the environment, `default` when unset or empty."""
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise ValueError(f"{name} must be a number from {low} to {high}, not {text!r}")
    return value
