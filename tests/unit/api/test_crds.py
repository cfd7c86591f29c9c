"""crds/ is generated from the models: it must not drift, and it must be a CRD worth installing."""
from __future__ import annotations

from typing import Any, Iterator

import pytest
import yaml

from cronoq.api import Task, TaskPool, TaskSchedule, crdgen
from cronoq.api.durations import PATTERN
from cronoq.api.task import TERMINAL_PHASES, TaskSpec


def schema_of(model: type) -> dict[str, Any]:
    return crdgen.crd(model)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from nodes(sub, f"{path}.{name}")
    if "items" in schema:
        yield from nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}{{}}")


def test_committed_crds_match_the_models() -> None:
    for name, text in crdgen.generated().items():
        committed = (crdgen.CRD_DIR / name).read_text()
        assert committed == text, f"crds/{name} drifted from the models: run `python -m cronoq.api.crdgen`"


def test_check_mode_reports_drift(tmp_path, capsys) -> None:
    assert crdgen.main(["--out", str(tmp_path)]) == 0
    assert crdgen.main(["--check", "--out", str(tmp_path)]) == 0
    path = tmp_path / "task.yaml"
    path.write_text(path.read_text().replace("maxItems: 32", "maxItems: 33", 1))
    assert crdgen.main(["--check", "--out", str(tmp_path)]) == 1
    assert "maxItems: 33" in capsys.readouterr().out


@pytest.mark.parametrize("model", [Task, TaskPool, TaskSchedule])
def test_schema_is_structural(model: type) -> None:
    for path, node in nodes(schema_of(model)):
        assert "$ref" not in node and "$defs" not in node and "title" not in node, path
        assert not (node.keys() & {"allOf", "oneOf", "not", "nullable", "additionalItems"}), path
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") and node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        if "type" not in node:
            assert node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-int-or-string"), path
        if node.get("type") == "object":
            assert not ("properties" in node and "additionalProperties" in node), path


@pytest.mark.parametrize("model", [Task, TaskPool, TaskSchedule])
def test_every_field_is_described_and_bounded(model: type) -> None:
    assert crdgen.audit(schema_of(model)) == []


def test_audit_catches_what_it_should() -> None:
    bad = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "name": {"type": "string"},
        "count": {"type": "integer", "description": "n", "minimum": 0},
        "items": {"type": "array", "description": "l", "items": {"type": "string", "maxLength": 3}},
    }}}}
    problems = "\n".join(crdgen.audit(bad))
    for expected in [".spec: no description", ".spec.name: no description", ".spec.name: string without maxLength",
                     ".spec.count: number without minimum and maximum", ".spec.items: list without maxItems"]:
        assert expected in problems


def test_names_and_shape_of_the_task_crd() -> None:
    crd = crdgen.crd(Task)
    assert crd["metadata"]["name"] == "tasks.cronoq.io"
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["singular"]) == ("Task", "tasks", "task")
    assert names["shortNames"] == ["tk"] and names["categories"] == ["cronoq"]
    assert crd["spec"]["scope"] == "Namespaced"
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    assert version["schema"]["openAPIV3Schema"]["required"] == ["spec"]


def test_printer_columns() -> None:
    def columns(model: type) -> list[tuple[str, str, int]]:
        version = crdgen.crd(model)["spec"]["versions"][0]
        return [(c["name"].upper(), c["jsonPath"], c.get("priority", 0)) for c in version["additionalPrinterColumns"]]

    task = columns(Task)
    assert [name for name, _, priority in task if priority == 0] == ["POOL", "STATUS", "ATTEMPT", "AGE", "MESSAGE"]
    assert ("STATUS", ".status.phase", 0) in task and ("MESSAGE", ".status.summary", 0) in task
    pool = columns(TaskPool)
    assert [name for name, _, priority in pool if priority == 0] == ["CONCURRENCY", "RUNNING", "QUEUED", "AGE"]
    assert ("RATE", ".spec.rateLimit.startsPerSecond", 1) in pool and ("BURST", ".spec.rateLimit.burst", 1) in pool


def test_short_message_column_is_short() -> None:
    summary = schema_of(Task)["properties"]["status"]["properties"]["summary"]
    assert summary["maxLength"] <= 100


