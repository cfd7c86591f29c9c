"""Listings in pages (issue 56, item 4), against a fake of the one HTTP layer the client uses
(cronoq.apiserver's `Api.request`) that pages as the API server does: `limit` and
`continue`, items in storage order (`namespace/name`), field selectors on the CRD's selectable
fields, and a `continue` token that can expire (410 with a token to go on from a newer snapshot).

What is checked: the client asks for pages and hands them over one at a time; several phases
are one listing each, merged in the server's order; an expired token is gone on from (shown and
acted on: `mixed`) or the listing starts again (watched: one snapshot); the CLI's `get` writes
a page before it reads the next, in the same text as the whole List; the bulk verbs act on a page
before reading the next; `describe` reads no queue past PLACE_LIMIT; `tree` and completion read
only what they show."""
from __future__ import annotations

import argparse
import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from cronoq.api import Task
from cronoq.apiserver.errors import error_of
from cronoq.cli import parser, render, tasks as cli_tasks
from cronoq.cli.tasks import bulk, describe, listing, reading
from cronoq.cli.complete import _task_names
from cronoq.client import Client
from cronoq.client.client import storage_order
from cronoq.client.waiting import SYNCED
from tests.unit.builders import T0, make_task


def task(name: str, phase: str | None = None, *, namespace: str = "ns", pool: str = "default",
         minute: int = 0, **spec: Any) -> dict[str, Any]:
    b = make_task(name, namespace).spec(pool=pool, **spec)
    if phase is not None:
        b = b.status({"phase": phase, "submittedAt": (T0 + timedelta(minutes=minute)).isoformat()})
    raw = b.raw()
    raw["metadata"]["resourceVersion"] = "1"
    return raw


class FakeApi:
    """The API server's LIST of Tasks, paged: the requests the client makes, noted in `calls` in
    order (a LIST, a PATCH, a GET)."""

    def __init__(self, objects: list[dict[str, Any]], pools: dict[str, dict[str, Any]] | None = None) -> None:
        self.objects = sorted(objects, key=storage_order)
        self.pools = pools or {}
        self.calls: list[tuple[str, Any]] = []
        self.expire: set[str] = set()
        """Tokens answered 410, as if the snapshot they point into were compacted."""
        self.version = 100

    def _matching(self, namespace: str | None, field_selector: str | None) -> list[dict[str, Any]]:
        wanted = dict(part.split("=", 1) for part in field_selector.split(",")) if field_selector else {}

        def value(obj: dict[str, Any], path: str) -> Any:
            head, _, tail = path.partition(".")
            return (obj.get(head) or {}).get(tail)
        return [o for o in self.objects if (namespace is None or o["metadata"]["namespace"] == namespace)
                and all(value(o, path) == v or (path == "metadata.name" and o["metadata"]["name"] == v)
                        for path, v in wanted.items())]

    def _list(self, namespace: str | None, limit: int | None = None, _continue: str | None = None,
              field_selector: str | None = None, label_selector: str | None = None) -> dict[str, Any]:
        self.calls.append(("LIST", {"limit": limit, "continue": _continue, "fieldSelector": field_selector}))
        if _continue in self.expire:
            raise error_of(410, "Gone", json.dumps({"kind": "Status", "code": 410, "reason": "Expired",
                                                    "metadata": {"continue": "fresh:" + _continue}}))
        items = self._matching(namespace, field_selector)
        start = int((_continue or "0").removeprefix("fresh:"))
        end = len(items) if limit is None else start + limit
        meta: dict[str, Any] = {"resourceVersion": str(self.version)}
        if end < len(items):
            meta["continue"] = str(end)
        self.version += 1  # a later page of the same listing says the first page's version in a real server
        return {"items": [json.loads(json.dumps(o)) for o in items[start:end]], "metadata": meta}

    def request(self, method: str, path: str, params: dict[str, Any] | None = None, body: Any = None,
                **_: Any) -> dict[str, Any]:
        """`/apis/cronoq.io/v1alpha1[/namespaces/NS]/PLURAL[/NAME]`, as the client asks for it."""
        parts = path.removeprefix("/apis/cronoq.io/v1alpha1/").split("/")
        namespace = parts[1] if parts[0] == "namespaces" else None
        plural, *name = parts[2:] if namespace is not None else parts
        params = params or {}
        if method == "GET" and not name:
            assert plural == "tasks"
            return self._list(namespace, params.get("limit"), params.get("continue"), params.get("fieldSelector"),
                              params.get("labelSelector"))
        if method == "GET":
            self.calls.append(("GET", name[0]))
            found = (self.pools.get(name[0]) if plural == "taskpools"
                     else next((o for o in self.objects if o["metadata"]["name"] == name[0]), None))
            if found is None:
                raise error_of(404, "Not Found")
            return found
        assert method == "PATCH", method
        self.calls.append(("PATCH", name[0]))
        obj = next(o for o in self.objects if o["metadata"]["name"] == name[0])
        obj["spec"].update(body["spec"])
        return obj

    def lists(self) -> list[dict[str, Any]]:
        return [what for verb, what in self.calls if verb == "LIST"]


