"""`cronoq trigger SCHEDULE`: one fire of a TaskSchedule now, as its own Task."""
from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone


def add_verb(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    t = sub.add_parser("trigger", parents=[common],
                       help="fire a TaskSchedule once, now (its own Task, named <schedule>-manual-<unix seconds>)")
    t.add_argument("schedule", metavar="SCHEDULE")


def trigger(args: argparse.Namespace) -> int:
    """Create the schedule's Task for this second, as a fire would: the same template, owner and
    labels, a name and key of its own (a second trigger within the same second is the same fire)."""
    from kubernetes.client.rest import ApiException
    from kubernetes.config import ConfigException

    from cronoq.api import GROUP, VERSION, TaskSchedule
    from cronoq.client import Client
    from cronoq.engine.schedule import task_manifest

    try:
        tasks = Client(namespace=args.namespace, kubeconfig=args.kubeconfig)
    except ConfigException as err:
        print(f"error: no cluster to talk to: {err}", file=sys.stderr)
        return 1
    namespace = tasks.namespace
    api = tasks.custom
    try:
        raw = api.get_namespaced_custom_object(GROUP, VERSION, namespace, "taskschedules", args.schedule)
    except ApiException as err:
        print(f"error: taskschedule {namespace}/{args.schedule}: {err.reason}", file=sys.stderr)
        return 1
    task = task_manifest(TaskSchedule.model_validate(raw), datetime.now(timezone.utc).replace(microsecond=0),
                         manual=True)
    name = task["metadata"]["name"]
    try:
        api.create_namespaced_custom_object(GROUP, VERSION, namespace, "tasks", task)
    except ApiException as err:
        if err.status == 409:
            print(f"task.cronoq.io/{name} exists already (triggered within the same second)")
            return 0
        print(f"error: creating task {namespace}/{name}: {err.reason}: {err.body}", file=sys.stderr)
        return 1
    print(f"task.cronoq.io/{name} created")
    return 0
