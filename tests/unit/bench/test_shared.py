"""The pieces every scenario shares: one way to run a process and read its CPU and RSS
(procstat.Running), to wait on a condition (procstat.wait_until), to count a burst's outcomes
(throughput.outcomes) and to time a takeover (failover.takeover)."""
from __future__ import annotations

import sys
import time

import pytest

from bench import failover, procstat, throughput
from bench.load import Submission


def test_a_running_process_has_a_pid_cpu_and_rss_and_stops_on_sigterm(tmp_path) -> None:
    proc = procstat.Running(tmp_path / "logs" / "p.log")
    proc.launch([sys.executable, "-c", "import os, time; print(os.environ['BENCH_X'], flush=True); time.sleep(60)"],
                {"BENCH_X": "seen", "PATH": None})
    try:
        assert procstat.wait_until(lambda: proc.tail() == "seen", timeout=30, interval=0.05)
        assert proc.alive() and proc.rss() > 1_000_000 and proc.cpu() >= 0.0
    finally:
        proc.stop(timeout=10)
    assert not proc.alive() and proc.process is not None and proc.process.returncode == -15


def test_wait_until_answers_false_at_the_timeout_or_names_what_it_waited_for() -> None:
    calls = []
    assert procstat.wait_until(lambda: calls.append(1) or len(calls) >= 3, timeout=5, interval=0.01)
    assert len(calls) == 3
    assert not procstat.wait_until(lambda: False, timeout=0.05, interval=0.01)
    with pytest.raises(TimeoutError, match="waiting for the moon"):
        procstat.wait_until(lambda: False, timeout=0.05, interval=0.01, what="the moon")


def test_a_bursts_outcomes_count_first_attempt_successes_and_need_every_task_for_a_throughput() -> None:
    sub = Submission(sent={"a": 1.0, "b": 1.5, "c": 2.0}, started=1.0, finished=2.0)
    seen = {"tasks": {"a": {"phases": {"Succeeded": 3.0}, "terminal": "Succeeded", "attempt": 1},
                      "b": {"phases": {"Succeeded": 5.0}, "terminal": "Succeeded", "attempt": 2},
                      "c": {"phases": {"Failed": 4.0}, "terminal": "Failed", "attempt": 1}}}
    succeeded, counts = throughput.outcomes(seen, sub, 3)
    assert succeeded == {"a": 3.0, "b": 5.0, "c": None}
    assert counts == {"succeeded": 2, "throughput": None, "succeeded_first_attempt": 1}
    del seen["tasks"]["c"]
    assert throughput.outcomes(seen, sub, 2)[1]["throughput"] == 2 / (5.0 - 1.0)


class Standby:
    def __init__(self, leads_at: float) -> None:
        self.leads_at = leads_at

    def leading(self) -> bool:
        return time.monotonic() >= self.leads_at


def test_a_takeover_is_timed_from_the_kill_to_the_standby_leading_and_to_its_first_job() -> None:
    killed = time.monotonic()
    led, first = failover.takeover(killed, Standby(killed + 0.1), lambda: killed + 0.3
                                   if time.monotonic() >= killed + 0.3 else None, timeout=10)
    assert led is not None and led >= 0.1 and first == pytest.approx(0.3)  # led: when seen, not before
    led, first = failover.takeover(time.monotonic(), Standby(float("inf")), lambda: None, timeout=0.2)
    assert (led, first) == (None, None)
