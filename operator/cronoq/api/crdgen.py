"""Generate crds/task.yaml, crds/taskpool.yaml and crds/taskschedule.yaml from the models, or check they are current.

    python -m cronoq.api.crdgen            # rewrite crds/
    python -m cronoq.api.crdgen --check    # exit 1, with a diff, if crds/ drifted from the models

The schema comes from pydantic's JSON Schema, made structural (what the API server demands of
a CRD) by a small transform, `structural()`:

1. `$ref`s are inlined from `$defs` (the models form a tree, so this terminates); a field's own
   description and default win over those of the model it refers to.
2. `anyOf: [X, {type: null}]` (an optional field) becomes X: cronoq leaves unset fields out
   instead of writing null, so `nullable` is never needed.
3. `title`s are dropped; `default: null` and `default: []` are dropped (an absent list means
   the same as an empty one, and the API server need not write `[]` into every object);
   descriptions are folded onto one line; keys are put in a fixed order (description and type
   first, then alphabetical, properties in the order of the model's fields).
   `additionalProperties: true` (a `dict[str, Any]`) becomes
   `x-kubernetes-preserve-unknown-fields: true`.
4. Everything else, including the `x-kubernetes-*` extensions the models put in
   `json_schema_extra`, passes through unchanged.

`audit()` then refuses a schema with a field lacking a description or a bound, so a model
change cannot silently produce a CRD the API server would reject for CEL cost or that
`kubectl explain` would not document.
"""
from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import Any, Iterator

import yaml
from pydantic import BaseModel

from cronoq.api.meta import GROUP, VERSION
from cronoq.api.pool import TaskPool
from cronoq.api.schedule import TaskSchedule
from cronoq.api.task import Task

REPO = Path(__file__).resolve().parents[3]
CRD_DIR = REPO / "crds"
HEADER = "# Generated from operator/cronoq/api by `python -m cronoq.api.crdgen`. Do not edit.\n"
CATEGORY = "cronoq"

Resource = Task | TaskPool | TaskSchedule
"""The models a CRD is made of (each has KIND and PLURAL)."""

# Kept as they are in every CRD: the API server validates these itself.
_ENVELOPE = {
    "apiVersion": {"type": "string", "description": "APIVersion of the object: cronoq.io/v1alpha1."},
    "kind": {"type": "string", "description": "Kind of the object."},
    "metadata": {"type": "object"},
}


def _key_order(key: str) -> tuple[int, str]:
    return ({"description": 0, "type": 1}.get(key, 2), key)


def structural(schema: dict[str, Any]) -> dict[str, Any]:
    """pydantic's JSON Schema of a model → a structural OpenAPI v3 schema (see module doc)."""
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        node = dict(node)
        node.pop("$defs", None)
        while True:  # peel references and optional wrappers until a plain schema is left
            if "$ref" in node:
                target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
                node = {**target, **node}
                continue
            options = node.get("anyOf")
            if options and {"type": "null"} in options:
                rest = [o for o in options if o != {"type": "null"}]
                node.pop("anyOf")
                if len(rest) == 1:
                    node = {**rest[0], **node}
                    continue
                node["anyOf"] = rest
            break
        if node.get("default", ...) in (None, []):
            node.pop("default")
        node.pop("title", None)
        if node.get("additionalProperties") is True:  # dict[str, Any]: free-form, say so the Kubernetes way
            node.pop("additionalProperties")
            node["x-kubernetes-preserve-unknown-fields"] = True
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "description":
                out[key] = " ".join(value.split())
            elif key in ("properties",):
                out[key] = {name: walk(sub) for name, sub in value.items()}
            elif key in ("default", "enum", "x-kubernetes-validations", "x-kubernetes-list-map-keys", "required"):
                out[key] = value
            else:
                out[key] = walk(value)
        if "$ref" in out or (out.keys() & {"allOf", "oneOf"}):
            raise ValueError(f"cannot make structural: {out}")
        return {key: out[key] for key in sorted(out, key=_key_order)}

    out = walk(schema)
    assert isinstance(out, dict)
    return out


