"""Admission order (DESIGN §5): within a pool, the highest priority first, then the oldest
submittedAt, then the name, as the pool's `Queue` pops its waiting tasks. (How many it pops, the
free slots, is counted by the controller's `Slots`.)"""
from __future__ import annotations

from typing import Iterable

from hypothesis import given, strategies as st

from cronoq.engine.admission import Candidate, Queue

from tests.unit.builders import at


def admitted(candidates: Iterable[Candidate], free: int | None = None) -> list[Candidate]:
    """The first `free` (default: all) the queue gives, the candidates put in the order given."""
    queue = Queue()
    for candidate in candidates:
        queue.put(candidate)
    popped: list[Candidate] = []
    while (free is None or len(popped) < free) and (candidate := queue.pop()) is not None:
        popped.append(candidate)
    return popped


def names(candidates: list[Candidate]) -> list[str]:
    return [c.name for c in candidates]


def test_highest_priority_first() -> None:
    queue = [Candidate.of("ns", "low", 0, at(0)), Candidate.of("ns", "high", 10, at(50)),
             Candidate.of("ns", "negative", -5, at(-100))]
    assert names(admitted(queue)) == ["high", "low", "negative"]


def test_oldest_submission_first_within_a_priority() -> None:
    queue = [Candidate.of("ns", "b", 1, at(20)), Candidate.of("ns", "a", 1, at(30)), Candidate.of("ns", "c", 1, at(10))]
    assert names(admitted(queue)) == ["c", "b", "a"]


def test_name_breaks_ties() -> None:
    queue = [Candidate.of("ns", "zeta", 0, at(0)), Candidate.of("ns", "alpha", 0, at(0))]
    assert names(admitted(queue, 1)) == ["alpha"]


def test_sub_second_submission_times_are_ordered() -> None:
    queue = [Candidate.of("ns", "later", 0, at(0.002)), Candidate.of("ns", "sooner", 0, at(0.001))]
    assert names(admitted(queue, 1)) == ["sooner"]


def test_an_empty_queue_admits_nothing() -> None:
    assert admitted([]) == [] and Queue().pop() is None


tasks = st.lists(
    st.tuples(st.sampled_from(["a", "b"]), st.from_regex(r"[a-z]{1,6}", fullmatch=True),
              st.integers(-1_000_000, 1_000_000), st.floats(-1e6, 1e6).map(at)),
    max_size=30, unique_by=lambda t: (t[0], t[1]))


@given(queue=tasks, free=st.integers(0, 40))
def test_admission_properties(queue, free: int) -> None:
    facts = {(ns, name): (priority, submitted) for ns, name, priority, submitted in queue}
    chosen = [(c.namespace, c.name) for c in admitted([Candidate.of(*t) for t in queue], free)]
    assert len(chosen) == min(free, len(queue))
    assert len(set(chosen)) == len(chosen) and all(k in facts for k in chosen)
    # Nobody left waiting outranks anybody admitted: higher priority, or as high and older.
    for waiting in facts.keys() - set(chosen):
        pw, sw = facts[waiting]
        for key in chosen:
            pc, sc = facts[key]
            assert pc > pw or (pc == pw and sc <= sw), (key, waiting)
    # Admitted in the order they should start.
    assert chosen == sorted(chosen, key=lambda k: (-facts[k][0], facts[k][1], k))


@given(queue=tasks)
def test_admission_does_not_depend_on_the_order_tasks_were_seen(queue) -> None:
    first = admitted([Candidate.of(*t) for t in queue], 5)
    assert first == admitted([Candidate.of(*t) for t in reversed(queue)], 5)


# --- the pool's queue through re-ranks and removals: still in admission order -------------------

@given(st.lists(st.tuples(st.sampled_from(["put", "put", "put", "discard"]), st.integers(0, 15),
                          st.integers(-3, 3), st.integers(0, 5)), max_size=80))
