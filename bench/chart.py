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
    for p in results.get("paced", []):
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
