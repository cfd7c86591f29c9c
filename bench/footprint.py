"""What one finished Task costs in the operator's memory, measured rather than guessed: the
operator's store keeps each Task's raw dict and its pydantic model, so the bytes of both
(tracemalloc, over real Tasks read back from the cluster) times the task count is most of what
RSS grows by. managedFields are counted apart: they are half the JSON and none of the logic.
"""
from __future__ import annotations

import json
import tracemalloc
from typing import Any

from bench.kubeapi import Api, tasks_path

SAMPLE = 500


def per_task(api: Api, namespace: str, sample: int = SAMPLE) -> dict[str, Any]:
    items = api.request("GET", f"{tasks_path(namespace)}?limit={sample}")["items"]
    if not items:
        return {}
    for item in items:
        item.setdefault("apiVersion", "cronoq.io/v1alpha1")
        item.setdefault("kind", "Task")
    blob = json.dumps(items)
    without = json.dumps([{**i, "metadata": {k: v for k, v in i["metadata"].items() if k != "managedFields"}}
                          for i in items])
    try:
        from cronoq.api import Task
    except ImportError:
        Task = None
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        raws = json.loads(blob)
        raw_bytes = tracemalloc.get_traced_memory()[0] - base
        trimmed = json.loads(without)
        trimmed_bytes = tracemalloc.get_traced_memory()[0] - base - raw_bytes
        models = [Task.model_validate(r) for r in raws] if Task else []
        model_bytes = tracemalloc.get_traced_memory()[0] - base - raw_bytes - trimmed_bytes if Task else None
    finally:
        tracemalloc.stop()
    n = len(items)
    del raws, trimmed, models
    return {"sample": n, "json_bytes": len(blob) / n, "json_bytes_without_managed_fields": len(without) / n,
            "raw_dict_bytes": raw_bytes / n, "raw_dict_bytes_without_managed_fields": trimmed_bytes / n,
            "model_bytes": model_bytes / n if model_bytes is not None else None}


def listing_cost(kubeconfig: str, namespace: str, limit: int = 1000) -> dict[str, Any]:
    """Bytes per object held after listing Jobs and pods the way the operator's startup does
    (the kubernetes client's typed models, then sanitize_for_serialization) and the raw way
    (`_preload_content=False` + json.loads), over one page of `limit` objects."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    api = client.ApiClient(configuration)
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    out: dict[str, Any] = {"limit": limit}
    for kind, call in (("jobs", batch.list_namespaced_job), ("pods", core.list_namespaced_pod)):
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            typed = call(namespace, label_selector="cronoq.io/task-uid", limit=limit)
            dicts = [api.sanitize_for_serialization(i) for i in typed.items]
            typed_bytes = tracemalloc.get_traced_memory()[0] - base
            n = len(typed.items)
            del typed, dicts
            base = tracemalloc.get_traced_memory()[0]
            raw = json.loads(call(namespace, label_selector="cronoq.io/task-uid", limit=limit,
                                  _preload_content=False).data)
            raw_bytes = tracemalloc.get_traced_memory()[0] - base
            del raw
        finally:
            tracemalloc.stop()
        if n:
            out[kind] = {"objects": n, "typed_bytes_per_object": typed_bytes / n, "raw_bytes_per_object": raw_bytes / n}
    return out
