"""The operator's connection to the API server: where it is and how to authenticate. Only the
kubernetes client's configuration is used; requests go through kube/session.py."""
from __future__ import annotations

from kubernetes import client, config


def api_client() -> client.ApiClient:
    """In a pod, the pod's ServiceAccount; elsewhere, the current kubeconfig context."""
    configuration = client.Configuration()
    try:
        # kubernetes.config's loaders carry no annotations (the generated client does)
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)
