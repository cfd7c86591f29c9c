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
