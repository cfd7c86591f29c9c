"""Acting as a ServiceAccount of the test cluster with a real token, not impersonation: a
kubeconfig whose user is a bound token from `kubectl create token`, for the same API server
and CA as the admin kubeconfig. The operator can run under it exactly as it would in its pod:

    path = service_account_kubeconfig(kubectl, "cronoq-system", "cronoq", tmp_path / "sa.kubeconfig")
    env = {**os.environ, "KUBECONFIG": str(path), "POD_NAMESPACE": "cronoq-system", "POD_NAME": "local"}
    subprocess.Popen(["cronoq", "operator", "--metrics-port=0", ...], env=env)

`as_service_account(...)` gives a `Kubectl` bound to that kubeconfig."""
from __future__ import annotations

import json
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.cluster import Kubectl


def service_account_kubeconfig(kubectl: Kubectl, namespace: str, name: str, path: Path,
                               duration: str = "1h") -> Path:
    """Write a kubeconfig for system:serviceaccount:<namespace>:<name> to `path` and return it.

    The token is bound to the ServiceAccount (deleting it revokes the token) and expires after
    `duration`; the context's default namespace is the ServiceAccount's."""
    token = kubectl("create", "token", name, f"--namespace={namespace}", f"--duration={duration}").stdout.strip()
    admin = json.loads(kubectl("config", "view", "--raw", "--minify", "--flatten", "-o", "json").stdout)
    (cluster,) = admin["clusters"]
    user = f"system:serviceaccount:{namespace}:{name}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster["name"], "cluster": cluster["cluster"]}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user, "namespace": namespace}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def as_service_account(kubectl: Kubectl, namespace: str, name: str, path: Path, duration: str = "1h") -> Kubectl:
    """kubectl acting as the ServiceAccount, through a kubeconfig written to `path`."""
    return Kubectl(kubectl.binary, str(service_account_kubeconfig(kubectl, namespace, name, path, duration)))


def as_token(api: client.ApiClient, token: str) -> client.ApiClient:
    """A client of the admin's API server and CA that presents `token`."""
    admin = api.configuration
    conf = client.Configuration(host=admin.host, api_key={"authorization": f"Bearer {token}"})
    conf.ssl_ca_cert = admin.ssl_ca_cert
    return client.ApiClient(conf)


def as_user(api: client.ApiClient, user: str) -> client.ApiClient:
    """The admin's client impersonating `user` (the admin may impersonate)."""
    impersonating = client.ApiClient(api.configuration)
    impersonating.set_default_header("Impersonate-User", user)
    return impersonating


def refusal(call) -> str:
    """The API server's refusal of `call()`, or '' when it was allowed."""
    try:
        call()
    except ApiException as err:
        assert err.status in (403, 422), err.body
        return err.body
    return ""
