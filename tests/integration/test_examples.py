"""Every example in examples/ is applied to the real cluster and run by the operator, and ends as
its comments say (kopf's tests/e2e/test_examples.py in spirit); every cronoq manifest the docs
show is taken by the API server as written (tests/unit/test_docs.py checks the rest)."""
from __future__ import annotations

import json
from datetime import datetime

import yaml

from tests.support.cluster import REPO
from tests.support.tasks import TERMINAL
from tests.support.waiting import wait_until

EXPECTED = {
    "hello-world": ("Succeeded", 1),
    "flaky": ("Succeeded", 3),
    "bad-input": ("Failed", 1),
    "welcome-email-1": ("Succeeded", 1),
    "welcome-email-2": ("Succeeded", 0),
    "fetch": ("Succeeded", 1), "resize": ("Succeeded", 1), "scan": ("Succeeded", 1),
    "publish": ("Succeeded", 1), "cleanup": ("Succeeded", 1),
    "urgent": ("Succeeded", 1), "report-a": ("Succeeded", 1), "report-b": ("Succeeded", 1),
    "backfill": ("Succeeded", 1),
    "order-webhook": ("Succeeded", 2),
    "import-batch": ("Failed", 1),
    "extract": ("Succeeded", 1), "summarize": ("Succeeded", 1),
    "nightly-export": ("Succeeded", 1),
    "deploy-web-1": ("Succeeded", 1), "deploy-web-2": ("Succeeded", 1),
    "rebuild-site-1": ("Cancelled", 0), "rebuild-site-2": ("Succeeded", 1),
}


def kwok_examples() -> list[str]:
    """Every example but those of examples/real-node/, which need real containers (tests/realnode)."""
    return [str(p) for p in sorted((REPO / "examples").rglob("*.yaml")) if "real-node" not in p.parts]


def test_every_example_runs_to_its_documented_end(cq, kubectl):
    kubectl("apply", *(arg for path in kwok_examples() for arg in ("-f", path)), namespace=cq.namespace)

    def all_ended():
        statuses = {t["metadata"]["name"]: t.get("status") or {} for t in
                    cq.custom.list_namespaced_custom_object("cronoq.io", "v1alpha1", cq.namespace, "tasks")["items"]
                    if "cronoq.io/schedule" not in t["metadata"].get("labels", {})}  # schedule.yaml's: below
        return statuses if statuses and all(s.get("phase") in TERMINAL for s in statuses.values()) else None

    statuses = wait_until(all_ended, timeout=120, what="every example task ended")

    assert {n: (s["phase"], s.get("attempt", 0)) for n, s in statuses.items()} == EXPECTED
    assert statuses["hello-world"]["output"] == "hello, world"
    assert statuses["import-batch"]["attempts"][0]["rule"] == "task rule 2"
    assert statuses["welcome-email-2"]["duplicateOf"] == "welcome-email-1"
    push = statuses["order-webhook"]
    assert [(a["reason"], a.get("responseCode")) for a in push["attempts"]] == [("HTTPStatus", 503), ("Completed", 200)]
    assert push["output"] == '{"accepted":1042}'
    # The batch pool runs one at a time, highest priority first.
    started = sorted(("urgent", "report-a", "report-b", "backfill"),
                     key=lambda n: statuses[n]["attempts"][0]["startedAt"])
    assert started[0] == "urgent" and started[-1] == "backfill"
    # concurrency-keys.yaml: the two deploys of one service, in two pools, one after the other.
    first, second = sorted((statuses[n]["attempts"][0] for n in ("deploy-web-1", "deploy-web-2")),
                           key=lambda a: a["dispatchedAt"])
    assert datetime.fromisoformat(second["dispatchedAt"]) >= datetime.fromisoformat(first["finishedAt"]), \
        (first, second)
    # ... and the debounced rebuilds: only the newer ran.
    assert statuses["rebuild-site-1"]["message"] == \
        "superseded by newer task rebuild-site-2 (concurrency key rebuild/site)"
    dependency_order = [statuses[n]["attempts"][0]["startedAt"] for n in ("fetch", "resize", "publish")]
    assert dependency_order == sorted(dependency_order)
    # inputs/: summarize's pod received extract's output, parsed (docs/inputs.md).
    job = cq.batch.read_namespaced_job(statuses["summarize"]["attempts"][0]["job"], cq.namespace)
    env = {e.name: e.value for e in job.spec.template.spec.containers[0].env}
    assert json.loads(env["CRONOQ_INPUTS"]) == {"extract": {"phase": "Succeeded", "output": {"rows": 12}}}
    assert statuses["summarize"]["output"] == "12 rows summarized"


def test_the_example_schedule_fires_and_its_task_succeeds(cq, kubectl):
    kubectl("apply", "-f", str(REPO / "examples" / "pool.yaml"), "-f", str(REPO / "examples" / "schedule.yaml"),
            namespace=cq.namespace)

    def succeeded():
        tasks = cq.custom.list_namespaced_custom_object("cronoq.io", "v1alpha1", cq.namespace, "tasks",
                                                        label_selector="cronoq.io/schedule=report")["items"]
        return [t for t in tasks if (t.get("status") or {}).get("phase") == "Succeeded"]

    # every: 10s, then the Job's pod on kwok: seconds on a quiet machine, past a minute at a load of 16 (issue 52 item 7)
    (task, *_) = wait_until(succeeded, timeout=180, what="a report Task succeeded")
    assert task["metadata"]["name"] == f"report-{task['metadata']['labels']['cronoq.io/fire-time']}"
    assert task["metadata"]["labels"]["app"] == "report" and task["status"]["output"] == "report done"
    schedule = cq.custom.get_namespaced_custom_object("cronoq.io", "v1alpha1", cq.namespace, "taskschedules", "report")
    assert schedule["status"]["lastFireTime"] and schedule["status"]["schedule"] == "every 10s"


def test_the_api_server_takes_every_manifest_the_docs_show(cq, kubectl):
    """A server-side dry run of each Task, TaskPool and TaskSchedule of docs/ and the README: the
    CRD's schema and CEL rules judge them, nothing is created."""
    from tests.unit.test_docs import examples

    manifests = [doc for _, code in examples("yaml") for doc in yaml.safe_load_all(code)
                 if isinstance(doc, dict) and doc.get("apiVersion") == "cronoq.io/v1alpha1"]
    assert len(manifests) >= 4
    done = kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(manifests), namespace=cq.namespace)
    assert done.stdout.count("(server dry run)") == len(manifests), done.stdout
