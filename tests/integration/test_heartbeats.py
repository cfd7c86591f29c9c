"""Per-attempt heartbeat Leases (DESIGN §6): an attempt whose Lease is not renewed within its TTL
(by the operator's own clock, from container start) is aborted and retried as LeaseExpired."""
from __future__ import annotations

from kubernetes import client

from tests.support.waiting import wait_until


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


def test_the_attempt_creates_its_lease_and_renewals_keep_it_alive_past_its_ttl(cq, api, kubeconfig):
    """The SDK's own lease keeper, run here as the attempt's pod would run it: it creates the
    attempt's Lease at its first renewal (the operator creates none) and renews it every TTL/3."""
    from cronoq.worker.lease import KubeLease, LeaseKeeper, Owner

    cq.pool(leaseTTL="2s", retry={"maxAttempts": 1})
    task = cq.task("beating", delay="5s", message="done")
    wait_until(lambda: cq.jobs("beating"), timeout=30, what="Job 1")
    attempt = cq.status("beating")["attempts"][0]
    assert client.CoordinationV1Api(api).list_namespaced_lease(
        cq.namespace, label_selector="cronoq.io/task=beating").items == [], "the operator wrote no Lease"
    keeper = LeaseKeeper(2.0, KubeLease(cq.namespace, "beating-a1", attempt["leaseId"], kubeconfig=kubeconfig,
                                        owner=Owner("beating", task["metadata"]["uid"], 1), ttl=2.0).renew)
    lost: list[str] = []
    keeper.start(lost.append)

    status = cq.wait_phase("beating", "Succeeded", timeout=60)

    keeper.stop()
    assert lost == [] and keeper.renewals >= 3
    lease = client.CoordinationV1Api(api).read_namespaced_lease("beating-a1", cq.namespace)
    assert lease.spec.holder_identity == attempt["leaseId"] and lease.spec.lease_duration_seconds == 2
    assert lease.metadata.owner_references[0].name == "beating"
    assert lease.metadata.labels["cronoq.io/task-uid"] == task["metadata"]["uid"]
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
    assert (init.name, init.restart_policy, init.command, init.args) == ("cronoq-heartbeat", "Always", ["cronoq"], ["heartbeat"])
    env = {e.name: e.value for e in init.env}
    assert env["CRONOQ_LEASE_NAME"] == "sidecar-a1" and env["CRONOQ_LEASE_TTL"] == "30"
    assert "CRONOQ_PAYLOAD" not in env