def client_of(api: FakeApi, page_size: int = 2) -> Client:
    c = Client("ns", api=api, page_size=page_size)  # type: ignore[arg-type]
    c.in_namespace = lambda namespace: c  # type: ignore[method-assign]  # the tests' tasks are all in ns
    return c


def names(pages: Any) -> list[list[str]]:
    return [[t.metadata.name for t in page] for page in pages]


def test_a_listing_is_read_a_page_at_a_time_each_page_asked_for_when_its_turn_comes() -> None:
    api = FakeApi([task(n) for n in "edcba"])
    pages = iter(client_of(api).pages())
    assert [t.metadata.name for t in next(pages)] == ["a", "b"]
    assert api.lists() == [{"limit": 2, "continue": None, "fieldSelector": None}]  # one page, nothing ahead
    assert names(pages) == [["c", "d"], ["e"]]
    assert [q["continue"] for q in api.lists()] == [None, "2", "4"]
    assert [t.metadata.name for t in client_of(api).list()] == list("abcde")


def test_filters_go_to_the_server_and_several_phases_are_one_listing_each_merged_in_its_order() -> None:
    """Field selectors have no `in`: each phase is listed on its own and the listings are merged by
    the storage key, so `a-b/x` comes before `a/x` as the API server lists them."""
    api = FakeApi([task("x", "Failed", namespace="a"), task("y", "DeadLettered", namespace="a"),
                   task("x", "DeadLettered", namespace="a-b"), task("z", "Failed", namespace="b"),
                   task("w", "Succeeded", namespace="a")])
    listed = client_of(api, page_size=1).pages(phase=["Failed", "DeadLettered"], pool="default",
                                               all_namespaces=True)
    assert [(t.metadata.namespace, t.metadata.name) for page in listed for t in page] == [
        ("a-b", "x"), ("a", "x"), ("a", "y"), ("b", "z")]
    assert {q["fieldSelector"] for q in api.lists()} == {"status.phase=DeadLettered,spec.pool=default",
                                                         "status.phase=Failed,spec.pool=default"}


def test_an_expired_token_is_gone_on_from_a_newer_snapshot_when_shown_and_the_listing_says_so() -> None:
    api = FakeApi([task(n) for n in "abcde"])
    api.expire = {"2"}
    pages = client_of(api).pages()
    assert names(pages) == [["a", "b"], ["c", "d"], ["e"]]
    assert pages.mixed
    assert [q["continue"] for q in api.lists()] == [None, "2", "fresh:2", "4"]


