"""`cronoq submit --delay / --not-before` and describe's "Not before" line, without a cluster."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from cronoq.cli import main
from cronoq.cli.tasks.describe import _not_before
from cronoq.cli.tasks.submit import _start_time
from cronoq.engine.attempts.waiting import Explanation


@pytest.fixture(autouse=True)
def no_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))


def test_the_flags_become_the_spec_fields() -> None:
    assert _start_time("10m", None) == {"startDelay": "10m"}
    assert _start_time(None, "2026-12-06T15:00:00+01:00") == {"notBefore": "2026-12-06T14:00:00Z"}
    assert _start_time(None, None) == {}


@pytest.mark.parametrize("argv, says", [
    (["--delay", "10 minutes"], "--delay"),
    (["--not-before", "tomorrow"], "--not-before tomorrow: not an RFC 3339 time"),
    (["--not-before", "2026-12-06T14:00:00"], "with a zone"),
    (["--delay", "1m", "--not-before", "2026-12-06T14:00:00Z"], "give --delay or --not-before, not both"),
])
def test_bad_start_times_are_refused_offline(argv, says, capsys) -> None:
    assert main(["submit", "t", "--image", "x", *argv]) == 2
    assert says in capsys.readouterr().err


def test_good_ones_pass_the_offline_checks(capsys) -> None:
    assert main(["submit", "t", "--image", "x", "--delay", "10m"]) == 1
    assert "no cluster to talk to" in capsys.readouterr().err


def test_describe_says_until_when_and_how_far_ahead() -> None:
    soon = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=90)
    now = soon - timedelta(seconds=90)
    assert _not_before(Explanation(now, not_before=soon)) == soon.strftime("%Y-%m-%dT%H:%M:%SZ") + " (in 90s)"
    assert _not_before(Explanation(now, not_before=soon, started=True)) == soon.strftime("%Y-%m-%dT%H:%M:%SZ"), \
        "started: no countdown"
    assert _not_before(Explanation(soon, not_before=soon)) == soon.strftime("%Y-%m-%dT%H:%M:%SZ"), "come: none"
