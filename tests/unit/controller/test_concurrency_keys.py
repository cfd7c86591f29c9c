"""Concurrency keys through the Controller (issue 54, item 2): a key's limit holds across every pool
of the namespace, a waiting task says which key holds it and who holds it, a new leader counts what
runs before it grants, and (a property) no sequence of submissions and endings ever has more
running attempts holding a key than its limit. A fake writer, no clock passing."""
from __future__ import annotations

import asyncio
import copy
from collections import Counter
from typing import Any

from hypothesis import given, settings, strategies as st

from tests.unit.fakes import World, counter, pod, pool, task


def pool_named(name: str, concurrency: int, **spec: Any) -> dict[str, Any]:
    raw = pool(concurrency, **spec)
    raw["metadata"].update(name=name, uid=f"pool-{name}")
    return raw


def submit(world: World, name: str, pool_name: str, *keys: str, priority: int = 0) -> None:
    raw = task(name)
    raw["spec"].update(pool=pool_name, concurrencyKeys=list(keys), priority=priority)
    world.writer.tasks[name] = copy.deepcopy(raw)
    world.controller.intake.on_task(None, raw)


def started(world: World) -> list[str]:
    return [name.rsplit("-", 1)[0] for kind, name in world.writer.calls if kind == "job"]


def running(world: World) -> list[str]:
    return sorted(n for n, t in world.writer.tasks.items() if (t.get("status") or {}).get("phase") == "Running")


def end(world: World, name: str) -> None:
    attempt = world.writer.tasks[name]["status"]["attempt"]
    world.controller.intake.on_pod(None, pod(f"{name}-a{attempt}", name, 0))


def reason(world: World, name: str) -> str | None:
    conditions = world.status(name).get("conditions") or []
    return next((c["reason"] for c in conditions if c["type"] == "Running"), None)


def two_pools(world: World, limit: int = 1) -> None:
    world.controller.intake.on_pool(None, pool_named("p", 5, concurrencyKeyLimits=[{"key": "deploy/x",
                                                                                   "limit": limit}]))
    world.controller.intake.on_pool(None, pool_named("q", 5))


def test_a_mutex_across_two_pools_runs_one_holder_at_a_time_and_the_waiting_say_who_holds_it() -> None:
    async def scenario() -> None:
        world = World()
        two_pools(world)
        submit(world, "a", "p", "deploy/x")
        submit(world, "b", "q", "deploy/x")
        submit(world, "c", "p", "deploy/x", priority=-1)
        submit(world, "free", "q", "other")
        await world.settle()
        assert sorted(started(world)) == ["a", "free"], "one holder of the mutex, whichever pool"
        for name in ("b", "c"):
            assert world.status(name)["phase"] == "Queued"
            assert reason(world, name) == "WaitingForKey"
            assert world.status(name)["message"] == \
                "waiting for concurrency key deploy/x: 1 of 1 running across pools, held by a"

        end(world, "a")  # the holder in pool p ends: the best waiter, in pool q, starts (not p's own c)
        await world.settle()
        assert started(world)[-1] == "b" and running(world) == ["b", "free"]
        assert world.status("c")["message"] == \
            "waiting for concurrency key deploy/x: 1 of 1 running across pools, held by a", \
            "the key changing hands is no news: one write per key waited for"

        end(world, "b")
        await world.settle()
        assert started(world)[-1] == "c" and running(world) == ["c", "free"]
    asyncio.run(scenario())


def test_a_raised_limit_lets_the_waiting_in_at_once() -> None:
    async def scenario() -> None:
        world = World()
        two_pools(world)
        for name in ("a", "b", "c"):
            submit(world, name, "q", "deploy/x")
        await world.settle()
        assert running(world) == ["a"]
        world.controller.intake.on_pool(None, {**pool_named("p", 5, concurrencyKeyLimits=[
            {"key": "deploy/x", "limit": 3}]), "metadata": {**pool_named("p", 5)["metadata"], "generation": 2,
                                                            "resourceVersion": "9"}})
        await world.settle()
        assert running(world) == ["a", "b", "c"]
    asyncio.run(scenario())


def test_a_new_leader_counts_the_running_holders_before_it_grants() -> None:
    async def scenario() -> None:
        old = World()
        two_pools(old)
        submit(old, "a", "p", "deploy/x")
        submit(old, "b", "q", "deploy/x")
        await old.settle()
        assert running(old) == ["a"]

        new = World()  # the new leader lists what is there: the pools, the tasks as written, a's Job
        two_pools(new)
        new.writer.tasks = copy.deepcopy(old.writer.tasks)
        new.writer.version = old.writer.version  # its writes are newer than what it listed
        for raw in copy.deepcopy(list(old.writer.tasks.values())):
            new.controller.intake.on_task(None, raw)
        for job in copy.deepcopy(list(old.writer.jobs.values())):
            new.controller.intake.on_job(None, job)
        await new.settle()
        assert started(new) == [], "b still waits: a holds the key"
        assert [c for c in new.writer.calls if c[0] == "status"] == [], "and its status already says so"
        assert new.status("b")["phase"] == "Queued" and reason(new, "b") == "WaitingForKey"

        end(new, "a")
        await new.settle()
        assert started(new) == ["b"]
    asyncio.run(scenario())


