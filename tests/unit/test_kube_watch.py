"""The streaming watch (kube/watch.py) against recorded API answers, without a cluster: paging,
resuming from the last resourceVersion (bookmarks included), 410 Gone → a fresh listing that
reports what vanished meanwhile, and events arriving split across chunks."""
from __future__ import annotations

import asyncio
import json
import threading

import pytest

from cronoq.kube.watch import PAGE, STALL_MARGIN, Gone, Stalled, Watch, _chunks


class Answer:
    """A recorded HTTP answer: a LIST body, or a WATCH stream in the chunks it arrived in."""

    def __init__(self, body: dict | None = None, chunks: list[bytes] | None = None) -> None:
        self.data = json.dumps(body).encode() if body is not None else b""
        self._chunks = chunks or []

    def stream(self, amt=None, decode_content=True):
        for chunk in self._chunks:
            if isinstance(chunk, Exception):
                raise chunk
            yield chunk

    def release_conn(self) -> None:
        pass


def obj(name: str, rv: int) -> dict:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": str(rv)}}


def line(kind: str, o: dict) -> bytes:
    return json.dumps({"type": kind, "object": o}).encode() + b"\n"


class Recorded:
    """A lister playing recorded answers in order, and noting how it was called."""

    def __init__(self, *answers: Answer) -> None:
        self.answers, self.calls = list(answers), []

    def __call__(self, **kwargs):
        self.calls.append(kwargs)
        return self.answers.pop(0)


def run(watch: Watch, step) -> list:
    """Run `step(loop)` in a thread (as the watch thread does) and collect what is fed."""
    async def main():
        loop = asyncio.get_running_loop()
        box = {}

        def thread():
            try:
                box["result"] = step(loop)
            except BaseException as err:  # noqa: BLE001
                box["error"] = err
        t = threading.Thread(target=thread)
        t.start()
        while t.is_alive():
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.01)  # let the handed-over events run
        if "error" in box:
            raise box["error"]
        return box.get("result")
    return asyncio.run(main())


def test_chunks_give_whole_lines_however_the_stream_splits_them() -> None:
    first, second = line("ADDED", obj("a", 1)), line("MODIFIED", obj("a", 2))
    answer = Answer(chunks=[first[:10], first[10:] + second[:5], second[5:]])
    assert [len(group) for group in _chunks(answer)] == [1, 1]


def test_a_listing_is_paged_and_reports_what_it_held_and_no_longer_exists() -> None:
    fed = []
    lister = Recorded(Answer({"items": [obj("a", 5)], "metadata": {"continue": "p2", "resourceVersion": "9"}}),
                      Answer({"items": [obj("b", 6)], "metadata": {"resourceVersion": "9"}}))
    watch = Watch("Task", "cronoq.io/v1alpha1", lister, lambda kind, o: fed.append((kind, o["metadata"]["name"])),
                  known=lambda: [("ns", "a"), ("ns", "gone")])
    version = run(watch, watch._list)
    assert version == "9"
    assert fed == [(None, "a"), (None, "b"), ("DELETED", "gone")]
    assert lister.calls[1]["_continue"] == "p2" and lister.calls[0]["limit"] == PAGE
    assert watch.synced.is_set()


def test_a_watch_resumes_from_the_last_version_bookmarks_included() -> None:
    fed = []
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}}
    lister = Recorded(Answer(chunks=[line("ADDED", obj("a", 11)), json.dumps(bookmark).encode() + b"\n"]))
    watch = Watch("Job", "batch/v1", lister, lambda kind, o: fed.append((kind, o["metadata"]["name"], o["kind"])),
                  label_selector="cronoq.io/task-uid")
    assert run(watch, lambda loop: watch._watch(loop, "10")) == "20"
    assert fed == [("ADDED", "a", "Job")]
    call = lister.calls[0]
    assert call["resource_version"] == "10" and call["allow_watch_bookmarks"] and call["watch"]
    assert call["label_selector"] == "cronoq.io/task-uid"


def test_a_watch_silent_past_its_end_is_stalled_and_resumes_from_the_last_version_it_delivered() -> None:
    """The read timeout is the watch's own length plus a margin: a healthy watch sends its closing
    bookmark before then; a stalled one is given up and resumed, losing nothing it delivered."""
    from urllib3.exceptions import ReadTimeoutError

    fed = []
    silence = ReadTimeoutError(None, "/apis/batch/v1/jobs", "Read timed out.")
    lister = Recorded(Answer(chunks=[line("MODIFIED", obj("a", 12)), silence]))
    watch = Watch("Job", "batch/v1", lister, lambda kind, o: fed.append(kind), seconds=20)
    with pytest.raises(Stalled) as stalled:
        run(watch, lambda loop: watch._watch(loop, "10"))
    assert stalled.value.version == "12" and fed == ["MODIFIED"]
    call = lister.calls[0]
    assert call["timeout_seconds"] == 20 and call["_request_timeout"] == (10, 20 + STALL_MARGIN)


def test_gone_410_asks_for_a_fresh_listing_after_handing_over_what_came_before() -> None:
    fed = []
    expired = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}}
    lister = Recorded(Answer(chunks=[line("MODIFIED", obj("a", 12)) + json.dumps(expired).encode() + b"\n"]))
    watch = Watch("Pod", "v1", lister, lambda kind, o: fed.append(kind))
    with pytest.raises(Gone):
        run(watch, lambda loop: watch._watch(loop, "10"))
    assert fed == ["MODIFIED"]


def test_gone_410_answered_as_the_http_status_also_asks_for_a_fresh_listing() -> None:
    """Not the same version again and again: the server will never have it back."""
    from kubernetes.client.rest import ApiException

    def lister(**kwargs):
        raise ApiException(status=410, reason="Gone")

    watch = Watch("Pod", "v1", lister, lambda kind, o: None)
    with pytest.raises(Gone):
        run(watch, lambda loop: watch._watch(loop, "10"))


def test_every_answer_tells_its_send_and_receive_times_and_the_servers_date() -> None:
    told = []
    answer = Answer({"items": [], "metadata": {"resourceVersion": "3"}})
    answer.headers = {"Date": "Thu, 03 Dec 2026 04:50:09 GMT"}
    watch = Watch("Task", "cronoq.io/v1alpha1", Recorded(answer), lambda kind, o: None,
                  answered=lambda sent, received, date: told.append((sent <= received, date)))
    run(watch, watch._list)
    assert told == [(True, "Thu, 03 Dec 2026 04:50:09 GMT")]
