"""A run's headline figures checked against bench/ranges.yaml: a table of pass/fail, and a failure
when any figure is outside its range. A figure the run did not measure is reported "not run"; one
of a run smaller than its range's `min_n`, "below N=…" and not judged."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import yaml

RANGES = Path(__file__).with_name("ranges.yaml")
MIB = 2**20
INVALID = "not every task succeeded on its first attempt"


@dataclass(frozen=True)
class Range:
    low: float
    high: float
    min_n: int = 0  # figures of smaller runs are reported, not judged


@dataclass(frozen=True)
class Check:
    figure: str
    where: str  # which run of the results: "N=1000", "10,000 Tasks", ""
    value: float | None  # None: the run was invalid (note says why)
    range: Range
    judged: bool = True
    note: str = ""

    @property
    def ok(self) -> bool:
        """Not a failure: within the range, or not judged at this scale."""
        return not self.judged or (self.value is not None and self.range.low <= self.value <= self.range.high)


DEEP_SHAPE = "deep tasks"
"""Where a burst of the deep scenario's Tasks is shown: its cost is not the small Tasks' the ranges cite."""

def load(path: Path = RANGES) -> dict[str, Range]:
    return {name: Range(float(b["low"]), float(b["high"]), int(b.get("min_n", 0)))
            for name, b in yaml.safe_load(path.read_text()).items()}


def clean(run: dict[str, Any]) -> bool:
    """Whether a burst ended with every task succeeding on its first attempt: only such a run is a
    measurement (retries, aborts and dead letters cost writes and CPU of their own)."""
    return run.get("succeeded_first_attempt") == run.get("n")


def per_task_writes(run: dict[str, Any]) -> float:
    """Writes per task but the pools' status updates (per pool every ≤ 5 s, not per task)."""
    table = [t for t in run["api"]["table"] if t["write"]]
    return sum(t["per_task"] for t in table if t["resource"] != "taskpools/status")