def test_a_watched_listing_whose_token_expires_starts_again_from_one_snapshot() -> None:
    """A watch follows the listing from its version: the listing must be one snapshot, so it is
    read again from the first page, and only the second reading's names count as listed."""
    api = FakeApi([task(n) for n in "abc"])
    api.expire = {"2"}
    c = client_of(api)
    watched: list[str] = []

    class Stop(Exception):
        pass

    def fake_watch(rv: str, *args: Any, **kwargs: Any) -> Any:
        watched.append(rv)
        raise Stop()
        yield  # a generator, as the real one

    c._watch = fake_watch  # type: ignore[method-assign]
    seen: list[tuple[str, Any]] = []

    def expire_once() -> None:
        if len(api.lists()) >= 3:  # the reading started again: its token lives on
            api.expire = set()
        assert len(api.lists()) < 10, api.lists()
    with pytest.raises(Stop):
        for kind, obj in c._follow(None):
            seen.append((kind, obj if kind == SYNCED else obj["metadata"]["name"]))
            expire_once()
    assert [q["continue"] for q in api.lists()] == [None, "2", None, "2"]
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c"),
                    (SYNCED, {"a", "b", "c"})]
    assert watched == ["101"]  # the second reading's first page (its second page said 102)


def args_of(*argv: str) -> argparse.Namespace:
    args = parser().parse_args(list(argv))
    args.trailing = []
    cli_tasks.check_input(args)
    return args


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_get_writes_the_list_an_item_at_a_time_in_the_same_text_as_the_whole_list(fmt: str, capsys) -> None:
    api = FakeApi([task(n, "Queued") for n in "abcde"])
    assert listing.get(args_of("get", "-o", fmt), client_of(api)) == 0
    whole = render.dump([t.to_dict() for t in client_of(FakeApi([task(n, "Queued") for n in "abcde"])).list()],
                        fmt, single=False)
    assert capsys.readouterr().out == whole + "\n"
    assert listing.get(args_of("get", "-o", fmt, "--phase", "Failed"), client_of(api)) == 0
    assert capsys.readouterr().out == render.dump([], fmt, single=False) + "\n"


def test_get_prints_a_table_page_by_page_with_its_header_once(capsys) -> None:
    api = FakeApi([task(n, "Queued") for n in "abcde"])
    written: list[str] = []
    listed = api.request

    def noting(*args: Any, **kwargs: Any) -> dict[str, Any]:
        written.append(capsys.readouterr().out)  # what was written before this page was asked for
        return listed(*args, **kwargs)
    api.request = noting  # type: ignore[method-assign]
    assert listing.get(args_of("get", "--chunk-size", "2"), client_of(api, 2)) == 0
    written.append(capsys.readouterr().out)
    assert [w.count("default") for w in written] == [0, 2, 2, 1]  # each page's rows out before the next is read
    out = "".join(written)
    assert out.count("NAME") == 1 and out.splitlines()[0].split() == ["NAME", "POOL", "STATUS", "ATTEMPT", "AGE",
                                                                      "MESSAGE"]


def test_chunk_size_is_a_whole_number_of_at_least_one() -> None:
    from cronoq.cli import UsageError

    assert args_of("list", "--chunk-size", "5").chunk_size == 5
    assert args_of("list").chunk_size == 500
    with pytest.raises(UsageError, match="chunk-size"):
        args_of("list", "--chunk-size", "0")


def test_a_bulk_verb_acts_on_each_page_before_it_reads_the_next(capsys) -> None:
    api = FakeApi([task(n, "Queued") for n in "abcde"] + [task("f", "Succeeded")])
    assert bulk.cancel(args_of("cancel", "--all", "--chunk-size", "2"), client_of(api)) == 0
    assert [(verb, what if verb != "LIST" else what["continue"]) for verb, what in api.calls if verb != "GET"] == [
        ("LIST", None), ("PATCH", "a"), ("PATCH", "b"), ("LIST", "2"), ("PATCH", "c"), ("PATCH", "d"),
        ("LIST", "4"), ("PATCH", "e")]
    assert capsys.readouterr().err == "5 tasks cancelled\n"


