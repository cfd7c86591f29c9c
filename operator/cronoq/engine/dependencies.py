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

from dataclasses import dataclass
from typing import Callable, Container, Final, Iterator, Literal, Mapping, Sequence

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


CYCLE_BUDGET = 100_000
"""Most dependency edges one cycle check follows. A check that runs out gives no verdict: the
tasks it settled stay settled, and the task is checked again on its next reconcile."""


@dataclass(frozen=True)
class CycleSearch:
    """What one cycle check learnt."""

    cycles: dict[str, Component]
    """Each task found on a cycle → the tasks it shares cycles with."""
    settled: frozenset[str]
    """Tasks that can never be on a cycle: everything they reach exists and is acyclic. As specs
    are immutable this holds until a task is deleted (and perhaps created again differently)."""
    complete: bool
    """False when the budget ran out before the search ended."""


def search_cycles(start: str, depends_on: Callable[[str], Sequence[str] | None],
                  settled: Container[str] = frozenset(), budget: int = CYCLE_BUDGET) -> CycleSearch:
    """The cycles through `start` and through every task it reaches, by an iterative Tarjan
    search (no recursion, however long the chain) that skips tasks already `settled`.
    `depends_on(name)` is None for a task that does not exist."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    new_settled: set[str] = set()
    cycles: dict[str, Component] = {}
    steps = 0

    def done(name: str) -> bool:
        return name in settled or name in new_settled

    def visit(name: str, deps: Sequence[str]) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        work.append((name, iter(deps)))

    first = depends_on(start)
    if first is None or done(start):
        return CycleSearch({}, frozenset(), True)
    work: list[tuple[str, Iterator[str]]] = []
    visit(start, first)
    while work:
        node, edges = work[-1]
        descended = False
        for nxt in edges:
            steps += 1
            if steps > budget:
                return CycleSearch(cycles, frozenset(new_settled), False)
            if done(nxt):
                continue
            if nxt in index:
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            deps = depends_on(nxt)
            if deps is not None:
                visit(nxt, deps)
                descended = True
                break
        if descended:
            continue
        work.pop()
        if work:
            parent = work[-1][0]
            low[parent] = min(low[parent], low[node])
        if low[node] != index[node]:
            continue
        component = []
        while True:
            member = stack.pop()
            on_stack.discard(member)
            component.append(member)
            if member == node:
                break
        deps = depends_on(node) or ()
        if len(component) > 1 or node in deps:
            found = Component(set(component), node, depends_on)
            cycles.update((member, found) for member in component)
        elif all(done(d) for d in deps):
            new_settled.add(node)
    return CycleSearch(cycles, frozenset(new_settled), True)


class Component:
    """A strongly connected set of tasks (each reaches each other: all are on cycles), with the
    shortest-path trees through its root from which a cycle through any member is read (on demand:
    naming each member's cycle at once would cost the square of a long cycle's length)."""

    def __init__(self, members: set[str], root: str, depends_on: Callable[[str], Sequence[str] | None]) -> None:
        self.members, self.root = frozenset(members), root
        self.to_root: dict[str, str] = {}
        """task → the next task on its way to root."""
        self.from_root: dict[str, str] = {}
        """task → the task before it on root's way to it."""
        self.root_deps = [d for d in depends_on(root) or () if d in members]
        reverse: dict[str, list[str]] = {n: [] for n in members}
        for name in members:
            for dep in depends_on(name) or ():
                if dep in members:
                    reverse[dep].append(name)
        for tree, neighbours in ((self.from_root, lambda n: depends_on(n) or ()), (self.to_root, reverse.__getitem__)):
            frontier, seen = [root], {root}
            while frontier:
                following = []
                for here in frontier:
                    for there in neighbours(here):
                        if there in members and there not in seen:
                            seen.add(there)
                            tree[there] = here
                            following.append(there)
                frontier = following

    def _way_to_root(self, name: str) -> list[str]:
        path = [name]
        while path[-1] != self.root:
            path.append(self.to_root[path[-1]])
        return path

    def cycle_through(self, name: str) -> tuple[str, ...]:
        """A cycle through `name`, `name` first and last, each task once."""
        if name == self.root:
            walk = [name] + self._way_to_root(self.root_deps[0])
        else:
            way_back = [name]
            while way_back[-1] != self.root:
                way_back.append(self.from_root[way_back[-1]])
            walk = self._way_to_root(name) + way_back[::-1][1:]
        return _without_loops(walk[:-1]) + (name,)


def _without_loops(walk: list[str]) -> tuple[str, ...]:
    """`walk` with every loop cut out (a closed walk becomes a simple cycle)."""
    path: list[str] = []
    where: dict[str, int] = {}
    for name in walk:
        if name in where:
            for dropped in path[where[name] + 1:]:
                del where[dropped]
            del path[where[name] + 1:]
        else:
            where[name] = len(path)
            path.append(name)
    return tuple(path)


def find_cycle(start: str, graph: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A dependency cycle through `start` (as names, start first and last), or None."""
    found = search_cycles(start, lambda name: graph.get(name, ())).cycles.get(start)
    return list(found.cycle_through(start)) if found else None


def gate(name: str, depends_on: Sequence[Dependency], phases: Mapping[str, DependencyPhase],
         cycle: Sequence[str] | None = None) -> Gate:
    """Whether `name` may run, given its edges, the phase of each dependency (None: exists,
    not yet seen by the operator; MISSING: does not exist) and the cycle it is on, if any."""
    if not depends_on:
        return RUN
    if cycle:
        return Gate.end(TaskPhase.FAILED, reasons.DEPENDENCY_CYCLE,
                        f"dependsOn forms a cycle: {' → '.join(cycle)}; no task on it can ever start")
    waiting = []
    for dep in depends_on:
        phase = phases.get(dep.task, MISSING)
        if phase == MISSING:
            waiting.append(f"{dep.task} ({dep.on.value}; no such task yet)")
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