# --- the property: the limit is never passed, across pools, whatever ends when -----------------------

KEYS = ("k1", "k2", "c-1", "c-2")
LIMITS = {"k1": 1, "k2": 2, "c-*": 1}


def limit_of(key: str) -> int:
    return LIMITS.get(key, LIMITS["c-*"])


@settings(max_examples=25, deadline=None)
@given(tasks=st.lists(st.tuples(st.sampled_from(["p", "q", "r"]), st.sets(st.sampled_from(KEYS), max_size=2),
                                st.integers(-1, 1)), min_size=1, max_size=12),
       endings=st.lists(st.integers(0, 11), max_size=30))
def test_no_key_is_ever_held_by_more_running_attempts_than_its_limit(
        tasks: list[tuple[str, set[str], int]], endings: list[int]) -> None:
    async def scenario() -> None:
        world = World()
        world.controller.intake.on_pool(None, pool_named("p", 3, concurrencyKeyLimits=[
            {"key": "k1", "limit": 1}, {"key": "c-*", "limit": 1}]))
        world.controller.intake.on_pool(None, pool_named("q", 2, concurrencyKeyLimits=[{"key": "k2", "limit": 2}]))
        world.controller.intake.on_pool(None, pool_named("r", 4, concurrencyKeyLimits=[{"key": "k2", "limit": 5}]))
        for i, (pool_name, keys, priority) in enumerate(tasks):
            submit(world, f"t{i}", pool_name, *sorted(keys), priority=priority)

        def check() -> None:
            held: Counter[str] = Counter()
            for name in running(world):
                held.update(world.writer.tasks[name]["spec"]["concurrencyKeys"])
            assert all(n <= limit_of(k) for k, n in held.items()), held

        await world.settle()
        check()
        for pick in endings:
            now = running(world)
            if not now:
                break
            end(world, now[pick % len(now)])
            await world.settle()
            check()
        while now := running(world):  # everything runs in the end: no task is left parked
            end(world, now[0])
            await world.settle()
            check()
        assert all(t["status"]["phase"] == "Succeeded" for t in world.writer.tasks.values())
    asyncio.run(scenario())


# --- newest wins (issue 54, item 3) ------------------------------------------------------------------

def newest_wins(world: World, policy: str) -> None:
    world.controller.intake.on_pool(None, pool_named("p", 5, concurrencyKeyLimits=[
        {"key": "sync/*", "limit": 1, "onNewer": policy}]))
    world.controller.intake.on_pool(None, pool_named("q", 5))


def test_supersede_queued_ends_the_older_waiting_tasks_naming_the_newer_and_lets_the_running_one_go_on() -> None:
    async def scenario() -> None:
        world = World()
        newest_wins(world, "SupersedeQueued")
        submit(world, "s1", "p", "sync/acct-1")
        await world.settle()
        submit(world, "s2", "q", "sync/acct-1")
        submit(world, "other", "q", "sync/acct-2")
        await world.settle()
        await world.clock.advance(1)  # a0 is newer by its submission, not by its name
        submit(world, "a0", "q", "sync/acct-1")
        await world.settle()
        assert running(world) == ["other", "s1"], "the running one goes on; another account's is not touched"
        s2 = world.status("s2")
        finished = next(c for c in s2["conditions"] if c["type"] == "Finished")
        assert (s2["phase"], finished["reason"]) == ("Cancelled", "Superseded")
        assert s2["message"] == "superseded by newer task a0 (concurrency key sync/acct-1)"
        assert world.status("a0")["phase"] == "Queued"

        end(world, "s1")
        await world.settle()
        assert running(world) == ["a0", "other"]
    asyncio.run(scenario())


def test_cancel_running_aborts_the_older_running_task_and_the_newest_runs_next() -> None:
    async def scenario() -> None:
        world = World()
        newest_wins(world, "CancelRunning")
        submit(world, "b1", "p", "sync/x")
        await world.settle()
        await world.clock.advance(1)
        submit(world, "b2", "q", "sync/x")
        await world.settle()
        b1 = world.status("b1")
        assert b1["phase"] == "Cancelled" and b1["message"] == "superseded by newer task b2 (concurrency key sync/x)"
        assert ("delete-job", "b1-a1") in world.writer.calls
        assert b1["attempts"][0]["reason"] == "Superseded"
    asyncio.run(scenario())


def debounce(world: World, quiet: str = "30s", max_wait: str = "10m") -> None:
    world.controller.intake.on_pool(None, pool_named("p", 5, concurrencyKeyLimits=[
        {"key": "build/*", "limit": 1, "onNewer": "Debounce", "debounce": {"quiet": quiet, "maxWait": max_wait}}]))
    world.controller.intake.on_pool(None, pool_named("q", 5))


