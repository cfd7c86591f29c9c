"""Concurrency keys across pools (issue 54, item 2), against the real control plane: a key's limit,
declared by one pool, holds for tasks of every pool of the namespace; a waiting task says which key
holds it and who holds it (its status and `cronoq describe`); a new leader counts the running
holders before it grants.

The attempts run until the test ends them (kwok plays a 10-minute task, cancelled by the test), so
which holder ends when is the test's doing, not a timer's."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import datetime

import pytest

from tests.support.tasks import Cronoq

pytestmark = pytest.mark.cluster

KEY = "deploy/service-x"
LONG = {"delay": "10m"}


def pools(cq: Cronoq, limit: int = 1) -> None:
    """Pool `deploys` declares the key's limit; pool `other` declares nothing and is bound by it too."""
    cq.pool("deploys", concurrency=3, leaseTTL="0s", concurrencyKeyLimits=[{"key": KEY, "limit": limit}])
    cq.pool("other", concurrency=3, leaseTTL="0s")


def phases(cq: Cronoq, *names: str) -> dict[str, str | None]:
    return {name: cq.status(name).get("phase") for name in names}


def holding(cq: Cronoq) -> list[str]:
    """The running tasks naming the key, from the API server."""
    items = cq.custom.list_namespaced_custom_object("cronoq.io", "v1alpha1", cq.namespace, "tasks")["items"]
    return sorted(t["metadata"]["name"] for t in items
                  if KEY in t["spec"].get("concurrencyKeys", []) and (t.get("status") or {}).get("phase") == "Running")


def waits_for_key(cq: Cronoq, name: str, holder: str) -> dict:
    return cq.wait_status(name, lambda s: s.get("phase") == "Queued" and any(
        c.get("reason") == "WaitingForKey" for c in s.get("conditions", [])) and s.get("message", "").endswith(
        f"held by {holder}"), what=f"{name} waiting for the key {holder} holds")


def describe(name: str, namespace: str, kubeconfig: str) -> str:
    shown = subprocess.run([sys.executable, "-m", "cronoq", "describe", name, "-n", namespace,
                            "--kubeconfig", kubeconfig], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "COLUMNS": "250"})
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def test_a_mutex_across_two_pools_runs_one_holder_at_a_time(cq, kubeconfig):
    pools(cq)
    cq.task("deploy-a", pool="deploys", concurrencyKeys=[KEY], **LONG)
    cq.wait_phase("deploy-a", "Running")
    cq.task("deploy-b", pool="other", concurrencyKeys=[KEY], **LONG)
    cq.task("deploy-c", pool="deploys", concurrencyKeys=[KEY], priority=-1, **LONG)
    cq.task("unkeyed", pool="other", **LONG)
    cq.wait_phase("unkeyed", "Running")  # the pools have free slots: only the key holds b and c
    for name in ("deploy-b", "deploy-c"):
        status = waits_for_key(cq, name, "deploy-a")
        assert status["message"] == f"waiting for concurrency key {KEY}: 1 of 1 running across pools, held by deploy-a"
    assert holding(cq) == ["deploy-a"]

    shown = describe("deploy-b", cq.namespace, kubeconfig)
    said = " ".join(shown.split())
    assert f"Concurrency keys: {KEY}" in said, shown
    assert (f"Waiting for: concurrency key {KEY} has 1 of 1 running (its limit across every pool of the namespace): "
            "held by deploy-a") in said, shown
    print(shown)  # the report's excerpt

    # The holder in pool deploys ends: the next by priority, in pool other, takes the key.
    cq.patch_task("deploy-a", {"cancel": True})
    cq.wait_phase("deploy-b", "Running")
    assert holding(cq) == ["deploy-b"] and phases(cq, "deploy-c")["deploy-c"] == "Queued"
    assert KEY in describe("deploy-c", cq.namespace, kubeconfig) and "held by deploy-b" in " ".join(
        describe("deploy-c", cq.namespace, kubeconfig).split())

    cq.patch_task("deploy-b", {"cancel": True})
    cq.wait_phase("deploy-c", "Running")
    assert holding(cq) == ["deploy-c"]


def test_a_new_leader_counts_the_running_holders_before_it_grants(pair):
    cq, a, b = pair
    pools(cq)
    cq.task("first", pool="deploys", concurrencyKeys=[KEY], **LONG)
    cq.wait_phase("first", "Running")
    cq.task("second", pool="other", concurrencyKeys=[KEY], **LONG)
    waits_for_key(cq, "second", "first")

    a.kill(signal.SIGKILL)
    b.wait_leading(timeout=60)
    # The new leader grants: a task of no key starts in the same pool (so it has decided), and
    # the key's waiting task still waits.
    cq.task("probe", pool="other", **LONG)
    probe = cq.wait_phase("probe", "Running", timeout=90)
    assert probe["epoch"] >= 2, probe
    assert holding(cq) == ["first"] and cq.status("second")["phase"] == "Queued"

    cq.patch_task("first", {"cancel": True})
    started = cq.wait_phase("second", "Running", timeout=90)
    assert started["epoch"] >= 2 and holding(cq) == ["second"]