def test_the_queue_pops_in_admission_order_through_re_ranks_and_removals(steps) -> None:
    queue, model = Queue(), {}
    for op, n, priority, when in steps:
        key = ("ns", f"t{n}")
        if op == "put":
            candidate = Candidate.of(*key, priority, at(when))
            queue.put(candidate)
            model[key] = candidate  # a re-rank (priority change) replaces the old place
        else:
            queue.discard(key)
            model.pop(key, None)
    assert len(queue) == len(model) and set(queue) == set(model)
    popped = []
    while (candidate := queue.pop()) is not None:
        popped.append(candidate)
    assert popped == sorted(model.values())
    assert len(queue) == 0


def test_a_priority_raise_moves_a_task_to_the_front() -> None:
    queue = Queue()
    for i in range(10):
        queue.put(Candidate.of("ns", f"q{i}", i, at(i)))
    queue.put(Candidate.of("ns", "q3", 20, at(3)))
    assert [queue.pop().name for _ in range(3)] == ["q3", "q9", "q8"]


# --- fairness groups (issue 39): groups of one priority take turns -------------------------------

def test_groups_of_one_priority_take_turns() -> None:
    """Tenant a's backlog came first; b's two tasks do not wait behind all of it."""
    queue = [Candidate.of("ns", f"a{i}", 0, at(i), "a") for i in range(6)]
    queue += [Candidate.of("ns", f"b{i}", 0, at(100 + i), "b") for i in range(2)]
    assert names(admitted(queue)) == ["a0", "b0", "a1", "b1", "a2", "a3", "a4", "a5"]


def test_a_group_that_comes_later_joins_the_back_of_the_rotation() -> None:
    queue = Queue()
    for i in range(4):
        queue.put(Candidate.of("ns", f"a{i}", 0, at(i), "a"))
        queue.put(Candidate.of("ns", f"b{i}", 0, at(i), "b"))
    assert [queue.pop().name for _ in range(3)] == ["a0", "b0", "a1"]
    queue.put(Candidate.of("ns", "c0", 0, at(-50), "c"))  # older than all, but new to the rotation
    assert [queue.pop().name for _ in range(4)] == ["b1", "c0", "a2", "b2"]


def test_priority_outranks_whose_turn_it_is() -> None:
    queue = [Candidate.of("ns", "a0", 0, at(0), "a"), Candidate.of("ns", "b0", 5, at(1), "b"),
             Candidate.of("ns", "b1", 5, at(2), "b")]
    assert names(admitted(queue)) == ["b0", "b1", "a0"]


def test_a_group_passed_over_keeps_its_turn() -> None:
    """A group at its pool's groupConcurrency is passed over, not sent to the back."""
    queue = Queue()
    for name, group, when in (("a0", "a", 0), ("a1", "a", 1), ("b0", "b", 2), ("b1", "b", 3)):
        queue.put(Candidate.of("ns", name, 0, at(when), group))
    assert queue.pop(lambda g: g != "a").name == "b0"
    assert queue.pop(lambda g: g != "a").name == "b1"
    assert queue.pop(lambda g: g != "a") is None
    assert [queue.pop().name for _ in range(2)] == ["a0", "a1"]


def test_tasks_without_a_group_are_one_group() -> None:
    queue = [Candidate.of("ns", f"n{i}", 0, at(i)) for i in range(3)] + [Candidate.of("ns", "g0", 0, at(9), "g")]
    assert names(admitted(queue)) == ["n0", "g0", "n1", "n2"]


class Rotation:
    """The rule, written as plainly as it reads (a scan of every waiting task per pop)."""

    def __init__(self) -> None:
        self.waiting: dict[tuple[str, str], Candidate] = {}
        self.served: dict[str, int] = {}
        self.turn = 0

    def put(self, candidate: Candidate) -> None:
        old = self.waiting.get(candidate.key)
        if old is not None and old.group == candidate.group:  # the same, or re-ranked: its group keeps its turn
            self.waiting[candidate.key] = candidate
            return
        self.discard(candidate.key)
        if not any(c.group == candidate.group for c in self.waiting.values()):
            self.served[candidate.group] = self.turn
        self.waiting[candidate.key] = candidate

    def discard(self, key: tuple[str, str]) -> None:
        gone = self.waiting.pop(key, None)
        if gone is not None and not any(c.group == gone.group for c in self.waiting.values()):
            del self.served[gone.group]

    def pop(self, eligible) -> Candidate | None:
        best = {}
        for c in self.waiting.values():
            if eligible(c.group) and (c.group not in best or c < best[c.group]):
                best[c.group] = c
        if not best:
            return None
        group, c = min(best.items(), key=lambda gc: (gc[1].sort_key[0], self.served[gc[0]], gc[1].sort_key[1:]))
        self.discard(c.key)
        self.turn += 1
        if any(o.group == group for o in self.waiting.values()):
            self.served[group] = self.turn
        return c


