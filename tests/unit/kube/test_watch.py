"""The streaming watch (kube/watch.py) against recorded API answers played by a real local HTTP
server (aiohttp), without a cluster: paging, resuming from the last resourceVersion (bookmarks
included), 410 Gone → a fresh listing that reports what vanished meanwhile, events arriving split
across chunks, a watch that falls silent (stalled), one listing at a time, and a listing whose
`continue` token expires between its pages."""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from cronoq.kube import watch as watching
from cronoq.apiserver.aio import ApiSession
from cronoq.apiserver.config import Connection
from cronoq.kube.watch import PAGE, Expired, Gone, Stalled, Watch

PATH = "/apis/batch/v1/namespaces/ns/jobs"


@dataclass
class Answer:
    """A recorded answer: a LIST body, a WATCH stream in the chunks it arrived in (then, with
    `stall`, silence with the connection open), or an error status."""

    body: dict | None = None
    chunks: list[bytes] = field(default_factory=list)
    status: int = 200
    stall: bool = False
    before: float = 0.0
    """Seconds of silence before the answer's headers."""
    headers: dict[str, str] = field(default_factory=dict)


def obj(name: str, rv: int) -> dict:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": str(rv)}}


def line(kind: str, o: dict) -> bytes:
    return json.dumps({"type": kind, "object": o}).encode() + b"\n"


class Recorded:
    """A loopback API server playing recorded answers in order, per path, and noting each request
    (its path and query)."""

    def __init__(self, answers: dict[str, list[Answer]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, dict[str, str]]] = []
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def __aenter__(self) -> Recorded:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._answer)
        self.runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    def session(self) -> ApiSession:
        return ApiSession(Connection(host=f"http://127.0.0.1:{self.port}"))

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        self.calls.append((request.path, dict(request.query)))
        answer = self.answers[request.path].pop(0)
        if answer.before:
            await asyncio.sleep(answer.before)
        if answer.body is not None or answer.status != 200:
            return web.json_response(answer.body or {"kind": "Status", "code": answer.status}, status=answer.status,
                                     headers=answer.headers)
        response = web.StreamResponse(headers=answer.headers)
        response.enable_chunked_encoding()
        await response.prepare(request)
        for chunk in answer.chunks:
            await response.write(chunk)
            await asyncio.sleep(0.02)  # each chunk arrives on its own
        if answer.stall:
            await asyncio.sleep(3600)
        await response.write_eof()
        return response


def play(answers: list[Answer] | dict[str, list[Answer]], step: Callable[[Recorded, ApiSession], Awaitable[Any]]) -> Any:
    """Serve `answers` (for PATH, or per path) and run `step` against them."""
    async def main() -> Any:
        async with Recorded(answers if isinstance(answers, dict) else {PATH: answers}) as server:
            http = server.session()
            try:
                return await step(server, http)
            finally:
                await http.close()
    return asyncio.run(main())


def jobs(http: ApiSession, fed: list, **kwargs: Any) -> Watch:
    return Watch("Job", "batch/v1", http, PATH, lambda kind, o: fed.append((kind, o["metadata"]["name"])), **kwargs)


async def run_until(watch: Watch, wanted: tuple[str, str], fed: list) -> None:
    """Run `watch` until it has fed `wanted` (at most 4 s), then stop it."""
    watch.start()
    for _ in range(200):
        if wanted in fed:
            break
        await asyncio.sleep(0.02)
    watch.stop()


def test_events_split_across_chunks_are_handed_over_whole_and_in_order() -> None:
    fed: list = []
    first, second = line("ADDED", obj("a", 1)), line("MODIFIED", obj("a", 2))
    answer = Answer(chunks=[first[:10], first[10:] + second[:5], second[5:]])
    version = play([answer], lambda _, http: jobs(http, fed)._watch("0"))
    assert version == "2" and fed == [("ADDED", "a"), ("MODIFIED", "a")]


def test_a_listing_is_paged_and_reports_what_it_held_and_no_longer_exists() -> None:
    fed: list = []
    pages = [Answer({"items": [obj("a", 5)], "metadata": {"continue": "p2", "resourceVersion": "9"}}),
             Answer({"items": [obj("b", 6)], "metadata": {"resourceVersion": "9"}})]

    async def step(server: Recorded, http: ApiSession) -> tuple:
        watch = jobs(http, fed, known=lambda: [("ns", "a"), ("ns", "gone")], label_selector="x")
        return await watch._list(), watch.synced.is_set(), server.calls
    version, synced, calls = play(pages, step)
    assert version == "9" and synced
    assert fed == [(None, "a"), (None, "b"), ("DELETED", "gone")]
    assert [q for _, q in calls] == [{"limit": str(PAGE), "labelSelector": "x"},
                                     {"limit": str(PAGE), "labelSelector": "x", "continue": "p2"}]


