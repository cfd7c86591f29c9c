"""Fair shares (issue 54, item 1): a pool with `fairShare` gives its next slot to the waiting group
that holds the fewest slots for its weight, groups as low taking turns, and priority orders only
the tasks within a group. By submitter, a tenant's group is its identity, not what it writes: the
hidden adversary (60 group names, raised priorities) gets its share and no more. Time is played on
an injected clock (a list of finish times); nothing sleeps."""
from __future__ import annotations

import heapq
from collections import Counter
from typing import Callable

from hypothesis import given, strategies as st

from cronoq.api import FairShare
from cronoq.engine.admission import Candidate, Queue, fair_group

from tests.unit.builders import at

BY_SUBMITTER = FairShare(by="Submitter")
GAMER, HONEST = "system:serviceaccount:team-g:ci", "system:serviceaccount:team-h:ci"


def gamer_tasks(n: int, groups: int = 60, priority: int = 1000, start: float = 0.0) -> list[Candidate]:
    """The hidden adversary: its tasks spread over `groups` group names, at a raised priority."""
    return [Candidate.of("ns", f"g{i}", priority, at(start + i), f"name-{i % groups}", GAMER) for i in range(n)]


def honest_tasks(n: int, start: float = 1000.0) -> list[Candidate]:
    return [Candidate.of("ns", f"h{i}", 0, at(start + i), "team-h", HONEST) for i in range(n)]


def fill(queue: Queue, slots: int, eligible: Callable[[str], bool] | None = None) -> Counter[str]:
    """Grant `slots` slots of an idle pool; the submitters they went to."""
    got: Counter[str] = Counter()
    for _ in range(slots):
        candidate = queue.pop(eligible)
        if candidate is None:
            break
        got[candidate.submitter] += 1
    return got


def queue_of(fair: FairShare | None, *tasks: list[Candidate]) -> Queue:
    queue = Queue(fair)
    for batch in tasks:
        for candidate in batch:
            queue.put(candidate)
    return queue


# --- the hidden adversary, before and after ------------------------------------------------------

def test_before_self_declared_groups_let_a_tenant_with_59_names_and_a_priority_raise_take_the_pool() -> None:
    """Without fairShare (today's default, kept): 59 group names take 59 of 60 slots, and a raised
    priority takes all 60. This is the order the issue found gamed, kept as it was."""
    spread = queue_of(None, gamer_tasks(200, groups=59, priority=0), honest_tasks(200))
    assert fill(spread, 60) == {GAMER: 59, HONEST: 1}
    raised = queue_of(None, gamer_tasks(200), honest_tasks(200))
    assert fill(raised, 60) == {GAMER: 60}


def test_after_by_submitter_the_same_tenant_gets_half_of_an_idle_pool() -> None:
    queue = queue_of(BY_SUBMITTER, gamer_tasks(200), honest_tasks(200))
    assert fill(queue, 60) == {GAMER: 30, HONEST: 30}


def test_by_group_the_self_declared_groups_are_shared_by_weight_too_but_names_are_parts() -> None:
    """`by: Group` keeps the author's groups (an explicit choice): priority no longer jumps
    groups, but 60 names are 60 parts."""
    queue = queue_of(FairShare(by="Group"), gamer_tasks(200), honest_tasks(200))
    assert fill(queue, 61) == {GAMER: 60, HONEST: 1}


@given(slots=st.integers(1, 120), groups=st.integers(1, 80), priority=st.integers(-1_000_000, 1_000_000),
       gamer_first=st.booleans())
def test_a_tenant_with_many_groups_and_raised_priority_gets_only_its_share(slots, groups, priority,
                                                                           gamer_first) -> None:
    batches = [gamer_tasks(150, groups, priority), honest_tasks(150)]
    queue = queue_of(BY_SUBMITTER, *(batches if gamer_first else batches[::-1]))
    got = fill(queue, slots)
    assert abs(got[GAMER] - got[HONEST]) <= 1, got


