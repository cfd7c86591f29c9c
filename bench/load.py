"""The load generator: POSTs prebuilt objects from a fixed number of threads, as fast as the API
server answers (a burst) or paced at a given rate, and notes when each request was sent.

The same function submits bare Jobs and Tasks, so the baseline and cronoq see the same
concurrency of creation.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bench.kubeapi import Api, ApiError

DEFAULT_CREATORS = 16


@dataclass
class Submission:
    sent: dict[str, float] = field(default_factory=dict)
    """Object name → time.monotonic() just before its create request."""
    errors: dict[str, str] = field(default_factory=dict)
    started: float = 0.0
    finished: float = 0.0

    @property
    def rate(self) -> float:
        span = self.finished - self.started
        return len(self.sent) / span if span > 0 else float("inf")


def submit(api: Api, path: str, objects: list[dict[str, Any]], *, creators: int = DEFAULT_CREATORS,
           rate: float | None = None) -> Submission:
    """Create every object; with `rate` (objects/s), object i is sent no sooner than start + i/rate."""
    result = Submission()
    lock = threading.Lock()
    cursor = iter(range(len(objects)))
    result.started = start = time.monotonic()

    def work() -> None:
        while True:
            with lock:
                i = next(cursor, None)
            if i is None:
                return
            if rate:
                delay = start + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            obj = objects[i]
            name = obj["metadata"]["name"]
            sent = time.monotonic()
            try:
                api.create(path, obj)
            except (ApiError, OSError, Exception) as err:  # noqa: BLE001 - counted, not fatal
                result.errors[name] = repr(err)[:300]
                continue
            result.sent[name] = sent

    threads = [threading.Thread(target=work, daemon=True) for _ in range(creators)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result.finished = time.monotonic()
    return result
