"""Bare Jobs, cronoq, Kueue and Argo Workflows side by side: the per-item figures of each run, and
issue 28's goals judged on them (reported, never asserted)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Verdict:
    target: str
    measured: str
    met: bool | None  # None: not judged (a run did not finish)

    @property
    def mark(self) -> str:
        return {True: "met", False: "**missed**", None: "not measured"}[self.met]


SYSTEMS = ("baseline", "cronoq", "kueue", "cronoq_kueue", "argo")
NAMES = {"baseline": "bare Jobs", "cronoq": "cronoq", "kueue": "Kueue", "cronoq_kueue": "cronoq through Kueue",
         "argo": "Argo Workflows"}


@dataclass(frozen=True)
class Figures:
    """One run of one system, per item."""
    system: str
    label: str  # burst | paced
    n: int
    rate: float | None  # the paced rate, None for a burst
    throughput: float | None
    running: dict[str, Any]
    succeeded: dict[str, Any]
    apiserver_ms: float | None
    etcd_ms: float | None
    writes: float | None
    requests: float | None
    controller_ms: float | None
    rss_peak: int | None
    complete: bool
    """Every item succeeded (a cronoq task on its first attempt) and nothing timed out: the run can
    be compared."""

    @property
    def name(self) -> str:
        return NAMES[self.system]


def figures(system: str, run: dict[str, Any]) -> Figures:
    n = run["n"]
    cpu = run.get("cluster_cpu_seconds") or {}
    api = run.get("api") or {}
    controller = run.get("operator") or {}
    latency = run.get("latency") or {}
    done = run.get("completed", run.get("succeeded"))
    if "succeeded_first_attempt" in run:
        done = run["succeeded_first_attempt"]  # a retried attempt costs writes and CPU of its own
    controller_cpu = controller.get("cpu_seconds")
    if controller_cpu is not None and "kueue_cpu_seconds" in run:
        controller_cpu += run["kueue_cpu_seconds"]  # cronoq through Kueue: both controllers' work

    def per_item_ms(seconds: float | None) -> float | None:
        return None if seconds is None or not n else seconds / n * 1000

    return Figures(
        system=system, label=run.get("label", "burst"), n=n, rate=run.get("paced_rate"),
        throughput=run.get("throughput"),
        running=latency.get("to_running") or {}, succeeded=latency.get("to_succeeded") or {},
        apiserver_ms=per_item_ms(cpu.get("kube-apiserver")), etcd_ms=per_item_ms(cpu.get("etcd")),
        writes=api.get("writes_per_task"), requests=api.get("requests_per_task"),
        controller_ms=per_item_ms(controller_cpu), rss_peak=controller.get("rss_peak"),
        complete=done == n and not run.get("timed_out") and not run.get("error"))


def table(results: dict[str, Any]) -> list[Figures]:
    """Every burst of every N (in system order), then every paced run."""
    out = [figures(s, row[s]) for row in results.get("throughput", []) for s in SYSTEMS if row.get(s)]
    for run in results.get("paced", []):
        out.append(figures(run.get("system", "cronoq"), run))
    return out


def goals(results: dict[str, Any]) -> list[Verdict]:
    """Issue 28's goals at each N where cronoq and at least one peer ran: cronoq ahead of Kueue and of
    Argo on API-server CPU, writes and controller CPU per item, and at least as fast end to end
    (throughput) as the faster of them. A run with failures or a timeout is not compared."""
    out = []
    for row in results.get("throughput", []):
        if not row.get("cronoq"):
            continue
        c = figures("cronoq", row["cronoq"])
        peers = [figures(s, row[s]) for s in ("kueue", "argo") if row.get(s)]
        if not peers:
            continue
        if not c.complete or not all(p.complete for p in peers):
            broken = ", ".join(f.name for f in [c, *peers] if not f.complete)
            out.append(Verdict(f"N={row['n']}: the runs compared",
                               f"{broken} did not finish every item (cronoq: on its first attempt)", None))
            continue
        for attr, what, unit in (("apiserver_ms", "API-server CPU per item", " ms"), ("writes", "writes per item", ""),
                                 ("controller_ms", "controller CPU per item", " ms")):
            mine = getattr(c, attr)
            theirs = [(p.name, getattr(p, attr)) for p in peers if getattr(p, attr) is not None]
            if mine is None or not theirs:
                continue
            measured = f"{mine:.2f}{unit} vs " + ", ".join(f"{name} {v:.2f}{unit}" for name, v in theirs)
            out.append(Verdict(f"N={row['n']}: {what} below Kueue's and Argo's", measured,
                               all(mine < v for _, v in theirs)))
        fastest = max((p for p in peers if p.throughput), key=lambda p: p.throughput or 0, default=None)
        if c.throughput and fastest:
            out.append(Verdict(f"N={row['n']}: throughput ≥ the faster peer's",
                               f"{c.throughput:.1f}/s vs {fastest.name} {fastest.throughput:.1f}/s",
                               c.throughput >= (fastest.throughput or 0)))
    return out