def object_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The openAPIV3Schema of a resource model: its spec and status, the standard envelope."""
    schema = structural(model.model_json_schema(mode="serialization", by_alias=True))
    schema["properties"].update(_ENVELOPE)
    schema["required"] = [name for name in schema.get("required", []) if name not in _ENVELOPE]
    if not schema["required"]:
        del schema["required"]
    order = ["apiVersion", "kind", "metadata", "spec", "status"]
    schema["properties"] = {k: schema["properties"][k] for k in order}
    return schema


def _bounded(path: str, node: dict[str, Any]) -> Iterator[str]:
    kind = node.get("type")
    if kind == "string" and "enum" not in node and "maxLength" not in node:
        yield f"{path}: string without maxLength or enum"
    if kind in ("integer", "number") and not ("minimum" in node and "maximum" in node):
        yield f"{path}: number without minimum and maximum"
    if kind == "array" and "maxItems" not in node:
        yield f"{path}: list without maxItems"
    if kind == "object" and "additionalProperties" in node and "maxProperties" not in node:
        yield f"{path}: map without maxProperties"
    for key in ("exclusiveMinimum", "exclusiveMaximum", "const", "nullable"):
        if key in node:
            yield f"{path}: {key} is not used in cronoq CRDs"


def audit(schema: dict[str, Any], path: str = "") -> list[str]:
    """What is wrong with a resource schema: fields without description or without a bound."""
    problems: list[str] = []
    for name, sub in schema.get("properties", {}).items():
        here = f"{path}.{name}"
        if path == "" and name in _ENVELOPE:
            continue
        if not sub.get("description"):
            problems.append(f"{here}: no description")
        problems.extend(_bounded(here, sub))
        problems.extend(audit(sub, here))
    if "items" in schema:
        problems.extend(_bounded(f"{path}[]", schema["items"]))
        problems.extend(audit(schema["items"], f"{path}[]"))
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        problems.extend(_bounded(f"{path}{{}}", extra))
        problems.extend(audit(extra, f"{path}{{}}"))
    for option in schema.get("anyOf", []):  # int-or-string: the bounds sit beside the anyOf
        beside = {k: v for k, v in schema.items() if k != "anyOf"}
        problems.extend(_bounded(f"{path}|{option.get('type')}", {**beside, **option}))
    return problems


def _column(name: str, json_path: str, kind: str, description: str, priority: int = 0) -> dict[str, Any]:
    column: dict[str, Any] = {"name": name, "type": kind, "jsonPath": json_path, "description": description}
    if priority:
        column["priority"] = priority
    return column


_AGE = _column("Age", ".metadata.creationTimestamp", "date", "Time since the object was created.")

COLUMNS: dict[type[Resource], list[dict[str, Any]]] = {
    Task: [
        _column("Pool", ".spec.pool", "string", "TaskPool the task runs in."),
        _column("Status", ".status.phase", "string", "Phase of the task."),
        _column("Attempt", ".status.attempt", "integer", "Number of the newest attempt."),
        _AGE,
        _column("Message", ".status.summary", "string", "One-line summary of the task's state."),
        _column("Priority", ".spec.priority", "integer", "Queue priority within the pool.", priority=1),
        _column("Key", ".spec.key", "string", "Idempotency key.", priority=1),
        _column("Duplicate-Of", ".status.duplicateOf", "string", "Task whose outcome this one reports.", priority=1),
    ],
    TaskPool: [
        _column("Concurrency", ".spec.concurrency", "integer", "Most attempts running at once."),
        _column("Running", ".status.running", "integer", "Attempts running now."),
        _column("Queued", ".status.queued", "integer", "Tasks waiting for a slot."),
        _AGE,
        _column("Rate", ".spec.rateLimit.startsPerSecond", "number", "Attempts started per second at most.",
                priority=1),
        _column("Burst", ".spec.rateLimit.burst", "integer", "Attempts that may start at once.", priority=1),
    ],
    TaskSchedule: [
        _column("Schedule", ".status.schedule", "string", "Cron expression, or every <interval>."),
        _column("TimeZone", ".spec.timeZone", "string", "Time zone the cron expression is read in."),
        _column("Suspend", ".spec.suspend", "boolean", "Whether fires are suspended."),
        _column("Active", ".status.active", "integer", "Tasks of the schedule not yet finished."),
        _column("Last Fire", ".status.lastFireTime", "date", "Time since the newest fire created its Task."),
        # A string, not a date: kubectl prints a date in the future as <invalid>.
        _column("Next Fire", ".status.nextFireTime", "string", "Next fire time."),
        _AGE,
    ],
}

SHORT_NAMES: dict[type[Resource], list[str]] = {Task: ["tk"], TaskPool: ["tp"], TaskSchedule: ["ts"]}

# Field selectors (`kubectl get tasks --field-selector spec.pool=batch`), also for the operator's
# own lookups by pool and by key.
SELECTABLE: dict[type[Resource], list[str]] = {
    Task: [".spec.pool", ".spec.key", ".status.phase", ".status.worker"], TaskPool: [], TaskSchedule: []}


def crd(model: type[Resource]) -> dict[str, Any]:
    """The CustomResourceDefinition of a resource model."""
    kind, plural = model.KIND, model.PLURAL
    schema = object_schema(model)
    problems = audit(schema)
    if problems:
        raise ValueError(f"{kind} schema is incomplete:\n  " + "\n  ".join(problems))
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "subresources": {"status": {}},
        "additionalPrinterColumns": COLUMNS[model],
    }
    if SELECTABLE[model]:
        version["selectableFields"] = [{"jsonPath": p} for p in SELECTABLE[model]]
    version["schema"] = {"openAPIV3Schema": schema}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": SHORT_NAMES[model],
                "categories": [CATEGORY],
            },
            "scope": "Namespaced",
            "versions": [version],
        },
    }


class _Dumper(yaml.SafeDumper):
    """Block style, long lines kept whole, multi-line strings as literal blocks, no anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render(definition: dict[str, Any]) -> str:
    return HEADER + yaml.dump(definition, Dumper=_Dumper, sort_keys=False, width=1_000_000, allow_unicode=True)


def generated() -> dict[str, str]:
    """File name → content of every CRD file."""
    return {f"{model.KIND.lower()}.yaml": render(crd(model)) for model in (Task, TaskPool, TaskSchedule)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cronoq.api.crdgen", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the files differ from the models")
    parser.add_argument("--out", type=Path, default=CRD_DIR, help=f"directory of the CRD files (default {CRD_DIR})")
    args = parser.parse_args(argv)
    return write_or_check({args.out / name: text for name, text in generated().items()}, check=args.check,
                          command="python -m cronoq.api.crdgen")


def write_or_check(files: dict[Path, str], *, check: bool, command: str) -> int:
    """Write the files generated from the models, or (check) print how the committed ones differ
    and return 1 when any does: one way for every generator (CRDs, reference pages)."""
    drifted = []
    for path, text in files.items():
        current = path.read_text() if path.exists() else ""
        if current == text:
            continue
        if check:
            drifted.append(path.name)
            sys.stdout.writelines(difflib.unified_diff(
                current.splitlines(keepends=True), text.splitlines(keepends=True), f"{path} (committed)",
                f"{path} (from the models)"))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    if drifted:
        print(f"\n{', '.join(drifted)} drifted from the models: run `{command}`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
