"""A pull worker's name (cronoq.worker.discovery.worker_name): in a pod, the prefix the chart's worker
policy checks against the pod its token is bound to, and six random characters."""
from __future__ import annotations

import re

import pytest

from cronoq.worker.discovery import worker_name

LEASE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@pytest.mark.parametrize(("pod", "prefix"), [
    ("mail-7d9f-x2k4q", "mail-7d9f-x2k4q"),
    ("m" * 70, "m" * 56),
    ("w" * 55 + ".pool-7d9f", "w" * 55),  # cut on a dot: `w...w.-abc123` would be no Lease name
    ("w" * 54 + "-.pool", "w" * 54),
])
def test_a_worker_in_a_pod_is_named_after_its_pod(monkeypatch, pod, prefix):
    monkeypatch.setenv("POD_NAME", pod)
    name = worker_name("mail")
    assert name.startswith(prefix + "-") and len(name) == len(prefix) + 7
    assert LEASE_NAME.match(name) and len(name) <= 63
    assert worker_name("mail") != name, "a new name for every process"


def test_a_worker_outside_a_pod_is_named_after_its_pool_and_host(monkeypatch):
    monkeypatch.delenv("POD_NAME", raising=False)
    monkeypatch.setattr("socket.gethostname", lambda: "Build_Box.local")
    name = worker_name("mail")
    assert name.startswith("mail-build-box-local-") and LEASE_NAME.match(name)
