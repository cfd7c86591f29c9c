"""The dashboard's server without a cluster: its guards (the Host, the launch URL's access, the
action token), pages
rendered from a filled cache, a bad filter answered on the page, and the event stream saying
which kind changed. Nothing here reaches an API server: the cache is filled by hand and never
started, and every request below is answered before a write would be made."""
from __future__ import annotations

import asyncio

from aiohttp.test_utils import TestClient, TestServer
from cronoq.apiserver.config import Connection
from cronoq.apiserver.sync import Api

from cronoq.api import Task, TaskPool, TaskSchedule
from cronoq.cli.dashboard.cache import Cache
from cronoq.cli.dashboard.server import STATE, TOKEN_HEADER, make_app, session_cookie
from cronoq.client import Client

PORT = 18765


def _cache() -> Cache:
    cache = Cache(Client("ns", api=Api(Connection(host="http://127.0.0.1:9"))), all_namespaces=False)
    for i, phase in enumerate(("Queued", "DeadLettered", "Running")):
        task = Task.model_validate({"metadata": {"name": f"t{i}", "namespace": "ns",
                                                 "creationTimestamp": f"2026-11-05T12:00:0{i}Z"},
                                    "spec": {"image": "busybox", "pool": "p"}, "status": {"phase": phase}})
        cache._objects["tasks"][("ns", f"t{i}")] = task
    cache._objects["taskpools"][("ns", "p")] = TaskPool.model_validate(
        {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"concurrency": 4, "paused": True}})
    cache._objects["taskschedules"][("ns", "nightly")] = TaskSchedule.model_validate(
        {"metadata": {"name": "nightly", "namespace": "ns"},
         "spec": {"schedule": "0 3 * * *", "taskTemplate": {"spec": {"image": "busybox"}}}})
    for event in cache.synced.values():
        event.set()
    return cache


def run(check, all_namespaces: bool = False, *, signed_in: bool = True) -> None:
    """`check(http, cache, app)` with a client that opened the launch URL (unless `signed_in` is false)."""
    async def main() -> None:
        cache = _cache()
        app = make_app(cache.client, all_namespaces, PORT, cache=cache)
        async with TestClient(TestServer(app, host="127.0.0.1")) as http:
            if signed_in:
                launch = await http.get(f"/?token={app[STATE].access}", headers=HOST, allow_redirects=False)
                assert launch.status == 303 and launch.headers["Location"] == "/"
            await check(http, cache, app)

    asyncio.run(main())


HOST = {"Host": f"127.0.0.1:{PORT}"}


def test_without_the_launch_urls_cookie_or_token_pages_reads_and_actions_are_refused():
    """Any local user can connect to 127.0.0.1: only the browser that opened the printed URL is let in."""
    async def check(http, cache, app):
        state = app[STATE]
        for method, path in (("GET", "/"), ("GET", "/tasks"), ("GET", "/tasks/ns/t1"), ("GET", "/tasks/ns/t1/events"),
                             ("GET", "/tasks/ns/t1/logs/1"), ("GET", "/tasks/ns/t1/kueue"), ("GET", "/schedules"),
                             ("GET", "/events"), ("POST", "/actions/retry")):
            for headers in ({}, {"Cookie": f"{session_cookie(PORT)}=wrong"}, {"Cookie": f"other={state.session}"}):
                answer = await http.request(method, f"{path}?token=wrong", data={"namespace": "ns", "name": "t1"},
                                            headers={**HOST, TOKEN_HEADER: state.token, **headers})
                assert answer.status == 403, (method, path, headers)
                assert "open the URL `cronoq dashboard` printed when it started" in await answer.text()
        assert (await http.get("/static/dashboard.css", headers=HOST)).status == 200  # nothing of the cluster
        # The launch URL: the cookie (HttpOnly, SameSite=Strict), and the same page without the token.
        launch = await http.get(f"/tasks?phase=Queued&token={state.access}", headers=HOST, allow_redirects=False)
        assert (launch.status, launch.headers["Location"]) == (303, "/tasks?phase=Queued")
        cookie = launch.cookies[session_cookie(PORT)]
        assert cookie.value == state.session and cookie["httponly"] and cookie["samesite"] == "Strict"
        assert cookie.value not in state.launch_url(PORT) and state.access in state.launch_url(PORT)
        assert (await http.get("/tasks?phase=Queued", headers=HOST)).status == 200  # the cookie now
        # An action needs the action token besides.
        answer = await http.post("/actions/retry", data={"namespace": "ns", "name": "t1"}, headers=HOST)
        assert answer.status == 403 and TOKEN_HEADER in await answer.text()

    run(check, signed_in=False)


