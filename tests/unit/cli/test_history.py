"""`cronoq history` and `cronoq describe` of a deleted task, reading a real SQLite archive written
the way the operator writes it (rows from a task's status, engine/history.py)."""
from __future__ import annotations

import json

import pytest

from cronoq.archive import Database
from cronoq.cli import main, parser, tasks
from cronoq.client import TaskNotFound
from cronoq.engine import history
from cronoq.engine.history import Identity

from tests.unit.builders import T0, at, make_task

HOSTILE = "bad\x1b[2J news"


def archived(tmp_path) -> str:
    url = f"sqlite:///{tmp_path}/archive.db"
    db = Database.open(url)
    db.migrate(T0)
    gone = make_task("gone").spec(key="order-7").status({
        "phase": "Succeeded", "attempt": 2, "finishedAt": at(30).isoformat(), "message": "succeeded on attempt 2",
        "output": '{"rows": 3}', "outputAvailable": True,
        "attempts": [
            {"number": 1, "job": "gone-a1", "trigger": "First", "outcome": "Retryable", "reason": "OOMKilled",
             "exitCode": 137, "message": HOSTILE, "startedAt": at(1).isoformat(), "finishedAt": at(10).isoformat(),
             "durationMs": 9000},
            {"number": 2, "job": "gone-a2", "trigger": "Retry", "outcome": "Success", "reason": "Completed",
             "exitCode": 0, "startedAt": at(20).isoformat(), "finishedAt": at(30).isoformat(), "durationMs": 10000}]}).obj()
    push = make_task("hook", namespace="other").unset("image").spec(http={"url": "https://example.com/"}).status({
        "phase": "Running", "attempt": 2,
        "attempts": [{"number": 1, "trigger": "First", "job": "hook-a1", "outcome": "Retryable", "reason": "HTTPStatus",
                      "responseCode": 503, "finishedAt": at(40).isoformat()}, {"number": 2, "job": "hook-a2"}]}).obj()
    db.write([history.rows(Identity.of(gone), gone.status), history.rows(Identity.of(push), push.status)], at(50))
    db.close()
    return url


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_history_lists_filters_and_prints_json(tmp_path, capsys, monkeypatch) -> None:
    url = archived(tmp_path)
    monkeypatch.setenv("COLUMNS", "1000")
    code, out, _ = run(["history", f"--archive={url}"], capsys)
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["NAMESPACE", "NAME", "ATTEMPT", "POOL", "OUTCOME", "REASON", "CODE",
                                              "DURATION", "FINISHED", "MESSAGE"]
    assert [line.split()[:7] for line in lines[1:]] == [
        ["other", "hook", "1", "default", "Retryable", "HTTPStatus", "503"],
        ["ns", "gone", "2", "default", "Success", "Completed", "0"],
        ["ns", "gone", "1", "default", "Retryable", "OOMKilled", "137"]]
    assert "\x1b" not in out and "\\x1b[2J" in out, "the archive's text is escaped for a terminal"

    code, out, _ = run(["history", f"--archive={url}", "-n", "ns", "--outcome", "Retryable", "-o", "json"], capsys)
    (row,) = json.loads(out)
    assert (row["name"], row["attempt"], row["exit_code"], row["phase"], row["key"], row["message"]) == (
        "gone", 1, 137, "Succeeded", "order-7", HOSTILE)
    assert row["finished_at"] == "2026-12-03T12:00:10Z"
    monkeypatch.setenv("CRONOQ_ARCHIVE", url)
    assert [r["name"] for r in json.loads(run(["history", "--response-code", "503", "-o", "json"], capsys)[1])] == ["hook"]
    assert json.loads(run(["history", "--phase", "Failed", "-o", "json"], capsys)[1]) == []
    assert len(json.loads(run(["history", "--since", "2026-12-03T12:00:20Z", "-o", "json"], capsys)[1])) == 2
    code, out, _ = run(["history", "--name", "gone", "-o", "wide", "--no-headers"], capsys)
    assert out.splitlines()[0].split()[10:15] == ["order-7", "Retry", "Job", "Succeeded", "gone-a2"]


def test_history_says_what_is_wrong(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("CRONOQ_ARCHIVE", raising=False)
    code, _, err = run(["history"], capsys)
    assert code == 2 and "no archive: give --archive URL" in err
    code, _, err = run(["history", f"--archive=sqlite:///{tmp_path}/none.db"], capsys)
    assert code == 1 and "no archive at" in err
    code, _, err = run(["history", f"--archive={archived(tmp_path)}", "--since", "yesterday"], capsys)
    assert code == 2 and "--since: 'yesterday' is neither a duration" in err


class GoneClient:
    namespace = "ns"

    def get(self, name: str):
        raise TaskNotFound(self.namespace, name)


def test_describe_of_a_deleted_task_shows_what_the_archive_kept(tmp_path, capsys, monkeypatch) -> None:
    url = archived(tmp_path)
    monkeypatch.setenv("COLUMNS", "1000")
    args = parser().parse_args(["describe", "gone", f"--archive={url}"])
    assert tasks.describe.describe(args, GoneClient()) == 0  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "deleted from the cluster; this is what the archive kept (uid uid-gone)" in out
    assert "succeeded on attempt 2" in out and '{"rows": 3}' in out and "order-7" in out
    assert [line.split()[:2] for line in out.splitlines() if line.split()[:1] in (["1"], ["2"])] == [
        ["1", "First"], ["2", "Retry"]]
    with pytest.raises(TaskNotFound):  # neither in the cluster nor in the archive
        tasks.describe.describe(parser().parse_args(["describe", "never", f"--archive={url}"]), GoneClient())  # type: ignore[arg-type]
    monkeypatch.delenv("CRONOQ_ARCHIVE", raising=False)
    with pytest.raises(TaskNotFound):  # no archive given: as before
        tasks.describe.describe(parser().parse_args(["describe", "gone"]), GoneClient())  # type: ignore[arg-type]


def test_the_operator_refuses_an_archive_url_it_cannot_use_before_it_starts(capsys) -> None:
    code, _, err = run(["operator", "--archive", "mysql://db/cronoq"], capsys)
    assert code == 2 and "--archive: archive URL 'mysql://db/cronoq': give sqlite:///path or postgresql://" in err
