"""constraints.txt pins every package the Makefile and the Dockerfile install, and agrees with the
direct pins of pyproject.toml: a pin bumped in one place only would make pip refuse the install
(or, worse, a stale constraint nobody meant)."""
from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]


def _pins(lines: list[str]) -> dict[str, str]:
    pins = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            specs = list(requirement.specifier)
            assert len(specs) == 1 and specs[0].operator == "==", f"not an exact pin: {line!r}"
            pins[canonicalize_name(requirement.name)] = specs[0].version
    return pins


def test_every_direct_pin_of_pyproject_is_constrained_at_the_same_version():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    direct = _pins(project["dependencies"] + [r for extra in project["optional-dependencies"].values()
                                                for r in extra])
    constrained = _pins((REPO / "constraints.txt").read_text().splitlines())
    assert {n: v for n, v in direct.items() if constrained.get(n) != v} == {}
    assert "cronoq" not in constrained  # the project itself is never a constraint


def test_the_makefile_and_the_dockerfile_install_under_the_constraints():
    makefile = (REPO / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if "pip install" in line and "-e " in line]
    assert installs and all("-c constraints.txt" in line for line in installs), installs
    assert "pip install '.[postgres,otel]' --constraint constraints.txt" in (REPO / "Dockerfile").read_text()