def test_a_request_for_another_host_is_refused():
    async def check(http, cache, app):
        answer = await http.get("/", headers={"Host": f"attacker.example:{PORT}"})
        assert answer.status == 421
        assert (await http.get("/", headers=HOST)).status == 200

    run(check)


def test_an_action_without_the_pages_token_is_refused_before_any_write():
    async def check(http, cache, app):
        answer = await http.post("/actions/retry", data={"namespace": "ns", "name": "t1"}, headers=HOST)
        assert answer.status == 403 and TOKEN_HEADER in await answer.text()
        answer = await http.post("/actions/nope", data={"namespace": "ns", "name": "t1"},
                                 headers={**HOST, TOKEN_HEADER: app[STATE].token})
        assert answer.status == 404

    run(check)


def test_pages_render_the_cache_and_carry_the_token():
    async def check(http, cache, app):
        overview = await (await http.get("/", headers=HOST)).text()
        assert 'data-pool="ns/p"' in overview and "paused" in overview and app[STATE].token in overview
        listing = await http.get("/tasks?phase=DeadLettered", headers=HOST)
        assert listing.headers["Cache-Control"] == "no-store"
        body = await listing.text()
        assert 'data-task="t1"' in body and 'data-task="t0"' not in body
        part = await (await http.get("/tasks", headers={**HOST, "HX-Request": "true", "HX-Target": "live"})).text()
        assert "<html" not in part and part.count("data-task=") == 3
        bad = await (await http.get("/tasks?size=0", headers=HOST)).text()
        assert "Bad filter: size: 0 is not between 1 and 500" in bad
        assert (await http.get("/tasks/ns/missing", headers=HOST)).status == 404
        schedules = await (await http.get("/schedules", headers=HOST)).text()
        assert 'data-schedule="ns/nightly"' in schedules and schedules.count(" 03:00:00 UTC") == 3
        gone = await http.get("/tasks/ns/missing", headers={**HOST, "HX-Request": "true", "HX-Target": "live"})
        assert gone.status == 200 and "No task missing in namespace ns" in await gone.text()  # said on the open page

    run(check)


def test_the_event_stream_names_the_kind_and_the_task_that_changed():
    async def check(http, cache, app):
        stream = await http.get("/events?task=ns/t0", headers=HOST)
        assert (await stream.content.readline()) == b": connected\n"
        await stream.content.readline()
        cache.on_change("tasks", {("ns", "t0")})
        cache.on_change("tasks", {("ns", "t2")})  # within the same burst: one event
        text = b""
        while b"event: task\n" not in text:
            text += await asyncio.wait_for(stream.content.readline(), 5)
        assert text.count(b"event: tasks\n") == 1
        stream.close()

    run(check)


def test_a_kind_the_user_may_not_list_is_shown_as_the_refusal():
    async def check(http, cache, app):
        cache.errors["taskschedules"] = 'taskschedules.cronoq.io is forbidden: User "jane" cannot list (403 Forbidden)'
        page = await (await http.get("/schedules", headers=HOST)).text()
        assert "Cannot read taskschedules: taskschedules.cronoq.io is forbidden: User &#34;jane&#34;" in page

    run(check)


def test_across_namespaces_the_list_names_them_and_filters_on_them():
    async def check(http, cache, app):
        other = cache.get("tasks", "ns", "t0").model_copy(update={"metadata": cache.get("tasks", "ns", "t0").metadata
                                                                  .model_copy(update={"namespace": "other"})})
        cache._objects["tasks"][("other", "t0")] = other
        page = await (await http.get("/tasks", headers=HOST)).text()
        assert "every namespace" in page and '<input name="namespace"' in page and page.count("data-task=") == 4
        only = await (await http.get("/tasks?namespace=other", headers=HOST)).text()
        assert only.count("data-task=") == 1 and 'href="/tasks/other/t0"' in only
        overview = await (await http.get("/", headers=HOST)).text()
        assert 'data-pool="other/p"' in overview and 'data-pool="ns/p"' in overview

    run(check, all_namespaces=True)