# --- newest wins (issue 54, item 3) ------------------------------------------------------------------

def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def finished_reason(status: dict) -> str | None:
    return next((c.get("reason") for c in status.get("conditions", []) if c.get("type") == "Finished"), None)


def test_supersede_ends_the_older_queued_task_cancelled_naming_the_newer(cq):
    cq.pool("syncs", concurrency=3, leaseTTL="0s", concurrencyKeyLimits=[
        {"key": "sync/*", "limit": 1, "onNewer": "SupersedeQueued"},
        {"key": "build/*", "limit": 1, "onNewer": "CancelRunning"}])
    cq.pool("more", concurrency=3, leaseTTL="0s")
    cq.task("sync-1", pool="syncs", concurrencyKeys=["sync/acct-1"], **LONG)
    cq.wait_phase("sync-1", "Running")
    cq.task("sync-2", pool="more", concurrencyKeys=["sync/acct-1"], **LONG)
    cq.wait_status("sync-2", lambda s: s.get("message", "").startswith("waiting for concurrency key sync/acct-1"),
                   what="sync-2 waiting for the key")
    cq.task("sync-3", pool="more", concurrencyKeys=["sync/acct-1"], **LONG)

    ended = cq.wait_phase("sync-2", "Cancelled")
    assert finished_reason(ended) == "Superseded"
    assert ended["message"] == "superseded by newer task sync-3 (concurrency key sync/acct-1)"
    assert cq.status("sync-1")["phase"] == "Running", "SupersedeQueued leaves the running one alone"
    assert cq.status("sync-3")["phase"] == "Queued"
    assert not cq.jobs("sync-2"), "a superseded task never ran"

    # CancelRunning: the newer one aborts the running older one, and runs.
    cq.task("build-1", pool="syncs", concurrencyKeys=["build/web"], **LONG)
    cq.wait_phase("build-1", "Running")
    cq.task("build-2", pool="more", concurrencyKeys=["build/web"], **LONG)
    aborted = cq.wait_phase("build-1", "Cancelled")
    assert finished_reason(aborted) == "Superseded" and aborted["attempts"][0]["reason"] == "Superseded"
    assert aborted["message"] == "superseded by newer task build-2 (concurrency key build/web)"
    cq.wait_phase("build-2", "Running", timeout=90)


def test_debounce_runs_the_newest_of_a_burst_once_the_key_is_quiet(cq, kubeconfig):
    """Three tasks with one debounced key in quick succession: the first two end Cancelled naming the
    third, which runs once the key has been quiet (3 s); a task whose quiet is long says so."""
    cq.pool("rebuilds", concurrency=3, leaseTTL="0s", concurrencyKeyLimits=[
        {"key": "rebuild/*", "limit": 1, "onNewer": "Debounce", "debounce": {"quiet": "3s", "maxWait": "5m"}},
        {"key": "slow/*", "limit": 1, "onNewer": "Debounce", "debounce": {"quiet": "1h", "maxWait": "2h"}}])
    for name in ("rebuild-1", "rebuild-2", "rebuild-3"):
        cq.task(name, pool="rebuilds", concurrencyKeys=["rebuild/site"], **LONG)

    for older in ("rebuild-1", "rebuild-2"):
        ended = cq.wait_phase(older, "Cancelled")
        assert finished_reason(ended) == "Superseded"
        assert ended["message"] == "superseded by newer task rebuild-3 (concurrency key rebuild/site)"
        assert not cq.jobs(older), "a superseded task never ran"
    newest = cq.wait_phase("rebuild-3", "Running")
    waited = parse_time(newest["attempts"][0]["dispatchedAt"]) - parse_time(newest["submittedAt"])
    assert waited.total_seconds() >= 3, "it started only once the key had been quiet for 3 s"

    cq.task("slow-1", pool="rebuilds", concurrencyKeys=["slow/x"], **LONG)
    status = cq.wait_status("slow-1", lambda s: any(c.get("reason") == "Debouncing" for c in s.get("conditions", [])),
                            what="slow-1 debouncing")
    assert status["phase"] == "Queued" and status["message"].startswith("debouncing key slow/x: starts at ")
    assert "unless a newer task arrives (at the latest " in status["message"]
    raw = describe("slow-1", cq.namespace, kubeconfig)
    shown = " ".join(raw.split())
    assert "debouncing key slow/x: starts at " in shown, raw
    print(raw)  # the report's excerpt
    assert not cq.jobs("slow-1")
