"""`make cluster-up` is safe to run twice and `make cluster-down` stops everything and frees the
ports. Checked on a second, throwaway cluster beside the session's one (own state dir, own ports)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

from tests.support.cluster import REPO

OFFSET = 1000


def run(state, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CRONOQ_CLUSTER_DIR": str(state), "CRONOQ_PORT_OFFSET": str(OFFSET)}
    return subprocess.run([sys.executable, str(REPO / "hack" / "devcluster.py"), *args],
                          env=env, capture_output=True, text=True, timeout=300)


def pids(state) -> dict[str, int]:
    return {p.stem: int(p.read_text()) for p in (state / "run").glob("*.pid")}


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_up_twice_is_safe_and_down_frees_every_port(tmp_path, devcluster, kubeconfig):
    state = tmp_path / "cluster"
    ports = [p + OFFSET for p in (22379, 22380, 26443, 26257, 26259, 26250)]
    try:
        first = run(state, "up")
        assert first.returncode == 0, first.stderr
        started = pids(state)
        assert set(started) == set(devcluster.PROCESSES)
        assert not any(port_free(p) for p in ports), "every component listens on its port"

        second = run(state, "up")
        assert second.returncode == 0, second.stderr
        assert "already running" in second.stderr
        assert pids(state) == started, "a second up starts nothing new"
        status = run(state, "status")
        assert status.returncode == 0 and "healthy" in status.stdout
    finally:
        down = run(state, "down")
    assert down.returncode == 0, down.stderr
    assert not any(devcluster.alive(pid) for pid in started.values())  # zombies count as gone
    assert all(port_free(p) for p in ports)
    assert run(state, "status").returncode == 1
