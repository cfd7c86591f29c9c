"""`cronoq heartbeat`, the sidecar's entry point, where no cluster is needed: its environment
checks, idling with heartbeats off, SIGTERM, and fencing when the API server is unreachable.
(Renewing a real Lease is in tests/integration/test_worker.py.)"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cronoq.heartbeat import main

from tests.support.waiting import wait_until
from tests.unit.worker.test_run import UNREACHABLE_KUBECONFIG

ENV = {"CRONOQ_TASK_ID": "uid", "CRONOQ_TASK_NAME": "report", "CRONOQ_ATTEMPT": "1", "CRONOQ_NAMESPACE": "jobs",
       "CRONOQ_LEASE_NAME": "report-a1", "CRONOQ_LEASE_ID": "e1-a1"}


def sidecar(env: dict[str, str], stderr: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "from cronoq.heartbeat import main; raise SystemExit(main([]))"],
                            env=env, stdout=subprocess.DEVNULL, stderr=stderr.open("w"))


def test_an_unusable_environment_exits_2() -> None:
    assert main([], environ={**ENV, "CRONOQ_LEASE_TTL": "3", "CRONOQ_LEASE_NAME": ""}) == 2
    assert main([], environ={**ENV, "CRONOQ_LEASE_TTL": "three"}) == 2


def test_it_takes_no_arguments() -> None:
    with pytest.raises(SystemExit) as ended:
        main(["--lease", "x"], environ=ENV)
    assert ended.value.code == 2
    with pytest.raises(SystemExit) as ended:
        main(["--help"], environ=ENV)
    assert ended.value.code == 0


def test_with_heartbeats_off_it_idles_until_sigterm_then_exits_0(tmp_path: Path) -> None:
    """Exiting at once would only get a native sidecar restarted, again and again."""
    log = tmp_path / "stderr"
    proc = sidecar({**ENV, "CRONOQ_LEASE_TTL": "0"}, log)
    try:
        wait_until(lambda: "idling until SIGTERM" in log.read_text(), timeout=30, what="the sidecar idling")
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
    finally:
        proc.kill()
        proc.wait()


def test_an_unreachable_api_server_for_a_whole_ttl_exits_3(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(UNREACHABLE_KUBECONFIG)
    log = tmp_path / "stderr"
    started = time.monotonic()
    proc = sidecar({**ENV, "CRONOQ_LEASE_TTL": "1.5", "KUBECONFIG": str(kubeconfig)}, log)
    try:
        assert proc.wait(timeout=30) == 3
    finally:
        proc.kill()
        proc.wait()
    assert time.monotonic() - started < 30
    assert "lease lost, stopped renewing: no successful renewal for 1.5s" in log.read_text()
