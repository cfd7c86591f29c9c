"""The chart under test: paths, running helm, and rendering it into a list of objects."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "cronoq"
DATA = Path(__file__).resolve().parent / "data"


def helm_binary(devcluster) -> str:
    return os.environ.get("CRONOQ_HELM", str(devcluster.STATE / "bin" / "helm"))


def run_helm(binary: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    # A private HOME-like set of directories: no user repositories or plugins leak in.
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/cronoq-helm/cache",
           "HELM_CONFIG_HOME": "/tmp/cronoq-helm/config", "HELM_DATA_HOME": "/tmp/cronoq-helm/data"}
    result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=300, env=env)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}{result.stdout}")
    return result


def template_args(*, release: str = "cronoq", namespace: str = "cronoq-system",
                  values: list[Path] = (), sets: dict[str, str] | None = None,
                  set_json: dict[str, object] | None = None) -> list[str]:
    import json

    args = ["template", release, str(CHART), f"--namespace={namespace}"]
    for path in values:
        args.append(f"--values={path}")
    for key, value in (sets or {}).items():
        args.append(f"--set={key}={value}")
    for key, value in (set_json or {}).items():
        args.append(f"--set-json={key}={json.dumps(value)}")
    return args


def parse(manifest: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(manifest) if doc]


def find(objects: list[dict], kind: str, name: str | None = None, namespace: str | None = None) -> list[dict]:
    return [o for o in objects if o["kind"] == kind
            and (name is None or o["metadata"]["name"] == name)
            and (namespace is None or o["metadata"].get("namespace") == namespace)]


def only(objects: list[dict], kind: str, name: str | None = None, namespace: str | None = None) -> dict:
    found = find(objects, kind, name, namespace)
    assert len(found) == 1, f"expected one {kind} {name or ''} {namespace or ''}, found {len(found)}: {[o['metadata'] for o in found]}"
    return found[0]
