"""Where the operator's CPU goes: py-spy samples the running operator (no restart, no code
change) into collapsed stacks, summarised here as the functions with the most samples,
inclusive and self, and a coarse split by library.

Only samples of a thread holding the GIL are taken (`--gil`): the operator is one Python
process, so the GIL holder is where its CPU goes; threads waiting on sockets or queues are not.
"""
from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

RATE = 50
"""Samples per second: enough for a picture, cheap enough not to change it."""

BUCKETS = (
    ("json / serialisation", ("json/", "sanitize_for_serialization", "deserialize", "__deserialize", "to_dict")),
    ("kubernetes client models", ("kubernetes/client/models",)),
    ("pydantic", ("pydantic",)),
    ("ssl / sockets / http", ("ssl.py", "socket.py", "urllib3", "http/client", "aiohttp")),
    ("kopf", ("kopf/",)),
    ("cronoq engine", ("cronoq/engine",)),
    ("cronoq controller", ("cronoq/controller",)),
    ("cronoq kube", ("cronoq/kube",)),
    ("logging", ("logging/",)),
    ("asyncio", ("asyncio/",)),
    ("threading / waiting", ("threading.py", "concurrent/futures", "queue.py")),
)


ACTIVITIES = (
    ("API calls (cronoq Writer over the aiohttp session: serialise, HTTPS)", ("cronoq/kube/writes.py",)),
    ("cronoq watch intake and store (Task models parsed per event)", ("cronoq/controller/intake.py",
                                                                       "cronoq/controller/store.py")),
    ("cronoq reconcile, admission, Job building", ("cronoq/controller/", "cronoq/engine/")),
    ("cronoq watch streams (aiohttp reads, JSON parsing of every event)", ("cronoq/kube/watch.py",)),
    # In the kopf A/B: kopf's watcher coroutine (queueing.py) also wraps the stream reads.
    ("kopf watch streams (HTTP, JSON parsing of every event)", ("kopf/_cogs/clients/",)),
    ("kopf per-event processing (causes, body copies, handler dispatch)", ("kopf/_core/reactor/processing.py",
                                                                           "kopf/_core/actions/",
                                                                           "kopf/_core/reactor/queueing.py")),
    ("metrics / probes", ("prometheus_client", "aiohttp/web")),
)
"""What the operator was doing, judged by the first rule any frame of a sample matches."""

INTERESTING = ("cronoq/", "kopf/", "kubernetes/", "pydantic", "urllib3/", "json/", "copy.py", "ssl.py", "aiohttp/")
"""Frames worth listing by inclusive time (the interpreter's own entry frames are in every sample)."""


def py_spy() -> str | None:
    here = Path(sys.executable).with_name("py-spy")
    return str(here) if here.exists() else shutil.which("py-spy")


class Profiler:
    def __init__(self, pid: int, prefix: Path) -> None:
        self.pid, self.raw = pid, prefix.with_suffix(".collapsed.txt")
        self.process: subprocess.Popen | None = None

    def start(self) -> Profiler:
        exe = py_spy()
        if exe is None:
            return self
        self.process = subprocess.Popen([exe, "record", "--pid", str(self.pid), "--rate", str(RATE), "--nonblocking", "--gil",
                                         "--format", "raw", "--output", str(self.raw)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self

    def finish(self) -> dict[str, Any] | None:
        if self.process is None:
            return None
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
        return summarise(self.raw) if self.raw.exists() else None


def _frame(frame: str) -> str:
    """`func (path/to/file.py:123)` → `func (to/file.py)`: lines merged, paths shortened."""
    func, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "lib/python3.11/", "operator/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{func} ({path})"


def summarise(raw: Path, top: int = 20) -> dict[str, Any]:
    inclusive: Counter = Counter()
    leaf: Counter = Counter()
    buckets: Counter = Counter()
    activities: Counter = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame(f) for f in stack.split(";") if f and not f.startswith("process ")
                  and not f.startswith("thread ")]
        if not frames:
            continue
        total += n
        for f in set(frames):
            inclusive[f] += n
        leaf[frames[-1]] += n
        activity = next((name for name, keys in ACTIVITIES if any(k in f for f in frames for k in keys)),
                        "event loop, threads and the rest")
        activities[activity] += n
        # A sample is charged to the innermost frame that falls into a bucket.
        for f in reversed(frames):
            bucket = next((name for name, keys in BUCKETS if any(k in f for k in keys)), None)
            if bucket:
                buckets[bucket] += n
                break
        else:
            buckets["other"] += n
    share = (lambda c: round(100 * c / total, 1)) if total else (lambda c: 0.0)
    telling = [(f, c) for f, c in inclusive.most_common() if any(k in f for k in INTERESTING)]
    return {"samples": total, "rate": RATE, "file": raw.name,
            "by_activity_percent": {k: share(v) for k, v in activities.most_common()},
            "by_library_percent": {k: share(v) for k, v in buckets.most_common()},
            "top_inclusive_percent": [(f, share(c)) for f, c in telling[:top]],
            "top_self_percent": [(f, share(c)) for f, c in leaf.most_common(top)]}
