"""The API server itself refuses what must never happen, with errors that name the field.

Every check here runs against the real kube-apiserver with crds/ installed: OpenAPI bounds,
patterns and CEL rules (including transition rules on spec and status), printer columns,
`kubectl explain`, and the examples in examples/."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cronoq.api import RetryOverride, Task, TaskPool, TaskSchedule

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("crds")]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MODELS = {"Task": Task, "TaskPool": TaskPool, "TaskSchedule": TaskSchedule}


def task(name: str = "t", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": name},
            "spec": {"image": "busybox:1.36", **spec}}


def http_task(name: str = "h", **http: Any) -> dict[str, Any]:
    """A push task: `http` and no container."""
    return {"apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": name},
            "spec": {"http": {"url": "https://hooks.example.com/orders", **http}}}


HOOK = {"url": "https://hooks.example.com/orders"}


def pool(name: str = "p", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "cronoq.io/v1alpha1", "kind": "TaskPool", "metadata": {"name": name}, "spec": spec}


def with_name(obj: dict[str, Any], name: str) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"]["name"] = name
    return obj


def create(kubectl, namespace: str, obj: dict[str, Any]):
    return kubectl("create", "-f", "-", input=json.dumps(obj), check=False, namespace=namespace)


def apply(kubectl, namespace: str, obj: dict[str, Any]):
    """Server-side apply by one field manager, so later applies change values, not owners."""
    return kubectl("apply", "--server-side", "-f", "-", input=json.dumps(obj), check=False, namespace=namespace)


def patch_status(kubectl, namespace: str, name: str, status: dict[str, Any]):
    return kubectl("patch", "task", name, "--subresource=status", "--type=merge",
                   "-p", json.dumps({"status": status}), check=False, namespace=namespace)


def refused(result, *words: str) -> None:
    assert result.returncode != 0, f"accepted, but should have been refused: {result.stdout}"
    for word in words:
        assert word in result.stderr, f"{word!r} not in the error:\n{result.stderr}"


# --- bad manifests on create ---------------------------------------------------------------------

BAD = [
    ("priority too high", task(priority=10_000_000), ["spec.priority", "less than or equal to 1000000"]),
    ("priority too low", task(priority=-10_000_000), ["spec.priority", "greater than or equal to -1000000"]),
    ("group not a label value", task(group="acme corp"), ["spec.group", "should match"]),
    ("group too long", task(group="t" * 64), ["spec.group", "63"]),
    ("group cap of 0", pool(groupConcurrency=0), ["spec.groupConcurrency", "greater than or equal to 1"]),
    ("concurrency key with a space", task(concurrencyKeys=["deploy x"]), ["spec.concurrencyKeys[0]", "should match"]),
    ("concurrency key twice", task(concurrencyKeys=["a", "a"]), ["spec.concurrencyKeys[1]", "Duplicate value"]),
    ("9 concurrency keys", task(concurrencyKeys=[f"k{i}" for i in range(9)]), ["spec.concurrencyKeys", "at most 8"]),
    ("key limit below 0", pool(concurrencyKeyLimits=[{"key": "deploy/x", "limit": -1}]),
     ["spec.concurrencyKeyLimits[0].limit", "greater than or equal to 0"]),
    ("key limit for a star inside", pool(concurrencyKeyLimits=[{"key": "a*b", "limit": 1}]),
     ["spec.concurrencyKeyLimits[0].key", "should match"]),
    ("key policy unknown", pool(concurrencyKeyLimits=[{"key": "a", "limit": 1, "onNewer": "Replace"}]),
     ["spec.concurrencyKeyLimits[0].onNewer", "Unsupported value"]),
    ("key limit declared twice", pool(concurrencyKeyLimits=[{"key": "a", "limit": 1}, {"key": "a", "limit": 2}]),
     ["spec.concurrencyKeyLimits[1]", "Duplicate value"]),
    ("debounce without its settings", pool(concurrencyKeyLimits=[{"key": "a", "limit": 1, "onNewer": "Debounce"}]),
     ["spec.concurrencyKeyLimits[0].debounce", "required with onNewer Debounce"]),
    ("debounce settings without the policy", pool(concurrencyKeyLimits=[
        {"key": "a", "limit": 1, "onNewer": "SupersedeQueued", "debounce": {"quiet": "1s", "maxWait": "1m"}}]),
     ["spec.concurrencyKeyLimits[0].debounce", "only with onNewer Debounce"]),
    ("debounce maxWait under quiet", pool(concurrencyKeyLimits=[
        {"key": "a", "limit": 1, "onNewer": "Debounce", "debounce": {"quiet": "1m", "maxWait": "30s"}}]),
     ["spec.concurrencyKeyLimits[0].debounce.maxWait", "at least debounce.quiet"]),
    ("debounce quiet over a day", pool(concurrencyKeyLimits=[
        {"key": "a", "limit": 1, "onNewer": "Debounce", "debounce": {"quiet": "25h", "maxWait": "48h"}}]),
     ["spec.concurrencyKeyLimits[0].debounce.quiet", "between 1s and 24h"]),
    ("fair share by nothing", pool(fairShare={"weights": {"a": 2}}), ["spec.fairShare.by", "Required value"]),
    ("fair share by tenant", pool(fairShare={"by": "Tenant"}), ["spec.fairShare.by", "Unsupported value"]),
    ("fair share weight 0", pool(fairShare={"by": "Submitter", "weights": {"alice": 0}}),
     ["spec.fairShare.weights.alice", "greater than or equal to 1"]),
    ("fair share weight over 1000", pool(fairShare={"by": "Group", "defaultWeight": 1001}),
     ["spec.fairShare.defaultWeight", "less than or equal to 1000"]),
    ("fair share key too long", pool(fairShare={"by": "Submitter", "weights": {"u" * 513: 2}}),
     ["spec.fairShare.weights", "1 to 512 characters"]),
    ("fair share half-life too short", pool(fairShare={"by": "Submitter", "usageHalfLife": "30s"}),
     ["spec.fairShare.usageHalfLife", "between 1m and 168h"]),
    ("fair share of 257 weights", pool(fairShare={"by": "Group", "weights": {f"g{i}": 1 for i in range(257)}}),
     ["spec.fairShare.weights", "256"]),
    ("no attempts", task(retry={"maxAttempts": 0}), ["spec.retry.maxAttempts"]),
    ("too many attempts", task(retry={"maxAttempts": 1000}), ["spec.retry.maxAttempts"]),
    ("shrinking backoff", task(retry={"multiplier": 0.5}), ["spec.retry.multiplier"]),
    ("fractional duration", task(retry={"initialBackoff": "1.5s"}), ["spec.retry.initialBackoff", "should match"]),
    ("duration without unit", task(retry={"initialBackoff": "30"}), ["spec.retry.initialBackoff", "should match"]),
    ("duration in days", task(retry={"maxBackoff": "2d"}), ["spec.retry.maxBackoff", "should match"]),
    ("backoff over a day", task(retry={"initialBackoff": "25h"}), ["spec.retry.initialBackoff", "between 0s and 24h"]),
    ("max below initial", task(retry={"initialBackoff": "1m30s", "maxBackoff": "1m"}),
     ["spec.retry.maxBackoff", "at least initialBackoff"]),
    ("unknown jitter", task(retry={"jitter": "random"}), ["spec.retry.jitter", "Unsupported value"]),
    ("exit code 0 as permanent", task(retry={"permanentExitCodes": [0]}), ["spec.retry.permanentExitCodes[0]"]),
    ("duplicate exit codes", task(retry={"permanentExitCodes": [2, 2]}), ["spec.retry.permanentExitCodes[1]", "Duplicate"]),
    ("zero timeout", task(timeout="0s"), ["spec.timeout", "between 1s and 168h"]),
    ("empty image", task(image=""), ["spec.image"]),
    ("image with spaces", task(image="busy box"), ["spec.image"]),
    ("empty key", task(key=""), ["spec.key"]),
    ("oversized key", task(key="k" * 257), ["spec.key", "256"]),
    ("too many dependencies", task(dependsOn=[{"task": f"d{i}"} for i in range(33)]), ["spec.dependsOn", "32"]),
    ("self-dependency", task("loop", dependsOn=[{"task": "loop"}]), ["spec.dependsOn", "cannot depend on itself"]),
    ("unknown edge", task(dependsOn=[{"task": "a", "on": "Maybe"}]), ["spec.dependsOn[0].on", "Unsupported value"]),
    ("same dependency twice", task(dependsOn=[{"task": "a"}, {"task": "a", "on": "Complete"}]),
     ["spec.dependsOn[1]", "Duplicate"]),
    ("reserved env", task(env=[{"name": "CRONOQ_ATTEMPT", "value": "1"}]), ["spec.env[0].name", "reserved"]),
    ("bad pool name", task(pool="Not_A_Pool"), ["spec.pool"]),
    ("long task name", task("n" * 64), ["metadata.name", "63"]),
    ("bad quantity", task(resources={"limits": {"memory": "1 Gi"}}), ["spec.resources.limits.memory"]),
    ("negative quantity", task(resources={"requests": {"cpu": -1}}), ["spec.resources.requests.cpu"]),
    ("long label", task(podMetadata={"labels": {"app": "x" * 64}}), ["spec.podMetadata.labels.app"]),
    ("bad toleration", task(tolerations=[{"operator": "Maybe"}]), ["spec.tolerations[0].operator"]),
    ("unknown field", task(imagePullPolicy="Always"), ["imagePullPolicy"]),
    ("negative concurrency", pool(concurrency=-1), ["spec.concurrency"]),
    ("huge concurrency", pool(concurrency=2**40), ["spec.concurrency"]),
    ("lease too short", pool(leaseTTL="1s"), ["spec.leaseTTL", "or 0s to turn it off"]),
    ("lease as a number", pool(leaseTTL=30), ["spec.leaseTTL", "string"]),
    ("retention forever", pool(keyRetention="forever"), ["spec.keyRetention"]),
    ("pool max below initial", pool(retry={"maxBackoff": "500ms"}), ["spec.retry.maxBackoff", "at least initialBackoff"]),
    ("task kept over a year", task(ttlAfterFinished="8761h"), ["spec.ttlAfterFinished", "between 0s and 8760h"]),
    ("task ttl in days", task(ttlAfterFinished="1d"), ["spec.ttlAfterFinished", "should match"]),
    ("pool ttl as a number", pool(ttlAfterFinished=60), ["spec.ttlAfterFinished", "string"]),
    ("jobs kept over a month", pool(jobRetention="721h"), ["spec.jobRetention", "between 0s and 720h"]),
    ("negative job retention", task(jobRetention="-1s"), ["spec.jobRetention", "should match"]),
    ("dead letters kept over a year", pool(ttlAfterFailure="8761h"), ["spec.ttlAfterFailure", "between 0s and 8760h"]),
    ("success ttl in days", task(ttlAfterSuccess="1d"), ["spec.ttlAfterSuccess", "should match"]),
    ("failed jobs kept over a month", task(jobRetentionAfterFailure="721h"),
     ["spec.jobRetentionAfterFailure", "between 0s and 720h"]),
    ("success job retention as a number", pool(jobRetentionAfterSuccess=60), ["spec.jobRetentionAfterSuccess", "string"]),
    ("deadline in days", task(deadline="1d"), ["spec.deadline", "should match"]),
    ("start deadline over a year", task(startDeadline="8761h"), ["spec.startDeadline", "between 1s and 8760h, or 0s"]),
    ("retry budget under a second", task(retry={"maxRetryDuration": "500ms"}),
     ["spec.retry.maxRetryDuration", "between 1s and 8760h"]),
    ("pool deadline as a number", pool(deadline=3600), ["spec.deadline", "string"]),
    ("pool retry budget negative", pool(retry={"maxRetryDuration": "-1h"}), ["spec.retry.maxRetryDuration", "should match"]),
    ("http url not http", http_task(url="ftp://files.example.com/x"), ["spec.http.url"]),
    ("http url without host", http_task(url="https:///orders"), ["spec.http.url", "with a host"]),
    ("http header name with a colon", http_task(headers=[{"name": "X-Bad:", "value": "v"}]),
     ["spec.http.headers[0].name"]),
    ("http header name with a space", http_task(headers=[{"name": "X Bad", "value": "v"}]),
     ["spec.http.headers[0].name"]),
    ("http reserved header", http_task(headers=[{"name": "idempotency-key", "value": "mine"}]),
     ["spec.http.headers[0].name", "set by cronoq"]),
    ("http header value and secret", http_task(headers=[{"name": "A", "value": "v",
                                                         "secretKeyRef": {"name": "s", "key": "k"}}]),
     ["spec.http.headers[0].value", "exactly one of value and secretKeyRef"]),
    ("http header without a value", http_task(headers=[{"name": "A"}]),
     ["spec.http.headers[0].value", "exactly one of value and secretKeyRef"]),
    ("http header value with a newline", http_task(headers=[{"name": "A", "value": "a\nInjected: yes"}]),
     ["spec.http.headers[0].value"]),
    ("http and an image", task(http=HOOK), ["spec.http", "either http or a container"]),
    ("http and a template", http_task() | {"spec": {"http": HOOK, "template": {"spec": {}}}},
     ["spec.http", "either http or a container"]),
    ("http body with GET", http_task(method="GET", body="x"), ["spec.http.body", "GET or HEAD"]),
    ("http unknown method", http_task(method="FETCH"), ["spec.http.method", "Unsupported value"]),
    ("http timeout over an hour", http_task(timeout="2h"), ["spec.http.timeout", "between 1s and 1h"]),
    ("http success code 600", http_task(successCodes=[600]), ["spec.http.successCodes[0]"]),
    ("pool template http and image", pool(template={"image": "busybox:1.36", "http": HOOK}),
     ["spec.template.http", "either http or a container"]),
    ("retry rule matching nothing", task(retry={"rules": [{"action": "Ignore", "reasons": []}]}),
     ["spec.retry.rules[0]", "at least one of reasons, exitCodes or responseCodes"]),
    ("retry rule unknown action", task(retry={"rules": [{"action": "Skip", "exitCodes": [1]}]}),
     ["spec.retry.rules[0].action", "Unsupported value"]),
    ("retry rule exit code 256", pool(retry={"rules": [{"action": "Fail", "exitCodes": [256]}]}),
     ["spec.retry.rules[0].exitCodes[0]"]),
    ("retry rule response code 99", pool(retry={"rules": [{"action": "Retry", "responseCodes": [99]}]}),
     ["spec.retry.rules[0].responseCodes[0]"]),
    ("retry rule reason not CamelCase", task(retry={"rules": [{"action": "Ignore", "reasons": ["evicted"]}]}),
     ["spec.retry.rules[0].reasons[0]"]),
    ("17 retry rules", pool(retry={"rules": [{"action": "Retry", "exitCodes": [n]} for n in range(1, 18)]}),
     ["spec.retry.rules", "at most 16"]),
    ("maxIgnoredAttempts over 100", task(retry={"maxIgnoredAttempts": 101}), ["spec.retry.maxIgnoredAttempts"]),
]


@pytest.mark.parametrize("obj, words", [(obj, words) for _, obj, words in BAD], ids=[why for why, _, _ in BAD])
def test_bad_manifest_is_refused(kubectl, namespace, obj, words) -> None:
    refused(create(kubectl, namespace, obj), *words)


def test_push_tasks_need_no_image_and_a_pool_may_supply_either(kubectl, namespace) -> None:
    """At most one of http and a container per object, not exactly one: a task with neither takes
    its pool's image or http (DESIGN §12; docs/how-to/push-tasks.md)."""
    assert create(kubectl, namespace, http_task("hook", headers=[
        {"name": "Authorization", "secretKeyRef": {"name": "hook-token", "key": "header"}}])).returncode == 0
    assert create(kubectl, namespace, pool("hooks", template={"http": HOOK, "serviceAccountName": "hooks"})).returncode == 0
    assert create(kubectl, namespace, pool("workers", template={"image": "busybox:1.36"})).returncode == 0
    bare = {"apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": "bare"},
            "spec": {"pool": "hooks", "payload": {"order": 7}}}
    assert create(kubectl, namespace, bare).returncode == 0
    stored = json.loads(kubectl("get", "task", "hook", "-o", "json", namespace=namespace).stdout)
    assert stored["spec"]["http"]["method"] == "POST" and stored["spec"]["http"]["timeout"] == "30s"


def test_bare_yaml_on_is_refused_not_misread(kubectl, namespace) -> None:
    """YAML 1.1 reads a bare `on` key as true; the server must refuse it rather than run the
    task with the default edge."""
    manifest = """
apiVersion: cronoq.io/v1alpha1
kind: Task
metadata: {name: cleanup}
spec:
  image: busybox:1.36
  dependsOn:
  - task: publish
    on: Complete
"""
    refused(kubectl("create", "-f", "-", input=manifest, check=False, namespace=namespace),
            'unknown field "spec.dependsOn[0].true"')
    quoted = manifest.replace("on: Complete", '"on": Complete')
    assert kubectl("create", "-f", "-", input=quoted, check=False, namespace=namespace).returncode == 0


# --- changes after creation --------------------------------------------------------------------------

BASE = task("work", payload={"n": 1}, retry={"maxAttempts": 2}, podMetadata={"annotations": {"a": "b"}})

EDITS = [
    ("image", {"image": "busybox:1.37"}, "spec.image"),
    ("payload value", {"payload": {"n": 2}}, "spec.payload"),
    ("payload key", {"payload": {"m": 1}}, "spec.payload"),
    ("pool", {"pool": "other"}, "spec.pool"),
    ("retry", {"retry": {"maxAttempts": 3}}, "spec.retry"),
    ("new dependency", {"dependsOn": [{"task": "a"}]}, "spec.dependsOn"),
    ("annotations", {"podMetadata": {"annotations": {"a": "c"}}}, "spec.podMetadata"),
    ("new timeout", {"timeout": "10m"}, "spec.timeout"),
    ("group", {"group": "acme"}, "spec.group"),
]

PUSH_BASE = http_task("push")


def test_http_is_immutable(kubectl, namespace) -> None:
    assert apply(kubectl, namespace, PUSH_BASE).returncode == 0
    edited = copy.deepcopy(PUSH_BASE)
    edited["spec"]["http"]["url"] = "https://hooks.example.com/elsewhere"
    refused(apply(kubectl, namespace, edited), "spec.http", "immutable")


@pytest.mark.parametrize("change, field", [(c, f) for _, c, f in EDITS], ids=[why for why, _, _ in EDITS])
def test_spec_is_immutable(kubectl, namespace, change, field) -> None:
    assert apply(kubectl, namespace, BASE).returncode == 0
    edited = copy.deepcopy(BASE)
    edited["spec"].update(change)
    refused(apply(kubectl, namespace, edited), field, "immutable")


def test_cancel_goes_one_way_and_priority_may_change_while_waiting(kubectl, namespace) -> None:
    assert apply(kubectl, namespace, BASE).returncode == 0
    assert patch_status(kubectl, namespace, "work", {"phase": "Queued"}).returncode == 0
    changed = copy.deepcopy(BASE)
    changed["spec"].update(priority=50)
    assert apply(kubectl, namespace, changed).returncode == 0, "priority may change while queued"
    changed["spec"].update(cancel=True)
    assert apply(kubectl, namespace, changed).returncode == 0, "cancel may go false → true"
    changed["spec"].update(cancel=False)
    refused(apply(kubectl, namespace, changed), "spec.cancel", "cannot go back to false")


