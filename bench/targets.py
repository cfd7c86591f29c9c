"""The targets of issue 8, judged against a run's results. Reported, never asserted: a missed
target is a finding, not a failed build."""
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


def judge(results: dict[str, Any]) -> list[Verdict]:
    out = []
    for row in results.get("throughput", []):
        b, c = row.get("baseline") or {}, row.get("cronoq") or {}
        if b.get("throughput") and c.get("throughput"):
            ratio = c["throughput"] / b["throughput"]
            out.append(Verdict(f"throughput ≥ 0.9× bare Jobs (N={row['n']})",
                               f"{ratio:.2f}× ({c['throughput']:.1f} vs {b['throughput']:.1f}/s)", ratio >= 0.9))
    burst = [row["cronoq"] for row in results.get("throughput", []) if row.get("cronoq")]
    if burst:
        c = burst[-1]
        writes = c["api"]["writes_per_task"]
        first = c["succeeded_first_attempt"] == c["n"]
        out.append(Verdict("≤ 4 operator API writes per task succeeding on its first attempt",
                           f"{writes:.2f} writes/task (N={c['n']}{'' if first else ', not all on attempt 1'})",
                           writes <= 4))
    for p in results.get("paced", []):
        p99 = p["latency"]["to_job"]["p99"]
        out.append(Verdict(f"dispatch p99 < 1s at half the max rate (N={p['n']}, {p['paced_rate']:.1f}/s)",
                           f"p99 {p99:.2f}s" if p99 is not None else "n/a", p99 is not None and p99 < 1.0))
    idle = results.get("idle")
    if idle:
        rss = idle["rss_idle"] / MIB
        out.append(Verdict("operator RSS < 150 MiB with 10,000 Tasks",
                           f"{rss:.0f} MiB with {idle['tasks_present']} finished Tasks",
                           _at_scale(rss < 150, idle["tasks_present"] >= 10_000)))
    fo = results.get("failover")
    if fo:
        if not fo.get("available"):
            out.append(Verdict("failover < 20s", f"not available: {fo.get('reason')}", None))
        else:
            worst = fo.get("max_seconds")
            out.append(Verdict("failover < 20s (SIGKILL → next Job by the new leader)",
                               f"max {worst:.1f}s over {len(fo['rounds'])} rounds" if worst is not None
                               else fo.get("error", "no Job after the kill"), worst is not None and worst < 20))
    bl = results.get("backlog")
    if bl:
        first = bl["probes"][0]
        d = first["dispatch_seconds"]
        out.append(Verdict(f"high-priority task dispatched < 2s while {bl['n']} wait",
                           f"{d:.2f}s with {first['waiting_before']} waiting (worst probe "
                           f"{bl['probe_dispatch_max']:.2f}s)" if d is not None else "never dispatched",
                           _at_scale(d is not None and d < 2.0, bl["n"] >= 5000)))
    return out


def _at_scale(ok: bool, at_scale: bool) -> bool | None:
    """Below the target's scale a pass proves nothing (not measured), but a miss is still a miss."""
    return ok if at_scale or not ok else None
