"""The pure parts of the client and the CLI: results, errors, offline input checks, rendering.
(The client's layer is an import-linter contract in pyproject.toml, checked by `make lint`.)"""
from __future__ import annotations

import io
from datetime import timedelta

import pytest
from rich.console import Console

from cronoq.api import TaskPhase
from cronoq.cli import main
from cronoq.cli import render
from cronoq.client import Client, InvalidTask, OutputUnavailable, Result, TaskFailed, parse_output, status_of
from cronoq.client.client import check_manifest
from tests.unit.builders import T0, make_task


def finished(name: str, phase: str, **status) -> object:
    return make_task(name).status({"phase": phase, "attempt": 1, **status}).obj()


def test_status_is_the_snake_case_of_the_metrics():
    assert [status_of(TaskPhase(p)) for p in ("Succeeded", "Failed", "DeadLettered", "Cancelled", "Skipped")] == [
        "succeeded", "failed", "dead_lettered", "cancelled", "skipped"]


@pytest.mark.parametrize("raw, value", [('{"a": [1, 2]}', {"a": [1, 2]}), ("42", 42), ('"s"', "s"),
                                        ("plain text", "plain text"), ("{broken", "{broken"), (None, None)])
def test_output_is_parsed_when_it_is_json(raw, value):
    assert parse_output(raw) == value


def test_result_of_a_finished_task():
    ok = finished("a", "Succeeded", output='{"n": 1}', outputAvailable=True)
    assert Client.result(ok).output == {"n": 1}
    with pytest.raises(OutputUnavailable) as raised:
        Client.result(finished("b", "Succeeded"))
    assert isinstance(raised.value.result, Result) and raised.value.result.output is None
    with pytest.raises(TaskFailed) as failed:
        Client.result(finished("c", "DeadLettered", message="attempt 3 failed: boom"))
    assert (failed.value.status, failed.value.message) == ("dead_lettered", "attempt 3 failed: boom")
    with pytest.raises(ValueError):
        Client.result(make_task("d").status({"phase": "Running"}).obj())


@pytest.mark.parametrize("manifest, says", [
    ({"kind": "TaskPool", "spec": {}}, "only Task manifests"),
    ({"spec": {"image": "x", "priority": 10**7}}, "priority"),
    ({"spec": {"image": "x", "dependsOn": [{"task": "me"}]}, "metadata": {"name": "me"}}, "cannot depend on itself"),
    ({"spec": {"image": "x", "payload": "x" * 40000}}, "payload is"),
    ({"spec": {"image": "x", "env": [{"name": "CRONOQ_X", "value": "1"}]}}, "reserved"),
])
def test_manifests_are_checked_offline(manifest, says):
    with pytest.raises(InvalidTask, match=says):
        check_manifest(manifest)


def test_a_manifest_without_a_name_gets_a_generated_one():
    assert check_manifest({"spec": {"image": "x"}})["metadata"] == {"generateName": "task-"}


