"""The operator image, checked without a container engine: the build context .dockerignore
leaves is exactly what `pip install .` needs, the package found in it is the whole package, the
image's user is the one the chart runs as, and the flags the chart passes are ones
`cronoq operator` accepts."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib

import pytest
import yaml
from setuptools import find_packages

from tests.chart.chart import CHART, REPO

DOCKERFILE = (REPO / "Dockerfile").read_text()


def instructions() -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", DOCKERFILE)
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip())
            for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def ignore_patterns() -> list[tuple[bool, re.Pattern]]:
    """.dockerignore as (negated, regex), matched like moby's patternmatcher: `*` and `?` stay
    within a path segment, `**` spans segments, a pattern also matches everything below a
    directory it matches, and the last matching pattern decides."""
    patterns = []
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        regex = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex, i = regex + "(.*/)?", i + 3
            elif pattern.startswith("**", i):
                regex, i = regex + ".*", i + 2
            elif pattern[i] == "*":
                regex, i = regex + "[^/]*", i + 1
            elif pattern[i] == "?":
                regex, i = regex + "[^/]", i + 1
            elif pattern[i] == "[":
                end = pattern.index("]", i)
                regex, i = regex + pattern[i:end + 1], end + 1
            else:
                regex, i = regex + re.escape(pattern[i]), i + 1
        patterns.append((negated, re.compile(regex + "$")))
    return patterns


def in_context(path: str, patterns=None) -> bool:
    patterns = patterns if patterns is not None else ignore_patterns()
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for negated, regex in patterns:
        if any(regex.match(prefix) for prefix in prefixes):
            excluded = not negated
    return not excluded


def repository_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split()
    return [f for f in listed if (REPO / f).is_file()]


def context_files() -> list[str]:
    patterns = ignore_patterns()
    return sorted(f for f in repository_files() if in_context(f, patterns))


def test_build_context_is_the_package_and_its_metadata_only():
    context = context_files()
    package = sorted(f for f in repository_files() if f.startswith("operator/cronoq/") and "__pycache__" not in f)
    assert context == sorted(["pyproject.toml", "README.md", "constraints.txt", *package])
    # What must never reach a build: the test cluster's keys, the venv, caches, build leftovers.
    for secret in (".cluster/kubeconfig", ".cluster/pki/ca.key", ".venv/bin/python", ".git/config",
                   "operator/cronoq.egg-info/PKG-INFO", "operator/cronoq/__pycache__/cli.cpython-311.pyc",
                   "tests/conftest.py", "charts/cronoq/values.yaml"):
        assert not in_context(secret), secret


def test_every_copy_source_is_in_the_build_context():
    context = context_files()
    copies = [args.split()[:-1] for op, args in instructions() if op == "COPY" and "--from" not in args]
    assert copies, "the Dockerfile copies nothing"
    for sources in copies:
        for source in sources:
            source = source.rstrip("/")
            assert source in context or any(f.startswith(source + "/") for f in context), source


def test_pip_install_from_the_context_finds_the_whole_package(tmp_path):
    for f in context_files():
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, tmp_path / f)
    project = tomllib.loads((tmp_path / "pyproject.toml").read_text())
    where = project["tool"]["setuptools"]["packages"]["find"]["where"]
    # setuptools' own discovery, as `pip install .` runs it on the copied context.
    found = sorted(p for w in where for p in find_packages(str(tmp_path / w)))
    assert found == sorted(p for w in where for p in find_packages(str(REPO / w)))
    assert "cronoq" in found and (tmp_path / project["project"]["readme"]).is_file()
    for script in ("cronoq", "kubectl-cronoq"):  # the CLI, and the same as a kubectl plugin
        module, function = project["project"]["scripts"][script].split(":")
        base = tmp_path / "operator" / module.replace(".", "/")
        source = (base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py").read_text()
        assert re.search(rf"^def {function}\(", source, re.M), f"{module} defines no {function}()"
    assert project["project"]["requires-python"] == ">=3.11"


def test_image_runs_cronoq_operator_as_the_user_the_chart_expects():
    ops = instructions()
    # The base is a build argument: the official Python image unless a build gives another
    # (hack/image.py gives a Debian-made one where no registry is reachable).
    (base,) = [args for op, args in ops if op == "FROM"]
    assert base == "${BASE}", base
    (default,) = [args.split("=", 1)[1] for op, args in ops if op == "ARG" and args.startswith("BASE=")]
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", default), default
    assert DOCKERFILE.index("ARG BASE=") < DOCKERFILE.index("FROM ${BASE}")
    users = [args for op, args in ops if op == "USER"]
    assert users[-1] == "65532:65532"
    (entrypoint,) = [args for op, args in ops if op == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["cronoq", "operator"]
    # With the postgres extra: the archive's Postgres driver (--archive postgresql://...); with the
    # otel extra: the OpenTelemetry SDK, imported only when OTEL_* turns tracing on.
    assert any(op == "RUN" and "pip install '.[postgres,otel]' --constraint constraints.txt" in args for op, args in ops)
    # A venv: Debian's system Python refuses pip installs (PEP 668); the official image's does not.
    assert any(op == "RUN" and "python3 -m venv /opt/cronoq" in args for op, args in ops)
    assert any(op == "ENV" and "PATH=/opt/cronoq/bin:" in args for op, args in ops)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == values["securityContext"]["runAsUser"] == 65532
    assert values["podSecurityContext"]["runAsGroup"] == 65532
    # The push runner and the heartbeat sidecar run from this image as this user too.
    from cronoq.engine.jobs import OPERATOR_IMAGE_USER
    assert users[-1] == f"{OPERATOR_IMAGE_USER}:{OPERATOR_IMAGE_USER}"


@pytest.mark.parametrize("values", [
    {},
    {"watchNamespaces": ["a", "b"], "operator": {"logLevel": "debug", "leaderElection": {"leaseNamespace": "elsewhere"}}},
    {"replicaCount": 1, "operator": {"leaderElection": {"enabled": False}}},
], ids=["defaults", "namespaces", "no-leader-election"])
def test_flags_the_chart_passes_are_accepted_by_cronoq_operator(render, values, capsys):
    from cronoq.cli import parser

    (container,) = [o for o in render(set_json=values) if o["kind"] == "Deployment"][0]["spec"]["template"]["spec"]["containers"]
    try:
        parser().parse_args(["operator", *container["args"]])
    except SystemExit as exit:
        pytest.fail(f"`cronoq operator {' '.join(container['args'])}` is refused ({exit.code}): {capsys.readouterr().err}")
