"""Shares by who submitted (issue 54, item 1), against the real control plane with real identities:
two tenants submit as two ServiceAccounts (bound tokens from `kubectl create token`, as the chart's
tests do), into one pool that shares by submitter; the chart's submitter policy (the guard and the
stamp, rendered from the chart) records who created each task. The gaming tenant spreads its tasks
over 30 group names and raises their priority while they wait; the admitted counts stay equal. The
same two backlogs in a pool without fairShare (the default order, kept) go to the gamer.

The attempts run until the test ends them (kwok plays a 10-minute task), so which slot frees when
is the test's doing, not a timer's: a cancelled attempt's slot goes back to the tenant holding fewer."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.chart.chart import CHART
from tests.chart.identity import as_service_account
from tests.support.cluster import Kubectl
from tests.support.tasks import GROUP, VERSION
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

SUBMITTER = "cronoq.io/submitter"
RELEASE = "shares"
LONG = {"kwok.cronoq.io/outcome": "Succeed", "kwok.cronoq.io/delay": "10m"}


@pytest.fixture(scope="module")
def submitter_policy(devcluster, kubectl, crds):
    """The chart's submitter policy (guard and stamp), rendered and applied; removed afterwards."""
    helm = str(devcluster.STATE / "bin" / "helm")
    rendered = subprocess.run([helm, "template", RELEASE, str(CHART), "--namespace=cronoq-system",
                               "--show-only=templates/submitter-policy.yaml", "--set=submitterPolicy.stamp=true"],
                              check=True, capture_output=True, text=True).stdout
    kubectl("apply", "-f", "-", input=rendered)
    yield rendered
    kubectl("delete", "-f", "-", "--ignore-not-found", input=rendered, check=False)


def tenant(kubectl: Kubectl, namespace: str, name: str, path: Path) -> Kubectl:
    """kubectl as ServiceAccount `name` of the namespace, allowed to write Tasks and read pools."""
    kubectl("create", "serviceaccount", name, namespace=namespace)
    kubectl("create", "role", f"{name}-tasks", "--verb=get,list,watch,create,update,patch,delete",
            "--resource=tasks.cronoq.io,taskpools.cronoq.io", namespace=namespace)
    kubectl("create", "rolebinding", f"{name}-tasks", f"--role={name}-tasks",
            f"--serviceaccount={namespace}:{name}", namespace=namespace)
    return as_service_account(kubectl, namespace, name, path)


def task(name: str, pool: str, **spec) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": name},
            "spec": {"pool": pool, **spec}}


def create(as_tenant: Kubectl, namespace: str, *tasks: dict) -> subprocess.CompletedProcess:
    body = {"apiVersion": "v1", "kind": "List", "items": list(tasks)}
    return as_tenant("create", "-f", "-", input=json.dumps(body), namespace=namespace, check=False)


def shared_pool(name: str, concurrency: int, **spec) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TaskPool", "metadata": {"name": name},
            "spec": {"concurrency": concurrency, "paused": True, "leaseTTL": "0s",
                     "template": {"image": "example.invalid/work:1", "podMetadata": {"annotations": LONG}}, **spec}}


def running_by_submitter(cq, pool: str) -> Counter[str]:
    items = cq.custom.list_namespaced_custom_object(GROUP, VERSION, cq.namespace, "tasks")["items"]
    return Counter(t["metadata"].get("annotations", {}).get(SUBMITTER, "") for t in items
                   if t["spec"].get("pool") == pool and (t.get("status") or {}).get("phase") == "Running")


def backlogs(gamer: Kubectl, honest: Kubectl, namespace: str, pool: str, count: int = 30) -> None:
    """The gamer's tasks over `count` group names at priority 100; the honest tenant's in one group."""
    made = create(gamer, namespace, *(task(f"{pool}-g{i}", pool, group=f"name-{i}", priority=100)
                                      for i in range(count)))
    assert made.returncode == 0, made.stderr
    made = create(honest, namespace, *(task(f"{pool}-h{i}", pool, group="team-h") for i in range(count)))
    assert made.returncode == 0, made.stderr


def open_pool(cq, pool: str) -> None:
    cq.custom.patch_namespaced_custom_object(GROUP, VERSION, cq.namespace, "taskpools", pool,
                                             {"spec": {"paused": False}})


