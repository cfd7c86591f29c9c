"""The worker SDK and the heartbeat sidecar against the real API server (DESIGN §3, §6): each
runs as a local process with the CRONOQ_* environment an attempt's pod gets and a kubeconfig,
renewing a Lease created as the operator creates it; the tests watch the Lease, then take it
over or delete it to see the process fence itself.

What is asserted is order and cause, never how soon: renewals while the handler runs, the handler
let go only once the test has seen them, the reason a process gives for fencing itself. The lease's
TTL is 12 s (renewals every 4 s, each request allowed up to 4 s) so that a starved API server on a
loaded machine does not let it lapse: at 3 s it did (issue 52 item 7), and the processes fenced
themselves for a reason the tests were not about."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from kubernetes import client

from tests.support.waiting import wait_until

TTL = 12
LEASE = "job-a1"
HOLDER = "e1-a1"

WAIT_THEN_SUCCEED = """
import os
import time
from cronoq.worker import run

def handle(ctx):
    while not os.path.exists(os.environ["GO_ON"]):  # the test has seen the lease renewed meanwhile
        time.sleep(0.05)
    return {"attempt": ctx.attempt, "payload": ctx.payload, "renewed": ctx.heartbeat()}

run(handle)
"""
RETRY_LATER = """
from cronoq.worker import Retryable, run

def handle(ctx):
    raise Retryable("upstream busy", retry_after=5)

run(handle)
"""
RUN_ON = """
import time
from cronoq.worker import run

def handle(ctx):
    time.sleep(120)
    return "finished"  # never: the lease is taken away first

run(handle)
"""
SIDECAR = "from cronoq.heartbeat import main; raise SystemExit(main([]))"


class Proc:
    """A worker or sidecar process with an attempt's environment; its stderr in a file."""

    def __init__(self, program: str, kubeconfig: str, namespace: str, workdir: Path,
                 extra: dict[str, str] | None = None) -> None:
        workdir.mkdir()
        self.log = workdir / "termination-log"
        self.stderr = workdir / "stderr"
        env = {"PATH": os.environ.get("PATH", ""), "KUBECONFIG": kubeconfig,
               **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
               "CRONOQ_TASK_ID": "3f6c2a9e-uid", "CRONOQ_TASK_NAME": "job", "CRONOQ_ATTEMPT": "1",
               "CRONOQ_NAMESPACE": namespace, "CRONOQ_LEASE_NAME": LEASE, "CRONOQ_LEASE_ID": HOLDER,
               "CRONOQ_LEASE_TTL": str(TTL), "CRONOQ_PAYLOAD": '{"n": 7}', "CRONOQ_TERMINATION_LOG": str(self.log),
               **(extra or {})}
        with self.stderr.open("w") as err:
            self.popen = subprocess.Popen([sys.executable, "-c", program], env=env, stdout=subprocess.DEVNULL,
                                          stderr=err)

    def exited(self) -> bool:
        return self.popen.poll() is not None

    @property
    def code(self) -> int | None:
        return self.popen.poll()

    def message(self) -> dict:
        data = self.log.read_bytes()
        assert len(data) <= 4096
        return json.loads(data)

    def why(self) -> str:
        return f"exit {self.code}; stderr:\n{self.stderr.read_text()}"

    def close(self) -> None:
        if not self.exited():
            self.popen.kill()
        self.popen.wait()


@pytest.fixture
def leases(api, namespace) -> client.CoordinationV1Api:
    """The attempt's Lease, already there (as after an earlier renewal whose answer was lost)."""
    coordination = client.CoordinationV1Api(api)
    coordination.create_namespaced_lease(namespace, client.V1Lease(
        metadata=client.V1ObjectMeta(name=LEASE),
        spec=client.V1LeaseSpec(holder_identity=HOLDER, lease_duration_seconds=TTL)))
    return coordination


@pytest.fixture
def start(kubeconfig, namespace, tmp_path):
    procs: list[Proc] = []

    def start(program: str, extra: dict[str, str] | None = None) -> Proc:
        procs.append(Proc(program, kubeconfig, namespace, tmp_path / f"proc{len(procs)}", extra))
        return procs[-1]

    yield start
    for proc in procs:
        proc.close()


