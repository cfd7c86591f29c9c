"""The operator's connection to the API server."""
from __future__ import annotations

from kubernetes import client, config


def api_client(retries: bool = True) -> client.ApiClient:
    """In a pod, the pod's ServiceAccount; elsewhere, the current kubeconfig context. Without
    `retries`, a request that fails or times out raises at once (urllib3 would repeat it 3 times)."""
    configuration = client.Configuration()
    try:
        # kubernetes.config's loaders carry no annotations (the generated client does)
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = 32
    if not retries:
        configuration.retries = False
    return client.ApiClient(configuration)
