"""The Job of one attempt (DESIGN §2): deterministic name, owned by the Task, labelled with the
fencing token, backoffLimit 0 / restartPolicy Never, the CRONOQ_* environment, and pod settings
layered task fields > task template > pool template.

The golden file tests/unit/data/job-golden.yaml is one representative Job. After an intended
change to the Job cronoq builds, regenerate it and review the diff:

    CRONOQ_UPDATE_GOLDEN=1 .venv/bin/pytest -q tests/unit/engine/test_jobs.py -k golden
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, strategies as st

from cronoq.api import TaskPoolSpec
from cronoq.engine import naming
from cronoq.engine.jobs import TaskServiceAccount, build_job
from cronoq.engine.naming import MAX_JOB_NAME, job_name, lease_id

from tests.unit.builders import make_task

GOLDEN = Path(__file__).parents[1] / "data" / "job-golden.yaml"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def pool(**spec: Any) -> TaskPoolSpec:
    return TaskPoolSpec.model_validate({"template": spec})


def pod_spec(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["template"]["spec"]


def task_container(job: dict[str, Any]) -> dict[str, Any]:
    containers = pod_spec(job)["containers"]
    return next((c for c in containers if c["name"] == "task"), containers[0])


def env(job: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in task_container(job)["env"]}


def test_with_tracing_on_the_attempt_spans_traceparent_replaces_the_templates() -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    task = make_task("t").spec(env=[{"name": "TRACEPARENT", "value": "stale"}, {"name": "A", "value": "1"}]).obj()
    traced = build_job(task, None, 1, "e1-a1", traceparent=parent)
    assert [e["value"] for e in task_container(traced)["env"] if e["name"] == "TRACEPARENT"] == [parent]
    assert env(traced)["A"] == "1"
    untraced = build_job(task, None, 1, "e1-a1")
    assert env(untraced)["TRACEPARENT"] == "stale"  # tracing off: nothing of cronoq's


# --- names ------------------------------------------------------------------------------------------

def test_job_name_is_task_and_attempt() -> None:
    assert job_name("report", 1) == "report-a1"
    assert job_name("report", 100) == "report-a100"
    assert lease_id(7, 3) == "e7-a3"


task_names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)


@given(name=task_names, attempt=st.integers(1, 100))
def test_job_names_are_dns_labels_ending_in_the_attempt(name: str, attempt: int) -> None:
    job = job_name(name, attempt)
    assert len(job) <= MAX_JOB_NAME and DNS_LABEL.match(job), job
    assert job.endswith(f"-a{attempt}")
    assert job == job_name(name, attempt)  # deterministic


@given(name=task_names, a=st.integers(1, 100), b=st.integers(1, 100))
def test_attempts_of_one_task_get_different_job_names(name: str, a: int, b: int) -> None:
    assert (job_name(name, a) == job_name(name, b)) == (a == b)


def test_long_task_names_are_hashed_and_stay_distinct() -> None:
    one, two = "x" * 55 + "-one", "x" * 55 + "-two"
    assert job_name(one, 1) != job_name(two, 1)
    assert len(job_name(one, 100)) <= MAX_JOB_NAME
    assert job_name("n" * 63, 1).startswith("n" * 20)  # a readable prefix survives
    assert job_name("a" * 54, 1) == "a" * 54 + "-a1"  # fits: no hash
    # The Job controller's pod name `<job>-xxxxx` must stay whole (63 characters at most).
    assert len(job_name("a" * 55, 1)) == MAX_JOB_NAME and len(job_name("b" * 56, 100)) == MAX_JOB_NAME


def test_a_prefix_cut_at_a_dash_does_not_end_in_a_double_dash() -> None:
    name = "a" * 48 + "-" + "b" * 14
    assert "--" not in job_name(name, 100) and DNS_LABEL.match(job_name(name, 100))


# --- what every attempt's Job carries ----------------------------------------------------------------------

def test_job_identity_owner_and_labels() -> None:
    task = make_task("report", "team").pool("batch").uid("3f2a").obj()
    job = build_job(task, None, 2, "e5-a2")
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    assert job["metadata"]["name"] == "report-a2" and job["metadata"]["namespace"] == "team"
    assert job["metadata"]["ownerReferences"] == [{
        "apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "name": "report", "uid": "3f2a",
        "controller": True, "blockOwnerDeletion": True}]
    labels = {"cronoq.io/task-uid": "3f2a", "cronoq.io/task": "report", "cronoq.io/attempt": "2",
              "cronoq.io/lease-id": "e5-a2", "cronoq.io/pool": "batch"}
    assert job["metadata"]["labels"] == labels
    assert labels.items() <= job["spec"]["template"]["metadata"]["labels"].items()


def test_the_job_controller_never_retries_and_the_pod_never_restarts() -> None:
    job = build_job(make_task().obj(), None, 1, "e1-a1")
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["completions"] == 1 and job["spec"]["parallelism"] == 1
    assert pod_spec(job)["restartPolicy"] == "Never"


def test_restart_policy_is_never_even_if_the_template_says_otherwise() -> None:
    task = make_task().spec(template={"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "task"}]}}).obj()
    assert pod_spec(build_job(task, None, 1, "e1-a1"))["restartPolicy"] == "Never"


def test_fencing_environment() -> None:
    task = make_task("report").uid("3f2a").spec(payload={"customer": 7, "items": ["a", "é"]}).obj()
    values = env(build_job(task, None, 3, "e9-a3"))
    assert values["CRONOQ_TASK_ID"] == "3f2a"
    assert values["CRONOQ_ATTEMPT"] == "3"
    assert values["CRONOQ_LEASE_NAME"] == naming.lease_name("report", 3) == "report-a3"
    assert values["CRONOQ_LEASE_ID"] == "e9-a3"
    assert json.loads(values["CRONOQ_PAYLOAD"]) == {"customer": 7, "items": ["a", "é"]}


@pytest.mark.parametrize("payload", [None, 0, "text", [1, 2], {"nested": {"deep": [True, None]}}])
def test_payload_is_json_of_the_tasks_payload(payload: Any) -> None:
    values = env(build_job(make_task().spec(payload=payload).obj(), None, 1, "e1-a1"))
    assert json.loads(values["CRONOQ_PAYLOAD"]) == payload


def test_a_template_cannot_set_the_operators_environment() -> None:
    task = make_task().spec(template={"spec": {"containers": [{"name": "task", "env": [
        {"name": "CRONOQ_ATTEMPT", "value": "99"}, {"name": "KEEP", "value": "me"}]}]}}).obj()
    job = build_job(task, None, 2, "e1-a2")
    names = [e["name"] for e in task_container(job)["env"]]
    assert names.count("CRONOQ_ATTEMPT") == 1 and env(job)["CRONOQ_ATTEMPT"] == "2"
    assert env(job)["KEEP"] == "me"


def test_every_value_is_a_string_where_kubernetes_wants_one() -> None:
    job = build_job(make_task().spec(payload=5).obj(), None, 4, "e1-a4")
    for entry in task_container(job)["env"]:
        assert isinstance(entry.get("value", ""), str)
    assert all(isinstance(v, str) for v in job["metadata"]["labels"].values())


# --- layering: task fields > task template > pool template -----------------------------------------------

POOL = pool(image="pool/image:1", command=["pool-cmd"], args=["pool-arg"], serviceAccountName="pool-sa",
            priorityClassName="pool-pc", nodeSelector={"zone": "pool", "disk": "pool"},
            env=[{"name": "A", "value": "pool"}, {"name": "B", "value": "pool"}, {"name": "C", "value": "pool"}],
            resources={"limits": {"memory": "1Gi"}}, tolerations=[{"key": "pool", "operator": "Exists"}],
            podMetadata={"labels": {"l1": "pool", "l2": "pool", "l3": "pool"},
                         "annotations": {"n1": "pool", "n2": "pool", "n3": "pool"}})
TEMPLATE = {
    "metadata": {"labels": {"l1": "template", "l2": "template"}, "annotations": {"n1": "template", "n2": "template"}},
    "spec": {
        "serviceAccountName": "template-sa", "nodeSelector": {"zone": "template", "gpu": "template"},
        "tolerations": [{"key": "template", "operator": "Exists"}],
        "containers": [{"name": "task", "image": "template/image:1", "args": ["template-arg"],
                        "env": [{"name": "A", "value": "template"}, {"name": "B", "value": "template"}]}],
    },
}


def layered(**task_fields: Any) -> dict[str, Any]:
    """A Job from all three layers: POOL, the task's TEMPLATE, and `task_fields`."""
    return build_job(make_task().unset("image").spec(template=TEMPLATE, **task_fields).obj(), POOL, 1, "e1-a1")