class RenewTimes:
    """Every distinct spec.renewTime seen while polling the Lease."""

    def __init__(self, leases: client.CoordinationV1Api, namespace: str) -> None:
        self.leases, self.namespace = leases, namespace
        self.seen: list[str] = []

    def poll(self) -> str | None:
        lease = self.leases.read_namespaced_lease(LEASE, self.namespace)
        stamp = lease.spec.renew_time
        if stamp is not None:
            text = stamp.isoformat() if isinstance(stamp, datetime) else str(stamp)
            if not self.seen or self.seen[-1] != text:
                self.seen.append(text)
        return lease.spec.holder_identity

    def gaps(self) -> list[float]:
        times = [datetime.fromisoformat(t.replace("Z", "+00:00")) for t in self.seen]
        return [(b - a).total_seconds() for a, b in zip(times, times[1:])]


def test_the_sdk_renews_the_lease_while_the_handler_runs_and_reports_success(leases, namespace, start, tmp_path):
    renewals = RenewTimes(leases, namespace)
    go_on = tmp_path / "go-on"
    worker = start(WAIT_THEN_SUCCEED, {"GO_ON": str(go_on)})

    wait_until(lambda: (renewals.poll() and len(renewals.seen) >= 3) or worker.exited(), timeout=120, interval=0.05,
               what="three renewals while the handler runs")
    assert not worker.exited(), worker.why()
    go_on.touch()
    wait_until(lambda: renewals.poll() and worker.exited(), timeout=60, interval=0.05, what="the worker to finish")

    assert worker.code == 0, worker.why()
    assert worker.message() == {"outcome": "success", "message": "",
                                "output": '{"attempt":1,"payload":{"n":7},"renewed":true}'}
    # At start, then at its ticks while the handler waits, then the handler's own heartbeat().
    assert len(renewals.seen) >= 4, renewals.seen
    assert all(0 < gap < TTL for gap in renewals.gaps()), f"renewed in order, never lapsed: {renewals.seen}"
    assert leases.read_namespaced_lease(LEASE, namespace).spec.holder_identity == HOLDER


def test_retryable_with_retry_after_exits_1_with_the_hint(leases, start):
    worker = start(RETRY_LATER)

    wait_until(worker.exited, timeout=60, what="the worker to exit")

    assert worker.code == 1, worker.why()
    assert worker.message() == {"outcome": "retryable", "message": "upstream busy", "retryAfterSeconds": 5}


def wait_renewed(renewals: RenewTimes, proc: Proc) -> None:
    wait_until(lambda: renewals.poll() and renewals.seen, timeout=60, interval=0.05,
               what=f"a first renewal ({proc.why() if proc.exited() else 'still running'})")


def test_another_holder_fences_the_worker_at_once_and_its_lease_is_left_alone(leases, namespace, start):
    renewals = RenewTimes(leases, namespace)
    worker = start(RUN_ON)
    wait_renewed(renewals, worker)

    taken = leases.patch_namespaced_lease(LEASE, namespace, {"spec": {"holderIdentity": "e1-a2"}},
                                          _content_type="application/merge-patch+json")
    wait_until(worker.exited, timeout=60, what="the worker to fence itself")

    # At its next renewal, not when its TTL lapsed: the reason is the other holder, not the time.
    assert worker.code == 3, worker.why()
    doc = worker.message()
    assert doc["outcome"] == "retryable" and doc["reason"] == "LeaseLost"
    assert doc["message"] == (f"lease lost: the Lease {namespace}/{LEASE} is no longer held by {HOLDER} "
                              f"(another attempt took over)")
    # The renewal is a patch that tests the holder first: the new holder's Lease was not renewed.
    assert leases.read_namespaced_lease(LEASE, namespace).spec.renew_time == taken.spec.renew_time