def figures(r: dict[str, Any]) -> Iterator[tuple[str, str, float | None]]:
    """(figure, where, value) for every headline figure the results hold; None for an invalid run.
    `where` starts with "N=<n>" for the figures a range's `min_n` applies to."""
    def of(run: dict[str, Any], value: Any) -> float | None:
        return float(value()) if clean(run) else None

    rows = r.get("throughput", [])
    # The burst's cost ranges cite bursts of small Tasks; a burst of the deep scenario's ~2.9 KiB
    # Tasks (--task-shape deep) is shown beside them, not judged by them.
    shaped = f", {DEEP_SHAPE}" if (r.get("options") or {}).get("task_shape") == "deep" else ""
    for row in rows:
        where, base, c = f"N={row['n']}", (row.get("baseline") or {}).get("throughput"), row.get("cronoq")
        if c:
            if base:
                yield "burst.throughput_vs_bare_jobs", where + shaped, of(c, lambda: c["throughput"] / base)
            yield "burst.operator_cpu_ms_per_task", where + shaped, of(
                c, lambda: c["operator"]["cpu_seconds_per_task"] * 1000)
            yield "burst.apiserver_ms_per_task", where + shaped, of(
                c, lambda: c["cluster_cpu_seconds"]["kube-apiserver"] / c["n"] * 1000)
            yield "burst.writes_per_task", where, of(c, lambda: per_task_writes(c))
        p = row.get("pull")
        if p:
            if base:
                yield "pull.throughput_vs_bare_jobs", where, of(p, lambda: p["throughput"] / base)
            yield "pull.writes_per_task", where, of(p, lambda: per_task_writes(p))
        for feature in ("keys", "tracing"):  # bench/onoff.py: the same burst with the feature off, then on
            ab = row.get(feature)
            if ab:
                off, on = ab["off"], ab["on"]
                valid = clean(off) and clean(on)
                yield f"{feature}.throughput_vs_off", where, on["throughput"] / off["throughput"] if valid else None
                yield f"{feature}.operator_cpu_vs_off", where, (on["operator"]["cpu_seconds"] /
                                                               off["operator"]["cpu_seconds"]) if valid else None
                yield f"{feature}.writes_per_task", where, of(on, lambda: per_task_writes(on))
    largest = [row["cronoq"] for row in rows if row.get("cronoq")][-1:]
    for c in largest:
        yield "burst.dispatch_p99_s", f"N={c['n']}", of(c, lambda: c["latency"]["to_job"]["p99"])
    if r.get("lean"):
        lean = r["lean"]
        yield "lean.writes_per_task", f"N={lean['n']}", of(lean, lambda: per_task_writes(lean))
    for p in r.get("paced", []):
        if p.get("system", "cronoq") == "cronoq" and p["latency"]["to_job"]["p99"] is not None:
            where = f"N={p['n']} at {p['paced_rate']:.1f}/s"
            yield "paced.dispatch_p50_s", where, p["latency"]["to_job"]["p50"]
            yield "paced.dispatch_p99_s", where, p["latency"]["to_job"]["p99"]
    if r.get("backlog"):
        b = r["backlog"]
        yield "backlog.urgent_dispatch_s", f"{b['probes'][0]['waiting_before']} waiting", \
            b["probes"][0]["dispatch_seconds"]
    shares = (r.get("gaming") or {}).get("shares")
    if shares:
        yield "gaming.gamer_share", f"{shares['a_tasks']} gaming tasks", shares["gamer_share"]
    idle = r.get("idle") or []
    for i in [idle] if isinstance(idle, dict) else idle:
        n = i["tasks_present"]
        for size, tag in ((10_000, "10k"), (50_000, "50k")):
            if size <= n < size * 5:  # judged at its scale: fewer tasks prove nothing
                yield f"idle.rss_mib_{tag}", f"{n:,} Tasks", i["rss_idle"] / MIB
                if tag == "10k":
                    yield "idle.leading_s_10k", f"{n:,} Tasks", i.get("listed_seconds")
    if r.get("deep") and "leader_kib_per_queued_task" in r["deep"]:
        yield "deep.rss_kib_per_queued_task", f"N={r['deep']['n']:,}", r["deep"]["leader_kib_per_queued_task"]
    if r.get("soak"):
        yield "soak.rss_slope_mib_per_1000_tasks", f"N={r['soak']['n']}", r["soak"].get("rss_slope_mib_per_1000_tasks")
    if r.get("failover"):
        fo = r["failover"]
        yield "failover.sigkill_max_s", f"{len(fo.get('rounds', []))} rounds", fo.get("max_seconds")
        if "sigterm_max_seconds" in fo:
            yield "failover.sigterm_max_s", f"{len(fo.get('rounds', []))} rounds", fo["sigterm_max_seconds"]


def check(results: dict[str, Any], ranges: dict[str, Range] | None = None) -> list[Check]:
    """Every figure of the results against its range; a figure with no range is an error of the
    bench itself (add its range, with the runs behind it)."""
    ranges = load() if ranges is None else ranges
    out = []
    for name, where, value in figures(results):
        if name not in ranges:
            raise KeyError(f"bench/ranges.yaml has no range for {name}")
        bound = ranges[name]
        n = int(where.split()[0].rstrip(",").removeprefix("N=").replace(",", "")) if where.startswith("N=") else None
        judged = (n is None or n >= bound.min_n) and not where.endswith(DEEP_SHAPE)
        out.append(Check(name, where, value, bound, judged, INVALID if value is None else ""))
    return out


def table(checks: list[Check], ranges: dict[str, Range] | None = None) -> list[str]:
    """Markdown: one line per check, then the ranges this run did not measure."""
    ranges = load() if ranges is None else ranges
    out = ["| figure | run | measured | range | |", "|---|---|---|---|---|"]
    for c in checks:
        measured = c.note if c.value is None else f"{c.value:.3g}"
        why = f"{DEEP_SHAPE}: not judged" if c.where.endswith(DEEP_SHAPE) else f"below N={c.range.min_n:,}: not judged"
        mark = why if not c.judged else "pass" if c.ok else "**FAIL**"
        out.append(f"| {c.figure} | {c.where} | {measured} | {c.range.low:g} – {c.range.high:g} | {mark} |")
    seen = {c.figure for c in checks}
    out += [f"| {name} | | | {r.low:g} – {r.high:g} | not run |" for name, r in ranges.items() if name not in seen]
    return out
