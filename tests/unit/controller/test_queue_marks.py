"""A pool's queue marks (issue 56): past MARKS_FROM waiting, the pool's status carries marks of
its admission order, so that `describe` places a task without listing the pool; taken again at
most every MARKS_SECONDS, and not written again while the queue is the same."""
from __future__ import annotations

import asyncio

from cronoq.controller.poolstatus import MARKS_SECONDS
from cronoq.engine.admission import MARKS_FROM

from tests.unit.fakes import NS, World


def test_marks_appear_past_the_limit_name_the_order_and_are_not_rewritten_for_the_same_queue() -> None:
    async def scenario() -> None:
        world = World(concurrency=0)  # nothing starts: every task waits
        for i in range(MARKS_FROM):
            world.submit(f"t{i:05d}", priority=1 if i % 500 == 7 else 0)
        await world.settle()
        statuses = world.controller.pool_statuses
        await statuses.write((NS, "p"))
        status = statuses.store.pools[(NS, "p")].status
        assert status.queued == MARKS_FROM and status.queue_marks is None, "up to the limit: describe lists"

        await world.clock.advance(1)
        world.submit("newest")
        await world.settle()
        await statuses.write((NS, "p"))
        marks = statuses.store.pools[(NS, "p")].status.queue_marks
        assert marks is not None and marks.waiting == MARKS_FROM + 1 and len(marks.marks) <= 100
        assert [(m.place, m.name, m.priority) for m in marks.marks[:2]] == [(1, "t00007", 1), (22, "t00018", 0)], (
            "the 4 raised ones first, then the oldest: every 21st marked")
        assert marks.marks[-1].name == "newest" and marks.marks[-1].place == MARKS_FROM + 1

        written = []
        replace = world.writer.replace_pool_status

        async def counted(raw, status):
            written.append(status)
            return await replace(raw, status)

        world.writer.replace_pool_status = counted
        await world.clock.advance(MARKS_SECONDS)
        await statuses.write((NS, "p"))
        assert statuses.store.pools[(NS, "p")].status.queue_marks == marks and written == [], (
            "the same queue a minute later: nothing written")
        world.submit("zz-newer")
        await world.settle()
        await world.clock.advance(MARKS_SECONDS)
        await statuses.write((NS, "p"))
        assert len(written) == 1 and written[0]["queueMarks"]["marks"][-1]["name"] == "zz-newer"

    asyncio.run(scenario())