def test_debounce_runs_only_the_newest_once_the_key_is_quiet_and_supersedes_the_older() -> None:
    async def scenario() -> None:
        world = World()
        debounce(world)
        submit(world, "b1", "p", "build/x")
        await world.settle()
        assert reason(world, "b1") == "Debouncing"
        assert world.status("b1")["message"] == \
            "debouncing key build/x: starts at 12:00:30Z unless a newer task arrives (at the latest 12:10:00Z)"
        await world.clock.advance(20)
        submit(world, "b2", "q", "build/x")
        submit(world, "other", "q", "build/y")
        await world.settle()
        await world.clock.advance(20)
        submit(world, "b3", "p", "build/x")
        await world.settle()
        assert reason(world, "b2") == "Debouncing" and "ends Superseded when the newest starts" in \
            world.status("b2")["message"]
        assert world.status("b3")["message"].startswith("debouncing key build/x: starts at 12:01:10Z")
        assert running(world) == []

        await world.clock.advance(29)  # 12:01:09: the quiet after b3 is not over
        await world.settle()
        assert running(world) == ["other"], "another key's burst is its own: quiet since 12:00:50"
        await world.clock.advance(1.5)
        await world.settle()
        assert running(world) == ["b3", "other"], "the newest starts once the key has been quiet"
        for older in ("b1", "b2"):
            s = world.status(older)
            assert s["phase"] == "Cancelled" and s["message"] == \
                "superseded by newer task b3 (concurrency key build/x)"
        assert started(world).count("b3") == 1 and "b1" not in started(world) and "b2" not in started(world)
    asyncio.run(scenario())


def test_debounce_max_wait_starts_the_newest_however_often_tasks_arrive() -> None:
    async def scenario() -> None:
        world = World()
        debounce(world, quiet="30s", max_wait="45s")
        for n, name in enumerate(("m1", "m2", "m3")):  # every 20 s: never quiet for 30 s
            if n:
                await world.clock.advance(20)
            submit(world, name, "p", "build/x")
            await world.settle()
        assert world.status("m3")["message"].startswith("debouncing key build/x: starts at 12:00:45Z")
        await world.clock.advance(5.5)  # 12:00:45.5: the oldest has waited maxWait
        await world.settle()
        assert running(world) == ["m3"]
        assert [world.status(n)["phase"] for n in ("m1", "m2")] == ["Cancelled", "Cancelled"]
    asyncio.run(scenario())


def test_a_new_leader_debounces_from_the_tasks_submission_times_alone() -> None:
    async def scenario() -> None:
        old = World()
        debounce(old)
        submit(old, "d1", "p", "build/x")
        await old.settle()
        await old.clock.advance(10)
        submit(old, "d2", "p", "build/x")
        await old.settle()

        new = World()  # at 12:00:00 on its own clock, with no memory of the burst
        debounce(new)
        new.writer.tasks = copy.deepcopy(old.writer.tasks)
        new.writer.version = old.writer.version
        await new.clock.advance(15)
        for raw in copy.deepcopy(list(old.writer.tasks.values())):
            new.controller.intake.on_task(None, raw)
        await new.settle()
        assert [c for c in new.writer.calls if c[0] == "status"] == [], "its statuses already say so"
        await new.clock.advance(24)  # 12:00:39: still quiet until 12:00:40 (d2's arrival + 30 s)
        assert running(new) == []
        await new.clock.advance(1.5)
        await new.settle()
        assert running(new) == ["d2"] and new.status("d1")["phase"] == "Cancelled"
    asyncio.run(scenario())


def test_the_tasks_waiting_for_a_key_are_a_gauge_per_pool() -> None:
    """cronoq_key_waiting_tasks: the tasks a key holds back, which cronoq_queue_depth does not count."""
    async def scenario() -> None:
        world = World()
        two_pools(world)
        submit(world, "a", "p", "deploy/x")
        await world.settle()
        submit(world, "b", "q", "deploy/x")
        submit(world, "c", "q", "deploy/x")
        submit(world, "d", "p", "deploy/x")
        await world.settle()
        ns = world.writer.tasks["a"]["metadata"]["namespace"]
        gauge = {p: counter("cronoq_key_waiting_tasks", namespace=ns, pool=p) for p in ("p", "q")}
        assert gauge == {"p": 1, "q": 2}
        assert counter("cronoq_queue_depth", namespace=ns, pool="q") == 0
        end(world, "a")
        await world.settle()
        assert counter("cronoq_key_waiting_tasks", namespace=ns, pool="q") \
            + counter("cronoq_key_waiting_tasks", namespace=ns, pool="p") == 2, "one of them holds the key now"
        for name in ("b", "c", "d"):
            world.writer.tasks[name]["spec"]["cancel"] = True
            raw = copy.deepcopy(world.writer.tasks[name])
            raw["metadata"]["resourceVersion"] = str(int(raw["metadata"]["resourceVersion"]) + 1000)
            world.controller.intake.on_task(None, raw)
        await world.settle()
        assert [counter("cronoq_key_waiting_tasks", namespace=ns, pool=p) for p in ("p", "q")] == [0, 0]
    asyncio.run(scenario())
