"""The bulk verbs' own lines (`cronoq retry`, named and selected), with a client that keeps its
tasks in a dict: what each verb prints of what it did, without a cluster."""
from __future__ import annotations

from typing import Any

import pytest

from cronoq.api import Task
from cronoq.cli import parser
from cronoq.cli.tasks import bulk

from tests.unit.builders import make_task


class Listing(list):
    mixed = False


class Tasks:
    """The calls of `cronoq.client.Client` the bulk verbs make, over a dict of tasks."""

    namespace = "ns"

    def __init__(self, *tasks: Task) -> None:
        self.tasks = {t.metadata.name: t for t in tasks}
        self.retried: dict[str, list[Task]] = {}

    def get(self, name: str) -> Task:
        return self.tasks[name]

    def pages(self, **_: Any) -> Listing:
        return Listing([list(self.tasks.values())])

    def in_namespace(self, namespace: str) -> Tasks:
        return self

    def retries_of(self, name: str) -> list[Task]:
        return self.retried.get(name, [])

    def retry(self, name: str, max_attempts: int | None = None) -> Task:
        new = make_task(f"{name}-r-abcde").obj()
        self.retried.setdefault(name, []).append(new)
        return new


@pytest.mark.parametrize("argv, out, err", [
    (["d1"], "task.cronoq.io/d1-r-abcde created (retry of d1)\n", ""),
    (["--all"], "task.cronoq.io/d1-r-abcde created (retry of d1)\n", "1 task retried\n"),
    (["--all", "--dry-run"], "task.cronoq.io/d1 would be retried (DeadLettered)\n",
     "1 task would be retried (dry run)\n"),
])
def test_retry_names_each_new_task(argv: list[str], out: str, err: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = parser().parse_args(["retry", *argv])
    bulk.check(args)
    assert bulk.retry(args, Tasks(make_task("d1").status({"phase": "DeadLettered"}).obj(),  # type: ignore[arg-type]
                                  make_task("ok").status({"phase": "Succeeded"}).obj())) == 0
    assert capsys.readouterr()[:2] == (out, err)
