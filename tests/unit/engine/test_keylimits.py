"""Concurrency keys' limits and who waits for them (engine/keylimits.py), and the queue setting aside
a task whose key has no room without giving it a turn (engine/admission.py)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from cronoq.api import KeyLimit, TaskPoolSpec
from cronoq.engine import keylimits
from cronoq.engine.admission import Candidate, Queue
from cronoq.engine.keylimits import KeyWait, Limits

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)


def limits(*entries: tuple[str, int]) -> Limits:
    return Limits.of(KeyLimit(key=k, limit=n) for k, n in entries)


def test_a_keys_own_entry_wins_over_a_prefix_and_a_longer_prefix_over_a_shorter() -> None:
    found = limits(("customer-*", 3), ("customer-4*", 2), ("customer-42", 1))
    assert found.limit("customer-42") == 1
    assert found.limit("customer-43") == 2
    assert found.limit("customer-7") == 3
    assert found.limit("deploy/x") is None, "a key no pool declares has no limit"


def test_where_pools_declare_the_same_key_the_smallest_limit_holds() -> None:
    pools = [TaskPoolSpec(concurrency_key_limits=(KeyLimit(key="deploy/x", limit=3),)),
             TaskPoolSpec(concurrency_key_limits=(KeyLimit(key="deploy/x", limit=1), KeyLimit(key="c-*", limit=5))),
             TaskPoolSpec(concurrency_key_limits=(KeyLimit(key="c-*", limit=4),))]
    found = Limits.of_pools(pools)
    assert (found.limit("deploy/x"), found.limit("c-9")) == (1, 4)
    assert not Limits.of_pools([TaskPoolSpec()])


def test_blocking_names_the_first_key_without_room() -> None:
    found = limits(("a", 1), ("b", 2))
    assert keylimits.blocking(["a", "b"], {"b": 2}, found) == "b"
    assert keylimits.blocking(["a", "b"], {"a": 1, "b": 2}, found) == "a"
    assert keylimits.blocking(["a", "b", "free"], {"b": 1, "free": 99}, found) is None
    assert keylimits.blocking(["zero"], {}, limits(("zero", 0))) == "zero", "limit 0 holds every task naming it"


def test_the_wait_names_the_key_its_limit_and_its_holders() -> None:
    wait = keylimits.key_wait(["free", "deploy/x"], {"deploy/x": {"deploy-b", "deploy-a"}},
                              limits(("deploy/x", 2)))
    assert wait == KeyWait("deploy/x", 2, ("deploy-a", "deploy-b"))
    said = keylimits.message(wait)
    assert said == ("waiting for concurrency key deploy/x: 2 of 2 running across pools, "
                    "held by deploy-a, deploy-b")
    assert keylimits.waits_for(said) == "deploy/x"
    assert keylimits.waits_for("queued in pool p") is None
    assert keylimits.described(wait) == ("concurrency key deploy/x has 2 of 2 running (its limit across every pool "
                                         "of the namespace): held by deploy-a, deploy-b")
    assert keylimits.key_wait(["deploy/x"], {"deploy/x": {"a"}}, limits(("deploy/x", 2))) is None
    many = KeyWait("k", 5, tuple(f"t{i}" for i in range(5)))
    assert many.holders_text() == "t0, t1, t2 and 2 more"


def test_the_queue_sets_aside_a_held_task_without_giving_its_group_a_turn() -> None:
    queue = Queue()
    for i, (name, group, keys) in enumerate([("a1", "a", ("m",)), ("a2", "a", ()), ("b1", "b", ()),
                                             ("a3", "a", ("m",))]):
        queue.put(Candidate.of("ns", name, 0, T0 + timedelta(seconds=i), group, None, keys))
    held: list[str] = []

    def hold(candidate: Candidate) -> bool:
        if "m" in candidate.keys:
            held.append(candidate.name)
            return True
        return False

    order = [c.name for c in iter(lambda: queue.pop(held=hold), None)]
    assert order == ["a2", "b1"], "a1 is set aside and group a still has its turn first"
    assert held == ["a1", "a3"] and len(queue) == 0


def test_a_client_reads_the_wait_from_the_running_tasks_and_the_pools() -> None:
    pools = [TaskPoolSpec(concurrency_key_limits=(KeyLimit(key="customer-*", limit=2),)), TaskPoolSpec()]
    running = [("sync-1", ("customer-42",)), ("sync-2", ("customer-42", "other")), ("sync-3", ("customer-7",))]
    wait = keylimits.of_tasks(["customer-42"], running, pools)
    assert wait == KeyWait("customer-42", 2, ("sync-1", "sync-2"))
    assert keylimits.of_tasks(["customer-7"], running, pools) is None, "customer-7 has 1 of its own 2"


def test_the_key_goes_back_to_the_best_waiters_that_can_run_first() -> None:
    waiting = [(False, (-5, T0), "urgent-in-a-full-pool"), (True, (0, T0 + timedelta(seconds=2)), "later"),
               (True, (0, T0), "older"), (True, (1, T0), "lower")]
    assert keylimits.next_holders(waiting, 1) == ["older"]
    assert keylimits.next_holders(waiting, 3) == ["older", "later", "lower"]
    assert keylimits.next_holders(waiting, None) == ["older", "later", "lower", "urgent-in-a-full-pool"]
    assert keylimits.next_holders(waiting, 0) == []


def test_a_newer_task_supersedes_as_the_keys_policy_says() -> None:
    found = Limits.of([KeyLimit(key="sync/*", limit=1, on_newer="SupersedeQueued"),
                       KeyLimit(key="build", limit=1, on_newer="CancelRunning"), KeyLimit(key="plain", limit=1)])
    old, new = (T0, "old"), (T0 + timedelta(seconds=1), "new")
    peers = {"sync/a": [old, new], "build": [old, new], "plain": [old, new]}
    assert keylimits.superseded(["sync/a"], old, False, peers, found) == keylimits.Superseded("new", "sync/a")
    assert keylimits.superseded(["sync/a"], old, True, peers, found) is None, "SupersedeQueued: a running one goes on"
    assert keylimits.superseded(["build"], old, True, peers, found) == keylimits.Superseded("new", "build")
    assert keylimits.superseded(["plain"], old, False, peers, found) is None, "Queue: they take turns"
    assert keylimits.superseded(["sync/a"], new, False, peers, found) is None, "the newest is never superseded"
    tie = {"sync/a": [(T0, "a"), (T0, "b")]}
    assert keylimits.superseded(["sync/a"], (T0, "a"), False, tie, found) == keylimits.Superseded("b", "sync/a")
    assert keylimits.Superseded("new", "sync/a").message() == "superseded by newer task new (concurrency key sync/a)"


def test_where_pools_declare_one_key_differently_the_smaller_limit_then_the_stronger_policy_decides() -> None:
    found = Limits.of([KeyLimit(key="k", limit=2, on_newer="CancelRunning"), KeyLimit(key="k", limit=1),
                       KeyLimit(key="j", limit=1), KeyLimit(key="j", limit=1, on_newer="SupersedeQueued")])
    assert (found.limit("k"), found.supersedes("k")) == (1, False)
    assert (found.limit("j"), found.supersedes("j")) == (1, True)


# --------------------------------------------------------------------------- debounce


def debounced(quiet: float = 30, max_wait: float = 600) -> Limits:
    return Limits.of([KeyLimit(key="deploy/x", limit=1, on_newer="Debounce",
                               debounce={"quiet": timedelta(seconds=quiet), "max_wait": timedelta(seconds=max_wait)})])


def arrived(seconds: float, name: str) -> keylimits.Arrival:
    return (T0 + timedelta(seconds=seconds), name)


def test_debounce_is_refused_without_its_policy_and_required_with_it() -> None:
    with pytest.raises(ValueError, match="debounce"):
        KeyLimit(key="k", limit=1, on_newer="Debounce")
    with pytest.raises(ValueError, match="debounce"):
        KeyLimit(key="k", limit=1, debounce={"quiet": "1s", "maxWait": "1m"})
    assert KeyLimit.model_validate({"key": "k", "limit": 1, "onNewer": "Debounce",
                                    "debounce": {"quiet": "30s", "maxWait": "10m"}}).debounce is not None


def test_a_lone_task_starts_once_its_key_has_been_quiet() -> None:
    found, mine = debounced(), arrived(0, "a")
    wait = keylimits.debouncing(["deploy/x"], mine, {"deploy/x": [mine]}, found, T0 + timedelta(seconds=10))
    assert wait is not None and wait.mine and wait.newest == "a"
    assert wait.start_at == T0 + timedelta(seconds=30) and wait.latest == T0 + timedelta(seconds=600)
    assert keylimits.due(wait, T0 + timedelta(seconds=10)) == timedelta(seconds=20)
    assert "starts at 12:00:30Z unless a newer task arrives (at the latest 12:10:00Z)" in wait.message()
    assert keylimits.debouncing(["deploy/x"], mine, {"deploy/x": [mine]}, found, T0 + timedelta(seconds=30)) is None


def test_each_arrival_starts_the_quiet_again_and_the_older_ones_wait_for_the_newest() -> None:
    found = debounced()
    burst = [arrived(0, "a"), arrived(20, "b"), arrived(40, "c")]
    now = T0 + timedelta(seconds=50)
    newest = keylimits.debouncing(["deploy/x"], burst[2], {"deploy/x": burst}, found, now)
    assert newest is not None and newest.mine and newest.start_at == T0 + timedelta(seconds=70)
    older = keylimits.debouncing(["deploy/x"], burst[0], {"deploy/x": burst}, found, now)
    assert older is not None and not older.mine and older.newest == "c"
    assert keylimits.due(older, now) is None, "an older one is woken by the newest's release"
    assert "ends Superseded when the newest starts" in older.message()
    assert "newer task c supersedes this one" in older.described()
    # Past the newest's start the older ones still wait: they end when it is released.
    later = T0 + timedelta(seconds=80)
    assert keylimits.debouncing(["deploy/x"], burst[2], {"deploy/x": burst}, found, later) is None
    assert keylimits.debouncing(["deploy/x"], burst[0], {"deploy/x": burst}, found, later) is not None


def test_max_wait_caps_the_quiet_from_the_oldest_arrival() -> None:
    found = debounced(quiet=30, max_wait=60)
    burst = [arrived(s, f"t{s}") for s in range(0, 60, 10)]  # one every 10 s: never quiet for 30 s
    wait = keylimits.debouncing(["deploy/x"], burst[-1], {"deploy/x": burst}, found, T0 + timedelta(seconds=55))
    assert wait is not None and wait.start_at == wait.latest == T0 + timedelta(seconds=60)
    assert keylimits.debouncing(["deploy/x"], burst[-1], {"deploy/x": burst}, found,
                                T0 + timedelta(seconds=60)) is None


def test_the_wait_is_computed_from_the_arrivals_alone_whoever_asks() -> None:
    """A new leader (no memory) computes the same times from the same tasks' submission times,
    whichever task's reconcile asks and whatever order it lists them in."""
    found = debounced(quiet=30, max_wait=100)
    burst = [arrived(0, "a"), arrived(45, "b"), arrived(90, "c")]
    now = T0 + timedelta(seconds=95)
    seen = {keylimits.debouncing(["deploy/x"], mine, {"deploy/x": order}, found, now).start_at  # type: ignore[union-attr]
            for mine in burst for order in (burst, burst[::-1], [b for b in burst if b != mine])}
    assert seen == {T0 + timedelta(seconds=100)}


def test_keys_without_debounce_hold_nothing_and_a_newer_released_task_supersedes() -> None:
    found = Limits.of([KeyLimit(key="q", limit=1), *debounced().exact.values()])
    mine = arrived(0, "a")
    assert keylimits.debouncing(["q"], mine, {"q": [mine, arrived(5, "b")]}, found, T0) is None
    assert keylimits.debounces("deploy/x", found) and not keylimits.debounces("q", found)
    # Debounce supersedes like SupersedeQueued, among the tasks the caller gives (the released ones).
    ended = keylimits.superseded(["deploy/x"], mine, False, {"deploy/x": [mine, arrived(5, "b")]}, found)
    assert ended is not None and ended.by == "b"
    assert keylimits.superseded(["deploy/x"], mine, True, {"deploy/x": [arrived(5, "b")]}, found) is None
