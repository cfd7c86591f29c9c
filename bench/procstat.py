"""What a process costs, read from /proc: resident memory and CPU time, and a sampler that
keeps the peak resident memory over a window (a finished run's RSS says little about its peak).
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    """VmRSS from /proc/<pid>/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def settled_rss(pid: int, seconds: float = 3.0) -> int:
    """RSS once the process has taken in what it was sent: it has not moved by more than 256 KiB
    for `seconds`."""
    last, still = rss_bytes(pid), time.monotonic()
    while time.monotonic() - still < seconds:
        time.sleep(0.5)
        now = rss_bytes(pid)
        if abs(now - last) > 256 * 1024:
            last, still = now, time.monotonic()
    return last


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (its threads included) from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # fields 14 and 15 of stat(5)


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


class PeakRss:
    """Samples a process's RSS every `interval` seconds between start() and stop()."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        self.pid, self.interval = pid, interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
            except OSError:
                return
            self._stop.wait(self.interval)

    def start(self) -> PeakRss:
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak
