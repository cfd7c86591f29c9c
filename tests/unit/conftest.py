"""The unit tests of the pull worker leave no thread the interpreter would wait for at exit: every
executor or non-daemon thread a test starts ends by the test's end (a handler left running once
kept `pytest tests/unit` from exiting)."""
from __future__ import annotations

import threading
import time

import pytest

WORKER_TESTS = ("test_worker", "test_push_runner", "test_fencing", "test_inputs", "test_handover")
"""The worker SDK's tests outside tests/unit/worker/."""
LINGER = 5.0
"""Seconds a thread the test started may take to end after it."""


@pytest.fixture(autouse=True)
def no_thread_left(request: pytest.FixtureRequest):
    path = request.node.path
    if path.parent.name != "worker" and not path.name.startswith(WORKER_TESTS):
        yield
        return
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + LINGER
    left = [t for t in threading.enumerate() if t not in before and not t.daemon and t.is_alive()]
    while left and time.monotonic() < deadline:
        left[0].join(deadline - time.monotonic())
        left = [t for t in left if t.is_alive()]
    assert not left, f"threads the interpreter would wait for at exit: {[t.name for t in left]}"
