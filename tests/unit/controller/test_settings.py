"""The operator's settings (controller/settings.py) are the one source of `cronoq operator`'s flags:
no flag gives the settings' defaults, every flag lands in its setting, the help says each default,
and the chart's values that become flags default to the same (read from the chart's files here;
tests/chart/test_render.py checks what `helm template` renders)."""
from __future__ import annotations

import re
from dataclasses import fields
from datetime import timedelta
from typing import Any

import pytest
import yaml

from cronoq.cli import parser
from cronoq.controller.settings import Options, from_flags
from cronoq.engine.jobs import TaskServiceAccount

from tests.chart.chart import CHART


def settings(*flags: str) -> Options:
    return from_flags(parser().parse_args(["operator", *flags]))


def test_no_flag_gives_the_settings_defaults(monkeypatch) -> None:
    monkeypatch.delenv("CRONOQ_LOG_LEVEL", raising=False)
    monkeypatch.delenv("CRONOQ_ARCHIVE", raising=False)
    assert settings() == Options()


def test_the_archive_defaults_to_the_environments(monkeypatch) -> None:
    monkeypatch.setenv("CRONOQ_ARCHIVE", "postgresql://cronoq@db/cronoq")
    assert settings().archive == "postgresql://cronoq@db/cronoq"
    assert settings("--archive=sqlite:///x.db").archive == "sqlite:///x.db"


def test_every_flag_lands_in_its_setting() -> None:
    given = settings("--namespace=a", "-n", "team-*", "--metrics-port=0", "--probe-port=1", "--workers=3",
                     "--watch-seconds=20", "--events=warnings", "--no-leader-election", "--lease-namespace=l",
                     "--lease-name=n", "--sidecar-image=i", "--task-service-account=sa",
                     "--task-service-account-namespace=x", "--task-service-account-namespace=y",
                     "--min-schedule-interval=1m", "--lease-guard=g", "--trust-worker-leases", "--log-level=debug",
                     "--queue-marks-from=7", "--archive=sqlite:///a.db", "--archive-retention=0s",
                     "--archive-retention-success=72h", "--archive-wait=1m", "--notifications")
    assert given == Options(namespaces=("a", "team-*"), metrics_port=0, probe_port=1, workers=3, watch_seconds=20,
                            events="warnings", leader_election=False, lease_namespace="l", lease_name="n",
                            sidecar_image="i", task_service_account="sa", task_service_account_namespaces=("x", "y"),
                            min_schedule_interval=timedelta(minutes=1), lease_guard="g", trust_worker_leases=True,
                            queue_marks_from=7, log_level="debug", archive="sqlite:///a.db",
                            archive_retention=timedelta(), archive_retention_success=timedelta(hours=72),
                            archive_wait=timedelta(minutes=1), notifications=True)
    unchanged = [f.name for f in fields(Options) if getattr(given, f.name) == getattr(Options(), f.name)]
    assert unchanged == ["epoch"], "every setting but the epoch has a flag, and this test gives each"
    assert given.task_pods == TaskServiceAccount("sa", frozenset({"x", "y"}))
    assert given.globs and given.watches("team-a") and not given.watches("b")


def test_the_log_level_defaults_to_the_environments(monkeypatch) -> None:
    monkeypatch.setenv("CRONOQ_LOG_LEVEL", "debug")
    assert settings().log_level == "debug" and settings("--log-level=error").log_level == "error"


def test_the_help_names_every_flag_with_its_default(capsys) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["operator", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for setting in fields(Options):
        if "flag" in setting.metadata:
            name = setting.metadata["flag"].name or "--" + setting.name.replace("_", "-")
            assert f" {name}" in text, name
    for default in ("(default: all namespaces)", "(default: 9090)", "(default: 8080)", "(default: 8)",
                    "(default: 60)", "(default: auto)", "(default: on)", "(default: cronoq-leader)",
                    "(default: 0s, any interval the API allows)", "(default: cronoq-lease-guard)",
                    "(default: $CRONOQ_LOG_LEVEL, else info)", "a watch silent for N+15 s"):
        assert default in text, default


# ---- the chart -------------------------------------------------------------------------------

DEPLOYMENT = (CHART / "templates" / "deployment.yaml").read_text()
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
CHART_NAMED = {"--lease-guard", "--lease-namespace", "--sidecar-image", "--task-service-account",
               "--task-service-account-namespace", "--no-leader-election"}
"""Flags the chart gives from what it makes or knows, not from a value that defaults a setting:
its own lease guard, the release namespace, its image, the task ServiceAccount it creates (and
only where it does); the switch's other side."""


def value(path: str) -> Any:
    found: Any = VALUES
    for key in path.split("."):
        found = found[key]
    return found


def chart_flags() -> dict[str, list[str]]:
    """Each operator flag the Deployment gives from a value → that flag as the values' defaults
    make it: `--x={{ .Values.a.b }}` (none inside `if .Values.a.b` while it is empty), `--x` inside
    `if .Values.a.b`, `--x={{ . }}` in `range .Values.a`."""
    given: dict[str, list[str]] = {}
    for name, path in re.findall(r"- (--[\w-]+)=\{\{ \.Values\.([\w.]+) \}\}", DEPLOYMENT):
        given[name] = [f"{name}={value(path)}"]
    for path, name in re.findall(r"\{\{- if \.Values\.([\w.]+) \}\}\s*- (--[\w-]+)=\{\{ \.Values\.\1 \}\}", DEPLOYMENT):
        given[name] = [f"{name}={value(path)}"] if value(path) else []
    for path, name in re.findall(r"\{\{- if \.Values\.([\w.]+) \}\}\s*- (--[\w-]+)\n", DEPLOYMENT):
        given[name] = [name] if value(path) else []
    for path, name in re.findall(r"\{\{- range \.Values\.([\w.]+) \}\}\s*- (--[\w-]+)=\{\{ \. \}\}", DEPLOYMENT):
        given[name] = [f"{name}={each}" for each in value(path)]
    return given


def test_every_flag_the_chart_gives_from_a_value_defaults_to_the_settings_default(monkeypatch) -> None:
    monkeypatch.delenv("CRONOQ_LOG_LEVEL", raising=False)
    monkeypatch.delenv("CRONOQ_ARCHIVE", raising=False)
    given = {name: flags for name, flags in chart_flags().items() if name not in CHART_NAMED}
    passed = set(re.findall(r"^\s+- (--[\w-]+)", DEPLOYMENT[DEPLOYMENT.index("args:"):DEPLOYMENT.index("env:")],
                            re.MULTILINE))
    assert passed - CHART_NAMED == set(given), "a flag of the chart neither from a value nor named here"
    assert {"--namespace", "--metrics-port", "--probe-port", "--leader-election", "--lease-name", "--log-level",
            "--events", "--min-schedule-interval"} <= set(given)
    for name, flags in given.items():
        assert settings(*flags) == Options(), f"the chart's default of {name} is not the operator's: {flags}"
