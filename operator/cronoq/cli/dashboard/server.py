"""The dashboard's web server (aiohttp): pages rendered on the server from the watch cache, parts
of them re-fetched by htmx when a server-sent event says their objects changed, and actions
that are Kubernetes writes made with the user's own kubeconfig.

It listens on 127.0.0.1 only, where every local user and process can connect, so it answers only
the browser that opened the launch URL it printed (`/?token=ACCESS`, like Jupyter's): that URL
sets an HttpOnly, SameSite=Strict session cookie, and every page, read and action without the
cookie (or the token) is refused, reads too, since task data may be secret. Since any web page
the user opens could post to 127.0.0.1, every write must also carry the action token this process
drew at start (htmx sends it as a header; another site cannot read it), and a request whose Host
is not the dashboard's own is refused (DNS rebinding).
"""
from __future__ import annotations

import asyncio
from html import escape as html_escape
import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jinja2
from aiohttp import web

from cronoq.api import TaskPhase
from cronoq.apiserver.errors import ApiError
from cronoq.cli import render
from cronoq.cli.dashboard import views
from cronoq.cli.dashboard.cache import Cache, Key, api_message
from cronoq.client import RETRY_OF, Client, ClientError

log = logging.getLogger("cronoq.dashboard")
HERE = Path(__file__).parent
COALESCE = 0.3
"""Seconds a burst of changes is gathered into one event: pages re-fetch once per burst."""
LOG_LINES = 2000
"""Lines of an attempt's log shown (its tail)."""
TOKEN_HEADER = "X-Cronoq-Token"
ACCESS_PARAM = "token"
"""The launch URL's query parameter holding the access token."""


class Hub:
    """Fan-out of the cache's changes to the open pages' event streams."""

    def __init__(self) -> None:
        self.queues: set[asyncio.Queue[tuple[str, set[Key]]]] = set()

    def publish(self, plural: str, keys: set[Key]) -> None:
        for queue in self.queues:
            queue.put_nowait((plural, keys))


@dataclass
class State:
    """What the handlers share: the user's client, the cache, the open event streams, the token
    actions must carry, the templates, and the secrets that let a browser in: `access` is in
    the launch URL, `session` in the cookie it is exchanged for."""
    client: Client
    all_namespaces: bool
    hub: Hub
    token: str
    env: jinja2.Environment
    access: str
    session: str
    cache: Cache | None = None
    archive: str | None = None
    """The archive's database URL (`--archive`), read by the history page; None: no history."""

    def launch_url(self, port: int) -> str:
        """The URL printed at start: opened in the user's browser, it lets that browser in."""
        return f"http://127.0.0.1:{port}/?{ACCESS_PARAM}={self.access}"


STATE = web.AppKey("state", State)


def make_app(client: Client, all_namespaces: bool, port: int, cache: Cache | None = None,
             archive: str | None = None) -> web.Application:
    """The application. `cache` is started here unless given (tests give a synced one); `archive`
    is the archive's URL the history page reads."""
    app = web.Application(middlewares=[_only_own_host(port), _only_with_access(port)])
    hub = Hub()
    token = secrets.token_urlsafe(24)
    state = app[STATE] = State(client, all_namespaces, hub, token, _templates(token, all_namespaces, client.namespace),
                               access=secrets.token_urlsafe(32), session=secrets.token_urlsafe(32), archive=archive)

    async def start(app: web.Application) -> None:
        loop = asyncio.get_running_loop()

        def changed(plural: str, keys: set[Key]) -> None:
            loop.call_soon_threadsafe(hub.publish, plural, keys)

        if cache is None:
            state.cache = Cache(client, all_namespaces, changed).start()
        else:
            cache.on_change = changed
            state.cache = cache

    async def stop(app: web.Application) -> None:
        if state.cache is not None:
            state.cache.stop()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_get("/", overview_page)
    app.router.add_get("/tasks", tasks_page)
    app.router.add_get("/tasks/{namespace}/{name}", task_page)
    app.router.add_get("/tasks/{namespace}/{name}/events", task_events)
    app.router.add_get("/tasks/{namespace}/{name}/logs/{attempt}", task_log)
    app.router.add_get("/tasks/{namespace}/{name}/kueue", task_kueue)
    app.router.add_get("/schedules", schedules_page)
    app.router.add_get("/history", history_page)
    app.router.add_get("/events", event_stream)
    app.router.add_post("/actions/{action}", action)
    app.router.add_static("/static", HERE / "static", append_version=False)
    return app


