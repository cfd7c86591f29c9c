"""Builders and waits for cronoq objects in a test namespace.

    cq.pool("default", concurrency=2)
    cq.task("a", outcome="Fail", exit_code=3, retry={"maxAttempts": 2})
    cq.wait_phase("a", "DeadLettered")
"""
from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.waiting import wait_until

GROUP, VERSION = "cronoq.io", "v1alpha1"
TERMINAL = ("Succeeded", "Failed", "DeadLettered", "Cancelled", "Skipped")

# keyword → kwok annotation (see docs/development/test-cluster.md, "Playing task outcomes")
PLAYS = {"outcome": "outcome", "delay": "delay", "start_delay": "start-delay", "exit_code": "exit-code",
         "reason": "reason", "message": "message", "on_delete": "on-delete",
         "delete_delay": "delete-delay"}


def plays(**kw: Any) -> dict[str, str]:
    """kwok annotations: plays(outcome="Fail", exit_code=3) or per attempt plays(outcome_a1="Fail")."""
    out = {}
    for key, value in kw.items():
        base, _, attempt = key.partition("_a") if key.rsplit("_a", 1)[-1].isdigit() else (key, "", "")
        name = PLAYS[base]
        out[f"kwok.cronoq.io/{name}-a{attempt}" if attempt else f"kwok.cronoq.io/{name}"] = str(value)
    return out


class Cronoq:
    def __init__(self, api: client.ApiClient, namespace: str, operator) -> None:
        self.api = api
        self.namespace = namespace
        self.operator = operator
        self.custom = client.CustomObjectsApi(api)
        self.batch = client.BatchV1Api(api)
        self.core = client.CoreV1Api(api)

    # ------------------------------------------------------------------ create

    def pool(self, name: str = "default", **spec: Any) -> dict:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TaskPool", "metadata": {"name": name}, "spec": spec}
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "taskpools", body)

    def task(self, name: str, *, image: str = "example.invalid/task:1", annotations: dict | None = None,
             **spec_and_plays: Any) -> dict:
        play = {k: v for k, v in spec_and_plays.items() if k.split("_a")[0] in PLAYS or k in PLAYS}
        spec = {k: v for k, v in spec_and_plays.items() if k not in play}
        anns = {**plays(**play), **(annotations or {})}
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": name},
                "spec": {"image": image, **spec}}
        if anns:
            body["spec"]["podMetadata"] = {"annotations": anns}
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "tasks", body)

    def patch_task(self, name: str, spec: dict) -> dict:
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, "tasks", name, {"spec": spec})

    # ------------------------------------------------------------------ read

    def get(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "tasks", name)

    def status(self, name: str) -> dict:
        return self.get(name).get("status") or {}

    def jobs(self, task: str | None = None) -> list[client.V1Job]:
        selector = f"cronoq.io/task={task}" if task else "cronoq.io/task"
        return self.batch.list_namespaced_job(self.namespace, label_selector=selector).items

    def events(self, name: str) -> list[client.CoreV1Event]:
        return self.core.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={name}").items

    def reasons(self, name: str) -> list[str]:
        return [e.reason for e in self.events(name)]

    # ------------------------------------------------------------------ wait

    def wait_phase(self, name: str, *phases: str, timeout: float = 60) -> dict:
        """Wait until the task's phase is one of `phases`; fail at once if it ends in another."""
        def check():
            status = self.status(name)
            phase = status.get("phase")
            if phase in phases:
                return status
            if phase in TERMINAL:
                raise AssertionError(f"task {name} ended {phase}, not {phases}: {status.get('message')}")
            return None

        def poll():
            try:
                return check()
            except ApiException as err:
                if err.status == 404:
                    return None
                raise

        return _wait_strict(poll, timeout, f"task {name} in {phases}")

    def wait_status(self, name: str, predicate, what: str, timeout: float = 60) -> dict:
        return wait_until(lambda: (lambda s: s if predicate(s) else None)(self.status(name)), timeout=timeout, what=what)


def _wait_strict(poll, timeout: float, what: str):
    """wait_until, but an AssertionError from the check fails at once instead of being retried."""
    box: dict[str, Any] = {}

    def check():
        try:
            return poll()
        except AssertionError as err:
            box["error"] = err
            return True

    result = wait_until(check, timeout=timeout, what=what)
    if "error" in box:
        raise box["error"]
    return result
