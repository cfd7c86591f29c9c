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
