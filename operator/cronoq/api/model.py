"""The base of every cronoq API model, the CEL rules that sit beside it, and the small bounded
types the models share (names, times, quantities, label values, the attempt timeout).

Every model is the single source of truth for its part of the CRD: field docstrings become the
descriptions `kubectl explain` prints, pydantic constraints become the schema's bounds, and CEL
rules (`x-kubernetes-validations`) sit in `json_schema_extra` next to the model they guard.
`cronoq.api.crdgen` turns the models into crds/*.yaml.

Bounds are chosen so that the API server can estimate the cost of every CEL rule (each string
has maxLength, each list maxItems, each map maxProperties) and so that no status can grow
without limit.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Final, Union

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

from cronoq.api.durations import DurationBounds


def snake_case(name: str) -> str:
    """`DeadLettered` → `dead_lettered`: phases and outcomes as metric label values and as the
    pool status' count fields."""
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))


class Model(BaseModel):
    """Base of every cronoq API model: immutable, camelCase on the wire, snake_case in Python."""

    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
        # Fields the models do not know (say, written by a newer CRD) are dropped, not fatal.
        extra="ignore",
    )

    def to_dict(self) -> dict[str, Any]:
        """The object as Kubernetes stores it: camelCase keys; unset optional fields, and lists
        and maps that are empty by default, left out (so a dump reads like its manifest)."""
        return _omit_empty(self, self.model_dump(mode="json", by_alias=True, exclude_none=True))


def _omit_empty(model: Model, data: dict[str, Any]) -> dict[str, Any]:
    for name, info in type(model).model_fields.items():
        key = info.alias or name
        if key not in data:
            continue
        value = getattr(model, name)
        if isinstance(value, Model):
            _omit_empty(value, data[key])
        elif isinstance(value, tuple) and value and all(isinstance(v, Model) for v in value):
            for item, item_data in zip(value, data[key]):
                _omit_empty(item, item_data)
        elif data[key] in ([], {}) and _empty_by_default(info):
            del data[key]
    return data


def _empty_by_default(info: Any) -> bool:
    if info.default_factory is not None:
        return info.default_factory in (dict, list, tuple)
    return info.default in ((), [], {})


def rule(expression: str, message: str, *, field_path: str | None = None,
         reason: str = "FieldValueInvalid") -> dict[str, str]:
    """One entry of `x-kubernetes-validations`. `message` should name the field it is about."""
    entry = {"rule": expression, "message": message}
    if field_path:
        entry["fieldPath"] = field_path
    entry["reason"] = reason
    return entry


def on_create(entry: dict[str, str]) -> dict[str, Any]:
    """`entry`, checked when the object is created and skipped on every update: for a rule about
    what cannot change afterwards (metadata.name, a spec another rule keeps fixed). The API server
    runs every rule of the whole object on every write, status writes included, and a rule that
    reads fields is paid in allocations for each (`optionalOldSelf` makes `oldSelf` absent on create
    only; docs/development/benchmarks.md has the profile)."""
    return {**entry, "rule": f"oldSelf.hasValue() || ({entry['rule']})", "optionalOldSelf": True}


def validations(*rules: dict[str, Any]) -> dict[str, Any]:
    """`json_schema_extra` carrying CEL rules."""
    return {"x-kubernetes-validations": list(rules)}


# --- names and small bounded types ---------------------------------------------------------

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

ObjectName = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)]
"""Task and pool names: DNS labels, because they end up in Job names and label values."""

SubdomainName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]

Timestamp = Annotated[AwareDatetime, WithJsonSchema({"type": "string", "format": "date-time", "maxLength": 64})]
"""RFC 3339 time with a zone, as Kubernetes writes it (`2025-01-02T03:04:05Z`)."""

QUANTITY = (r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
            r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")

Quantity = Annotated[
    Union[Annotated[int, Field(ge=0, le=2**53)], Annotated[str, Field(min_length=1, max_length=64, pattern=QUANTITY)]],
    # Structural schemas allow int-or-string only as this exact anyOf; the bounds sit beside it
    # and apply to whichever of the two the value is.
    WithJsonSchema({
        "x-kubernetes-int-or-string": True,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "minimum": 0, "maximum": 2**53, "maxLength": 64, "pattern": QUANTITY,
    }),
]
"""A resource quantity such as `500m`, `1Gi` or `2`, as in a Pod's resources."""

LabelValue = Annotated[str, Field(max_length=63, pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")]
_KEYS_BOUNDED = rule("self.all(k, k.size() <= 317)", "keys must be at most 317 characters (prefix/name)")


def string_map(*, items: int, doc: str) -> Any:
    """A bounded string → string map (labels, annotations, node selectors)."""
    return Field(default_factory=dict, max_length=items, description=doc,
                 json_schema_extra=validations(_KEYS_BOUNDED))


TIMEOUT_RANGE: Final = ("1s", "168h")
Timeout = Annotated[timedelta, DurationBounds(*TIMEOUT_RANGE)]
"""Per-attempt timeout, counted from container start: 1s to 7 days."""
