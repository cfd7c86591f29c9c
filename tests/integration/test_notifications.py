"""Failure notifications end to end (issue 55, item 2): the real operator POSTs signed CloudEvents
and Slack messages to a real aiohttp receiver on loopback, which checks each signature and answers
500 before it answers 200; the task's status records the delivery, a forbidden address gives up
with an Event, and a failover between a 500 and the 200 sends the same id again."""
from __future__ import annotations

import asyncio
import base64
import json
import signal
import threading
from datetime import datetime, timezone
from typing import Any, Iterator

import pytest
from aiohttp import web
from kubernetes import client

from cronoq.engine import notify

from tests.support.waiting import wait_until

KEY = b"n0tify-hmac-key"


class Receiver:
    """An aiohttp server on 127.0.0.1, in a thread of its own: every request kept (path, headers,
    body, whether its signature verified), and each path answers 500 while `failing[path]` > 0
    (counting down) or `down` holds it, then 200."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.failing: dict[str, int] = {}
        self.down: set[str] = set()
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._runner: web.AppRunner | None = None

    async def _answer(self, request: web.Request) -> web.Response:
        body = await request.read()
        signature = request.headers.get(notify.SIGNATURE_HEADER)
        path = request.path
        status = 200
        if path in self.down:
            status = 500
        elif self.failing.get(path, 0) > 0:
            self.failing[path] -= 1
            status = 500
        self.requests.append({
            "path": path, "headers": dict(request.headers), "body": body, "status": status,
            "signed": signature is not None,
            "verified": signature is not None and notify.verify(KEY, signature, body, datetime.now(timezone.utc))})
        return web.Response(status=status, text="ok" if status == 200 else "try later")

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._answer)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        self._ready.set()
        self._loop.run_forever()

    def __enter__(self) -> Receiver:
        self._thread.start()
        assert self._ready.wait(10), "the receiver did not start"
        return self

    def __exit__(self, *exc: Any) -> None:
        async def stop() -> None:
            assert self._runner is not None
            await self._runner.cleanup()
        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def at(self, path: str) -> list[dict[str, Any]]:
        return [r for r in list(self.requests) if r["path"] == path]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def signing_secret(cq) -> None:
    cq.core.create_namespaced_secret(cq.namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="notify-key"), data={"hmac": base64.b64encode(KEY).decode()}))


def notified(cq, name: str, receiver: str) -> dict | None:
    return next((n for n in cq.status(name).get("notifications", ()) if n["receiver"] == receiver), None)


def test_signed_events_retried_after_500s_a_slack_message_and_a_forbidden_address(cq, receiver) -> None:
    signing_secret(cq)
    receiver.failing["/ops"] = 3
    cq.pool(retry={"maxAttempts": 2, "initialBackoff": "0s"}, notifications=[
        {"name": "ops", "url": f"{receiver.url}/ops", "outcomes": ["DeadLettered", "Failed"],
         "signingKey": {"name": "notify-key", "key": "hmac"}},
        {"name": "chat", "url": f"{receiver.url}/chat", "outcomes": ["Succeeded"], "format": "Slack"},
        {"name": "meta", "url": "http://169.254.169.254/latest", "outcomes": ["DeadLettered"], "maxAttempts": 3},
    ])
    cq.task("doomed", outcome="Fail", exit_code=1, delay="100ms")
    cq.task("fine", delay="100ms")
    status = cq.wait_phase("doomed", "DeadLettered")
    cq.wait_phase("fine", "Succeeded")

    ops = wait_until(lambda: notified(cq, "doomed", "ops"), timeout=90, what="ops's delivery recorded")
    uid = cq.get("doomed")["metadata"]["uid"]
    id = f"{uid}/DeadLettered/{status['attempt']}"
    assert (ops["id"], ops["result"], ops["attempts"]) == (id, "Delivered", 4)
    sent = receiver.at("/ops")
    assert [r["status"] for r in sent] == [500, 500, 500, 200]
    assert all(r["verified"] for r in sent), "every send is signed with the Secret's key"
    assert {r["headers"]["Idempotency-Key"] for r in sent} == {id}
    events = [json.loads(r["body"]) for r in sent]
    assert {e["id"] for e in events} == {id}
    event = events[-1]
    assert sent[-1]["headers"]["Content-Type"] == "application/cloudevents+json"
    assert (event["specversion"], event["type"], event["subject"]) == (
        "1.0", "io.cronoq.task.deadlettered", f"{cq.namespace}/doomed")
    data = event["data"]
    assert data["task"] == {"namespace": cq.namespace, "name": "doomed", "uid": uid, "pool": "default"}
    assert (data["phase"], data["attempt"]) == ("DeadLettered", 2)
    assert [a["number"] for a in data["attempts"]] == [1, 2]
    assert all(a["exitCode"] == 1 for a in data["attempts"])
    assert data["describe"] == f"cronoq describe doomed -n {cq.namespace}"
    print("\nthe receiver got:", json.dumps(event, indent=2))

    chat = wait_until(lambda: notified(cq, "fine", "chat"), timeout=60, what="chat's delivery recorded")
    assert (chat["result"], chat["attempts"]) == ("Delivered", 1)
    (slack,) = receiver.at("/chat")
    assert not slack["signed"]
    text = json.loads(slack["body"])["text"]
    assert f"*{cq.namespace}/fine*" in text and "*Succeeded*" in text

    meta = wait_until(lambda: notified(cq, "doomed", "meta"), timeout=60, what="meta given up")
    assert (meta["result"], meta["attempts"]) == ("GaveUp", 1), "a metadata address is refused at once"
    warning = wait_until(lambda: [e for e in cq.events("doomed") if e.reason == "NotificationFailed"], timeout=30,
                         what="the NotificationFailed Event")
    assert "169.254.169.254" in warning[0].message and "allowLinkLocal" in warning[0].message
    # Nothing else was sent: ops heard nothing of the success, chat nothing of the dead letter.
    assert len(receiver.requests) == 5
    assert notified(cq, "fine", "ops") is None and notified(cq, "doomed", "chat") is None


def test_a_failover_between_a_500_and_the_200_sends_the_same_id(pair, receiver) -> None:
    cq, a, b = pair
    signing_secret(cq)
    receiver.down.add("/ops")
    cq.pool(retry={"maxAttempts": 1}, notifications=[
        {"name": "ops", "url": f"{receiver.url}/ops", "outcomes": ["Failed"], "maxAttempts": 20,
         "signingKey": {"name": "notify-key", "key": "hmac"}}])
    cq.task("broken", outcome="Fail", exit_code=2, delay="100ms", retry={"permanentExitCodes": [2]})
    cq.wait_phase("broken", "Failed")
    wait_until(lambda: len(receiver.at("/ops")) >= 2, timeout=60, what="two 500s from the first leader")

    a.kill(signal.SIGKILL)
    from_a = len(receiver.at("/ops"))
    receiver.down.clear()
    b.wait_leading(timeout=40)
    done = wait_until(lambda: notified(cq, "broken", "ops"), timeout=90, what="the new leader's delivery recorded")

    sent = receiver.at("/ops")
    uid = cq.get("broken")["metadata"]["uid"]
    ids = [json.loads(r["body"])["id"] for r in sent]
    assert set(ids) == {f"{uid}/Failed/1"}, ids
    assert [r["status"] for r in sent[:from_a]] == [500] * from_a
    assert [r["status"] for r in sent[from_a:]] == [200], "the new leader sends once, and it lands"
    assert all(r["verified"] for r in sent)
    assert (done["id"], done["result"]) == (f"{uid}/Failed/1", "Delivered")
    assert b.metric("cronoq_notifications_total", result="delivered") == 1
    print(f"\nfailover: {len(sent)} sends ({from_a} x 500 from the killed leader, 1 x 200 from the new one), "
          f"{len(set(ids))} distinct id")


def test_a_schedule_paused_after_failures_is_told_once_with_a_stable_id(cq, receiver) -> None:
    """A schedule's pause goes to the receivers of its tasks' pool that want SchedulePaused, signed,
    retried after a 500, and recorded in the schedule's status; its tasks' endings go to nobody."""
    from tests.support.schedules import Schedules

    signing_secret(cq)
    receiver.failing["/pause"] = 1
    cq.pool(notifications=[{"name": "ops", "url": f"{receiver.url}/pause", "outcomes": ["SchedulePaused"],
                            "signingKey": {"name": "notify-key", "key": "hmac"}}])
    sc = Schedules(cq)
    sc.create("flaky", every="2s", pauseAfterFailures=2, concurrencyPolicy="Forbid", failedTasksHistoryLimit=20,
              task={"retry": {"maxAttempts": 1}}, plays={"outcome": "Fail", "delay": "100ms"})

    def recorded() -> dict | None:
        return next(iter(sc.status("flaky").get("notifications", ())), None)

    entry = wait_until(recorded, timeout=90, what="the pause's delivery recorded in the schedule's status")
    schedule = sc.get("flaky")
    pause = next(c for c in schedule["status"]["conditions"] if c["type"] == "Paused")
    assert (pause["status"], pause["reason"]) == ("True", "ConsecutiveFailures")
    since = datetime.fromisoformat(pause["lastTransitionTime"].replace("Z", "+00:00"))
    id = f"{schedule['metadata']['uid']}/Paused/{int(since.timestamp())}"
    assert (entry["receiver"], entry["id"], entry["result"], entry["attempts"]) == ("ops", id, "Delivered", 2)

    sent = receiver.at("/pause")
    assert [r["status"] for r in sent] == [500, 200]
    assert all(r["verified"] for r in sent), "signed with the Secret's key"
    events = [json.loads(r["body"]) for r in sent]
    assert {e["id"] for e in events} == {id}
    event = events[-1]
    assert (event["type"], event["subject"]) == ("io.cronoq.schedule.paused", f"{cq.namespace}/flaky")
    data = event["data"]
    assert data["schedule"] == {"namespace": cq.namespace, "name": "flaky", "uid": schedule["metadata"]["uid"],
                                "pool": "default"}
    assert data["reason"] == "ConsecutiveFailures" and data["pauseAfterFailures"] == 2
    assert data["resume"] == f"cronoq schedule resume flaky -n {cq.namespace}"
    print("\nthe receiver got:", json.dumps(event, indent=2))
    # The schedule's failed Tasks were not sent (the receiver wants pauses only).
    assert len(receiver.requests) == 2


def test_namespace_receivers_serve_every_pool_and_a_pools_own_of_that_name_replaces_them(cq, receiver) -> None:
    cq.pool("alerts", notifications=[{"name": "oncall", "url": f"{receiver.url}/oncall", "scope": "Namespace",
                                      "outcomes": ["DeadLettered"]}])
    cq.pool("etl", retry={"maxAttempts": 1}, notifications=[
        {"name": "local", "url": f"{receiver.url}/local", "outcomes": ["DeadLettered"]}])
    cq.pool("batch", retry={"maxAttempts": 1}, notifications=[
        {"name": "oncall", "url": f"{receiver.url}/batch-oncall", "outcomes": ["DeadLettered"]}])
    cq.pool("plain", retry={"maxAttempts": 1})
    for name, pool in (("e", "etl"), ("b", "batch"), ("p", "plain")):
        cq.task(name, pool=pool, outcome="Fail", exit_code=1, delay="100ms")
    for name in ("e", "b", "p"):
        cq.wait_phase(name, "DeadLettered")

    def receivers(name: str) -> list[str] | None:
        found = sorted(n["receiver"] for n in cq.status(name).get("notifications", ()) if n["result"] == "Delivered")
        return found or None

    assert wait_until(lambda: (r := receivers("e")) and len(r) == 2 and r, timeout=60,
                      what="e told to its pool's and the namespace's") == ["local", "oncall"]
    assert wait_until(lambda: receivers("b"), timeout=60, what="b told") == ["oncall"]
    assert wait_until(lambda: receivers("p"), timeout=60, what="p told") == ["oncall"]

    def subjects(path: str) -> list[str]:
        return sorted(json.loads(r["body"])["subject"].split("/")[1] for r in receiver.at(path))

    assert subjects("/oncall") == ["e", "p"], "the namespace's receiver: every pool but the one replacing it"
    assert subjects("/local") == ["e"]
    assert subjects("/batch-oncall") == ["b"], "batch's own oncall replaced the namespace's"