def _only_own_host(port: int) -> Callable[..., Any]:
    allowed = {f"127.0.0.1:{port}", f"localhost:{port}"}

    @web.middleware
    async def check(request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
        if request.host not in allowed:
            raise web.HTTPMisdirectedRequest(text=f"this dashboard answers on {' or '.join(sorted(allowed))} only")
        return await handler(request)

    return check


def session_cookie(port: int) -> str:
    """The cookie's name: a browser sends cookies of 127.0.0.1 to every port, so each dashboard
    names its own."""
    return f"cronoq-dashboard-{port}"


def _only_with_access(port: int) -> Callable[..., Any]:
    """Let in a request with the session cookie or the access token; a GET with the token gets
    the cookie and is sent on to its URL without the token (out of the address bar and the
    history). The static files (the vendored scripts, the style sheet) hold nothing of the cluster."""
    cookie = session_cookie(port)

    @web.middleware
    async def check(request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
        state = request.app[STATE]
        if request.path.startswith("/static/"):
            return await handler(request)
        if secrets.compare_digest(request.query.get(ACCESS_PARAM, ""), state.access):
            if request.method != "GET":
                return await handler(request)
            query = request.rel_url.query.copy()
            query.popall(ACCESS_PARAM)
            answer = web.Response(status=303, headers={"Location": str(request.rel_url.with_query(query)),
                                                       "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})
            answer.set_cookie(cookie, state.session, path="/", httponly=True, samesite="Strict")
            return answer
        if secrets.compare_digest(request.cookies.get(cookie, ""), state.session):
            return await handler(request)
        raise web.HTTPForbidden(text=f"403 Forbidden: open the URL `cronoq dashboard` printed when it started "
                                     f"(http://127.0.0.1:{port}/?{ACCESS_PARAM}=...) in this browser; this "
                                     "dashboard answers only a browser that opened it.\n")

    return check


def _templates(token: str, all_namespaces: bool, namespace: str) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.globals.update(token=token, token_header=TOKEN_HEADER, all_namespaces=all_namespaces, scope=namespace,
                       phases=[p.value for p in TaskPhase], age=render.age, duration=render.duration,
                       waiting_since=views.waiting_since)
    env.filters["tojson"] = lambda value: json.dumps(value)
    return env


def _page(request: web.Request, template: str, **context: Any) -> web.Response:
    """A whole page, or its live part alone when htmx re-fetches it (`HX-Target: live`)."""
    cache = _cache(request)
    part = request.headers.get("HX-Target") == "live"
    name = template.replace(".html", "_live.html") if part else template
    html = request.app[STATE].env.get_template(name).render(
        errors=cache.errors, now=datetime.now(timezone.utc), path=request.path_qs, **context)
    # no-store also keeps the page out of the back/forward cache, which would hold its event
    # stream open: a browser has 6 connections per host over HTTP/1.1, and the 7th page waits.
    return web.Response(text=html, content_type="text/html", headers={"Cache-Control": "no-store"})


def _cache(request: web.Request) -> Cache:
    cache = request.app[STATE].cache
    assert cache is not None, "the cache starts with the application"
    return cache


async def _synced(request: web.Request) -> Cache:
    cache = _cache(request)
    await asyncio.to_thread(cache.wait_synced, 30)
    return cache


# ---------------------------------------------------------------------- pages

async def overview_page(request: web.Request) -> web.Response:
    cache = await _synced(request)
    rows = views.overview(cache.tasks(), cache.pools(), datetime.now(timezone.utc))
    return _page(request, "overview.html", rows=rows, schedules=cache.schedules())


async def tasks_page(request: web.Request) -> web.Response:
    cache = await _synced(request)
    try:
        wanted = views.TaskFilter.parse(request.query)
    except views.BadFilter as err:
        return _page(request, "tasks.html", wanted=views.TaskFilter(), page=None, bad=str(err), elapsed=0.0)
    started = time.perf_counter()
    page = views.task_page(cache.tasks(), wanted)
    elapsed = time.perf_counter() - started
    return _page(request, "tasks.html", wanted=wanted, page=page, bad=None, elapsed=elapsed)


async def task_page(request: web.Request) -> web.Response:
    cache = await _synced(request)
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    task = cache.get("tasks", namespace, name)
    if task is None:
        gone = f"No task {name} in namespace {namespace} (or it is not yours to see)."
        if request.headers.get("HX-Target") == "live":  # deleted while its page is open: say so there
            return web.Response(text=f'<p class="error">{html_escape(gone)}</p>', content_type="text/html")
        raise web.HTTPNotFound(text=gone)
    now = datetime.now(timezone.utc)
    spec = task.spec.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)
    retries = [t for t in cache.namespace_tasks(namespace) if t.metadata.labels.get(RETRY_OF) == name]
    return _page(request, "task.html", task=task, spec=json.dumps(spec, indent=2), bars=views.timeline(task, now),
                 graph=views.graph(task, cache.namespace_tasks(namespace)), retries=retries,
                 said=views.explained(task, pool := cache.get("taskpools", namespace, task.spec.pool), now),
                 kueue=views.kueue_admits(task, pool))


async def task_events(request: web.Request) -> web.Response:
    """The Events of a task, as the API server has them (read on demand: Events are many), by
    the task's uid as `cronoq describe` reads them: a deleted task's Events, kept an hour, never
    show under a new task of its name."""
    state = request.app[STATE]
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    task = state.cache.get("tasks", namespace, name) if state.cache is not None else None
    error, events = None, []
    try:
        if task is not None:
            events = await asyncio.to_thread(state.client.events, task)
    except ApiError as err:
        error = api_message(err)
    html = request.app[STATE].env.get_template("events.html").render(events=events, error=error)
    return web.Response(text=html, content_type="text/html")


async def task_kueue(request: web.Request) -> web.Response:
    """Why Kueue holds the task's Job, read on demand as `cronoq describe` reads it (its Job, its
    Workload, its LocalQueue and, where served, Kueue's visibility API) and worded by
    `engine.attempts.waiting.kueue_text`; empty once Kueue no longer holds it."""
    from cronoq.engine.attempts import waiting

    state = request.app[STATE]
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    task = state.cache.get("tasks", namespace, name) if state.cache is not None else None
    text = ""
    try:
        hold = await asyncio.to_thread(state.client.in_namespace(namespace).kueue_hold, task) if task else None
        if hold is not None:
            text = waiting.kueue_text(hold, position=True)
    except ApiError as err:
        text = f"what Kueue says could not be read: {api_message(err)}"
    return web.Response(text=html_escape(text), content_type="text/html")


async def task_log(request: web.Request) -> web.Response:
    """The tail of one attempt's log (its pod's task container)."""
    client = request.app[STATE].client
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    try:
        attempt = int(request.match_info["attempt"])
    except ValueError:
        raise web.HTTPBadRequest(text="attempt: a whole number") from None
    where = client.in_namespace(namespace)

    def read() -> list[str]:
        return list(where.logs(name, attempt, tail=LOG_LINES))

    error, lines = None, []
    try:
        lines = await asyncio.to_thread(read)
    except ApiError as err:
        error = api_message(err)
    except ClientError as err:
        error = str(err)
    html = request.app[STATE].env.get_template("log.html").render(lines=lines, error=error, attempt=attempt)
    return web.Response(text=html, content_type="text/html")


async def schedules_page(request: web.Request) -> web.Response:
    cache = await _synced(request)
    tasks = cache.tasks()
    now = datetime.now(timezone.utc)
    schedules = [(s, *views.next_fires(s, now), views.schedule_tasks(s, tasks)[:10]) for s in cache.schedules()]
    return _page(request, "schedules.html", schedules=schedules)


async def history_page(request: web.Request) -> web.Response:
    """Executions (ended attempts) from the archive, newest first, a page at a time: deleted tasks
    too. Read from the archive's database at each load (it is not watched); a row links to its
    task while the cluster still holds that task (same uid)."""
    state = request.app[STATE]
    now = datetime.now(timezone.utc)
    scope = None if state.all_namespaces else state.client.namespace
    context: dict[str, Any] = dict(wanted=views.HistoryFilter(), page=None, bad=None, elapsed=0.0, live=set(),
                                   outcomes=views.OUTCOMES, final_phases=views.FINAL_PHASES, archive=state.archive)
    try:
        wanted = context["wanted"] = views.HistoryFilter.parse(request.query, now)
    except views.BadFilter as err:
        return _page(request, "history.html", **{**context, "bad": f"Bad filter: {err}"})
    if state.archive is None:
        return _page(request, "history.html", **context)
    url, where = state.archive, wanted.archive_filter(now, scope)
    started = time.perf_counter()
    try:
        rows = await asyncio.to_thread(_read_history, url, where)
    except Exception as err:  # noqa: BLE001 - the database's own errors, shown on the page
        return _page(request, "history.html", **{**context, "bad": f"The archive cannot be read: {err}"})
    elapsed = time.perf_counter() - started
    page = views.history_page(rows, wanted)
    cache = _cache(request)
    live = {(r["namespace"], r["name"]) for r in page.rows
            if (t := cache.get("tasks", r["namespace"], r["name"])) is not None and t.metadata.uid == r["task_uid"]}
    return _page(request, "history.html", **{**context, "page": page, "elapsed": elapsed, "live": live})


def _read_history(url: str, where: Any) -> list[dict[str, Any]]:
    """One page of the archive, over a connection of its own (opened and closed here: pages are
    read seldom, and a connection is never shared between threads)."""
    import os

    from cronoq.archive import ArchiveError, Database

    db = Database(url)
    if db.dialect == "sqlite" and not os.path.exists(db.path):
        raise ArchiveError(f"no archive at {db.path}")
    try:
        return db.query(where)
    finally:
        db.close()


# ---------------------------------------------------------------------- live

async def event_stream(request: web.Request) -> web.StreamResponse:
    """Server-sent events: `tasks`, `taskpools`, `taskschedules` when any of that kind changed,
    and `task` when the one task named by ?task=NAMESPACE/NAME did; a burst is one event."""
    hub = request.app[STATE].hub
    watched = request.query.get("task", "")
    task_key = tuple(watched.split("/", 1)) if "/" in watched else None
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    queue: asyncio.Queue[tuple[str, set[Key]]] = asyncio.Queue()
    hub.queues.add(queue)
    try:
        await response.write(b": connected\n\n")
        while True:
            try:  # asyncio.timeout: wait_for of 3.11 can swallow the cancellation of a closed stream
                async with asyncio.timeout(15):
                    plural, keys = await queue.get()
            except TimeoutError:
                await response.write(b": keep-alive\n\n")
                continue
            await asyncio.sleep(COALESCE)
            changed = {plural: set(keys)}
            while not queue.empty():
                more_plural, more_keys = queue.get_nowait()
                changed.setdefault(more_plural, set()).update(more_keys)
            out = [f"event: {p}\ndata: {len(k)}\n\n" for p, k in changed.items()]
            if task_key and task_key in changed.get("tasks", set()):
                out.append("event: task\ndata: 1\n\n")
            await response.write("".join(out).encode())
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        hub.queues.discard(queue)
    return response


# ---------------------------------------------------------------------- actions

ACTIONS = ("retry", "cancel", "pause", "resume", "suspend", "unsuspend", "trigger", "retry-dead-letters")


async def action(request: web.Request) -> web.Response:
    """One Kubernetes write, made as the user; the answer (or the API server's refusal) is shown
    where the page keeps its messages."""
    if not secrets.compare_digest(request.headers.get(TOKEN_HEADER, ""), request.app[STATE].token):
        raise web.HTTPForbidden(text=f"missing or wrong {TOKEN_HEADER}: actions come from the dashboard's own pages")
    verb = request.match_info["action"]
    if verb not in ACTIONS:
        raise web.HTTPNotFound(text=f"no action {verb}")
    form = await request.post()
    namespace, name = str(form.get("namespace", "")), str(form.get("name", ""))
    if not namespace or (not name and verb != "retry-dead-letters"):
        raise web.HTTPBadRequest(text="namespace and name are required")
    client = request.app[STATE].client
    where = client.in_namespace(namespace)
    try:
        message = await asyncio.to_thread(_act, verb, where, name, _cache(request), str(form.get("pool", "")))
        ok = True
    except ApiError as err:
        message, ok = f"{verb} {namespace}/{name}: the API server refused: {api_message(err)}", False
    except ClientError as err:
        message, ok = f"{verb} {namespace}/{name}: {err}", False
    log.info("action %s %s/%s: %s", verb, namespace, name, message)
    html = request.app[STATE].env.get_template("flash.html").render(message=message, ok=ok)
    return web.Response(text=html, content_type="text/html")


def _act(verb: str, client: Client, name: str, cache: Cache, pool: str) -> str:
    ns = client.namespace
    if verb == "retry":
        new = client.retry(name)
        return f"task {ns}/{name} retried as {new.metadata.name}"
    if verb == "cancel":
        return f"task {ns}/{name}: cancel requested" if client.cancel(name) else f"task {ns}/{name} has finished"
    if verb in ("pause", "resume"):
        client.pause(name, verb == "pause")
        return f"pool {ns}/{name} {'paused' if verb == 'pause' else 'resumed'}"
    if verb in ("suspend", "unsuspend"):
        client.suspend(name, verb == "suspend")
        return f"schedule {ns}/{name} {'suspended' if verb == 'suspend' else 'resumed'}"
    if verb == "trigger":
        task, created = client.trigger(name)
        return f"schedule {ns}/{name} fired: task {task}" + ("" if created else " (already fired this second)")
    # retry-dead-letters: each dead-lettered task of the namespace (and pool), once
    tasks = [t for t in cache.namespace_tasks(ns) if t.phase is TaskPhase.DEAD_LETTERED
             and (not pool or t.spec.pool == pool)]
    retried_already = {t.metadata.labels.get(RETRY_OF) for t in cache.namespace_tasks(ns)}
    made = [client.retry(t.metadata.name or "") for t in tasks if t.metadata.name not in retried_already]
    where = f"pool {ns}/{pool}" if pool else f"namespace {ns}"
    return f"{len(made)} dead-lettered task{'' if len(made) == 1 else 's'} of {where} retried" + (
        f" ({len(tasks) - len(made)} retried already)" if len(tasks) > len(made) else "")