def test_two_tenants_get_equal_shares_whatever_groups_and_priorities_the_gamer_writes(
        cq, kubectl, kubeconfig, submitter_policy, tmp_path):
    namespace = cq.namespace
    gamer = tenant(kubectl, namespace, "gamer", tmp_path / "gamer.kubeconfig")
    honest = tenant(kubectl, namespace, "honest", tmp_path / "honest.kubeconfig")
    g_user, h_user = f"system:serviceaccount:{namespace}:gamer", f"system:serviceaccount:{namespace}:honest"
    # A fresh policy takes a moment to be enforced: wait until the stamp is seen.
    probes = itertools.count()

    def stamped() -> str | None:
        name = f"probe-{next(probes)}"
        made = create(gamer, namespace, task(name, "nowhere"))
        assert made.returncode == 0, made.stderr
        got = cq.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "tasks", name)
        return got["metadata"].get("annotations", {}).get(SUBMITTER)

    assert wait_until(stamped, timeout=30, interval=1, what="the submitter stamp enforced") == g_user

    cq.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "taskpools", shared_pool(
        "shared", 10, fairShare={"by": "Submitter"}))
    cq.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "taskpools", shared_pool(
        "plain", 10))  # the default order, for the before
    for pool in ("shared", "plain"):
        backlogs(gamer, honest, namespace, pool)
    # The gamer raises its queued tasks' priority further while they wait (a producer may).
    for i in range(0, 30, 3):
        raised = gamer("patch", "task", f"shared-g{i}", "--type=merge", "-p", '{"spec":{"priority":1000000}}',
                       namespace=namespace, check=False)
        assert raised.returncode == 0, raised.stderr

    for pool in ("shared", "plain"):
        open_pool(cq, pool)
    full = {pool: wait_until(lambda p=pool: (c := running_by_submitter(cq, p)) and sum(c.values()) == 10 and c,
                             timeout=120, what=f"pool {pool} full") for pool in ("shared", "plain")}
    assert full["plain"] == {g_user: 10}, "before: 30 group names at a higher priority take every slot"
    assert full["shared"] == {g_user: 5, h_user: 5}, "after: each submitter holds its share"

    # Three of the honest tenant's attempts end: their slots go back to it, not to the raised ones.
    running = [t["metadata"]["name"] for t in cq.custom.list_namespaced_custom_object(
        GROUP, VERSION, namespace, "tasks")["items"]
               if t["spec"]["pool"] == "shared" and (t.get("status") or {}).get("phase") == "Running"]
    for name in [n for n in running if "-h" in n][:3]:
        ended = honest("patch", "task", name, "--type=merge", "-p", '{"spec":{"cancel":true}}', namespace=namespace,
                       check=False)
        assert ended.returncode == 0, ended.stderr
    again = wait_until(lambda: (c := running_by_submitter(cq, "shared")) and sum(c.values()) == 10 and
                       c[h_user] == 5 and c, timeout=120, what="the honest tenant's slots back to it")
    assert again == {g_user: 5, h_user: 5}

    # What a waiting task of the gamer says (status and describe).
    waiting = cq.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "tasks", "shared-g29")
    assert waiting["status"]["phase"] == "Queued"
    assert waiting["status"]["message"] == f"queued in pool shared, in the share of submitter {g_user} (weight 1)"
    expected = (f"pool shared is full: 10 running of 10; submitter {g_user} has 5 running of its share of 5 "
                "(weight 1 of 2 among the submitters with tasks running or queued)")
    shown: list[str] = []

    def describe() -> bool:
        # describe reads the running count from the pool's status, which the operator writes a
        # moment after the slots change (under load, seconds after): look until it has caught up.
        described = subprocess.run([sys.executable, "-m", "cronoq", "describe", "shared-g29", "-n", namespace,
                                    "--kubeconfig", kubeconfig], capture_output=True, text=True, timeout=120,
                                   env={**os.environ, "COLUMNS": "250"})
        assert described.returncode == 0, described.stderr
        shown.append(described.stdout)
        return expected in " ".join(described.stdout.split())

    assert wait_until(describe, timeout=60, interval=2, what="describe naming the full pool and the share"), shown[-1]
    print(shown[-1])  # the report's excerpt


def test_weights_split_a_pool_two_to_one(cq, kubectl, submitter_policy, tmp_path):
    namespace = cq.namespace
    gamer = tenant(kubectl, namespace, "gamer", tmp_path / "gamer.kubeconfig")
    honest = tenant(kubectl, namespace, "honest", tmp_path / "honest.kubeconfig")
    g_user, h_user = f"system:serviceaccount:{namespace}:gamer", f"system:serviceaccount:{namespace}:honest"
    cq.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "taskpools", shared_pool(
        "weighted", 9, fairShare={"by": "Submitter", "weights": {h_user: 2}}))
    wait_until(lambda: refused_forgery(gamer, namespace, h_user), timeout=30, interval=1,
               what="the submitter guard enforced")
    backlogs(gamer, honest, namespace, "weighted", count=20)
    open_pool(cq, "weighted")
    full = wait_until(lambda: (c := running_by_submitter(cq, "weighted")) and sum(c.values()) == 9 and c,
                      timeout=120, what="pool weighted full")
    assert full == {h_user: 6, g_user: 3}


def refused_forgery(as_tenant: Kubectl, namespace: str, other: str) -> subprocess.CompletedProcess | None:
    """The guard's refusal of a task `as_tenant` creates in `other`'s name (None while not enforced)."""
    forged = task(f"forged-{uuid.uuid4().hex[:6]}", "nowhere")
    forged["metadata"]["annotations"] = {SUBMITTER: other}
    result = create(as_tenant, namespace, forged)
    return result if result.returncode != 0 and "cronoq submitter policy" in result.stderr else None


def test_a_forged_or_changed_submitter_is_refused_naming_the_field(cq, kubectl, submitter_policy, tmp_path):
    namespace = cq.namespace
    gamer = tenant(kubectl, namespace, "gamer", tmp_path / "gamer.kubeconfig")
    g_user, h_user = f"system:serviceaccount:{namespace}:gamer", f"system:serviceaccount:{namespace}:honest"
    result = wait_until(lambda: refused_forgery(gamer, namespace, h_user), timeout=30, interval=1,
                        what="the submitter guard enforced")
    assert f"metadata.annotations[{SUBMITTER}]" in result.stderr and f"is who creates it, {g_user}, not {h_user}" \
        in result.stderr, result.stderr

    own = task("own", "p")
    own["metadata"]["annotations"] = {SUBMITTER: g_user}  # its own name: allowed
    assert create(gamer, namespace, own).returncode == 0
    changed = gamer("annotate", "task", "own", f"{SUBMITTER}={h_user}", "--overwrite", namespace=namespace,
                    check=False)
    assert changed.returncode != 0 and f"metadata.annotations[{SUBMITTER}]" in changed.stderr \
        and "never changes" in changed.stderr, changed.stderr
    dropped = gamer("annotate", "task", "own", f"{SUBMITTER}-", namespace=namespace, check=False)
    stored = cq.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "tasks", "own")
    assert stored["metadata"]["annotations"][SUBMITTER] == g_user, (dropped.stdout, dropped.stderr)
