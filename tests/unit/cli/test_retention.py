"""Retention by outcome through the CLI and client (issue 40): the submit flags, the client's
`retention=`, and the Retention lines of `cronoq describe` and `cronoq pool status`."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from cronoq.api import TaskPoolSpec
from cronoq.cli import main, parser
from cronoq.cli.retention import pool_line, task_line
from cronoq.client import Client
from tests.unit.builders import T0, make_task

BY_OUTCOME = TaskPoolSpec.model_validate({"ttlAfterFinished": "24h", "ttlAfterSuccess": "1h",
                                          "ttlAfterFailure": "168h", "jobRetentionAfterFailure": "168h"})


def test_submit_flags_set_the_tasks_retention():
    from cronoq.cli.tasks.submit import _manifest_from_flags
    args = parser().parse_args(["submit", "t", "--image", "x", "--ttl-after-success", "1h",
                                "--ttl-after-failure", "168h", "--job-retention-after-failure", "72h",
                                "--ttl-after-finished", "24h"])
    args.trailing = []
    spec = _manifest_from_flags(args)["spec"]
    assert (spec["ttlAfterSuccess"], spec["ttlAfterFailure"], spec["ttlAfterFinished"]) == ("1h", "168h", "24h")
    assert spec["jobRetentionAfterFailure"] == "72h" and "jobRetention" not in spec


@pytest.mark.parametrize("flag, value, field", [("--ttl-after-failure", "8761h", "ttlAfterFailure"),
                                                ("--job-retention-after-success", "1d", "jobRetentionAfterSuccess")])
def test_submit_refuses_a_bad_retention_offline(flag, value, field, capsys):
    assert main(["submit", "t", "--image", "x", flag, value]) == 2
    err = capsys.readouterr().err
    assert field in err and "no cluster" not in err


def test_client_submit_sends_the_retention_fields(monkeypatch):
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(Client, "submit_manifest", lambda self, manifest: sent.append(manifest))
    client = object.__new__(Client)
    client.submit("t", image="x", retention={"ttlAfterFailure": "168h", "jobRetentionAfterSuccess": timedelta(0)})
    assert sent[0]["spec"]["ttlAfterFailure"] == "168h" and sent[0]["spec"]["jobRetentionAfterSuccess"] == "0s"
    with pytest.raises(ValueError, match="ttlAfterFailed is not one of"):
        client.submit("t", image="x", retention={"ttlAfterFailed": "1h"})


def test_pool_line_says_each_outcome_and_one_value_when_they_agree():
    assert pool_line(BY_OUTCOME) == "tasks 1h after success, 168h after failure; Jobs 1h after success, " \
                                    "168h after failure; keys 1h"
    assert pool_line(TaskPoolSpec()) == "tasks until deleted; Jobs 1h; keys 1h"


def test_task_line_before_and_after_the_task_ends():
    waiting = make_task("t").obj()
    assert task_line(waiting, BY_OUTCOME) == "task 1h after success, 168h after failure; " \
                                             "Jobs 1h after success, 168h after failure"
    own = make_task("t").spec(ttlAfterFinished="2h", key="k").obj()
    assert task_line(own, BY_OUTCOME).startswith("task 2h;")  # its own general ttl wins over the pool's by outcome
    dead = make_task("t").status({"phase": "DeadLettered", "finishedAt": T0, "attempt": 1}).obj()
    week_later = f"{T0 + timedelta(hours=168):%Y-%m-%dT%H:%M:%SZ}"
    assert task_line(dead, BY_OUTCOME) == f"deleted at {week_later} (failure: task 168h, Jobs 168h)"
    done = make_task("t").status({"phase": "Succeeded", "finishedAt": T0, "attempt": 1}).obj()
    assert task_line(done, TaskPoolSpec()) == "kept until deleted (success: task until deleted, Jobs 1h)"
    assert task_line(waiting, None).endswith("(TaskPool default not readable: its defaults left out)")