@given(weights=st.tuples(st.integers(1, 5), st.integers(1, 5)), rounds=st.integers(1, 12))
def test_weights_split_the_turns_in_proportion(weights, rounds) -> None:
    """Weights 2:1 → turns 2:1 (and so on), however the gamer spreads its names and priorities."""
    g, h = weights
    fair = FairShare(by="Submitter", weights={GAMER: g, HONEST: h})
    queue = queue_of(fair, gamer_tasks(200), honest_tasks(200))
    got = fill(queue, rounds * (g + h))
    assert got == {GAMER: rounds * g, HONEST: rounds * h}


def test_weights_two_to_one() -> None:
    fair = FairShare(by="Submitter", weights={HONEST: 2})
    got = fill(queue_of(fair, gamer_tasks(100), honest_tasks(100)), 30)
    assert got == {HONEST: 20, GAMER: 10}


def test_default_weight_applies_to_groups_weights_does_not_name() -> None:
    fair = FairShare(by="Submitter", weights={HONEST: 1}, default_weight=3)
    assert fill(queue_of(fair, gamer_tasks(100), honest_tasks(100)), 8) == {GAMER: 6, HONEST: 2}


# --- through time: slots free up, the held slots are told again ------------------------------------

def play(fair: FairShare | None, tenants: dict[str, tuple[int, float, int, int]], concurrency: int,
         raise_at: float | None = None) -> tuple[Counter[str], list[tuple[str, dict[str, int]]], list[dict[str, int]]]:
    """Run a pool on an injected clock: tenants (submitter → tasks, seconds each, groups, priority)
    queue at t=0; each time slots free, the slots each submitter holds are told to the queue
    (`hold`, as the controller's Slots does) and the free slots granted. From `raise_at` on, the
    gamer's queued tasks have the highest priority. Returns the starts per submitter in the rounds
    of grants that began with every tenant waiting; each grant made while every tenant waited, with
    what every submitter held just before it; and what each held whenever the pool was full again
    with every tenant waiting."""
    queue = Queue(fair)
    length: dict[str, float] = {}
    waiting: Counter[str] = Counter()
    for submitter, (count, seconds, groups, priority) in tenants.items():
        for i in range(count):
            queue.put(Candidate.of("ns", f"{submitter}-{i}", priority, at(i), f"n{i % groups}", submitter))
        length[submitter], waiting[submitter] = seconds, count
    running: list[tuple[float, str, str]] = []  # (finish time, submitter, name): the clock's timers
    held: Counter[str] = Counter()
    contended: Counter[str] = Counter()
    grants: list[tuple[str, dict[str, int]]] = []
    full: list[dict[str, int]] = []
    now, raised = 0.0, raise_at is None
    while len(queue) or running:
        if not raised and raise_at is not None and now >= raise_at:
            raised = True
            for i in range(tenants[GAMER][0]):
                if (key := ("ns", f"{GAMER}-{i}")) in queue:
                    queue.put(Candidate.of(*key, 1_000_000, at(i), f"n{i % tenants[GAMER][2]}", GAMER))
        queue.hold(held)
        round_contended = all(waiting[s] > 0 for s in tenants)
        while len(running) < concurrency and (candidate := queue.pop()) is not None:
            if round_contended:
                contended[candidate.submitter] += 1
            if all(waiting[s] > 0 for s in tenants):
                grants.append((candidate.submitter, dict(held)))
            waiting[candidate.submitter] -= 1
            held[candidate.submitter] += 1
            heapq.heappush(running, (now + length[candidate.submitter], candidate.submitter, candidate.name))
        if len(running) == concurrency and all(waiting[s] > 0 for s in tenants):
            full.append(dict(held))
        now, submitter, _ = heapq.heappop(running)
        held[submitter] -= 1
    return contended, grants, full


