"""Test access to the real control plane: the kubeconfig, clients, kubectl, per-test namespaces."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load_devcluster():
    """hack/devcluster.py is a script, not a package; load it by path."""
    spec = importlib.util.spec_from_file_location("devcluster", REPO / "hack" / "devcluster.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Kubectl:
    """The kubectl built with the control plane, bound to the test cluster's kubeconfig."""

    binary: str
    kubeconfig: str

    def __call__(self, *args: str, input: str | None = None, check: bool = True,
                 namespace: str | None = None) -> subprocess.CompletedProcess:
        argv = [self.binary, f"--kubeconfig={self.kubeconfig}"]
        if namespace:
            argv.append(f"--namespace={namespace}")
        result = subprocess.run([*argv, *args], input=input, capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
        return result


def namespace_name(test_name: str, prefix: str = "t") -> str:
    """A DNS-1123 namespace name unique per test: a readable prefix and a random suffix.
    `t-` namespaces are served by the session's operator; others by a test's own."""
    stem = "".join(c if c.isalnum() else "-" for c in test_name.lower()).strip("-")[:40].strip("-")
    return f"{prefix}-{stem}-{uuid.uuid4().hex[:6]}"


def kubectl_binary(devcluster) -> str:
    linked = devcluster.STATE / "bin" / "kubectl"
    return os.environ.get("CRONOQ_KUBECTL", str(linked))
