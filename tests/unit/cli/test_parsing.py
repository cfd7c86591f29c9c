"""The CLI's command line, without a cluster: no flag taken from a prefix, one meaning per flag,
bulk verbs that need a selection, internal verbs out of the help, and the CLI reference's table
(docs/reference/cli.md) true to the parser (issue 27)."""
from __future__ import annotations

import argparse
import re
from datetime import timedelta
from pathlib import Path

import pytest

from cronoq.cli import main, parser
from cronoq.cli.render import jsonpath
from cronoq.cli.tasks.selection import select
from tests.unit.builders import T0, make_task

CLI_DOC = Path(__file__).resolve().parents[3] / "docs" / "reference" / "cli.md"


@pytest.fixture(autouse=True)
def no_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))  # any cluster access would fail differently


def error_of(argv: list[str], capsys) -> str:
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


@pytest.mark.parametrize("argv, flag, meant", [
    (["submit", "--name", "report", "--image", "x"], "--name", "--namespace"),
    (["get", "--name", "foo"], "--name", "--namespace"),
    (["wait", "t", "--time", "30s"], "--time", "--timeout"),
    (["submit", "t", "--image", "x", "--max", "3"], "--max", "--max-attempts"),
    (["retry", "t", "--max", "3"], "--max", "--max-attempts"),
    (["operator", "--name", "ns"], "--name", "--namespace"),
    (["submit", "t", "--image", "x", "--wait-time=5m"], "--wait-time", "--wait-timeout"),
    (["pool", "drain", "p", "--time", "1m"], "--time", "--timeout"),
])
def test_no_flag_is_taken_from_a_prefix(argv, flag, meant, capsys):
    err = error_of(argv, capsys)
    assert f"unrecognized arguments: {flag}" in err
    assert f"{flag} is not short for {meant}" in err and "never abbreviated" in err


def test_every_parser_refuses_abbreviations():
    def parsers(p: argparse.ArgumentParser):
        yield p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    yield from parsers(child)

    found = list(parsers(parser()))
    assert len(found) > 15 and all(not p.allow_abbrev for p in found)


def test_submit_timeout_says_which_limit_it_would_be(capsys):
    err = error_of(["submit", "t", "--image", "x", "--wait", "--timeout", "30s"], capsys)
    assert "--timeout is ambiguous" in err and "--attempt-timeout" in err and "--wait-timeout" in err


@pytest.mark.parametrize("argv", [["submit", "t", "--image", "x", "-w"], ["retry", "t", "-w"]])
def test_w_means_watch_only(argv, capsys):
    assert "unrecognized arguments: -w" in error_of(argv, capsys)
    args = parser().parse_args(["get", "-w"])
    assert args.watch


def test_submit_attempt_timeout_is_the_task_timeout(capsys):
    # Offline checks pass, then the missing cluster is reported: the flag parsed.
    assert main(["submit", "t", "--image", "x", "--attempt-timeout", "soon"]) == 2
    assert "timeout" in capsys.readouterr().err
    assert main(["submit", "t", "--image", "x", "--attempt-timeout", "10m"]) == 1
    assert "no cluster to talk to" in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["delete"], "delete: give task names, filters (--phase, --pool, --key, -l, --older-than) or --all"),
    (["cancel", "-A"], "cancel: give task names, filters"),
    (["retry", "a", "--phase", "Failed"], "retry: give task names or filters (--phase), not both"),
    (["delete", "a", "-A"], "delete: give task names or filters (--all, -A), not both"),
    (["delete", "--older-than", "soon"], "--older-than"),
    (["cancel", "--phase", "Finished"], "--phase Finished: not a phase"),
    (["get", "a", "-A"], "give names or -A, not both"),
    (["pool"], "the following arguments are required: VERB"),
    (["pool", "pause"], "the following arguments are required: POOL"),
    (["schedule", "suspend"], "the following arguments are required: SCHEDULE"),
])
def test_bulk_and_listing_verbs_check_their_selection_offline(argv, says, capsys):
    assert says in error_of(argv, capsys)


def test_listing_flags_parse():
    args = parser().parse_args(["get", "-A", "--no-headers", "-l", "app=x", "-w", "-o", "name", "--context", "kind"])
    assert (args.all_namespaces, args.no_headers, args.selector, args.watch, args.output, args.context) == (
        True, True, "app=x", True, "name", "kind")
    args = parser().parse_args(["delete", "--phase", "Failed", "--pool", "etl", "--older-than", "24h", "-A",
                                "--dry-run"])
    assert (args.pool, args.older_than, args.all_namespaces, args.dry_run) == ("etl", "24h", True, True)


