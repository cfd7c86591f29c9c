"""`Client`: submit, follow, cancel and re-drive Tasks from Python (DESIGN §13).

It speaks to the API server only (cronoq's one client, `apiserver/sync.py`), never to the operator:
everything it promises follows from what the operator writes on the Task. Waiting is a watch
on the Task(s), never a sleep-and-poll loop; a watch that ends (server timeout, 410 Gone) is
resumed from a fresh read.

Every listing of Tasks is paged (`limit`/`continue`, `page_size` a request): `pages()` hands the
tasks over one page at a time, so a caller that goes page by page holds one page of a backlog of
100,000, never the whole listing.
"""
from __future__ import annotations

import heapq
import os
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timedelta, timezone
from itertools import chain, islice
from typing import Any

from pydantic import ValidationError

from cronoq.api import GROUP, SUBMITTER, TERMINAL_PHASES, VERSION, Task, TaskPhase, TaskPool, TaskPoolSpec, TaskSpec
from cronoq.api.durations import format as format_duration
from cronoq.apiserver.errors import ApiError, Forbidden, Gone, NotFound
from cronoq.apiserver.sync import MERGE_PATCH, Api
from cronoq.client.attempts import AttemptReads
from cronoq.client.common import objects_path, selector_of
from cronoq.client.errors import (
    InvalidTask,
    NotRetryable,
    TaskNotFound,
)
from cronoq.client.objects import PoolsAndSchedules
from cronoq.client.waiting import Waiting
from cronoq.engine import keys
from cronoq.pod_protocol.inputs import Input, encode_inputs, inputs_of, parse_inputs
from cronoq.worker.discovery import pod_namespace

RETRY_OF = "cronoq.io/retry-of"
"""Label on a Task made by `retry`: the name of the task it re-drives."""
RETRY_OF_UID = "cronoq.io/retry-of-uid"
"""Annotation on a Task made by `retry`: the uid of the task it re-drives (names can be reused)."""
RETRY_OF_KEY = "cronoq.io/retry-of-key"
"""Annotation keeping the original's key, which the retry cannot carry (see `retry`)."""
RETENTION_FIELDS = ("ttlAfterFinished", "ttlAfterSuccess", "ttlAfterFailure", "jobRetention",
                    "jobRetentionAfterSuccess", "jobRetentionAfterFailure")
"""What `submit(retention=...)` may set (docs/retention.md)."""
DEFAULT_KEY_RETENTION: timedelta = TaskPoolSpec.model_fields["key_retention"].default
"""A pool's keyRetention when the pool cannot be read."""
RETRYABLE_PHASES = (TaskPhase.FAILED, TaskPhase.DEAD_LETTERED)
PAGE = 500
"""Tasks per list request (`limit`), kubectl's default `--chunk-size`: 100,000 tasks of ~3 KiB
arrive as 200 answers of ~1.5 MiB each, none of which the API server or this process must build
or hold whole."""





def invalid(err: ValidationError) -> InvalidTask:
    """A pydantic error as one line naming the field."""
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "task"
    return InvalidTask(f"{where}: {first['msg']}")