def test_the_pool_fills_what_the_task_and_its_template_leave_unset() -> None:
    job = layered()
    container = task_container(job)
    assert container["image"] == "template/image:1"  # template over pool
    assert container["command"] == ["pool-cmd"]  # only the pool says
    assert container["args"] == ["template-arg"]
    assert container["resources"] == {"limits": {"memory": "1Gi"}}
    assert pod_spec(job)["serviceAccountName"] == "template-sa"
    assert pod_spec(job)["priorityClassName"] == "pool-pc"
    assert pod_spec(job)["nodeSelector"] == {"zone": "template", "gpu": "template", "disk": "pool"}
    assert {t["key"] for t in pod_spec(job)["tolerations"]} == {"pool", "template"}
    assert {k: v for k, v in env(job).items() if not k.startswith("CRONOQ_")} == {
        "A": "template", "B": "template", "C": "pool"}


def test_pods_that_name_no_service_account_get_the_operators_task_service_account() -> None:
    """Issue 26, point 2: the chart's task ServiceAccount holds the lease role, so the namespace's
    `default` need not; a ServiceAccount named anywhere (task, its template, its pool) wins."""
    def account(task_spec: dict[str, Any], pool_spec: TaskPoolSpec | None = None) -> str | None:
        job = build_job(make_task().spec(**task_spec).obj(), pool_spec, 1, "e1-a1", service_account="cronoq-task")
        return pod_spec(job).get("serviceAccountName")

    assert account({}) == "cronoq-task"
    assert account({}, pool(image="p:1")) == "cronoq-task"
    assert account({"serviceAccountName": "mine"}) == "mine"
    assert account({}, pool(serviceAccountName="pools")) == "pools"
    assert account({"template": {"spec": {"serviceAccountName": "templates", "containers": [{"name": "task"}]}}}) == \
        "templates"
    deprecated = build_job(make_task().spec(template={"spec": {"serviceAccount": "old", "containers": []}}).obj(),
                           None, 1, "e1-a1", service_account="cronoq-task")
    assert pod_spec(deprecated).get("serviceAccountName") is None  # the API server copies serviceAccount over
    assert "serviceAccountName" not in pod_spec(build_job(make_task().obj(), None, 1, "e1-a1"))


