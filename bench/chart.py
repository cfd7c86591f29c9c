"""The PNG beside the Markdown: throughput per N, and latency percentiles, cronoq beside bare Jobs."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

BASELINE, CRONOQ, PACED = "#7f7f7f", "#1f77b4", "#2ca02c"


def draw(results: dict[str, Any], path: Path) -> None:
    rows = [row for row in results.get("throughput", []) if row.get("baseline") or row.get("cronoq")]
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5), gridspec_kw={"width_ratios": [1, 2]})

    xs = range(len(rows))
    width = 0.38
    base = [(row.get("baseline") or {}).get("throughput") or 0 for row in rows]
    cq = [(row.get("cronoq") or {}).get("throughput") or 0 for row in rows]
    left.bar([x - width / 2 for x in xs], base, width, label="bare Jobs", color=BASELINE)
    bars = left.bar([x + width / 2 for x in xs], cq, width, label="cronoq Tasks", color=CRONOQ)
    for bar, b, c in zip(bars, base, cq):
        if b:
            left.annotate(f"{c / b:.2f}×", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                          ha="center", va="bottom", fontsize=9)
    left.set_xticks(list(xs), [f"N={row['n']}" for row in rows])
    left.set_ylabel("completed per second (apply → Succeeded)")
    left.set_title("Throughput")
    left.legend()

    series = []  # (label, summary, color)
    for row in rows:
        if row.get("baseline"):
            series.append((f"Jobs\nN={row['n']}\n→Complete", row["baseline"]["latency"]["to_succeeded"], BASELINE))
        if row.get("cronoq"):
            c = row["cronoq"]["latency"]
            series.append((f"cronoq\nN={row['n']}\n→Job", c["to_job"], CRONOQ))
            series.append((f"cronoq\nN={row['n']}\n→Succeeded", c["to_succeeded"], CRONOQ))
    for p in [p for p in results.get("paced", []) if p.get("system", "cronoq") == "cronoq"]:
        series.append((f"paced\nN={p['n']}\n→Job", p["latency"]["to_job"], PACED))
        series.append((f"paced\nN={p['n']}\n→Succeeded", p["latency"]["to_succeeded"], PACED))
    quantiles = (("p50", 1.0), ("p95", 0.65), ("p99", 0.35))
    w = 0.26
    for i, (label, summary, color) in enumerate(series):
        for j, (q, alpha) in enumerate(quantiles):
            v = summary.get(q) or 0
            right.bar(i + (j - 1) * w, v, w, color=color, alpha=alpha, label=q if i == 0 else None,
                      edgecolor="black", linewidth=0.3)
    right.set_xticks(range(len(series)), [s[0] for s in series], fontsize=7)
    right.set_yscale("log")
    right.set_ylabel("seconds from the create request (log scale)")
    right.set_title("Latency p50 / p95 / p99 (grey: bare Jobs, blue: cronoq burst, green: paced at half max)")
    right.title.set_fontsize(9)
    if series:
        right.legend(title="shade", fontsize=8)
    fig.suptitle(f"cronoq vs bare Jobs — {results['machine']['nproc']} CPUs, shared; {results['started']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_soak(results: dict[str, Any], path: Path) -> None:
    """The soak over time: operator RSS (with the slope line over the last two thirds of the
    stream), and the live Tasks, Jobs, pods and Leases against rate × retention."""
    s = results["soak"]
    samples = s["samples"]
    t = [x["t"] for x in samples]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 8), sharex=True)
    top.plot(t, [x["rss"] / 2**20 for x in samples], color=CRONOQ, marker=".", label="operator RSS")
    lo, hi = s["slope_window"]
    stream = [x for x in samples if lo <= x["t"] <= hi]
    if len(stream) >= 3 and s.get("rss_slope_mib_per_hour") is not None:
        per_s = s["rss_slope_mib_per_hour"] / 3600
        mx = sum(x["t"] for x in stream) / len(stream)
        my = sum(x["rss"] / 2**20 for x in stream) / len(stream)
        top.plot([lo, hi], [my + per_s * (lo - mx), my + per_s * (hi - mx)], color="black", linestyle="--",
                 label=f"slope {s['rss_slope_mib_per_1000_tasks']:.2f} MiB / 1000 tasks")
    top.axvspan(0, s["submit_seconds"], color="#dddddd", alpha=0.5, label="tasks being submitted")
    top.set_ylabel("MiB")
    top.set_ylim(bottom=0)
    top.set_title(f"Operator RSS — {s['n']} tasks at {s['rate']:.2f}/s, ttlAfterFinished {s['ttl_after_finished']:g}s, "
                  f"jobRetention {s['job_retention']:g}s", fontsize=10)
    top.legend(fontsize=8, loc="lower right")
    colors = {"tasks": CRONOQ, "leases": "#9467bd", "jobs": "#ff7f0e", "pods": PACED}
    for kind, color in colors.items():
        bottom.plot(t, [x.get(kind) for x in samples], color=color, marker=".", label=f"live {kind}")
    for kind, style in (("tasks", ":"), ("jobs", "--")):
        bottom.axhline(s["expected_objects"][kind], color=colors[kind], linestyle=style, linewidth=1,
                       label=f"rate × retention ({'ttlAfterFinished' if kind == 'tasks' else 'jobRetention'}) "
                             f"{s['expected_objects'][kind]:.0f}")
    bottom.axvspan(0, s["submit_seconds"], color="#dddddd", alpha=0.5)
    bottom.set_xlabel("seconds since the operator started")
    bottom.set_ylabel("objects in the namespace")
    bottom.legend(fontsize=8, loc="upper right")
    fig.suptitle(f"cronoq soak — {results['operator_source'][:60]}; {results['started']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


PEER_COLORS = {"baseline": BASELINE, "cronoq": CRONOQ, "kueue": "#ff7f0e", "cronoq_kueue": "#9467bd",
               "argo": "#d62728"}


def draw_peers(results: dict[str, Any], path: Path) -> None:
    """The four systems side by side, one group of bars per run (burst N, paced): throughput, latency
    to succeeded, API-server and controller CPU per item, writes per item."""
    from bench.fourway import NAMES, SYSTEMS, table

    figs = table(results)
    runs = list(dict.fromkeys((f.label, f.n) for f in figs))
    panels = (("items / s", lambda f: f.throughput), ("create → succeeded p50 (s)", lambda f: f.succeeded.get("p50")),
              ("create → succeeded p99 (s)", lambda f: f.succeeded.get("p99")),
              ("API-server CPU ms / item", lambda f: f.apiserver_ms), ("controller CPU ms / item", lambda f: f.controller_ms),
              ("controller writes / item", lambda f: f.writes))
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    width = 0.8 / len(SYSTEMS)
    for ax, (title, value) in zip(axes.flat, panels):
        for i, system in enumerate(SYSTEMS):
            xs, ys = [], []
            for x, run in enumerate(runs):
                f = next((f for f in figs if f.system == system and (f.label, f.n) == run), None)
                if f is not None and value(f) is not None:
                    xs.append(x + (i - (len(SYSTEMS) - 1) / 2) * width)
                    ys.append(value(f))
            if xs:
                ax.bar(xs, ys, width, color=PEER_COLORS[system], label=NAMES[system],
                       hatch="" if all(f.complete for f in figs if f.system == system) else "//")
        ax.set_xticks(range(len(runs)), [f"{label} N={n}" for label, n in runs], fontsize=8)
        ax.set_title(title, fontsize=10)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"bare Jobs, cronoq, Kueue, Argo Workflows — {results['machine']['nproc']} CPUs, shared "
                 f"(indicative); {results['started']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
