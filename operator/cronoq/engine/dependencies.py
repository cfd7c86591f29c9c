"""Dependencies without a workflow engine (DESIGN §5): a task stays Blocked until every edge of
its `dependsOn` holds; it is Skipped as soon as one edge can no longer hold (and so, in turn,
are the tasks that needed it to succeed); a cycle fails every task on it, naming the cycle.

Edges: `Success` holds when the dependency succeeded; `Failure` when it failed or
dead-lettered; `Complete` when it ended in any way (Skipped and Cancelled included).

DESIGN §5 lists "was cancelled" under Failure edges but, under cancellation, says dependents on
Success and Failure edges are Skipped; we follow the cancellation rule (the more specific one): a
cancellation is the user's choice, not a failure for failure handlers to act on.
"""
from __future__ import annotations

from typing import Final, Literal, Mapping, Sequence

from cronoq.api import Dependency, Edge, TaskPhase
from cronoq.engine import reasons
from cronoq.engine.gate import RUN, Gate

FAILURES = frozenset({TaskPhase.FAILED, TaskPhase.DEAD_LETTERED})
MISSING: Final = "missing"
"""Marks a dependency that does not exist (yet)."""

DependencyPhase = TaskPhase | Literal["missing"] | None
"""What `gate` knows of a dependency: its phase, None (exists, not yet seen by the operator) or MISSING."""


def edge_holds(edge: Edge, phase: TaskPhase | None) -> bool | None:
    """True: the edge holds. False: it never can. None: not yet decided."""
    if phase is None or not phase.terminal:
        return None
    if edge is Edge.COMPLETE:
        return True
    if edge is Edge.SUCCESS:
        return phase is TaskPhase.SUCCEEDED
    return phase in FAILURES


def find_cycle(start: str, graph: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A dependency cycle through `start` (as names, start first and last), or None."""
    path: list[str] = [start]
    on_path = {start}
    visited: set[str] = set()

    def walk(node: str) -> list[str] | None:
        for nxt in graph.get(node, ()):
            if nxt == start:
                return path + [start]
            if nxt in on_path or nxt in visited:
                continue
            path.append(nxt)
            on_path.add(nxt)
            found = walk(nxt)
            if found:
                return found
            on_path.discard(path.pop())
            visited.add(nxt)
        return None

    return walk(start)


def gate(name: str, depends_on: Sequence[Dependency], phases: Mapping[str, DependencyPhase],
         graph: Mapping[str, Sequence[str]]) -> Gate:
    """Whether `name` may run, given its edges and the phase of each dependency (None: exists,
    not yet seen by the operator; MISSING: does not exist)."""
    if not depends_on:
        return RUN
    cycle = find_cycle(name, graph)
    if cycle:
        return Gate.end(TaskPhase.FAILED, reasons.DEPENDENCY_CYCLE,
                        f"dependsOn forms a cycle: {' → '.join(cycle)}; no task on it can ever start")
    waiting = []
    for dep in depends_on:
        phase = phases.get(dep.task, MISSING)
        if phase == MISSING:
            waiting.append(f"task {dep.task} does not exist yet")
            continue
        holds = edge_holds(dep.on, phase)
        if holds is False:
            assert phase is not None  # edge_holds decides nothing without a phase
            return Gate.end(TaskPhase.SKIPPED, reasons.DEPENDENCY_UNMET,
                            f"dependency {dep.task} ended {phase.value}, so its {dep.on.value} edge can never hold")
        if holds is None:
            waiting.append(f"{dep.task} ({dep.on.value}; now {phase.value if phase else 'new'})")
    if waiting:
        return Gate.wait(reasons.WAITING_FOR_DEPENDENCIES, "waiting for " + ", ".join(waiting))
    return RUN