def test_the_task_page_shows_the_tasks_own_limits_as_times():
    async def check(http, cache, app):
        cache._objects["tasks"][("ns", "due")] = Task.model_validate({
            "metadata": {"name": "due", "namespace": "ns", "creationTimestamp": "2026-11-05T12:00:00Z"},
            "spec": {"image": "busybox", "pool": "p", "startDeadline": "5m", "deadline": "1h"},
            "status": {"phase": "Queued"}})
        page = await (await http.get("/tasks/ns/due", headers=HOST)).text()
        assert "<th>Start deadline</th><td>2026-11-05 12:05:00+00:00</td>" in page, page
        assert "<th>Deadline</th><td>2026-11-05 13:00:00+00:00</td>" in page
        plain = await (await http.get("/tasks/ns/t0", headers=HOST)).text()
        assert 'class="limit"' not in plain

    run(check)


def test_the_task_page_shows_the_checkpoint_and_the_attempt_that_saved_it():
    async def check(http, cache, app):
        cache._objects["tasks"][("ns", "resumed")] = Task.model_validate({
            "metadata": {"name": "resumed", "namespace": "ns", "creationTimestamp": "2026-11-05T12:00:00Z"},
            "spec": {"image": "busybox", "pool": "p"},
            "status": {"phase": "Running", "attempt": 2,
                       "checkpoint": {"attempt": 1, "data": '{"done":9,"note":"<b>"}', "savedAt": "2026-11-05T12:01:00Z"}}})
        page = await (await http.get("/tasks/ns/resumed", headers=HOST)).text()
        assert "saved by attempt 1" in page and "attempt 2 started from it" in page, page
        assert "{&#34;done&#34;:9,&#34;note&#34;:&#34;&lt;b&gt;&#34;}" in page, "escaped, like any tenant's text"
        plain = await (await http.get("/tasks/ns/t0", headers=HOST)).text()
        assert 'class="checkpoint"' not in plain

    run(check)


def test_the_task_page_shows_who_submitted_it_escaped():
    async def check(http, cache, app):
        cache._objects["tasks"][("ns", "theirs")] = Task.model_validate({
            "metadata": {"name": "theirs", "namespace": "ns", "creationTimestamp": "2026-11-05T12:00:00Z",
                         "annotations": {"cronoq.io/submitter": "system:serviceaccount:team-a:<ci>"}},
            "spec": {"image": "busybox", "pool": "p"}, "status": {"phase": "Queued"}})
        page = await (await http.get("/tasks/ns/theirs", headers=HOST)).text()
        assert "<th>Submitter</th><td>system:serviceaccount:team-a:&lt;ci&gt;</td>" in page, page
        plain = await (await http.get("/tasks/ns/t0", headers=HOST)).text()
        assert "<th>Submitter</th>" not in plain

    run(check)


def test_a_task_kueue_holds_shows_why_in_kueues_words_read_on_demand(monkeypatch):
    """The page of a running task of a pool with admission.kueue asks `/tasks/<ns>/<name>/kueue`,
    which words what the client read (`Client.kueue_hold`, here given) as `describe` does."""
    from cronoq.engine.observed import KueueHold

    asked: list[str] = []

    def hold(self, task):
        asked.append(task.metadata.name)
        return KueueHold("gpu", "team-a", "w", True, "Pending", "couldn't assign <flavors>", (("cpu", "1"),))

    monkeypatch.setattr(Client, "kueue_hold", hold)

    async def check(http, cache, app):
        cache._objects["taskpools"][("ns", "k")] = TaskPool.model_validate(
            {"metadata": {"name": "k", "namespace": "ns"}, "spec": {"admission": {"kueue": {"localQueue": "gpu"}}}})
        cache._objects["tasks"][("ns", "held")] = Task.model_validate({
            "metadata": {"name": "held", "namespace": "ns", "creationTimestamp": "2026-11-05T12:00:00Z"},
            "spec": {"image": "busybox", "pool": "k"}, "status": {"phase": "Running", "attempt": 1}})
        page = await (await http.get("/tasks/ns/held", headers=HOST)).text()
        assert 'hx-get="/tasks/ns/held/kueue"' in page, page
        said = await (await http.get("/tasks/ns/held/kueue", headers=HOST)).text()
        assert said == ("waiting for Kueue: LocalQueue gpu, ClusterQueue team-a, position unknown (Kueue&#x27;s "
                        "visibility API is not served), needs 1 cpu; Kueue says: couldn&#x27;t assign &lt;flavors&gt;")
        assert asked == ["held"]
        running = await (await http.get("/tasks/ns/t2", headers=HOST)).text()  # a pool without Kueue
        assert "/kueue" not in running

    run(check)