def test_through_time_the_gamer_with_short_tasks_does_not_hold_more_slots() -> None:
    """The gamer runs 1 s tasks in 60 groups at a raised priority, the honest tenant 5 s tasks: the
    slots that free up go to whoever holds fewer, so each holds half the pool while both wait."""
    tenants = {GAMER: (600, 1.0, 60, 1000), HONEST: (120, 5.0, 1, 0)}
    contended, grants, full = play(BY_SUBMITTER, tenants, 20)
    assert full and all(h[GAMER] == h[HONEST] == 10 for h in full), full
    assert all(held.get(who, 0) <= min(held.get(s, 0) for s in tenants) for who, held in grants)
    assert contended[GAMER] > contended[HONEST]  # it starts more (its tasks are short), holding no more
    before, _, full_before = play(None, tenants, 20)
    assert all(h.get(HONEST, 0) == 0 for h in full_before) and not before[HONEST]  # the default: all the gamer's


def test_through_time_a_priority_raise_while_queued_changes_nothing_between_submitters() -> None:
    tenants = {GAMER: (400, 2.0, 60, 0), HONEST: (400, 2.0, 1, 0)}
    contended, _, full = play(BY_SUBMITTER, tenants, 10, raise_at=7.0)
    assert full and all(h[GAMER] == h[HONEST] == 5 for h in full), full
    # Equal starts, but for the last wave: the gamer's finishes sort first at each instant, so its
    # last 5 start one wave (2 s) before the honest tenant's last 5.
    assert abs(contended[GAMER] - contended[HONEST]) <= 5, contended
    before, _, _ = play(None, tenants, 10, raise_at=7.0)
    assert before[GAMER] > 3 * before[HONEST], before  # the default order: the raise wins


@given(g=st.integers(1, 4), h=st.integers(1, 4), concurrency=st.integers(1, 30),
       seconds=st.tuples(st.sampled_from([0.5, 1.0, 3.0]), st.sampled_from([0.5, 1.0, 3.0])))
def test_through_time_held_slots_stay_in_proportion_to_the_weights(g, h, concurrency, seconds) -> None:
    """A slot granted while both wait goes to the one holding the fewest for its weight, so once the
    pool is full again what each holds is its weight's part, within one slot."""
    fair = FairShare(by="Submitter", weights={GAMER: g, HONEST: h})
    weight = {GAMER: g, HONEST: h}
    tenants = {GAMER: (200, seconds[0], 60, 1000), HONEST: (200, seconds[1], 1, 0)}
    contended, grants, full = play(fair, tenants, concurrency)
    for who, held in grants:
        assert all(held.get(who, 0) / weight[who] <= held.get(s, 0) / weight[s] for s in tenants), (who, held)
    for held in full:
        assert abs(held.get(GAMER, 0) / g - held.get(HONEST, 0) / h) <= 1 / min(g, h) + 1e-9, held
    assert sum(contended.values()) >= min(concurrency, 2)


# --- the queue against the rule written plainly -------------------------------------------------

class Shares:
    """The rule, written as plainly as it reads (a scan of every waiting task per pop)."""

    def __init__(self, fair: FairShare) -> None:
        self.fair = fair
        self.waiting: dict[tuple[str, str], Candidate] = {}
        self.served: dict[str, int] = {}
        self.load: Counter[str] = Counter()
        self.turn = 0

    def group(self, c: Candidate) -> str:
        return fair_group(c.group, c.submitter, self.fair)

    def put(self, candidate: Candidate) -> None:
        old = self.waiting.get(candidate.key)
        if old is not None and self.group(old) == self.group(candidate):
            self.waiting[candidate.key] = candidate
            return
        self.discard(candidate.key)
        if not any(self.group(c) == self.group(candidate) for c in self.waiting.values()):
            self.served[self.group(candidate)] = self.turn
        self.waiting[candidate.key] = candidate

    def discard(self, key: tuple[str, str]) -> None:
        gone = self.waiting.pop(key, None)
        if gone is not None and not any(self.group(c) == self.group(gone) for c in self.waiting.values()):
            del self.served[self.group(gone)]

    def pop(self, eligible: Callable[[str], bool]) -> Candidate | None:
        best: dict[str, Candidate] = {}
        for c in self.waiting.values():
            g = self.group(c)
            if eligible(g) and (g not in best or c < best[g]):
                best[g] = c
        if not best:
            return None
        group, c = min(best.items(), key=lambda gc: (self.load[gc[0]] / self.fair.weight(gc[0]),
                                                     self.served[gc[0]], gc[1].sort_key))
        self.discard(c.key)
        self.turn += 1
        self.load[group] += 1
        if any(self.group(o) == group for o in self.waiting.values()):
            self.served[group] = self.turn
        return c