def test_defaults_in_the_crd_are_the_models() -> None:
    pool = schema_of(TaskPool)["properties"]["spec"]
    retry = pool["properties"]["retry"]["properties"]
    assert {k: v.get("default") for k, v in retry.items()} == {
        "maxAttempts": 3, "initialBackoff": "1s", "multiplier": 2.0, "maxBackoff": "1m", "jitter": "full",
        "permanentExitCodes": None, "maxRetryDuration": None, "rules": None, "maxIgnoredAttempts": 10}
    assert pool["default"] == {} and pool["properties"]["retry"]["default"] == {}
    assert pool["properties"]["leaseTTL"]["default"] == "30s"
    assert pool["properties"]["keyRetention"]["default"] == "1h"
    spec = schema_of(Task)["properties"]["spec"]["properties"]
    assert spec["pool"]["default"] == "default" and spec["priority"]["default"] == 0
    assert spec["cancel"]["default"] is False
    # A task's retry inherits field by field from its pool, so the CRD must not fill it in.
    assert all("default" not in field for field in spec["retry"]["properties"].values())


def test_durations_share_one_pattern() -> None:
    found = [(path, node) for model in (Task, TaskPool) for path, node in nodes(schema_of(model))
             if node.get("pattern") == PATTERN]
    paths = {path for path, _ in found}
    assert {".spec.timeout", ".spec.retry.initialBackoff", ".spec.retry.maxBackoff", ".spec.leaseTTL",
            ".spec.keyRetention"} <= paths
    for path, node in found:
        assert any("duration(self)" in r["rule"] for r in node["x-kubernetes-validations"]), path


def rules(node: dict[str, Any]) -> list[dict[str, str]]:
    return node.get("x-kubernetes-validations", [])


def test_every_rule_names_its_field() -> None:
    """The API server prefixes an error with the path of the node holding the rule, plus
    fieldPath; a rule at the root with no fieldPath must name the field in its message."""
    for model in (Task, TaskPool, TaskSchedule):
        for path, node in nodes(schema_of(model)):
            for r in rules(node):
                assert r["message"] and r["reason"].startswith("FieldValue"), (path, r)
                if path == "" and "fieldPath" not in r:
                    assert "." in r["message"].split()[0], (model.KIND, r)


def test_spec_immutability_covers_every_field_but_cancel_and_priority() -> None:
    """One rule for the whole spec, cheap when the spec is unchanged (every status write), whose
    message names each field that changed."""
    import re
    spec = schema_of(Task)["properties"]["spec"]
    (immutable,) = [r for r in rules(spec) if "immutable" in r["message"]]
    assert immutable["rule"].startswith("self == oldSelf || ")
    named = set(re.findall(r"'spec\.(\w+) '", immutable["messageExpression"]))
    fields = {info.alias or name for name, info in TaskSpec.model_fields.items()}
    assert named == fields - {"cancel", "priority"}
    assert any(r["rule"] == "!oldSelf.cancel || self.cancel" for r in rules(spec))


def test_the_status_rules_sit_where_they_read_and_the_fixed_ones_run_on_create_only() -> None:
    schema = schema_of(Task)
    root = {r.get("fieldPath"): r for r in rules(schema)}
    status = schema["properties"]["status"]
    assert "self.metadata.name" in root[".spec.dependsOn"]["rule"]
    assert root[".status"]["rule"] == "!has(oldSelf.status) || has(self.status)"
    for field in ("attempt", "epoch"):
        assert [r["rule"] for r in rules(status["properties"][field])] == ["self >= oldSelf"]
    phase_rule = {r.get("fieldPath"): r for r in rules(status)}[".phase"]["rule"]
    for phase in TERMINAL_PHASES:
        assert f"'{phase}'" in phase_rule and f"'{phase}'" in root[".spec.priority"]["rule"]
    # What cannot change after creation is checked on create only: each status write skips it.
    create_only = [r for r in rules(schema) + rules(schema["properties"]["spec"]) if r.get("optionalOldSelf")]
    assert {r.get("fieldPath") for r in create_only} == {None, ".spec.dependsOn", ".http", ".startDelay"}
    assert all(r["rule"].startswith("oldSelf.hasValue() || (") for r in create_only)


def test_payload_and_template_spec_are_free_form() -> None:
    spec = schema_of(Task)["properties"]["spec"]["properties"]
    assert spec["payload"]["x-kubernetes-preserve-unknown-fields"] is True
    assert spec["template"]["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"] is True


def test_rendered_yaml_is_plain() -> None:
    for text in crdgen.generated().values():
        assert text.startswith("# Generated")
        assert "&id" not in text and "*id" not in text, "no YAML anchors"
        assert yaml.safe_load(text)["kind"] == "CustomResourceDefinition"
