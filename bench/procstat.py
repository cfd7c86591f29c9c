"""What a process costs, read from /proc (resident memory, CPU time, a sampler that keeps the peak
RSS over a window: a finished run's RSS says little about its peak), and the bench's one way to run
a process (the operator, a peer controller) and to wait on a condition."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

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


def wait_until(check: Callable[[], Any], timeout: float, interval: float = 0.2, what: str | None = None) -> bool:
    """Poll `check` until it is true; False at the timeout, or, naming `what`, a TimeoutError."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    if what:
        raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
    return False


class Running:
    """A process the bench started (`process`, logging to `log_path`): its pid, CPU, RSS, stop."""
    process: subprocess.Popen | None
    log_path: Path

    def __init__(self, log_path: Path) -> None:
        self.log_path, self.process = log_path, None

    def launch(self, argv: list[str], env: dict[str, str | None], **popen: Any) -> None:
        """Start `argv` with the bench's environment and `env` (None: a variable taken away)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **env}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(argv, env={k: v for k, v in env.items() if v is not None}, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **popen)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(sig)
            self.process.wait(timeout=30)

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM, and SIGKILL if it has not ended after `timeout`."""
        if self.alive():
            assert self.process is not None
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


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
