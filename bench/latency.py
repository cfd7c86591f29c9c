"""Latency and throughput figures from send times and first-seen milestones."""
from __future__ import annotations

import math
from typing import Iterable


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of sorted-or-not values; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(values: Iterable[float]) -> dict[str, float | int | None]:
    """p50, p95, p99, max and mean in seconds, and how many values."""
    vals = [v for v in values if v is not None]
    return {"n": len(vals), "p50": percentile(vals, 50), "p95": percentile(vals, 95), "p99": percentile(vals, 99),
            "max": max(vals) if vals else None, "mean": sum(vals) / len(vals) if vals else None}


def between(start: dict[str, float], end: dict[str, float | None]) -> list[float]:
    """end[name] - start[name] for every name seen at both ends."""
    return [end[n] - t for n, t in start.items() if end.get(n) is not None]
