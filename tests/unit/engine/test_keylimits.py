"""Concurrency keys' limits and who waits for them (engine/keylimits.py), and the queue setting aside
a task whose key has no room without giving it a turn (engine/admission.py)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

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
