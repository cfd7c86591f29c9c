"""Per-attempt heartbeat Leases (DESIGN §6): an attempt whose Lease is not renewed within its TTL
(by the operator's own clock, from container start) is aborted and retried as LeaseExpired."""
from __future__ import annotations

import threading
from datetime import datetime, timezone

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.waiting import wait_until


class Renewer:
    """Plays the SDK's heartbeat thread: renews a Lease every `period` seconds until stopped."""

    def __init__(self, api, namespace: str, name: str, period: float = 0.7) -> None:
        self.coordination = client.CoordinationV1Api(api)
        self.namespace, self.name, self.period = namespace, name, period
        self.renewals = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(self.period):
            now = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
            try:
                self.coordination.patch_namespaced_lease(self.name, self.namespace, {"spec": {"renewTime": now}})
                self.renewals += 1
            except ApiException:
                pass  # not created yet

    def close(self) -> int:
        self.stop.set()
        self.thread.join()
        return self.renewals


def test_an_attempt_without_heartbeats_expires_and_is_counted(cq):
    cq.pool(leaseTTL="2s", retry={"maxAttempts": 2, "initialBackoff": "0s"})
    before = cq.operator.metric("cronoq_lease_expirations_total")
    cq.task("silent", outcome="Run")

    status = cq.wait_phase("silent", "DeadLettered", timeout=60)

    assert [a["reason"] for a in status["attempts"]] == ["LeaseExpired", "LeaseExpired"]
    assert all(a["durationMs"] >= 2000 for a in status["attempts"])
    wait_until(lambda: cq.operator.metric("cronoq_lease_expirations_total") >= before + 2, timeout=10,
               what="both expirations counted")
    wait_until(lambda: not cq.jobs("silent"), timeout=30, what="the expired attempts' Jobs deleted")


def test_renewals_keep_an_attempt_alive_past_its_ttl(cq, api):
    cq.pool(leaseTTL="2s", retry={"maxAttempts": 1})
    cq.task("beating", delay="5s", message="done")
    wait_until(lambda: cq.jobs("beating"), timeout=30, what="Job 1")
    lease = client.CoordinationV1Api(api).read_namespaced_lease("beating-a1", cq.namespace)
    attempt = cq.status("beating")["attempts"][0]
    assert lease.spec.holder_identity == attempt["leaseId"]
    assert lease.metadata.owner_references[0].name == "beating"
    renewer = Renewer(api, cq.namespace, "beating-a1")

    status = cq.wait_phase("beating", "Succeeded", timeout=60)

    assert renewer.close() >= 3
    assert status["attempts"][0]["durationMs"] >= 4000, "it ran past its 2s TTL, on heartbeats"


def test_time_before_the_container_starts_does_not_count(cq):
    cq.pool(leaseTTL="2s", retry={"maxAttempts": 1})
    cq.task("late-start", start_delay="4s", delay="500ms")

    status = cq.wait_phase("late-start", "Succeeded", timeout=60)

    assert status["attempts"][0]["outcome"] == "Success"


def test_heartbeats_off_with_a_zero_ttl(cq, api):
    cq.pool(leaseTTL="0s", retry={"maxAttempts": 1})
    cq.task("free", delay="3s")

    cq.wait_phase("free", "Succeeded", timeout=60)

    leases = client.CoordinationV1Api(api).list_namespaced_lease(cq.namespace, label_selector="cronoq.io/task=free")
    assert leases.items == []


def test_heartbeat_sidecar_is_a_native_sidecar_with_the_attempts_lease(cq):
    cq.pool(heartbeatSidecar=True, leaseTTL="30s")
    cq.task("sidecar", delay="200ms")

    cq.wait_phase("sidecar", "Succeeded")

    (job,) = cq.jobs("sidecar")
    (init,) = job.spec.template.spec.init_containers
    assert (init.name, init.restart_policy, init.args) == ("cronoq-heartbeat", "Always", ["heartbeat"])
    env = {e.name: e.value for e in init.env}
    assert env["CRONOQ_LEASE_NAME"] == "sidecar-a1" and env["CRONOQ_LEASE_TTL"] == "30"
    assert "CRONOQ_PAYLOAD" not in env