SUBMITTERS = ["", "alice", "bob", "carol"]


@given(by=st.sampled_from(["Submitter", "Group"]), weights=st.dictionaries(st.sampled_from(["a", "b", "alice", "bob"]),
                                                                           st.integers(1, 4), max_size=3),
       steps=st.lists(st.tuples(st.sampled_from(["put", "put", "put", "discard", "pop", "pop", "hold"]),
                                st.integers(0, 12), st.integers(-2, 2), st.integers(0, 5),
                                st.sampled_from(["", "a", "b"]), st.sampled_from(SUBMITTERS),
                                st.sets(st.sampled_from(["", "a", "b", "alice", "bob", "carol"]))), max_size=120))
def test_the_queue_gives_the_shares_order_through_re_ranks_removals_holds_and_groups_passed_over(by, weights,
                                                                                                steps) -> None:
    fair = FairShare(by=by, weights=weights)
    queue, model = Queue(fair), Shares(fair)
    for op, n, priority, when, group, submitter, capped in steps:
        key = ("ns", f"t{n}")
        if op == "put":
            candidate = Candidate.of(*key, priority, at(when), group, submitter)
            queue.put(candidate)
            model.put(candidate)
        elif op == "discard":
            queue.discard(key)
            model.discard(key)
        elif op == "hold":  # the controller tells the slots each group holds now
            told = {g: (n + i) % 4 for i, g in enumerate(sorted(capped))}
            queue.hold(told)
            model.load = Counter(told)
        else:
            assert queue.pop(lambda g: g not in capped) == model.pop(lambda g: g not in capped)
        assert len(queue) == len(model.waiting) and set(queue) == set(model.waiting)
    while (candidate := queue.pop()) is not None:
        assert candidate == model.pop(lambda g: True)
    assert not model.waiting


@given(steps=st.lists(st.tuples(st.sampled_from(["put", "put", "discard", "pop", "hold"]), st.integers(0, 12),
                                st.integers(-2, 2), st.sampled_from(SUBMITTERS), st.integers(0, 3)), max_size=80))
def test_in_order_is_the_order_the_queue_pops_with_shares(steps) -> None:
    queue = Queue(BY_SUBMITTER)
    for op, n, priority, submitter, held in steps:
        key = ("ns", f"t{n}")
        if op == "put":
            queue.put(Candidate.of(*key, priority, at(n), "", submitter))
        elif op == "discard":
            queue.discard(key)
        elif op == "hold":
            queue.hold({submitter: held})
        else:
            queue.pop()
    foreseen = list(queue.in_order())
    assert len(foreseen) == len(queue)
    popped = []
    while (candidate := queue.pop()) is not None:
        popped.append(candidate)
    assert foreseen == popped


# --- a pool's spec changes under its queue -------------------------------------------------------

def test_switching_a_pool_to_shares_by_submitter_regroups_its_waiting_tasks() -> None:
    queue = queue_of(None, gamer_tasks(100), honest_tasks(100))
    assert len(queue) == 200
    queue.configure(BY_SUBMITTER)
    assert len(queue) == 200
    assert fill(queue, 10) == {GAMER: 5, HONEST: 5}
    queue.configure(None)  # back to the order before shares: the raised priority goes first again
    assert fill(queue, 10) == {GAMER: 10}


def test_a_weight_change_applies_to_the_next_grant() -> None:
    queue = queue_of(BY_SUBMITTER, gamer_tasks(100), honest_tasks(100))
    assert fill(queue, 4) == {GAMER: 2, HONEST: 2}
    queue.configure(FairShare(by="Submitter", weights={HONEST: 3}))
    assert fill(queue, 8) == {HONEST: 7, GAMER: 1}  # from 2:2, honest catches up to 3:1 of what is held