def test_a_deleted_lease_fences_the_worker(leases, namespace, start):
    renewals = RenewTimes(leases, namespace)
    worker = start(RUN_ON)
    wait_renewed(renewals, worker)

    leases.delete_namespaced_lease(LEASE, namespace)
    wait_until(worker.exited, timeout=60, what="the worker to fence itself")

    assert worker.code == 3, worker.why()
    doc = worker.message()
    assert doc["outcome"] == "retryable" and doc["reason"] == "LeaseLost"
    assert doc["message"] == f"lease lost: the Lease {namespace}/{LEASE} is gone"


def test_the_sidecar_renews_until_sigterm_then_exits_0(leases, namespace, start):
    renewals = RenewTimes(leases, namespace)
    sidecar = start(SIDECAR)

    wait_until(lambda: renewals.poll() and len(renewals.seen) >= 3, timeout=120, interval=0.05,
               what=f"three renewals by the sidecar ({sidecar.why() if sidecar.exited() else 'still running'})")
    assert not sidecar.exited()
    sidecar.popen.send_signal(signal.SIGTERM)
    wait_until(sidecar.exited, timeout=60, what="the sidecar to exit on SIGTERM")

    assert sidecar.code == 0, sidecar.why()
    assert all(0 < gap < TTL for gap in renewals.gaps()), f"renewed in order, never lapsed: {renewals.seen}"
    assert not sidecar.log.exists()  # the task container's termination message is not the sidecar's to write


def test_the_sidecar_stops_and_exits_3_when_another_attempt_holds_the_lease(leases, namespace, start):
    renewals = RenewTimes(leases, namespace)
    sidecar = start(SIDECAR)
    wait_renewed(renewals, sidecar)

    leases.patch_namespaced_lease(LEASE, namespace, {"spec": {"holderIdentity": "e1-a2"}},
                                  _content_type="application/merge-patch+json")
    wait_until(sidecar.exited, timeout=60, what="the sidecar to fence itself")

    assert sidecar.code == 3, sidecar.why()
    assert f"no longer held by {HOLDER}" in sidecar.stderr.read_text()


CHECKPOINT_THEN_FAIL = """
from cronoq.worker import run

def handle(ctx):
    ctx.checkpoint({"resumed": ctx.checkpoint_data, "done": 3})
    raise RuntimeError("disk full")  # before any renewal carried it: it goes before the attempt ends

run(handle)
"""


def checkpoint_on(leases: client.CoordinationV1Api, namespace: str) -> str | None:
    return (leases.read_namespaced_lease(LEASE, namespace).metadata.annotations or {}).get("cronoq.io/checkpoint")


def test_a_failing_sdk_attempt_leaves_its_newest_checkpoint_on_its_lease(leases, namespace, start):
    """Issue 40, part 2: the checkpoint rides on a renewal (no write of its own), and a failing
    attempt sends its unsent one before it ends; the previous attempt's comes in CRONOQ_CHECKPOINT."""
    worker = start(CHECKPOINT_THEN_FAIL, {"CRONOQ_CHECKPOINT": '{"done":1}'})

    wait_until(worker.exited, timeout=60, what="the worker to exit")

    assert worker.code == 1, worker.why()
    assert json.loads(checkpoint_on(leases, namespace)) == {"resumed": {"done": 1}, "done": 3}


def test_the_sidecar_carries_the_checkpoint_file_and_sends_the_last_one_at_sigterm(leases, namespace, start, tmp_path):
    path = tmp_path / "checkpoint.json"
    sidecar = start(SIDECAR, {"CRONOQ_CHECKPOINT_FILE": str(path)})
    path.write_text('{"done": 1}')
    wait_until(lambda: checkpoint_on(leases, namespace) == '{"done":1}', timeout=30, interval=0.05,
               what=f"the file's checkpoint on the Lease ({sidecar.why() if sidecar.exited() else 'running'})")

    path.write_text('{"done": 2}')  # the task writes its last one and ends: the kubelet sends SIGTERM
    sidecar.popen.send_signal(signal.SIGTERM)
    wait_until(sidecar.exited, timeout=60, what="the sidecar to exit on SIGTERM")

    assert sidecar.code == 0, sidecar.why()
    assert checkpoint_on(leases, namespace) == '{"done":2}', "sent at SIGTERM, not lost with the pod"