def test_priority_is_fixed_once_finished(kubectl, namespace) -> None:
    assert apply(kubectl, namespace, BASE).returncode == 0
    assert patch_status(kubectl, namespace, "work", {"phase": "Succeeded", "attempt": 1}).returncode == 0
    changed = copy.deepcopy(BASE)
    changed["spec"].update(priority=50)
    refused(apply(kubectl, namespace, changed), "spec.priority", "finished")


def test_pool_spec_may_change(kubectl, namespace) -> None:
    assert apply(kubectl, namespace, pool(concurrency=2)).returncode == 0
    assert apply(kubectl, namespace, pool(concurrency=5, timeout="10m")).returncode == 0


# --- the status: what a stale leader must not be able to write --------------------------------------------

@pytest.mark.parametrize("later, field", [
    ({"attempt": 2}, "status.attempt"),
    ({"attempt": None}, "status.attempt"),
    ({"epoch": 6}, "status.epoch"),
    ({"attempt": 4, "epoch": 6}, "status.epoch"),
], ids=["attempt lowered", "attempt removed", "epoch lowered", "older leader"])
def test_status_never_goes_back(kubectl, namespace, later, field) -> None:
    assert apply(kubectl, namespace, BASE).returncode == 0
    assert patch_status(kubectl, namespace, "work", {"phase": "Running", "attempt": 3, "epoch": 7}).returncode == 0
    refused(patch_status(kubectl, namespace, "work", later), field, "cannot decrease")
    assert patch_status(kubectl, namespace, "work", {"phase": "Retrying", "attempt": 4, "epoch": 7}).returncode == 0
    assert patch_status(kubectl, namespace, "work", {"epoch": 8}).returncode == 0