def test_slots_held_before_a_tenant_queued_count_against_it() -> None:
    """The honest tenant already runs 10 (it came first): the gamer's tasks take the next 10 slots."""
    queue = queue_of(BY_SUBMITTER, gamer_tasks(50), honest_tasks(50))
    queue.hold({HONEST: 10})
    assert fill(queue, 10) == {GAMER: 10}
    assert fill(queue, 2) == {GAMER: 1, HONEST: 1}


def test_priority_orders_tasks_within_a_submitters_turn() -> None:
    queue = queue_of(BY_SUBMITTER, honest_tasks(3))
    queue.put(Candidate.of("ns", "urgent", 50, at(5000), "x", HONEST))
    queue.put(Candidate.of("ns", "g0", 0, at(0), "y", GAMER))
    assert [queue.pop().name for _ in range(3)] == ["urgent", "g0", "h0"]


def test_tasks_without_a_submitter_are_one_group() -> None:
    queue = Queue(BY_SUBMITTER)
    for i in range(4):
        queue.put(Candidate.of("ns", f"anon{i}", 0, at(i), f"name-{i}"))  # no submitter recorded
    queue.put(Candidate.of("ns", "h0", 0, at(10), "x", HONEST))
    assert fill(queue, 4) == {"": 3, HONEST: 1}


# --- usage with a half-life (Kueue's admission fair sharing) -------------------------------------

def with_half_life(minutes: int, **more) -> FairShare:
    return FairShare.model_validate({"by": "Submitter", "usageHalfLife": f"{minutes}m", **more})


def test_a_group_that_just_held_many_slots_yields_to_one_that_did_not() -> None:
    """The honest tenant held 10 slots for an hour; its 10 end as the gamer's backlog arrives. Without
    a half-life the 10 free slots split 5:5; with one, the gamer (no recent use) takes all 10."""
    for fair, split in ((BY_SUBMITTER, {GAMER: 5, HONEST: 5}), (with_half_life(10), {GAMER: 10})):
        queue = queue_of(fair, honest_tasks(50))
        queue.hold({HONEST: 10}, at(0))
        queue.hold({HONEST: 10}, at(3600))  # an hour at 10: its usage is 10
        for candidate in gamer_tasks(50):
            queue.put(candidate)
        queue.hold({}, at(3600))  # its 10 ended
        assert fill(queue, 10) == split, fair


def test_usage_fades_with_the_half_life() -> None:
    """Ten minutes after the honest tenant's 10 ended (one half-life), its usage is 5: of 10 free
    slots the gamer takes 7, the honest tenant 3 (7 = 3 + 5 for it, within one grant)."""
    queue = queue_of(with_half_life(10), honest_tasks(50), gamer_tasks(50))
    queue.hold({HONEST: 10}, at(0))
    queue.hold({}, at(3600 * 5))  # five hours at 10: usage 10; then none held
    queue.hold({}, at(3600 * 5 + 600))  # a half-life later: 5
    got = fill(queue, 10)
    assert got[GAMER] + got[HONEST] == 10 and abs((got[HONEST] + 5) - got[GAMER]) <= 1, got
    queue.hold({}, at(3600 * 5 + 600))  # those 10 ended at once
    queue.hold({}, at(3600 * 24 * 7))  # a week later: forgotten, as a group new to the pool
    assert HONEST not in queue._usage and GAMER not in queue._usage


def test_with_a_half_life_held_slots_still_even_out_while_both_wait() -> None:
    """Through time on the played clock: the usage follows what each holds, so once it has caught up
    the slots are shared as without a half-life (within a slot or two while it catches up)."""
    queue = Queue(with_half_life(1))
    for i in range(400):
        queue.put(Candidate.of("ns", f"g{i}", 1000, at(i), f"n{i % 60}", GAMER))
        queue.put(Candidate.of("ns", f"h{i}", 0, at(i), "x", HONEST))
    held: Counter[str] = Counter()
    waiting = Counter({GAMER: 400, HONEST: 400})
    running: list[tuple[float, str]] = []
    now, seen = 0.0, []
    while waiting[GAMER] and waiting[HONEST]:
        queue.hold(held, at(now))
        while len(running) < 10 and (c := queue.pop()) is not None:
            held[c.submitter] += 1
            waiting[c.submitter] -= 1
            heapq.heappush(running, (now + (1.0 if c.submitter == GAMER else 5.0), c.submitter))
        if waiting[GAMER] and waiting[HONEST]:
            seen.append((now, dict(held)))
        now, who = heapq.heappop(running)
        held[who] -= 1
    late = [h for t, h in seen if t > 10]  # past the first fill
    assert late and all(abs(h.get(GAMER, 0) - h.get(HONEST, 0)) <= 2 for h in late), [
        h for h in late if abs(h.get(GAMER, 0) - h.get(HONEST, 0)) > 2][:5]