def test_the_task_service_account_applies_only_where_it_exists() -> None:
    everywhere, some = TaskServiceAccount("cronoq-task"), TaskServiceAccount("cronoq-task", frozenset({"jobs"}))
    assert (everywhere.in_namespace("any"), some.in_namespace("jobs"), some.in_namespace("other")) == \
        ("cronoq-task", "cronoq-task", None)
    assert TaskServiceAccount().in_namespace("jobs") is None


def test_the_tasks_own_fields_win_over_both_templates() -> None:
    job = layered(image="task/image:1", command=["task-cmd"], args=["task-arg"], serviceAccountName="task-sa",
                  priorityClassName="task-pc", nodeSelector={"zone": "task"},
                  env=[{"name": "A", "value": "task"}], resources={"limits": {"memory": "2Gi"}},
                  tolerations=[{"key": "task", "operator": "Exists"}])
    container = task_container(job)
    assert (container["image"], container["command"], container["args"]) == ("task/image:1", ["task-cmd"], ["task-arg"])
    assert container["resources"] == {"limits": {"memory": "2Gi"}}
    assert pod_spec(job)["serviceAccountName"] == "task-sa" and pod_spec(job)["priorityClassName"] == "task-pc"
    assert pod_spec(job)["nodeSelector"] == {"zone": "task", "gpu": "template", "disk": "pool"}
    assert {t["key"] for t in pod_spec(job)["tolerations"]} == {"pool", "template", "task"}
    user_env = [e["name"] for e in container["env"] if not e["name"].startswith("CRONOQ_")]
    assert sorted(user_env) == ["A", "B", "C"]  # merged by name: one entry each
    assert {k: v for k, v in env(job).items() if not k.startswith("CRONOQ_")} == {
        "A": "task", "B": "template", "C": "pool"}


def test_pod_labels_and_annotations_follow_the_same_precedence() -> None:
    job = layered(podMetadata={"labels": {"l1": "task"}, "annotations": {"n1": "task"}})
    meta = job["spec"]["template"]["metadata"]
    assert {k: meta["labels"][k] for k in ("l1", "l2", "l3")} == {"l1": "task", "l2": "template", "l3": "pool"}
    assert meta["annotations"] == {"n1": "task", "n2": "template", "n3": "pool"}


def test_cronoq_labels_win_over_user_labels() -> None:
    task = make_task("real").uid("u-1").spec(podMetadata={"labels": {"cronoq.io/task": "fake",
                                                                     "cronoq.io/attempt": "9"}}).obj()
    labels = build_job(task, None, 1, "e1-a1")["spec"]["template"]["metadata"]["labels"]
    assert labels["cronoq.io/task"] == "real" and labels["cronoq.io/attempt"] == "1"


