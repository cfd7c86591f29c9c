"""Where the API server is and how to authenticate: a `Connection` (host, TLS, proxy, bearer token),
read from a kubeconfig or, in a pod, from its ServiceAccount.

This is the one module of cronoq that imports the `kubernetes` package, for its kubeconfig and
in-cluster loaders only: they read every kubeconfig users have (exec credential plugins, auth
providers, certificates given inline, contexts, the in-cluster token that rotates), which writing
again would be worse. Requests never go through the package (`sync.py`, `aio.py`).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import kubernetes
from kubernetes import client, config
from kubernetes.client.rest import should_bypass_proxies

USER_AGENT = f"OpenAPI-Generator/{kubernetes.__version__}/python"
"""The kubernetes client's own User-Agent, which cronoq's requests have always carried (the bench's
audit tells them by it)."""


class ConfigError(Exception):
    """No API server to talk to: no kubeconfig (or not a valid one), and not in a pod."""


@dataclass
class Connection:
    """An API server and the credentials to reach it with. `token()` asks the loader for the bearer
    token each time (its refresh hook re-reads a rotated in-cluster token, or runs an exec plugin
    when the token expired): callers ask it as often as they need a fresh one."""

    host: str
    verify: bool = True
    ca_file: str | None = None
    ca_data: str | bytes | None = None
    cert_file: str | None = None
    key_file: str | None = None
    check_hostname: bool = True
    server_name: str | None = None
    """The name TLS expects (`tls-server-name`), when it is not the host's."""
    proxy: str | None = None
    bypass_proxy: bool = False
    """The host matches a `no_proxy` rule: a blocking client goes to it directly."""
    proxy_headers: dict[str, str] | None = None
    pool_size: int | None = None
    """Connections a blocking client keeps per host (the kubernetes client's default: 5 per CPU)."""
    _configuration: Any = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def token(self) -> str | None:
        """The Authorization header's value (`Bearer ...`), or None."""
        if self._configuration is None:
            return None
        with self._lock:  # the refresh hooks rewrite the configuration: one at a time
            token = self._configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
        return None if token is None else str(token)


def _connection(configuration: client.Configuration) -> Connection:
    return Connection(
        host=configuration.host, verify=bool(configuration.verify_ssl), ca_file=configuration.ssl_ca_cert,
        ca_data=configuration.ca_cert_data, cert_file=configuration.cert_file, key_file=configuration.key_file,
        check_hostname=configuration.assert_hostname is not False, server_name=configuration.tls_server_name or None,
        proxy=configuration.proxy or None,
        bypass_proxy=bool(configuration.proxy) and should_bypass_proxies(configuration.host, configuration.no_proxy or ""),
        proxy_headers=configuration.proxy_headers, pool_size=configuration.connection_pool_maxsize,
        _configuration=configuration)


def in_cluster() -> Connection:
    """The pod's ServiceAccount (its token and CA); ConfigError outside a pod."""
    configuration = client.Configuration()
    try:
        # kubernetes.config's loaders carry no annotations (the generated client does)
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException as err:
        raise ConfigError(str(err)) from None
    return _connection(configuration)


def from_kubeconfig(path: str | None = None, context: str | None = None) -> Connection:
    """The kubeconfig at `path` (default $KUBECONFIG, else ~/.kube/config), its `context` (default
    its current one); ConfigError when there is none or it is not valid."""
    configuration = client.Configuration()
    try:
        config.load_kube_config(config_file=path, context=context,  # type: ignore[no-untyped-call]
                                client_configuration=configuration)
    except config.ConfigException as err:
        raise ConfigError(str(err)) from None
    return _connection(configuration)


def connect(kubeconfig: str | None = None) -> Connection:
    """The kubeconfig at `kubeconfig` when given; else in a pod its ServiceAccount; else the
    default kubeconfig."""
    if kubeconfig:
        return from_kubeconfig(kubeconfig)
    try:
        return in_cluster()
    except ConfigError:
        return from_kubeconfig()


def context_namespace(kubeconfig: str | None, context: str | None = None) -> str | None:
    """The namespace of the kubeconfig's `context` (default its current one), None when it names none
    or the kubeconfig cannot be read."""
    try:
        contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        chosen = next((c for c in contexts if c.get("name") == context), current) if context else current
        namespace = (chosen.get("context") or {}).get("namespace")
    except Exception:  # noqa: BLE001 - no kubeconfig, or not one: the caller's default
        return None
    return None if namespace is None else str(namespace)

