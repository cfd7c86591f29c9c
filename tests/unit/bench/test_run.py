"""The bench's one runner: its scenarios are a table, --only picks from it, and the studies that
need a run of their own (deep, kopf-ab) or double the bursts (archive, keys, tracing) run only when named."""
from __future__ import annotations

import pytest

from bench import run


def test_the_default_run_is_every_scenario_but_those_named_only_in_the_tables_order():
    names = [s.name for s in run.SCENARIOS]
    assert run.DEFAULT == tuple(n for n in names if n not in ("deep", "kopf-ab", "archive", "keys", "tracing"))
    assert run.parse([]).only == set(run.DEFAULT)
    assert run.parse(["--only", "kopf-ab"]).only == {"kopf-ab"}
    assert run.parse(["--only", "archive,keys,tracing"]).only == {"archive", "keys", "tracing"}


def test_a_scenario_not_in_the_table_is_refused_naming_it(capsys):
    with pytest.raises(SystemExit):
        run.parse(["--only", "cronoq,orphans"])
    assert "unknown scenarios orphans" in capsys.readouterr().err


def test_the_per_size_scenarios_run_before_those_run_once():
    """A throughput row is filled for each N first; soak and idle read the bursts' rates and namespaces."""
    per_size = [s.per_size for s in run.SCENARIOS]
    assert per_size == sorted(per_size, reverse=True)