def test_the_watch_starts_from_the_first_pages_version_the_snapshot_of_the_whole_listing() -> None:
    """Every page of a listing is read from the first page's snapshot; should a later page ever say
    a newer version, watching from it could miss a change to an object of an earlier page."""
    pages = [Answer({"items": [obj("a", 5)], "metadata": {"continue": "p2", "resourceVersion": "9"}}),
             Answer({"items": [obj("b", 6)], "metadata": {"resourceVersion": "12"}})]
    version = play(pages, lambda _, http: jobs(http, [])._list())
    assert version == "9"


def test_a_continue_token_expiring_between_pages_means_listing_again_from_the_first_page() -> None:
    """410 on a page after the first: the server no longer keeps the listing's snapshot. Going on
    with the token it offers would mix two times with no version to watch from: the listing starts
    over, and what the first try handed over is handed over again, nothing reported deleted."""
    expired = {"kind": "Status", "code": 410, "reason": "Expired", "metadata": {"continue": "inconsistent"}}
    answers = [Answer({"items": [obj("a", 5)], "metadata": {"continue": "p2", "resourceVersion": "9"}}),
               Answer(expired, status=410),
               Answer({"items": [obj("a", 5)], "metadata": {"continue": "q2", "resourceVersion": "14"}}),
               Answer({"items": [obj("b", 13)], "metadata": {"resourceVersion": "14"}}),
               Answer(chunks=[line("MODIFIED", obj("b", 15))], stall=True)]
    fed: list = []
    held: set = set()

    def feed(kind: str | None, o: dict) -> None:
        fed.append((kind, o["metadata"]["name"]))
        held.add((o["metadata"]["namespace"], o["metadata"]["name"]))

    async def step(server: Recorded, http: ApiSession) -> list:
        with pytest.raises(Expired) as first:
            await Watch("Job", "batch/v1", http, PATH, feed, known=lambda: sorted(held))._list()
        assert first.value.handed == 1
        watch = Watch("Job", "batch/v1", http, PATH, feed, known=lambda: sorted(held))
        await run_until(watch, ("MODIFIED", "b"), fed)
        return server.calls
    calls = play(answers, step)
    assert fed == [(None, "a"), (None, "a"), (None, "b"), ("MODIFIED", "b")]
    assert [(q.get("continue"), q.get("resourceVersion")) for _, q in calls] == [
        (None, None), ("p2", None), (None, None), ("q2", None), (None, "14")]


def test_a_running_watch_whose_listing_expires_lists_again_at_once(caplog: pytest.LogCaptureFixture) -> None:
    """The loop treats an expired listing as a 410: no back-off, a fresh listing from page one."""
    answers = [Answer({"items": [obj("a", 5)], "metadata": {"continue": "p2", "resourceVersion": "9"}}),
               Answer(status=410),
               Answer({"items": [obj("a", 5)], "metadata": {"resourceVersion": "14"}}),
               Answer(chunks=[line("MODIFIED", obj("a", 15))], stall=True)]
    fed: list = []

    async def step(server: Recorded, http: ApiSession) -> None:
        watch = jobs(http, fed)
        await run_until(watch, ("MODIFIED", "a"), fed)
    with caplog.at_level("INFO", logger="cronoq.kube.watch"):
        play(answers, step)
    assert fed == [(None, "a"), (None, "a"), ("MODIFIED", "a")]
    said = [r.getMessage() for r in caplog.records]
    assert any("continue token expired after 1 objects" in m for m in said), said
    assert not any("watch failed" in m for m in said), said  # the failure back-off was not taken


def test_a_watch_resumes_from_the_last_version_bookmarks_included() -> None:
    fed: list = []
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}}
    answer = Answer(chunks=[line("ADDED", obj("a", 11)), json.dumps(bookmark).encode() + b"\n"])

    async def step(server: Recorded, http: ApiSession) -> tuple:
        watch = Watch("Job", "batch/v1", http, PATH, lambda kind, o: fed.append((kind, o["metadata"]["name"], o["kind"])),
                      label_selector="cronoq.io/task-uid", seconds=20)
        return await watch._watch("10"), server.calls
    version, calls = play([answer], step)
    assert version == "20"
    assert fed == [("ADDED", "a", "Job")]
    assert calls == [(PATH, {"watch": "true", "resourceVersion": "10", "allowWatchBookmarks": "true",
                             "timeoutSeconds": "20", "labelSelector": "cronoq.io/task-uid"})]


