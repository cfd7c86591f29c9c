"""The keys the operator reads are protected at admission from one list (DESIGN §20, issue 49): the
chart's copy (templates/_protected_keys.tpl) is generated from cronoq.pod_protocol and must not
drift, and every `cronoq.io/` key the operator's code reads is in that list or exempted with a
reason, so a key added tomorrow is protected (or fails here) the day it is added."""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Any, Iterator

from cronoq import pod_protocol
from cronoq.api import keysgen
from cronoq.pod_protocol import PROTECTED_ANNOTATIONS, PROTECTED_KEYS, PROTECTED_LABELS, UNPROTECTED_KEYS, Annotation, Label

OPERATOR = Path(pod_protocol.__file__).resolve().parents[1]
"""operator/cronoq"""
READERS = ("controller", "kube", "engine")
"""The operator's packages: what they read on the objects they watch."""
PREFIX = Label.PREFIX
API = re.compile(r"^cronoq\.io/v\d")  # an apiVersion, not a key


def test_the_chart_file_is_the_one_the_protocol_gives() -> None:
    assert keysgen.TEMPLATE.read_text() == keysgen.generated(), (
        "charts/cronoq/templates/_protected_keys.tpl drifted from cronoq.pod_protocol: run `python -m cronoq.api.keysgen`"
        " (or `make crds`)")


def test_check_mode_reports_drift(tmp_path, capsys) -> None:
    out = tmp_path / "_protected_keys.tpl"
    assert keysgen.main(["--out", str(out)]) == 0
    assert keysgen.main(["--check", "--out", str(out)]) == 0
    out.write_text(out.read_text().replace('"cronoq.io/checkpoint", ', ""))
    assert keysgen.main(["--check", "--out", str(out)]) == 1
    assert "cronoq.io/checkpoint" in capsys.readouterr().out


def test_every_label_and_annotation_of_the_protocol_is_protected_or_exempted_with_a_reason() -> None:
    declared = {v for cls in (Label, Annotation) for k, v in vars(cls).items()
                if k.isupper() and k != "PREFIX" and isinstance(v, str)}
    assert declared == set(PROTECTED_KEYS) | (declared & set(UNPROTECTED_KEYS))
    assert not set(PROTECTED_KEYS) & set(UNPROTECTED_KEYS)
    assert all(len(reason) > 20 for reason in UNPROTECTED_KEYS.values())
    assert set(PROTECTED_LABELS) <= {v for k, v in vars(Label).items() if k.isupper()}
    assert set(PROTECTED_ANNOTATIONS) <= {v for k, v in vars(Annotation).items() if k.isupper()}
    # The keys a task pod and a pull worker write, which the operator fences on, are among them.
    for key in (Label.TASK_UID, Label.ATTEMPT, Label.LEASE_ID, Label.WORKER, Label.WORKER_POOL,
                Annotation.CHECKPOINT, Annotation.REPORT, Annotation.CAPACITY):
        assert key in PROTECTED_KEYS, key


def _value(node: ast.AST, module: Any) -> Any:
    """What a name, an attribute chain or a `prefix + "..."` in `module` stands for (None: unknown)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return getattr(module, node.id, None)
    if isinstance(node, ast.Attribute):
        owner = _value(node.value, module)
        return getattr(owner, node.attr, None) if owner is not None else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _value(node.left, module), _value(node.right, module)
        return left + right if isinstance(left, str) and isinstance(right, str) else None
    return None


def keys_read(package: str) -> Iterator[tuple[str, str]]:
    """(key, where) for every `cronoq.io/...` string the package's code names: literals, constants
    it imports (Label.X, naming.TASK_UID, SCHEDULE) and `LABEL_PREFIX + "..."`."""
    for path in sorted((OPERATOR / package).rglob("*.py")):
        name = "cronoq." + ".".join(path.relative_to(OPERATOR).with_suffix("").parts).removesuffix(".__init__")
        module = importlib.import_module(name)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.Constant, ast.Name, ast.Attribute, ast.BinOp)):
                continue
            value = _value(node, module)
            if isinstance(value, str) and value.startswith(PREFIX) and value != PREFIX and not API.match(value):
                # A key is one word after the prefix: not a sentence that mentions one.
                if re.fullmatch(r"cronoq\.io/[a-z0-9][-a-z0-9.]*", value):
                    yield value, f"{path.relative_to(OPERATOR.parent)}:{getattr(node, 'lineno', '?')}"


def test_every_key_the_operator_reads_is_protected_or_exempted() -> None:
    found = [(key, where) for package in READERS for key, where in keys_read(package)]
    # The scan sees what it must (it is not vacuous): a Lease's checkpoint, a Job's task uid, a
    # fire's schedule label.
    seen = {key for key, _ in found}
    assert {Annotation.CHECKPOINT, Label.TASK_UID, Label.WORKER_POOL, "cronoq.io/schedule"} <= seen, seen
    missing = sorted({(key, where) for key, where in found if key not in PROTECTED_KEYS and key not in UNPROTECTED_KEYS})
    assert not missing, (
        f"the operator reads cronoq keys the admission policies do not protect: {missing}. Declare the key in "
        "cronoq.pod_protocol Label or Annotation (then `make crds` protects it), or, if admission must not guard it, "
        "add it to pod_protocol.UNPROTECTED_KEYS with the reason")


def test_the_schedule_exemptions_are_the_engines_keys() -> None:
    from cronoq.engine.schedule import FIRE_TIME, SCHEDULE, TRIGGER

    assert {SCHEDULE, FIRE_TIME, TRIGGER} <= set(UNPROTECTED_KEYS)


def test_the_submitter_policy_guards_the_annotation_the_operator_reads() -> None:
    """Issue 54: the chart's submitter policy names the same annotation as api.pool.SUBMITTER."""
    from cronoq.api import SUBMITTER

    policy = (OPERATOR.parents[1] / "charts" / "cronoq" / "templates" / "submitter-policy.yaml").read_text()
    assert f'{{{{- $key := "{SUBMITTER}" }}}}' in policy
    assert SUBMITTER in UNPROTECTED_KEYS and SUBMITTER not in PROTECTED_KEYS
