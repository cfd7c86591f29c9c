"""What every fault scenario asserts over all its tasks (issue 14's promise): none lost, attempt
numbers never reused, one Job per recorded attempt, and, seen by the test's own pod watch, never
two attempts of one task running at once."""
from __future__ import annotations

from tests.support.podwatch import PodWatch
from tests.support.tasks import Cronoq


def assert_nothing_lost(cq: Cronoq, names: list[str], timeout: float = 180) -> dict[str, dict]:
    """Every task Succeeded, its attempts numbered 1..attempt, one Job per recorded attempt.
    Returns each task's final status."""
    statuses = {}
    for name in names:
        status = statuses[name] = cq.wait_phase(name, "Succeeded", timeout=timeout)
        numbers = [a["number"] for a in status["attempts"]]
        assert numbers == list(range(1, status["attempt"] + 1)), (name, numbers)
        jobs = {j.metadata.name for j in cq.jobs(name)}
        assert jobs == {f"{name}-a{n}" for n in numbers}, (name, jobs, numbers)
    return statuses


def assert_one_at_a_time(pods: PodWatch, names: list[str]) -> None:
    """No attempt's container was seen running before the previous attempt's had ended."""
    for name in names:
        runs = sorted((int(job.rsplit("-a", 1)[1]), times) for job, times in list(pods.pods.items())
                      if job.rsplit("-a", 1)[0] == name and times.running is not None)
        for (n, earlier), (m, later) in zip(runs, runs[1:]):
            assert earlier.ended is not None and earlier.ended <= later.running, (name, n, earlier, m, later)