@given(st.lists(st.tuples(st.sampled_from(["put", "put", "put", "discard", "pop", "pop"]), st.integers(0, 12),
                          st.integers(-2, 2), st.integers(0, 5), st.sampled_from(["", "a", "b", "c"]),
                          st.sets(st.sampled_from(["", "a", "b", "c"]))), max_size=120))
def test_the_queue_gives_the_rotation_s_order_through_re_ranks_removals_and_groups_passed_over(steps) -> None:
    queue, model = Queue(), Rotation()
    for op, n, priority, when, group, capped in steps:
        key = ("ns", f"t{n}")
        if op == "put":
            candidate = Candidate.of(*key, priority, at(when), group)
            queue.put(candidate)
            model.put(candidate)
        elif op == "discard":
            queue.discard(key)
            model.discard(key)
        else:
            assert queue.pop(lambda g: g not in capped) == model.pop(lambda g: g not in capped)
        assert len(queue) == len(model.waiting) and set(queue) == set(model.waiting)
    while (candidate := queue.pop()) is not None:
        assert candidate == model.pop(lambda g: True)
    assert not model.waiting


def test_a_task_wanted_again_keeps_its_groups_turn() -> None:
    """Every reconcile of a waiting task wants its slot again: that must not send its group, with
    this one task waiting, to the back of the rotation (nor a priority change within its group)."""
    queue = Queue()
    queue.put(Candidate.of("ns", "n0", 0, at(5)))
    queue.put(Candidate.of("ns", "a0", 0, at(0), "a"))
    assert queue.pop().name == "a0"  # a's turn taken; "" waits with the older turn
    queue.put(Candidate.of("ns", "a1", 0, at(1), "a"))
    queue.put(Candidate.of("ns", "n0", 0, at(5)))  # wanted again, unchanged
    assert queue.pop().name == "n0"


@given(st.lists(st.tuples(st.sampled_from(["put", "put", "put", "discard", "pop"]), st.integers(0, 12),
                          st.integers(-2, 2), st.integers(0, 5), st.sampled_from(["", "a", "b", "c"])),
                max_size=120))
def test_in_order_is_the_order_the_queue_pops_and_takes_nothing(steps) -> None:
    """The pool's queue marks (`marks`) come from `in_order`: the pops' order, with groups' turns
    already played, and the queue left as it was."""
    queue = Queue()
    for op, n, priority, when, group in steps:
        key = ("ns", f"t{n}")
        if op == "put":
            queue.put(Candidate.of(*key, priority, at(when), group))
        elif op == "discard":
            queue.discard(key)
        else:
            queue.pop()
    foreseen = list(queue.in_order())
    assert len(foreseen) == len(queue)
    popped = []
    while (candidate := queue.pop()) is not None:
        popped.append(candidate)
    assert foreseen == popped


def test_only_counts_changed_leaves_tasks_unmoved_unless_waiting_tasks_may_say_otherwise() -> None:
    from cronoq.api import TaskPoolSpec
    from cronoq.engine.admission import tasks_unmoved

    base = TaskPoolSpec(concurrency=5)
    assert tasks_unmoved(base, base.model_copy(update={"paused": True}))
    assert tasks_unmoved(base, base.model_copy(update={"concurrency": 500, "group_concurrency": 2}))
    assert not tasks_unmoved(base, base.model_copy(update={"delivery": "Workers"}))
    limited = TaskPoolSpec.model_validate({"concurrency": 5, "rateLimit": {"startsPerSecond": 1, "burst": 1}})
    assert not tasks_unmoved(limited, limited.model_copy(update={"paused": True})), "a countdown may be written"
    other = base.model_copy(update={"events": "Warnings"})
    assert not tasks_unmoved(base, other)