def test_internal_verbs_are_left_out_of_the_help():
    listing = parser().format_help()
    verbs = {line.split()[0] for line in listing.split("COMMAND\n", 1)[1].splitlines()
             if line.startswith("    ") and not line.startswith("     ")}
    assert {"submit", "get", "delete", "pool", "schedule"} <= verbs
    assert not verbs & {"operator", "heartbeat", "push", "trigger"}
    assert parser().parse_args(["operator"]).command == "operator", "still there for the chart"


def test_older_than_counts_from_the_end_or_the_creation():
    old_done = make_task("a").status({"phase": "Succeeded", "finishedAt": (T0 - timedelta(hours=30)).isoformat()})
    new_done = make_task("b").status({"phase": "Failed", "finishedAt": (T0 - timedelta(hours=1)).isoformat()})
    tasks = [old_done.obj(), new_done.obj()]
    assert [t.metadata.name for t in select(tasks, 24 * 3600, T0)] == ["a"]
    assert select(tasks, None, T0) == tasks


def _cli_doc_rows() -> list[tuple[str, str]]:
    """The CLI reference's table: (the verb a row starts with, the row)."""
    section = CLI_DOC.read_text().split("**The CLI**", 1)[1].split("\nExit codes", 1)[0]
    return [(m.group(1), line) for line in section.splitlines() if (m := re.match(r"\| `([a-z]+)", line))]


def _flags(command: argparse.ArgumentParser) -> set[str]:
    """The flags of a verb and of its own verbs (`pool pause`)."""
    flags = set(command._option_string_actions)
    for action in command._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                flags |= _flags(child)
    return flags


def test_the_cli_references_table_names_every_verb_and_only_real_flags():
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    rows = _cli_doc_rows()
    described = {verb for verb, _ in rows} | {w.strip("`,") for _, row in rows for w in row.split() if w.startswith("`")}
    for action in sub._choices_actions:  # the verbs --help lists
        assert action.dest in described, f"docs/reference/cli.md's table lacks `{action.dest}`"
    for verb, row in rows:
        flags = _flags(sub.choices[verb])
        for flag in re.findall(r"(?<=[\s`\[(])(--?[a-zA-Z][\w-]*)", row):
            assert flag in flags, f"docs/reference/cli.md's `{verb}` row names {flag}, which `cronoq {verb} --help` does not list"


LIST = {"kind": "List", "items": [{"metadata": {"name": "a"}, "status": {"phase": "Failed"}},
                                  {"metadata": {"name": "b"}, "status": {"phase": "Succeeded"}}]}


@pytest.mark.parametrize("template, text", [
    ("{.items[*].metadata.name}", "a b"),
    ('{range .items[*]}{.metadata.name}{"\\t"}{.status.phase}{"\\n"}{end}', "a\tFailed\nb\tSucceeded\n"),
    ('{.items[?(@.status.phase=="Failed")].metadata.name}', "a"),
    ("names:{range .items[?(@.nothing)]}{.metadata.name}{end}.", "names:."),
    ("{.items[0].status}", '{"phase": "Failed"}'),
    ("{.kind}", "List"),
])
def test_jsonpath_templates_read_as_kubectl_reads_them(template, text):
    assert jsonpath(template, LIST) == text


@pytest.mark.parametrize("output, says", [
    ("jsonpath={.items[", "jsonpath: unmatched brace"),
    ("jsonpath={range .items[*]}{.x}", "without its {end}"),
    ("jsonpath={.a}{end}", "{end} without a {range}"),
    ("table", "'table': one of wide, json, yaml, name, jsonpath=TEMPLATE, custom-columns="),
    ("custom-columns=NAME", "custom-columns: 'NAME': expected HEADER:JSONPATH"),
    ("custom-columns=NAME:.a[", "custom-columns: .a["),
])
def test_bad_output_formats_are_refused_offline(output, says, capsys):
    assert says in error_of(["get", "-o", output], capsys)


def test_completion_of_verbs_and_flags_without_a_cluster(capsys):
    from cronoq.cli.complete import kubectl_main

    assert kubectl_main(["__complete", "po"]) == 0
    assert capsys.readouterr().out.splitlines() == ["pool", ":4"]
    kubectl_main(["pool", "dr"])
    assert capsys.readouterr().out.splitlines() == ["drain", ":4"]
    kubectl_main(["get", "--all-n"])
    assert capsys.readouterr().out.splitlines() == ["--all-namespaces", ":4"]
    kubectl_main(["describe", ""])  # names come from the cluster; none to reach: nothing, and no traceback
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [":4"] and captured.err == ""


