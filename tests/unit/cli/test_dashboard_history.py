"""The dashboard's history page without a cluster (issue 53, item 3): executions read from a real
SQLite archive a page at a time, newest first, filtered by outcome, the task's phase, pool, key,
name, namespace and since; the dashboard's own namespace only unless it serves every one; a row
links to its task only while the cluster (the cache) holds that very task. The filter's parsing is
pure (views.HistoryFilter)."""
from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from urllib.parse import urlencode

import pytest
from aiohttp.test_utils import TestClient, TestServer

from cronoq.apiserver.config import Connection
from cronoq.apiserver.sync import Api
from cronoq.api import Task
from cronoq.archive import Database
from cronoq.cli.dashboard import views
from cronoq.cli.dashboard.cache import Cache
from cronoq.cli.dashboard.server import STATE, make_app
from cronoq.client import Client
from cronoq.engine.history import AttemptRow, Rows, TaskRow

PORT = 18766
HOST = {"Host": f"127.0.0.1:{PORT}"}
NOW = datetime.now(timezone.utc).replace(microsecond=0)


@pytest.fixture(autouse=True)
def now() -> None:
    """The rows' times count back from when the test runs, not from when the suite was collected: a
    full suite runs for most of an hour, and `since=1h` is asked of the server's own clock."""
    global NOW
    NOW = datetime.now(timezone.utc).replace(microsecond=0)


def attempt(uid: str, name: str, number: int, outcome: str, minutes_ago: int, *, namespace: str = "ns",
            pool: str = "p", key: str | None = None) -> AttemptRow:
    finished = NOW - timedelta(minutes=minutes_ago)
    return AttemptRow(task_uid=uid, attempt=number, namespace=namespace, name=name, pool=pool, key=key,
                      delivery="Job", trigger="First" if number == 1 else "Retry", outcome=outcome,
                      reason="Completed" if outcome == "Success" else "Error", exit_code=0 if outcome == "Success" else 1,
                      response_code=None, message=f"{name} attempt {number}", dispatched_at=finished,
                      started_at=finished, finished_at=finished, duration_ms=1500, job=f"{name}-a{number}", worker=None)


def finished(uid: str, name: str, phase: str, attempts: int, minutes_ago: int, *, namespace: str = "ns",
             pool: str = "p", key: str | None = None) -> TaskRow:
    at = NOW - timedelta(minutes=minutes_ago)
    return TaskRow(task_uid=uid, namespace=namespace, name=name, pool=pool, key=key, phase=phase, attempts=attempts,
                   reason=None, message="done", output=None, output_available=False, duplicate_of=None,
                   created_at=at, submitted_at=at, finished_at=at)


def fill(url: str) -> None:
    """flaky (2 Retryable then a Success, still in the cluster), broken (dead-lettered, deleted),
    keyed (a success 3 days ago, pool q, key k), other (another namespace's)."""
    db = Database.open(url)
    db.migrate()
    db.write([
        Rows(tuple(attempt("u-flaky", "flaky", n, o, m) for n, o, m in
                   ((1, "Retryable", 30), (2, "Retryable", 20), (3, "Success", 10))),
             finished("u-flaky", "flaky", "Succeeded", 3, 10)),
        Rows((attempt("u-broken", "broken", 1, "Retryable", 5),), finished("u-broken", "broken", "DeadLettered", 1, 5)),
        Rows((attempt("u-keyed", "keyed", 1, "Success", 3 * 24 * 60, pool="q", key="k"),),
             finished("u-keyed", "keyed", "Succeeded", 1, 3 * 24 * 60, pool="q", key="k")),
        Rows((attempt("u-other", "other", 1, "Success", 1, namespace="other"),),),
    ])
    db.close()


def cache_with_flaky() -> Cache:
    cache = Cache(Client("ns", api=Api(Connection(host="http://127.0.0.1:9"))), all_namespaces=False)
    cache._objects["tasks"][("ns", "flaky")] = Task.model_validate(
        {"metadata": {"name": "flaky", "namespace": "ns", "uid": "u-flaky"}, "spec": {"image": "busybox"},
         "status": {"phase": "Succeeded"}})
    cache._objects["tasks"][("ns", "broken")] = Task.model_validate(  # a new task of the deleted one's name
        {"metadata": {"name": "broken", "namespace": "ns", "uid": "u-broken-2"}, "spec": {"image": "busybox"}})
    for event in cache.synced.values():
        event.set()
    return cache


def run(check, archive: str | None, all_namespaces: bool = False) -> None:
    async def main() -> None:
        cache = cache_with_flaky()
        app = make_app(cache.client, all_namespaces, PORT, cache=cache, archive=archive)
        async with TestClient(TestServer(app, host="127.0.0.1")) as http:
            assert (await http.get(f"/?token={app[STATE].access}", headers=HOST, allow_redirects=False)).status == 303
            await check(http)

    asyncio.run(main())


def executions(html: str) -> list[tuple[str, int]]:
    return [(name, int(number)) for name, number in re.findall(r'data-task="([^"]+)" data-attempt="(\d+)"', html)]


