"""The notification sender (controller/notify.py) over the fake writer, a fake clock and a fake
POST: a task's ending is queued, not sent, by the reconcile that ends it; sends are retried with
the engine's delays, recorded in the status once delivered, given up with an Event at the bound,
and a new leader's sweep sends only what no status records — with the same id."""
from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

from cronoq.controller.notify import Notifier
from cronoq.engine import notify

from tests.unit.builders import T0
from tests.unit.fakes import NS, FakeWriter, World, counter, pod, pool

KEY = b"k3y"


class Writer(FakeWriter):
    schedule: dict[str, Any] | None = None

    async def read_secret_key(self, namespace: str, name: str, key: str) -> bytes | None:
        self.calls.append(("read-secret", f"{name}/{key}"))
        return KEY if (name, key) == ("hook", "hmac") else None

    async def read_schedule(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("read-schedule", name))
        return copy.deepcopy(self.schedule) if self.schedule and self.schedule["metadata"]["name"] == name else None

    async def replace_schedule_status(self, raw: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        assert self.schedule is not None
        self.calls.append(("schedule-status", raw["metadata"]["name"]))
        self.schedule = self._bump({**self.schedule, "status": copy.deepcopy(status)})
        return copy.deepcopy(self.schedule)


class Post:
    """Answers each POST with the next of `answers` (the last one again once they run out)."""

    def __init__(self, *answers: int) -> None:
        self.answers = list(answers)
        self.sent: list[dict[str, Any]] = []

    async def __call__(self, url: str, body: bytes, headers: dict[str, str], timeout: float,
                       allow_link_local: bool) -> tuple[int | None, str]:
        code = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        self.sent.append({"url": url, "body": body, "headers": headers, "timeout": timeout, "code": code,
                          "allow_link_local": allow_link_local})
        return code, "" if code == 200 else f"HTTP {code}"


RECEIVER = {"name": "ops", "url": "https://hooks.example.com/x", "outcomes": ["DeadLettered"],
            "signingKey": {"name": "hook", "key": "hmac"}, "maxAttempts": 4, "timeout": "5s"}


def world_with(post: Post, **receiver: Any) -> tuple[World, Notifier]:
    world = World()
    world.writer = Writer()
    from cronoq.controller.reconciler import Controller
    world.controller = Controller(world.writer, epoch=1, clock=world.clock)
    world.controller.intake.on_pool(None, pool(1, notifications=[{**RECEIVER, **receiver}]))
    notifier = Notifier(world.writer, world.controller.store, world.controller.term, world.clock, poster=post)
    world.controller.notify_with(notifier)
    return world, notifier


async def dead_letter(world: World, name: str = "a") -> None:
    world.submit(name, retry={"maxAttempts": 1})
    await world.settle()
    world.controller.intake.on_pod(None, pod(f"{name}-a1", name, 1))
    await world.settle()
    assert world.status(name)["phase"] == "DeadLettered"


def test_the_ending_is_queued_then_sent_again_after_500s_and_recorded_once_delivered() -> None:
    async def scenario() -> None:
        post = Post(500, 500, 200)
        world, notifier = world_with(post)
        await dead_letter(world)
        assert post.sent == [] and ("read-secret", "hook/hmac") not in world.writer.calls, \
            "the reconcile that ended the task only queued its notification"
        running = asyncio.create_task(notifier.run())
        await world.clock.idle()
        assert [s["code"] for s in post.sent] == [500]
        assert world.clock.pending[0] == 1.0  # the sweep's minute after the retry's second
        await world.clock.advance(1)
        assert [s["code"] for s in post.sent] == [500, 500]
        await world.clock.advance(2)
        assert [s["code"] for s in post.sent] == [500, 500, 200]
        id = "uid-a/DeadLettered/1"
        assert {json.loads(s["body"])["id"] for s in post.sent} == {id}
        for sent in post.sent:
            assert sent["headers"]["Idempotency-Key"] == id and sent["timeout"] == 5.0
            assert notify.verify(KEY, sent["headers"]["Cronoq-Signature"], sent["body"], world.clock.now())
        (entry,) = world.status("a")["notifications"]
        assert {k: entry[k] for k in ("receiver", "id", "result", "attempts")} == {
            "receiver": "ops", "id": id, "result": "Delivered", "attempts": 3}
        assert world.status("a")["phase"] == "DeadLettered", "the rest of the status is kept"

        # The sweep (a new leader's too) finds it recorded: nothing is sent again.
        world.controller.intake.on_task(None, copy.deepcopy(world.writer.tasks["a"]))
        notifier.sweep()
        await world.clock.advance(120)
        assert len(post.sent) == 3
        running.cancel()

    asyncio.run(scenario())


def test_a_new_leader_sends_what_no_status_records_with_the_same_id() -> None:
    async def scenario() -> None:
        post = Post(500)
        world, notifier = world_with(post)
        await dead_letter(world)
        first = asyncio.create_task(notifier.run())
        await world.clock.idle()
        first.cancel()  # the leader dies after a 500
        await world.clock.idle()
        assert "notifications" not in world.status("a")

        answered = Post(200)
        again = Notifier(world.writer, world.controller.store, world.controller.term, world.clock, poster=answered)
        second = asyncio.create_task(again.run())  # its sweep at start
        await world.clock.idle()
        assert [json.loads(s["body"])["id"] for s in post.sent + answered.sent] == ["uid-a/DeadLettered/1"] * 2
        assert world.status("a")["notifications"][0]["result"] == "Delivered"
        second.cancel()

    asyncio.run(scenario())


def test_at_the_bound_it_is_given_up_with_a_warning_event_and_a_4xx_at_once() -> None:
    async def scenario() -> None:
        post = Post(503)
        world, notifier = world_with(post, maxAttempts=3)
        await dead_letter(world)
        before = counter("cronoq_notifications_total", result="gave_up")
        running = asyncio.create_task(notifier.run())
        await world.clock.advance(10)
        assert len(post.sent) == 3
        (entry,) = world.status("a")["notifications"]
        assert (entry["result"], entry["attempts"]) == ("GaveUp", 3)
        assert ("a", "NotificationFailed", "Warning") in world.writer.events
        assert counter("cronoq_notifications_total", result="gave_up") == before + 1
        await world.clock.advance(600)
        assert len(post.sent) == 3, "a given-up notification is not sent again"

        refused = Post(401)
        world.controller.intake.on_pool(None, pool(1, notifications=[{**RECEIVER, "name": "strict"}]))
        notifier.post = refused
        await dead_letter(world, "b")
        await world.clock.advance(1)
        assert len(refused.sent) == 1
        entry = next(n for n in world.status("b")["notifications"] if n["receiver"] == "strict")
        assert (entry["result"], entry["attempts"]) == ("GaveUp", 1)
        running.cancel()

    asyncio.run(scenario())


def test_receivers_get_only_the_outcomes_they_want_and_unsigned_ones_no_signature() -> None:
    async def scenario() -> None:
        post = Post(200)
        world, notifier = world_with(post, outcomes=["Succeeded"], signingKey=None, format="Slack")
        await dead_letter(world)
        running = asyncio.create_task(notifier.run())
        await world.clock.advance(1)
        assert post.sent == []
        world.submit("s")
        await world.settle()
        world.controller.intake.on_pod(None, pod("s-a1", "s", 0))
        await world.settle()
        await world.clock.advance(1)
        (sent,) = post.sent
        assert "Cronoq-Signature" not in sent["headers"] and sent["headers"]["Content-Type"] == "application/json"
        assert json.loads(sent["body"])["text"].startswith(f":white_check_mark: Task *{NS}/s*")
        running.cancel()

    asyncio.run(scenario())


def test_a_full_queue_drops_the_offer_and_the_sweep_brings_it_back() -> None:
    async def scenario() -> None:
        post = Post(200)
        world, _ = world_with(post)
        small = Notifier(world.writer, world.controller.store, world.controller.term, world.clock, poster=post, limit=1)
        world.controller.notify_with(small)
        before = counter("cronoq_notifications_total", result="dropped")
        await dead_letter(world, "a")
        await dead_letter(world, "b")
        assert counter("cronoq_notifications_total", result="dropped") == before + 1
        for name in ("a", "b"):
            world.controller.intake.on_task(None, copy.deepcopy(world.writer.tasks[name]))
        running = asyncio.create_task(small.run())
        await world.clock.advance(1)
        assert len(post.sent) == 1, "a's, while b's is dropped again from the full queue"
        world.controller.intake.on_task(None, copy.deepcopy(world.writer.tasks["a"]))  # its record, as watched
        await world.clock.advance(60)  # the next sweep
        assert sorted(json.loads(s["body"])["subject"] for s in post.sent) == [f"{NS}/a", f"{NS}/b"]
        running.cancel()

    assert T0.tzinfo is not None
    asyncio.run(scenario())


def paused_schedule(pool_name: str = "p") -> dict[str, Any]:
    return {"apiVersion": "cronoq.io/v1alpha1", "kind": "TaskSchedule",
            "metadata": {"name": "nightly", "namespace": NS, "uid": "uid-s", "generation": 1, "resourceVersion": "7"},
            "spec": {"every": "1h", "pauseAfterFailures": 2, "taskTemplate": {"spec": {"pool": pool_name, "image": "x"}}},
            "status": {"consecutiveFailures": 2, "conditions": [
                {"type": "Paused", "status": "True", "reason": "ConsecutiveFailures", "lastTransitionTime": T0.isoformat(),
                 "message": "2 Tasks in a row ended Failed or DeadLettered"}]}}


def test_a_paused_schedule_is_told_to_its_pools_receivers_once_recorded_in_its_status() -> None:
    async def scenario() -> None:
        post = Post(500, 200)
        world, notifier = world_with(post, outcomes=["SchedulePaused"])
        world.writer.schedule = paused_schedule()
        notifier.schedules = lambda: [world.writer.schedule] if world.writer.schedule else []
        running = asyncio.create_task(notifier.run())  # its sweep at start finds the pause
        await world.clock.idle()
        await world.clock.advance(1)
        id = f"uid-s/Paused/{int(T0.timestamp())}"
        assert [s["code"] for s in post.sent] == [500, 200]
        assert {json.loads(s["body"])["id"] for s in post.sent} == {id}
        assert all(notify.verify(KEY, s["headers"]["Cronoq-Signature"], s["body"], world.clock.now())
                   for s in post.sent)
        assert json.loads(post.sent[-1]["body"])["type"] == "io.cronoq.schedule.paused"
        (entry,) = world.writer.schedule["status"]["notifications"]
        assert (entry["receiver"], entry["id"], entry["result"], entry["attempts"]) == ("ops", id, "Delivered", 2)
        assert world.writer.schedule["status"]["conditions"][0]["type"] == "Paused", "the rest of the status is kept"

        notifier.offer_schedule(NS, "nightly", "uid-s", "p")  # offered again (e.g. by a new leader): recorded
        await world.clock.advance(61)
        assert len(post.sent) == 2
        running.cancel()

    asyncio.run(scenario())


def test_a_task_pool_receiver_hears_no_pause_and_a_pause_receiver_no_task() -> None:
    async def scenario() -> None:
        post = Post(200)
        world, notifier = world_with(post)  # outcomes DeadLettered only
        world.writer.schedule = paused_schedule()
        notifier.schedules = lambda: [world.writer.schedule]
        notifier.offer_schedule(NS, "nightly", "uid-s", "p")
        running = asyncio.create_task(notifier.run())
        await world.clock.advance(1)
        assert post.sent == []
        running.cancel()

    asyncio.run(scenario())


def test_a_namespace_receiver_of_another_pool_serves_this_pool_and_a_pool_one_does_not() -> None:
    async def scenario() -> None:
        post = Post(200)
        world, notifier = world_with(post, name="local", url="https://local.example.com/")
        other = pool(1, notifications=[{**RECEIVER, "name": "wide", "url": "https://wide.example.com/",
                                        "scope": "Namespace"},
                                       {**RECEIVER, "name": "theirs", "url": "https://theirs.example.com/"}],
                     allowLinkLocal=True)
        other["metadata"] = {**other["metadata"], "name": "alerts", "uid": "pool-alerts"}
        world.controller.intake.on_pool(None, other)
        await dead_letter(world)
        running = asyncio.create_task(notifier.run())
        await world.clock.advance(1)
        assert sorted((s["url"], s["allow_link_local"]) for s in post.sent) == [
            ("https://local.example.com/", False), ("https://wide.example.com/", True)], \
            "each receiver is checked by its own pool's allowLinkLocal"
        assert sorted(n["receiver"] for n in world.status("a")["notifications"]) == ["local", "wide"]
        running.cancel()

    asyncio.run(scenario())