def test_the_shell_reads_completions_through_cronoq_itself(tmp_path, monkeypatch):
    import subprocess
    import sys

    out = tmp_path / "completions"
    env = {**__import__("os").environ, "_ARGCOMPLETE": "1", "COMP_LINE": "cronoq sched", "COMP_POINT": "12",
           "_ARGCOMPLETE_STDOUT_FILENAME": str(out), "_ARGCOMPLETE_IFS": "\n", "KUBECONFIG": str(tmp_path / "none")}
    result = subprocess.run([sys.executable, "-m", "cronoq"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert out.read_text().split() == ["schedule"]


@pytest.mark.parametrize("shell, says", [("bash", "complete "), ("zsh", "#compdef cronoq kubectl-cronoq"),
                                         ("fish", "__fish_cronoq_complete")])
def test_completion_scripts(shell, says, capsys):
    assert main(["completion", shell]) == 0
    assert says in capsys.readouterr().out


def test_custom_columns_read_as_kubectl_reads_them():
    from cronoq.cli.render import custom_columns, custom_row

    columns = custom_columns("NAME:.metadata.name,PHASE:{.status.phase},KEY:.spec.key")
    assert [h for h, _ in columns] == ["NAME", "PHASE", "KEY"]
    assert [c.plain for c in custom_row(columns, LIST["items"][0])] == ["a", "Failed", "<none>"]


def test_custom_columns_are_refused_with_watch(capsys):
    assert "custom-columns are for a listing" in error_of(["get", "-w", "-o", "custom-columns=N:.metadata.name"],
                                                          capsys)


@pytest.mark.parametrize("argv, namespace, context", [
    (["pool", "-n", "a", "list"], "a", None),
    (["pool", "list", "-n", "b"], "b", None),
    (["schedule", "--context", "c", "-n", "x", "suspend", "s"], "x", "c"),
    (["pool", "-n", "a", "pause", "p", "-n", "b"], "b", None),
])
def test_pool_and_schedule_take_the_common_flags_before_or_after_their_verb(argv, namespace, context):
    from cronoq.cli import merge_group_flags

    args = parser().parse_args(argv)
    merge_group_flags(args)
    assert (args.namespace, args.context) == (namespace, context)


def test_submit_deadline_flags_set_the_tasks_own_limits():
    from cronoq.cli.tasks.submit import _manifest_from_flags
    args = parser().parse_args(["submit", "t", "--image", "x", "--max-attempts", "5", "--start-deadline", "5m",
                                "--deadline", "1h", "--max-retry-duration", "30m"])
    args.trailing = []  # what main() sets from the words after --
    spec = _manifest_from_flags(args)["spec"]
    assert (spec["startDeadline"], spec["deadline"]) == ("5m", "1h")
    assert spec["retry"] == {"maxAttempts": 5, "maxRetryDuration": "30m"}


@pytest.mark.parametrize("flag", ["--start-deadline", "--deadline", "--max-retry-duration"])
def test_submit_refuses_a_bad_deadline_offline(flag, capsys):
    assert main(["submit", "t", "--image", "x", flag, "1d"]) == 2
    err = capsys.readouterr().err
    assert "'1d' is not a duration" in err and "no cluster" not in err


def test_submit_retry_rules_become_the_tasks_rules_in_order(capsys):
    from cronoq.cli.tasks.submit import _manifest_from_flags
    args = parser().parse_args(["submit", "t", "--image", "x", "--max-attempts", "2",
                                "--retry-rule", "Ignore:reasons=Evicted,NodeLost",
                                "--retry-rule", "Fail:reasons=HTTPStatus:responseCodes=500,501"])
    args.trailing = None  # what main sets from the words after `--`
    assert _manifest_from_flags(args)["spec"]["retry"] == {"maxAttempts": 2, "rules": [
        {"action": "Ignore", "reasons": ["Evicted", "NodeLost"]},
        {"action": "Fail", "reasons": ["HTTPStatus"], "responseCodes": [500, 501]}]}


@pytest.mark.parametrize("rule, says", [
    ("Ignore", "expected ACTION:FIELD=V,V"),
    ("Ignore:codes=1", "FIELD one of reasons, exitCodes, responseCodes"),
    ("Fail:exitCodes=three", "exitCodes are numbers"),
    ("Skip:exitCodes=3", "retry.rules.0.action: Input should be 'Retry', 'Fail' or 'Ignore'"),
    ("Fail:exitCodes=300", "retry.rules.0.exitCodes.0: Input should be less than or equal to 255"),
])
def test_bad_retry_rules_are_refused_offline(rule, says, capsys):
    assert main(["submit", "t", "--image", "x", "--retry-rule", rule]) == 2
    assert says in capsys.readouterr().err