@pytest.mark.parametrize("where", ["in the stream", "before the answer's headers"])
def test_a_watch_silent_past_its_end_is_stalled_and_resumes_from_the_last_version_it_delivered(
        where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The read timeout is the watch's own length plus a margin: a healthy watch sends its closing
    bookmark before then; a stalled one is given up and resumed, losing nothing it delivered."""
    monkeypatch.setattr(watching, "STALL_MARGIN", 0.5)
    fed: list = []
    if where == "in the stream":
        answer, expected = Answer(chunks=[line("MODIFIED", obj("a", 12))], stall=True), "12"
    else:
        answer, expected = Answer(chunks=[line("MODIFIED", obj("a", 12))], before=3600), "10"

    async def step(_: Recorded, http: ApiSession) -> float:
        started = time.monotonic()
        with pytest.raises(Stalled) as stalled:
            await jobs(http, fed, seconds=1)._watch("10")
        assert stalled.value.version == expected
        return time.monotonic() - started
    took = play([answer], step)
    assert 1.5 <= took < 3.0, took
    assert fed == ([("MODIFIED", "a")] if expected == "12" else [])


def test_gone_410_asks_for_a_fresh_listing_after_handing_over_what_came_before() -> None:
    fed: list = []
    expired = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}}
    answer = Answer(chunks=[line("MODIFIED", obj("a", 12)) + json.dumps(expired).encode() + b"\n"])

    async def step(_: Recorded, http: ApiSession) -> None:
        with pytest.raises(Gone):
            await jobs(http, fed)._watch("10")
    play([answer], step)
    assert fed == [("MODIFIED", "a")]


def test_gone_410_answered_as_the_http_status_also_asks_for_a_fresh_listing() -> None:
    """Not the same version again and again: the server will never have it back."""
    async def step(_: Recorded, http: ApiSession) -> None:
        with pytest.raises(Gone):
            await jobs(http, [])._watch("10")
    play([Answer(status=410)], step)


def test_every_answer_tells_its_send_and_receive_times_and_the_servers_date() -> None:
    told: list = []
    answer = Answer({"items": [], "metadata": {"resourceVersion": "3"}},
                    headers={"Date": "Thu, 03 Dec 2026 04:50:09 GMT"})

    async def step(_: Recorded, http: ApiSession) -> None:
        await jobs(http, [], answered=lambda sent, received, date: told.append((sent <= received, date)))._list()
    play([answer], step)
    assert told == [(True, "Thu, 03 Dec 2026 04:50:09 GMT")]


def test_a_running_watch_lists_watches_and_after_410_lists_again_reporting_what_vanished() -> None:
    """The whole loop: list, watch from the listing's version, 410 → list afresh; an object the
    caller held that the new listing lacks is reported DELETED, then the watch goes on from the new
    listing's version."""
    fed: list = []
    held: set = set()
    expired = {"type": "ERROR", "object": {"kind": "Status", "code": 410}}
    answers = [Answer({"items": [obj("a", 1), obj("b", 2)], "metadata": {"resourceVersion": "2"}}),
               Answer(chunks=[json.dumps(expired).encode() + b"\n"]),
               Answer({"items": [obj("a", 1)], "metadata": {"resourceVersion": "7"}}),
               Answer(chunks=[line("MODIFIED", obj("a", 8))], stall=True)]

    def feed(kind: str | None, o: dict) -> None:
        fed.append((kind, o["metadata"]["name"]))
        key = (o["metadata"]["namespace"], o["metadata"]["name"])
        (held.discard if kind == "DELETED" else held.add)(key)

    async def step(server: Recorded, http: ApiSession) -> list:
        watch = Watch("Job", "batch/v1", http, PATH, feed, known=lambda: sorted(held))
        await run_until(watch, ("MODIFIED", "a"), fed)
        return server.calls
    calls = play(answers, step)
    assert fed == [(None, "a"), (None, "b"), (None, "a"), ("DELETED", "b"), ("MODIFIED", "a")]
    assert [q.get("resourceVersion") for _, q in calls] == [None, "2", None, "7"]


def test_one_listing_at_a_time_across_watches() -> None:
    """Two watches starting together: every page of one listing is fetched before the other's first."""
    other = "/api/v1/namespaces/ns/pods"

    def pages(name: str) -> list[Answer]:
        return [Answer({"items": [obj(f"{name}1", 1)], "metadata": {"continue": "p2", "resourceVersion": "1"}},
                       before=0.1),
                Answer({"items": [obj(f"{name}2", 2)], "metadata": {"resourceVersion": "2"}}, before=0.1),
                Answer(chunks=[], stall=True)]

    async def step(server: Recorded, http: ApiSession) -> list:
        a = Watch("Job", "batch/v1", http, PATH, lambda kind, o: None)
        b = Watch("Pod", "v1", http, other, lambda kind, o: None)
        a.start(), b.start()
        await asyncio.wait_for(asyncio.gather(a.synced.wait(), b.synced.wait()), timeout=5)
        a.stop(), b.stop()
        return [(path, q.get("continue")) for path, q in server.calls if "watch" not in q]
    order = play({PATH: pages("j"), other: pages("p")}, step)
    assert order in ([(PATH, None), (PATH, "p2"), (other, None), (other, "p2")],
                     [(other, None), (other, "p2"), (PATH, None), (PATH, "p2")]), order
