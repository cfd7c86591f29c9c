"""Where a worker or a client is (its namespace) and who a pull worker is (its name): found in one
place for the worker SDK (`worker/serve.py`) and the client library (`client/client.py`)."""
from __future__ import annotations

import os
import random
import re
import socket

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
POD_PREFIX = 56
"""Characters of the pod name a worker's name starts with (63, less a dash and 6 random)."""


def pod_namespace() -> str | None:
    """The namespace of the pod this runs in (its ServiceAccount's), None outside a pod."""
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as f:
            return f.read().strip() or None
    except OSError:
        return None


def context_namespace(kubeconfig: str | None, context: str | None = None) -> str | None:
    """The namespace of the kubeconfig's `context` (default its current one), None when it names none
    or the kubeconfig cannot be read."""
    from cronoq.apiserver import config

    return config.context_namespace(kubeconfig, context)


def worker_namespace(kubeconfig: str | None) -> str:
    """A pull worker's namespace: CRONOQ_NAMESPACE or POD_NAMESPACE, else the pod's, else the
    kubeconfig context's (`kubeconfig`, else $KUBECONFIG), else `default`."""
    return (os.environ.get("CRONOQ_NAMESPACE") or os.environ.get("POD_NAMESPACE") or pod_namespace()
            or context_namespace(kubeconfig or os.environ.get("KUBECONFIG")) or "default")


def worker_name(pool: str) -> str:
    """A DNS label of at most 63 characters, new for every process, so a restarted worker is never
    taken for the one before it: in a pod, `<pod name, cut to 56, trailing dashes and dots trimmed>-<6
    random>` (the chart's worker policy checks that prefix against the pod its token is bound to),
    else `<pool>-<host>-<random>`."""
    suffix = "".join(random.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=6))
    pod = os.environ.get("POD_NAME")
    base = pod[:POD_PREFIX] if pod else re.sub(r"[^a-z0-9-]", "-", f"{pool}-{socket.gethostname()}".lower())
    return f"{base[:POD_PREFIX].strip('-.')}-{suffix}"