def test_the_status_cannot_be_removed(kubectl, namespace) -> None:
    """Its attempt and epoch guard against stale writers; a status removed would take them along."""
    assert apply(kubectl, namespace, BASE).returncode == 0
    assert patch_status(kubectl, namespace, "work", {"phase": "Running", "attempt": 3, "epoch": 7}).returncode == 0
    removed = kubectl("patch", "task", "work", "--subresource=status", "--type=json",
                      "-p", json.dumps([{"op": "remove", "path": "/status"}]), check=False, namespace=namespace)
    refused(removed, "status", "cannot be removed")
    stored = json.loads(kubectl("get", "task", "work", "-o", "json", namespace=namespace).stdout)
    assert (stored["status"]["attempt"], stored["status"]["epoch"]) == (3, 7)


def test_finished_stays_finished(kubectl, namespace) -> None:
    assert apply(kubectl, namespace, BASE).returncode == 0
    assert patch_status(kubectl, namespace, "work", {"phase": "DeadLettered", "attempt": 2}).returncode == 0
    refused(patch_status(kubectl, namespace, "work", {"phase": "Running"}), "status.phase", "finished")
    assert patch_status(kubectl, namespace, "work", {"message": "still allowed"}).returncode == 0


@pytest.mark.parametrize("status, field", [
    ({"attempts": [{"number": n} for n in range(1, 22)]}, "status.attempts"),
    ({"output": "x" * 4097}, "status.output"),
    ({"summary": "x" * 101}, "status.summary"),
    ({"phase": "Done"}, "status.phase"),
    ({"nextAttemptAt": "tomorrow"}, "status.nextAttemptAt"),
    ({"checkpoint": {"attempt": 1, "data": "x" * 4097}}, "status.checkpoint.data"),
    ({"checkpoint": {"attempt": 0, "data": "{}"}}, "status.checkpoint.attempt"),
], ids=["too many attempts kept", "output over 4 KiB", "long summary", "unknown phase", "bad time",
        "checkpoint over 4 KiB", "checkpoint of attempt 0"])