@pytest.mark.parametrize("argv, says", [
    (["submit", "--no-such-flag"], "cronoq submit: unrecognized arguments: --no-such-flag"),
    (["submit", "x", "--image", "i", "--payload", "[1,"], "--payload is not JSON"),
    (["submit", "x", "--image", "i", "--label", "novalue"], "--label 'novalue': expected KEY=VALUE"),
    (["get", "--phase", "Finished"], "--phase Finished: not a phase"),
    (["wait", "x", "--timeout", "1 minute"], "is not a duration"),
    (["logs"], "the following arguments are required: TASK"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_bad_command_lines_are_one_line_and_exit_2_without_a_cluster(argv, says, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))  # any cluster access would fail differently
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and says in err


def test_submit_keeps_the_command_after_the_double_dash(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    # `--payload` after `--` is the container's argument, not a flag: no JSON error, but no cluster either.
    assert main(["submit", "x", "--image", "i", "--", "run", "--payload", "{not json"]) == 1
    assert "no cluster to talk to" in capsys.readouterr().err


def test_age_reads_like_kubectl():
    assert [render.age(T0, T0 + timedelta(seconds=s)) for s in (5, 119, 185, 900, 7200, 200000)] == [
        "5s", "119s", "3m5s", "15m", "120m", "2d"]


def test_dependency_tree_draws_a_diamond_with_phases():
    tasks = {
        "a": finished("a", "Succeeded"),
        "b": make_task("b").spec(dependsOn=[{"task": "a"}]).status({"phase": "Running"}).obj(),
        "c": make_task("c").spec(dependsOn=[{"task": "a", "on": "Failure"}]).status({"phase": "Blocked"}).obj(),
        "d": make_task("d").spec(dependsOn=[{"task": "b"}, {"task": "c"}, {"task": "ghost"}]).obj(),
    }
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(render.dependency_tree("d", tasks))
    lines = [line.strip("│├└─ ") for line in console.export_text().splitlines()]
    assert [line.split() for line in lines] == [
        ["d", "Pending"], ["b", "Running"], ["a", "Succeeded"], ["c", "Blocked"], ["a", "Succeeded", "(on", "Failure)"],
        ["ghost", "not", "found"]]


def test_task_messages_are_not_read_as_markup():
    task = finished("m", "Failed", message="[bold]not a style[/bold] [red]")
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(render.task_table([task]))
    assert "[bold]not a style[/bold] [red]" in console.export_text()


def test_the_operator_takes_a_minimum_schedule_interval_and_refuses_a_bad_one(capsys) -> None:
    """Issue 26, point 4d."""
    from cronoq.cli import UsageError, parser
    assert parser().parse_args(["operator", "--min-schedule-interval", "1m"]).min_schedule_interval == timedelta(minutes=1)
    assert parser().parse_args(["operator"]).min_schedule_interval == timedelta()
    with pytest.raises(UsageError, match="--min-schedule-interval"):
        parser().parse_args(["operator", "--min-schedule-interval", "often"])


def test_the_operator_takes_the_task_service_account_and_where_it_exists() -> None:
    """Issue 26, point 2."""
    from cronoq.cli import parser
    args = parser().parse_args(["operator", "--task-service-account", "cronoq-task",
                                "--task-service-account-namespace", "a", "--task-service-account-namespace", "b"])
    assert (args.task_service_account, args.task_service_account_namespaces) == ("cronoq-task", ["a", "b"])
    args = parser().parse_args(["operator"])
    assert (args.task_service_account, args.task_service_account_namespaces) == (None, [])


# --- control characters from the cluster (issue 37, point 7) -------------------------------------------

HOSTILE = "sent \x1b]52;c;QkFTRTY0\x07 then \x1b[2J, a C1 CSI \x9b31m, a DEL \x7f\nand a second line"
"""A tenant's text: OSC 52 sets the reader's clipboard, CSI 2J clears the screen, 0x9b is CSI in one byte."""
RAW = ("\x1b", "\x07", "\x9b", "\x7f")


class OnePage(list):
    """What `Client.pages` returns: the pages, and whether a page came from a newer snapshot."""

    mixed = False


class OneTaskClient:
    """The reads `get` and `describe` make, answered with one task and its Events."""

    namespace = "ns"

    def __init__(self, task, events) -> None:
        self.task, self._events = task, events

    def list(self, **_filters) -> list:
        return [self.task]

    def pages(self, **_filters) -> OnePage:
        return OnePage([[self.task]])

    def get(self, name: str):
        return self.task

    def retries_of(self, name: str) -> list:
        return []

    def pool(self, name: str) -> None:
        return None  # describe's Retention line, without the pool's defaults

    def events(self, task) -> list:
        return self._events


def hostile_task():
    return make_task("evil").spec(key=f"k{HOSTILE}").status({
        "phase": "Failed", "attempt": 1, "message": HOSTILE, "summary": HOSTILE, "output": HOSTILE,
        "outputAvailable": True,
        "attempts": [{"number": 1, "job": "evil-a1", "outcome": "Permanent", "reason": "HTTPStatus",
                      "message": f"POST https://hooks.test/: HTTP 400 Bad Request: {HOSTILE}"}]}).obj()


def run_verb(verb: str, argv: list[str], capsys, monkeypatch) -> str:
    from cronoq.cli import parser, tasks
    from cronoq.client.attempts import TaskEvent

    event = TaskEvent.of({"metadata": {"creationTimestamp": T0.isoformat()}, "lastTimestamp": T0.isoformat(),
                          "type": "Warning", "reason": "AttemptFailed", "message": HOSTILE})
    monkeypatch.setenv("COLUMNS", "1000")  # wide enough that no cell is folded onto a second line
    args = parser().parse_args([verb, *argv])
    assert tasks.VERBS[verb](args, OneTaskClient(hostile_task(), [event])) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("verb, argv", [("get", []), ("get", ["-o", "wide"]), ("describe", ["evil"]),
                                        ("get", ["-o", "custom-columns=MESSAGE:.status.message"])])
def test_control_characters_from_the_cluster_never_reach_the_terminal(verb, argv, capsys, monkeypatch) -> None:
    shown = run_verb(verb, argv, capsys, monkeypatch)
    assert not [c for c in RAW if c in shown], repr(shown)
    assert "\\x1b]52;c;QkFTRTY0\\x07 then \\x1b[2J, a C1 CSI \\x9b31m, a DEL \\x7f" in shown
    if verb == "describe":  # key, message, output, the attempt's message (quoting the receiver), the Event
        assert shown.count("\\x1b]52;c;QkFTRTY0") == 5
        assert "and a second line" in [line.strip() for line in shown.splitlines()]  # free text keeps its lines
    else:  # a table cell is one line: a line break in it would draw a row of its own
        assert len(shown.strip().splitlines()) == 2  # the header and the task's row


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_machine_output_keeps_the_clusters_text_exactly(fmt, capsys, monkeypatch) -> None:
    import json

    import yaml
    shown = run_verb("get", ["evil", "-o", fmt], capsys, monkeypatch)
    task = json.loads(shown) if fmt == "json" else yaml.safe_load(shown)
    assert task["status"]["message"] == HOSTILE and task["status"]["attempts"][0]["message"].endswith(HOSTILE)
    assert run_verb("get", ["evil", "-o", "jsonpath={.status.message}"], capsys, monkeypatch) == HOSTILE


def test_terminal_safe_escapes_c0_del_and_c1_and_keeps_lines_only_in_free_text() -> None:
    assert render.terminal_safe("a\x00\x1b\r\x7f\x80\x9f\u00a0é") == "a\\x00\\x1b\\r\\x7f\\x80\\x9f\u00a0é"
    assert render.terminal_safe("a\n\tb") == "a\\n\\tb"
    assert render.terminal_safe("a\n\tb\r", multiline=True) == "a\n\tb\\r"


def test_waits_output_is_escaped_on_a_terminal_and_exact_in_a_pipe() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert render.on_terminal(HOSTILE, io.StringIO()) == HOSTILE
    assert render.on_terminal(HOSTILE, Terminal()) == render.terminal_safe(HOSTILE, multiline=True)


def test_an_error_quoting_the_cluster_is_escaped(capsys) -> None:
    from cronoq.cli import runner
    assert runner.fail(f"task evil Failed: {HOSTILE}", 1) == 1
    err = capsys.readouterr().err
    assert not [c for c in RAW if c in err] and "\\x1b]52;c;QkFTRTY0\\x07" in err
