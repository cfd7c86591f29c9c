"""The lease TTL a pull worker heartbeats an attempt by: the one the operator stamped on the
attempt's record; for a record an older operator wrote (no stamp), derived as that operator did,
the task's leaseTTL, else the pool's, read with the one duration grammar."""
from __future__ import annotations

from typing import Any

import pytest

from cronoq.pod_protocol import Terms
from cronoq.pod_protocol.handover import HandOver
from cronoq.worker.attempts import DEFAULT_LEASE_TTL
from cronoq.worker.lifecycle import Worker


class Pools:
    """The custom objects API, holding one TaskPool; counts the reads."""

    def __init__(self, lease_ttl: str | None) -> None:
        self.spec = {} if lease_ttl is None else {"leaseTTL": lease_ttl}
        self.reads = 0

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                     _request_timeout: float = 0) -> dict[str, Any]:
        assert (plural, name) == ("taskpools", "mail")
        self.reads += 1
        return {"metadata": {"name": name}, "spec": self.spec}


def worker(pools: Pools) -> Worker:
    return Worker("mail", lambda ctx: None, concurrency=1, namespace="jobs", name="w-1", ttl=1.0, grace=1.0,
                  kubeconfig=None, coordination=object(), custom=pools)


def lease_ttl(pools: Pools, spec: dict[str, Any], record: dict[str, Any]) -> float:
    """The TTL the worker serves the attempt `record` of a task of `spec` by."""
    task = {"metadata": {"uid": "u", "name": "t"}, "spec": spec, "status": {"attempt": 1, "attempts": [record]}}
    return worker(pools).attempts.lease_ttl(HandOver.of_task(task))


@pytest.mark.parametrize("record, terms", [
    ({"leaseTTLMs": 2500, "timeoutMs": 90_000}, Terms(2.5, 90.0)), ({"leaseTTLMs": 0}, Terms(0.0)),
    ({"leaseTTLMs": 30_000, "timeoutMs": None}, Terms(30.0)),
    ({}, None), ({"leaseTTLMs": None}, None), ({"leaseTTLMs": "30s"}, None), ({"leaseTTLMs": True}, None),
    ({"leaseTTLMs": -1}, None),
])
def test_the_terms_on_a_record(record: dict, terms: Terms | None) -> None:
    assert Terms.of_record({"number": 1, "leaseId": "e1-a1", **record}) == terms


def test_a_stamped_record_is_served_by_its_stamp_whatever_the_specs_say() -> None:
    pools = Pools("5s")
    assert lease_ttl(pools, {"leaseTTL": "1m"}, {"number": 1, "leaseTTLMs": 2500}) == 2.5
    assert lease_ttl(pools, {}, {"number": 1, "leaseTTLMs": 0}) == 0.0
    assert pools.reads == 0


@pytest.mark.parametrize("spec, pool, ttl", [
    ({"leaseTTL": "1m30s"}, "5s", 90.0), ({"leaseTTL": "0"}, "5s", 0.0), ({"leaseTTL": "2500ms"}, None, 2.5),
    ({}, "5s", 5.0), ({}, "0s", 0.0), ({}, None, DEFAULT_LEASE_TTL),
])
def test_a_record_without_a_stamp_is_served_as_before(spec: dict, pool: str | None, ttl: float) -> None:
    assert lease_ttl(Pools(pool), spec, {"number": 1, "leaseId": "e1-a1"}) == ttl