def test_the_container_named_task_runs_the_task_in_a_full_template() -> None:
    task = make_task().spec(image="worker:2", template={"spec": {"containers": [
        {"name": "proxy", "image": "envoy:1"}, {"name": "task"}, {"name": "logger", "image": "fluent:1"}]}}).obj()
    job = build_job(task, pool(image="pool:1"), 1, "e1-a1")
    containers = {c["name"]: c for c in pod_spec(job)["containers"]}
    assert [c["name"] for c in pod_spec(job)["containers"]] == ["proxy", "task", "logger"]
    assert containers["task"]["image"] == "worker:2"
    assert "CRONOQ_ATTEMPT" in {e["name"] for e in containers["task"]["env"]}
    for sidecar in ("proxy", "logger"):
        assert "env" not in containers[sidecar]
    assert containers["proxy"]["image"] == "envoy:1" and containers["logger"]["image"] == "fluent:1"


def test_without_a_task_container_the_first_container_runs_the_task() -> None:
    task = make_task().spec(image="worker:2", template={"spec": {"containers": [
        {"name": "main"}, {"name": "side", "image": "side:1"}]}}).obj()
    containers = pod_spec(build_job(task, None, 1, "e1-a1"))["containers"]
    assert containers[0]["image"] == "worker:2" and "env" in containers[0]
    assert containers[1] == {"name": "side", "image": "side:1"}


def test_without_a_template_the_job_has_one_task_container() -> None:
    job = build_job(make_task().spec(image="worker:3", args=["--fast"]).obj(), None, 1, "e1-a1")
    (container,) = pod_spec(job)["containers"]
    assert container["name"] == "task" and container["image"] == "worker:3" and container["args"] == ["--fast"]


def test_the_rest_of_a_full_template_passes_through() -> None:
    spec = {"volumes": [{"name": "scratch", "emptyDir": {}}], "securityContext": {"runAsNonRoot": True},
            "containers": [{"name": "task", "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}]}
    job = build_job(make_task().spec(template={"spec": spec}).obj(), None, 1, "e1-a1")
    assert pod_spec(job)["volumes"] == spec["volumes"]
    assert pod_spec(job)["securityContext"] == {"runAsNonRoot": True}
    assert task_container(job)["volumeMounts"] == spec["containers"][0]["volumeMounts"]


def test_building_a_job_does_not_change_the_task_and_repeats_exactly() -> None:
    task = make_task().spec(template=TEMPLATE, env=[{"name": "A", "value": "task"}]).obj()
    before = task.model_dump()
    first = build_job(task, POOL, 1, "e1-a1")
    assert build_job(task, POOL, 1, "e1-a1") == first
    assert task.model_dump() == before


def test_every_attempt_differs_only_in_its_identity() -> None:
    task = make_task().obj()
    one, two = build_job(task, None, 1, "e1-a1"), build_job(task, None, 2, "e1-a2")
    assert one["metadata"]["name"] != two["metadata"]["name"]
    strip = lambda job: json.dumps(job, sort_keys=True).replace("-a1", "-aN").replace("-a2", "-aN").replace(  # noqa: E731
        '"1"', '"N"').replace('"2"', '"N"')
    assert strip(one) == strip(two)


# --- golden -----------------------------------------------------------------------------------------------

def golden_job() -> dict[str, Any]:
    pool_spec = pool(
        image="ghcr.io/acme/worker:1.4", serviceAccountName="batch-runner",
        resources={"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
        nodeSelector={"node-pool": "batch"}, tolerations=[{"key": "batch", "operator": "Exists", "effect": "NoSchedule"}],
        env=[{"name": "LOG_LEVEL", "value": "info"}, {"name": "REGION", "value": "eu-west-1"}],
        podMetadata={"labels": {"team": "billing"}, "annotations": {"kwok.cronoq.io/exit-code": "0"}})
    task = (make_task("nightly-invoices", "billing").unset("image").pool("batch").uid("9b1f0c2e-4d1a-4b7e-a0c3-1f2e3d4c5b6a")
            .spec(command=["python", "-m", "invoices"], args=["--date", "2025-03-01"],
                  env=[{"name": "LOG_LEVEL", "value": "debug"}],
                  payload={"customers": [17, 42], "dryRun": False, "note": "für Q1"},
                  podMetadata={"labels": {"app": "invoices"}},
                  template={"spec": {
                      "volumes": [{"name": "scratch", "emptyDir": {}}],
                      "containers": [
                          {"name": "task", "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]},
                          {"name": "heartbeat", "image": "ghcr.io/acme/cronoq-heartbeat:0.1"}]}})
            .obj())
    return build_job(task, pool_spec, 2, "e3-a2")


def test_golden_job() -> None:
    job = golden_job()
    if os.environ.get("CRONOQ_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text("# Generated by tests/unit/engine/test_jobs.py (see its docstring to regenerate).\n"
                          + yaml.safe_dump(job, sort_keys=False, allow_unicode=True))
    assert yaml.safe_load(GOLDEN.read_text()) == job
