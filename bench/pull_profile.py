"""Where a pull burst's CPU goes, in every process that spends it: py-spy samples the operator and
(some of) the workers (bench/profiling.py, GIL holders only), and the API server's own profiler
(`/debug/pprof/profile`, served when the cluster started with CRONOQ_APISERVER_PROFILING=1, as
`python -m bench.pull_ab --profile` starts it; read with the admin certificate) is taken in back-to-back
windows of WINDOW seconds while the burst runs, merged afterwards by `go tool pprof`.

Only for finding what to fix: sampling costs CPU of its own (py-spy's processes, the API server's
profiler), so a profiled burst's throughput is not the figure to quote.
"""
from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from bench.profiling import Profiler

WINDOW = 5
"""Seconds of one API-server profile: the profiler answers only when its window ends."""
WORKERS_SAMPLED = 2
"""Workers sampled by py-spy: a process each, so not all 32 of a large fleet."""


class ApiServerProfile:
    def __init__(self, api: Any, prefix: Path) -> None:
        self.api, self.prefix = api, prefix
        self.files: list[Path] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> ApiServerProfile:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            resp = self.api.pool.urlopen("GET", f"/debug/pprof/profile?seconds={WINDOW}", timeout=WINDOW + 30)
            if resp.status != 200:
                return
            path = self.prefix.with_name(f"{self.prefix.name}-apiserver-{len(self.files)}.pprof")
            path.write_bytes(resp.data)
            self.files.append(path)

    def finish(self) -> dict[str, Any] | None:
        """Stop after the window under way; merge the windows; the heaviest functions, flat and cumulative."""
        self._stop.set()
        self._thread.join(WINDOW + 35)
        go = shutil.which("go") or "/usr/local/go/bin/go"
        if not self.files:
            return None
        merged = self.prefix.with_name(f"{self.prefix.name}-apiserver.pprof")
        with open(merged, "wb") as out:
            subprocess.run([go, "tool", "pprof", "-proto", *map(str, self.files)], stdout=out,
                           stderr=subprocess.DEVNULL, check=False)
        tops = {}
        for order in ("flat", "cum"):
            done = subprocess.run([go, "tool", "pprof", "-top", f"-{order}", "-nodecount=60", str(merged)],
                                  capture_output=True, text=True, check=False)
            tops[order] = done.stdout
        return {"file": merged.name, "windows": len(self.files), "top_flat": tops["flat"], "top_cum": tops["cum"]}


class PullProfile:
    """py-spy on the operator and a few workers, the API server's profiler, for one burst."""

    def __init__(self, api: Any, prefix: Path, operator_pid: int, worker_pids: list[int]) -> None:
        self.python = {"operator": Profiler(operator_pid, prefix.with_name(f"{prefix.name}-operator"))}
        for i, pid in enumerate(worker_pids[:WORKERS_SAMPLED]):
            self.python[f"worker-{i}"] = Profiler(pid, prefix.with_name(f"{prefix.name}-worker-{i}"))
        self.apiserver = ApiServerProfile(api, prefix)

    def start(self) -> PullProfile:
        for profiler in self.python.values():
            profiler.start()
        self.apiserver.start()
        return self

    def finish(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: profiler.finish() for name, profiler in self.python.items()}
        out["apiserver"] = self.apiserver.finish()
        return out
