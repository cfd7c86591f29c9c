"""Dependencies (DESIGN §5): Blocked until every edge holds, Skipped once one never can, and a
cycle fails every task on it with a reason naming the cycle."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from cronoq.api import Dependency, Edge, TaskPhase
from cronoq.engine import reasons
from cronoq.engine.dependencies import MISSING, edge_holds, find_cycle, gate as gate_of, search_cycles

P = TaskPhase
SUCCESS, FAILURE, COMPLETE = Edge.SUCCESS, Edge.FAILURE, Edge.COMPLETE


def gate(name, depends_on, phases, graph):
    return gate_of(name, depends_on, phases, find_cycle(name, graph))


def dep(task: str, on: Edge = SUCCESS) -> Dependency:
    return Dependency(task=task, on=on)


# --- one edge ------------------------------------------------------------------------------------------

EXPECTED = {
    # phase of the dependency: (Success, Failure, Complete)
    None: (None, None, None),
    P.BLOCKED: (None, None, None),
    P.QUEUED: (None, None, None),
    P.RUNNING: (None, None, None),
    P.RETRYING: (None, None, None),
    P.SUCCEEDED: (True, False, True),
    P.FAILED: (False, True, True),
    P.DEAD_LETTERED: (False, True, True),
    P.CANCELLED: (False, False, True),  # DESIGN §5 on cancellation: Success and Failure edges are Skipped
    P.SKIPPED: (False, False, True),
}


def test_every_phase_is_covered() -> None:
    assert set(EXPECTED) - {None} == set(TaskPhase)


@pytest.mark.parametrize("phase", list(EXPECTED))
def test_edge_holds(phase: TaskPhase | None) -> None:
    assert tuple(edge_holds(e, phase) for e in (SUCCESS, FAILURE, COMPLETE)) == EXPECTED[phase]


# --- the gate of one task ----------------------------------------------------------------------------------

def test_no_dependencies_runs() -> None:
    assert gate("a", (), {}, {}).verdict == "run"


def test_waits_while_a_dependency_is_undecided() -> None:
    result = gate("a", [dep("b"), dep("c", COMPLETE)], {"b": P.SUCCEEDED, "c": P.RUNNING}, {"a": ["b", "c"]})
    assert result.verdict == "wait" and result.reason == reasons.WAITING_FOR_DEPENDENCIES
    assert "c" in result.message and "Running" in result.message and "b (" not in result.message


def test_waits_for_a_dependency_that_does_not_exist_yet() -> None:
    result = gate("a", [dep("later")], {"later": MISSING}, {"a": ["later"]})
    assert result.verdict == "wait" and result.message == "waiting for later (Success; no such task yet)"
    result = gate("a", [dep("later")], {}, {"a": ["later"]})  # not even looked up
    assert result.verdict == "wait"


def test_waits_for_a_dependency_the_operator_has_not_seen_yet() -> None:
    result = gate("a", [dep("b")], {"b": None}, {"a": ["b"]})
    assert result.verdict == "wait" and "new" in result.message


def test_runs_when_every_edge_holds() -> None:
    deps = [dep("s", SUCCESS), dep("f", FAILURE), dep("c", COMPLETE)]
    phases = {"s": P.SUCCEEDED, "f": P.DEAD_LETTERED, "c": P.SKIPPED}
    assert gate("a", deps, phases, {"a": ["s", "f", "c"]}).verdict == "run"


@pytest.mark.parametrize("on, phase", [(SUCCESS, P.FAILED), (SUCCESS, P.CANCELLED), (SUCCESS, P.SKIPPED),
                                       (FAILURE, P.SUCCEEDED), (FAILURE, P.SKIPPED)])
def test_skipped_when_an_edge_can_never_hold(on: Edge, phase: TaskPhase) -> None:
    result = gate("a", [dep("ok", COMPLETE), dep("b", on)], {"ok": P.RUNNING, "b": phase}, {"a": ["ok", "b"]})
    assert result.verdict == "end" and result.phase is P.SKIPPED
    assert result.reason == reasons.DEPENDENCY_UNMET and "b" in result.message and phase.value in result.message


def test_skipping_propagates_down_a_chain_of_success_edges() -> None:
    # a failed; b needs a's success; c needs b's success; d only needs c to be complete.
    assert gate("b", [dep("a")], {"a": P.FAILED}, {"b": ["a"]}).phase is P.SKIPPED
    assert gate("c", [dep("b")], {"b": P.SKIPPED}, {"c": ["b"]}).phase is P.SKIPPED
    assert gate("d", [dep("c", COMPLETE)], {"c": P.SKIPPED}, {"d": ["c"]}).verdict == "run"


@pytest.mark.parametrize("graph, cycle", [
    ({"a": ["b"], "b": ["a"]}, ["a", "b", "a"]),
    ({"a": ["b"], "b": ["c"], "c": ["a"]}, ["a", "b", "c", "a"]),
    ({"a": ["x", "b"], "x": [], "b": ["c"], "c": ["b", "a"]}, ["a", "b", "c", "a"]),
])
def test_a_cycle_fails_the_task_naming_the_cycle(graph, cycle) -> None:
    deps = [dep(d) for d in graph["a"]]
    result = gate("a", deps, {d: P.QUEUED for d in graph}, graph)
    assert result.verdict == "end" and result.phase is P.FAILED and result.reason == reasons.DEPENDENCY_CYCLE
    assert " → ".join(cycle) in result.message


def test_a_task_that_only_leads_into_a_cycle_is_not_on_it() -> None:
    graph = {"a": ["b"], "b": ["c"], "c": ["b"]}
    result = gate("a", [dep("b")], {"b": P.BLOCKED}, graph)
    assert result.verdict == "wait"


def test_a_cycle_wins_over_waiting() -> None:
    graph = {"a": ["b", "missing"], "b": ["a"]}
    assert gate("a", [dep("b"), dep("missing")], {"b": None}, graph).reason == reasons.DEPENDENCY_CYCLE


# --- the cycle search -----------------------------------------------------------------------------------------

nodes = st.sampled_from("abcdefg")
graphs = st.dictionaries(nodes, st.lists(nodes, max_size=4, unique=True), max_size=7)


def reaches(graph, start: str, goal: str) -> bool:
    seen, todo = set(), list(graph.get(start, ()))
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return False


@given(graph=graphs, start=nodes)
def test_find_cycle_finds_exactly_the_cycles_through_the_start(graph, start: str) -> None:
    cycle = find_cycle(start, graph)
    assert (cycle is not None) == reaches(graph, start, start)
    if cycle is not None:
        assert cycle[0] == cycle[-1] == start
        assert len(set(cycle[:-1])) == len(cycle) - 1, "a cycle visits each task once"
        for here, there in zip(cycle, cycle[1:]):
            assert there in graph.get(here, ()), (here, there)


def test_find_cycle_terminates_on_a_wide_graph() -> None:
    graph = {f"n{i}": [f"n{j}" for j in range(i + 1, min(i + 4, 60))] for i in range(60)}
    assert find_cycle("n0", graph) is None
    graph["n59"] = ["n0"]
    assert find_cycle("n0", graph)[-1] == "n0"


# --- bounded cost (issue 26, point 4a) -------------------------------------------------------------------

def test_a_chain_far_longer_than_the_recursion_limit_is_searched() -> None:
    graph = {f"t{i}": [f"t{i - 1}"] if i else [] for i in range(20_000)}
    assert find_cycle("t19999", graph) is None
    graph["t0"] = ["t19999"]
    cycle = find_cycle("t19999", graph)
    assert cycle is not None and len(cycle) == 20_001 and cycle[0] == cycle[-1] == "t19999"


def test_one_search_settles_every_acyclic_task_it_reaches_so_later_searches_are_free() -> None:
    # 3,000 tasks each depending on its 32 predecessors: one search walks the graph once; every later
    # task's search stops at once on settled tasks.
    graph = {f"t{i}": [f"t{j}" for j in range(max(0, i - 32), i)] for i in range(3000)}
    walked: list[str] = []

    def depends_on(name: str):
        walked.append(name)
        return graph.get(name)

    first = search_cycles("t2999", depends_on)
    assert first.complete and not first.cycles and first.settled == frozenset(graph)
    walked.clear()
    for name in graph:
        assert search_cycles(name, depends_on, first.settled).complete
    assert len(walked) == len(graph), "each later search reads only its own task"


def test_a_task_reaching_a_missing_task_is_not_settled() -> None:
    graph = {"a": ["b"], "b": ["missing"]}
    found = search_cycles("a", graph.get)
    assert found.complete and not found.cycles and found.settled == frozenset()


def test_a_search_over_budget_stops_and_keeps_what_it_settled() -> None:
    graph = {f"t{i}": [f"t{i - 1}"] if i else [] for i in range(1000)}
    found = search_cycles("t999", graph.get, budget=100)
    assert not found.complete and not found.cycles
    assert found.settled == frozenset()  # nothing below the budget's reach ended yet
    again = search_cycles("t50", graph.get, budget=100)
    assert again.complete and again.settled == frozenset(f"t{i}" for i in range(51))
    assert search_cycles("t999", graph.get, again.settled, budget=1000).complete


@given(graph=graphs, start=nodes)
def test_every_task_on_a_cycle_the_search_meets_gets_a_cycle_through_it(graph, start: str) -> None:
    found = search_cycles(start, graph.get)
    for name, component in found.cycles.items():
        cycle = component.cycle_through(name)
        assert reaches(graph, name, name)
        assert cycle[0] == cycle[-1] == name and len(set(cycle[:-1])) == len(cycle) - 1
        for here, there in zip(cycle, cycle[1:]):
            assert there in graph.get(here, ()), (here, there)
    for name in found.settled:
        assert not reaches(graph, name, name)
    if start in graph and reaches(graph, start, start):
        assert start in found.cycles
