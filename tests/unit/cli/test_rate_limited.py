"""What `cronoq pool` says of a pool's rate limit (what `cronoq describe` says of a task waiting
for it: tests/unit/engine/test_waiting.py)."""
from __future__ import annotations

from cronoq.api import TaskPool
from cronoq.cli.pools import rate_limit


def _pool(**spec: object) -> TaskPool:
    return TaskPool.model_validate({"metadata": {"name": "p"}, "spec": spec})


def test_pool_listings_show_the_limit() -> None:
    assert rate_limit(_pool(rateLimit={"startsPerSecond": 0.5, "burst": 3})) == "0.5/s, burst 3"
    assert rate_limit(_pool()) is None
