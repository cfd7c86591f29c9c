"""Soak: a steady stream of tasks with short retention, to see whether the operator's memory and
the namespace's objects stay flat while history is made and cleaned up.

N Tasks are submitted at a steady rate (about a third of the maximum cronoq reached in this
run's burst, else `--soak-max-rate / 3`) into a pool with `ttlAfterFinished: 60s` and
`jobRetention: 30s`. Every 10 s the bench samples the operator's RSS and CPU, the live count of
Tasks, Jobs, pods and Leases in the namespace, and the operator's counters (tasks finished,
tasks deleted by expiry). After the last submission it keeps sampling until every Task is gone
(or retention + 2 minutes), so the drain shows too.

Reported: the RSS slope over the last two thirds of the stream, per 1,000 tasks submitted (a
least-squares line through the samples; goal < 2 MiB per 1,000 tasks, i.e. flat), and each
kind's peak count against what retention implies at that rate (rate × ttlAfterFinished for
Tasks, rate × jobRetention for Jobs and pods, plus the few seconds a task runs; no Leases: the
operator leaves them to the attempt's SDK, which the bench's kwok pods lack).
"""
from __future__ import annotations

import threading
import time
from typing import Any

from bench import workload
from bench.cluster import log
from bench.kubeapi import jobs_path, leases_path, pods_path, pools_path, tasks_path
from bench.load import submit
from bench.procstat import PeakRss, load_average
from bench.throughput import POOL, Context

TTL_AFTER_FINISHED = 60.0
JOB_RETENTION = 30.0
SAMPLE_EVERY = 10.0
DEFAULT_MAX_RATE = 9.0
"""tasks/s: the burst rate measured on this machine (README), used when this run has no burst."""
KINDS = ("tasks", "jobs", "pods", "leases")


def paths(namespace: str) -> dict[str, str]:
    return {"tasks": tasks_path(namespace), "jobs": jobs_path(namespace), "pods": pods_path(namespace),
            "leases": leases_path(namespace)}


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over x."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else None


def soak(ctx: Context, n: int, rate: float, *, ttl: float = TTL_AFTER_FINISHED, job_retention: float = JOB_RETENTION,
         every: float = SAMPLE_EVERY) -> dict[str, Any]:
    api = ctx.cluster.api
    ns = ctx.cluster.namespace(f"bench-soak-{n}")
    api.create(pools_path(ns), workload.pool(POOL, 10_000, ttlAfterFinished=f"{ttl:g}s",
                                             jobRetention=f"{job_retention:g}s"))
    tasks = [workload.task(name, POOL) for name in workload.names("s", n)]
    operator = ctx.replica(ns).start()
    kinds = paths(ns)
    samples: list[dict[str, Any]] = []
    stop = threading.Event()
    t0 = time.monotonic()
    cpu0 = operator.cpu()

    def sample() -> None:
        row: dict[str, Any] = {"t": round(time.monotonic() - t0, 1), "rss": operator.rss(),
                               "cpu": round(operator.cpu() - cpu0, 2)}
        for kind, path in kinds.items():
            try:
                row[kind] = api.count(path)
            except Exception:  # noqa: BLE001 - a missed sample, not a failed run
                row[kind] = None
        row["finished"] = operator.metric("cronoq_tasks_total")
        row["deleted"] = operator.metric("cronoq_tasks_deleted_total")
        samples.append(row)

    def sampler() -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                sample()
            except OSError:
                return
            stop.wait(max(0.0, every - (time.monotonic() - started)))

    thread = threading.Thread(target=sampler, daemon=True)
    load_before = load_average()
    peak = PeakRss(operator.pid, interval=1.0).start()
    thread.start()
    log(f"soak: {n} tasks at {rate:.2f}/s (ttlAfterFinished {ttl:g}s, jobRetention {job_retention:g}s), "
        f"about {n / rate / 60:.1f} min")
    sub = submit(api, tasks_path(ns), tasks, creators=ctx.creators, rate=rate)
    submitted_at = time.monotonic() - t0
    # The drain: every Task deleted (its Lease, Job and pod go with it), or give up.
    deadline = time.monotonic() + ttl + job_retention + 120
    while time.monotonic() < deadline:
        if samples and samples[-1]["t"] > submitted_at and samples[-1].get("tasks") == 0 \
                and samples[-1].get("jobs") == 0:
            break
        time.sleep(2)
    stop.set()
    thread.join()
    sample()
    rss_peak = peak.stop()
    operator.stop()

    actual_rate = len(sub.sent) / (sub.finished - sub.started) if sub.finished > sub.started else rate
    stream = [s for s in samples if submitted_at / 3 <= s["t"] <= submitted_at]
    per_second = slope([(s["t"], s["rss"] / 2**20) for s in stream])
    per_1000 = per_second / actual_rate * 1000 if per_second is not None and actual_rate else None
    running = 5.0  # seconds a task spends between submission and finishing, roughly (dispatch + pod)
    expected = {"tasks": actual_rate * (ttl + running), "leases": 0.0,
                "jobs": actual_rate * (job_retention + running), "pods": actual_rate * (job_retention + running)}
    peaks = {k: max((s[k] for s in samples if s.get(k) is not None), default=None) for k in KINDS}
    last = samples[-1]
    result = {
        "n": n, "namespace": ns, "target_rate": rate, "rate": actual_rate, "submitted": len(sub.sent),
        "submit_errors": len(sub.errors), "submit_seconds": sub.finished - sub.started,
        "ttl_after_finished": ttl, "job_retention": job_retention, "sample_every": every,
        "samples": samples, "slope_window": [round(submitted_at / 3, 1), round(submitted_at, 1)],
        "rss_slope_mib_per_1000_tasks": per_1000, "rss_slope_mib_per_hour": per_second * 3600 if per_second else None,
        "rss_first": samples[0]["rss"], "rss_end_of_stream": stream[-1]["rss"] if stream else None,
        "rss_peak": rss_peak, "peak_objects": peaks, "expected_objects": expected,
        "finished": last.get("finished"), "deleted": last.get("deleted"), "left": {k: last.get(k) for k in KINDS},
        "operator_cpu_seconds": last["cpu"],
        "load_average": {"before": load_before, "after": load_average()},
    }
    log(f"soak n={n}: RSS slope {_f(per_1000)} MiB/1000 tasks, peak {peaks} vs expected "
        f"{ {k: round(v) for k, v in expected.items()} }, deleted {result['deleted']}, left {result['left']}")
    ctx.cluster.delete_namespace(ns)
    return result


def _f(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"