def test_status_bounds(kubectl, namespace, status, field) -> None:
    assert apply(kubectl, namespace, BASE).returncode == 0
    refused(patch_status(kubectl, namespace, "work", status), field)


# --- examples, defaults, printer columns, explain ------------------------------------------------------

def example_files() -> list[Path]:
    return sorted(EXAMPLES.rglob("*.yaml"))


@pytest.mark.parametrize("path", example_files(), ids=[str(p.relative_to(EXAMPLES)) for p in example_files()])
def test_example_is_accepted_and_defaulted_as_python_defaults_it(kubectl, namespace, path) -> None:
    """The server takes every example as written, and fills in exactly the defaults the
    models fill in: the two sources of truth for defaults agree."""
    kubectl("apply", "--server-side", "-f", str(path), namespace=namespace)
    for doc in yaml.safe_load_all(path.read_text()):
        kind, name = doc["kind"], doc["metadata"]["name"]
        if kind not in MODELS:  # a worker Deployment and its RBAC: Kubernetes' own kinds
            continue
        stored = json.loads(kubectl("get", kind.lower(), name, "-o", "json", namespace=namespace).stdout)
        assert MODELS[kind].model_validate(stored).to_dict()["spec"] == stored["spec"]


def table(kubectl, namespace: str, *args: str) -> list[list[str]]:
    out = kubectl("get", *args, namespace=namespace).stdout
    return [line.split() for line in out.strip().splitlines()]


