"""The pull worker's delayed calls (worker/attempts.py's Later): one thread for every attempt's
heartbeat start, on an injected clock."""
from __future__ import annotations

import threading

from cronoq.worker.attempts import Later


def test_a_due_call_runs_a_cancelled_one_never_and_calls_run_in_due_order() -> None:
    now = [0.0]
    later = Later(clock=lambda: now[0])
    ran: list[str] = []
    done = {name: threading.Event() for name in ("soon", "first", "later")}

    def note(name: str) -> None:
        ran.append(name)
        if name in done:
            done[name].set()

    cancel = later.call(10, lambda: note("cancelled"))
    later.call(20, lambda: note("later"))
    later.call(0, lambda: note("soon"))
    assert done["soon"].wait(5)
    assert ran == ["soon"], "nothing else is due yet"
    cancel()
    now[0] = 100.0  # the clock jumps: a call due first wakes the thread
    later.call(-200, lambda: note("first"))
    assert done["first"].wait(5) and done["later"].wait(5)
    assert ran == ["soon", "first", "later"], "the cancelled call never ran; the others in due order"


def test_a_stopped_later_runs_nothing_more_and_its_thread_ends() -> None:
    now = [0.0]
    later = Later(clock=lambda: now[0])
    ran: list[str] = []
    started = threading.Event()
    later.call(0, started.set)
    assert started.wait(5)
    later.call(10, lambda: ran.append("due after the stop"))
    thread = later._thread
    later.stop()
    now[0] = 100.0
    later.call(0, lambda: ran.append("called after the stop"))
    assert thread is not None and not thread.is_alive(), "joined by stop()"
    assert ran == [] and later._thread is thread, "nothing ran, and no thread was started again"
