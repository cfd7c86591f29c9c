"""The targets of issue 8, and issue 31's for pull workers, judged against a run's results.
Reported, never asserted: a missed target is a finding, not a failed build.

Issue 8's ratios to bare Jobs (throughput ≥ 0.9×, API-server CPU ≤ 1.3×) were replaced by issue
28's goals against the peers (`bench/fourway.py`); bare Jobs stay in every table as the floor."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MIB = 2**20


@dataclass(frozen=True)
class Verdict:
    target: str
    measured: str
    met: bool | None  # None: not measured in this run

    @property
    def mark(self) -> str:
        return {True: "met", False: "**missed**", None: "not measured"}[self.met]


def clean(run: dict[str, Any]) -> bool:
    """Whether a cronoq burst ended with every task succeeding on its first attempt: only such a
    run is a measurement (retries, aborts and dead letters cost writes and CPU of their own)."""
    return run.get("succeeded_first_attempt") == run.get("n")


def _if_clean(met: bool, *runs: dict[str, Any]) -> bool | None:
    return met if all(clean(r) for r in runs) else None


INVALID = " — **invalid: not every task succeeded on its first attempt**"


def judge(results: dict[str, Any]) -> list[Verdict]:
    out = []
    for row in results.get("throughput", []):
        c = row.get("cronoq") or {}
        note = "" if not c or clean(c) else INVALID
        if c.get("operator", {}).get("cpu_seconds_per_task") is not None:
            ms = c["operator"]["cpu_seconds_per_task"] * 1000
            out.append(Verdict(f"operator CPU ≤ 10 ms per task (N={row['n']})", f"{ms:.1f} ms{note}",
                               _if_clean(ms <= 10, c)))
    for row in results.get("throughput", []):
        base = (row.get("baseline") or {}).get("throughput")
        for key, mode in (("pull", "pull workers"), ("pull_lean", "pull workers, `--events=warnings`")):
            run = row.get(key) or {}
            if base and run.get("throughput"):
                ratio = run["throughput"] / base
                out.append(Verdict(f"{mode} ≥ 2× bare Jobs' throughput (N={row['n']})",
                                   f"{ratio:.2f}× ({run['throughput']:.1f} vs {base:.1f}/s)"
                                   f"{'' if clean(run) else INVALID}", _if_clean(ratio >= 2, run)))
    burst = [row["cronoq"] for row in results.get("throughput", []) if row.get("cronoq")]
    if burst:
        c = burst[-1]
        writes, pools = per_task_writes(c)
        out.append(Verdict("≤ 4 operator API writes per task succeeding on its first attempt",
                           f"{writes:.2f} writes/task (N={c['n']}{'' if clean(c) else INVALID}) "
                           f"+ {pools:.3f} pool status updates (per pool, every ≤ 5 s)", _if_clean(writes <= 4, c)))
    lean = results.get("lean")
    if lean:
        writes, pools = per_task_writes(lean)
        out.append(Verdict("≤ 3 writes per task with leaseTTL 0s",
                           f"{writes:.2f} writes/task with `--events=warnings` (N={lean['n']}"
                           f"{'' if clean(lean) else INVALID}) + {pools:.3f} pool status updates; "
                           "default `--events=all`: one Event more", _if_clean(writes <= 3, lean)))
    paced = results.get("paced", [])
    # With peers in the run every system is paced at half the slowest one's burst rate (issue 28),
    # not at half cronoq's own.
    basis = "half the slowest system's max rate" if any(p.get("system", "cronoq") != "cronoq" for p in paced) \
        else "half the max rate"
    for p in [p for p in paced if p.get("system", "cronoq") == "cronoq"]:  # the peers': fourway
        p99 = p["latency"]["to_job"]["p99"]
        out.append(Verdict(f"dispatch p99 < 250 ms at {basis} (N={p['n']}, {p['paced_rate']:.1f}/s)",
                           f"p99 {p99:.2f}s" if p99 is not None else "n/a", p99 is not None and p99 < 0.25))
    for idle in idle_runs(results):
        rss, n = idle["rss_idle"] / MIB, idle["tasks_present"]
        scale, limit = (50_000, 300) if n >= 50_000 else (10_000, 150)
        out.append(Verdict(f"operator RSS idle < {limit} MiB over {scale:,} finished Tasks",
                           f"{rss:.0f} MiB with {n:,} finished Tasks{_with_jobs(idle)}", _at_scale(rss < limit, n >= scale)))
        peak = idle.get("rss_peak_startup")
        if peak and idle["rss_idle"]:
            ratio = peak / idle["rss_idle"]
            out.append(Verdict(f"peak RSS while starting < 1.5× idle ({n:,} Tasks)",
                               f"{peak / MIB:.0f} MiB peak = {ratio:.2f}× idle", _at_scale(ratio < 1.5, n >= 10_000)))
        lead = idle.get("listed_seconds")
        if n >= 50_000:  # the target is stated at 10,000; larger sizes are reported in their table
            continue
        out.append(Verdict(f"start → leading < 15s over 10,000 finished Tasks ({n:,} present)",
                           f"{lead:.1f}s" if lead is not None else "never leading",
                           _at_scale(lead is not None and lead < 15, n >= 10_000)))
    soak = results.get("soak")
    if soak:
        s = soak.get("rss_slope_mib_per_1000_tasks")
        peaks, expected = soak.get("peak_objects") or {}, soak.get("expected_objects") or {}
        out.append(Verdict(f"soak: RSS slope < 2 MiB per 1,000 tasks ({soak['n']:,} tasks at {soak['rate']:.1f}/s)",
                           (f"{s:.2f} MiB/1000 tasks" if s is not None else "n/a") +
                           f"; peak Tasks {peaks.get('tasks')} vs rate × retention {expected.get('tasks', 0):.0f}, "
                           f"Jobs {peaks.get('jobs')} vs {expected.get('jobs', 0):.0f}",
                           _at_scale(s is not None and s < 2, soak["n"] >= 5000)))
    fo = results.get("failover")
    if fo:
        worst = fo.get("max_seconds")
        out.append(Verdict("failover < 20s (SIGKILL → next Job by the new leader)",
                           f"max {worst:.1f}s over {len(fo.get('rounds', []))} rounds" if worst is not None
                           else fo.get("error", "no Job after the kill"), worst is not None and worst < 20))
        term = fo.get("sigterm_max_seconds")
        if term is not None:
            out.append(Verdict("failover < 3s (SIGTERM, a rolling upgrade → next Job by the new leader)",
                               f"max {term:.2f}s", term < 3))
    bl = results.get("backlog")
    if bl:
        first = bl["probes"][0]
        d = first["dispatch_seconds"]
        out.append(Verdict(f"high-priority task dispatched < 2s while {bl['n']} wait",
                           f"{d:.2f}s with {first['waiting_before']} waiting (worst probe "
                           f"{bl['probe_dispatch_max']:.2f}s)" if d is not None else "never dispatched",
                           _at_scale(d is not None and d < 2.0, bl["n"] >= 5000)))
    return out


def per_task_writes(run: dict[str, Any]) -> tuple[float, float]:
    """(writes per task, pool status updates per task): a pool's status is written every ≤ 5 s
    while its counts change, per pool and not per task, so it is reported apart."""
    table = [t for t in run["api"]["table"] if t["write"]]
    pools = sum(t["per_task"] for t in table if t["resource"] == "taskpools/status")
    return sum(t["per_task"] for t in table) - pools, pools


def _with_jobs(idle: dict[str, Any]) -> str:
    jobs = idle.get("jobs_present")
    return "" if jobs is None or jobs >= idle["tasks_present"] else f" ({jobs:,} with their Jobs and pods)"


def idle_runs(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The idle measurements, one per size (older results hold a single one)."""
    idle = results.get("idle")
    return [] if not idle else [idle] if isinstance(idle, dict) else list(idle)


def _at_scale(ok: bool, at_scale: bool) -> bool | None:
    """Below the target's scale a pass proves nothing (not measured), but a miss is still a miss."""
    return ok if at_scale or not ok else None