def test_kubectl_get_shows_the_columns(kubectl, own_namespace) -> None:
    # A namespace no operator watches: the statuses written here by hand must stay as written.
    namespace = own_namespace
    assert create(kubectl, namespace, with_name(BASE, "shown")).returncode == 0
    assert patch_status(kubectl, namespace, "shown", {
        "phase": "Retrying", "attempt": 2, "summary": "exit-1", "message": "x" * 4000}).returncode == 0
    header, row = table(kubectl, namespace, "tasks")
    assert header == ["NAME", "POOL", "STATUS", "ATTEMPT", "AGE", "MESSAGE"]
    assert row[:4] == ["shown", "default", "Retrying", "2"] and row[-1] == "exit-1"
    wide_header, _ = table(kubectl, namespace, "tk", "-o", "wide")
    assert wide_header[:6] == header and "PRIORITY" in wide_header and "KEY" in wide_header

    assert create(kubectl, namespace, pool("batch", concurrency=3)).returncode == 0
    header, row = table(kubectl, namespace, "tp")
    assert header == ["NAME", "CONCURRENCY", "RUNNING", "QUEUED", "AGE"]
    assert row[:2] == ["batch", "3"]

    listed = kubectl("get", "cronoq", "-o", "name", namespace=namespace).stdout.split()
    assert sorted(listed) == ["task.cronoq.io/shown", "taskpool.cronoq.io/batch"]


def test_tasks_can_be_selected_by_pool_and_phase(kubectl, own_namespace) -> None:
    namespace = own_namespace  # no operator acts here: the phases are the ones written below
    assert create(kubectl, namespace, task("a", pool="batch")).returncode == 0
    assert create(kubectl, namespace, task("b")).returncode == 0
    assert patch_status(kubectl, namespace, "b", {"phase": "Queued"}).returncode == 0
    by_pool = kubectl("get", "tasks", "--field-selector=spec.pool=batch", "-o", "name", namespace=namespace)
    assert by_pool.stdout.split() == ["task.cronoq.io/a"]
    by_phase = kubectl("get", "tasks", "--field-selector=status.phase=Queued", "-o", "name", namespace=namespace)
    assert by_phase.stdout.split() == ["task.cronoq.io/b"]


def test_kubectl_explain_shows_the_descriptions(kubectl) -> None:
    out = kubectl("explain", "task.spec.retry").stdout
    assert RetryOverride.__doc__.split()[0] in out
    for field in ("maxAttempts", "initialBackoff", "multiplier", "maxBackoff", "jitter", "permanentExitCodes"):
        assert field in out
    assert "1 disables retries" in out
    pool_out = kubectl("explain", "taskpool.spec.leaseTTL").stdout
    assert "0s turns heartbeats off" in " ".join(pool_out.split())


def test_kubectl_explain_describes_the_retry_rules(kubectl) -> None:
    out = " ".join(kubectl("explain", "taskpool.spec.retry.rules").stdout.split())
    for words in ("the task's before its pool's", "Ignore", "maxIgnoredAttempts", "responseCodes", "0 to 255"):
        assert words in out, words
    assert "uncounted" in " ".join(kubectl("explain", "task.spec.retry.maxIgnoredAttempts").stdout.split())