def test_the_history_page_lists_filters_and_pages_the_archives_executions(tmp_path):
    url = f"sqlite:///{tmp_path}/archive.db"
    fill(url)

    async def check(http):
        page = await (await http.get("/history", headers=HOST)).text()
        assert executions(page) == [("broken", 1), ("flaky", 3), ("flaky", 2), ("flaky", 1), ("keyed", 1)], \
            "newest first, the dashboard's namespace only"
        assert '<a href="/tasks/ns/flaky">flaky</a>' in page, "still in the cluster: a link"
        assert "broken <span" in page and 'href="/tasks/ns/broken"' not in page, "a new task of its name is not it"
        for query, wanted in (
                ("outcome=Retryable", [("broken", 1), ("flaky", 2), ("flaky", 1)]),
                ("phase=DeadLettered", [("broken", 1)]),
                ("pool=q", [("keyed", 1)]), ("key=k", [("keyed", 1)]), ("name=flaky&outcome=Success", [("flaky", 3)]),
                ("since=1h", [("broken", 1), ("flaky", 3), ("flaky", 2), ("flaky", 1)]),
                (urlencode({"since": (NOW - timedelta(minutes=15)).isoformat()}), [("broken", 1), ("flaky", 3)]),
                ("namespace=other", [("broken", 1), ("flaky", 3), ("flaky", 2), ("flaky", 1), ("keyed", 1)])):
            assert executions(await (await http.get(f"/history?{query}", headers=HOST)).text()) == wanted, query
        async def follow(html: str, rel: str) -> str:
            link = re.search(rf'<a rel="{rel}" href="([^"]+)"', html)
            assert link is not None, f"no {rel} link"
            return await (await http.get(link.group(1).replace("&amp;", "&"), headers=HOST)).text()

        first = await (await http.get("/history?size=2", headers=HOST)).text()
        assert executions(first) == [("broken", 1), ("flaky", 3)] and 'rel="prev"' not in first
        second = await follow(first, "next")
        assert executions(second) == [("flaky", 2), ("flaky", 1)] and "Page 2:" in second
        last = await follow(second, "next")
        assert executions(last) == [("keyed", 1)] and 'rel="next"' not in last and "Page 3:" in last
        back = await follow(last, "prev")
        assert executions(back) == executions(second) and "Page 2:" in back
        newest = await follow(back, "prev")
        assert executions(newest) == executions(first) and "Page 1:" in newest and 'rel="prev"' not in newest
        bad = await (await http.get("/history?outcome=Nope", headers=HOST)).text()
        assert "Bad filter: outcome: &#39;Nope&#39; is none of" in bad and not executions(bad)

    run(check, url)


def test_across_namespaces_the_history_names_them_and_filters_on_them(tmp_path):
    url = f"sqlite:///{tmp_path}/archive.db"
    fill(url)

    async def check(http):
        page = await (await http.get("/history", headers=HOST)).text()
        assert executions(page)[0] == ("other", 1) and "<th>Namespace</th>" in page
        assert executions(await (await http.get("/history?namespace=other", headers=HOST)).text()) == [("other", 1)]

    run(check, url, all_namespaces=True)


def test_without_an_archive_or_with_one_that_cannot_be_read_the_page_says_so(tmp_path):
    async def no_archive(http):
        page = await (await http.get("/history", headers=HOST)).text()
        assert "No archive: start the dashboard with <code>--archive URL</code>" in page and not executions(page)

    run(no_archive, None)

    async def missing(http):
        page = await (await http.get("/history", headers=HOST)).text()
        assert "The archive cannot be read: no archive at" in page

    run(missing, f"sqlite:///{tmp_path}/missing.db")


@pytest.mark.parametrize("query, says", [
    ({"outcome": "Done"}, "outcome: 'Done' is none of"),
    ({"phase": "Running"}, "phase: 'Running' is none of"),
    ({"since": "yesterday"}, "since: 'yesterday' is neither a duration"),
    ({"page": "0"}, "page: 0 is not between 1 and"),
    ({"older": "yesterday,u,1"}, "older: 'yesterday,u,1' is not a place in the history"),
    ({"newer": "2026-12-01T00:00:00Z,u"}, "newer: .* is not a place in the history"),
])
def test_a_bad_history_filter_names_its_field(query, says):
    with pytest.raises(views.BadFilter, match=says):
        views.HistoryFilter.parse(query, NOW)


def test_the_history_filter_asks_the_archive_for_one_page_and_one_row_more_from_its_cursor():
    place = f"{NOW.isoformat()},u-1,2"
    wanted = views.HistoryFilter.parse({"outcome": "Retryable", "since": "2h", "page": "3", "size": "20",
                                        "namespace": "ignored", "older": place}, NOW)
    asked = wanted.archive_filter(NOW, "ns")
    assert (asked.namespace, asked.outcome, asked.since, asked.limit, asked.older_than, asked.newer_than) == \
        ("ns", "Retryable", NOW - timedelta(hours=2), 21, (NOW, "u-1", 2), None)
    assert wanted.archive_filter(NOW, None).namespace == "ignored"
    rows = [{"finished_at": NOW - timedelta(seconds=i), "task_uid": f"u{i}", "attempt": 1} for i in range(21)]
    page = views.history_page(rows, wanted)
    assert len(page.rows) == 20 and page.number == 3
    assert page.older == views.place(rows[19]) and page.newer == views.place(rows[0])
    assert views.history_page(rows[:20], wanted).older is None
    first = views.history_page(rows, views.HistoryFilter(size=20))
    assert first.newer is None and first.number == 1
    back = views.history_page(rows, replace(wanted, older="", newer=place))  # the row more is the newest: dropped
    assert back.rows == rows[1:] and back.newer == views.place(rows[1]) and back.older == views.place(rows[20])
    assert views.history_page(rows[1:], replace(wanted, older="", newer=place)).number == 1, "the newest page"
    assert wanted.query(page=4, older="x") == "namespace=ignored&outcome=Retryable&since=2h&older=x&page=4&size=20"
