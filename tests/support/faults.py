"""What every fault scenario asserts over all its tasks (issue 14's promise): none lost, attempt
numbers never reused, one Job per recorded attempt, and, seen by the test's own pod watch, never
two attempts of one task running at once.

The checks also record what they counted, per test, in FIGURES; `make faults` prints them as a
table (tests/integration/faults/conftest.py)."""
from __future__ import annotations

import os
from collections import defaultdict

from tests.support.podwatch import PodWatch
from tests.support.tasks import Cronoq
from tests.support.waiting import Timeout, wait_until

FIGURES: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
"""test id → tasks, attempts, lost, reused, extra_jobs, overlaps, stale (late reports, Events)."""


def _current() -> dict[str, int]:
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
    return FIGURES[test.split("::", 1)[-1]]


def assert_nothing_lost(cq: Cronoq, names: list[str], timeout: float = 180, jobs: bool = True) -> dict[str, dict]:
    """Every task Succeeded, its attempts numbered 1..attempt, one Job per recorded attempt (none
    with `jobs=False`: a Workers pool's). Returns each task's final status."""
    figures, statuses, problems = _current(), {}, []
    for name in names:
        figures["tasks"] += 1
        try:
            status = statuses[name] = cq.wait_phase(name, "Succeeded", timeout=timeout)
        except Timeout as err:
            figures["lost"] += 1
            problems.append(f"{name}: {err}")
            continue
        numbers = [a["number"] for a in status["attempts"]]
        figures["attempts"] += len(numbers)
        if numbers != list(range(1, status["attempt"] + 1)):
            figures["reused"] += 1
            problems.append(f"{name}: attempt numbers {numbers}")
        made = {j.metadata.name for j in cq.jobs(name)}
        if made != ({f"{name}-a{n}" for n in numbers} if jobs else set()):
            figures["extra_jobs"] += 1
            problems.append(f"{name}: Jobs {sorted(made)} for attempts {numbers}")
        figures["stale"] += cq.reasons(name).count("StaleCompletion")
    assert not problems, problems
    return statuses


def assert_one_at_a_time(pods: PodWatch, names: list[str]) -> None:
    """No attempt's container was seen running before the previous attempt's had ended."""
    figures, problems = _current(), []
    for name in names:
        runs = sorted((int(job.rsplit("-a", 1)[1]), times) for job, times in list(pods.pods.items())
                      if job.rsplit("-a", 1)[0] == name and times.running is not None)
        for (n, earlier), (m, later) in zip(runs, runs[1:]):
            if earlier.ended is None or earlier.ended > later.running:
                figures["overlaps"] += 1
                problems.append((name, n, earlier, m, later))
    figures["watched"] += 1
    assert not problems, problems


def running_burst(cq: Cronoq, count: int = 10) -> list[str]:
    """`count` tasks of 3 s in a pool of concurrency 4, returned once at least 3 attempts run: the
    moment a fault scenario strikes."""
    cq.pool(concurrency=4, leaseTTL="0s")
    names = [f"r{i}" for i in range(count)]
    for name in names:
        cq.task(name, delay="3s", message="ok")
    wait_until(lambda: sum(cq.status(n).get("phase") == "Running" for n in names) >= 3, timeout=60,
               what="attempts running")
    return names