def pool(queued: int) -> dict[str, Any]:
    return {"apiVersion": "cronoq.io/v1alpha1", "kind": "TaskPool", "metadata": {"name": "default", "namespace": "ns"},
            "spec": {"concurrency": 1, "paused": True}, "status": {"queued": queued, "running": 0}}


def why_queued(task: Task, client: Client, place_anyway: bool = False) -> str:
    """describe's Waiting line, from the explanation it reads the pool and the queue for."""
    said = describe._explained(task, client.pool(task.spec.pool), client, place_anyway, datetime.now(timezone.utc))
    assert said.wait is not None
    return said.waiting_text() or ""


def test_describe_works_out_the_place_page_by_page_but_reads_no_queue_past_the_limit() -> None:
    queued = [task(f"t{i}", "Queued", minute=i) for i in range(5)]
    api = FakeApi(queued, {"default": pool(5)})
    c = client_of(api)
    me = c.get("t3")
    assert why_queued(me, c).startswith("4th of 5 in pool default's queue (ahead: t0, t1, t2)")
    assert {q["fieldSelector"] for q in api.lists()} == {"status.phase=Queued,spec.pool=default"}
    assert len(api.lists()) == 3  # pages of 2

    api = FakeApi(queued, {"default": pool(describe.PLACE_LIMIT + 1)})
    c = client_of(api)
    said = why_queued(me, c)
    assert said.startswith(f"one of {describe.PLACE_LIMIT + 1:,} queued in pool default")
    assert "--place" in said and api.lists() == []
    assert why_queued(me, c, place_anyway=True).startswith("4th of 5")


def test_describe_past_the_limit_reads_the_place_between_the_pools_queue_marks_and_lists_nothing() -> None:
    queued = [task(f"t{i}", "Queued", minute=i) for i in range(5)]
    marked = pool(describe.PLACE_LIMIT + 1)
    marked["status"]["queueMarks"] = {"takenAt": "2026-01-01T00:00:00Z", "waiting": describe.PLACE_LIMIT + 1, "marks": [
        {"place": 1, "name": "t0", "submittedAt": queued[0]["status"]["submittedAt"]},
        {"place": 1000, "name": "t4", "submittedAt": queued[4]["status"]["submittedAt"]},
        {"place": describe.PLACE_LIMIT + 1, "name": "zz", "submittedAt": "2030-01-01T00:00:00Z"}]}
    api = FakeApi(queued, {"default": marked})
    c = client_of(api)
    said = why_queued(c.get("t3"), c)
    assert said.startswith("between the 2nd and the 999th of 2,001 in pool default's queue (as of 00:00:00Z")
    assert "--place" in said and api.lists() == []


def test_tree_reads_the_tasks_it_shows_and_no_others(capsys) -> None:
    api = FakeApi([task("root", dependsOn=[{"task": "left"}, {"task": "right"}]),
                   task("left", dependsOn=[{"task": "base"}]), task("right", dependsOn=[{"task": "base"}]),
                   task("base"), *[task(f"other{i}") for i in range(5)]])
    assert reading.tree(args_of("tree", "root"), client_of(api)) == 0
    assert api.lists() == []
    assert sorted(what for verb, what in api.calls if verb == "GET") == ["base", "left", "right", "root"]
    assert "base" in capsys.readouterr().out


def test_completion_reads_pages_only_up_to_the_names_past_the_prefix() -> None:
    api = FakeApi([task(n) for n in ("alpha", "beta-1", "beta-2", "beta-3", "gamma", "zeta", "zz")])
    assert _task_names(client_of(api), "beta") == ["beta-1", "beta-2", "beta-3"]
    assert len(api.lists()) == 3  # the page with gamma ends it; the one with zeta and zz is never read