class Client(Waiting, AttemptReads, PoolsAndSchedules):
    """Tasks in one namespace. `namespace` defaults to the kubeconfig context's (in a pod: the
    pod's own); `kubeconfig` to $KUBECONFIG / ~/.kube/config, or in-cluster config; `context`
    to the kubeconfig's current context. `api` is the connection to use instead (cronoq's one
    client, `cronoq.apiserver.sync.Api`). What the API server refuses and the client does not turn
    into one of its own errors is raised as `cronoq.apiserver.errors.ApiError` (status, reason,
    message)."""

    def __init__(self, namespace: str | None = None, kubeconfig: str | None = None, *,
                 context: str | None = None, api: Api | None = None, page_size: int = PAGE) -> None:
        if api is None:
            from cronoq.apiserver import config

            kubeconfig = kubeconfig_path(kubeconfig)
            if kubeconfig is None:  # in a pod: its ServiceAccount and namespace
                connection, context_ns = config.in_cluster(), pod_namespace()
            else:
                connection = config.from_kubeconfig(kubeconfig, context)
                context_ns = config.context_namespace(kubeconfig, context)
            # the token asked of the credentials per request, as the kubernetes client did: a command
            # must not fail on a token its exec plugin would have renewed
            api = Api(connection, token_fresh=0)
            namespace = namespace or context_ns
        if page_size < 1:
            raise ValueError(f"page_size {page_size}: a page holds at least one task")
        self.api = api
        self.namespace = namespace or "default"
        self.page_size = page_size
        """Tasks per list request (`limit`)."""
        self._username: str | None = None

    def in_namespace(self, namespace: str) -> Client:
        """The same connection, another namespace (for tasks listed across namespaces)."""
        return Client(namespace, api=self.api, page_size=self.page_size)

    def path(self, plural: str, name: str | None = None, *, all_namespaces: bool = False) -> str:
        """Where this namespace's (or every namespace's) cronoq objects of one kind are, or the one named."""
        return objects_path(plural, None if all_namespaces else self.namespace, name)

    # ------------------------------------------------------------------ reading

    def get(self, name: str) -> Task:
        """The Task named `name`; TaskNotFound if there is none."""
        return Task.model_validate(self._get_raw(name))

    def inputs(self, name: str) -> dict[str, Input]:
        """What task `name`'s attempts receive from its dependencies (`ctx.inputs`, CRONOQ_INPUTS):
        each one's phase and output as they are now, under the same bound (docs/inputs.md)."""
        found: list[tuple[str, str | None, str | None]] = []
        for dep in self.get(name).spec.depends_on:
            try:
                status = self.get(dep.task).status
            except TaskNotFound:
                found.append((dep.task, None, None))
                continue
            phase = status.phase.value if status is not None and status.phase is not None else None
            found.append((dep.task, phase, status.output if status is not None and status.output_available else None))
        return parse_inputs(encode_inputs(inputs_of(found)))

    def list(self, phase: str | TaskPhase | Iterable[str | TaskPhase] | None = None, pool: str | None = None,
             key: str | None = None, label_selector: str | None = None, *,
             all_namespaces: bool = False) -> list[Task]:
        """Tasks of the namespace (or of every one), by namespace and name; filtered on the server
        by phase (one or several), pool and key (the CRD's selectable fields) and labels. All of
        them at once: for a listing that may be long, go through `pages()`."""
        return [t for page in self.pages(phase, pool, key, label_selector, all_namespaces=all_namespaces)
                for t in page]

    def pages(self, phase: str | TaskPhase | Iterable[str | TaskPhase] | None = None, pool: str | None = None,
              key: str | None = None, label_selector: str | None = None, *,
              all_namespaces: bool = False) -> Pages:
        """The tasks `list` returns, in the same order, one page at a time: one list request of
        `page_size` tasks each (several phases: one listing per phase, merged in order), parsed
        when its turn comes. Iterate it once; `mixed` then says whether a page had to be read from
        a newer snapshot than the first (a listing slower than the server keeps its snapshot)."""
        phases: list[str | None]
        if phase is None or isinstance(phase, (str, TaskPhase)):
            phases = [None if phase is None else str(phase)]
        else:
            phases = sorted({str(p) for p in phase})
        listings = [self._listing(selector_of(p, pool, key), label_selector, all_namespaces=all_namespaces)
                    for p in phases]
        return Pages(listings, self.page_size)

    def _listing(self, field_selector: str | None, label_selector: str | None, *, all_namespaces: bool,
                 consistent: bool = False) -> Listing:
        params = {"fieldSelector": field_selector or None, "labelSelector": label_selector or None}
        return Listing(self.api, self.path("tasks", all_namespaces=all_namespaces), params, self.page_size,
                       consistent)










    # ------------------------------------------------------------------ submitting

    def submit(self, name: str | None = None, *, generate_name: str | None = None, image: str | None = None,
               command: list[str] | None = None, args: list[str] | None = None,
               env: Mapping[str, str] | list[dict] | None = None, template: dict | None = None,
               payload: Any = None, pool: str = "default", priority: int = 0, key: str | None = None,
               group: str | None = None, retry: Mapping[str, Any] | None = None, timeout: str | timedelta | None = None,
               depends_on: Iterable[str | Mapping[str, str]] = (), labels: Mapping[str, str] | None = None,
               annotations: Mapping[str, str] | None = None, spec: Mapping[str, Any] | None = None,
               start_delay: str | timedelta | None = None, not_before: datetime | None = None,
               start_deadline: str | timedelta | None = None, deadline: str | timedelta | None = None,
               retention: Mapping[str, str | timedelta] | None = None) -> Task:
        """Create a Task and return it. With a `key`, a task of the same pool already holding it
        (unfinished, or finished within the pool's keyRetention) is returned instead, and nothing
        is created. A `group` (a tenant, a customer) takes turns with the pool's other groups. Without `name`,
        the API server picks one from `generate_name` (default `task-`).
        `spec` adds any other TaskSpec fields (camelCase, e.g. `podMetadata`, `resources`).
        `start_delay` (after its creation) or `not_before` (an aware time) delays its start.
        `start_deadline` and `deadline` (from submission) are the task's own time limits; the retry
        budget in time is `retry={"maxRetryDuration": "30m"}`. `retention` sets how long the task and
        its Jobs are kept, by outcome (docs/retention.md): `{"ttlAfterSuccess": "1h", "ttlAfterFailure":
        "168h"}`, any of ttlAfterFinished, ttlAfterSuccess, ttlAfterFailure, jobRetention,
        jobRetentionAfterSuccess, jobRetentionAfterFailure."""
        body_spec: dict[str, Any] = dict(spec or {})
        fields = {"image": image, "command": command, "args": args, "template": template, "key": key,
                  "group": group, "retry": dict(retry) if retry else None}
        body_spec.update({k: v for k, v in fields.items() if v is not None})
        body_spec["pool"] = pool
        if priority:
            body_spec["priority"] = priority
        if payload is not None:
            body_spec["payload"] = payload
        if env:
            body_spec["env"] = ([{"name": k, "value": v} for k, v in env.items()] if isinstance(env, Mapping)
                                else list(env))
        if timeout is not None:
            body_spec["timeout"] = timeout if isinstance(timeout, str) else format_duration(timeout)
        for field, limit in (("startDeadline", start_deadline), ("deadline", deadline)):
            if limit is not None:
                body_spec[field] = limit if isinstance(limit, str) else format_duration(limit)
        for field, kept in (retention or {}).items():
            if field not in RETENTION_FIELDS:
                raise ValueError(f"retention: {field} is not one of {', '.join(RETENTION_FIELDS)}")
            body_spec[field] = kept if isinstance(kept, str) else format_duration(kept)
        if depends_on:
            body_spec["dependsOn"] = [_edge(d) for d in depends_on]
        if start_delay is not None:
            body_spec["startDelay"] = start_delay if isinstance(start_delay, str) else format_duration(start_delay)
        if not_before is not None:
            body_spec["notBefore"] = not_before.isoformat()
        metadata: dict[str, Any] = {"name": name} if name else {"generateName": generate_name or "task-"}
        if labels:
            metadata["labels"] = dict(labels)
        if annotations:
            metadata["annotations"] = dict(annotations)
        return self.submit_manifest({"metadata": metadata, "spec": body_spec})

    def submit_manifest(self, manifest: Mapping[str, Any]) -> Task:
        """Create the Task a manifest describes (as `kubectl apply -f` would read it), with the
        same key handling as `submit`."""
        return self._submit(manifest)[0]

    def _submit(self, manifest: Mapping[str, Any]) -> tuple[Task, bool]:
        """(the Task, whether it was created) — the CLI says which."""
        body = self._validated(manifest)
        spec = body["spec"]
        if spec.get("key"):
            existing = self.holder_of(spec["key"], spec.get("pool", "default"))
            if existing is not None:
                return existing, False
        self._stamp(body)
        created = self.api.request("POST", self.path("tasks"), body=body)
        return Task.model_validate(created), True

    def whoami(self) -> str:
        """The username the API server knows this client as (a SelfSubjectReview, asked once): the
        submitter a pool that shares by submitter counts its tasks under."""
        if self._username is None:
            review = self.api.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                      body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
            user = (review.get("status") or {}).get("userInfo") or {}
            self._username = str(user.get("username") or "")
        return self._username

    def _stamp(self, body: dict[str, Any]) -> None:
        """Record the submitter (cronoq.io/submitter) where the cluster does not (the chart's stamp
        needs Kubernetes 1.36): its admission policy checks the value is this client's username."""
        annotations = body["metadata"].setdefault("annotations", {})
        if SUBMITTER in annotations:
            return
        try:
            username = self.whoami()
        except ApiError:  # not served (before 1.28) or not allowed: the stamp, if any, writes it
            username = ""
        if username:
            annotations[SUBMITTER] = username
        elif not annotations:
            del body["metadata"]["annotations"]

    def _validated(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        body = check_manifest(manifest)
        if body["metadata"].get("namespace", self.namespace) != self.namespace:
            raise InvalidTask(f"metadata.namespace {body['metadata']['namespace']} differs from the client's "
                              f"{self.namespace}")
        body["metadata"].pop("namespace", None)
        spec = TaskSpec.model_validate(body["spec"])
        if spec.image is None and not _template_image(spec.template):
            pool = self._pool_or_none(spec.pool)
            if pool is None or not (pool.spec.template and pool.spec.template.image):
                raise InvalidTask(f"nothing to run: give an image or a template (TaskPool {spec.pool} "
                                  "sets no image)")
        return body

    def _pool_or_none(self, name: str) -> TaskPool | None:
        try:
            return self.pool(name)
        except Forbidden:  # not allowed to read pools: the operator will judge
            return None

    def holder_of(self, key: str, pool: str = "default", *, now: datetime | None = None) -> Task | None:
        """The task that holds `key` in `pool`, as the operator judges it (`engine.keys.original`):
        the original a new task with the key would follow or end as a duplicate of; None when the
        key is free. The pool is read only when a finished task may hold the key (its keyRetention).
        `now`: the time to judge at (default: this machine's clock)."""
        now = now or datetime.now(timezone.utc)
        tasks = {t.metadata.name: t for t in self.list(key=key, pool=pool) if t.metadata.deletion_timestamp is None}
        holders = [keys.Holder.of(t, now) for t in tasks.values()]
        retention = DEFAULT_KEY_RETENTION
        if any(h.duplicate_of is None and h.phase is not None and h.phase.terminal for h in holders):
            pool_obj = self._pool_or_none(pool)
            retention = pool_obj.spec.key_retention if pool_obj else DEFAULT_KEY_RETENTION
        first = keys.original(holders, retention, now)
        return tasks[first.name] if first is not None else None

    # ------------------------------------------------------------------ waiting






    # ------------------------------------------------------------------ changing

    def cancel(self, name: str | None = None, *, key: str | None = None, pool: str | None = None) -> list[str]:
        """Cancel one task by name, or every unfinished task holding `key` (in `pool`, if
        given). Returns the names asked to cancel; a finished task is left as it is."""
        if (name is None) == (key is None):
            raise InvalidTask("cancel takes a name or a key, not both or neither")
        if name is not None:
            task = self.get(name)
            targets = [task]
        else:
            targets = self.list(key=key, pool=pool)
        cancelled = []
        for task in targets:
            if task.phase in TERMINAL_PHASES or task.spec.cancel:
                continue
            try:
                self.api.request("PATCH", self.path("tasks", task.metadata.name), body={"spec": {"cancel": True}},
                                 content_type=MERGE_PATCH)
            except NotFound:
                continue
            cancelled.append(task.metadata.name or "")
        return cancelled

    def delete(self, name: str) -> bool:
        """Delete a task (its Jobs, pods and Lease go with it, through their owner references);
        False when it was gone already."""
        try:
            self.api.request("DELETE", self.path("tasks", name), {"propagationPolicy": "Background"})
        except NotFound:
            return False
        return True

    def retry(self, name: str, *, max_attempts: int | None = None) -> Task:
        """Re-drive a Failed or DeadLettered task: a new Task with the same spec, named
        `<name>-r-<random>`, labelled `cronoq.io/retry-of: <name>`. The original keeps its history.
        Its key is not carried over (the new task would match the finished original and run
        nothing); it is kept in the `cronoq.io/retry-of-key` annotation. `max_attempts` replaces
        the retry policy's."""
        raw = self._get_raw(name)
        original = Task.model_validate(raw)
        if original.phase not in RETRYABLE_PHASES:
            raise NotRetryable(f"task {name} is {original.phase or 'not started'}; only Failed or DeadLettered "
                               "tasks can be retried")
        spec = dict(raw["spec"])  # as stored: fields this client's models do not know are kept too
        spec.pop("cancel", None)
        key = spec.pop("key", None)
        if max_attempts is not None:
            spec["retry"] = {**spec.get("retry", {}), "maxAttempts": max_attempts}
        labels = {k: v for k, v in original.metadata.labels.items() if k != RETRY_OF}
        labels[RETRY_OF] = name
        annotations = {RETRY_OF_UID: original.metadata.uid or ""}
        if key:
            annotations[RETRY_OF_KEY] = key
        metadata = {"generateName": f"{name[:50]}-r-", "labels": labels, "annotations": annotations}
        return self._submit({"metadata": metadata, "spec": spec})[0]

    def retries_of(self, name: str) -> list[Task]:
        """Tasks made by `retry` from `name`, oldest first."""
        return sorted(self.list(label_selector=f"{RETRY_OF}={name}"), key=_age_order)

    # ------------------------------------------------------------------ logs







    # ------------------------------------------------------------------ plumbing

    def _get_raw(self, name: str) -> dict:
        try:
            return self.api.request("GET", self.path("tasks", name))
        except NotFound:
            raise TaskNotFound(self.namespace, name) from None




class Listing:
    """One paged LIST of objects at `path` (`limit`/`continue`, with `params`' selectors): its pages'
    items, as plain dicts, fetched one at a time as they are asked for. `version` is the first page's resourceVersion, the snapshot
    every page is read from (Kubernetes API concepts, "Retrieving large results sets in chunks").

    A `continue` token lives as long as the server keeps that snapshot (etcd's compaction, every 5
    minutes by default); an expired one is answered 410 with a token to go on from the newest
    snapshot. A listing that is shown or acted on goes on with it (`mixed` is then set: what
    changed meanwhile on pages already read is not seen again); a `consistent` one, which a
    watch then follows from `version`, starts again from the first page instead."""

    def __init__(self, api: Api, path: str, params: Mapping[str, str | None], page_size: int,
                 consistent: bool = False) -> None:
        self._api, self._path, self._params = api, path, dict(params)
        self.page_size = page_size
        self.consistent = consistent
        self.version: str | None = None
        self.mixed = False
        self.restarts = 0
        """Times a consistent listing started again from its first page."""

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        token: str | None = None
        while True:
            try:
                answer = self._api.request("GET", self._path, {**self._params, "limit": self.page_size,
                                                               "continue": token})
            except Gone as err:
                fresh = err.fresh_continue if token else None
                if fresh is None:
                    raise
                if self.consistent:  # from the first page again, from one new snapshot
                    token, self.version = None, None
                    self.restarts += 1
                else:
                    token, self.mixed = fresh, True
                continue
            meta = answer.get("metadata") or {}
            if self.version is None:
                self.version = meta.get("resourceVersion")
            yield answer.get("items") or []
            token = meta.get("continue")
            if not token:
                return


class Pages:
    """The tasks of one or several listings (one per phase asked for), in the API server's order
    (by namespace, then name), as pages of Tasks: what `Client.pages` returns. Several listings
    are merged as their pages arrive, so one page of each is held at a time."""

    def __init__(self, listings: list[Listing], page_size: int) -> None:
        self.listings = listings
        self.page_size = page_size

    @property
    def mixed(self) -> bool:
        """Whether a page was read from a newer snapshot than its listing's first page."""
        return any(listing.mixed for listing in self.listings)

    def __iter__(self) -> Iterator[list[Task]]:
        if len(self.listings) == 1:
            for items in self.listings[0]:
                if items:
                    yield [Task.model_validate(o) for o in items]
            return
        merged = heapq.merge(*(chain.from_iterable(listing) for listing in self.listings), key=storage_order)
        while page := list(islice(merged, self.page_size)):
            yield [Task.model_validate(o) for o in page]


def storage_order(obj: dict[str, Any]) -> str:
    """Where the API server lists an object: by its storage key, `namespace/name` (so `a-b/x`
    comes before `a/x`: `-` sorts before `/`)."""
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def check_manifest(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The Task body to create from a manifest, checked against the models without a cluster
    (InvalidTask names the first bad field)."""
    if not isinstance(manifest, Mapping):
        raise InvalidTask("a Task manifest is a mapping")
    kind = manifest.get("kind", "Task")
    if kind != "Task":
        raise InvalidTask(f"kind {kind}: only Task manifests can be submitted")
    metadata = dict(manifest.get("metadata") or {})
    if not metadata.get("name") and not metadata.get("generateName"):
        metadata["generateName"] = "task-"
    spec = dict(manifest.get("spec") or {})
    try:
        TaskSpec.model_validate(spec)
        Task.model_validate({"metadata": metadata, "spec": spec})
    except ValidationError as err:
        raise invalid(err) from None
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": metadata, "spec": spec}








def _edge(dep: str | Mapping[str, str]) -> dict[str, str]:
    """`"a"`, `"a:Failure"` or `{"task": "a", "on": "Failure"}` → an edge."""
    if isinstance(dep, Mapping):
        return dict(dep)
    task, _, on = dep.partition(":")
    return {"task": task, "on": on or "Success"}


def _template_image(template: Any) -> bool:
    if template is None:
        return False
    containers = template.spec.get("containers") or []
    return any(isinstance(c, dict) and c.get("image") for c in containers)


def _age_order(task: Task) -> tuple:
    created = task.metadata.creation_timestamp or datetime.max.replace(tzinfo=timezone.utc)
    return (created, task.metadata.name or "")




def kubeconfig_path(given: str | None) -> str | None:
    """The kubeconfig to read, as kubectl picks it: the one given, else $KUBECONFIG (read now: the
    kubernetes package reads it once, at import), else ~/.kube/config if it exists; None means
    in-cluster config."""
    if given:
        return given
    if os.environ.get("KUBECONFIG"):
        return os.environ["KUBECONFIG"].split(os.pathsep)[0]
    default = os.path.expanduser("~/.kube/config")
    return default if os.path.exists(default) or "KUBERNETES_SERVICE_HOST" not in os.environ else None


