"""The dashboard's task page shows the queue controls: a delayed task's start time and how far ahead it
is, a task's fairness group, and, while it waits for its pool's rate limit, when the next start was due."""
from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from aiohttp.test_utils import TestClient, TestServer
from cronoq.apiserver.config import Connection
from cronoq.apiserver.sync import Api

from cronoq.api import Task, TaskPool
from cronoq.cli.dashboard.cache import Cache
from cronoq.cli.dashboard.server import STATE, make_app
from cronoq.client import Client

PORT = 18766
HOST = {"Host": f"127.0.0.1:{PORT}"}


def task_pages(tasks: dict[str, dict], pool: dict | None = None) -> dict[str, str]:
    """Each Task (name → manifest without its name) put in the dashboard's cache, with TaskPool p
    of this spec if given, and its page."""
    async def main() -> dict[str, str]:
        cache = Cache(Client("ns", api=Api(Connection(host="http://127.0.0.1:9"))), all_namespaces=False)
        for name, manifest in tasks.items():
            cache._objects["tasks"][("ns", name)] = Task.model_validate(
                {**manifest, "metadata": {"name": name, "namespace": "ns", **manifest["metadata"]}})
        if pool is not None:
            cache._objects["taskpools"][("ns", "p")] = TaskPool.model_validate(
                {"metadata": {"name": "p", "namespace": "ns"}, "spec": pool})
        for event in cache.synced.values():
            event.set()
        app = make_app(cache.client, False, PORT, cache=cache)
        async with TestClient(TestServer(app, host="127.0.0.1")) as http:
            await http.get(f"/?token={app[STATE].access}", headers=HOST, allow_redirects=False)
            return {name: await (await http.get(f"/tasks/ns/{name}", headers=HOST)).text() for name in tasks}

    return asyncio.run(main())


def test_the_task_page_says_not_before_and_how_far_ahead() -> None:
    created = datetime.now(timezone.utc).replace(microsecond=0)
    pages = task_pages({name: {"metadata": {"creationTimestamp": created.isoformat()},
                               "spec": {"image": "busybox", "pool": "p", **spec}, "status": {"phase": "Blocked"}}
                        for name, spec in (("later", {"startDelay": "2h"}), ("plain", {}))})
    start = created + timedelta(hours=2)
    page = pages["later"]
    assert f"<th>Not before</th><td>{start} (in 11" in page or f"<th>Not before</th><td>{start} (in 120m)" in page
    assert "Not before" not in pages["plain"]


def test_the_task_page_shows_a_tasks_group_and_its_pools_next_start_while_rate_limited() -> None:
    due = "2026-12-06T12:00:01.500000Z"
    pages = task_pages({name: {"metadata": {"creationTimestamp": "2026-12-06T12:00:00Z"},
                               "spec": {"image": "busybox", "pool": "p", "group": "acme"}, "status": status}
                        for name, status in (("held", {"phase": "Queued", "nextStartAt": due, "conditions": [
                                                 {"type": "Running", "status": "False", "reason": "RateLimited",
                                                  "lastTransitionTime": "2026-12-06T12:00:00Z"}]}),
                                             ("told", {"phase": "Queued", "nextStartAt": due}),
                                             ("running", {"phase": "Running"}))},
                       pool={"rateLimit": {"startsPerSecond": 2}})
    held, running = pages["held"], pages["running"]
    assert "<th>Group</th><td>acme</td>" in held and "<th>Group</th><td>acme</td>" in running
    assert "<th>Rate-limited</th><td>the pool's next start was due at 2026-12-06 12:00:01.500000+00:00" in held
    assert "Rate-limited" not in running
    assert "Rate-limited" not in pages["told"], "only while the operator says it waits for the rate limit"


def test_the_task_page_shows_its_concurrency_keys_and_why_it_waits_for_one() -> None:
    said = "debouncing key rebuild/site: starts at 12:00:30Z unless a newer task arrives (at the latest 12:10:00Z)"
    pages = task_pages({name: {"metadata": {"creationTimestamp": "2026-12-06T12:00:00Z"},
                               "spec": {"image": "busybox", "pool": "p", "concurrencyKeys": ["rebuild/site"]},
                               "status": status}
                        for name, status in (("debouncing", {"phase": "Queued", "message": said, "conditions": [
                                                 {"type": "Running", "status": "False", "reason": "Debouncing",
                                                  "message": said, "lastTransitionTime": "2026-12-06T12:00:00Z"}]}),
                                             ("running", {"phase": "Running"}))},
                       pool={})
    assert "<th>Concurrency keys</th><td>rebuild/site</td>" in pages["debouncing"]
    assert f"<th>Waiting for its key</th><td>{said}</td>" in pages["debouncing"]
    assert "Waiting for its key" not in pages["running"] and "<th>Concurrency keys</th>" in pages["running"]