class SharesWithUsage(Shares):
    """The rule with a usage half-life, written plainly: each group's usage is the slots it held,
    averaged with the half-life, kept as (value, when) and moved to `now` before what it holds
    changes; a group's standing is (held + usage) / weight."""

    def __init__(self, fair: FairShare) -> None:
        super().__init__(fair)
        assert fair.usage_half_life is not None
        self.half_life = fair.usage_half_life.total_seconds()
        self.usage: dict[str, tuple[float, float]] = {}
        self.now: float | None = None

    def value(self, group: str, at_: float) -> float:
        if group not in self.usage:
            return 0.0
        then, when = self.usage[group]
        held = self.load[group]
        return held + (then - held) * float(2.0 ** (-max(at_ - when, 0.0) / self.half_life))

    def settle(self, group: str, at_: float) -> None:
        self.usage[group] = (self.value(group, at_), at_)

    def hold(self, told: dict[str, int], at_: float) -> None:
        for group in set(self.load) | set(told):
            self.settle(group, at_)
        self.now = at_
        self.load = Counter(told)
        for group in [g for g in self.usage if not self.load[g] and self.value(g, at_) < 0.01]:
            del self.usage[group]

    def pop(self, eligible: Callable[[str], bool]) -> Candidate | None:
        best: dict[str, Candidate] = {}
        for c in self.waiting.values():
            g = self.group(c)
            if eligible(g) and (g not in best or c < best[g]):
                best[g] = c
        if not best:
            return None
        now = self.now

        def standing(g: str) -> float:
            return (self.load[g] + (self.value(g, now) if now is not None else 0.0)) / self.fair.weight(g)

        group, c = min(best.items(), key=lambda gc: (standing(gc[0]), self.served[gc[0]], gc[1].sort_key))
        self.discard(c.key)
        self.turn += 1
        if now is not None:
            self.settle(group, now)
        self.load[group] += 1
        if any(self.group(o) == group for o in self.waiting.values()):
            self.served[group] = self.turn
        return c


@given(steps=st.lists(st.tuples(st.sampled_from(["put", "put", "put", "discard", "pop", "pop", "hold"]),
                                st.integers(0, 12), st.integers(-2, 2), st.sampled_from(SUBMITTERS),
                                st.sets(st.sampled_from(SUBMITTERS)), st.integers(0, 900)), max_size=100))
def test_with_a_half_life_the_queue_gives_the_rule_s_order(steps) -> None:
    fair = FairShare.model_validate({"by": "Submitter", "usageHalfLife": "5m", "weights": {"alice": 2}})
    queue, model = Queue(fair), SharesWithUsage(fair)
    clock = 0.0
    for op, n, priority, submitter, capped, seconds in steps:
        key = ("ns", f"t{n}")
        if op == "put":
            candidate = Candidate.of(*key, priority, at(n), "", submitter)
            queue.put(candidate)
            model.put(candidate)
        elif op == "discard":
            queue.discard(key)
            model.discard(key)
        elif op == "hold":
            clock += seconds
            told = {g: (n + i) % 4 for i, g in enumerate(sorted(capped))}
            queue.hold(told, at(clock))
            model.hold(told, clock)
        else:
            assert queue.pop(lambda g: g not in capped) == model.pop(lambda g: g not in capped)
    assert list(queue.in_order()) == [c for c in iter(lambda: model.pop(lambda g: True), None)]
