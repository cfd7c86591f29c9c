"""Fault scenarios: `CRONOQ_FAULT_RUNS=3` (set by `make faults`) runs each one that many times;
at the end, a table of what their checks counted (tests/support/faults.py)."""
from __future__ import annotations

import os

import pytest

from tests.support import effects
from tests.support.faults import FIGURES

RUNS = int(os.environ.get("CRONOQ_FAULT_RUNS", "1"))
COLUMNS = ("tasks", "attempts", "lost", "reused", "extra_jobs", "overlaps", "stale")


@pytest.fixture(autouse=True)
def fault_run(request: pytest.FixtureRequest) -> int:
    return getattr(request, "param", 1)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if RUNS > 1 and "fault_run" in metafunc.fixturenames:
        metafunc.parametrize("fault_run", range(1, RUNS + 1), indirect=True,
                             ids=[f"run{n}" for n in range(1, RUNS + 1)])


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001 - pytest's reporter
    write = terminalreporter.write_line
    if effects.ROWS:
        write("")
        write("exactly-once effects (test_exactly_once.py; violations must be 0, stale writes refused at least 1, "
              "and the unfenced INSERT of the same run must duplicate):")
        for line in effects.table(effects.ROWS):
            write(line)
    if not FIGURES:
        return
    width = max(len(name) for name in FIGURES)
    write("")
    write("fault scenarios (tasks checked; lost, attempt numbers reused, extra Jobs, two attempts "
          "running at once — each must be 0; late reports seen as StaleCompletion Events):")
    write(f"{'scenario':<{width}}  " + "  ".join(f"{c:>10}" for c in COLUMNS))
    for name, figures in sorted(FIGURES.items()):
        cells = [str(figures.get(c, 0)) if c != "overlaps" or figures.get("watched") else "-" for c in COLUMNS]
        write(f"{name:<{width}}  " + "  ".join(f"{c:>10}" for c in cells))
